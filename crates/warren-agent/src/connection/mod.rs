//! The agent's one connection to the relay: dial out, authenticate with the agent token,
//! multiplex with yamux, reconnect with jittered exponential backoff, and serve the relay's
//! calls ("reconcile now" signals, byte streams to workspace endpoints, exec sessions) over
//! it. Every relay stream is served in its own task, so exec load never delays reconciling.
//!
//! Protocol: `warren_types::relay`. The connection is the production [`ReconcileTransport`].

pub use warren_tunnel as tunnel;

use crate::reconciler::{ReconcileTransport, TransportError, TransportEvents};
use crate::runtime::{
    ExecOutput, ExecSession, ExecSpec, RuntimeError, WorkspaceKey, WorkspaceRuntime,
};
use crate::url_mounts::UrlMounts;
use async_trait::async_trait;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tunnel::{read_frame, read_json, write_frame, write_json, Session, TunnelError, TunnelStream};
use url::Url;
use warren_types::api::ApiError;
use warren_types::reconcile::{ReconcileRequest, ReconcileResponse};
use warren_types::relay::{
    DialErrorCode, DialReply, DialTarget, ExecExit, ExecFrame, ExecTarget, ExecTask, LogsTarget,
    ReconcileReply, StreamOpen, AGENT_CONNECT_PATH, AGENT_ID_RESPONSE_HEADER,
    HEARTBEAT_INTERVAL_SECS, HEARTBEAT_TIMEOUT_SECS, TUNNEL_PROTOCOL,
};
use warren_types::trace::SignalDetail;
use warren_types::AgentId;

/// Time the relay has to answer the connection request.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// Time a stream from the relay has to say what it is for.
const STREAM_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a signal's detail frame may take after its header: the relay writes both at once.
const SIGNAL_DETAIL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone)]
pub struct ConnectionConfig {
    /// The relay's agent listener, `http://host:port` or `https://host:port`.
    pub relay_url: Url,
    /// The agent token (secret; never logged).
    pub token: String,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Longest a reconcile call may take end to end.
    pub call_timeout: Duration,
    /// How often the relay is pinged, and how long an answer may take before reconnecting.
    pub heartbeat_interval: Duration,
    pub heartbeat_timeout: Duration,
    /// A PEM bundle of CAs trusted for an `https` relay besides the public roots (a relay
    /// serving a certificate from a private CA, e.g. cert-manager's).
    pub relay_ca_file: Option<std::path::PathBuf>,
}

impl ConnectionConfig {
    pub fn new(relay_url: Url, token: String) -> Self {
        ConnectionConfig {
            relay_url,
            token,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            heartbeat_interval: Duration::from_secs(HEARTBEAT_INTERVAL_SECS),
            heartbeat_timeout: Duration::from_secs(HEARTBEAT_TIMEOUT_SECS),
            relay_ca_file: None,
        }
    }
}

impl std::fmt::Debug for ConnectionConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionConfig")
            .field("relay_url", &self.relay_url.as_str())
            .field("token", &"<redacted>")
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .field("call_timeout", &self.call_timeout)
            .field("heartbeat_interval", &self.heartbeat_interval)
            .field("relay_ca_file", &self.relay_ca_file)
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("relay url {url} must be http or https")]
    Scheme { url: String },
    #[error("building the HTTP client")]
    Client(#[source] reqwest::Error),
    #[error("loading the relay's CA bundle")]
    Ca(#[source] warren_tls::TlsError),
    #[error("connecting to the relay at {url}")]
    Dial {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the relay at {url} did not answer in time")]
    Timeout { url: String },
    #[error("the relay refused the connection ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("upgrading the relay connection")]
    Upgrade(#[source] reqwest::Error),
}

impl ConnectError {
    /// Refusals of the token itself: worth a louder log line, same retry policy.
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            ConnectError::Refused {
                status: 401 | 403,
                ..
            }
        )
    }
}

struct Inner {
    config: ConnectionConfig,
    runtime: Arc<dyn WorkspaceRuntime>,
    /// The `proxy` mounts this agent reaches: a dial naming one (no namespace) goes to its
    /// URL, not to the runtime.
    url_mounts: UrlMounts,
    http: reqwest::Client,
    session: watch::Sender<Option<Session>>,
    events: watch::Sender<TransportEvents>,
}

/// A handle on the relay connection; clone it freely. [`RelayConnection::run`] keeps it up.
#[derive(Clone)]
pub struct RelayConnection {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RelayConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayConnection")
            .field("relay_url", &self.inner.config.relay_url.as_str())
            .field("connected", &self.is_connected())
            .finish()
    }
}

impl RelayConnection {
    pub fn new(
        config: ConnectionConfig,
        runtime: Arc<dyn WorkspaceRuntime>,
    ) -> Result<Self, ConnectError> {
        if !matches!(config.relay_url.scheme(), "http" | "https") {
            return Err(ConnectError::Scheme {
                url: config.relay_url.to_string(),
            });
        }
        let http = http_client(&config)?;
        Ok(RelayConnection {
            inner: Arc::new(Inner {
                config,
                runtime,
                url_mounts: UrlMounts::default(),
                http,
                session: watch::channel(None).0,
                events: watch::channel(TransportEvents::default()).0,
            }),
        })
    }

    /// The `proxy` mounts this connection dials (the reconciler keeps the list current).
    pub fn url_mounts(&self) -> UrlMounts {
        self.inner.url_mounts.clone()
    }

    /// Opens a stream to the relay and sends its header, once a connection is up (waiting
    /// for one; the caller bounds the wait).
    pub async fn open(&self, header: &StreamOpen) -> Result<TunnelStream, TunnelError> {
        let mut sessions = self.inner.session.subscribe();
        let session = loop {
            if let Some(s) = sessions
                .borrow_and_update()
                .clone()
                .filter(|s| !s.is_closed())
            {
                break s;
            }
            if sessions.changed().await.is_err() {
                return Err(TunnelError::Closed);
            }
        };
        let mut stream = session.open().await?;
        write_json(&mut stream, header).await?;
        Ok(stream)
    }

    pub fn is_connected(&self) -> bool {
        self.inner
            .session
            .borrow()
            .as_ref()
            .is_some_and(|s| !s.is_closed())
    }

    /// Keeps a connection to the relay until `shutdown` fires, reconnecting with jittered
    /// exponential backoff (reset once a connection was established).
    pub async fn run(&self, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let connected = tokio::select! {
                // Cancel-safe: an unfinished dial is just dropped.
                r = self.connect() => r,
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => return,
            };
            match connected {
                Ok(upgraded) => {
                    failures = 0;
                    self.serve(upgraded, shutdown.child_token()).await;
                    if shutdown.is_cancelled() {
                        return;
                    }
                    tracing::warn!(relay = %self.inner.config.relay_url, "relay connection lost; reconnecting");
                }
                Err(e) => {
                    let message = error_chain(&e);
                    if e.is_auth() {
                        tracing::error!(error = %message, "the relay refused the agent token");
                    } else {
                        tracing::warn!(error = %message, "cannot connect to the relay");
                    }
                }
            }
            let delay = self.backoff(failures);
            failures = failures.saturating_add(1);
            tokio::select! {
                // Cancel-safe: a sleep holds no state.
                _ = tokio::time::sleep(delay) => {}
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => return,
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        let config = &self.inner.config;
        crate::backoff::jittered(config.initial_backoff, config.max_backoff, failures)
    }

    async fn connect(&self) -> Result<reqwest::Upgraded, ConnectError> {
        let response = handshake(&self.inner.http, &self.inner.config).await?;
        response.upgrade().await.map_err(ConnectError::Upgrade)
    }

    /// Serves one established connection until it closes.
    async fn serve(&self, upgraded: reqwest::Upgraded, shutdown: CancellationToken) {
        let shutdown_session = shutdown.clone();
        let this = self.clone();
        let (session, driver) =
            tunnel::start(upgraded, yamux::Mode::Client, shutdown, move |stream| {
                let this = this.clone();
                tokio::spawn(async move { this.serve_stream(stream).await });
            });
        let heartbeat = tokio::spawn(heartbeat(
            session.clone(),
            shutdown_session.clone(),
            self.inner.config.heartbeat_interval,
            self.inner.config.heartbeat_timeout,
        ));
        self.inner.session.send_replace(Some(session));
        metrics::counter!("warren_agent_relay_connects_total").increment(1);
        metrics::gauge!("warren_agent_relay_connected").set(1.0);
        // Announce the new connection after it is usable, so the full reconcile it triggers
        // goes through it.
        self.inner.events.send_modify(|e| e.connection += 1);
        tracing::info!(relay = %self.inner.config.relay_url, "connected to the relay");
        if let Err(e) = driver.await {
            tracing::info!(error = %e, "relay connection failed");
        }
        heartbeat.abort();
        self.inner.session.send_replace(None);
        metrics::gauge!("warren_agent_relay_connected").set(0.0);
    }

    /// Serves a stream the relay opened.
    async fn serve_stream(&self, mut stream: TunnelStream) {
        let open = match tokio::time::timeout(
            STREAM_HEADER_TIMEOUT,
            read_json::<_, StreamOpen>(&mut stream),
        )
        .await
        {
            Ok(Ok(open)) => open,
            Ok(Err(e)) => {
                tracing::warn!(error = %error_chain(&e), "bad stream from the relay");
                return;
            }
            Err(_) => {
                tracing::warn!("relay stream sent no header in time");
                return;
            }
        };
        match open {
            StreamOpen::Signal => {
                // What caused it follows the header (relays from before trace ids close the
                // stream instead: no cause, same signal).
                let detail = tokio::time::timeout(
                    SIGNAL_DETAIL_TIMEOUT,
                    read_json::<_, SignalDetail>(&mut stream),
                )
                .await
                .ok()
                .and_then(Result::ok);
                let trace = detail.and_then(|d| d.trace);
                if let Some(t) = &trace {
                    tracing::info!(trace = %t, "signalled by the relay: reconciling now");
                }
                self.inner.events.send_modify(|e| {
                    e.signals += 1;
                    e.trace = trace;
                });
            }
            StreamOpen::Dial(target) => self.serve_dial(stream, target).await,
            StreamOpen::Exec(target) => self.serve_exec(stream, target).await,
            StreamOpen::Logs(target) => self.serve_logs(stream, target).await,
            StreamOpen::Reconcile
            | StreamOpen::Ping
            | StreamOpen::Gitops { .. }
            | StreamOpen::BuildContext(_) => {
                tracing::warn!("the relay opened an agent-to-relay stream; ignored");
            }
        }
    }

    async fn call(&self, request: &ReconcileRequest) -> Result<ReconcileResponse, TransportError> {
        let session = self
            .inner
            .session
            .borrow()
            .clone()
            .ok_or(TransportError::NotConnected)?;
        tokio::select! {
            // Cancel-safe: dropping a half-done call drops its stream; the server sees a
            // reconcile it answered to nobody, which the next (full) reconcile makes good.
            r = self.call_on(&session, request) => r,
            // Cancel-safe: `closed` holds no state. A call on a dead connection fails at once
            // instead of waiting for the call timeout, so the loop can use the new connection.
            _ = session.closed() => Err(TransportError::Connection(Box::new(TunnelError::Closed))),
        }
    }

    async fn call_on(
        &self,
        session: &Session,
        request: &ReconcileRequest,
    ) -> Result<ReconcileResponse, TransportError> {
        let body = serde_json::to_vec(request).map_err(TransportError::Malformed)?;
        let conn = |e: TunnelError| TransportError::Connection(Box::new(e));
        let mut stream = session.open().await.map_err(conn)?;
        write_json(&mut stream, &StreamOpen::Reconcile)
            .await
            .map_err(conn)?;
        write_frame(&mut stream, &body).await.map_err(conn)?;
        let reply: ReconcileReply = read_json(&mut stream).await.map_err(conn)?;
        let body = read_frame(&mut stream).await.map_err(conn)?;
        if reply.status != 201 && reply.status != 200 {
            let message = serde_json::from_slice::<ApiError>(&body)
                .map(|e| format!("{}: {}", e.error.code, e.error.message))
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(500).collect());
            return Err(TransportError::Status {
                status: reply.status,
                message,
            });
        }
        serde_json::from_slice(&body).map_err(TransportError::Malformed)
    }
}

#[async_trait]
impl ReconcileTransport for RelayConnection {
    async fn reconcile(
        &self,
        request: &ReconcileRequest,
    ) -> Result<ReconcileResponse, TransportError> {
        tokio::time::timeout(self.inner.config.call_timeout, self.call(request))
            .await
            .map_err(|_| TransportError::Timeout)?
    }

    fn events(&self) -> watch::Receiver<TransportEvents> {
        self.inner.events.subscribe()
    }
}

/// Pings the relay every `interval`; closes the session (through its token) when a ping goes
/// unanswered, so a relay that vanished without a TCP reset is left at once.
async fn heartbeat(
    session: Session,
    close: CancellationToken,
    interval: Duration,
    timeout: Duration,
) {
    loop {
        tokio::select! {
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(interval) => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = close.cancelled() => return,
        }
        let ping = async {
            let mut stream = session.open().await?;
            write_json(&mut stream, &StreamOpen::Ping).await?;
            read_frame(&mut stream).await.map(|_| ())
        };
        match tokio::time::timeout(timeout, ping).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %error_chain(&e), "relay heartbeat failed; reconnecting");
                close.cancel();
                return;
            }
            Err(_) => {
                tracing::warn!("relay heartbeat unanswered; reconnecting");
                close.cancel();
                return;
            }
        }
    }
}

/// Asks the relay who this agent token belongs to: one authenticated connection that is
/// closed at once. Used at start-up to label the runtime's objects with the agent id.
pub async fn identify(config: &ConnectionConfig) -> Result<AgentId, ConnectError> {
    let http = http_client(config)?;
    let response = handshake(&http, config).await?;
    response
        .headers()
        .get(AGENT_ID_RESPONSE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .ok_or(ConnectError::Refused {
            status: 101,
            message: format!("the relay did not name the agent ({AGENT_ID_RESPONSE_HEADER})"),
        })
}

/// The client agents dial the relay with: HTTP/1.1 (the tunnel is an upgrade), trusting the
/// configured CA bundle besides the public roots.
fn http_client(config: &ConnectionConfig) -> Result<reqwest::Client, ConnectError> {
    let builder = reqwest::Client::builder()
        .http1_only()
        .connect_timeout(CONNECT_TIMEOUT);
    warren_tls::trust_ca_file(builder, config.relay_ca_file.as_deref())
        .map_err(ConnectError::Ca)?
        .build()
        .map_err(ConnectError::Client)
}

/// Sends the upgrade request with the agent token; `Ok` only on `101 Switching Protocols`.
async fn handshake(
    http: &reqwest::Client,
    config: &ConnectionConfig,
) -> Result<reqwest::Response, ConnectError> {
    let url = config
        .relay_url
        .join(AGENT_CONNECT_PATH)
        .map_err(|_| ConnectError::Scheme {
            url: config.relay_url.to_string(),
        })?;
    let request = http
        .get(url.clone())
        .bearer_auth(&config.token)
        .header(reqwest::header::CONNECTION, "upgrade")
        .header(reqwest::header::UPGRADE, TUNNEL_PROTOCOL)
        .send();
    let response = tokio::time::timeout(CONNECT_TIMEOUT, request)
        .await
        .map_err(|_| ConnectError::Timeout {
            url: url.to_string(),
        })?
        .map_err(|source| ConnectError::Dial {
            url: url.to_string(),
            source,
        })?;
    let status = response.status();
    if status != reqwest::StatusCode::SWITCHING_PROTOCOLS {
        let body = response.bytes().await.unwrap_or_default();
        let message = serde_json::from_slice::<ApiError>(&body)
            .map(|e| e.error.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).chars().take(200).collect());
        return Err(ConnectError::Refused {
            status: status.as_u16(),
            message,
        });
    }
    Ok(response)
}

use warren_types::error_chain;

mod build_context;
mod exec;
mod streams;
