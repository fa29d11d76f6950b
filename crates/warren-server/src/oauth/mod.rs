//! The OAuth 2.0 authorization server (RFC 6749 authorization-code grant with RFC 7636
//! PKCE, S256 only) that the proxy and other clients sign users in with (access.md).
//!
//! - `GET /oauth/authorize` validates `client_id` and the exact `redirect_uri` before
//!   anything else: a bad client or redirect URI gets an error page, never a redirect.
//!   Later problems are redirected back as `error=…&state=…` (RFC 6749 §4.1.2.1).
//! - Without a server session the login page is shown; its form carries a CSRF token, an
//!   HMAC of a random pre-login cookie, and the authorization request in hidden fields.
//! - `POST /oauth/login` sets the server session cookie (`{user}.{expiry}.{hmac}`,
//!   HttpOnly, SameSite=Lax, path `/oauth`) and sends the browser back to the authorize
//!   URL, which re-validates everything. First-party clients skip consent; others get a
//!   consent page whose CSRF token is bound to the session cookie.
//! - Codes: 256-bit, stored as SHA-256, 60 s, single use; a replay revokes what the code
//!   issued. Access tokens: opaque `wrn_oat_…` (256-bit, stored as SHA-256, 10 min),
//!   checked with `GET /oauth/userinfo`.

pub mod clients;
pub mod cookies;
pub mod pages;
pub mod token;

use crate::error::HttpError;
use crate::state::AppState;
use crate::store::oauth::OAuthClientRow;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use warren_types::UserId;

/// How long an authorization code is valid.
pub const CODE_TTL_MS: i64 = 60_000;
/// How long an access token is valid.
pub const ACCESS_TOKEN_TTL_MS: i64 = 600_000;
/// The one message of a failed sign-in, whatever failed (no user enumeration).
pub const LOGIN_FAILED: &str = "Invalid username or password.";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/oauth/authorize", get(authorize))
        .route("/oauth/login", post(login))
        .route("/oauth/consent", post(consent))
        .route("/oauth/token", post(token::token))
        .route("/oauth/userinfo", get(token::userinfo))
        .route(
            "/api/v1/oauth/clients",
            get(clients::list).post(clients::create),
        )
}

/// The parameters of an authorization request, as the query or as hidden form fields.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuthorizeParams {
    pub response_type: Option<String>,
    pub client_id: Option<String>,
    pub redirect_uri: Option<String>,
    pub state: Option<String>,
    pub code_challenge: Option<String>,
    pub code_challenge_method: Option<String>,
    pub scope: Option<String>,
}

impl AuthorizeParams {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        [
            ("response_type", &self.response_type),
            ("client_id", &self.client_id),
            ("redirect_uri", &self.redirect_uri),
            ("state", &self.state),
            ("code_challenge", &self.code_challenge),
            ("code_challenge_method", &self.code_challenge_method),
            ("scope", &self.scope),
        ]
        .into_iter()
        .filter_map(|(k, f)| f.as_deref().map(|x| (k, x)))
        .collect()
    }

    /// `/oauth/authorize?…` with these parameters (a path on this server only).
    fn authorize_path(&self) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in self.pairs() {
            s.append_pair(k, v);
        }
        format!("/oauth/authorize?{}", s.finish())
    }
}

/// A request whose client and redirect URI are known good.
struct Valid {
    client: OAuthClientRow,
    redirect_uri: String,
    state: Option<String>,
    code_challenge: String,
    scope: String,
}

enum Invalid {
    /// Shown in the browser: the redirect target cannot be trusted.
    Page(Response),
    /// Sent back to the client's redirect URI.
    Redirect(Response),
}

impl IntoResponse for Invalid {
    fn into_response(self) -> Response {
        match self {
            Invalid::Page(r) | Invalid::Redirect(r) => r,
        }
    }
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A 302 to the registered redirect URI with `params` added to its query.
fn redirect_to(uri: &str, params: &[(&str, &str)]) -> Response {
    let Ok(mut u) = url::Url::parse(uri) else {
        return pages::error(StatusCode::BAD_REQUEST, "the redirect URI is not valid");
    };
    {
        let mut q = u.query_pairs_mut();
        for (k, v) in params {
            q.append_pair(k, v);
        }
    }
    let mut r = (StatusCode::FOUND, [(header::LOCATION, u.to_string())]).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn redirect_error(uri: &str, state: Option<&str>, error: &str, description: &str) -> Invalid {
    let mut p = vec![("error", error), ("error_description", description)];
    if let Some(s) = state {
        p.push(("state", s));
    }
    Invalid::Redirect(redirect_to(uri, &p))
}

/// RFC 7636 §4.1: 43–128 characters of `[A-Z a-z 0-9 - . _ ~]`.
pub fn valid_pkce_string(s: &str) -> bool {
    (43..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// BASE64URL(SHA256(verifier)), the S256 challenge of a verifier.
pub fn s256(verifier: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

/// Validates in RFC 6749's order: client and redirect URI first (error page), then the
/// rest (error redirect).
async fn validate(state: &AppState, p: &AuthorizeParams) -> Result<Valid, Invalid> {
    let page = |status, msg: &str| Invalid::Page(pages::error(status, msg));
    let Some(client_id) = p.client_id.as_deref().filter(|c| !c.is_empty()) else {
        return Err(page(
            StatusCode::BAD_REQUEST,
            "The request lacks a client_id.",
        ));
    };
    let client = match state.store.oauth_client(client_id).await {
        Ok(Some(c)) => c,
        Ok(None) => {
            return Err(page(
                StatusCode::BAD_REQUEST,
                "Unknown client: this application is not registered with Warren.",
            ))
        }
        Err(e) => {
            return Err(Invalid::Page(
                HttpError::internal("looking up the oauth client", &e).into_response(),
            ))
        }
    };
    let Some(redirect_uri) = p.redirect_uri.as_deref() else {
        return Err(page(
            StatusCode::BAD_REQUEST,
            "The request lacks a redirect_uri.",
        ));
    };
    if !client.allows_redirect(redirect_uri) {
        return Err(page(
            StatusCode::BAD_REQUEST,
            "The redirect_uri is not registered for this client.",
        ));
    }
    let st = p.state.as_deref();
    if st.is_some_and(|s| s.len() > 1024) {
        return Err(redirect_error(
            redirect_uri,
            None,
            "invalid_request",
            "state is longer than 1024 bytes",
        ));
    }
    if p.response_type.as_deref() != Some("code") {
        return Err(redirect_error(
            redirect_uri,
            st,
            "unsupported_response_type",
            "response_type must be code",
        ));
    }
    let Some(challenge) = p.code_challenge.as_deref() else {
        return Err(redirect_error(
            redirect_uri,
            st,
            "invalid_request",
            "code_challenge is required (PKCE with S256)",
        ));
    };
    if p.code_challenge_method.as_deref() != Some("S256") {
        return Err(redirect_error(
            redirect_uri,
            st,
            "invalid_request",
            "code_challenge_method must be S256 (plain is not accepted)",
        ));
    }
    if !valid_pkce_string(challenge) {
        return Err(redirect_error(
            redirect_uri,
            st,
            "invalid_request",
            "code_challenge must be 43-128 characters of A-Z a-z 0-9 - . _ ~",
        ));
    }
    let scope = p.scope.clone().unwrap_or_default();
    if scope.len() > 200 {
        return Err(redirect_error(
            redirect_uri,
            st,
            "invalid_scope",
            "scope is too long",
        ));
    }
    Ok(Valid {
        redirect_uri: redirect_uri.to_owned(),
        state: p.state.clone(),
        code_challenge: challenge.to_owned(),
        scope,
        client,
    })
}

async fn signing_key(state: &AppState) -> Result<Vec<u8>, Response> {
    state
        .store
        .oauth_signing_key(state.clock.now_ms())
        .await
        .map_err(|e| e.into_response())
}

/// The signed-in user of a request, with the raw session cookie value.
async fn session_user(
    state: &AppState,
    key: &[u8],
    headers: &HeaderMap,
) -> Result<Option<(crate::store::users::UserRow, String)>, Response> {
    let Some(raw) = cookies::get(headers, cookies::SESSION_COOKIE) else {
        return Ok(None);
    };
    let Some(uid) = cookies::check_session(key, raw, state.clock.now_ms()) else {
        return Ok(None);
    };
    let user = state
        .store
        .user_by_id(uid)
        .await
        .map_err(|e| HttpError::from(e).into_response())?;
    Ok(user.map(|u| (u, raw.to_owned())))
}

/// Issues a code and sends the browser back to the client.
async fn grant(state: &AppState, v: &Valid, user: UserId) -> Response {
    let now = state.clock.now_ms();
    let code = match state
        .store
        .create_oauth_code(
            &v.client.client_id,
            user,
            &v.redirect_uri,
            &v.code_challenge,
            &v.scope,
            now,
            CODE_TTL_MS,
        )
        .await
    {
        Ok(c) => c,
        Err(e) => return HttpError::from(e).into_response(),
    };
    let mut p = vec![("code", code.as_str())];
    if let Some(s) = &v.state {
        p.push(("state", s.as_str()));
    }
    redirect_to(&v.redirect_uri, &p)
}

fn consent_page(
    v: &Valid,
    p: &AuthorizeParams,
    key: &[u8],
    username: &str,
    session: &str,
) -> Response {
    let csrf = cookies::consent_csrf(key, session);
    let mut fields = p.pairs();
    fields.push(("csrf_token", &csrf));
    let mut r = pages::page(
        StatusCode::OK,
        "Allow access?",
        &pages::consent(&v.client.name, username, &pages::hidden_fields(&fields)),
    );
    pages::allow_form_redirects(&mut r);
    r
}

fn login_page(
    status: StatusCode,
    v: &Valid,
    p: &AuthorizeParams,
    key: &[u8],
    headers: &HeaderMap,
    username: &str,
    error: Option<&str>,
) -> Response {
    // Keep an existing pre-login cookie so several tabs keep working.
    let prelogin = cookies::get(headers, cookies::PRELOGIN_COOKIE)
        .filter(|c| c.len() >= 32 && c.len() <= 64)
        .map(str::to_owned)
        .unwrap_or_else(|| crate::crypto::random_secret(32));
    let csrf = cookies::login_csrf(key, &prelogin);
    let mut fields = p.pairs();
    fields.push(("csrf_token", &csrf));
    let mut r = pages::page(
        status,
        "Sign in",
        &pages::login(
            &v.client.name,
            &pages::hidden_fields(&fields),
            username,
            error,
        ),
    );
    pages::allow_form_redirects(&mut r);
    let c = cookies::set_cookie(
        cookies::PRELOGIN_COOKIE,
        &prelogin,
        3600,
        cookies::is_https(headers),
    );
    if let Ok(h) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, h);
    }
    r
}

/// `GET /oauth/authorize`
pub async fn authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    q: Result<Query<AuthorizeParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(p)) = q else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "The authorization request is malformed.",
        );
    };
    let v = match validate(&state, &p).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let key = match signing_key(&state).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    match session_user(&state, &key, &headers).await {
        Err(r) => r,
        Ok(Some((user, _))) if v.client.first_party => grant(&state, &v, user.id).await,
        Ok(Some((user, raw))) => consent_page(&v, &p, &key, &user.username, &raw),
        Ok(None) => login_page(StatusCode::OK, &v, &p, &key, &headers, "", None),
    }
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: String,
    #[serde(default)]
    pub csrf_token: String,
    #[serde(flatten)]
    pub params: AuthorizeParams,
}

/// `POST /oauth/login`
pub async fn login(
    State(state): State<AppState>,
    crate::state::ClientAddr(addr): crate::state::ClientAddr,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return pages::error(StatusCode::BAD_REQUEST, "The sign-in form is malformed.");
    };
    let key = match signing_key(&state).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    let prelogin = cookies::get(&headers, cookies::PRELOGIN_COOKIE).unwrap_or("");
    if !cookies::check_login_csrf(&key, prelogin, &f.csrf_token) {
        return pages::error(
            StatusCode::FORBIDDEN,
            "The sign-in form expired or did not come from this site. Go back and start the sign-in again.",
        );
    }
    let v = match validate(&state, &f.params).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    let now = state.clock.now_ms();
    if let Err(t) = state.login_throttle.check(&f.username, addr, now) {
        tracing::info!("oauth sign-in refused: too many failures");
        let mut r = login_page(
            StatusCode::TOO_MANY_REQUESTS,
            &v,
            &f.params,
            &key,
            &headers,
            &f.username,
            Some(&format!(
                "Too many failed sign-in attempts. Try again in {} s.",
                t.retry_after_secs
            )),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(t.retry_after_secs));
        return r;
    }
    let user = if f.username.is_empty()
        || f.username.len() > 64
        || f.password.is_empty()
        || f.password.len() > 1024
    {
        None
    } else {
        match state.store.check_password(&f.username, &f.password).await {
            Ok(u) => u,
            Err(e) => return HttpError::from(e).into_response(),
        }
    };
    let Some(user) = user else {
        state.login_throttle.failed(&f.username, addr, now);
        tracing::info!("oauth sign-in failed");
        return login_page(
            StatusCode::UNAUTHORIZED,
            &v,
            &f.params,
            &key,
            &headers,
            &f.username,
            Some(LOGIN_FAILED),
        );
    };
    state.login_throttle.succeeded(&f.username);
    let session = cookies::session_value(&key, user.id, now + cookies::SESSION_TTL_MS);
    let https = cookies::is_https(&headers);
    let mut r = Redirect::to(&f.params.authorize_path()).into_response();
    let h = r.headers_mut();
    for c in [
        cookies::set_cookie(
            cookies::SESSION_COOKIE,
            &session,
            cookies::SESSION_TTL_MS / 1000,
            https,
        ),
        cookies::set_cookie(cookies::PRELOGIN_COOKIE, "", 0, https),
    ] {
        if let Ok(v) = HeaderValue::from_str(&c) {
            h.append(header::SET_COOKIE, v);
        }
    }
    no_store(r)
}

/// The consent form's fields.
#[derive(Debug, Deserialize)]
pub struct ConsentForm {
    #[serde(default)]
    pub decision: String,
    #[serde(default)]
    pub csrf_token: String,
    #[serde(flatten)]
    pub params: AuthorizeParams,
}

/// `POST /oauth/consent`
pub async fn consent(
    State(state): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<ConsentForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let Ok(Form(f)) = form else {
        return pages::error(StatusCode::BAD_REQUEST, "The consent form is malformed.");
    };
    let key = match signing_key(&state).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    let (user, raw) = match session_user(&state, &key, &headers).await {
        Err(r) => return r,
        Ok(Some(x)) => x,
        Ok(None) => {
            return pages::error(
                StatusCode::FORBIDDEN,
                "Your sign-in expired. Go back and start again.",
            )
        }
    };
    if !cookies::check_consent_csrf(&key, &raw, &f.csrf_token) {
        return pages::error(
            StatusCode::FORBIDDEN,
            "The consent form expired or did not come from this site.",
        );
    }
    let v = match validate(&state, &f.params).await {
        Ok(v) => v,
        Err(e) => return e.into_response(),
    };
    if f.decision == "allow" {
        grant(&state, &v, user.id).await
    } else {
        redirect_error(
            &v.redirect_uri,
            v.state.as_deref(),
            "access_denied",
            "the user denied the request",
        )
        .into_response()
    }
}
