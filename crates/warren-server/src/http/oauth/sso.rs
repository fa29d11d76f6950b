//! Single sign-on's browser side (`crate::app::sso` has the rules):
//!
//! - `GET /oauth/sso?next=PATH` sets the sign-in cookie (`warren_sso`, path `/oauth/sso`,
//!   10 minutes) and redirects to the provider.
//! - `GET /oauth/sso/callback?code&state` finishes it: the server session cookie is set, the
//!   sign-in cookie cleared, and the browser goes to `next`. A refusal is a page naming the
//!   problem, with a link to start again.

use super::cookies::{self, Https};
use super::{no_store, pages, redirect};
use crate::app::sso::{self, Callback};
use crate::app::{oauth, AppError, AppState};
use crate::http::error::status_of;
use axum::extract::{Query, State};
use axum::response::Response;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use serde::Deserialize;

/// The sign-in in progress (see `crate::app::sso`).
pub const SSO_COOKIE: &str = "warren_sso";
const SSO_COOKIE_PATH: &str = "/oauth/sso";

#[derive(Debug, Default, Deserialize)]
pub struct Start {
    #[serde(default)]
    next: Option<String>,
}

/// The link that starts a sign-in returning to `next`.
pub fn start_link(next: &str) -> String {
    let q = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("next", next)
        .finish();
    format!("{SSO_COOKIE_PATH}?{q}")
}

fn refused(e: AppError) -> Response {
    let mut r = pages::page(
        status_of(e.kind),
        "Sign-in error",
        &format!(
            "<p class=\"error\" role=\"alert\">{}</p><p><a href=\"/\">Start again</a></p>",
            pages::esc(&e.message)
        ),
    );
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(s));
    }
    no_store(r)
}

fn with_cookie(mut r: Response, cookie: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
    r
}

/// `GET /oauth/sso`
pub async fn start(
    State(state): State<AppState>,
    Https(https): Https,
    q: Result<Query<Start>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some(provider) = state.sso.clone() else {
        return pages::error(
            StatusCode::NOT_FOUND,
            "Single sign-on is not configured on this server.",
        );
    };
    let next = match q {
        Ok(Query(Start { next: Some(n) })) if sso::local_path(&n) => n,
        Ok(Query(Start { next: None })) => "/".to_owned(),
        _ => {
            return pages::error(
                StatusCode::BAD_REQUEST,
                "The sign-in link is malformed: `next` must be a path on this server.",
            )
        }
    };
    let key = match oauth::signing_key(&state).await {
        Ok(k) => k,
        Err(e) => return refused(e),
    };
    match provider.begin(&state, &key, &next).await {
        Err(e) => refused(e),
        Ok((url, value)) => {
            let cookie = cookies::set_cookie(
                SSO_COOKIE,
                &value,
                SSO_COOKIE_PATH,
                sso::SIGN_IN_TTL_MS / 1000,
                https,
            );
            with_cookie(redirect(&url), &cookie)
        }
    }
}

/// `GET /oauth/sso/callback`
pub async fn callback(
    State(state): State<AppState>,
    Https(https): Https,
    headers: HeaderMap,
    q: Result<Query<Callback>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Some(provider) = state.sso.clone() else {
        return pages::error(
            StatusCode::NOT_FOUND,
            "Single sign-on is not configured on this server.",
        );
    };
    let Ok(Query(cb)) = q else {
        return pages::error(
            StatusCode::BAD_REQUEST,
            "The identity provider's answer is malformed.",
        );
    };
    let key = match oauth::signing_key(&state).await {
        Ok(k) => k,
        Err(e) => return refused(e),
    };
    // Whatever the outcome, this sign-in is over.
    let clear = cookies::set_cookie(SSO_COOKIE, "", SSO_COOKIE_PATH, 0, https);
    let raw = cookies::get(&headers, SSO_COOKIE);
    match provider.finish(&state, &key, raw, &cb).await {
        Err(e) => with_cookie(refused(e), &clear),
        Ok(done) => {
            let session = cookies::set_cookie(
                cookies::SESSION_COOKIE,
                &done.session,
                "/",
                oauth::signed::SESSION_TTL_MS / 1000,
                https,
            );
            with_cookie(with_cookie(redirect(&done.return_to), &session), &clear)
        }
    }
}
