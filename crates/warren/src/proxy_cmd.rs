//! `warren proxy`: read the proxy's settings (flags, `WARREN_*` variables, an optional TOML
//! file), validate them, bind its listeners (HTTP, and SSH unless `--no-ssh`) and run it
//! until Ctrl-C or SIGTERM. `warren proxy rotate-key` asks the server (as a signed-in admin)
//! to rotate the cookie-signing key every replica shares (the previous key stays valid for
//! one session lifetime; running replicas pick it up); `warren proxy host-key` prints the SSH
//! host public key of a host key file.
//!
//! The proxy's OAuth client must be registered on the server first (an admin:
//! `POST /api/v1/oauth/clients` with `first_party: true` and the redirect URI
//! `{scheme}://auth.{domain}[:port]/oauth/callback`); `warren up` does that itself.

use crate::relay_cmd::shutdown_on_signals;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
use tokio::net::TcpListener;
use url::Url;
use warren_proxy::{config, ProxyConfig, ProxyListeners};

/// Default address of the HTTP listener (browsers and API clients, usually behind a load
/// balancer that terminates TLS).
const DEFAULT_HTTP_LISTEN: &str = "0.0.0.0:7080";
/// Default address of the SSH listener.
const DEFAULT_SSH_LISTEN: &str = "0.0.0.0:2222";
pub(crate) use warren_proxy::config::DEFAULT_OAUTH_CLIENT_ID;

#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ProxyArgs {
    #[command(subcommand)]
    command: Option<ProxyCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum ProxyCommand {
    /// Rotate the cookie-signing key every proxy replica shares (admin, through the server
    /// you are signed in to); sessions signed with the previous key stay valid for one
    /// session lifetime.
    RotateKey(warren_cli::OutputArgs),
    /// List the proxies the server heard from in the last day (admin, through the server
    /// you are signed in to): each one's region, workspace domain, SSH address and whether it
    /// serves now.
    #[command(visible_alias = "ls")]
    List(warren_cli::OutputArgs),
    /// Print the SSH host public key (creating the key if the proxy never ran), for the
    /// server's --ssh-host-key-file so that clients pin it.
    HostKey {
        /// The proxy's state directory.
        #[arg(long, env = "WARREN_PROXY_STATE_DIR")]
        state_dir: PathBuf,
        /// The host key file, when not the state directory's.
        #[arg(long, env = "WARREN_PROXY_SSH_HOST_KEY_FILE")]
        ssh_host_key_file: Option<PathBuf>,
    },
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// TOML file with any of the settings below (snake_case keys) plus
    /// session_lifetime_secs, authorization_cache_secs, activity_report_secs,
    /// ssh_host_key_file and a `[limits]` table (max_http_connections, max_ssh_connections,
    /// header_timeout_secs, ssh_handshake_timeout_secs); flags and variables win.
    #[arg(long, env = "WARREN_PROXY_CONFIG")]
    config: Option<PathBuf>,
    #[command(flatten)]
    settings: ProxySettings,
}

/// The proxy's settings, from flags and variables or from the file (every key optional,
/// unknown keys refused); those without a flag are the file's only.
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ProxySettings {
    /// Address of the HTTP listener [default: 0.0.0.0:7080].
    #[arg(long, env = "WARREN_PROXY_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Address of the SSH listener [default: 0.0.0.0:2222].
    #[arg(long, env = "WARREN_PROXY_SSH_LISTEN")]
    ssh_listen: Option<SocketAddr>,
    /// Address of the listener serving /metrics and /healthz (none: not served).
    #[arg(long, env = "WARREN_PROXY_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Run no SSH listener.
    #[arg(
        long,
        env = "WARREN_PROXY_NO_SSH",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    no_ssh: Option<bool>,
    /// Directory of the proxy's keys (cookie keys, SSH host key).
    #[arg(long, env = "WARREN_PROXY_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Workspace hosts are `{port}-{workspace}.{domain}`; `auth.{domain}` must reach the
    /// proxy too.
    #[arg(long, env = "WARREN_WORKSPACE_DOMAIN")]
    workspace_domain: Option<String>,
    /// Scheme browsers use: http or https (then cookies are Secure) [default: http].
    #[arg(long, env = "WARREN_PROXY_PUBLIC_SCHEME")]
    public_scheme: Option<String>,
    /// Port browsers use when it is not the scheme's default.
    #[arg(long, env = "WARREN_PROXY_PUBLIC_PORT")]
    public_port: Option<u16>,
    /// Base URL of the server as the proxy reaches it.
    #[arg(long, env = "WARREN_SERVER_URL")]
    server_url: Option<Url>,
    /// Base URL of the server as browsers reach it [default: --server-url].
    #[arg(long, env = "WARREN_SERVER_PUBLIC_URL")]
    server_public_url: Option<Url>,
    /// A relay's internal listener.
    #[arg(long, env = "WARREN_RELAY_URL")]
    relay_url: Option<Url>,
    /// File holding the relay↔server↔proxy shared secret (or set WARREN_PROXY_SHARED_SECRET);
    /// `--relay-secret-file` as the server calls it.
    #[arg(
        long,
        visible_alias = "relay-secret-file",
        env = "WARREN_PROXY_SHARED_SECRET_FILE"
    )]
    shared_secret_file: Option<PathBuf>,
    /// The proxy's OAuth client id [default: warren-proxy].
    #[arg(long, env = "WARREN_PROXY_OAUTH_CLIENT_ID")]
    oauth_client_id: Option<String>,
    /// File holding the OAuth client secret (or set WARREN_PROXY_OAUTH_CLIENT_SECRET).
    #[arg(long, env = "WARREN_PROXY_OAUTH_CLIENT_SECRET_FILE")]
    oauth_client_secret_file: Option<PathBuf>,
    /// Direct mode: dial workspaces at this template instead of through the relay, e.g.
    /// `{workspace}.{namespace}.svc.cluster.local:{port}`.
    #[arg(long, env = "WARREN_PROXY_DIRECT_UPSTREAM")]
    direct_upstream: Option<String>,
    /// Serve HTTPS with this certificate chain (PEM; a wildcard for the workspace domain);
    /// re-read when it changes.
    #[arg(long, env = "WARREN_PROXY_TLS_CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file; re-read when it changes.
    #[arg(long, env = "WARREN_PROXY_TLS_KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// CA bundle (PEM) trusted for --server-url besides the public roots.
    #[arg(long, env = "WARREN_PROXY_SERVER_CA_FILE", value_name = "FILE")]
    server_ca_file: Option<PathBuf>,
    /// The region this proxy is the front door of (its agents are configured with the same
    /// `region`); their workspace URLs point here while it serves. Sign-in stays on the
    /// server. None: a central proxy.
    #[arg(long, env = "WARREN_PROXY_REGION")]
    region: Option<String>,
    /// Where SSH clients reach this proxy's SSH server (`host:port`); a region's proxy gives
    /// it so that `warren ws ssh` to the region's workspaces comes here.
    #[arg(long, env = "WARREN_PROXY_SSH_PUBLIC_ADDRESS")]
    ssh_public_address: Option<String>,
    /// `[limits]`: connection caps and timeouts (warren_proxy::config::ConnectionLimits).
    #[arg(skip)]
    limits: Option<config::ConnectionLimits>,
    /// How long a workspace session cookie lasts.
    #[arg(skip)]
    session_lifetime_secs: Option<u64>,
    /// How long a positive authorisation answer is reused (at most 60 s).
    #[arg(skip)]
    authorization_cache_secs: Option<u64>,
    /// How often the proxy reports workspace activity to the server.
    #[arg(skip)]
    activity_report_secs: Option<u64>,
    /// The SSH host key, when not the state directory's.
    #[arg(skip)]
    ssh_host_key_file: Option<PathBuf>,
}

struct Resolved {
    config: ProxyConfig,
    http_listen: SocketAddr,
    ssh_listen: Option<SocketAddr>,
    metrics_listen: Option<SocketAddr>,
}

fn resolve(args: RunArgs) -> anyhow::Result<Resolved> {
    let s: ProxySettings = crate::settings::layered(&args.settings, args.config.as_deref())?;
    let server_url = s
        .server_url
        .context("the server URL is required: --server-url, WARREN_SERVER_URL or server_url")?;
    let shared_secret = crate::settings::secret(
        "WARREN_PROXY_SHARED_SECRET",
        s.shared_secret_file,
        "shared secret",
    )?
    .context(
        "the shared secret is required: --shared-secret-file, WARREN_PROXY_SHARED_SECRET_FILE, \
         shared_secret_file or WARREN_PROXY_SHARED_SECRET",
    )?;
    let oauth_client_secret = crate::settings::secret(
        "WARREN_PROXY_OAUTH_CLIENT_SECRET",
        s.oauth_client_secret_file,
        "OAuth client secret",
    )?
    .context(
        "the OAuth client secret is required: --oauth-client-secret-file, \
         WARREN_PROXY_OAUTH_CLIENT_SECRET_FILE, oauth_client_secret_file or \
         WARREN_PROXY_OAUTH_CLIENT_SECRET",
    )?;
    let config = ProxyConfig {
        state_dir: s.state_dir
            .context("the state directory is required: --state-dir, WARREN_PROXY_STATE_DIR or state_dir")?,
        workspace_domain: s.workspace_domain.context(
            "the workspace domain is required: --workspace-domain, WARREN_WORKSPACE_DOMAIN or workspace_domain",
        )?,
        public_scheme: s.public_scheme
            .unwrap_or_else(|| "http".into()),
        public_port: s.public_port,
        server_public_url: s.server_public_url
            .unwrap_or_else(|| server_url.clone()),
        server_url,
        relay_url: s.relay_url
            .context("the relay URL is required: --relay-url, WARREN_RELAY_URL or relay_url")?,
        shared_secret,
        oauth_client_id: s.oauth_client_id
            .unwrap_or_else(|| DEFAULT_OAUTH_CLIENT_ID.into()),
        oauth_client_secret,
        session_lifetime_secs: s.session_lifetime_secs
            .unwrap_or(config::DEFAULT_SESSION_LIFETIME_SECS),
        authorization_cache_secs: s.authorization_cache_secs
            .unwrap_or(config::DEFAULT_AUTHORIZATION_CACHE_SECS),
        activity_report_secs: s.activity_report_secs
            .unwrap_or(config::DEFAULT_ACTIVITY_REPORT_SECS),
        direct_upstream: s.direct_upstream,
        tls_cert_file: s.tls_cert_file,
        tls_key_file: s.tls_key_file,
        server_ca_file: s.server_ca_file,
        ssh_host_key_file: s.ssh_host_key_file,
        limits: s.limits.unwrap_or_default(),
        region: s.region,
        ssh_public_address: s.ssh_public_address,
    };
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let http_listen = match s.http_listen {
        Some(a) => a,
        None => DEFAULT_HTTP_LISTEN.parse().expect("valid default"),
    };
    let ssh_listen = if s.no_ssh.unwrap_or(false) {
        None
    } else {
        Some(match s.ssh_listen {
            Some(a) => a,
            None => DEFAULT_SSH_LISTEN.parse().expect("valid default"),
        })
    };
    Ok(Resolved {
        config,
        http_listen,
        ssh_listen,
        metrics_listen: s.metrics_listen,
    })
}

impl ProxyArgs {
    /// `rotate-key` and `list` are a client's commands (the server answers them); the
    /// command for the CLI, if it is one of them.
    pub fn client_command(&mut self) -> Option<warren_cli::Command> {
        match self.command.take() {
            Some(ProxyCommand::RotateKey(out)) => Some(warren_cli::Command::RotateProxyKey(out)),
            Some(ProxyCommand::List(out)) => Some(warren_cli::Command::ListProxies(out)),
            other => {
                self.command = other;
                None
            }
        }
    }
}

pub async fn run(args: ProxyArgs) -> anyhow::Result<()> {
    match args.command {
        Some(ProxyCommand::RotateKey(_) | ProxyCommand::List(_)) => {
            anyhow::bail!("`warren proxy rotate-key` and `list` are client commands, run by main")
        }
        Some(ProxyCommand::HostKey {
            state_dir,
            ssh_host_key_file,
        }) => {
            let path = ssh_host_key_file
                .unwrap_or_else(|| state_dir.join(warren_proxy::config::SSH_HOST_KEY_FILE));
            let key = warren_proxy::ssh::host_public_key(&path)
                .with_context(|| format!("reading the SSH host key {}", path.display()))?;
            println!("{key}");
            Ok(())
        }
        None => serve(args.run).await,
    }
}

async fn serve(args: RunArgs) -> anyhow::Result<()> {
    // Everything is validated before anything is bound.
    let r = resolve(args)?;
    let http = TcpListener::bind(r.http_listen)
        .await
        .with_context(|| format!("binding the proxy's HTTP listener to {}", r.http_listen))?;
    let ssh = match r.ssh_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("binding the proxy's SSH listener to {a}"))?,
        ),
        None => None,
    };
    let metrics = match r.metrics_listen {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .with_context(|| format!("binding the proxy's metrics listener to {a}"))?,
        ),
        None => None,
    };
    tracing::info!(http = %r.http_listen, ssh = ?r.ssh_listen, metrics = ?r.metrics_listen, domain = %r.config.workspace_domain, "proxy listening");
    let shutdown = shutdown_on_signals();
    warren_proxy::run(r.config, ProxyListeners { http, ssh, metrics }, shutdown)
        .await
        .context("the proxy stopped")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct T {
        #[command(flatten)]
        a: RunArgs,
    }

    #[test]
    fn file_and_flags_resolve_and_validate() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, format!("{}\n", "s".repeat(40))).unwrap();
        let oauth = dir.path().join("oauth");
        std::fs::write(&oauth, "client-secret\n").unwrap();
        let cfg = dir.path().join("proxy.toml");
        std::fs::write(
            &cfg,
            format!(
                "state_dir = {:?}\nworkspace_domain = \"ws.example.com\"\nserver_url = \"http://server:7070\"\n\
                 relay_url = \"http://relay:7082\"\nshared_secret_file = {:?}\n\
                 oauth_client_secret_file = {:?}\nauthorization_cache_secs = 10\nno_ssh = true\n",
                dir.path().join("state"),
                secret,
                oauth
            ),
        )
        .unwrap();
        let t = T::parse_from([
            "t",
            "--config",
            cfg.to_str().unwrap(),
            "--public-port",
            "8443",
            "--public-scheme",
            "https",
        ]);
        let r = resolve(t.a).unwrap();
        assert_eq!(r.config.authorization_cache_secs, 10);
        assert_eq!(r.config.shared_secret, "s".repeat(40));
        assert_eq!(r.config.oauth_client_secret, "client-secret");
        assert_eq!(r.config.oauth_client_id, DEFAULT_OAUTH_CLIENT_ID);
        assert_eq!(r.config.server_public_url.as_str(), "http://server:7070/");
        assert_eq!(
            r.config.callback_url(),
            "https://auth.ws.example.com:8443/oauth/callback"
        );
        assert_eq!(r.ssh_listen, None);
        assert_eq!(r.http_listen.to_string(), DEFAULT_HTTP_LISTEN);

        // Unknown keys and invalid values are refused before anything binds.
        std::fs::write(&cfg, "no_such_key = 1\n").unwrap();
        let t = T::parse_from(["t", "--config", cfg.to_str().unwrap()]);
        assert!(format!("{:#}", resolve(t.a).err().unwrap()).contains("no_such_key"));
        std::fs::write(
            &cfg,
            format!(
                "state_dir = \"/tmp/x\"\nworkspace_domain = \"https://bad\"\nserver_url = \"http://s\"\n\
                 relay_url = \"http://r\"\nshared_secret_file = {secret:?}\noauth_client_secret_file = {oauth:?}\n"
            ),
        )
        .unwrap();
        let t = T::parse_from(["t", "--config", cfg.to_str().unwrap()]);
        assert!(format!("{:#}", resolve(t.a).err().unwrap()).contains("workspace_domain"));
    }
}
