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
    /// How often the refs of projects with prebuilds are read for new commits.
    #[serde(default = "default_prebuild_poll")]
    pub prebuild_poll_seconds: u64,
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
    /// Special-purpose address ranges (loopback, private, link-local, …) the server may
    /// fetch from on a user's behalf: devfile parents and registries, projects' Git remotes.
    /// Empty (the default): public addresses only, so no user can make the server read
    /// what only it can reach (`warren_netguard`). Name an internal forge or registry here.
    #[serde(default)]
    pub outbound_allow: Vec<ipnet::IpNet>,
    /// Single sign-on through an OpenID Connect provider (none: local passwords only).
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
    /// Whether local passwords sign in (the login page's form, `warren login`). Turning them
    /// off needs `oidc`; personal access tokens keep working either way.
    #[serde(default = "yes")]
    pub password_login: bool,
    /// Serve HTTPS with this certificate chain (PEM, leaf first) and `tls_key_file`; both
    /// are read again when they change (cert-manager renewals), no restart needed.
    #[serde(default)]
    pub tls_cert_file: Option<PathBuf>,
    #[serde(default)]
    pub tls_key_file: Option<PathBuf>,
    /// Days audit entries are kept (0: forever); older ones are removed by the housekeeping
    /// replica, the chain still verifying from the last one removed.
    #[serde(default = "default_audit_retention")]
    pub audit_retention_days: u32,
    /// Days hourly usage is kept (0: forever); older hours are removed by the housekeeping
    /// replica.
    #[serde(default = "default_usage_retention")]
    pub usage_retention_days: u32,
    /// A file every audit entry is also appended to as one JSON line, for a SIEM to collect.
    #[serde(default)]
    pub audit_file: Option<PathBuf>,
    /// A syslog receiver every audit entry is also sent to (`udp://HOST:PORT`, or
    /// `unix:/dev/log`), as an RFC 5424 message (`authpriv.info`) whose text is its JSON.
    #[serde(default)]
    pub audit_syslog: Option<String>,
}

/// An OpenID Connect provider users sign in through (`[oidc]` in the server's file).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer (`https://id.example.com/realms/acme`): discovery reads
    /// `{issuer}/.well-known/openid-configuration`, and ID tokens must name it exactly.
    pub issuer_url: String,
    pub client_id: String,
    /// The client's secret (none: a public client, PKCE alone).
    #[serde(default)]
    pub client_secret: Option<String>,
    /// Where the provider sends the browser back: this server's `/oauth/sso/callback` as
    /// users reach it (`https://warren.example.com/oauth/sso/callback`), registered with the
    /// provider.
    pub redirect_url: String,
    /// The login page's button: "Sign in with {display_name}".
    #[serde(default = "default_oidc_name")]
    pub display_name: String,
    /// The ID token claim whose value is the Warren username (lowercased; must be a valid
    /// username). Choose one users cannot change themselves at the provider.
    #[serde(default = "default_username_claim")]
    pub username_claim: String,
    /// Whether a first sign-in with no matching account creates one.
    #[serde(default = "yes")]
    pub sign_up: bool,
    /// Whether a first sign-in may take over an existing local account of the same username
    /// (off by default: the provider would then decide who owns e.g. `admin`).
    #[serde(default)]
    pub link_existing_users: bool,
    /// When not empty, only identities in one of these groups may sign in (with a public
    /// provider — Google, GitLab.com — anyone has an identity there).
    #[serde(default)]
    pub allowed_groups: Vec<String>,
    /// The claim listing the user's groups (an array of strings, or one string).
    #[serde(default = "default_groups_claim")]
    pub groups_claim: String,
    /// Members of this group are admins, others are not (set at every sign-in); none: the
    /// provider does not decide who is an admin.
    #[serde(default)]
    pub admin_group: Option<String>,
    /// How long a membership of an `oidc` group lasts after the sign-in whose groups claim
    /// gave it (each sign-in renews or ends it): the longest a removal at the provider takes
    /// to reach a session that never signs in again (personal access tokens among them).
    #[serde(default = "default_group_ttl_hours")]
    pub group_ttl_hours: u32,
    /// Scopes asked besides `openid`.
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
}

/// Without the secret: configurations are logged.
impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcConfig")
            .field("issuer_url", &self.issuer_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "…"))
            .field("redirect_url", &self.redirect_url)
            .field("username_claim", &self.username_claim)
            .field("sign_up", &self.sign_up)
            .field("link_existing_users", &self.link_existing_users)
            .field("admin_group", &self.admin_group)
            .field("allowed_groups", &self.allowed_groups)
            .field("group_ttl_hours", &self.group_ttl_hours)
            .finish_non_exhaustive()
    }
}

impl OidcConfig {
    /// A provider with every default.
    pub fn new(issuer_url: &str, client_id: &str, redirect_url: &str) -> OidcConfig {
        OidcConfig {
            issuer_url: issuer_url.into(),
            client_id: client_id.into(),
            client_secret: None,
            redirect_url: redirect_url.into(),
            display_name: default_oidc_name(),
            username_claim: default_username_claim(),
            sign_up: true,
            link_existing_users: false,
            groups_claim: default_groups_claim(),
            admin_group: None,
            group_ttl_hours: default_group_ttl_hours(),
            allowed_groups: vec![],
            scopes: default_scopes(),
        }
    }

    fn validate(&self) -> Result<(), String> {
        let https_or_loopback = |field: &str, u: &str| -> Result<(), String> {
            let p = url::Url::parse(u).map_err(|e| format!("oidc.{field}: {u:?}: {e}"))?;
            let loopback = matches!(p.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
            if p.scheme() == "https" || (p.scheme() == "http" && loopback) {
                Ok(())
            } else {
                Err(format!(
                    "oidc.{field}: {u:?} must be https (http only on localhost)"
                ))
            }
        };
        https_or_loopback("issuer_url", &self.issuer_url)?;
        https_or_loopback("redirect_url", &self.redirect_url)?;
        if !self.redirect_url.ends_with(crate::SSO_CALLBACK_PATH) {
            return Err(format!(
                "oidc.redirect_url: {:?} must end with {}",
                self.redirect_url,
                crate::SSO_CALLBACK_PATH
            ));
        }
        if self.client_id.is_empty() {
            return Err("oidc.client_id: must not be empty".into());
        }
        if self.client_secret.as_deref() == Some("") {
            return Err("oidc.client_secret: must not be empty when given".into());
        }
        if self.username_claim.is_empty() || self.groups_claim.is_empty() {
            return Err("oidc.username_claim, oidc.groups_claim: must not be empty".into());
        }
        if !(1..=8760).contains(&self.group_ttl_hours) {
            return Err("oidc.group_ttl_hours: must be between 1 and 8760 (a year)".into());
        }
        if self.display_name.trim().is_empty() {
            return Err("oidc.display_name: must not be empty".into());
        }
        if self.scopes.iter().any(|s| s.is_empty() || s.contains(' ')) {
            return Err("oidc.scopes: each must be one non-empty word".into());
        }
        Ok(())
    }
}

fn default_usage_retention() -> u32 {
    // Over a year: this month's report beside the same month a year before.
    400
}

fn default_audit_retention() -> u32 {
    365
}

fn yes() -> bool {
    true
}
fn default_oidc_name() -> String {
    "single sign-on".into()
}
fn default_username_claim() -> String {
    "preferred_username".into()
}
fn default_group_ttl_hours() -> u32 {
    // A browser session's length: a user who signs in every morning never notices.
    12
}
fn default_groups_claim() -> String {
    "groups".into()
}
fn default_scopes() -> Vec<String> {
    vec!["profile".into(), "email".into()]
}

fn default_admin_username() -> String {
    "admin".into()
}
fn default_lifecycle_interval() -> u64 {
    60
}
fn default_prebuild_poll() -> u64 {
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
            prebuild_poll_seconds: default_prebuild_poll(),
            full_reconciliation_interval_seconds: default_full_interval(),
            partial_reconciliation_interval_seconds: default_partial_interval(),
            max_db_connections: default_max_connections(),
            ssh_public_address: None,
            ssh_host_keys: Vec::new(),
            trusted_proxies: vec![],
            outbound_allow: vec![],
            oidc: None,
            password_login: true,
            tls_cert_file: None,
            tls_key_file: None,
            audit_retention_days: default_audit_retention(),
            usage_retention_days: default_usage_retention(),
            audit_file: None,
            audit_syslog: None,
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
        if self.prebuild_poll_seconds == 0 {
            return Err("prebuild_poll_seconds: must be at least 1".into());
        }
        if self.full_reconciliation_interval_seconds == 0
            || self.partial_reconciliation_interval_seconds == 0
        {
            return Err("reconciliation intervals: must be at least 1 second".into());
        }
        if self.max_db_connections == 0 {
            return Err("max_db_connections: must be at least 1".into());
        }
        warren_tls::CertFiles::from_options(self.tls_cert_file.clone(), self.tls_key_file.clone())
            .map_err(|e| format!("tls_cert_file, tls_key_file: {e}"))?;
        if let Some(o) = &self.oidc {
            o.validate()?;
            if !self.password_login && o.admin_group.is_none() && !o.link_existing_users {
                return Err("password_login: cannot be off unless oidc.admin_group or \
                     oidc.link_existing_users is set (nobody could be an admin)"
                    .into());
            }
        } else if !self.password_login {
            return Err("password_login: cannot be off without oidc (nobody could sign in)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_sign_on_is_checked() {
        let mut c = ServerConfig::new("/tmp/x");
        c.password_login = false;
        assert!(c.validate().unwrap_err().starts_with("password_login"));
        let good = OidcConfig::new(
            "https://id.example.com/realms/acme",
            "warren",
            "https://warren.example.com/oauth/sso/callback",
        );
        c.oidc = Some(good.clone());
        // Passwords off, yet nobody could become an admin.
        assert!(c.validate().unwrap_err().starts_with("password_login"));
        let good = OidcConfig {
            admin_group: Some("warren-admins".into()),
            ..good
        };
        c.oidc = Some(good.clone());
        assert!(c.validate().is_ok());
        for (o, field) in [
            (
                OidcConfig {
                    issuer_url: "http://id.example.com".into(),
                    ..good.clone()
                },
                "oidc.issuer_url",
            ),
            (
                OidcConfig {
                    redirect_url: "https://warren.example.com/elsewhere".into(),
                    ..good.clone()
                },
                "oidc.redirect_url",
            ),
            (
                OidcConfig {
                    client_id: String::new(),
                    ..good.clone()
                },
                "oidc.client_id",
            ),
            (
                OidcConfig {
                    scopes: vec!["two words".into()],
                    ..good.clone()
                },
                "oidc.scopes",
            ),
        ] {
            c.oidc = Some(o);
            assert!(c.validate().unwrap_err().starts_with(field), "{field}");
        }
        // Loopback providers may speak plain HTTP (tests, a provider beside the server).
        c.oidc = Some(OidcConfig {
            issuer_url: "http://127.0.0.1:5556".into(),
            ..good.clone()
        });
        assert!(c.validate().is_ok());
        // The secret never reaches a log line.
        let shown = format!(
            "{:?}",
            OidcConfig {
                client_secret: Some("s3cr3t-value".into()),
                ..good
            }
        );
        assert!(!shown.contains("s3cr3t-value"), "{shown}");
    }

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
