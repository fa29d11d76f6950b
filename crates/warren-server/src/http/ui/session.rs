//! Who is looking at a page: the signed session cookie, checked by the domain
//! (`crate::app::oauth::session_user`), and the CSRF token of the forms on the page, an
//! HMAC of that cookie under the server's key: a page of another site cannot read it, so it
//! cannot forge a form (SameSite=Lax already keeps the cookie off cross-site POSTs; the
//! token does not depend on that).

use super::errors::UiError;
use crate::app::oauth::{self, signed};
use crate::app::Principal;
use crate::http::oauth::cookies;
use crate::http::HttpState;
use axum::extract::{FromRequest, FromRequestParts, Multipart, Request};
use http::request::Parts;
use serde::de::DeserializeOwned;

/// Name of the hidden field carrying the CSRF token in every form.
pub const CSRF_FIELD: &str = "csrf_token";
/// Largest text field of a form read from a multipart body (an uploaded devfile), bytes.
const MAX_FIELD_BYTES: usize = 1 << 20;

/// The signed-in user of a page, and the CSRF token its forms carry.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub who: Principal,
    pub csrf: String,
    /// Whether the request came over TLS (cookies set in answers are `Secure`).
    pub https: bool,
}

impl Viewer {
    pub fn username(&self) -> &str {
        &self.who.user.username
    }
    pub fn is_admin(&self) -> bool {
        self.who.user.is_admin
    }
}

/// The path and query a request asked for, to come back to after signing in.
fn wanted(parts: &Parts) -> String {
    parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "/".into())
}

impl FromRequestParts<HttpState> for Viewer {
    type Rejection = UiError;

    async fn from_request_parts(
        parts: &mut Parts,
        http: &HttpState,
    ) -> Result<Self, Self::Rejection> {
        let state = &http.app;
        let key = oauth::signing_key(state).await?;
        let raw = cookies::get(&parts.headers, cookies::SESSION_COOKIE);
        let user = oauth::session_user(state, &key, raw).await?;
        let (Some(user), Some(raw)) = (user, raw) else {
            // A POST's page is not worth coming back to; its form's page is.
            let next = if parts.method == http::Method::GET {
                wanted(parts)
            } else {
                "/".into()
            };
            return Err(UiError::SignIn { next });
        };
        Ok(Viewer {
            who: Principal { user, token: None },
            csrf: signed::ui_csrf(&key, raw),
            https: cookies::is_https(parts, &http.trusted_proxies),
        })
    }
}

/// A submitted form (urlencoded or multipart) of a signed-in user whose CSRF token holds,
/// its fields read into `T` (the token itself is not one of them).
#[derive(Debug)]
pub struct Posted<T> {
    pub viewer: Viewer,
    pub form: T,
}

impl<T: DeserializeOwned> FromRequest<HttpState> for Posted<T> {
    type Rejection = UiError;

    async fn from_request(req: Request, state: &HttpState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = req.into_parts();
        let viewer = Viewer::from_request_parts(&mut parts, state).await?;
        let multipart = parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("multipart/form-data"));
        let req = Request::from_parts(parts, body);
        let pairs: Vec<(String, String)> = if multipart {
            read_multipart(req, state).await?
        } else {
            let bytes = axum::body::Bytes::from_request(req, state)
                .await
                .map_err(|e| UiError::BadRequest(format!("reading the form: {}", e.body_text())))?;
            serde_urlencoded::from_bytes(&bytes)
                .map_err(|e| UiError::BadRequest(format!("the form is malformed: {e}")))?
        };
        let token = pairs
            .iter()
            .find(|(k, _)| k == CSRF_FIELD)
            .map(|(_, v)| v.as_str())
            .unwrap_or("");
        if token.is_empty() || !crate::crypto::ct_eq(token, &viewer.csrf) {
            tracing::info!(user = %viewer.username(), "web UI form refused: bad CSRF token");
            return Err(UiError::Csrf);
        }
        let rest: Vec<&(String, String)> = pairs.iter().filter(|(k, _)| k != CSRF_FIELD).collect();
        let encoded = serde_urlencoded::to_string(rest)
            .map_err(|e| UiError::BadRequest(format!("the form is malformed: {e}")))?;
        let form = serde_urlencoded::from_str(&encoded)
            .map_err(|e| UiError::BadRequest(format!("the form is malformed: {e}")))?;
        Ok(Posted { viewer, form })
    }
}

/// The text fields of a multipart form; a file field is read as its text (an uploaded
/// devfile), refused when larger than [`MAX_FIELD_BYTES`] or not UTF-8.
async fn read_multipart(req: Request, state: &HttpState) -> Result<Vec<(String, String)>, UiError> {
    let mut m = Multipart::from_request(req, state)
        .await
        .map_err(|e| UiError::BadRequest(format!("the form is malformed: {}", e.body_text())))?;
    let mut out = Vec::new();
    loop {
        let field = match m.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => return Ok(out),
            Err(e) => {
                return Err(UiError::BadRequest(format!(
                    "the form is malformed: {}",
                    e.body_text()
                )))
            }
        };
        let name = field.name().unwrap_or_default().to_owned();
        let bytes = field.bytes().await.map_err(|e| {
            UiError::BadRequest(format!("reading form field {name:?}: {}", e.body_text()))
        })?;
        if bytes.len() > MAX_FIELD_BYTES {
            return Err(UiError::BadRequest(format!(
                "form field {name:?} is larger than {} KiB",
                MAX_FIELD_BYTES >> 10
            )));
        }
        let text = String::from_utf8(bytes.to_vec())
            .map_err(|_| UiError::BadRequest(format!("form field {name:?} is not UTF-8 text")))?;
        out.push((name, text));
    }
}
