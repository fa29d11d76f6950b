//! `warren proxy`: the authenticating front door for workspace HTTP and WebSocket hosts,
//! the web terminal and SSH (access.md).
//!
//! Every path into a workspace passes the same two checks: who is this (session cookie,
//! personal access token, SSH key) and may they reach this workspace (the server's answer,
//! cached ≤ 60 s). Traffic then goes proxy → relay → the agent's connection → the workspace,
//! or straight to the workspace in direct mode. The proxy keeps no sessions of its own: the
//! signed cookie is the session, so instances can be added freely.
//!
//! Module map: `http` (host routing, sign-in, forwarding), `terminal` (the web terminal's
//! page and WebSocket ⇄ exec bridge), `ssh` (the SSH server), `server_api` and `relay` (the
//! two peers), `activity` (idle-policy reports).

pub mod activity;
pub mod config;
mod http;
mod jwt;
mod port_forward;
pub mod relay;
pub mod server_api;
pub mod ssh;
mod stop_warning;
mod terminal;

pub use config::ProxyConfig;
pub use http::keys as http_keys;
pub use http::keys::{rotate as rotate_cookie_key, KeyError, KEY_FILE as COOKIE_KEY_FILE};

use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

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
    /// The HTTP front door's keys, caches and upstream connections.
    pub front: http::Front,
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
    if listeners.ssh.is_some() {
        // A missing host key is created here and a broken one stops the start, before any
        // listener serves.
        ssh::check_host_key(&config)?;
    }
    let tls = warren_tls::ServerCert::from_options(
        config.tls_cert_file.clone(),
        config.tls_key_file.clone(),
    )?;
    let server_roots = warren_tls::CaBundle::load_optional(config.server_ca_file.as_deref())?;
    let shared = Arc::new(Shared {
        server: server_api::ServerApi::new(
            config.server_url.clone(),
            config.shared_secret.as_bytes(),
            server_roots.as_ref(),
        )
        .map_err(ProxyError::ServerClient)?,
        relay: relay::RelayClient::new(config.relay_url.clone(), config.shared_secret.as_bytes()),
        activity: activity::Activity::default(),
        front: http::Front::new(&config)?,
        config,
    });
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
    let http = http::serve(shared.clone(), listeners.http, tls, shutdown.clone());
    let ssh = async {
        match listeners.ssh {
            Some(l) => ssh::serve(shared.clone(), l, shutdown.clone()).await,
            None => Ok(()),
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
    let (h, s, m) = tokio::join!(http, ssh, metrics);
    shutdown.cancel();
    let _ = reporter.await;
    h.and(s).and(m)
}

/// The whole chain of an error on one line, for logs.
pub(crate) use warren_types::error_chain;
