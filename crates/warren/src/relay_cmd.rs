//! `warren relay`: read the relay's settings (flags, `WARREN_*` variables, an optional TOML
//! file), bind its listeners and run it until Ctrl-C or SIGTERM. With `--redis-url` it is one
//! of several instances: the routing table lives in Redis and a third, relay↔relay listener
//! (`--peer-listen`, reached by the others at `--advertise-url`) serves forwarded requests.

use anyhow::{bail, Context};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;
use url::Url;
use warren_relay::{Listeners, RelayConfig};

/// Default address of the agent listener (agents dial it from other networks).
const DEFAULT_AGENT_LISTEN: &str = "0.0.0.0:7081";
/// Default address of the internal listener (server and proxy only).
const DEFAULT_INTERNAL_LISTEN: &str = "127.0.0.1:7082";

#[derive(Debug, clap::Args)]
pub struct RelayArgs {
    /// TOML file with any of the settings below (snake_case keys); flags and variables win.
    #[arg(long, env = "WARREN_RELAY_CONFIG")]
    config: Option<PathBuf>,
    /// Address agents connect to [default: 0.0.0.0:7081].
    #[arg(long, env = "WARREN_RELAY_AGENT_LISTEN")]
    agent_listen: Option<SocketAddr>,
    /// Address the server and proxies call [default: 127.0.0.1:7082].
    #[arg(long, env = "WARREN_RELAY_INTERNAL_LISTEN")]
    internal_listen: Option<SocketAddr>,
    /// Base URL of the server.
    #[arg(long, env = "WARREN_SERVER_URL")]
    server_url: Option<Url>,
    /// File holding the relay↔server shared secret (or set WARREN_RELAY_SHARED_SECRET);
    /// `--relay-secret-file` as the server and the proxy call it.
    #[arg(
        long,
        visible_alias = "relay-secret-file",
        env = "WARREN_RELAY_SHARED_SECRET_FILE"
    )]
    shared_secret_file: Option<PathBuf>,
    /// Redis holding the routing table shared by several relay instances (none: alone).
    #[arg(long, env = "WARREN_REDIS_URL")]
    redis_url: Option<String>,
    /// Address of the relay↔relay listener (with --redis-url).
    #[arg(long, env = "WARREN_RELAY_PEER_LISTEN")]
    peer_listen: Option<SocketAddr>,
    /// URL other relay instances use to reach the relay↔relay listener [default:
    /// http://<peer-listen> when that is not a wildcard address].
    #[arg(long, env = "WARREN_RELAY_ADVERTISE_URL")]
    advertise_url: Option<Url>,
    /// File holding the secret only relay instances share (or set WARREN_RELAY_PEER_SECRET).
    #[arg(long, env = "WARREN_RELAY_PEER_SECRET_FILE")]
    peer_secret_file: Option<PathBuf>,
    /// Serve the agents' listener over TLS with this certificate chain (PEM); re-read when
    /// it changes.
    #[arg(long, env = "WARREN_RELAY_TLS_CERT_FILE", value_name = "FILE")]
    tls_cert_file: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert-file; re-read when it changes.
    #[arg(long, env = "WARREN_RELAY_TLS_KEY_FILE", value_name = "FILE")]
    tls_key_file: Option<PathBuf>,
    /// CA bundle (PEM) trusted for --server-url besides the public roots.
    #[arg(long, env = "WARREN_RELAY_SERVER_CA_FILE", value_name = "FILE")]
    server_ca_file: Option<PathBuf>,
}

/// The TOML file; every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayFile {
    agent_listen: Option<SocketAddr>,
    internal_listen: Option<SocketAddr>,
    server_url: Option<Url>,
    shared_secret_file: Option<PathBuf>,
    auth_cache_seconds: Option<u64>,
    auth_failure_cache_seconds: Option<u64>,
    agent_wait_seconds: Option<u64>,
    dial_timeout_seconds: Option<u64>,
    agent_idle_timeout_seconds: Option<u64>,
    redis_url: Option<String>,
    peer_listen: Option<SocketAddr>,
    advertise_url: Option<Url>,
    peer_secret_file: Option<PathBuf>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
    server_ca_file: Option<PathBuf>,
    /// Lifetime of an unrefreshed routing entry [default 300].
    redis_entry_ttl_seconds: Option<u64>,
    /// How often routing entries are refreshed [default 240].
    redis_refresh_seconds: Option<u64>,
    /// Prefix of the relay's Redis keys [default `warren:relay:`].
    redis_key_prefix: Option<String>,
}

/// The settings of one of several instances.
struct Cluster {
    registry: warren_relay::redis_registry::RedisRegistryConfig,
    peer_listen: SocketAddr,
}

struct Resolved {
    config: RelayConfig,
    agent_listen: SocketAddr,
    internal_listen: SocketAddr,
    cluster: Option<Cluster>,
}

/// Reads a secret from a file, without the trailing newline editors add.
pub(crate) fn read_secret(path: &Path, what: &str) -> anyhow::Result<String> {
    let raw = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} from {}", path.display()))?;
    let secret = raw.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        bail!("the {what} file {} is empty", path.display());
    }
    Ok(secret)
}

/// A token cancelled on the first Ctrl-C or SIGTERM.
pub(crate) fn shutdown_on_signals() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::terminate()) {
                Ok(mut term) => {
                    tokio::select! {
                        // Cancel-safe: a fresh Ctrl-C listener; nothing is lost by dropping it.
                        _ = tokio::signal::ctrl_c() => {}
                        // Cancel-safe: `recv` on a signal stream loses nothing when dropped.
                        _ = term.recv() => {}
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot watch SIGTERM; only Ctrl-C stops");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutting down");
        t.cancel();
    });
    token
}

fn resolve(args: RelayArgs) -> anyhow::Result<Resolved> {
    let file: RelayFile = crate::settings::read_file(args.config.as_deref())?;
    let server_url = args
        .server_url
        .or(file.server_url)
        .context("the server URL is required: --server-url, WARREN_SERVER_URL or server_url")?;
    let secret = match (
        std::env::var("WARREN_RELAY_SHARED_SECRET").ok(),
        args.shared_secret_file.or(file.shared_secret_file),
    ) {
        (_, Some(path)) => read_secret(&path, "shared secret")?,
        (Some(s), None) if !s.is_empty() => s,
        _ => bail!(
            "the relay↔server shared secret is required: --shared-secret-file, \
             WARREN_RELAY_SHARED_SECRET_FILE, WARREN_RELAY_SHARED_SECRET or shared_secret_file"
        ),
    };
    let mut config = RelayConfig::new(server_url, secret);
    if let Some(v) = file.auth_cache_seconds {
        config.auth_cache_seconds = v;
    }
    if let Some(v) = file.auth_failure_cache_seconds {
        config.auth_failure_cache_seconds = v;
    }
    if let Some(v) = file.agent_wait_seconds {
        config.agent_wait_seconds = v;
    }
    if let Some(v) = file.dial_timeout_seconds {
        config.dial_timeout_seconds = v;
    }
    if let Some(v) = file.agent_idle_timeout_seconds {
        config.agent_idle_timeout_seconds = v;
    }
    let redis_url = args.redis_url.or(file.redis_url).filter(|u| !u.is_empty());
    let peer_listen = args.peer_listen.or(file.peer_listen);
    let advertise_url = args.advertise_url.or(file.advertise_url);
    let peer_secret = match (
        std::env::var("WARREN_RELAY_PEER_SECRET").ok(),
        args.peer_secret_file.or(file.peer_secret_file),
    ) {
        (_, Some(path)) => Some(read_secret(&path, "relay peer secret")?),
        (Some(s), None) if !s.is_empty() => Some(s),
        _ => None,
    };
    let cluster = match redis_url {
        None => {
            if peer_listen.is_some() || advertise_url.is_some() {
                bail!(
                    "--peer-listen and --advertise-url need --redis-url (several relay instances)"
                );
            }
            None
        }
        Some(redis_url) => {
            let peer_listen = peer_listen.context(
                "several relay instances need a relay↔relay listener: --peer-listen, \
                 WARREN_RELAY_PEER_LISTEN or peer_listen",
            )?;
            if peer_secret.is_none() {
                bail!(
                    "several relay instances need the relay peer secret: --peer-secret-file, \
                     WARREN_RELAY_PEER_SECRET_FILE, WARREN_RELAY_PEER_SECRET or peer_secret_file"
                );
            }
            let advertise_url = match advertise_url {
                Some(u) => u,
                None if !peer_listen.ip().is_unspecified() => {
                    format!("http://{peer_listen}").parse()?
                }
                None => bail!(
                    "--peer-listen {peer_listen} is a wildcard address; give --advertise-url \
                     (how the other relay instances reach this one)"
                ),
            };
            let mut registry =
                warren_relay::redis_registry::RedisRegistryConfig::new(redis_url, advertise_url);
            if let Some(v) = file.redis_entry_ttl_seconds {
                registry.entry_ttl = std::time::Duration::from_secs(v);
            }
            if let Some(v) = file.redis_refresh_seconds {
                registry.refresh_interval = std::time::Duration::from_secs(v);
            }
            if let Some(p) = file.redis_key_prefix {
                registry.key_prefix = p;
            }
            if registry.refresh_interval.is_zero()
                || registry.refresh_interval >= registry.entry_ttl
            {
                bail!("redis_refresh_seconds must be above zero and below redis_entry_ttl_seconds");
            }
            Some(Cluster {
                registry,
                peer_listen,
            })
        }
    };
    config.peer_secret = peer_secret;
    config.tls_cert_file = args.tls_cert_file.or(file.tls_cert_file);
    config.tls_key_file = args.tls_key_file.or(file.tls_key_file);
    config.server_ca_file = args.server_ca_file.or(file.server_ca_file);
    config.validate().context("invalid relay configuration")?;
    let agent_listen = match args.agent_listen.or(file.agent_listen) {
        Some(a) => a,
        None => DEFAULT_AGENT_LISTEN.parse()?,
    };
    let internal_listen = match args.internal_listen.or(file.internal_listen) {
        Some(a) => a,
        None => DEFAULT_INTERNAL_LISTEN.parse()?,
    };
    Ok(Resolved {
        config,
        agent_listen,
        internal_listen,
        cluster,
    })
}

pub async fn run(args: RelayArgs) -> anyhow::Result<()> {
    let Resolved {
        config,
        agent_listen,
        internal_listen,
        cluster,
    } = resolve(args)?;
    let agents = tokio::net::TcpListener::bind(agent_listen)
        .await
        .with_context(|| format!("binding the agent listener on {agent_listen}"))?;
    let internal = tokio::net::TcpListener::bind(internal_listen)
        .await
        .with_context(|| format!("binding the internal listener on {internal_listen}"))?;
    let shutdown = shutdown_on_signals();
    match cluster {
        None => warren_relay::run(config, Listeners { agents, internal }, shutdown).await?,
        Some(cluster) => {
            let peers = tokio::net::TcpListener::bind(cluster.peer_listen)
                .await
                .with_context(|| {
                    format!(
                        "binding the relay↔relay listener on {}",
                        cluster.peer_listen
                    )
                })?;
            let registry = warren_relay::redis_registry::RedisRegistry::connect(cluster.registry)
                .await
                .context("connecting to the relay routing table in redis")?;
            warren_relay::run_with_peers(
                config,
                Listeners { agents, internal },
                Some(peers),
                std::sync::Arc::new(registry),
                shutdown,
            )
            .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_refuses_unknown_keys() {
        let err = toml::from_str::<RelayFile>("server_url = 'http://a'\nsecret = 'x'").unwrap_err();
        assert!(err.to_string().contains("unknown field `secret`"), "{err}");
        let ok: RelayFile =
            toml::from_str("server_url = 'http://a'\nagent_listen = '127.0.0.1:1'").unwrap();
        assert_eq!(ok.agent_listen, Some("127.0.0.1:1".parse().unwrap()));
        let cluster: RelayFile = toml::from_str(
            "redis_url = 'redis://127.0.0.1:6379'\npeer_listen = '127.0.0.1:7083'\n\
             redis_entry_ttl_seconds = 30\nredis_refresh_seconds = 20",
        )
        .unwrap();
        assert_eq!(cluster.redis_refresh_seconds, Some(20));
    }
}
