//! Backups of an installation on SQLite (the default): `warren admin backup` copies the
//! database while servers keep running — `VACUUM INTO`, one read transaction, so the copy is
//! consistent whatever is being written — together with the key that encrypts its secrets
//! (without it the copy's sealed secrets are unreadable), and writes a manifest with their
//! checksums last, so a directory without one is not a backup. `restore` checks all of it
//! and puts it back, refusing to replace a database or a different key unless forced; the
//! next start migrates a copy from an older Warren forward.
//!
//! PostgreSQL installations are backed up with PostgreSQL's own tools (`pg_dump`, or base
//! backups with WAL archiving) plus the key file; see the README.

use crate::config::ServerConfig;
use crate::crypto;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};
use sqlx::{ConnectOptions, Connection, Row};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The manifest's file name in a backup directory.
pub const MANIFEST: &str = "warren-backup.json";
const DB_FILE: &str = "warren.db";
const KEY_FILE: &str = "secret.key";
const FORMAT: u32 = 1;

/// What a backup holds, written last.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: u32,
    /// When the copy was taken (RFC 3339).
    pub created_at: String,
    /// The Warren release that took it.
    pub warren_version: String,
    /// The last migration applied to the copied database.
    pub schema_version: i64,
    pub database_sha256: String,
    pub key_sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error(
        "this installation uses PostgreSQL: back it up with pg_dump (and keep the key file \
         {0}); `warren admin backup` is for SQLite"
    )]
    Postgres(PathBuf),
    #[error("the database URL {0:?} names no SQLite file")]
    NoFile(String),
    #[error("there is no database at {0}")]
    NoDatabase(PathBuf),
    #[error("the backup directory {0} is not empty")]
    NotEmpty(PathBuf),
    #[error("opening the database {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: sqlx::Error,
    },
    #[error("copying the database")]
    Copy(#[source] sqlx::Error),
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the secret key")]
    Key(#[source] crypto::CryptoError),
    #[error("{0} is not a Warren backup (it has no {MANIFEST})")]
    NotBackup(PathBuf),
    #[error("the backup in {dir} is damaged: {problem}")]
    Damaged { dir: PathBuf, problem: String },
    #[error(
        "the backup's schema version {backup} is newer than this Warren knows ({known}); \
         restore it with the release that made it ({release}) or a newer one"
    )]
    TooNew {
        backup: i64,
        known: i64,
        release: String,
    },
    #[error(
        "{0} exists: restoring would replace it; stop every server, move it away, or pass \
         --force"
    )]
    Exists(PathBuf),
    #[error(
        "the secret key at {0} is not the backup's: the backup's secrets could not be read \
         with it, and replacing it would make whatever it encrypted unreadable; pass --force \
         to replace it"
    )]
    KeyDiffers(PathBuf),
    #[error("opening the restored database")]
    Reopen(#[source] crate::db::DbError),
}

/// The SQLite file `config` uses, or why it has none.
fn sqlite_file(config: &ServerConfig) -> Result<(SqliteConnectOptions, PathBuf), BackupError> {
    let url = config.effective_database_url();
    if !url.starts_with("sqlite:") {
        return Err(BackupError::Postgres(config.secret_key_path()));
    }
    let options = SqliteConnectOptions::from_str(&url)
        .map_err(|_| BackupError::NoFile(crate::db::redact(&url)))?;
    let path = options.get_filename().to_owned();
    if path.as_os_str().is_empty() || path == Path::new(":memory:") {
        return Err(BackupError::NoFile(crate::db::redact(&url)));
    }
    Ok((options, path))
}

fn sha256_file(path: &Path) -> Result<String, BackupError> {
    let bytes = std::fs::read(path).map_err(|source| BackupError::Read {
        path: path.to_owned(),
        source,
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// Writes `bytes` to `path` through a temporary file and a rename, mode 0600.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| BackupError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = path.with_extension("restoring");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(err)?;
    std::fs::rename(&tmp, path).map_err(err)
}

/// The last migration applied to the database behind `conn`.
async fn schema_version(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    let row =
        sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut *conn)
            .await?;
    row.try_get("v")
}

/// The newest migration this Warren has.
pub fn known_schema_version() -> i64 {
    crate::db::sqlite_migrations()
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or(0)
}

/// Copies the database and its key into `out` (created if missing; must be empty).
pub async fn backup(config: &ServerConfig, out: &Path) -> Result<Manifest, BackupError> {
    let (options, db_path) = sqlite_file(config)?;
    if !db_path.is_file() {
        return Err(BackupError::NoDatabase(db_path));
    }
    let key = crypto::read_key(&config.secret_key_path()).map_err(BackupError::Key)?;
    std::fs::create_dir_all(out).map_err(|source| BackupError::Write {
        path: out.to_owned(),
        source,
    })?;
    let not_empty = std::fs::read_dir(out)
        .map_err(|source| BackupError::Read {
            path: out.to_owned(),
            source,
        })?
        .next()
        .is_some();
    if not_empty {
        return Err(BackupError::NotEmpty(out.to_owned()));
    }
    // Read-only: a backup never migrates or otherwise writes the live database.
    let mut conn = options
        .read_only(true)
        .create_if_missing(false)
        .connect()
        .await
        .map_err(|source| BackupError::Open {
            path: db_path.clone(),
            source,
        })?;
    let copy = out.join(DB_FILE);
    sqlx::query("VACUUM INTO $1")
        .bind(copy.display().to_string())
        .execute(&mut conn)
        .await
        .map_err(BackupError::Copy)?;
    let _ = conn.close().await;
    // Password hashes and sealed secrets: for the owner's eyes only, as the key is.
    use std::os::unix::fs::PermissionsExt;
    for (path, mode) in [(&copy, 0o600), (&out.to_owned(), 0o700)] {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(
            |source| BackupError::Write {
                path: path.clone(),
                source,
            },
        )?;
    }
    let mut copied = SqliteConnectOptions::new()
        .filename(&copy)
        .read_only(true)
        .connect()
        .await
        .map_err(|source| BackupError::Open {
            path: copy.clone(),
            source,
        })?;
    let schema = schema_version(&mut copied)
        .await
        .map_err(BackupError::Copy)?;
    let _ = copied.close().await;
    let key_path = out.join(KEY_FILE);
    write_atomically(&key_path, hex::encode(key).as_bytes())?;
    let manifest = Manifest {
        format: FORMAT,
        created_at: chrono::Utc::now().to_rfc3339(),
        warren_version: env!("CARGO_PKG_VERSION").to_owned(),
        schema_version: schema,
        database_sha256: sha256_file(&copy)?,
        key_sha256: sha256_file(&key_path)?,
    };
    let text = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    write_atomically(&out.join(MANIFEST), &text)?;
    Ok(manifest)
}

/// Checks the backup in `from` and puts it in place of `config`'s database and key. Every
/// server must be stopped; `force` replaces an existing database and a different key.
pub async fn restore(
    config: &ServerConfig,
    from: &Path,
    force: bool,
) -> Result<Manifest, BackupError> {
    let (_, db_path) = sqlite_file(config)?;
    let manifest_path = from.join(MANIFEST);
    let text = match std::fs::read(&manifest_path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BackupError::NotBackup(from.to_owned()))
        }
        Err(source) => {
            return Err(BackupError::Read {
                path: manifest_path,
                source,
            })
        }
    };
    let damaged = |problem: String| BackupError::Damaged {
        dir: from.to_owned(),
        problem,
    };
    let manifest: Manifest = serde_json::from_slice(&text)
        .map_err(|e| damaged(format!("its manifest does not parse: {e}")))?;
    if manifest.format != FORMAT {
        return Err(damaged(format!("unknown format {}", manifest.format)));
    }
    let (db_copy, key_copy) = (from.join(DB_FILE), from.join(KEY_FILE));
    for (file, want) in [
        (&db_copy, &manifest.database_sha256),
        (&key_copy, &manifest.key_sha256),
    ] {
        let got = sha256_file(file)?;
        if !crypto::ct_eq(&got, want) {
            return Err(damaged(format!(
                "{} does not match its checksum",
                file.display()
            )));
        }
    }
    let known = known_schema_version();
    if manifest.schema_version > known {
        return Err(BackupError::TooNew {
            backup: manifest.schema_version,
            known,
            release: manifest.warren_version.clone(),
        });
    }
    let key = crypto::read_key(&key_copy).map_err(BackupError::Key)?;
    let key_path = config.secret_key_path();
    if db_path.exists() && !force {
        return Err(BackupError::Exists(db_path));
    }
    if key_path.exists() {
        let same = crypto::read_key(&key_path).is_ok_and(|k| k == key);
        if !same && !force {
            return Err(BackupError::KeyDiffers(key_path));
        }
    }
    write_atomically(&key_path, hex::encode(key).as_bytes())?;
    // A stale write-ahead log beside the restored file would be replayed into it.
    for suffix in ["-wal", "-shm"] {
        let mut p = db_path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    let bytes = std::fs::read(&db_copy).map_err(|source| BackupError::Read {
        path: db_copy.clone(),
        source,
    })?;
    write_atomically(&db_path, &bytes)?;
    // Opening runs the migrations a copy from an older Warren lacks.
    let db = crate::db::Db::connect(&config.effective_database_url(), 1)
        .await
        .map_err(BackupError::Reopen)?;
    db.pool.close().await;
    Ok(manifest)
}
