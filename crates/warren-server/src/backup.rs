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
    #[error(
        "a server is using the database {0}: stop every server before restoring (a backup can \
         be taken while they run)"
    )]
    InUse(PathBuf),
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

/// Where a restored file is staged before it replaces `path`.
fn staged_path(path: &Path) -> PathBuf {
    let mut p = path.to_owned().into_os_string();
    p.push(".restoring");
    PathBuf::from(p)
}

/// The lock file beside a SQLite database: servers hold it shared while they run.
pub fn lock_path(db: &Path) -> PathBuf {
    let mut p = db.to_owned().into_os_string();
    p.push(".lock");
    PathBuf::from(p)
}

/// Takes the database's lock shared (a server) or exclusively (a restore); the file holds it
/// until dropped.
fn lock(db: &Path, exclusive: bool) -> Result<std::fs::File, BackupError> {
    let path = lock_path(db);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|source| BackupError::Write {
            path: dir.to_owned(),
            source,
        })?;
    }
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|source| BackupError::Write {
            path: path.clone(),
            source,
        })?;
    let taken = if exclusive {
        f.try_lock()
    } else {
        f.try_lock_shared()
    };
    match taken {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(BackupError::InUse(db.to_owned())),
        Err(std::fs::TryLockError::Error(source)) => Err(BackupError::Write { path, source }),
    }
}

fn lock_exclusive(db: &Path) -> Result<std::fs::File, BackupError> {
    lock(db, true)
}

/// A server's hold on its SQLite database (`None` for PostgreSQL): while it is held, no
/// restore replaces the file under the server.
pub fn hold_database(config: &ServerConfig) -> Result<Option<std::fs::File>, BackupError> {
    match sqlite_file(config) {
        Ok((_, db)) => lock(&db, false).map(Some),
        Err(BackupError::Postgres(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `bytes` to `path` (mode 0600) and syncs it.
fn write_file(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let err = |source| BackupError::Write {
        path: path.to_owned(),
        source,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(err)?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(err)
}

/// Writes `bytes` to `path` through a staged file and a rename, mode 0600.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BackupError> {
    let err = |source| BackupError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let tmp = staged_path(path);
    write_file(&tmp, bytes)?;
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
    // Owner only from the start: the copy holds password hashes and sealed secrets.
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let werr = |path: &Path| {
        let path = path.to_owned();
        move |source| BackupError::Write { path, source }
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(out)
        .map_err(werr(out))?;
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
    std::fs::set_permissions(out, std::fs::Permissions::from_mode(0o700)).map_err(werr(out))?;
    let copy = out.join(DB_FILE);
    // VACUUM INTO fills an empty file, keeping its mode.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&copy)
        .map_err(werr(&copy))?;
    sqlx::query("VACUUM INTO $1")
        .bind(copy.display().to_string())
        .execute(&mut conn)
        .await
        .map_err(BackupError::Copy)?;
    let _ = conn.close().await;
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
    // No server may have the database open meanwhile (they hold this lock shared).
    let _lock = lock_exclusive(&db_path)?;
    if db_path.exists() && !force {
        return Err(BackupError::Exists(db_path));
    }
    let key_same = key_path.exists() && crypto::read_key(&key_path).is_ok_and(|k| k == key);
    if key_path.exists() && !key_same && !force {
        return Err(BackupError::KeyDiffers(key_path));
    }
    // The new file is complete beside the old one before anything is replaced.
    let bytes = std::fs::read(&db_copy).map_err(|source| BackupError::Read {
        path: db_copy.clone(),
        source,
    })?;
    let staged = staged_path(&db_path);
    write_file(&staged, &bytes)?;
    // A stale write-ahead log beside the restored file would be replayed into it.
    for suffix in ["-wal", "-shm"] {
        let mut p = db_path.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(PathBuf::from(p));
    }
    std::fs::rename(&staged, &db_path).map_err(|source| BackupError::Write {
        path: db_path.clone(),
        source,
    })?;
    // Last, and only when it differs (a key mounted read-only and equal is left alone).
    if !key_same {
        write_atomically(&key_path, hex::encode(key).as_bytes())?;
    }
    // Opening runs the migrations a copy from an older Warren lacks.
    let db = crate::db::Db::connect(&config.effective_database_url(), 1)
        .await
        .map_err(BackupError::Reopen)?;
    db.pool.close().await;
    Ok(manifest)
}
