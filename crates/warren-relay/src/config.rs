//! The relay's configuration, validated before anything is bound.

use serde::Deserialize;
use std::time::Duration;
use url::Url;

/// Shortest shared secret accepted (bytes): HS256 wants at least the hash's size.
pub const MIN_SECRET_LEN: usize = 32;

#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Base URL of the server (`/internal/agents/...` is appended).
    pub server_url: Url,
    /// The relay↔server shared secret for HS256 JWTs (both directions).
    pub shared_secret: String,
    /// How long an accepted agent token is trusted without asking the server again.
    #[serde(default = "default_auth_cache")]
    pub auth_cache_seconds: u64,
    /// How long a refused agent token is refused without asking again (short: a fixed token
    /// should work soon).
    #[serde(default = "default_auth_failure_cache")]
    pub auth_failure_cache_seconds: u64,
    /// How long a tunnel request waits for its agent to connect before answering 404.
    #[serde(default = "default_agent_wait")]
    pub agent_wait_seconds: u64,
    /// How long the agent may take to dial a workspace endpoint.
    #[serde(default = "default_dial_timeout")]
    pub dial_timeout_seconds: u64,
    /// An agent connection that opens no stream (agents ping every 15 s) for this long is
    /// closed: its host or network vanished without a TCP reset.
    #[serde(default = "default_agent_idle_timeout")]
    pub agent_idle_timeout_seconds: u64,
    /// The secret only relay instances share, for relay↔relay JWTs; required when the
    /// relay serves a relay↔relay listener or forwards to other instances.
    #[serde(default)]
    pub peer_secret: Option<String>,
    /// Serve the agents' listener over TLS with this certificate chain (PEM, leaf first)
    /// and `tls_key_file`; both are re-read when they change. The internal and relay↔relay
    /// listeners stay inside the cluster and serve plain HTTP.
    #[serde(default)]
    pub tls_cert_file: Option<std::path::PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<std::path::PathBuf>,
    /// A PEM bundle of CAs trusted for `server_url` besides the public roots (a server
    /// serving a certificate from a private CA).
    #[serde(default)]
    pub server_ca_file: Option<std::path::PathBuf>,
}

fn default_auth_cache() -> u64 {
    300
}
fn default_auth_failure_cache() -> u64 {
    10
}
fn default_agent_wait() -> u64 {
    20
}
fn default_dial_timeout() -> u64 {
    10
}
fn default_agent_idle_timeout() -> u64 {
    warren_types::relay::AGENT_IDLE_TIMEOUT_SECS
}

impl std::fmt::Debug for RelayConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConfig")
            .field("server_url", &self.server_url.as_str())
            .field("shared_secret", &"<redacted>")
            .field("auth_cache_seconds", &self.auth_cache_seconds)
            .field(
                "auth_failure_cache_seconds",
                &self.auth_failure_cache_seconds,
            )
            .field("agent_wait_seconds", &self.agent_wait_seconds)
            .field("dial_timeout_seconds", &self.dial_timeout_seconds)
            .field(
                "agent_idle_timeout_seconds",
                &self.agent_idle_timeout_seconds,
            )
            .field(
                "peer_secret",
                &self.peer_secret.as_ref().map(|_| "<redacted>"),
            )
            .field("tls_cert_file", &self.tls_cert_file)
            .field("tls_key_file", &self.tls_key_file)
            .field("server_ca_file", &self.server_ca_file)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("server_url {url} must be http or https")]
    ServerScheme { url: String },
    #[error("shared_secret has {len} bytes; at least {MIN_SECRET_LEN} are required")]
    SecretTooShort { len: usize },
    #[error("peer_secret has {len} bytes; at least {MIN_SECRET_LEN} are required")]
    PeerSecretTooShort { len: usize },
    #[error("peer_secret must differ from shared_secret")]
    PeerSecretReused,
    #[error("{field} must be greater than zero")]
    Zero { field: &'static str },
    #[error("tls_cert_file, tls_key_file")]
    Tls(#[source] warren_tls::TlsError),
}

impl RelayConfig {
    /// A configuration with the defaults for everything but the two required fields.
    pub fn new(server_url: Url, shared_secret: String) -> Self {
        RelayConfig {
            server_url,
            shared_secret,
            auth_cache_seconds: default_auth_cache(),
            auth_failure_cache_seconds: default_auth_failure_cache(),
            agent_wait_seconds: default_agent_wait(),
            dial_timeout_seconds: default_dial_timeout(),
            agent_idle_timeout_seconds: default_agent_idle_timeout(),
            peer_secret: None,
            tls_cert_file: None,
            tls_key_file: None,
            server_ca_file: None,
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !matches!(self.server_url.scheme(), "http" | "https") {
            return Err(ConfigError::ServerScheme {
                url: self.server_url.to_string(),
            });
        }
        if self.shared_secret.len() < MIN_SECRET_LEN {
            return Err(ConfigError::SecretTooShort {
                len: self.shared_secret.len(),
            });
        }
        if let Some(peer) = &self.peer_secret {
            if peer.len() < MIN_SECRET_LEN {
                return Err(ConfigError::PeerSecretTooShort { len: peer.len() });
            }
            if peer == &self.shared_secret {
                return Err(ConfigError::PeerSecretReused);
            }
        }
        for (field, v) in [
            ("auth_cache_seconds", self.auth_cache_seconds),
            (
                "auth_failure_cache_seconds",
                self.auth_failure_cache_seconds,
            ),
            ("dial_timeout_seconds", self.dial_timeout_seconds),
            (
                "agent_idle_timeout_seconds",
                self.agent_idle_timeout_seconds,
            ),
        ] {
            if v == 0 {
                return Err(ConfigError::Zero { field });
            }
        }
        warren_tls::CertFiles::from_options(self.tls_cert_file.clone(), self.tls_key_file.clone())
            .map_err(ConfigError::Tls)?;
        Ok(())
    }

    pub fn auth_cache_ttl(&self) -> Duration {
        Duration::from_secs(self.auth_cache_seconds)
    }
    pub fn auth_failure_cache_ttl(&self) -> Duration {
        Duration::from_secs(self.auth_failure_cache_seconds)
    }
    pub fn agent_wait(&self) -> Duration {
        Duration::from_secs(self.agent_wait_seconds)
    }
    pub fn dial_timeout(&self) -> Duration {
        Duration::from_secs(self.dial_timeout_seconds)
    }
    pub fn agent_idle_timeout(&self) -> Duration {
        Duration::from_secs(self.agent_idle_timeout_seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_problem() {
        let url: Url = "http://127.0.0.1:1".parse().unwrap();
        let mut c = RelayConfig::new(url, "short".into());
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "shared_secret has 5 bytes; at least 32 are required"
        );
        c.shared_secret = "x".repeat(32);
        c.validate().unwrap();
        c.server_url = "ftp://x".parse().unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("http or https"));
        let err = toml::from_str::<RelayConfig>(
            "server_url = 'http://a'\nshared_secret = 'x'\nbogus = 1",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown field `bogus`"), "{err}");
        c.server_url = "http://a".parse().unwrap();
        c.peer_secret = Some("short".into());
        assert!(matches!(
            c.validate(),
            Err(ConfigError::PeerSecretTooShort { len: 5 })
        ));
        c.peer_secret = Some(c.shared_secret.clone());
        assert!(matches!(c.validate(), Err(ConfigError::PeerSecretReused)));
        c.peer_secret = Some("p".repeat(32));
        c.validate().unwrap();
        assert!(!format!("{c:?}").contains("ppp"), "peer secret redacted");
    }
}
