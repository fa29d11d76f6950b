//! The browser side's cookies in HTTP terms: reading them from a request, writing
//! `Set-Cookie`, and whether the browser is on https (so they are `Secure`). What they hold
//! is signed by `crate::app::oauth::signed`.
//!
//! `Secure` follows what the server knows, never what any client says: its own listener is
//! TLS ([`ServedOverTls`]), or the TCP peer is one of `trusted_proxies` and that proxy says
//! `X-Forwarded-Proto: https`. From anyone else the header is ignored — as with
//! `X-Forwarded-For` (`crate::http::client_addr`). The harmful direction is an attacker's
//! header turning `Secure` off on a TLS deployment (the session cookie would then also go
//! out over plain http to this host); the other one, `Secure` on over plain http, makes
//! browsers drop the cookie: a sign-in loop.

use http::request::Parts;
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

/// A `Set-Cookie` value: HttpOnly, SameSite=Lax, `Secure` when the browser is on https
/// ([`is_https`]).
pub fn set_cookie(name: &str, value: &str, path: &str, max_age_secs: i64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{name}={value}; Path={path}; Max-Age={max_age_secs}; HttpOnly; SameSite=Lax{secure}")
}

/// A request extension: the request arrived on the server's own TLS listener (set by
/// `crate::server::Server::serve`).
#[derive(Debug, Clone, Copy)]
pub struct ServedOverTls;

/// Whether the browser reached the server over https: the server's own listener is TLS,
/// or the TCP peer is a trusted reverse proxy whose `X-Forwarded-Proto` says so. A request
/// without a peer (a test driving the router without a socket) is from nobody trusted.
pub fn is_https(parts: &Parts, trusted_proxies: &[ipnet::IpNet]) -> bool {
    if parts.extensions.get::<ServedOverTls>().is_some() {
        return true;
    }
    let Some(peer) = parts
        .extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
    else {
        return false;
    };
    trusted_proxies.iter().any(|n| n.contains(&peer)) && forwarded_https(&parts.headers)
}

/// `X-Forwarded-Proto` as the nearest proxy wrote it: the right-most entry, since a proxy
/// that appends rather than replaces leaves whatever the client sent to the left of its own.
fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get_all("x-forwarded-proto")
        .iter()
        .next_back()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// [`is_https`] as an extractor, for handlers that set cookies.
#[derive(Debug, Clone, Copy)]
pub struct Https(pub bool);

impl axum::extract::FromRequestParts<crate::http::HttpState> for Https {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::http::HttpState,
    ) -> Result<Self, Self::Rejection> {
        Ok(Https(is_https(parts, &state.trusted_proxies)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(peer: Option<&str>, tls: bool, proto: &[&str]) -> Parts {
        let mut b = http::Request::builder();
        for p in proto {
            b = b.header("x-forwarded-proto", *p);
        }
        let (mut parts, ()) = b.body(()).unwrap().into_parts();
        if let Some(p) = peer {
            let addr: std::net::SocketAddr = format!("{p}:5555").parse().unwrap();
            parts.extensions.insert(axum::extract::ConnectInfo(addr));
        }
        if tls {
            parts.extensions.insert(ServedOverTls);
        }
        parts
    }

    #[test]
    fn https_from_the_listener_or_a_trusted_proxy_only() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        // The server's own TLS: whatever a client says.
        assert!(is_https(
            &parts(Some("192.0.2.1"), true, &["http"]),
            &trusted
        ));
        assert!(is_https(&parts(None, true, &[]), &trusted));
        // A client that is no trusted proxy is not believed.
        assert!(!is_https(
            &parts(Some("192.0.2.1"), false, &["https"]),
            &trusted
        ));
        assert!(!is_https(&parts(None, false, &["https"]), &trusted));
        assert!(!is_https(&parts(Some("10.0.0.2"), false, &["https"]), &[]));
        // A trusted proxy is, its own (right-most) word counting.
        assert!(is_https(
            &parts(Some("10.0.0.2"), false, &["https"]),
            &trusted
        ));
        assert!(is_https(
            &parts(Some("10.0.0.2"), false, &["HTTPS"]),
            &trusted
        ));
        assert!(is_https(
            &parts(Some("10.0.0.2"), false, &["http, https"]),
            &trusted
        ));
        assert!(is_https(
            &parts(Some("10.0.0.2"), false, &["http", "https"]),
            &trusted
        ));
        assert!(!is_https(
            &parts(Some("10.0.0.2"), false, &["https, http"]),
            &trusted
        ));
        assert!(!is_https(&parts(Some("10.0.0.2"), false, &[]), &trusted));
    }
}
