//! `POST /oauth/token` (authorization-code grant with PKCE) and `GET /oauth/userinfo`.
//! Errors are RFC 6749 §5.2 JSON (`{"error", "error_description"}`), not the REST API's
//! error shape, because OAuth clients expect that.

use crate::app::oauth::{self, Challenge, TokenError, TokenRequest};
use crate::app::AppState;
use crate::http::error::status_of;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::{header, HeaderMap, HeaderValue};
use serde_json::json;

/// An RFC 6749 error answer.
#[derive(Debug)]
pub struct OAuthError(TokenError);

impl From<TokenError> for OAuthError {
    fn from(e: TokenError) -> Self {
        OAuthError(e)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let e = self.0;
        let mut r = (
            status_of(e.kind),
            Json(json!({"error": e.error, "error_description": e.description})),
        )
            .into_response();
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        let challenge = match e.challenge {
            Some(Challenge::Basic) => Some("Basic realm=\"warren\""),
            Some(Challenge::InvalidBearer) => Some("Bearer error=\"invalid_token\""),
            None => None,
        };
        if let Some(c) = challenge {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        r
    }
}

/// `client_id:client_secret` of an `Authorization: Basic` header, each form-urldecoded
/// (RFC 6749 §2.3.1).
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, TokenError> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| TokenError::client(true))?;
    let Some(b64) = v
        .strip_prefix("Basic ")
        .or_else(|| v.strip_prefix("basic "))
    else {
        return Err(TokenError::client(true));
    };
    let raw = STANDARD
        .decode(b64.trim())
        .map_err(|_| TokenError::client(true))?;
    let raw = String::from_utf8(raw).map_err(|_| TokenError::client(true))?;
    let (id, secret) = raw
        .split_once(':')
        .ok_or_else(|| TokenError::client(true))?;
    let dec = |s: &str| -> String {
        url::form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Ok(Some((dec(id), dec(secret))))
}

fn no_store<T: IntoResponse>(body: T) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    r
}

/// `POST /oauth/token`
pub async fn token(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<TokenRequest>, axum::extract::rejection::FormRejection>,
) -> Result<Response, OAuthError> {
    let Ok(Form(f)) = form else {
        return Err(
            TokenError::request("expected an application/x-www-form-urlencoded body").into(),
        );
    };
    // Client authentication: Basic or form fields, never both.
    let basic = basic_credentials(&headers)?;
    let answer = oauth::exchange_code(&state, basic, &f).await?;
    Ok(no_store(Json(answer)))
}

/// `GET /oauth/userinfo` with `Authorization: Bearer <access token>`.
pub async fn userinfo(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, OAuthError> {
    let info = oauth::userinfo(&state, crate::relay::jwt::bearer(&headers)).await?;
    Ok(no_store(Json(info)))
}
