//! Errors: the start-up error of the server, and the one HTTP error type every route returns.
//!
//! Every HTTP error the server sends, its own or axum's (malformed JSON, missing fields,
//! wrong content type, oversized bodies, unknown routes), is built here as
//! `{"error": {"code", "message"}}`.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use warren_types::api::{ApiError, ApiErrorBody};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid server configuration: {0}")]
    Config(String),
    #[error("opening the database")]
    Db(#[from] crate::db::DbError),
    #[error("database query during start-up")]
    Sql(#[from] sqlx::Error),
    #[error("loading keys")]
    Key(#[from] crate::crypto::CryptoError),
    #[error("reading the default devfile {path}")]
    DefaultDevfile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("serving HTTP")]
    Serve(#[source] std::io::Error),
    #[error("store error during start-up")]
    Store(#[from] HttpError),
}

/// An HTTP error response; the only error type route handlers return.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct HttpError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Sent as `Retry-After` (seconds) when set.
    pub retry_after: Option<u64>,
}

impl HttpError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        HttpError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }
    /// A field of the request is wrong; the message names it.
    pub fn invalid_field(field: &str, problem: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("{field}: {problem}"),
        )
    }
    pub fn not_found(what: impl std::fmt::Display) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }
    pub fn internal(context: &str, err: &dyn std::error::Error) -> Self {
        let mut chain = err.to_string();
        let mut source = err.source();
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        tracing::error!(error = %chain, "{context}");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("{context} failed"),
        )
    }
}

impl From<sqlx::Error> for HttpError {
    fn from(e: sqlx::Error) -> Self {
        HttpError::internal("database query", &e)
    }
}

impl From<crate::crypto::CryptoError> for HttpError {
    fn from(e: crate::crypto::CryptoError) -> Self {
        HttpError::internal("decrypting stored data", &e)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        let body = ApiError {
            error: ApiErrorBody {
                code: self.code.to_owned(),
                message: self.message,
            },
        };
        let mut r = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
        }
        r
    }
}

impl From<JsonRejection> for HttpError {
    fn from(r: JsonRejection) -> Self {
        match r {
            JsonRejection::JsonDataError(e) => HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_body",
                data_error_text(&e.body_text()),
            ),
            JsonRejection::JsonSyntaxError(e) => HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                data_error_text(&e.body_text()),
            ),
            JsonRejection::MissingJsonContentType(_) => HttpError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                "expected a request body with `Content-Type: application/json`",
            ),
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => HttpError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "body_too_large",
                format!(
                    "the request body is too large: the API accepts at most {} MiB",
                    crate::api::BODY_LIMIT >> 20
                ),
            ),
            other => HttpError::new(other.status(), "invalid_body", other.body_text()),
        }
    }
}

/// axum's texts start with "Failed to deserialize the JSON body into the target type: ";
/// keep the part that names the field.
fn data_error_text(text: &str) -> String {
    let t = text
        .strip_prefix("Failed to deserialize the JSON body into the target type: ")
        .or_else(|| text.strip_prefix("Failed to parse the request body as JSON: "))
        .unwrap_or(text);
    format!("request body: {t}")
}

impl From<PathRejection> for HttpError {
    fn from(r: PathRejection) -> Self {
        HttpError::new(StatusCode::BAD_REQUEST, "invalid_path", r.body_text())
    }
}

impl From<QueryRejection> for HttpError {
    fn from(r: QueryRejection) -> Self {
        let t = r.body_text();
        let t = t
            .strip_prefix("Failed to deserialize query string: ")
            .unwrap_or(&t)
            .to_owned();
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            format!("query string: {t}"),
        )
    }
}

/// `axum::Json` whose rejections become [`HttpError`]s.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(HttpError))]
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// `axum::extract::Path` whose rejections become [`HttpError`]s.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(HttpError))]
pub struct Path<T>(pub T);

/// `axum::extract::Query` whose rejections become [`HttpError`]s.
#[derive(Debug, axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(HttpError))]
pub struct Query<T>(pub T);

pub type ApiResult<T> = Result<T, HttpError>;
