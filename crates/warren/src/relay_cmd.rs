//! `warren relay`: read the relay's settings (flags, `WARREN_*` variables, an optional TOML
//! file), bind its listeners and run it until Ctrl-C or SIGTERM. With `--redis-url` it is one
//! of several instances: the routing table lives in Redis and a third, relay↔relay listener
//! (`--peer-listen`, reached by the others at `--advertise-url`) serves forwarded requests.

use crate::settings::set;
use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::PathBuf;
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
    #[command(flatten)]
    settings: RelaySettings,
}

/// The relay's settings, from flags and variables or from the file (every key optional,
/// unknown keys refused); those without a flag are the file's only.
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct RelaySettings {
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
    /// Seconds an accepted agent token is believed without asking the server again.
    #[arg(skip)]
    auth_cache_seconds: Option<u64>,
    /// Seconds a refused agent token stays refused without asking the server again.
    #[arg(skip)]
    auth_failure_cache_seconds: Option<u64>,
    /// Seconds a request waits for its workspace's agent to connect.
    #[arg(skip)]
    agent_wait_seconds: Option<u64>,
    /// Seconds an agent has to answer a dial.
    #[arg(skip)]
    dial_timeout_seconds: Option<u64>,
    /// Seconds of silence after which an agent's connection is dropped.
    #[arg(skip)]
    agent_idle_timeout_seconds: Option<u64>,
    /// Lifetime of an unrefreshed routing entry [default 300].
    #[arg(skip)]
    redis_entry_ttl_seconds: Option<u64>,
    /// How often routing entries are refreshed [default 240].
    #[arg(skip)]
    redis_refresh_seconds: Option<u64>,
    /// Prefix of the relay's Redis keys [default `warren:relay:`].
    #[arg(skip)]
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
    let s: RelaySettings = crate::settings::layered(&args.settings, args.config.as_deref())?;
    let server_url = s
        .server_url
        .context("the server URL is required: --server-url, WARREN_SERVER_URL or server_url")?;
    let secret = crate::settings::secret(
        "WARREN_RELAY_SHARED_SECRET",
        s.shared_secret_file,
        "shared secret",
    )?
    .context(
        "the relay↔server shared secret is required: --shared-secret-file, \
         WARREN_RELAY_SHARED_SECRET_FILE, WARREN_RELAY_SHARED_SECRET or shared_secret_file",
    )?;
    let mut config = RelayConfig::new(server_url, secret);
    set(&mut config.auth_cache_seconds, s.auth_cache_seconds);
    set(
        &mut config.auth_failure_cache_seconds,
        s.auth_failure_cache_seconds,
    );
    set(&mut config.agent_wait_seconds, s.agent_wait_seconds);
    set(&mut config.dial_timeout_seconds, s.dial_timeout_seconds);
    set(
        &mut config.agent_idle_timeout_seconds,
        s.agent_idle_timeout_seconds,
    );
    let redis_url = s.redis_url.filter(|u| !u.is_empty());
    let peer_listen = s.peer_listen;
    let advertise_url = s.advertise_url;
    let peer_secret = crate::settings::secret(
        "WARREN_RELAY_PEER_SECRET",
        s.peer_secret_file,
        "relay peer secret",
    )?;
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
            if let Some(v) = s.redis_entry_ttl_seconds {
                registry.entry_ttl = std::time::Duration::from_secs(v);
            }
            if let Some(v) = s.redis_refresh_seconds {
                registry.refresh_interval = std::time::Duration::from_secs(v);
            }
            set(&mut registry.key_prefix, s.redis_key_prefix);
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
    config.tls_cert_file = s.tls_cert_file;
    config.tls_key_file = s.tls_key_file;
    config.server_ca_file = s.server_ca_file;
    config.validate().context("invalid relay configuration")?;
    let agent_listen = match s.agent_listen {
        Some(a) => a,
        None => DEFAULT_AGENT_LISTEN.parse()?,
    };
    let internal_listen = match s.internal_listen {
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
        let err =
            toml::from_str::<RelaySettings>("server_url = 'http://a'\nsecret = 'x'").unwrap_err();
        assert!(err.to_string().contains("unknown field `secret`"), "{err}");
        let ok: RelaySettings =
            toml::from_str("server_url = 'http://a'\nagent_listen = '127.0.0.1:1'").unwrap();
        assert_eq!(ok.agent_listen, Some("127.0.0.1:1".parse().unwrap()));
        let cluster: RelaySettings = toml::from_str(
            "redis_url = 'redis://127.0.0.1:6379'\npeer_listen = '127.0.0.1:7083'\n\
             redis_entry_ttl_seconds = 30\nredis_refresh_seconds = 20",
        )
        .unwrap();
        assert_eq!(cluster.redis_refresh_seconds, Some(20));
    }
}
