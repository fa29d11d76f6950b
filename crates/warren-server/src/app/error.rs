//! The domain error: what kind of refusal or failure, a stable code, the field it concerns,
//! and a message for the user. Adapters map the kind to their own terms (an HTTP status and
//! JSON body, an HTML page) in one place each.

use crate::store::StoreError;

/// What kind of answer an error is; adapters choose a status or page from it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed or a field is out of bounds.
    Invalid,
    /// The request is well-formed but its content cannot be used (a devfile that does not
    /// parse or render).
    Unprocessable,
    /// Nobody, or nobody valid, is signed in.
    Unauthenticated,
    /// The caller is known and may not do this.
    Forbidden,
    /// No such thing, or one the caller may not see.
    NotFound,
    /// The current state does not allow it, or a concurrent change won.
    Conflict,
    /// Slowed down: try again after `retry_after` seconds.
    TooManyRequests,
    /// A part Warren needs (an agent, a relay) cannot be reached now.
    Unavailable,
    /// A part Warren called answered with a failure.
    Upstream,
    /// A fault of Warren's own; details are in the log, not the message.
    Internal,
}

/// A refusal or failure of a domain operation.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code}: {message}")]
pub struct AppError {
    pub kind: ErrorKind,
    /// Stable, machine-readable (`invalid_field`, `already_exists`, `quota_exceeded`, …).
    pub code: &'static str,
    /// The request field concerned, when there is one (also named in `message`).
    pub field: Option<String>,
    pub message: String,
    /// Seconds after which a retry may succeed.
    pub retry_after: Option<u64>,
}

impl AppError {
    pub fn new(kind: ErrorKind, code: &'static str, message: impl Into<String>) -> Self {
        AppError {
            kind,
            code,
            field: None,
            message: message.into(),
            retry_after: None,
        }
    }
    /// Names the request field the error concerns (its message already says so).
    pub fn with_field(mut self, field: &str) -> Self {
        self.field = Some(field.to_owned());
        self
    }
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    /// A field of the request is wrong; the message names it.
    pub fn invalid_field(field: &str, problem: impl std::fmt::Display) -> Self {
        AppError {
            field: Some(field.to_owned()),
            ..Self::new(
                ErrorKind::Invalid,
                "invalid_field",
                format!("{field}: {problem}"),
            )
        }
    }
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorKind::NotFound,
            "not_found",
            format!("{what} not found"),
        )
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, code, message)
    }
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthenticated, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, "forbidden", message)
    }
    /// Logs `err`'s whole chain under `context` and answers with no detail.
    pub fn internal(context: &str, err: &dyn std::error::Error) -> Self {
        tracing::error!(error = %warren_types::error_chain(err), "{context}");
        Self::new(ErrorKind::Internal, "internal", format!("{context} failed"))
    }
}

impl From<StoreError> for AppError {
    fn from(e: StoreError) -> Self {
        match &e {
            StoreError::Crypto(c) => AppError::internal("decrypting stored data", c),
            StoreError::Conflict(_) => AppError::conflict(
                "conflict",
                "the change collides with one made at the same time; try again",
            ),
            // Everything else is a database fault; its details go to the log only.
            _ => AppError::internal("database query", &e),
        }
    }
}

/// Turns a unique-key conflict into the domain's `already_exists` answer; other store
/// errors pass through.
pub(crate) fn already_exists(
    message: impl FnOnce() -> String,
) -> impl FnOnce(StoreError) -> AppError {
    move |e| match e {
        StoreError::Conflict(_) => AppError::conflict("already_exists", message()),
        e => e.into(),
    }
}
