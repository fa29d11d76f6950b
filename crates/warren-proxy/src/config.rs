//! The proxy's configuration, validated before anything is bound.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Longest time a positive authorisation answer may be reused (access.md: ≤ 60 s).
pub const MAX_AUTHORIZATION_CACHE_SECS: u64 = 60;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Holds the proxy's keys: cookie signing keys and the SSH host key.
    pub state_dir: PathBuf,
    /// Workspace hosts are `{port}-{workspace}.{workspace_domain}`; the sign-in callback is
    /// `auth.{workspace_domain}` and the web terminal `terminal-{workspace}.{workspace_domain}`.
    pub workspace_domain: String,
    /// Scheme browsers use for workspace hosts: `http` or `https` (cookies are `Secure` then).
    #[serde(default = "default_scheme")]
    pub public_scheme: String,
    /// Port browsers use for workspace hosts; `None` is the scheme's default port.
    #[serde(default)]
    pub public_port: Option<u16>,
    /// The server as the proxy reaches it (internal endpoints, OAuth token exchange).
    pub server_url: url::Url,
    /// The server as browsers reach it (the authorize endpoint and login page).
    pub server_public_url: url::Url,
    /// A relay's internal listener (any instance; relays route among themselves).
    pub relay_url: url::Url,
    /// The relay ↔ server ↔ proxy shared secret (HS256 internal JWTs).
    pub shared_secret: String,
    /// The proxy's OAuth client (registered on the server as first-party, confidential, with
    /// redirect URI [`ProxyConfig::callback_url`]).
    pub oauth_client_id: String,
    pub oauth_client_secret: String,
    /// How long a workspace session cookie is valid.
    #[serde(default = "default_session_lifetime")]
    pub session_lifetime_secs: u64,
    /// How long a positive authorisation answer is reused (at most 60 s).
    #[serde(default = "default_authorization_cache")]
    pub authorization_cache_secs: u64,
    /// How often activity is reported to the server.
    #[serde(default = "default_activity_report")]
    pub activity_report_secs: u64,
    /// Direct mode: dial workspaces at this address template instead of through the relay,
    /// where the network allows it (e.g. `{workspace}.{namespace}.svc.cluster.local:{port}`).
    /// Authentication and authorisation are the same either way.
    #[serde(default)]
    pub direct_upstream: Option<String>,
    /// TLS for the HTTP listener (PEM files); both or neither.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// A PEM bundle of CAs trusted for `server_url` besides the public roots (a server
    /// serving a certificate from a private CA).
    #[serde(default)]
    pub server_ca_file: Option<PathBuf>,
    /// The SSH host key (OpenSSH format); default `state_dir/ssh_host_ed25519_key`,
    /// generated once.
    #[serde(default)]
    pub ssh_host_key_file: Option<PathBuf>,
    /// Bounds on slow and numerous clients.
    #[serde(default)]
    pub limits: ConnectionLimits,
    /// The region this proxy is the front door of (a DNS label, as the region's agents'
    /// `region` says); `None`: a central proxy. The server points the workspace URLs of the
    /// region's agents at this proxy's `workspace_domain` while it serves.
    #[serde(default)]
    pub region: Option<String>,
    /// Where SSH clients reach this proxy's SSH server (`host:port`), when it is a region's:
    /// `warren ws ssh` to the region's workspaces goes there instead of the central proxy.
    #[serde(default)]
    pub ssh_public_address: Option<String>,
}

/// Bounds on what clients may hold open: slow clients (slowloris) and too many at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConnectionLimits {
    /// HTTP connections open at once; one more is answered 503 and closed.
    pub max_http_connections: usize,
    /// SSH connections open at once; one more is closed.
    pub max_ssh_connections: usize,
    /// Seconds a client has for its first byte, and for each request's headers (HTTP/1.1).
    pub header_timeout_secs: u64,
    /// Seconds an SSH client has for the handshake (then 60 s to authenticate).
    pub ssh_handshake_timeout_secs: u64,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_http_connections: 4096,
            max_ssh_connections: 1024,
            header_timeout_secs: 15,
            ssh_handshake_timeout_secs: 30,
        }
    }
}

/// The SSH host key's file in the state directory (unless `ssh_host_key_file` says otherwise).
pub const SSH_HOST_KEY_FILE: &str = "ssh_host_ed25519_key";

/// The OAuth client id a proxy uses unless told otherwise (`warren up` registers it).
pub const DEFAULT_OAUTH_CLIENT_ID: &str = "warren-proxy";
/// Default session cookie lifetime.
pub const DEFAULT_SESSION_LIFETIME_SECS: u64 = 12 * 3600;
/// Default reuse of a positive authorisation answer.
pub const DEFAULT_AUTHORIZATION_CACHE_SECS: u64 = 30;
/// Default interval of activity reports.
pub const DEFAULT_ACTIVITY_REPORT_SECS: u64 = 5;

fn default_scheme() -> String {
    "http".into()
}
fn default_session_lifetime() -> u64 {
    DEFAULT_SESSION_LIFETIME_SECS
}
fn default_authorization_cache() -> u64 {
    DEFAULT_AUTHORIZATION_CACHE_SECS
}
fn default_activity_report() -> u64 {
    DEFAULT_ACTIVITY_REPORT_SECS
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid proxy configuration: {field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

impl ProxyConfig {
    /// A proxy for `workspace_domain` keeping its state in `state_dir`, calling the server
    /// (reached by browsers at the same URL) and a relay, with every other setting at its
    /// default: plain HTTP on the scheme's port, no secrets yet (set `shared_secret` and
    /// `oauth_client_secret`; [`ProxyConfig::validate`] refuses it without them).
    pub fn new(
        state_dir: PathBuf,
        workspace_domain: &str,
        server_url: url::Url,
        relay_url: url::Url,
    ) -> ProxyConfig {
        ProxyConfig {
            state_dir,
            workspace_domain: workspace_domain.to_owned(),
            public_scheme: "http".into(),
            public_port: None,
            server_public_url: server_url.clone(),
            server_url,
            relay_url,
            shared_secret: String::new(),
            oauth_client_id: DEFAULT_OAUTH_CLIENT_ID.into(),
            oauth_client_secret: String::new(),
            session_lifetime_secs: DEFAULT_SESSION_LIFETIME_SECS,
            authorization_cache_secs: DEFAULT_AUTHORIZATION_CACHE_SECS,
            activity_report_secs: DEFAULT_ACTIVITY_REPORT_SECS,
            direct_upstream: None,
            tls_cert_file: None,
            tls_key_file: None,
            server_ca_file: None,
            ssh_host_key_file: None,
            limits: ConnectionLimits::default(),
            region: None,
            ssh_public_address: None,
        }
    }

    /// Checks everything that can be checked without binding or dialling.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let d = &self.workspace_domain;
        if d.is_empty()
            || d.starts_with('.')
            || d.ends_with('.')
            || d.contains(':')
            || !d
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        {
            return Err(invalid(
                "workspace_domain",
                format!("`{d}` is not a DNS name (no scheme, port or trailing dot)"),
            ));
        }
        if self.public_scheme != "http" && self.public_scheme != "https" {
            return Err(invalid("public_scheme", "must be `http` or `https`"));
        }
        if self.shared_secret.len() < 32 {
            return Err(invalid("shared_secret", "must be at least 32 bytes"));
        }
        if self.oauth_client_id.is_empty() || self.oauth_client_secret.is_empty() {
            return Err(invalid(
                "oauth_client_id",
                "the OAuth client id and secret are required",
            ));
        }
        if self.session_lifetime_secs < 60 {
            return Err(invalid("session_lifetime_secs", "must be at least 60"));
        }
        if self.authorization_cache_secs > MAX_AUTHORIZATION_CACHE_SECS {
            return Err(invalid(
                "authorization_cache_secs",
                format!("must be at most {MAX_AUTHORIZATION_CACHE_SECS} (access.md)"),
            ));
        }
        let l = &self.limits;
        if l.max_http_connections == 0 || l.max_ssh_connections == 0 {
            return Err(invalid(
                "limits",
                "max_http_connections and max_ssh_connections must be at least 1",
            ));
        }
        if l.header_timeout_secs == 0 || l.ssh_handshake_timeout_secs == 0 {
            return Err(invalid(
                "limits",
                "header_timeout_secs and ssh_handshake_timeout_secs must be at least 1",
            ));
        }
        if self.activity_report_secs == 0 {
            return Err(invalid("activity_report_secs", "must be at least 1"));
        }
        if let Some(t) = &self.direct_upstream {
            if !t.contains("{port}") {
                return Err(invalid(
                    "direct_upstream",
                    "the template must contain `{port}`",
                ));
            }
        }
        if self.tls_cert_file.is_some() != self.tls_key_file.is_some() {
            return Err(invalid(
                "tls_cert_file",
                "give both the TLS certificate and key, or neither",
            ));
        }
        if self.tls_cert_file.is_some() && self.public_scheme != "https" {
            // Browsers reach a proxy serving TLS over https: the URLs it makes must say so
            // (and its cookies be Secure).
            return Err(invalid(
                "public_scheme",
                "must be `https` when the proxy serves TLS",
            ));
        }
        if let Some(r) = &self.region {
            if !warren_types::is_dns_label(r, 63) {
                return Err(invalid(
                    "region",
                    format!("`{r}` is not a region name (1-63 of a-z, 0-9 and '-', not starting or ending with '-')"),
                ));
            }
        }
        if let Some(a) = &self.ssh_public_address {
            if warren_types::parse_ssh_address(a).is_none() {
                return Err(invalid(
                    "ssh_public_address",
                    format!(
                        "`{a}` is not host:port (a host not starting with '-', a port 1-65535)"
                    ),
                ));
            }
        }
        for (field, u) in [
            ("server_url", &self.server_url),
            ("server_public_url", &self.server_public_url),
            ("relay_url", &self.relay_url),
        ] {
            if u.scheme() != "http" && u.scheme() != "https" {
                return Err(invalid(field, format!("`{u}` is not an http(s) URL")));
            }
        }
        Ok(())
    }

    /// `host[:port]` as browsers write it for a host under the workspace domain.
    pub fn public_authority(&self, host: &str) -> String {
        let default = if self.public_scheme == "https" {
            443
        } else {
            80
        };
        match self.public_port {
            Some(p) if p != default => format!("{host}:{p}"),
            _ => host.to_owned(),
        }
    }

    /// The sign-in host: the only OAuth redirect URI, whatever workspace is signed in to.
    pub fn auth_host(&self) -> String {
        format!("auth.{}", self.workspace_domain)
    }

    /// The OAuth redirect URI registered for the proxy.
    pub fn callback_url(&self) -> String {
        format!(
            "{}://{}/oauth/callback",
            self.public_scheme,
            self.public_authority(&self.auth_host())
        )
    }

    /// What this proxy tells the server about where it serves, as process `instance`.
    pub fn presence(&self, instance: &str) -> warren_types::internal::ProxyPresence {
        let authority = self.public_authority(&self.workspace_domain);
        warren_types::internal::ProxyPresence {
            instance: instance.to_owned(),
            region: self.region.clone(),
            workspace_domain: self.workspace_domain.clone(),
            public_scheme: self.public_scheme.clone(),
            public_port: (authority != self.workspace_domain)
                .then_some(self.public_port)
                .flatten(),
            ssh_address: self.ssh_public_address.clone(),
        }
    }

    pub fn ssh_host_key_path(&self) -> PathBuf {
        self.ssh_host_key_file
            .clone()
            .unwrap_or_else(|| self.state_dir.join(SSH_HOST_KEY_FILE))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> ProxyConfig {
        ProxyConfig {
            public_port: Some(7080),
            shared_secret: "x".repeat(32),
            oauth_client_id: "proxy".into(),
            oauth_client_secret: "secret".into(),
            authorization_cache_secs: 30,
            activity_report_secs: 5,
            session_lifetime_secs: 3600,
            ..ProxyConfig::new(
                std::env::temp_dir(),
                "ws.example.com",
                "http://127.0.0.1:1".parse().unwrap(),
                "http://127.0.0.1:2".parse().unwrap(),
            )
        }
    }

    #[test]
    fn regions_and_ssh_addresses_are_checked() {
        for (region, ssh, field) in [
            (Some("EU"), None, "region"),
            (Some("-eu"), None, "region"),
            (None, Some("ssh.eu.example"), "ssh_public_address"),
            (None, Some("ssh.eu.example:0"), "ssh_public_address"),
            (None, Some("-oProxyCommand=x:22"), "ssh_public_address"),
        ] {
            let c = ProxyConfig {
                region: region.map(str::to_owned),
                ssh_public_address: ssh.map(str::to_owned),
                ..sample()
            };
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
        let c = ProxyConfig {
            region: Some("eu-west".into()),
            ssh_public_address: Some("ssh.eu.example:2222".into()),
            ..sample()
        };
        c.validate().unwrap();
        let p = c.presence("i");
        assert_eq!(
            (p.region.as_deref(), p.public_port, p.ssh_address.as_deref()),
            (Some("eu-west"), Some(7080), Some("ssh.eu.example:2222"))
        );
        let default_port = ProxyConfig {
            public_port: Some(80),
            ..c
        };
        assert_eq!(default_port.presence("i").public_port, None);
    }

    #[test]
    fn sample_is_valid() {
        sample().validate().unwrap();
        assert_eq!(
            sample().callback_url(),
            "http://auth.ws.example.com:7080/oauth/callback"
        );
    }
}
