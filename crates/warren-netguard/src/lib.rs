//! Which addresses Warren's own outbound requests may reach on a user's behalf.
//!
//! A signed-in user can make the server fetch a URL (a devfile's `parent.uri`, a registry, a
//! project's Git remote), and the agent fetch one (a dev container's Features, whose registry
//! names its own token realm and redirects: [`proxy`]). Without a guard that is server-side request forgery: the server
//! sits inside the operator's network, so "fetch `http://127.0.0.1:9090/`" or "fetch
//! `http://169.254.169.254/`" (every cloud's instance credentials) reads what only the server
//! can reach, and the error text maps the network for the attacker.
//!
//! The rule here: a destination is refused when its address is special-purpose — loopback,
//! private, link-local, shared (CGNAT), multicast, unspecified, reserved or documentation,
//! in IPv4 or IPv6, including IPv4 addresses embedded in IPv6 — unless the operator's
//! allow-list names it. The check runs on the *resolved* addresses, and the connection is
//! made to exactly those addresses ([`Guard::client`] installs the guard as the HTTP client's
//! resolver), so a name that resolves to a public address at check time and to `127.0.0.1`
//! at connect time (DNS rebinding) gains nothing. Every redirect goes through the same
//! resolver, and redirects to address literals are checked by the redirect policy, because
//! an address literal never reaches a resolver.

pub mod proxy;

use ipnet::IpNet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Why a destination was refused. Messages name the host as the user wrote it and never the
/// addresses it resolved to: what a name resolves to inside the operator's network is not the
/// user's to learn.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GuardError {
    #[error(
        "{host} does not resolve to a public address; Warren fetches only from public \
         addresses unless its operator allows the range"
    )]
    NotPublic { host: String },
    /// Said in the same words as [`GuardError::NotPublic`]: otherwise a user could tell
    /// which internal names the server's resolver knows.
    #[error(
        "{host} does not resolve to a public address; Warren fetches only from public \
         addresses unless its operator allows the range"
    )]
    Unresolved { host: String },
    #[error("scheme {0:?} is not fetched (http, https)")]
    Scheme(String),
    #[error("the URL names no host")]
    NoHost,
    #[error("URLs with credentials are refused")]
    Credentials,
    #[error("more than {0} redirects")]
    TooManyRedirects(usize),
}

/// The kind of special-purpose range `ip` is in, or `None` for a public address.
pub fn special_purpose(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "this network",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "private",
        (100, 64..=127, _) => "shared address space (CGNAT)",
        (127, _, _) => "loopback",
        (169, 254, _) => "link-local (cloud metadata)",
        (192, 0, 0) => "IETF protocol assignments",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (198, 18..=19, _) => "benchmarking",
        (224..=239, _, _) => "multicast",
        (240..=255, _, _) => "reserved",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // IPv4-mapped (::ffff:a.b.c.d): the kernel connects to the IPv4 address itself.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4);
    }
    match s[0] {
        // IPv4-compatible (::a.b.c.d, deprecated) and the rest of ::/96.
        0 if s[1..6].iter().all(|x| *x == 0) => Some("reserved"),
        // NAT64 well-known prefix: the IPv4 address it translates to decides.
        0x64 if s[1] == 0xff9b && s[2..6].iter().all(|x| *x == 0) => {
            special_v4(embedded(s[6], s[7]))
        }
        0x64 if s[1] == 0xff9b && s[2] == 1 => Some("private"),
        0x100 if s[1..4].iter().all(|x| *x == 0) => Some("discard"),
        0x2001 if s[1] == 0x0db8 => Some("documentation"),
        // 6to4: the embedded IPv4 address is where the packets end up.
        0x2002 => special_v4(embedded(s[1], s[2])),
        x if x & 0xfe00 == 0xfc00 => Some("private"),
        x if x & 0xffc0 == 0xfe80 => Some("link-local"),
        x if x & 0xffc0 == 0xfec0 => Some("private"),
        x if x & 0xff00 == 0xff00 => Some("multicast"),
        // Teredo tunnels to an IPv4 address of the server's network's choosing.
        0x2001 if s[1] == 0 => Some("Teredo"),
        // Only 2000::/3 is global unicast; the rest is unassigned or special.
        x if x & 0xe000 != 0x2000 => Some("reserved"),
        _ => None,
    }
}

/// The policy for one process's outbound requests: special-purpose addresses are refused
/// unless one of `allow` contains them. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    allow: Arc<[IpNet]>,
}

impl Guard {
    /// A guard admitting, besides public addresses, the ranges in `allow` (the operator's
    /// allow-list: an internal Git forge, a registry on the same host).
    pub fn new(allow: Vec<IpNet>) -> Guard {
        Guard {
            allow: allow.into(),
        }
    }

    /// Whether a connection to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            // A mapped address is the IPv4 address for the allow-list too.
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        special_purpose(ip).is_none() || self.allow.iter().any(|n| n.contains(&ip))
    }

    /// The addresses `host` resolves to, when every one of them is allowed. A name with one
    /// refused address is refused whole: connecting to "the other one" would let a record
    /// set choose the target.
    pub async fn resolve(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, GuardError> {
        let bare = bare(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self
                .check_ip(host, ip)
                .map(|()| vec![SocketAddr::new(ip, port)]);
        }
        let unresolved = || GuardError::Unresolved {
            host: host.to_owned(),
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|_| unresolved())?
            .collect();
        if addrs.is_empty() {
            return Err(unresolved());
        }
        for a in &addrs {
            self.check_ip(host, a.ip())?;
        }
        Ok(addrs)
    }

    fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), GuardError> {
        if self.permits(ip) {
            return Ok(());
        }
        // The operator's log says why; the user's message does not.
        tracing::info!(
            host,
            address = %ip,
            range = special_purpose(ip).unwrap_or("special-purpose"),
            "outbound request to a special-purpose address refused"
        );
        Err(GuardError::NotPublic {
            host: host.to_owned(),
        })
    }

    /// Checks what can be checked of `url` without resolving it: an http(s) URL without
    /// credentials whose host, when it is an address literal, is allowed.
    pub fn check_url(&self, url: &url::Url) -> Result<(), GuardError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(GuardError::Scheme(url.scheme().to_owned()));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(GuardError::Credentials);
        }
        match url.host() {
            None => Err(GuardError::NoHost),
            Some(url::Host::Ipv4(ip)) => self.check_ip(&ip.to_string(), IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => self.check_ip(&format!("[{ip}]"), IpAddr::V6(ip)),
            Some(url::Host::Domain(_)) => Ok(()),
        }
    }

    /// `builder` made safe for user-chosen URLs: names resolve through this guard (and the
    /// connection goes to the addresses it checked), at most `max_redirects` redirects each
    /// checked like the first URL, and no proxy from the environment (a proxy would resolve
    /// the name itself, out of the guard's sight). Callers still call
    /// [`Guard::check_url`] on the first URL.
    pub fn client(
        &self,
        builder: reqwest::ClientBuilder,
        max_redirects: usize,
    ) -> reqwest::ClientBuilder {
        let guard = self.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max_redirects {
                return attempt.error(GuardError::TooManyRedirects(max_redirects));
            }
            match guard.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(e),
            }
        });
        builder
            .dns_resolver(Arc::new(self.clone()))
            .redirect(policy)
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
    }
}

/// `host` without the brackets of an IPv6 literal (`[::1]` → `::1`).
pub(crate) fn bare(host: &str) -> &str {
    host.trim_start_matches('[').trim_end_matches(']')
}

impl reqwest::dns::Resolve for Guard {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Port 0: reqwest puts the URL's port in.
            let addrs = guard.resolve(&host, 0).await?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The guard's refusal somewhere in `err`'s source chain, if that is why it failed.
pub fn refusal<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a GuardError> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cur {
        if let Some(g) = e.downcast_ref::<GuardError>() {
            return Some(g);
        }
        cur = e.source();
    }
    None
}

/// A message for the user about a failed request through a guarded client: the guard's
/// refusal when that is the cause, else only the kind of failure. Connection errors'
/// details ("connection refused" against "timed out" against "no route") would let a user
/// probe which hosts and ports exist, so they go to the operator's log alone.
pub fn user_message(err: &reqwest::Error) -> String {
    if let Some(g) = refusal(err) {
        return g.to_string();
    }
    let host = err
        .url()
        .and_then(|u| u.host_str())
        .unwrap_or("the host")
        .to_owned();
    tracing::info!(host, error = %warren_types::error_chain(err), "outbound request failed");
    if err.is_timeout() {
        format!("{host} did not answer in time")
    } else if err.is_connect() {
        format!("cannot connect to {host}")
    } else if err.is_redirect() {
        "the redirects could not be followed".to_owned()
    } else {
        format!("the request to {host} failed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_purpose_ranges_are_named() {
        for (ip, kind) in [
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("10.1.2.3", "private"),
            ("172.31.255.255", "private"),
            ("192.168.0.1", "private"),
            ("169.254.169.254", "link-local (cloud metadata)"),
            ("100.100.100.200", "shared address space (CGNAT)"),
            ("0.0.0.0", "this network"),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "reserved"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:169.254.169.254", "link-local (cloud metadata)"),
            ("::127.0.0.1", "reserved"),
            ("64:ff9b::a9fe:a9fe", "link-local (cloud metadata)"),
            ("2002:7f00:1::", "loopback"),
            ("fd00:ec2::254", "private"),
            ("fe80::1", "link-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("2001:0:4136:e378::1", "Teredo"),
            ("5f00::1", "reserved"),
            ("::ffff:0:7f00:1", "reserved"),
        ] {
            assert_eq!(
                special_purpose(ip.parse().unwrap()),
                Some(kind),
                "{ip} should be {kind}"
            );
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "64:ff9b::808:808",
        ] {
            assert_eq!(special_purpose(ip.parse().unwrap()), None, "{ip} is public");
        }
    }

    #[test]
    fn the_allow_list_admits_named_ranges_only() {
        let g = Guard::new(vec!["127.0.0.1/32".parse().unwrap()]);
        assert!(g.permits("127.0.0.1".parse().unwrap()));
        assert!(g.permits("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!g.permits("127.0.0.2".parse().unwrap()));
        assert!(!g.permits("169.254.169.254".parse().unwrap()));
        assert!(g.permits("93.184.216.34".parse().unwrap()));
        assert!(!Guard::default().permits("10.0.0.1".parse().unwrap()));
    }

    #[tokio::test]
    async fn names_are_checked_after_resolution() {
        let g = Guard::default();
        let err = g.resolve("localhost", 80).await.unwrap_err();
        assert_eq!(
            err,
            GuardError::NotPublic {
                host: "localhost".into()
            }
        );
        assert!(
            !err.to_string().contains("127.0.0.1"),
            "the message names no address: {err}"
        );
        let err = g.resolve("[::1]", 80).await.unwrap_err();
        assert!(matches!(err, GuardError::NotPublic { .. }), "{err}");
        let allowed = Guard::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]);
        let addrs = allowed.resolve("localhost", 8080).await.unwrap();
        assert!(addrs
            .iter()
            .all(|a| a.port() == 8080 && a.ip().is_loopback()));
    }

    #[test]
    fn urls_are_checked_before_sending() {
        let g = Guard::default();
        let check = |u: &str| g.check_url(&url::Url::parse(u).unwrap());
        assert!(matches!(
            check("http://169.254.169.254/latest/meta-data/"),
            Err(GuardError::NotPublic { .. })
        ));
        assert!(matches!(
            check("http://[::ffff:7f00:1]/"),
            Err(GuardError::NotPublic { .. })
        ));
        assert!(matches!(
            check("http://2130706433/"),
            Err(GuardError::NotPublic { .. })
        ));
        assert_eq!(
            check("file:///etc/passwd"),
            Err(GuardError::Scheme("file".into()))
        );
        assert_eq!(
            check("https://u:p@example.com/"),
            Err(GuardError::Credentials)
        );
        assert_eq!(check("https://example.com/devfile.yaml"), Ok(()));
    }
}
