//! What can go wrong in the store, said in the store's own terms: a row that should exist
//! does not, a write hit a unique key, the database failed, or stored data does not decode.

/// A store failure. The domain layer decides what each means to the caller.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A row the operation needs is gone (e.g. deleted by a concurrent request).
    #[error("{0} not found")]
    NotFound(&'static str),
    /// A write would duplicate a unique key; names the table and key.
    #[error("{0} already exists")]
    Conflict(&'static str),
    /// The database refused or could not run a query.
    #[error("database query")]
    Database(#[source] sqlx::Error),
    /// A stored value does not decode: data written by a newer or broken server.
    #[error("stored {what} is invalid")]
    Corrupt {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A sealed value could not be opened (wrong key, damaged data).
    #[error("decrypting stored data")]
    Crypto(#[from] crate::crypto::CryptoError),
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e)
    }
}

impl StoreError {
    /// Whether retrying the whole transaction may succeed (serialisation failure, deadlock,
    /// a busy SQLite database).
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Database(sqlx::Error::Database(d)) => {
                matches!(
                    d.code().as_deref(),
                    Some("40001" | "40P01" | "5" | "6" | "517")
                ) || d.message().contains("database is locked")
            }
            _ => false,
        }
    }
}

/// Maps a unique-key violation to [`StoreError::Conflict`] naming `key`.
pub(crate) fn unique(key: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| {
        if super::is_unique_violation(&e) {
            StoreError::Conflict(key)
        } else {
            StoreError::Database(e)
        }
    }
}
