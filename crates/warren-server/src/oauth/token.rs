//! `POST /oauth/token` (authorization-code grant with PKCE) and `GET /oauth/userinfo`.
//! Errors are RFC 6749 §5.2 JSON (`{"error", "error_description"}`), not the REST API's
//! error shape, because OAuth clients expect that.

use super::{s256, valid_pkce_string, ACCESS_TOKEN_TTL_MS};
use crate::error::HttpError;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// An RFC 6749 error answer.
#[derive(Debug)]
pub struct OAuthError {
    status: StatusCode,
    error: &'static str,
    description: String,
    /// `WWW-Authenticate` value, for 401s.
    challenge: Option<&'static str>,
}

impl OAuthError {
    fn new(status: StatusCode, error: &'static str, description: impl Into<String>) -> Self {
        OAuthError {
            status,
            error,
            description: description.into(),
            challenge: None,
        }
    }
    fn request(d: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", d)
    }
    fn grant(d: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_grant", d)
    }
    fn client(basic: bool) -> Self {
        OAuthError {
            status: StatusCode::UNAUTHORIZED,
            error: "invalid_client",
            description: "client authentication failed".into(),
            // RFC 6749 §5.2: a Basic challenge when the client tried Basic.
            challenge: basic.then_some("Basic realm=\"warren\""),
        }
    }
}

impl From<sqlx::Error> for OAuthError {
    fn from(e: sqlx::Error) -> Self {
        let h = HttpError::from(e);
        Self::new(h.status, "server_error", h.message)
    }
}

impl IntoResponse for OAuthError {
    fn into_response(self) -> Response {
        let mut r = (
            self.status,
            Json(json!({"error": self.error, "error_description": self.description})),
        )
            .into_response();
        let h = r.headers_mut();
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
        if let Some(c) = self.challenge {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static(c));
        }
        r
    }
}

#[derive(Debug, Deserialize)]
pub struct TokenForm {
    pub grant_type: Option<String>,
    pub code: Option<String>,
    pub redirect_uri: Option<String>,
    pub code_verifier: Option<String>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

/// The successful answer of the token endpoint.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TokenResponse {
    pub access_token: String,
    pub token_type: String,
    pub expires_in: i64,
    pub scope: String,
    /// The signed-in user's id, so a client need not call userinfo just for it.
    pub user_id: warren_types::UserId,
}

/// `client_id:client_secret` of an `Authorization: Basic` header, each form-urldecoded
/// (RFC 6749 §2.3.1).
fn basic_credentials(headers: &HeaderMap) -> Result<Option<(String, String)>, OAuthError> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let v = v.to_str().map_err(|_| OAuthError::client(true))?;
    let Some(b64) = v
        .strip_prefix("Basic ")
        .or_else(|| v.strip_prefix("basic "))
    else {
        return Err(OAuthError::client(true));
    };
    let raw = STANDARD
        .decode(b64.trim())
        .map_err(|_| OAuthError::client(true))?;
    let raw = String::from_utf8(raw).map_err(|_| OAuthError::client(true))?;
    let (id, secret) = raw
        .split_once(':')
        .ok_or_else(|| OAuthError::client(true))?;
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
    form: Result<Form<TokenForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, OAuthError> {
    let Ok(Form(f)) = form else {
        return Err(OAuthError::request(
            "expected an application/x-www-form-urlencoded body",
        ));
    };
    // Client authentication: Basic or form fields, never both.
    let basic = basic_credentials(&headers)?;
    let used_basic = basic.is_some();
    let (client_id, secret) = match (basic, &f.client_secret) {
        (Some(_), Some(_)) => {
            return Err(OAuthError::request(
                "use one client authentication method, not both",
            ))
        }
        (Some((id, s)), None) => {
            if f.client_id.as_ref().is_some_and(|c| *c != id) {
                return Err(OAuthError::client(true));
            }
            (id, Some(s))
        }
        (None, s) => (
            f.client_id
                .clone()
                .ok_or_else(|| OAuthError::request("client_id is required"))?,
            s.clone(),
        ),
    };
    let client = state
        .store
        .oauth_client(&client_id)
        .await?
        .ok_or_else(|| OAuthError::client(used_basic))?;
    let authenticated = match (&secret, client.confidential()) {
        (Some(s), true) => client.check_secret(s),
        (None, false) => true,
        _ => false,
    };
    if !authenticated {
        return Err(OAuthError::client(used_basic));
    }
    if f.grant_type.as_deref() != Some("authorization_code") {
        return Err(OAuthError::new(
            StatusCode::BAD_REQUEST,
            "unsupported_grant_type",
            "grant_type must be authorization_code",
        ));
    }
    let code = f
        .code
        .as_deref()
        .ok_or_else(|| OAuthError::request("code is required"))?;
    let redirect_uri = f
        .redirect_uri
        .as_deref()
        .ok_or_else(|| OAuthError::request("redirect_uri is required"))?;
    let verifier = f
        .code_verifier
        .as_deref()
        .ok_or_else(|| OAuthError::request("code_verifier is required (PKCE)"))?;
    let now = state.clock.now_ms();
    let c = state
        .store
        .consume_oauth_code(code, now)
        .await?
        .ok_or_else(|| OAuthError::grant("the code is not valid"))?;
    if c.used_at.is_some() {
        return Err(OAuthError::grant(
            "the code was already used; tokens issued from it are revoked",
        ));
    }
    if c.client_id != client.client_id {
        return Err(OAuthError::grant("the code was issued to another client"));
    }
    if c.expires_at <= now {
        return Err(OAuthError::grant("the code has expired"));
    }
    if c.redirect_uri != redirect_uri {
        return Err(OAuthError::grant(
            "redirect_uri differs from the one of the authorization request",
        ));
    }
    if !valid_pkce_string(verifier) || !crate::crypto::ct_eq(&s256(verifier), &c.code_challenge) {
        return Err(OAuthError::grant(
            "code_verifier does not match the code_challenge",
        ));
    }
    let access_token = state
        .store
        .create_oauth_token(&c, now, ACCESS_TOKEN_TTL_MS)
        .await?;
    Ok(no_store(Json(TokenResponse {
        access_token,
        token_type: "Bearer".into(),
        expires_in: ACCESS_TOKEN_TTL_MS / 1000,
        scope: c.scope,
        user_id: c.user_id,
    })))
}

/// The answer of `GET /oauth/userinfo`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct UserInfo {
    /// The user id as a string (OpenID Connect's `sub`).
    pub sub: String,
    pub user_id: warren_types::UserId,
    pub username: String,
    pub client_id: String,
    pub scope: String,
    /// Unix seconds when the access token expires.
    pub exp: i64,
}

/// `GET /oauth/userinfo` with `Authorization: Bearer <access token>`.
pub async fn userinfo(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, OAuthError> {
    let invalid = || OAuthError {
        status: StatusCode::UNAUTHORIZED,
        error: "invalid_token",
        description: "the access token is missing, expired or revoked".into(),
        challenge: Some("Bearer error=\"invalid_token\""),
    };
    let token = crate::internal::jwt::bearer(&headers).ok_or_else(invalid)?;
    let t = state
        .store
        .authenticate_oauth_token(token, state.clock.now_ms())
        .await?
        .ok_or_else(invalid)?;
    let user = state
        .store
        .user_by_id(t.user_id)
        .await?
        .ok_or_else(invalid)?;
    Ok(no_store(Json(UserInfo {
        sub: user.id.get().to_string(),
        user_id: user.id,
        username: user.username,
        client_id: t.client_id,
        scope: t.scope,
        exp: t.expires_at / 1000,
    })))
}
