//! The connection pool (SQLite or PostgreSQL behind `sqlx::Any`) and start-up migrations.
//!
//! One code path serves both databases: every query uses `$n` placeholders, `RETURNING`
//! and `ON CONFLICT`, and only the types `sqlx::Any` carries (i64, text); timestamps are
//! unix milliseconds and flags 0/1 integers.

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::{Any, AnyPool, Transaction};
use std::time::Duration;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");

/// The migrations run at start-up: as above, but a database already migrated further by a
/// newer release is accepted. During a rolling upgrade the old replicas keep serving the
/// new schema (migrations only add within a release, see ARCHITECTURE.md), so one of them
/// restarting must not fail on the migrations it does not know.
static STARTUP_SQLITE: std::sync::LazyLock<Migrator> =
    std::sync::LazyLock::new(|| tolerant(sqlx::migrate!("migrations/sqlite")));
static STARTUP_POSTGRES: std::sync::LazyLock<Migrator> =
    std::sync::LazyLock::new(|| tolerant(sqlx::migrate!("migrations/postgres")));

fn tolerant(mut m: Migrator) -> Migrator {
    m.set_ignore_missing(true);
    m
}

/// SQLite's migrations (backups compare schema versions with them).
pub fn sqlite_migrations() -> &'static Migrator {
    &SQLITE_MIGRATIONS
}

/// Which database a pool talks to; the few places where they differ branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbKind {
    Sqlite,
    Postgres,
}

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("unsupported database URL scheme in {0:?}; expected sqlite: or postgres:")]
    Scheme(String),
    #[error("connecting to the database")]
    Connect(#[source] sqlx::Error),
    #[error("running database migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
}

/// The server's database handle; cheap to clone.
#[derive(Debug, Clone)]
pub struct Db {
    pub pool: AnyPool,
    pub kind: DbKind,
}

pub type Tx = Transaction<'static, Any>;

impl Db {
    /// Connects to `url` and runs the migrations of that database.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db, DbError> {
        sqlx::any::install_default_drivers();
        let kind = if url.starts_with("sqlite:") {
            DbKind::Sqlite
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            DbKind::Postgres
        } else {
            return Err(DbError::Scheme(redact(url)));
        };
        let mut options = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(30));
        if kind == DbKind::Sqlite {
            options = options.after_connect(|conn, _meta| Box::pin(sqlite_pragmas(conn)));
        }
        let pool = options.connect(url).await.map_err(DbError::Connect)?;
        let migrator: &Migrator = match kind {
            DbKind::Sqlite => &STARTUP_SQLITE,
            DbKind::Postgres => &STARTUP_POSTGRES,
        };
        migrator.run(&pool).await.map_err(DbError::Migrate)?;
        let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> = sqlx::query_scalar("SELECT MAX(version) FROM _sqlx_migrations")
            .fetch_one(&pool)
            .await
            .ok()
            .flatten();
        if let Some(applied) = applied.filter(|a| *a > known) {
            tracing::warn!(
                schema = applied,
                known,
                "the database was migrated by a newer release; serving it as an older replica \
                 (finish the upgrade)"
            );
        }
        Ok(Db { pool, kind })
    }

    /// Starts a write transaction. SQLite takes the write lock at once (`BEGIN IMMEDIATE`)
    /// so a read-then-write transaction cannot fail half-way on a lock upgrade.
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        match self.kind {
            DbKind::Sqlite => self.pool.begin_with("BEGIN IMMEDIATE").await,
            DbKind::Postgres => self.pool.begin().await,
        }
    }

    /// One round trip; used by `/readyz` and as the benchmarks' baseline.
    pub async fn ping(&self) -> Result<(), sqlx::Error> {
        let _: AnyRow = sqlx::query("SELECT 1").fetch_one(&self.pool).await?;
        Ok(())
    }
}

/// WAL lets readers run beside the one writer; the busy timeout makes a writer wait for
/// the lock instead of failing at once; FULL sync makes every acknowledged commit survive a
/// crash of the process or the machine.
async fn sqlite_pragmas(conn: &mut sqlx::AnyConnection) -> Result<(), sqlx::Error> {
    for pragma in [
        "PRAGMA journal_mode = WAL",
        "PRAGMA busy_timeout = 10000",
        "PRAGMA synchronous = FULL",
        "PRAGMA foreign_keys = ON",
    ] {
        sqlx::query(pragma).execute(&mut *conn).await?;
    }
    Ok(())
}

/// The URL without its password, for error messages and logs.
pub fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// Unix milliseconds of a time, the storage format of every timestamp.
pub fn to_millis(t: chrono::DateTime<chrono::Utc>) -> i64 {
    t.timestamp_millis()
}

/// The inverse of [`to_millis`]; out-of-range values clamp to the epoch.
pub fn from_millis(ms: i64) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default()
}
