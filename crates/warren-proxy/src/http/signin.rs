//! Browser sign-in (access.md): workspace host → `auth.{domain}/oauth/start` → the
//! server's authorize endpoint → `auth.{domain}/oauth/callback` → a one-minute hand-off
//! back on the workspace host → the session cookie for that host only.
//!
//! CSRF safety: the workspace host sets a random "bind" cookie before sending the browser
//! away; its hash travels through `start`, the auth host's state cookie and the hand-off,
//! and the hand-off is only accepted by the browser holding the bind cookie. The auth
//! host's state cookie (named after the OAuth `state`, so parallel sign-ins do not clash)
//! binds the callback to the browser that started it. The return URL must be a workspace
//! or terminal host under the workspace domain: no open redirect.

use super::cookies::{self, BIND, SESSION, STATE_PREFIX};
use super::host::{self, Route, Target};
use super::keys::now_secs;
use super::pages;
use crate::Shared;
use axum::body::Body;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use http::header::{LOCATION, SET_COOKIE, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::collections::HashMap;
use warren_types::{UserId, WorkspaceId};

/// The path on workspace hosts that turns a hand-off into a session.
pub(crate) const HANDOFF_PATH: &str = "/.warren/session";
/// How long a sign-in may take from the workspace host back to it.
const SIGN_IN_SECS: u64 = 600;
/// How long a hand-off is valid.
const HANDOFF_SECS: i64 = 60;

const AUD_SESSION: &str = "warren-session";
const AUD_STATE: &str = "warren-oauth-state";
const AUD_HANDOFF: &str = "warren-handoff";

/// The session cookie's claims.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SessionClaims {
    pub aud: String,
    pub sub: UserId,
    pub ws: WorkspaceId,
    /// The one host this session is valid on.
    pub host: String,
    pub iat: i64,
    pub exp: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateClaims {
    aud: String,
    nonce: String,
    verifier: String,
    /// Where the browser goes after signing in (validated).
    ret: String,
    /// Hash of the workspace host's bind cookie.
    bind: String,
    exp: i64,
}

#[derive(Debug, Serialize, Deserialize)]
struct HandoffClaims {
    aud: String,
    sub: UserId,
    host: String,
    bind: String,
    /// Path and query to return to on `host`.
    ret: String,
    jti: String,
    exp: i64,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SignInError {
    #[error("calling the server's {what} endpoint")]
    Call {
        what: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("the server's {what} endpoint answered {status}")]
    Status { what: &'static str, status: u16 },
}

pub(crate) fn random_token(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    URL_SAFE_NO_PAD.encode(b)
}

fn hash(v: &str) -> String {
    URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(v.as_bytes()))
}

fn is_b64_token(v: &str, len: usize) -> bool {
    v.len() == len
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn secure(shared: &Shared) -> bool {
    shared.config.public_scheme == "https"
}

fn query(req: &Parts) -> HashMap<String, String> {
    url::form_urlencoded::parse(req.uri.query().unwrap_or("").as_bytes())
        .into_owned()
        .collect()
}

pub(crate) fn redirect(status: StatusCode, location: &str) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = status;
    if let Ok(v) = HeaderValue::from_str(location) {
        r.headers_mut().insert(LOCATION, v);
    }
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    r
}

/// `host[:port]` exactly as the client wrote it (for URLs back to the same host).
pub(crate) fn request_authority(req: &Parts) -> Option<String> {
    if let Some(a) = req.uri.authority() {
        return Some(a.as_str().to_ascii_lowercase());
    }
    req.headers
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(|s| s.to_ascii_lowercase())
}

/// The signed session cookie's claims, if one valid for this host was sent. Each cookie of
/// the name is tried: another host of the domain may have planted one in front of ours.
pub(crate) fn session(
    shared: &Shared,
    target: &Target,
    headers: &HeaderMap,
) -> Option<(SessionClaims, String)> {
    cookies::get_all(headers, SESSION, secure(shared)).find_map(|raw| {
        let c: SessionClaims = shared.front.keys.verify(raw, AUD_SESSION)?;
        (c.host == target.host).then(|| (c, raw.to_owned()))
    })
}

/// No session: browsers (`Accept` with `text/html`, or a navigation) go to sign in; other
/// clients get 401 with `WWW-Authenticate: Bearer` — a redirect to an HTML login page is
/// of no use to them.
pub(crate) fn anonymous(shared: &Shared, req: &Parts) -> Response<Body> {
    let headers = &req.headers;
    if !pages::wants_html(headers) {
        let mut r = pages::json_error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "sign in with a browser, or send `Authorization: Bearer <personal access token>`",
        );
        r.headers_mut().insert(
            WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"warren\""),
        );
        return r;
    }
    let Some(authority) = request_authority(req) else {
        return pages::not_found(headers);
    };
    let scheme = &shared.config.public_scheme;
    let path = req
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .filter(|p| p.starts_with('/') && !p.starts_with(HANDOFF_PATH))
        .unwrap_or("/");
    let ret = format!("{scheme}://{authority}{path}");
    // Reuse a bind cookie another tab just set, so parallel sign-ins on one host both work.
    // The hand-off accepts any bind cookie the browser sends, so one planted in front by
    // another host (possible under http only; `__Host-` rules it out under https) costs no
    // sign-in loop.
    let (bind, set_bind) =
        match cookies::get_all(headers, BIND, secure(shared)).find(|b| is_b64_token(b, 43)) {
            Some(b) => (b.to_owned(), false),
            None => (random_token(32), true),
        };
    let start = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("return", &ret)
        .append_pair("bind", &hash(&bind))
        .finish();
    let location = format!(
        "{scheme}://{}/oauth/start?{start}",
        shared.config.public_authority(&shared.config.auth_host())
    );
    let mut r = redirect(StatusCode::FOUND, &location);
    if set_bind {
        r.headers_mut().append(
            SET_COOKIE,
            cookies::set(BIND, &bind, SIGN_IN_SECS, secure(shared)),
        );
    }
    r
}

/// A return URL is acceptable when it is a workspace or terminal host under the workspace
/// domain, on the public scheme, without credentials.
fn valid_return(shared: &Shared, ret: &str) -> Option<url::Url> {
    let u = url::Url::parse(ret).ok()?;
    if u.scheme() != shared.config.public_scheme
        || !u.username().is_empty()
        || u.password().is_some()
        || u.fragment().is_some()
    {
        return None;
    }
    let t = host::parse(&shared.config, u.host_str()?)?;
    (t.route != Route::Auth).then_some(u)
}

/// Requests to `auth.{domain}`: `/oauth/start` and `/oauth/callback`.
pub(crate) async fn auth_host(shared: &Shared, req: Request<Body>) -> Response<Body> {
    let (req, _) = req.into_parts();
    let headers = req.headers.clone();
    if req.method != Method::GET {
        return pages::not_found(&headers);
    }
    match req.uri.path() {
        "/oauth/start" => oauth_start(shared, &req),
        "/oauth/callback" => oauth_callback(shared, &req).await,
        _ => pages::not_found(&headers),
    }
}

fn oauth_start(shared: &Shared, req: &Parts) -> Response<Body> {
    let headers = &req.headers;
    let q = query(req);
    let Some(ret) = q.get("return").and_then(|r| valid_return(shared, r)) else {
        return pages::bad_request(
            headers,
            "The sign-in return address must be a workspace host under this Warren's workspace domain.",
        );
    };
    let Some(bind) = q.get("bind").filter(|b| is_b64_token(b, 43)) else {
        return pages::bad_request(
            headers,
            "The sign-in request is incomplete (no browser binding).",
        );
    };
    let nonce = random_token(18);
    let verifier = random_token(32);
    let claims = StateClaims {
        aud: AUD_STATE.into(),
        nonce: nonce.clone(),
        verifier: verifier.clone(),
        ret: ret.to_string(),
        bind: bind.clone(),
        exp: now_secs() + SIGN_IN_SECS as i64,
    };
    let state_cookie = shared.front.keys.sign(&claims);
    let c = &shared.config;
    let authorize = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("response_type", "code")
        .append_pair("client_id", &c.oauth_client_id)
        .append_pair("redirect_uri", &c.callback_url())
        .append_pair("state", &nonce)
        .append_pair("code_challenge", &hash(&verifier))
        .append_pair("code_challenge_method", "S256")
        .finish();
    let location = format!(
        "{}/oauth/authorize?{authorize}",
        c.server_public_url.as_str().trim_end_matches('/')
    );
    let mut r = redirect(StatusCode::FOUND, &location);
    r.headers_mut().append(
        SET_COOKIE,
        cookies::set(
            &format!("{STATE_PREFIX}{nonce}"),
            &state_cookie,
            SIGN_IN_SECS,
            secure(shared),
        ),
    );
    r
}

async fn oauth_callback(shared: &Shared, req: &Parts) -> Response<Body> {
    let headers = &req.headers;
    let q = query(req);
    let Some(nonce) = q.get("state").filter(|s| is_b64_token(s, 24)) else {
        return pages::bad_request(headers, "The sign-in answer has no valid state.");
    };
    let cookie_name = format!("{STATE_PREFIX}{nonce}");
    let state: Option<StateClaims> = cookies::get_all(headers, &cookie_name, secure(shared))
        .filter_map(|raw| shared.front.keys.verify::<StateClaims>(raw, AUD_STATE))
        .find(|s| s.nonce == *nonce);
    let Some(state) = state else {
        return pages::bad_request(
            headers,
            "This sign-in was not started in this browser or took too long. Open the workspace address again.",
        );
    };
    let clear_state = cookies::clear(&cookie_name, secure(shared));
    if let Some(e) = q.get("error") {
        let mut r = pages::error(
            headers,
            StatusCode::FORBIDDEN,
            "sign_in_failed",
            "Sign-in failed",
            &format!("The sign-in did not complete ({e})."),
        );
        r.headers_mut().append(SET_COOKIE, clear_state);
        return r;
    }
    let Some(code) = q.get("code") else {
        return pages::bad_request(headers, "The sign-in answer has no code.");
    };
    let user = match exchange(shared, code, &state.verifier).await {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "OAuth code exchange failed");
            let mut r = pages::error(
                headers,
                StatusCode::BAD_GATEWAY,
                "sign_in_failed",
                "Sign-in failed",
                "The sign-in could not be completed with the Warren server. Open the workspace address again.",
            );
            r.headers_mut().append(SET_COOKIE, clear_state);
            return r;
        }
    };
    // The return URL was validated at the start and signed since; check again anyway.
    let Some(ret) = valid_return(shared, &state.ret) else {
        return pages::bad_request(
            headers,
            "The sign-in return address is not a workspace host.",
        );
    };
    let handoff = HandoffClaims {
        aud: AUD_HANDOFF.into(),
        sub: user,
        host: ret.host_str().unwrap_or_default().to_owned(),
        bind: state.bind,
        ret: match ret.query() {
            Some(q) => format!("{}?{q}", ret.path()),
            None => ret.path().to_owned(),
        },
        jti: random_token(18),
        exp: now_secs() + HANDOFF_SECS,
    };
    let token = shared.front.keys.sign(&handoff);
    let origin = ret.origin().ascii_serialization();
    let location = format!("{origin}{HANDOFF_PATH}?handoff={token}");
    let mut r = redirect(StatusCode::FOUND, &location);
    r.headers_mut().append(SET_COOKIE, clear_state);
    r
}

#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
}

#[derive(Deserialize)]
struct UserInfoAnswer {
    user_id: UserId,
}

/// Code → access token (client secret + PKCE verifier) → the user.
async fn exchange(shared: &Shared, code: &str, verifier: &str) -> Result<UserId, SignInError> {
    let c = &shared.config;
    let base = c.server_url.as_str().trim_end_matches('/');
    let http = shared.server.http();
    let resp = http
        .post(format!("{base}/oauth/token"))
        .basic_auth(&c.oauth_client_id, Some(&c.oauth_client_secret))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &c.callback_url()),
            ("code_verifier", verifier),
        ])
        .send()
        .await
        .map_err(|source| SignInError::Call {
            what: "token",
            source,
        })?;
    if !resp.status().is_success() {
        return Err(SignInError::Status {
            what: "token",
            status: resp.status().as_u16(),
        });
    }
    let token: TokenAnswer = resp.json().await.map_err(|source| SignInError::Call {
        what: "token",
        source,
    })?;
    let resp = http
        .get(format!("{base}/oauth/userinfo"))
        .bearer_auth(&token.access_token)
        .send()
        .await
        .map_err(|source| SignInError::Call {
            what: "userinfo",
            source,
        })?;
    if !resp.status().is_success() {
        return Err(SignInError::Status {
            what: "userinfo",
            status: resp.status().as_u16(),
        });
    }
    let info: UserInfoAnswer = resp.json().await.map_err(|source| SignInError::Call {
        what: "userinfo",
        source,
    })?;
    Ok(info.user_id)
}

/// `GET /.warren/session?handoff=…` on a workspace host: the last step of signing in.
pub(crate) async fn complete_handoff(
    shared: &Shared,
    target: &Target,
    req: &Parts,
) -> Response<Body> {
    let headers = &req.headers;
    let sec = secure(shared);
    let q = query(req);
    let claims: Option<HandoffClaims> = q
        .get("handoff")
        .and_then(|t| shared.front.keys.verify(t, AUD_HANDOFF));
    let Some(h) = claims.filter(|h| {
        h.host == target.host
            && cookies::get_all(headers, BIND, sec).any(|b| subtle_eq(&hash(b), &h.bind))
    }) else {
        return pages::bad_request(
            headers,
            "This sign-in link is not valid here (expired, for another host, or opened in another browser). Open the workspace address again.",
        );
    };
    // Single use on every replica: the server remembers used hand-offs until they expire.
    match shared.server.first_handoff_use(&h.jti, h.exp).await {
        Ok(true) => {}
        Ok(false) => {
            return pages::bad_request(
                headers,
                "This sign-in link was already used. Open the workspace address again.",
            )
        }
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "recording the hand-off's use failed");
            return pages::server_unavailable(headers);
        }
    }
    let workspace = target.workspace().unwrap_or_default();
    let access = match shared
        .front
        .authz
        .check(
            &shared.server,
            &super::authz::Principal::User(h.sub),
            workspace,
            target.port(),
            None,
        )
        .await
    {
        Ok(a) if a.allowed => a,
        Ok(_) | Err(crate::server_api::ServerApiError::Denied) => {
            // Perhaps a redirect mount: no session is made for its host, the client goes on
            // to where it leads (and signs in there the same way).
            let ret = if h.ret.starts_with('/') && !h.ret.starts_with("//") {
                h.ret.as_str()
            } else {
                "/"
            };
            let principal = super::authz::Principal::User(h.sub);
            let mut r = super::redirect_or_not_found(shared, target, &principal, req, ret).await;
            r.headers_mut()
                .append(SET_COOKIE, cookies::clear(BIND, sec));
            return r;
        }
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "authorisation check failed");
            return pages::server_unavailable(headers);
        }
    };
    let now = now_secs();
    let lifetime = shared.config.session_lifetime_secs;
    let session = SessionClaims {
        aud: AUD_SESSION.into(),
        sub: h.sub,
        ws: access.workspace_id,
        host: target.host.clone(),
        iat: now,
        exp: now + lifetime as i64,
    };
    let cookie = shared.front.keys.sign(&session);
    let ret = if h.ret.starts_with('/') && !h.ret.starts_with("//") {
        h.ret
    } else {
        "/".to_owned()
    };
    let mut r = redirect(StatusCode::SEE_OTHER, &ret);
    r.headers_mut()
        .append(SET_COOKIE, cookies::set(SESSION, &cookie, lifetime, sec));
    r.headers_mut()
        .append(SET_COOKIE, cookies::clear(BIND, sec));
    r
}

fn subtle_eq(a: &str, b: &str) -> bool {
    use subtle::ConstantTimeEq;
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// The start button's CSRF token: derived from the session cookie, which a cross-site page
/// can neither read nor guess.
pub(crate) fn csrf_token(session_raw: &str) -> String {
    hash(&format!("warren-start\0{session_raw}"))
}

pub(crate) fn csrf_ok(session_raw: &str, presented: &str) -> bool {
    subtle_eq(&csrf_token(session_raw), presented)
}
