//! The server's configuration, validated before anything binds or opens.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Everything `warren server` can be told; the binary fills it from flags, env and a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Holds the SQLite database (`warren.db`) and `keys/`.
    pub home: PathBuf,
    /// `postgres://…` or `sqlite://…`; default: SQLite in `home`.
    #[serde(default)]
    pub database_url: Option<String>,
    /// Key that encrypts secrets at rest; default `home/keys/secret.key`, created on first
    /// start. Every server sharing a database must use the same key.
    #[serde(default)]
    pub secret_key_file: Option<PathBuf>,
    /// Relay ↔ server shared secret (HS256 for internal JWTs). Default: read or create
    /// `home/keys/relay-secret.key`.
    #[serde(default)]
    pub relay_secret: Option<String>,
    /// Relay internal URLs the server signals on desired-state changes and fetches workspace
    /// logs through (may be empty: then no signals and no logs).
    #[serde(default)]
    pub relay_urls: Vec<String>,
    /// A devfile used when neither the request nor the project gives one.
    #[serde(default)]
    pub default_devfile_file: Option<PathBuf>,
    /// Devfile registries (`https://registry.devfile.io`, …) searched in order for parents
    /// named by `id` without a `registryUrl`.
    #[serde(default)]
    pub devfile_registries: Vec<String>,
    /// Username of the admin bootstrapped on an empty database.
    #[serde(default = "default_admin_username")]
    pub bootstrap_admin_username: String,
    /// How often the lifecycle timers run.
    #[serde(default = "default_lifecycle_interval")]
    pub lifecycle_interval_seconds: u64,
    #[serde(default = "default_full_interval")]
    pub full_reconciliation_interval_seconds: u64,
    #[serde(default = "default_partial_interval")]
    pub partial_reconciliation_interval_seconds: u64,
    #[serde(default = "default_max_connections")]
    pub max_db_connections: u32,
    /// Where users reach the proxy's SSH server (`host:port`), told to the CLI for
    /// `warren ws ssh` and `warren ws ssh-config`; `None` when no SSH is offered.
    #[serde(default)]
    pub ssh_public_address: Option<String>,
    /// The proxy's SSH host public keys (OpenSSH lines), published with the address so the
    /// CLI pins them (`warren ws ssh` never asks the user to trust a key on first use).
    #[serde(default)]
    pub ssh_host_keys: Vec<String>,
    /// Reverse proxies in front of the server (addresses or CIDR ranges). A request from one
    /// of them is attributed to the address it names in `X-Forwarded-For` (the right-most one
    /// that is not itself a trusted proxy), so the password throttle counts real clients;
    /// from anywhere else the header is ignored, as anyone can write it.
    #[serde(default)]
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

fn default_admin_username() -> String {
    "admin".into()
}
fn default_lifecycle_interval() -> u64 {
    60
}
fn default_full_interval() -> u64 {
    3600
}
fn default_partial_interval() -> u64 {
    10
}
fn default_max_connections() -> u32 {
    10
}

impl ServerConfig {
    /// A configuration with every default, storing its state in `home`.
    pub fn new(home: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            home: home.into(),
            database_url: None,
            secret_key_file: None,
            relay_secret: None,
            relay_urls: vec![],
            default_devfile_file: None,
            devfile_registries: vec![],
            bootstrap_admin_username: default_admin_username(),
            lifecycle_interval_seconds: default_lifecycle_interval(),
            full_reconciliation_interval_seconds: default_full_interval(),
            partial_reconciliation_interval_seconds: default_partial_interval(),
            max_db_connections: default_max_connections(),
            ssh_public_address: None,
            ssh_host_keys: Vec::new(),
            trusted_proxies: vec![],
        }
    }

    /// The database URL to open: the configured one or SQLite in `home`.
    pub fn effective_database_url(&self) -> String {
        match &self.database_url {
            Some(u) => u.clone(),
            None => format!(
                "sqlite://{}?mode=rwc",
                self.home.join("warren.db").display()
            ),
        }
    }

    pub fn secret_key_path(&self) -> PathBuf {
        self.secret_key_file
            .clone()
            .unwrap_or_else(|| self.home.join("keys/secret.key"))
    }

    /// Checks every field; the message names the offending one.
    pub fn validate(&self) -> Result<(), String> {
        if self.home.as_os_str().is_empty() {
            return Err("home: must not be empty".into());
        }
        if let Some(u) = &self.database_url {
            if !(u.starts_with("sqlite:")
                || u.starts_with("postgres:")
                || u.starts_with("postgresql:"))
            {
                return Err(format!(
                    "database_url: {:?} must start with sqlite:, postgres: or postgresql:",
                    crate::db::redact(u)
                ));
            }
        }
        if let Some(s) = &self.relay_secret {
            if s.len() < 32 {
                return Err("relay_secret: must be at least 32 characters".into());
            }
        }
        for u in &self.devfile_registries {
            match url::Url::parse(u) {
                Ok(p)
                    if (p.scheme() == "http" || p.scheme() == "https")
                        && p.username().is_empty()
                        && p.password().is_none() => {}
                _ => {
                    return Err(format!(
                        "devfile_registries: {u:?} is not an http(s) URL without credentials"
                    ))
                }
            }
        }
        for u in &self.relay_urls {
            match url::Url::parse(u) {
                Ok(p) if p.scheme() == "http" || p.scheme() == "https" => {}
                _ => return Err(format!("relay_urls: {u:?} is not an http(s) URL")),
            }
        }
        let name_ok = !self.bootstrap_admin_username.is_empty()
            && crate::app::users::validate_username(&self.bootstrap_admin_username).is_ok();
        if !name_ok {
            return Err("bootstrap_admin_username: not a valid username".into());
        }
        if let Some(a) = &self.ssh_public_address {
            warren_types::api::SshEndpoint::parse(a)
                .map_err(|e| format!("ssh_public_address: {e}"))?;
        }
        for k in &self.ssh_host_keys {
            warren_types::api::SshEndpoint::parse_host_key(k)
                .map_err(|e| format!("ssh_host_keys: {e}"))?;
        }
        if self.lifecycle_interval_seconds == 0 {
            return Err("lifecycle_interval_seconds: must be at least 1".into());
        }
        if self.full_reconciliation_interval_seconds == 0
            || self.partial_reconciliation_interval_seconds == 0
        {
            return Err("reconciliation intervals: must be at least 1 second".into());
        }
        if self.max_db_connections == 0 {
            return Err("max_db_connections: must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let mut c = ServerConfig::new("/tmp/x");
        assert!(c.validate().is_ok());
        c.database_url = Some("mysql://x".into());
        assert!(c.validate().unwrap_err().starts_with("database_url"));
        c.database_url = None;
        c.relay_urls = vec!["ftp://x".into()];
        assert!(c.validate().unwrap_err().starts_with("relay_urls"));
        c.relay_urls = vec![];
        c.relay_secret = Some("short".into());
        assert!(c.validate().unwrap_err().starts_with("relay_secret"));
        c.relay_secret = None;
        c.ssh_public_address = Some("ssh.example.com:notaport".into());
        assert!(c.validate().unwrap_err().starts_with("ssh_public_address"));
        c.ssh_public_address = Some("ssh.example.com:2222".into());
        assert!(c.validate().is_ok());
        c.ssh_host_keys = vec!["-----BEGIN OPENSSH PRIVATE KEY-----".into()];
        assert!(c.validate().unwrap_err().starts_with("ssh_host_keys"));
        c.ssh_host_keys = vec!["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0 proxy".into()];
        assert!(c.validate().is_ok());
        let err = toml::from_str::<ServerConfig>("home = \"/x\"\nlisten = 1").unwrap_err();
        assert!(err.to_string().contains("unknown field `listen`"), "{err}");
    }
}
