//! Which kind of host a request is for, from `Host` (HTTP/1.1) or `:authority` (HTTP/2).

use crate::config::ProxyConfig;
use http::Request;

/// The route a host name selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// `{port}-{workspace}.{domain}`: one endpoint of a workspace.
    Endpoint { workspace: String, port: u16 },
    /// `terminal-{workspace}.{domain}`: the web terminal of a workspace.
    Terminal { workspace: String },
    /// `auth.{domain}`: the sign-in callback host.
    Auth,
}

/// A request's host, lowercased and without its port, and the route it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The host name alone (what a host-only cookie is bound to).
    pub host: String,
    pub route: Route,
}

impl Target {
    /// The workspace this host belongs to, if any.
    pub fn workspace(&self) -> Option<&str> {
        match &self.route {
            Route::Endpoint { workspace, .. } | Route::Terminal { workspace } => Some(workspace),
            Route::Auth => None,
        }
    }

    /// This host's counterpart for the entry `name`: the same port (or terminal) under the
    /// same domain — where a redirect to that entry sends a client.
    pub fn host_for(&self, name: &str) -> Option<String> {
        let (_, domain) = self.host.split_once('.')?;
        match &self.route {
            Route::Endpoint { port, .. } => Some(format!("{port}-{name}.{domain}")),
            Route::Terminal { .. } => Some(format!("terminal-{name}.{domain}")),
            Route::Auth => None,
        }
    }

    /// The port asked of the server: `None` is the workspace itself (the terminal).
    pub fn port(&self) -> Option<u16> {
        match &self.route {
            Route::Endpoint { port, .. } => Some(*port),
            _ => None,
        }
    }
}

/// The host a request names: the URI's authority (HTTP/2, absolute-form) or `Host`.
pub(crate) fn request_host<B>(req: &Request<B>) -> Option<String> {
    if let Some(a) = req.uri().authority() {
        return Some(a.host().to_ascii_lowercase());
    }
    let h = req.headers().get(http::header::HOST)?.to_str().ok()?;
    let a: http::uri::Authority = h.parse().ok()?;
    Some(a.host().to_ascii_lowercase())
}

/// Is `name` a plausible workspace name (a DNS label)? Anything else is a 404 at once.
fn is_label(name: &str) -> bool {
    warren_types::is_dns_label(name, 63)
}

/// Parses a host name (no port) under the workspace domain.
pub(crate) fn parse(config: &ProxyConfig, host: &str) -> Option<Target> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let domain = config.workspace_domain.to_ascii_lowercase();
    let label = host.strip_suffix(&domain)?.strip_suffix('.')?;
    if label.contains('.') {
        return None;
    }
    let route = if label == "auth" {
        Route::Auth
    } else if let Some(ws) = label.strip_prefix("terminal-") {
        if !is_label(ws) {
            return None;
        }
        Route::Terminal {
            workspace: ws.to_owned(),
        }
    } else {
        let (port, ws) = label.split_once('-')?;
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let port: u16 = port.parse().ok()?;
        if port == 0 || !is_label(ws) {
            return None;
        }
        Route::Endpoint {
            workspace: ws.to_owned(),
            port,
        }
    };
    Some(Target {
        host: host.to_owned(),
        route,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ProxyConfig {
        crate::config::tests::sample()
    }

    #[test]
    fn counterpart_hosts_keep_the_port_or_terminal() {
        let c = config();
        let t = parse(&c, "8080-old-name.ws.example.com").unwrap();
        assert_eq!(
            t.host_for("new-name").as_deref(),
            Some("8080-new-name.ws.example.com")
        );
        let t = parse(&c, "terminal-old-name.ws.example.com").unwrap();
        assert_eq!(
            t.host_for("new-name").as_deref(),
            Some("terminal-new-name.ws.example.com")
        );
        assert_eq!(
            parse(&c, "auth.ws.example.com").unwrap().host_for("x"),
            None
        );
    }

    #[test]
    fn hosts() {
        let c = config();
        assert_eq!(
            parse(&c, "8080-brave-otter.ws.example.com").unwrap().route,
            Route::Endpoint {
                workspace: "brave-otter".into(),
                port: 8080
            }
        );
        assert_eq!(
            parse(&c, "Terminal-Brave-Otter.WS.example.com.").unwrap(),
            Target {
                host: "terminal-brave-otter.ws.example.com".into(),
                route: Route::Terminal {
                    workspace: "brave-otter".into()
                }
            }
        );
        assert_eq!(parse(&c, "auth.ws.example.com").unwrap().route, Route::Auth);
        for bad in [
            "ws.example.com",
            "example.com",
            "8080-x.other.com",
            "a.8080-x.ws.example.com",
            "0-x.ws.example.com",
            "70000-x.ws.example.com",
            "8080-.ws.example.com",
            "x-8080.ws.example.com",
            "terminal-.ws.example.com",
            "8080-x_y.ws.example.com",
            "8080-xws.example.com",
        ] {
            assert_eq!(parse(&c, bad), None, "{bad}");
        }
    }

    #[test]
    fn host_from_header_or_authority() {
        let r = Request::get("/x")
            .header("host", "8080-a.ws.example.com:7080")
            .body(())
            .unwrap();
        assert_eq!(request_host(&r).as_deref(), Some("8080-a.ws.example.com"));
        let r = Request::get("http://AUTH.ws.example.com:9/x")
            .body(())
            .unwrap();
        assert_eq!(request_host(&r).as_deref(), Some("auth.ws.example.com"));
        let r = Request::get("/x").body(()).unwrap();
        assert_eq!(request_host(&r), None);
    }
}
