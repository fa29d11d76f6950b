//! Warren's relay: agents dial out to it and keep one multiplexed connection; it forwards their
//! reconcile calls to the server and carries server→agent signals and proxy→workspace byte
//! streams back through that connection (relay.md, protocol in `warren_types::relay`).
//!
//! Listeners: the agent listener (agent tokens, checked with the server and cached), the
//! internal listener for the server and proxies (short-lived JWTs, audience `warren-relay`)
//! and, with several instances, the private relay↔relay listener (JWTs signed with a secret
//! only relays share). The routing table sits behind [`registry::AgentRegistry`]: in memory
//! alone, in Redis ([`redis_registry::RedisRegistry`]) when several instances share it.

pub mod config;
mod gitops;
mod handlers;
pub mod jwt;
pub mod redis_registry;
pub mod registry;
pub mod server;
pub use warren_tunnel as tunnel;

pub use config::{ConfigError, RelayConfig};

use axum::serve::ListenerExt;
use registry::{AgentRegistry, InMemoryRegistry, InstanceId, LocalConnections};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The relay's bound listeners.
#[derive(Debug)]
pub struct Listeners {
    /// Agents dial this one.
    pub agents: TcpListener,
    /// The server and proxies call this one.
    pub internal: TcpListener,
}

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("invalid relay configuration")]
    Config(#[from] ConfigError),
    #[error("building the HTTP client for the server")]
    HttpClient(#[source] reqwest::Error),
    #[error("creating the GitOps cache directory")]
    GitopsCache(#[source] std::io::Error),
    #[error("loading TLS material")]
    Tls(#[from] warren_tls::TlsError),
    #[error("a relay↔relay listener needs peer_secret")]
    PeersWithoutSecret,
    #[error("serving the {listener} listener")]
    Serve {
        listener: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Shared by every handler.
#[derive(Clone)]
pub(crate) struct Relay {
    pub(crate) server: Arc<server::ServerClient>,
    pub(crate) keys: jwt::JwtKeys,
    /// Relay↔relay: how this instance signs and checks forwarded requests.
    pub(crate) peer: Option<Peer>,
    pub(crate) registry: Arc<dyn AgentRegistry>,
    pub(crate) local: LocalConnections,
    pub(crate) instance: InstanceId,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
    pub(crate) gitops: gitops::Gitops,
}

#[derive(Clone)]
pub(crate) struct Peer {
    pub(crate) keys: jwt::PeerKeys,
    pub(crate) http: reqwest::Client,
}

/// Runs a relay alone (in-memory routing table) until `shutdown` fires.
pub async fn run(
    config: RelayConfig,
    listeners: Listeners,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    run_with_registry(
        config,
        listeners,
        Arc::new(InMemoryRegistry::default()),
        shutdown,
    )
    .await
}

/// Runs a relay with the given routing table until `shutdown` fires; then closes every agent
/// connection and tunnel, unregisters them and returns.
pub async fn run_with_registry(
    config: RelayConfig,
    listeners: Listeners,
    registry: Arc<dyn AgentRegistry>,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    run_with_peers(config, listeners, None, registry, shutdown).await
}

/// Runs one of several relay instances: as [`run_with_registry`], plus the relay↔relay
/// listener `peers` (other instances forward requests for agents connected here) and
/// forwarding of requests for agents connected elsewhere (needs `config.peer_secret`).
pub async fn run_with_peers(
    config: RelayConfig,
    listeners: Listeners,
    peers: Option<TcpListener>,
    registry: Arc<dyn AgentRegistry>,
    shutdown: CancellationToken,
) -> Result<(), RelayError> {
    config.validate()?;
    warren_metrics::handle();
    if peers.is_some() && config.peer_secret.is_none() {
        return Err(RelayError::PeersWithoutSecret);
    }
    let peer = match &config.peer_secret {
        Some(secret) => Some(Peer {
            keys: jwt::PeerKeys::new(secret.as_bytes()),
            http: reqwest::Client::builder()
                .http1_only()
                .tcp_nodelay(true)
                .connect_timeout(std::time::Duration::from_secs(2))
                .build()
                .map_err(RelayError::HttpClient)?,
        }),
        None => None,
    };
    let tls = warren_tls::ServerCert::from_options(
        config.tls_cert_file.clone(),
        config.tls_key_file.clone(),
    )?;
    let server_roots = warren_tls::CaBundle::load_optional(config.server_ca_file.as_deref())?;
    let keys = jwt::JwtKeys::new(config.shared_secret.as_bytes());
    let server = server::ServerClient::new(
        config.server_url.clone(),
        keys.clone(),
        config.auth_cache_ttl(),
        config.auth_failure_cache_ttl(),
        server_roots.as_ref(),
    )
    .map_err(RelayError::HttpClient)?;
    let relay = Relay {
        server: Arc::new(server),
        keys,
        peer,
        instance: registry
            .local_instance()
            .unwrap_or_else(|| InstanceId(uuid::Uuid::new_v4())),
        registry,
        local: LocalConnections::default(),
        config: Arc::new(config),
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
        gitops: gitops::Gitops::new().map_err(RelayError::GitopsCache)?,
    };
    tracing::info!(
        agents = ?listeners.agents.local_addr().ok(),
        agents_tls = tls.is_some(),
        internal = ?listeners.internal.local_addr().ok(),
        instance = %relay.instance.0,
        "relay listening"
    );
    // Tunnels carry interactive traffic (terminals, SSH) in small writes, and yamux writes a
    // frame's header and body separately: without TCP_NODELAY, Nagle's algorithm and delayed
    // ACKs add tens of milliseconds per round trip.
    let nodelay = |tcp: &mut tokio::net::TcpStream| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    };
    let agents = async {
        match &tls {
            None => {
                axum::serve(
                    listeners.agents.tap_io(nodelay),
                    handlers::agent_router(relay.clone()),
                )
                .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                .await
            }
            Some(cert) => {
                tokio::spawn(
                    cert.clone()
                        .watch(warren_tls::RELOAD_INTERVAL, shutdown.child_token()),
                );
                // Agents speak HTTP/1.1 (an upgrade to the tunnel), so nothing else is offered.
                let listener =
                    warren_tls::TlsListener::new(listeners.agents, cert, &[b"http/1.1"])?;
                axum::serve(listener, handlers::agent_router(relay.clone()))
                    .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                    .await
            }
        }
    };
    let internal = axum::serve(
        listeners.internal.tap_io(nodelay),
        handlers::internal_router(relay.clone()),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let peers_served = async {
        match peers {
            Some(l) => {
                axum::serve(l.tap_io(nodelay), handlers::peer_router(relay.clone()))
                    .with_graceful_shutdown(shutdown.clone().cancelled_owned())
                    .await
            }
            None => Ok(()),
        }
    };
    let (a, i, p) = tokio::join!(agents, internal, peers_served);
    // Upgraded connections are not tracked by the HTTP server; they watch `shutdown`
    // themselves and unregister on the way out.
    relay.tasks.close();
    relay.tasks.wait().await;
    relay.registry.close().await;
    a.map_err(|source| RelayError::Serve {
        listener: "agent",
        source,
    })?;
    i.map_err(|source| RelayError::Serve {
        listener: "internal",
        source,
    })?;
    p.map_err(|source| RelayError::Serve {
        listener: "relay↔relay",
        source,
    })?;
    tracing::info!("relay stopped");
    Ok(())
}
