//! `warren server`: flags (with `WARREN_*` environment fallbacks) over an optional TOML file,
//! merged into the server's configuration, validated before binding, then run until Ctrl-C
//! or SIGTERM.

use crate::settings::list;
use anyhow::Context;
use serde::Deserialize;
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
    /// Single sign-on: the OpenID provider's issuer URL (the rest of `[oidc]` in --config).
    #[arg(long, env = "WARREN_OIDC_ISSUER_URL", value_name = "URL")]
    oidc_issuer_url: Option<String>,
    /// Single sign-on: this server's client id at the provider.
    #[arg(long, env = "WARREN_OIDC_CLIENT_ID", value_name = "ID")]
    oidc_client_id: Option<String>,
    /// Single sign-on: a file holding the client's secret (none: a public client).
    #[arg(long, env = "WARREN_OIDC_CLIENT_SECRET_FILE", value_name = "FILE")]
    oidc_client_secret_file: Option<PathBuf>,
    /// Single sign-on: this server's callback as browsers reach it
    /// (`https://warren.example.com/oauth/sso/callback`), registered with the provider.
    #[arg(long, env = "WARREN_OIDC_REDIRECT_URL", value_name = "URL")]
    oidc_redirect_url: Option<String>,
    /// Whether local passwords sign in (`false` needs single sign-on). [default: true]
    #[arg(long, env = "WARREN_PASSWORD_LOGIN", value_name = "BOOL")]
    password_login: Option<bool>,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); re-read when it changes.
    #[arg(long, env = "WARREN_TLS_CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file; re-read when it changes.
    #[arg(long, env = "WARREN_TLS_KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// Write the bound address (`host:port`) to this file once ready to serve.
    #[arg(long, env = "WARREN_READY_FILE", value_name = "FILE")]
    ready_file: Option<PathBuf>,
}

/// `[oidc]` in the `--config` file: `warren_server::OidcConfig`'s fields, the secret also
/// from a file, the first four also from flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OidcFile {
    issuer_url: Option<String>,
    client_id: Option<String>,
    client_secret: Option<String>,
    client_secret_file: Option<PathBuf>,
    redirect_url: Option<String>,
    display_name: Option<String>,
    username_claim: Option<String>,
    sign_up: Option<bool>,
    link_existing_users: Option<bool>,
    groups_claim: Option<String>,
    admin_group: Option<String>,
    allowed_groups: Option<Vec<String>>,
    scopes: Option<Vec<String>>,
}

/// The `--config` file: the same settings, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    home: Option<PathBuf>,
    database_url: Option<String>,
    secret_key_file: Option<PathBuf>,
    relay_secret: Option<String>,
    relay_secret_file: Option<PathBuf>,
    relay_urls: Option<Vec<String>>,
    devfile_registries: Option<Vec<String>>,
    default_devfile: Option<PathBuf>,
    bootstrap_admin_username: Option<String>,
    lifecycle_interval_seconds: Option<u64>,
    full_reconciliation_interval_seconds: Option<u64>,
    partial_reconciliation_interval_seconds: Option<u64>,
    max_db_connections: Option<u32>,
    trusted_proxies: Option<Vec<ipnet::IpNet>>,
    outbound_allow: Option<Vec<ipnet::IpNet>>,
    ssh_public_address: Option<String>,
    ssh_host_key_file: Option<PathBuf>,
    oidc: Option<OidcFile>,
    password_login: Option<bool>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
}

/// Flags and environment over the file over the defaults.
fn merge(args: &ServerOptions, file: FileConfig) -> anyhow::Result<(ServerConfig, SocketAddr)> {
    let home = match args.home.clone().or(file.home) {
        Some(h) => h,
        None => dirs::data_dir()
            .map(|d| d.join("warren"))
            .context("no home directory: set --home or WARREN_HOME")?,
    };
    let mut c = ServerConfig::new(home);
    c.database_url = args.database_url.clone().or(file.database_url);
    c.secret_key_file = args.secret_key_file.clone().or(file.secret_key_file);
    c.relay_secret = match args.relay_secret_file.clone().or(file.relay_secret_file) {
        Some(path) => Some(crate::relay_cmd::read_secret(&path, "relay secret")?),
        None => args.relay_secret.clone().or(file.relay_secret),
    };
    c.relay_urls = list(args.relay_urls.clone(), file.relay_urls);
    c.relay_urls.retain(|u| !u.trim().is_empty());
    c.devfile_registries = list(args.devfile_registries.clone(), file.devfile_registries);
    c.devfile_registries.retain(|u| !u.trim().is_empty());
    c.default_devfile_file = args.default_devfile.clone().or(file.default_devfile);
    if let Some(u) = args
        .bootstrap_admin_username
        .clone()
        .or(file.bootstrap_admin_username)
    {
        c.bootstrap_admin_username = u;
    }
    if let Some(s) = args
        .lifecycle_interval_seconds
        .or(file.lifecycle_interval_seconds)
    {
        c.lifecycle_interval_seconds = s;
    }
    if let Some(s) = file.full_reconciliation_interval_seconds {
        c.full_reconciliation_interval_seconds = s;
    }
    if let Some(s) = file.partial_reconciliation_interval_seconds {
        c.partial_reconciliation_interval_seconds = s;
    }
    if let Some(n) = file.max_db_connections {
        c.max_db_connections = n;
    }
    c.trusted_proxies = list(args.trusted_proxies.clone(), file.trusted_proxies);
    c.outbound_allow = list(args.outbound_allow.clone(), file.outbound_allow);
    c.ssh_public_address = args.ssh_public_address.clone().or(file.ssh_public_address);
    if let Some(path) = args.ssh_host_key_file.clone().or(file.ssh_host_key_file) {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the SSH host key file {}", path.display()))?;
        c.ssh_host_keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_owned)
            .collect();
        if c.ssh_host_keys.is_empty() {
            anyhow::bail!("the SSH host key file {} holds no key", path.display());
        }
    }
    c.oidc = oidc(args, file.oidc.unwrap_or_default())?;
    if let Some(p) = args.password_login.or(file.password_login) {
        c.password_login = p;
    }
    c.tls_cert_file = args.tls_cert_file.clone().or(file.tls_cert_file);
    c.tls_key_file = args.tls_key_file.clone().or(file.tls_key_file);
    let listen = match args.listen.or(file.listen) {
        Some(l) => l,
        None => DEFAULT_LISTEN.parse().context("default listen address")?,
    };
    Ok((c, listen))
}

/// Single sign-on from flags over `[oidc]`; none when no issuer is given anywhere.
fn oidc(args: &ServerOptions, f: OidcFile) -> anyhow::Result<Option<warren_server::OidcConfig>> {
    let Some(issuer) = args.oidc_issuer_url.clone().or(f.issuer_url) else {
        let other = args.oidc_client_id.is_some()
            || args.oidc_redirect_url.is_some()
            || args.oidc_client_secret_file.is_some()
            || f.client_id.is_some()
            || f.redirect_url.is_some();
        if other {
            anyhow::bail!("oidc: settings given without an issuer URL (--oidc-issuer-url)");
        }
        return Ok(None);
    };
    let client_id = args
        .oidc_client_id
        .clone()
        .or(f.client_id)
        .context("oidc: no client id (--oidc-client-id)")?;
    let redirect = args
        .oidc_redirect_url
        .clone()
        .or(f.redirect_url)
        .context("oidc: no redirect URL (--oidc-redirect-url)")?;
    let mut o = warren_server::OidcConfig::new(&issuer, &client_id, &redirect);
    o.client_secret = match args
        .oidc_client_secret_file
        .clone()
        .or(f.client_secret_file)
    {
        Some(path) => Some(crate::relay_cmd::read_secret(&path, "OIDC client secret")?),
        None => f.client_secret,
    };
    if let Some(v) = f.display_name {
        o.display_name = v;
    }
    if let Some(v) = f.username_claim {
        o.username_claim = v;
    }
    if let Some(v) = f.sign_up {
        o.sign_up = v;
    }
    if let Some(v) = f.link_existing_users {
        o.link_existing_users = v;
    }
    if let Some(v) = f.groups_claim {
        o.groups_claim = v;
    }
    o.admin_group = f.admin_group;
    o.allowed_groups = f.allowed_groups.unwrap_or_default();
    if let Some(v) = f.scopes {
        o.scopes = v;
    }
    Ok(Some(o))
}

/// The validated configuration the flags, variables and file describe, and where to listen.
fn configure(args: &ServerOptions) -> anyhow::Result<(ServerConfig, SocketAddr)> {
    let file: FileConfig = crate::settings::read_file(args.config.as_deref())?;
    let (config, listen) = merge(args, file)?;
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

    #[test]
    fn flags_win_over_the_file_and_the_file_refuses_typos() {
        let t = T::parse_from(["t", "--home", "/flag", "--relay-url", "http://r1,http://r2"]);
        let file: FileConfig = toml::from_str(
            "home = \"/file\"\ndatabase_url = \"postgres://db/x\"\nlisten = \"0.0.0.0:9000\"\nrelay_urls = [\"http://f\"]",
        )
        .unwrap();
        let (c, listen) = merge(&t.a.options, file).unwrap();
        assert_eq!(c.home, PathBuf::from("/flag"));
        assert_eq!(c.database_url.as_deref(), Some("postgres://db/x"));
        assert_eq!(c.relay_urls, ["http://r1", "http://r2"]);
        assert_eq!(listen.to_string(), "0.0.0.0:9000");
        let err = toml::from_str::<FileConfig>("databse_url = \"x\"").unwrap_err();
        assert!(
            err.to_string().contains("unknown field `databse_url`"),
            "{err}"
        );
    }

    #[test]
    fn single_sign_on_from_flags_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("oidc.secret");
        std::fs::write(&secret, "the-secret\n").unwrap();
        let t = T::parse_from([
            "t",
            "--home",
            "/h",
            "--oidc-issuer-url",
            "https://id.example.com",
            "--oidc-client-secret-file",
            secret.to_str().unwrap(),
            "--password-login",
            "false",
        ]);
        let file: FileConfig = toml::from_str(
            "[oidc]\nclient_id = \"warren\"\nredirect_url = \"https://w.example.com/oauth/sso/callback\"\n\
             admin_group = \"admins\"\nsign_up = false",
        )
        .unwrap();
        let (c, _) = merge(&t.a.options, file).unwrap();
        let o = c.oidc.clone().expect("oidc");
        assert_eq!(o.issuer_url, "https://id.example.com");
        assert_eq!(o.client_id, "warren");
        assert_eq!(o.client_secret.as_deref(), Some("the-secret"));
        assert_eq!(o.admin_group.as_deref(), Some("admins"));
        assert!(!o.sign_up && !c.password_login);
        c.validate().unwrap();
        // Half a configuration is an error naming what is missing.
        let t = T::parse_from(["t", "--home", "/h", "--oidc-client-id", "warren"]);
        let err = merge(&t.a.options, FileConfig::default()).unwrap_err();
        assert!(err.to_string().contains("without an issuer"), "{err}");
        let err = toml::from_str::<FileConfig>("[oidc]\nclient_secrett = \"x\"").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
