//! `warren server`: flags (with `WARREN_*` environment fallbacks) over an optional TOML file,
//! merged into the server's configuration, validated before binding, then run until Ctrl-C
//! or SIGTERM.

use crate::settings::set;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;
use warren_server::ServerConfig;

const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// Boxed so the binary's command enum stays small.
#[derive(Debug, clap::Args)]
pub struct ServerArgs {
    #[command(flatten)]
    options: Box<ServerOptions>,
}

#[derive(Debug, clap::Args)]
pub struct ServerOptions {
    /// TOML file with any of the settings below (flags and environment win over it).
    #[arg(long, env = "WARREN_SERVER_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Write the bound address (`host:port`) to this file once ready to serve.
    #[arg(long, env = "WARREN_READY_FILE", value_name = "FILE")]
    ready_file: Option<PathBuf>,
    #[command(flatten)]
    settings: ServerSettings,
}

/// The server's settings, from flags and variables or from the file (every key optional,
/// unknown keys refused); those without a flag are the file's only.
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ServerSettings {
    /// Address to listen on (port 0 picks a free port; see --ready-file). [default: 127.0.0.1:8080]
    #[arg(long, env = "WARREN_LISTEN", value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Directory of the SQLite database and keys. [default: the user's data directory/warren]
    #[arg(long, env = "WARREN_HOME", value_name = "DIR")]
    home: Option<PathBuf>,
    /// `postgres://…` (production) or `sqlite://…`; default SQLite in the home directory.
    #[arg(
        long,
        env = "WARREN_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    /// Key that encrypts secrets at rest (share it between servers on one database).
    #[arg(long, env = "WARREN_SECRET_KEY_FILE", value_name = "FILE")]
    secret_key_file: Option<PathBuf>,
    /// File holding the relay ↔ server shared secret (≥ 32 characters); default: generated
    /// in the home directory.
    #[arg(long, env = "WARREN_RELAY_SECRET_FILE", value_name = "FILE")]
    relay_secret_file: Option<PathBuf>,
    /// The shared secret itself (prefer --relay-secret-file or the variable: a value on the
    /// command line is visible to every user of the machine in the process list).
    #[arg(
        long,
        env = "WARREN_RELAY_SECRET",
        value_name = "SECRET",
        hide_env_values = true
    )]
    relay_secret: Option<String>,
    /// Internal URL of a relay: signalled on desired-state changes, and asked for workspace
    /// logs (repeat, or comma-separate).
    #[arg(
        long = "relay-url",
        env = "WARREN_RELAY_URLS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    relay_urls: Vec<String>,
    /// A devfile registry searched for parents named by `id` without `registryUrl` (repeat,
    /// or comma-separate; searched in order).
    #[arg(
        long = "devfile-registry",
        env = "WARREN_DEVFILE_REGISTRIES",
        value_delimiter = ',',
        value_name = "URL"
    )]
    devfile_registries: Vec<String>,
    /// Devfile used when neither the request nor the project has one.
    #[arg(long, env = "WARREN_DEFAULT_DEVFILE", value_name = "FILE")]
    default_devfile: Option<PathBuf>,
    /// Username of the admin created on an empty database.
    #[arg(long, env = "WARREN_BOOTSTRAP_ADMIN", value_name = "NAME")]
    bootstrap_admin_username: Option<String>,
    /// Seconds between runs of the lifecycle timers.
    #[arg(
        long,
        env = "WARREN_LIFECYCLE_INTERVAL_SECONDS",
        value_name = "SECONDS"
    )]
    lifecycle_interval_seconds: Option<u64>,
    /// Seconds between reads of the refs of projects with prebuilds (new commits start one).
    #[arg(long, env = "WARREN_PREBUILD_POLL_SECONDS", value_name = "SECONDS")]
    prebuild_poll_seconds: Option<u64>,
    /// Where users reach the proxy's SSH server (`host[:port]`), told to `warren ws ssh`
    /// and `warren ws ssh-config`; none: the installation offers no SSH to the CLI.
    #[arg(long, env = "WARREN_SSH_PUBLIC_ADDRESS", value_name = "HOST:PORT")]
    ssh_public_address: Option<String>,
    /// The proxy's SSH host public key(s), one OpenSSH line each (`warren proxy host-key
    /// --state-dir <proxy state>` prints it), published so clients pin them.
    #[arg(long, env = "WARREN_SSH_HOST_KEY_FILE", value_name = "FILE")]
    ssh_host_key_file: Option<PathBuf>,
    /// A reverse proxy in front of the server (address or CIDR range) whose
    /// `X-Forwarded-For` names the client (repeat, or comma-separate).
    #[arg(
        long = "trusted-proxy",
        env = "WARREN_TRUSTED_PROXIES",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    trusted_proxies: Vec<ipnet::IpNet>,
    /// A special-purpose address range (loopback, private, link-local, …) the server may
    /// fetch devfile parents and Git remotes from on a user's behalf (repeat, or
    /// comma-separate); none: public addresses only.
    #[arg(
        long = "outbound-allow",
        env = "WARREN_OUTBOUND_ALLOW",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    outbound_allow: Vec<ipnet::IpNet>,
    /// Single sign-on (`[oidc]` in the file).
    #[command(flatten)]
    #[serde(default)]
    oidc: OidcSettings,
    /// Whether local passwords sign in (`false` needs single sign-on). [default: true]
    #[arg(long, env = "WARREN_PASSWORD_LOGIN", value_name = "BOOL")]
    password_login: Option<bool>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); re-read when it changes.
    #[arg(long, env = "WARREN_TLS_CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file; re-read when it changes.
    #[arg(long, env = "WARREN_TLS_KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// Seconds between the full reconciles an agent is asked for.
    #[arg(skip)]
    full_reconciliation_interval_seconds: Option<u64>,
    /// Seconds between an agent's partial reconciles.
    #[arg(skip)]
    partial_reconciliation_interval_seconds: Option<u64>,
    /// The database pool's size.
    #[arg(skip)]
    max_db_connections: Option<u32>,
    /// Days audit entries are kept (0: forever). [default: 365]
    #[arg(long, env = "WARREN_AUDIT_RETENTION_DAYS", value_name = "DAYS")]
    audit_retention_days: Option<u32>,
    /// Days hourly usage is kept (0: forever). [default: 400]
    #[arg(long, env = "WARREN_USAGE_RETENTION_DAYS", value_name = "DAYS")]
    usage_retention_days: Option<u32>,
    /// Also append every audit entry to FILE as a JSON line (for a SIEM to collect).
    #[arg(long, env = "WARREN_AUDIT_FILE", value_name = "FILE")]
    audit_file: Option<PathBuf>,
    /// Also send every audit entry to a syslog receiver: udp://HOST:PORT or unix:/dev/log.
    #[arg(long, env = "WARREN_AUDIT_SYSLOG", value_name = "TARGET")]
    audit_syslog: Option<String>,
}

/// `[oidc]`: `warren_server::OidcConfig`'s fields, the secret also from a file, the first
/// four also from flags.
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct OidcSettings {
    /// Single sign-on: the OpenID provider's issuer URL (the rest of `[oidc]` in --config).
    #[arg(
        long = "oidc-issuer-url",
        env = "WARREN_OIDC_ISSUER_URL",
        value_name = "URL"
    )]
    issuer_url: Option<String>,
    /// Single sign-on: this server's client id at the provider.
    #[arg(
        long = "oidc-client-id",
        env = "WARREN_OIDC_CLIENT_ID",
        value_name = "ID"
    )]
    client_id: Option<String>,
    /// Single sign-on: a file holding the client's secret (none: a public client).
    #[arg(
        long = "oidc-client-secret-file",
        env = "WARREN_OIDC_CLIENT_SECRET_FILE",
        value_name = "FILE"
    )]
    client_secret_file: Option<PathBuf>,
    /// Single sign-on: this server's callback as browsers reach it
    /// (`https://warren.example.com/oauth/sso/callback`), registered with the provider.
    #[arg(
        long = "oidc-redirect-url",
        env = "WARREN_OIDC_REDIRECT_URL",
        value_name = "URL"
    )]
    redirect_url: Option<String>,
    /// The client's secret itself (prefer `client_secret_file`).
    #[arg(skip)]
    client_secret: Option<String>,
    /// The provider's name on the sign-in button.
    #[arg(skip)]
    display_name: Option<String>,
    /// The claim a new account's username comes from.
    #[arg(skip)]
    username_claim: Option<String>,
    /// Whether a first sign-on makes an account.
    #[arg(skip)]
    sign_up: Option<bool>,
    /// Whether a first sign-on takes over a local account of the same name.
    #[arg(skip)]
    link_existing_users: Option<bool>,
    /// The claim listing the user's groups.
    #[arg(skip)]
    groups_claim: Option<String>,
    /// Members of this group are admins.
    #[arg(skip)]
    admin_group: Option<String>,
    /// Only members of these groups sign on (none: everyone the provider knows).
    #[arg(skip)]
    allowed_groups: Option<Vec<String>>,
    /// Scopes asked for.
    #[arg(skip)]
    scopes: Option<Vec<String>>,
}

/// The server's configuration from its layered settings, over the defaults.
fn merge(s: ServerSettings) -> anyhow::Result<(ServerConfig, SocketAddr)> {
    let home = match s.home {
        Some(h) => h,
        None => dirs::data_dir()
            .map(|d| d.join("warren"))
            .context("no home directory: set --home or WARREN_HOME")?,
    };
    let mut c = ServerConfig::new(home);
    c.database_url = s.database_url;
    c.secret_key_file = s.secret_key_file;
    c.relay_secret = match s.relay_secret_file {
        Some(path) => Some(crate::settings::read_secret(&path, "relay secret")?),
        None => s.relay_secret,
    };
    c.relay_urls = s.relay_urls;
    c.relay_urls.retain(|u| !u.trim().is_empty());
    c.devfile_registries = s.devfile_registries;
    c.devfile_registries.retain(|u| !u.trim().is_empty());
    c.default_devfile_file = s.default_devfile;
    set(&mut c.bootstrap_admin_username, s.bootstrap_admin_username);
    set(
        &mut c.lifecycle_interval_seconds,
        s.lifecycle_interval_seconds,
    );
    set(&mut c.prebuild_poll_seconds, s.prebuild_poll_seconds);
    set(
        &mut c.full_reconciliation_interval_seconds,
        s.full_reconciliation_interval_seconds,
    );
    set(
        &mut c.partial_reconciliation_interval_seconds,
        s.partial_reconciliation_interval_seconds,
    );
    set(&mut c.max_db_connections, s.max_db_connections);
    c.trusted_proxies = s.trusted_proxies;
    c.outbound_allow = s.outbound_allow;
    c.ssh_public_address = s.ssh_public_address;
    if let Some(path) = s.ssh_host_key_file {
        c.ssh_host_keys = host_keys(&path)?;
    }
    c.oidc = oidc(s.oidc)?;
    set(&mut c.password_login, s.password_login);
    c.tls_cert_file = s.tls_cert_file;
    c.tls_key_file = s.tls_key_file;
    set(&mut c.audit_retention_days, s.audit_retention_days);
    set(&mut c.usage_retention_days, s.usage_retention_days);
    c.audit_file = s.audit_file;
    c.audit_syslog = s.audit_syslog;
    let listen = match s.listen {
        Some(l) => l,
        None => DEFAULT_LISTEN.parse().context("default listen address")?,
    };
    Ok((c, listen))
}

/// The proxy's SSH host public keys, one OpenSSH line each (comments and blank lines skipped).
fn host_keys(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the SSH host key file {}", path.display()))?;
    let keys: Vec<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect();
    if keys.is_empty() {
        anyhow::bail!("the SSH host key file {} holds no key", path.display());
    }
    Ok(keys)
}

/// Single sign-on; none when no issuer is given anywhere.
fn oidc(f: OidcSettings) -> anyhow::Result<Option<warren_server::OidcConfig>> {
    let Some(issuer) = f.issuer_url else {
        if f.client_id.is_some() || f.redirect_url.is_some() || f.client_secret_file.is_some() {
            anyhow::bail!("oidc: settings given without an issuer URL (--oidc-issuer-url)");
        }
        return Ok(None);
    };
    let client_id = f
        .client_id
        .context("oidc: no client id (--oidc-client-id)")?;
    let redirect = f
        .redirect_url
        .context("oidc: no redirect URL (--oidc-redirect-url)")?;
    let mut o = warren_server::OidcConfig::new(&issuer, &client_id, &redirect);
    o.client_secret = match f.client_secret_file {
        Some(path) => Some(crate::settings::read_secret(&path, "OIDC client secret")?),
        None => f.client_secret,
    };
    set(&mut o.display_name, f.display_name);
    set(&mut o.username_claim, f.username_claim);
    set(&mut o.sign_up, f.sign_up);
    set(&mut o.link_existing_users, f.link_existing_users);
    set(&mut o.groups_claim, f.groups_claim);
    o.admin_group = f.admin_group;
    o.allowed_groups = f.allowed_groups.unwrap_or_default();
    set(&mut o.scopes, f.scopes);
    Ok(Some(o))
}

/// The validated configuration the flags, variables and file describe, and where to listen.
fn configure(args: &ServerOptions) -> anyhow::Result<(ServerConfig, SocketAddr)> {
    let settings = crate::settings::layered(&args.settings, args.config.as_deref())?;
    let (config, listen) = merge(settings)?;
    config
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid server configuration: {e}"))?;
    Ok((config, listen))
}

/// The server configuration of `warren admin` (same flags, variables and file as the server).
pub(crate) fn config_of(args: ServerArgs) -> anyhow::Result<ServerConfig> {
    Ok(configure(&args.options)?.0)
}

pub async fn run(args: ServerArgs) -> anyhow::Result<()> {
    let args = *args.options;
    let (config, listen) = configure(&args)?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%addr, "bound");
    let server = warren_server::Server::prepare(config).await?;
    server.announce_bootstrap_admin();
    if let Some(path) = &args.ready_file {
        // Written whole then renamed, so a reader never sees half an address.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, addr.to_string())
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(wait_for_signal(shutdown.clone()));
    server.serve(listener, shutdown).await?;
    Ok(())
}

async fn wait_for_signal(shutdown: CancellationToken) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; Ctrl-C still stops the server");
            let _ = tokio::signal::ctrl_c().await;
            shutdown.cancel();
            return;
        }
    };
    tokio::select! {
        // Cancel-safe: both are signal notifications; whichever comes first stops the server.
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("shutting down");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: ServerArgs,
    }

    /// The flags of `args` over a file holding `toml`.
    fn configured(args: &[&str], toml: &str) -> anyhow::Result<(ServerConfig, SocketAddr)> {
        let t = T::parse_from(args);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.toml");
        std::fs::write(&path, toml).unwrap();
        merge(crate::settings::layered(
            &t.a.options.settings,
            Some(&path),
        )?)
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_refuses_typos() {
        let (c, listen) = configured(
            &["t", "--home", "/flag", "--relay-url", "http://r1,http://r2"],
            "home = \"/file\"\ndatabase_url = \"postgres://db/x\"\nlisten = \"0.0.0.0:9000\"\n\
             relay_urls = [\"http://f\"]\nmax_db_connections = 3",
        )
        .unwrap();
        assert_eq!(c.home, PathBuf::from("/flag"));
        assert_eq!(c.database_url.as_deref(), Some("postgres://db/x"));
        assert_eq!(c.relay_urls, ["http://r1", "http://r2"]);
        assert_eq!(c.max_db_connections, 3);
        assert_eq!(listen.to_string(), "0.0.0.0:9000");
        let err = configured(&["t"], "databse_url = \"x\"").unwrap_err();
        assert!(
            format!("{err:#}").contains("unknown field `databse_url`"),
            "{err:#}"
        );
    }

    #[test]
    fn single_sign_on_from_flags_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("oidc.secret");
        std::fs::write(&secret, "the-secret\n").unwrap();
        let (c, _) = configured(
            &[
                "t",
                "--home",
                "/h",
                "--oidc-issuer-url",
                "https://id.example.com",
                "--oidc-client-secret-file",
                secret.to_str().unwrap(),
                "--password-login",
                "false",
            ],
            "[oidc]\nclient_id = \"warren\"\nredirect_url = \"https://w.example.com/oauth/sso/callback\"\n\
             admin_group = \"admins\"\nsign_up = false",
        )
        .unwrap();
        let o = c.oidc.clone().expect("oidc");
        assert_eq!(o.issuer_url, "https://id.example.com");
        assert_eq!(o.client_id, "warren");
        assert_eq!(o.client_secret.as_deref(), Some("the-secret"));
        assert_eq!(o.admin_group.as_deref(), Some("admins"));
        assert!(!o.sign_up && !c.password_login);
        c.validate().unwrap();
        // Half a configuration is an error naming what is missing.
        let err = configured(&["t", "--home", "/h", "--oidc-client-id", "warren"], "").unwrap_err();
        assert!(err.to_string().contains("without an issuer"), "{err}");
        let err = configured(&["t"], "[oidc]\nclient_secrett = \"x\"").unwrap_err();
        assert!(format!("{err:#}").contains("unknown field"), "{err:#}");
    }
}
