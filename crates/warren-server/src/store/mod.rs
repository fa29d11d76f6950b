//! Persistence of users, tokens, SSH keys, agents, projects and workspaces: SQL only.
//!
//! No rule lives here: inputs arrive validated from the domain layer (`crate::app`), and
//! failures are [`StoreError`]s that say what happened in the database's terms. Every
//! function takes the time (`now`, unix ms) from its caller so the clock stays a seam.

pub mod activity;
pub mod agents;
pub mod audit;
pub mod error;
pub mod gitops;
pub mod groups;
pub mod leases;
mod members;
pub mod mounts;
pub mod oauth;
pub mod pools;
pub mod ports;
pub mod prebuilds;
pub mod projects;
pub mod proxy_keys;
pub mod proxy_presence;
mod quota;
pub mod reconcile;
mod rendered;
pub mod secrets;
pub mod spaces;
pub mod ssh_keys;
mod timers;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod workspaces;

pub use error::StoreError;

use crate::crypto::SecretBox;
use crate::db::Db;
use sqlx::any::AnyRow;
use sqlx::Row;

/// The database plus the key that seals secrets at rest.
#[derive(Debug, Clone)]
pub struct Store {
    pub db: Db,
    pub sbox: SecretBox,
}

impl Store {
    pub fn new(db: Db, sbox: SecretBox) -> Store {
        Store { db, sbox }
    }

    /// The row a query finds, if any, decoded as its typed row.
    pub(crate) async fn optional<R: Typed>(
        &self,
        q: TypedQuery<'_, R>,
    ) -> Result<Option<R>, StoreError> {
        Ok(q.fetch_optional(&self.db.pool).await?)
    }

    /// Every row a query finds, in its order, decoded as typed rows.
    pub(crate) async fn all<R: Typed>(&self, q: TypedQuery<'_, R>) -> Result<Vec<R>, StoreError> {
        Ok(q.fetch_all(&self.db.pool).await?)
    }
}

/// A typed row: decoded from the database's row by its [`sqlx::FromRow`] implementation,
/// which names each column once.
pub(crate) trait Typed: for<'r> sqlx::FromRow<'r, AnyRow> + Send + Unpin {}
impl<R: for<'r> sqlx::FromRow<'r, AnyRow> + Send + Unpin> Typed for R {}

/// A query whose rows decode as `R`.
pub(crate) type TypedQuery<'q, R> =
    sqlx::query::QueryAs<'q, sqlx::Any, R, sqlx::any::AnyArguments<'q>>;

/// A value bound to a dynamically built query.
#[derive(Debug, Clone)]
pub(crate) enum Bind {
    I(i64),
    S(String),
}

pub(crate) fn bind_all<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>>,
    binds: &'q [Bind],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments<'q>> {
    for b in binds {
        q = match b {
            Bind::I(i) => q.bind(*i),
            Bind::S(s) => q.bind(s.as_str()),
        };
    }
    q
}

pub(crate) fn get_i64(row: &AnyRow, col: &str) -> Result<i64, sqlx::Error> {
    row.try_get::<i64, _>(col)
}

pub(crate) fn get_opt_i64(row: &AnyRow, col: &str) -> Result<Option<i64>, sqlx::Error> {
    row.try_get::<Option<i64>, _>(col)
}

pub(crate) fn get_str(row: &AnyRow, col: &str) -> Result<String, sqlx::Error> {
    row.try_get::<String, _>(col)
}

pub(crate) fn get_opt_str(row: &AnyRow, col: &str) -> Result<Option<String>, sqlx::Error> {
    row.try_get::<Option<String>, _>(col)
}

/// Whether an error is a unique-constraint violation (both databases).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.is_unique_violation()
                || d.code().as_deref() == Some("23505")
                || d.message().contains("UNIQUE constraint failed")
        }
        _ => false,
    }
}

/// A stored value that failed to decode: data written by a newer or broken server.
pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> sqlx::Error {
    sqlx::Error::Decode(format!("stored {what} is invalid: {e}").into())
}
