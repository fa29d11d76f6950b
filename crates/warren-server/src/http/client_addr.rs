//! The client's address behind trusted reverse proxies (`X-Forwarded-For`), as an extractor.

use crate::http::HttpState;

/// The client's address: the listener's peer, or, when the peer is a trusted reverse proxy,
/// the address that proxy names in `X-Forwarded-For` ([`client_address`]). `None` where a
/// test drives the router without a socket.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<std::net::IpAddr>);

impl axum::extract::FromRequestParts<HttpState> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        state: &HttpState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map(|c| c.0.ip());
        Ok(ClientAddr(peer.map(|p| {
            client_address(p, &parts.headers, &state.trusted_proxies)
        })))
    }
}

/// Walks `X-Forwarded-For` from the right (the hop nearest to us) while the hop is a trusted
/// proxy; the first untrusted address is the client. Unparsable entries end the walk at the
/// last trusted hop, so a forged or broken header never yields more than that hop.
pub fn client_address(
    peer: std::net::IpAddr,
    headers: &http::HeaderMap,
    trusted: &[ipnet::IpNet],
) -> std::net::IpAddr {
    let is_trusted = |a: &std::net::IpAddr| trusted.iter().any(|n| n.contains(a));
    if !is_trusted(&peer) {
        return peer;
    }
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut client = peer;
    for hop in hops.iter().rev() {
        match hop.parse::<std::net::IpAddr>() {
            Ok(a) => {
                client = a;
                if !is_trusted(&a) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xff(v: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert("x-forwarded-for", v.parse().unwrap());
        h
    }

    #[test]
    fn forwarded_for_is_believed_only_from_trusted_proxies() {
        let trusted: Vec<ipnet::IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        // Not from a trusted proxy: the header is ignored.
        assert_eq!(
            client_address(ip("192.0.2.1"), &xff("198.51.100.7"), &trusted),
            ip("192.0.2.1")
        );
        // From one: the right-most untrusted hop, past a chain of trusted ones.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                &xff("203.0.113.9, 198.51.100.7, 10.0.0.5"),
                &trusted
            ),
            ip("198.51.100.7")
        );
        // No header: the proxy itself.
        assert_eq!(
            client_address(ip("10.0.0.2"), &http::HeaderMap::new(), &trusted),
            ip("10.0.0.2")
        );
        // A broken entry stops the walk at the last good hop.
        assert_eq!(
            client_address(ip("10.0.0.2"), &xff("198.51.100.7, garbage"), &trusted),
            ip("10.0.0.2")
        );
        // No trusted proxies configured: always the peer.
        assert_eq!(
            client_address(ip("10.0.0.2"), &xff("198.51.100.7"), &[]),
            ip("10.0.0.2")
        );
    }
}
