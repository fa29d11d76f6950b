//! `warren proxy`: the authenticating front door for workspace HTTP and WebSocket hosts,
//! the web terminal and SSH (access.md).
//!
//! Every path into a workspace passes the same two checks: who is this (session cookie,
//! personal access token, SSH key) and may they reach this workspace (the server's answer,
//! cached ≤ 60 s). Traffic then goes proxy → relay → the agent's connection → the workspace,
//! or straight to the workspace in direct mode. The proxy keeps no sessions of its own: the
//! signed cookie is the session, its keys and the SSH host key are shared by the server, and
//! hand-offs are used once through the server — so replicas behind one load balancer are
//! interchangeable, with no sticky sessions.
//!
//! Module map: `http` (host routing, sign-in, forwarding), `terminal` (the web terminal's
//! page and WebSocket ⇄ exec bridge), `ssh` (the SSH server), `server_api` and `relay` (the
//! two peers), `activity` (idle-policy reports), `presence` (which region this proxy serves).

pub mod activity;
pub mod config;
mod http;
mod jwt;
mod port_forward;
mod presence;
pub mod relay;
pub mod server_api;
mod sessions;
pub mod ssh;
mod stop_warning;
mod terminal;

pub use config::ProxyConfig;
pub use http::keys::{KeyError, KEY_FILE as COOKIE_KEY_FILE};

use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use warren_types::internal::{ProxyKeyOffer, ProxyKeys};

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("preparing TLS")]
    Tls(#[from] warren_tls::TlsError),
    #[error("building the server's HTTP client")]
    ServerClient(#[source] reqwest::Error),
    #[error("preparing the proxy's cookie keys")]
    CookieKeys(#[from] http::keys::KeyError),
    #[error("the server refused to share the proxies' keys")]
    SharedKeys(#[source] server_api::ServerApiError),
    #[error("preparing the proxy's keys in {path}")]
    Keys {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("serving {what}")]
    Serve {
        what: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The proxy's sockets, bound by the caller so tests and `warren up` can use port 0.
#[derive(Debug)]
pub struct ProxyListeners {
    /// Workspace hosts, the sign-in host and terminal hosts (HTTP/1.1 and HTTP/2).
    pub http: TcpListener,
    /// The SSH server; `None` runs no SSH.
    pub ssh: Option<TcpListener>,
    /// `GET /metrics` and `GET /healthz` for Prometheus and probes (not the public HTTP
    /// listener: metrics are for the cluster, not for everyone); `None` serves none.
    pub metrics: Option<TcpListener>,
}

/// What every part of the proxy shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: ProxyConfig,
    pub server: server_api::ServerApi,
    pub relay: relay::RelayClient,
    pub activity: activity::Activity,
    /// Terminals and SSH sessions opened and closed, for the audit log.
    pub sessions: sessions::Sessions,
    /// The HTTP front door's keys, caches and upstream connections.
    pub front: http::Front,
    /// Cancelled when the proxy stops: long-lived upgraded connections (WebSockets, the web
    /// terminal) end then, as they would with the process, so clients reconnect elsewhere.
    pub closing: CancellationToken,
}

/// Runs the proxy until `shutdown` is cancelled.
pub async fn run(
    config: ProxyConfig,
    listeners: ProxyListeners,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    config.validate()?;
    warren_metrics::handle();
    std::fs::create_dir_all(&config.state_dir).map_err(|source| ProxyError::Keys {
        path: config.state_dir.display().to_string(),
        source,
    })?;
    // A broken host key stops the start, before any listener serves.
    let offer = ProxyKeyOffer {
        cookie_key: Some(http::keys::offer(&config.state_dir)?),
        ssh_host_key: match listeners.ssh {
            Some(_) => ssh::offered_host_key(&config)?,
            None => None,
        },
    };
    let tls = warren_tls::ServerCert::from_options(
        config.tls_cert_file.clone(),
        config.tls_key_file.clone(),
    )?;
    let server_roots = warren_tls::CaBundle::load_optional(config.server_ca_file.as_deref())?;
    let server = server_api::ServerApi::new(
        config.server_url.clone(),
        config.shared_secret.as_bytes(),
        server_roots.as_ref(),
    )
    .map_err(ProxyError::ServerClient)?;
    let Some(keys) = shared_keys(&server, &offer, &shutdown).await? else {
        return Ok(());
    };
    let cookie_keys = http::keys::CookieKeys::new(&keys.cookie_keys, config.session_lifetime_secs)?;
    let ssh_key = match listeners.ssh {
        Some(_) => Some(ssh::host_key(&config, keys.ssh_host_key.as_deref())?),
        None => None,
    };
    let shared = Arc::new(Shared {
        server,
        relay: relay::RelayClient::new(config.relay_url.clone(), config.shared_secret.as_bytes()),
        activity: activity::Activity::default(),
        sessions: sessions::Sessions::default(),
        front: http::Front::new(&config, cookie_keys),
        config,
        closing: shutdown.clone(),
    });
    tokio::spawn(http::keys::poll_loop(
        shared.clone(),
        shutdown.child_token(),
    ));
    // Not spawned: it ends with this future, so a proxy that dies says nothing more.
    let presence = presence::run(
        shared.clone(),
        http::signin::random_token(24),
        ssh_key.is_some(),
        shutdown.clone(),
    );
    let session_reporter = tokio::spawn(shared.sessions.clone().report_loop(
        shared.server.clone(),
        std::time::Duration::from_secs(shared.config.activity_report_secs),
        shutdown.clone(),
    ));
    let reporter = tokio::spawn(shared.activity.clone().report_loop(
        shared.server.clone(),
        std::time::Duration::from_secs(shared.config.activity_report_secs),
        shutdown.clone(),
    ));
    if let Some(cert) = &tls {
        tokio::spawn(
            cert.clone()
                .watch(warren_tls::RELOAD_INTERVAL, shutdown.child_token()),
        );
    }
    // A server that fails stops the whole proxy (and its presence): a half-serving proxy
    // must not keep saying it serves.
    let failed = |r: Result<(), ProxyError>| {
        if r.is_err() {
            shutdown.cancel();
        }
        r
    };
    let http =
        async { failed(http::serve(shared.clone(), listeners.http, tls, shutdown.clone()).await) };
    let ssh = async {
        match (listeners.ssh, ssh_key) {
            (Some(l), Some(key)) => {
                failed(ssh::serve(shared.clone(), l, key, shutdown.clone()).await)
            }
            _ => Ok(()),
        }
    };
    let metrics = async {
        match listeners.metrics {
            Some(l) => warren_metrics::serve(l, shutdown.clone())
                .await
                .map_err(|e| ProxyError::Serve {
                    what: "metrics",
                    source: Box::new(e),
                }),
            None => Ok(()),
        }
    };
    let (h, s, m, ()) = tokio::join!(http, ssh, metrics, presence);
    shutdown.cancel();
    let _ = reporter.await;
    let _ = session_reporter.await;
    h.and(s).and(m)
}

/// The keys every replica shares, from the server (adopting `offer` if it holds none yet);
/// asked again while the server cannot be reached, `None` when shut down first; a refusal (a
/// wrong shared secret, an offer it cannot take) stops the start. Nothing is served before:
/// without the shared keys a replica would sign cookies its peers refuse.
async fn shared_keys(
    server: &server_api::ServerApi,
    offer: &ProxyKeyOffer,
    shutdown: &CancellationToken,
) -> Result<Option<ProxyKeys>, ProxyError> {
    let mut wait = Duration::from_millis(200);
    loop {
        match server.adopt_keys(offer).await {
            Ok(k) => return Ok(Some(k)),
            Err(
                e @ server_api::ServerApiError::Status {
                    status: 400..=499, ..
                },
            )
            | Err(e @ server_api::ServerApiError::Denied) => return Err(ProxyError::SharedKeys(e)),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), retry_in = ?wait, "getting the shared keys from the server")
            }
        }
        tokio::select! {
            // Cancel-safe: a sleep holds nothing.
            _ = tokio::time::sleep(wait) => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => return Ok(None),
        }
        wait = (wait * 2).min(Duration::from_secs(5));
    }
}

/// The whole chain of an error on one line, for logs.
pub(crate) use warren_types::error_chain;
