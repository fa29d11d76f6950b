//! The one HTTP error type of the JSON adapters, and the one mapping from the domain's
//! [`AppError`] to a status and `{"error": {"code", "message"}}` body.
//!
//! Every HTTP error the server sends, its own or axum's (malformed JSON, missing fields,
//! wrong content type, oversized bodies, unknown routes), is built here.

use crate::app::{AppError, ErrorKind};
use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use warren_types::api::{ApiError, ApiErrorBody};

/// An HTTP error response; the only error type JSON route handlers return.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct HttpError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Sent as `Retry-After` (seconds) when set.
    pub retry_after: Option<u64>,
}

/// The status each kind of domain error is answered with.
pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Upstream => StatusCode::BAD_GATEWAY,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<AppError> for HttpError {
    fn from(e: AppError) -> Self {
        HttpError {
            status: status_of(e.kind),
            code: e.code,
            message: e.message,
            retry_after: e.retry_after,
        }
    }
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
            other if other.status() == StatusCode::PAYLOAD_TOO_LARGE => too_large(),
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

/// A JSON request body of the public API whose rejections become [`HttpError`]s. The body
/// is read strictly ([`super::strict`]): every struct must be an object, as the OpenAPI
/// document says, where serde would also read one from an array.
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

/// A JSON request body of the internal endpoints (relays, proxies): read directly, without
/// the strict detour through a value, because reconcile bodies reach many MiB.
#[derive(Debug, Clone, Copy, Default, axum::extract::FromRequest)]
#[from_request(via(axum::Json), rejection(HttpError))]
pub struct InternalJson<T>(pub T);

/// `application/json` or `application/…+json`, as axum's own check.
fn is_json(headers: &http::HeaderMap) -> bool {
    let Some(ct) = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

impl<T, S> axum::extract::FromRequest<S> for Json<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, HttpError> {
        if !is_json(req.headers()) {
            return Err(not_json());
        }
        let bytes = body_bytes(req, state).await?;
        decode(&bytes).map(Json)
    }
}

/// A JSON body that may be left out, or be `null`: `T::default()` then (e.g. a `POST` whose
/// options are all optional).
#[derive(Debug, Clone, Copy, Default)]
pub struct OptionalJson<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for OptionalJson<T>
where
    T: serde::de::DeserializeOwned + Default,
    S: Send + Sync,
{
    type Rejection = HttpError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, HttpError> {
        let json = is_json(req.headers());
        let bytes = body_bytes(req, state).await?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(OptionalJson(T::default()));
        }
        if !json {
            return Err(not_json());
        }
        match decode::<Option<T>>(&bytes)? {
            Some(v) => Ok(OptionalJson(v)),
            None => Ok(OptionalJson(T::default())),
        }
    }
}

fn not_json() -> HttpError {
    HttpError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported_media_type",
        "expected a request body with `Content-Type: application/json`",
    )
}

/// The request's body, within the API's limit.
async fn body_bytes<S: Send + Sync>(
    req: axum::extract::Request,
    state: &S,
) -> Result<axum::body::Bytes, HttpError> {
    use axum::extract::FromRequest;
    axum::body::Bytes::from_request(req, state)
        .await
        .map_err(|r| {
            if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
                too_large()
            } else {
                HttpError::new(r.status(), "invalid_body", r.body_text())
            }
        })
}

/// A JSON body as `T`, strictly (unknown fields refused, as `strict` says).
fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, HttpError> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            format!("request body: {e}"),
        )
    })?;
    super::strict::from_value(value).map_err(|e| {
        HttpError::new(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            format!("request body: {e}"),
        )
    })
}

fn too_large() -> HttpError {
    HttpError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        format!(
            "the request body is too large: the API accepts at most {} MiB",
            super::api::BODY_LIMIT >> 20
        ),
    )
}

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
