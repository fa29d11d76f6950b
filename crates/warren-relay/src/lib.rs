//! Warren's relay: agents dial out to it and keep one multiplexed connection; it forwards their
//! reconcile calls to the server and carries server→agent signals and proxy→workspace byte
//! streams back through that connection (relay.md, protocol in `warren_types::relay`).
//!
//! Two listeners: the agent listener (agent tokens, checked with the server and cached) and
//! the internal listener for the server and proxies (short-lived JWTs, audience
//! `warren-relay`). The routing table sits behind [`registry::AgentRegistry`].

pub mod config;
mod handlers;
pub mod jwt;
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
    pub(crate) registry: Arc<dyn AgentRegistry>,
    pub(crate) local: LocalConnections,
    pub(crate) instance: InstanceId,
    pub(crate) config: Arc<RelayConfig>,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: TaskTracker,
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
    config.validate()?;
    let keys = jwt::JwtKeys::new(config.shared_secret.as_bytes());
    let server = server::ServerClient::new(
        config.server_url.clone(),
        keys.clone(),
        config.auth_cache_ttl(),
        config.auth_failure_cache_ttl(),
    )
    .map_err(RelayError::HttpClient)?;
    let relay = Relay {
        server: Arc::new(server),
        keys,
        registry,
        local: LocalConnections::default(),
        instance: InstanceId(uuid::Uuid::new_v4()),
        config: Arc::new(config),
        shutdown: shutdown.clone(),
        tasks: TaskTracker::new(),
    };
    tracing::info!(
        agents = ?listeners.agents.local_addr().ok(),
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
    let agents = axum::serve(
        listeners.agents.tap_io(nodelay),
        handlers::agent_router(relay.clone()),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let internal = axum::serve(
        listeners.internal.tap_io(nodelay),
        handlers::internal_router(relay.clone()),
    )
    .with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let (a, i) = tokio::join!(agents, internal);
    // Upgraded connections are not tracked by the HTTP server; they watch `shutdown`
    // themselves and unregister on the way out.
    relay.tasks.close();
    relay.tasks.wait().await;
    a.map_err(|source| RelayError::Serve {
        listener: "agent",
        source,
    })?;
    i.map_err(|source| RelayError::Serve {
        listener: "internal",
        source,
    })?;
    tracing::info!("relay stopped");
    Ok(())
}
