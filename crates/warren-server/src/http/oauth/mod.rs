//! The OAuth 2.0 authorization server's browser side (access.md): the authorize endpoint,
//! the login and consent pages, session cookies and redirects. The rules — which requests
//! are valid, who signed in, codes and tokens — are `crate::app::oauth`'s.
//!
//! - `GET /oauth/authorize`: a bad client or redirect URI gets an error page, never a
//!   redirect; later problems are redirected back as `error=…&state=…`.
//! - Without a server session the login page is shown; its form carries a CSRF token, an
//!   HMAC of a random pre-login cookie, and the authorization request in hidden fields.
//! - `POST /oauth/login` sets the server session cookie (`{user}.{expiry}.{hmac}`,
//!   HttpOnly, SameSite=Lax, path `/oauth`) and sends the browser back to the authorize
//!   URL, which re-validates everything. First-party clients skip consent; others get a
//!   consent page whose CSRF token is bound to the session cookie.

pub mod clients;
pub mod cookies;
pub mod pages;
pub mod sso;
pub mod token;

use crate::app::oauth::{self, signed, Authorization, AuthorizeParams, AuthorizeRefusal, SignIn};
use crate::app::{AppError, AppState};
use crate::http::client_addr::ClientAddr;
use crate::http::error::HttpError;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use cookies::Https;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;

/// The one message of a failed sign-in, whatever failed (no user enumeration).
pub const LOGIN_FAILED: &str = "Invalid username or password.";
/// The login page's message for the right password of a disabled account.
pub const ACCOUNT_DISABLED: &str = "This account is disabled. Ask an administrator.";

pub fn router() -> Router<crate::http::HttpState> {
    Router::new()
        .route("/oauth/authorize", get(authorize))
        .route("/oauth/login", post(login))
        .route("/oauth/consent", post(consent))
        .route("/oauth/sso", get(sso::start))
        .route(crate::SSO_CALLBACK_PATH, get(sso::callback))
        .route("/oauth/token", post(token::token))
        .route("/oauth/userinfo", get(token::userinfo))
        .route(
            "/api/v1/oauth/clients",
            get(clients::list).post(clients::create),
        )
        .route(
            "/api/v1/oauth/clients/{client_id}",
            axum::routing::delete(clients::delete),
        )
}

fn no_store(mut r: Response) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A 302 to `url`, not cached.
fn redirect(url: &str) -> Response {
    no_store((StatusCode::FOUND, [(header::LOCATION, url.to_owned())]).into_response())
}

/// The answer to a refused authorization request: an error page, or back to the client.
fn refused(r: AuthorizeRefusal) -> Response {
    match r {
        AuthorizeRefusal::Page(msg) => pages::error(StatusCode::BAD_REQUEST, msg),
        AuthorizeRefusal::Redirect {
            redirect_uri,
            state,
            error,
            description,
        } => {
            let mut p = vec![("error", error), ("error_description", description)];
            if let Some(s) = &state {
                p.push(("state", s));
            }
            match oauth::redirect_url(&redirect_uri, &p) {
                Some(url) => redirect(&url),
                None => pages::error(StatusCode::BAD_REQUEST, "the redirect URI is not valid"),
            }
        }
        AuthorizeRefusal::Failed(e) => failed(e),
    }
}

/// A failure of Warren's own, in the API's error shape.
fn failed(e: AppError) -> Response {
    HttpError::from(e).into_response()
}

/// Issues a code and sends the browser back to the client.
async fn grant(state: &AppState, v: &Authorization, user: warren_types::UserId) -> Response {
    match oauth::grant(state, v, user).await {
        Ok(url) => redirect(&url),
        Err(e) if e.kind == crate::app::ErrorKind::Invalid => {
            pages::error(StatusCode::BAD_REQUEST, &e.message)
        }
        Err(e) => failed(e),
    }
}

fn consent_page(
    v: &Authorization,
    p: &AuthorizeParams,
    key: &[u8],
    username: &str,
    session: &str,
) -> Response {
    let csrf = signed::consent_csrf(key, session);
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

#[allow(clippy::too_many_arguments)]
fn login_page(
    state: &AppState,
    status: StatusCode,
    v: &Authorization,
    p: &AuthorizeParams,
    key: &[u8],
    headers: &HeaderMap,
    https: bool,
    username: &str,
    error: Option<&str>,
) -> Response {
    let prelogin = cookies::prelogin_value(headers);
    let csrf = signed::login_csrf(key, &prelogin);
    let mut fields = p.pairs();
    fields.push(("csrf_token", &csrf));
    let sso = state
        .sso
        .as_ref()
        .map(|s| (s.display_name(), sso::start_link(&p.authorize_path())));
    let mut r = pages::page(
        status,
        "Sign in",
        &pages::login(
            &v.client.name,
            &pages::hidden_fields(&fields),
            username,
            error,
            sso.as_ref().map(|(n, l)| (*n, l.as_str())),
            state.password_login,
        ),
    );
    pages::allow_form_redirects(&mut r);
    let c = cookies::set_cookie(cookies::PRELOGIN_COOKIE, &prelogin, "/oauth", 3600, https);
    if let Ok(h) = HeaderValue::from_str(&c) {
        r.headers_mut().append(header::SET_COOKIE, h);
    }
    r
}

/// The server's signing key, or the error answer.
async fn signing_key(state: &AppState) -> Result<Vec<u8>, Response> {
    oauth::signing_key(state).await.map_err(failed)
}

/// `GET /oauth/authorize`
pub async fn authorize(
    State(state): State<AppState>,
    Https(https): Https,
    headers: HeaderMap,
    q: Result<Query<AuthorizeParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(p)) = q else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "The authorization request is malformed.",
        );
    };
    let v = match oauth::check_authorization(&state, &p).await {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    let key = match signing_key(&state).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    let raw = cookies::get(&headers, cookies::SESSION_COOKIE);
    match oauth::session_user(&state, &key, raw).await {
        Err(e) => failed(e),
        Ok(Some(user)) if v.client.first_party => grant(&state, &v, user.id).await,
        Ok(Some(user)) => consent_page(&v, &p, &key, &user.username, raw.unwrap_or_default()),
        Ok(None) => login_page(
            &state,
            StatusCode::OK,
            &v,
            &p,
            &key,
            &headers,
            https,
            "",
            None,
        ),
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
    ClientAddr(addr): ClientAddr,
    Https(https): Https,
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
    if !signed::check_login_csrf(&key, prelogin, &f.csrf_token) {
        return pages::error(
            StatusCode::FORBIDDEN,
            "The sign-in form expired or did not come from this site. Go back and start the sign-in again.",
        );
    }
    let v = match oauth::check_authorization(&state, &f.params).await {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    let again = |status, error: &str| {
        login_page(
            &state,
            status,
            &v,
            &f.params,
            &key,
            &headers,
            https,
            &f.username,
            Some(error),
        )
    };
    let session = match oauth::sign_in(&state, &key, &f.username, &f.password, addr).await {
        Err(e) => return failed(e),
        Ok(SignIn::Throttled(secs)) => {
            let mut r = again(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("Too many failed sign-in attempts. Try again in {secs} s."),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return r;
        }
        Ok(SignIn::Failed) => return again(StatusCode::UNAUTHORIZED, LOGIN_FAILED),
        Ok(SignIn::Disabled) => return again(StatusCode::FORBIDDEN, ACCOUNT_DISABLED),
        Ok(SignIn::Ok { session, .. }) => session,
    };
    let mut r = Redirect::to(&f.params.authorize_path()).into_response();
    let h = r.headers_mut();
    for c in [
        cookies::set_cookie(
            cookies::SESSION_COOKIE,
            &session,
            "/",
            signed::SESSION_TTL_MS / 1000,
            https,
        ),
        cookies::set_cookie(cookies::PRELOGIN_COOKIE, "", "/oauth", 0, https),
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
    let raw = cookies::get(&headers, cookies::SESSION_COOKIE);
    let user = match oauth::session_user(&state, &key, raw).await {
        Err(e) => return failed(e),
        Ok(Some(u)) => u,
        Ok(None) => {
            return pages::error(
                StatusCode::FORBIDDEN,
                "Your sign-in expired. Go back and start again.",
            )
        }
    };
    if !signed::check_consent_csrf(&key, raw.unwrap_or_default(), &f.csrf_token) {
        return pages::error(
            StatusCode::FORBIDDEN,
            "The consent form expired or did not come from this site.",
        );
    }
    let v = match oauth::check_authorization(&state, &f.params).await {
        Ok(v) => v,
        Err(e) => return refused(e),
    };
    if f.decision == "allow" {
        grant(&state, &v, user.id).await
    } else {
        refused(AuthorizeRefusal::Redirect {
            redirect_uri: v.redirect_uri,
            state: v.state,
            error: "access_denied",
            description: "the user denied the request",
        })
    }
}
