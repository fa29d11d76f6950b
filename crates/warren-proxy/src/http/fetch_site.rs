//! Cross-site request refusal for browsers signed in by the proxy's session cookie.
//!
//! Every workspace host is the same *site* (one registrable domain), so `SameSite=Lax` does
//! not keep a page served by one workspace from posting to, fetching with credentials from,
//! or opening a WebSocket to another workspace's host: the browser attaches the visitor's
//! session cookie for that host. A page of the workspace one visits would act as the
//! visitor on every other workspace they can reach (their editor included).
//!
//! So a cookie-authenticated request that changes state (any method but GET, HEAD, OPTIONS)
//! or switches protocols (a WebSocket, whatever its method) must come from a page of the
//! same origin — or of another host of the same workspace, which serves the same tenant's
//! content and already reaches every port of it from inside. The browser says where the
//! request comes from in `Sec-Fetch-Site` (a header pages cannot set); browsers too old for
//! it still send `Origin` on such requests. Clients that send neither are not browsers, and
//! cannot be made to carry someone else's cookie. Bearer tokens are never ambient, so the
//! check is only for the cookie.

use super::host::{self, Route};
use http::request::Parts;
use http::{header, Method};

/// Why a cookie-authenticated request is refused, if it is.
pub(crate) fn refusal(
    config: &crate::ProxyConfig,
    parts: &Parts,
    this: &host::Target,
) -> Option<&'static str> {
    let upgrade = parts.headers.contains_key(header::UPGRADE);
    let safe = matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if safe && !upgrade {
        return None;
    }
    let origin = parts.headers.get(header::ORIGIN).map(|o| o.as_bytes());
    match parts.headers.get("sec-fetch-site").map(|v| v.as_bytes()) {
        Some(b"same-origin") | Some(b"none") => None,
        // Same-site is every other workspace host: only another port of this very workspace
        // is welcome, and only the `Origin` can tell which host it was.
        Some(b"same-site") if origin.is_some_and(|o| same_workspace(config, parts, this, o)) => {
            None
        }
        // `cross-site`, another workspace's host, or a value no browser sends.
        Some(_) => Some(if upgrade {
            "cross-site request refused: a WebSocket from a page of another site or another workspace cannot use your session here"
        } else {
            "cross-site request refused: a page of another site or another workspace cannot send this request with your session"
        }),
        None => match origin {
            Some(o) if !same_workspace(config, parts, this, o) => Some(
                "cross-site request refused: its Origin is neither this host nor another host of this workspace",
            ),
            _ => None,
        },
    }
}

/// Whether `origin` is this request's own origin or one of this workspace's other hosts,
/// on the proxy's public scheme. `null` (a sandboxed or opaque page) is neither.
fn same_workspace(
    config: &crate::ProxyConfig,
    parts: &Parts,
    this: &host::Target,
    origin: &[u8],
) -> bool {
    let Some(origin) = std::str::from_utf8(origin)
        .ok()
        .and_then(|o| url::Url::parse(o).ok())
    else {
        return false;
    };
    let scheme = config.public_scheme.as_str();
    if origin.scheme() != scheme
        || origin.path() != "/"
        || origin.query().is_some()
        || !origin.username().is_empty()
    {
        return false;
    }
    let Some(origin_host) = origin.host_str() else {
        return false;
    };
    // The port the client reached us on (a default one is left out of `Origin`).
    let default = if scheme == "https" { 443 } else { 80 };
    let own_port = super::signin::request_authority(parts)
        .and_then(|a| a.parse::<http::uri::Authority>().ok())
        .and_then(|a| a.port_u16())
        .unwrap_or(default);
    if origin.port().unwrap_or(default) != own_port {
        return false;
    }
    let origin_host = origin_host.to_ascii_lowercase();
    if origin_host == this.host {
        return true;
    }
    // Another port's host of the same workspace; never the terminal or the auth host.
    match (host::parse(config, &origin_host), &this.route) {
        (
            Some(host::Target {
                route: Route::Endpoint {
                    workspace: theirs, ..
                },
                ..
            }),
            Route::Endpoint {
                workspace: ours, ..
            },
        ) => theirs == *ours,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: &str, headers: &[(&str, &str)]) -> Option<&'static str> {
        let config = crate::config::tests::sample();
        let mut b = http::Request::builder()
            .method(method)
            .uri("/x")
            .header("host", "8080-a.ws.example.com");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let (parts, ()) = b.body(()).unwrap().into_parts();
        let target = host::parse(&config, "8080-a.ws.example.com").unwrap();
        refusal(&config, &parts, &target)
    }

    #[test]
    fn state_changes_and_upgrades_only_from_this_workspace() {
        let scheme = crate::config::tests::sample().public_scheme;
        let own = format!("{scheme}://8080-a.ws.example.com");
        let sibling = format!("{scheme}://3000-a.ws.example.com");
        let other = format!("{scheme}://8080-b.ws.example.com");
        let terminal = format!("{scheme}://terminal-a.ws.example.com");
        let ws = ("upgrade", "websocket");
        // Safe methods pass from anywhere; upgrades do not.
        assert_eq!(check("GET", &[("sec-fetch-site", "cross-site")]), None);
        assert!(check("GET", &[ws, ("sec-fetch-site", "cross-site")]).is_some());
        assert!(check("GET", &[ws, ("origin", &other)]).is_some());
        assert_eq!(check("GET", &[ws, ("origin", &own)]), None);
        // Sec-Fetch-Site decides when present.
        for site in ["same-origin", "none"] {
            assert_eq!(check("POST", &[("sec-fetch-site", site)]), None, "{site}");
        }
        for site in ["cross-site", "same-site", "bogus"] {
            assert!(
                check("POST", &[("sec-fetch-site", site)]).is_some(),
                "{site}"
            );
        }
        assert!(check(
            "PUT",
            &[("sec-fetch-site", "same-site"), ("origin", &other)]
        )
        .is_some());
        assert!(check(
            "POST",
            &[("sec-fetch-site", "same-site"), ("origin", &terminal)]
        )
        .is_some());
        assert_eq!(
            check(
                "POST",
                &[("sec-fetch-site", "same-site"), ("origin", &sibling)]
            ),
            None
        );
        // Without it, Origin decides; without both, not a browser.
        assert_eq!(check("DELETE", &[]), None);
        assert_eq!(check("POST", &[("origin", &own)]), None);
        assert_eq!(check("POST", &[("origin", &sibling)]), None);
        for o in [
            other.as_str(),
            "null",
            "http://evil.example.com",
            &format!("{scheme}://8080-a.ws.example.com:8443"),
            &format!("{scheme}://auth.ws.example.com"),
            &terminal,
        ] {
            assert!(check("POST", &[("origin", o)]).is_some(), "{o}");
        }
    }
}
