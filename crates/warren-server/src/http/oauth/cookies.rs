//! The browser side's cookies in HTTP terms: reading them from a request, writing
//! `Set-Cookie`. What they hold is signed by `crate::app::oauth::signed`.

use http::HeaderMap;

/// The server session: who signed in, until when. One for the whole server (path `/`): the
/// web UI and the OAuth pages share it, so a user signed in to the UI opens a workspace's
/// host without signing in again.
pub const SESSION_COOKIE: &str = "warren_session";
/// A random value set with a login page; the login form's CSRF token is bound to it (path
/// `/oauth` for the OAuth login page, `/login` for the web UI's).
pub const PRELOGIN_COOKIE: &str = "warren_login";

/// The value of cookie `name` in the request, if any.
pub fn get<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim_matches('"'))
        .filter(|v| !v.is_empty())
}

/// The pre-login cookie's value: the request's own when it has a plausible one (so several
/// tabs of a login page keep working), else a new random one.
pub fn prelogin_value(headers: &HeaderMap) -> String {
    get(headers, PRELOGIN_COOKIE)
        .filter(|c| c.len() >= 32 && c.len() <= 64)
        .map(str::to_owned)
        .unwrap_or_else(|| crate::crypto::random_secret(32))
}

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, `Secure` when the request came over TLS
/// (as a reverse proxy in front reports it).
pub fn set_cookie(name: &str, value: &str, path: &str, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax{secure}")
}

/// Whether the request came over TLS (directly or via a proxy that says so).
pub fn is_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}
