//! Signing in and out of the web UI: the same accounts, password check and throttle as the
//! API's password session and the OAuth login page (`crate::app::oauth::sign_in`).

use super::layout;
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::oauth::{self, signed, SignIn};
use crate::app::{users, AppState};
use crate::http::client_addr::ClientAddr;
use crate::http::oauth::cookies::{self, Https};
use crate::http::oauth::{ACCOUNT_DISABLED, LOGIN_FAILED};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use maud::html;
use serde::Deserialize;

/// Where the pre-login cookie of the UI's sign-in form lives.
const LOGIN_PATH: &str = "/login";

#[derive(Debug, Default, Deserialize)]
pub struct NextQuery {
    #[serde(default)]
    next: Option<String>,
}

/// A local path to go to after signing in (`crate::app::sso::local_path`, at most 2,000
/// characters); anything else (another site, `//host`, a backslash trick) becomes `/`.
fn local_next(next: Option<&str>) -> String {
    match next {
        Some(n) if crate::app::sso::local_path(n) && n.len() <= 2000 => n.to_owned(),
        _ => "/".to_owned(),
    }
}

fn set_cookie(r: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        r.headers_mut().append(header::SET_COOKIE, v);
    }
}

#[allow(clippy::too_many_arguments)]
fn login_page(
    state: &AppState,
    status: StatusCode,
    key: &[u8],
    headers: &HeaderMap,
    https: bool,
    next: &str,
    username: &str,
    error: Option<&str>,
) -> Response {
    let prelogin = cookies::prelogin_value(headers);
    let csrf = signed::login_csrf(key, &prelogin);
    let body = html! {
        @if let Some(e) = error { p.error role="alert" { (e) } }
        @if let Some(sso) = &state.sso {
            p { a.button.primary #sso href=(crate::http::oauth::sso::start_link(next)) {
                "Sign in with " (sso.display_name())
            } }
        }
        @if state.password_login {
        form.card method="post" action=(LOGIN_PATH) {
            input type="hidden" name="csrf_token" value=(csrf);
            input type="hidden" name="next" value=(next);
            label for="username" { "Username" }
            input type="text" id="username" name="username" autocomplete="username"
                value=(username) required autofocus[username.is_empty()];
            label for="password" { "Password" }
            input type="password" id="password" name="password"
                autocomplete="current-password" required autofocus[!username.is_empty()];
            button.primary type="submit" { "Sign in" }
        }
        }
    };
    let mut r = layout::bare(status, "Sign in", body);
    set_cookie(
        &mut r,
        &cookies::set_cookie(cookies::PRELOGIN_COOKIE, &prelogin, LOGIN_PATH, 3600, https),
    );
    r
}

/// `GET /login`: the form, or straight on when already signed in.
pub async fn page(
    State(state): State<AppState>,
    Https(https): Https,
    headers: HeaderMap,
    viewer: Result<Viewer, UiError>,
    Query(q): Query<NextQuery>,
) -> Result<Response, UiError> {
    let next = local_next(q.next.as_deref());
    if viewer.is_ok() {
        return Ok(Redirect::to(&next).into_response());
    }
    let key = oauth::signing_key(&state).await?;
    Ok(login_page(
        &state,
        StatusCode::OK,
        &key,
        &headers,
        https,
        &next,
        "",
        None,
    ))
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf_token: String,
    #[serde(default)]
    next: Option<String>,
}

/// `POST /login`
pub async fn submit(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    Https(https): Https,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Result<Response, UiError> {
    let Ok(Form(f)) = form else {
        return Err(UiError::BadRequest("the sign-in form is malformed".into()));
    };
    let key = oauth::signing_key(&state).await?;
    let prelogin = cookies::get(&headers, cookies::PRELOGIN_COOKIE).unwrap_or("");
    if !signed::check_login_csrf(&key, prelogin, &f.csrf_token) {
        return Err(UiError::Csrf);
    }
    let next = local_next(f.next.as_deref());
    let again = |status, error: &str| {
        login_page(
            &state,
            status,
            &key,
            &headers,
            https,
            &next,
            &f.username,
            Some(error),
        )
    };
    let session = match oauth::sign_in(&state, &key, &f.username, &f.password, addr).await? {
        SignIn::Throttled(secs) => {
            let mut r = again(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("Too many failed sign-in attempts. Try again in {secs} s."),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return Ok(r);
        }
        SignIn::Failed => return Ok(again(StatusCode::UNAUTHORIZED, LOGIN_FAILED)),
        SignIn::Disabled => return Ok(again(StatusCode::FORBIDDEN, ACCOUNT_DISABLED)),
        SignIn::Ok { session, .. } => session,
    };
    let mut r = layout::secure(Redirect::to(&next).into_response());
    set_cookie(
        &mut r,
        &cookies::set_cookie(
            cookies::SESSION_COOKIE,
            &session,
            "/",
            signed::SESSION_TTL_MS / 1000,
            https,
        ),
    );
    set_cookie(
        &mut r,
        &cookies::set_cookie(cookies::PRELOGIN_COOKIE, "", LOGIN_PATH, 0, https),
    );
    Ok(r)
}

/// `POST /logout`: ends the account's browser sessions and clears the cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    users::sign_out(&state, &posted.viewer.who).await?;
    let mut r = layout::secure(Redirect::to(LOGIN_PATH).into_response());
    set_cookie(
        &mut r,
        &cookies::set_cookie(cookies::SESSION_COOKIE, "", "/", 0, posted.viewer.https),
    );
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::local_next;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(local_next(Some("/workspaces/a?x=1")), "/workspaces/a?x=1");
        for bad in [
            "//evil.example/",
            "https://evil.example/",
            "/\\evil.example",
            "",
            "x",
        ] {
            assert_eq!(local_next(Some(bad)), "/", "{bad}");
        }
        assert_eq!(local_next(None), "/");
    }
}
