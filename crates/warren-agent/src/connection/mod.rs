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
            StreamOpen::Reconcile | StreamOpen::Ping | StreamOpen::Gitops { .. } => {
                tracing::warn!("the relay opened an agent-to-relay stream; ignored");
            }
        }
    }

    async fn serve_dial(&self, mut stream: TunnelStream, target: DialTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let mount = match target.namespace.is_empty() {
            true => self.inner.url_mounts.dial(&target.workspace).await,
            false => None,
        };
        let dialled = match mount {
            Some(d) => d,
            None => self.inner.runtime.dial(&key, target.port).await,
        };
        let mut endpoint = match dialled {
            Ok(endpoint) => endpoint,
            Err(e) => return refuse(stream, &key, "dial", e).await,
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(error = %error_chain(&e), "relay went away before the stream started");
            return;
        }
        // Larger buffers than copy's 8 KiB: fewer wake-ups per megabyte on bulk transfers.
        let copy = tokio::io::copy_bidirectional_with_sizes(
            &mut stream,
            &mut endpoint,
            warren_tunnel::COPY_BUFFER,
            warren_tunnel::COPY_BUFFER,
        );
        if let Err(e) = copy.await {
            tracing::debug!(workspace = %key, port = target.port, error = %e, "stream ended");
        }
    }

    /// A container's recent output for the relay: the reply, the text, then the end.
    async fn serve_logs(&self, mut stream: TunnelStream, target: LogsTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let tail = target.tail.min(warren_types::relay::MAX_LOG_TAIL);
        if target.follow {
            return self.follow_logs(stream, key, target.container, tail).await;
        }
        let text = match self
            .inner
            .runtime
            .logs(&key, target.container.as_deref(), tail)
            .await
        {
            Ok(text) => text,
            Err(e) => return refuse(stream, &key, "reading logs", e).await,
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(workspace = %key, error = %error_chain(&e), "relay went away before the logs");
            return;
        }
        let sent = async {
            stream.write_all(&text).await?;
            stream.shutdown().await
        };
        if let Err(e) = sent.await {
            tracing::info!(workspace = %key, error = %e, "relay went away while logs were sent");
        }
    }

    /// Following: the reply, then chunks as the container writes them, until it stops (the
    /// stream ends) or the relay closes its side (the client went away).
    async fn follow_logs(
        &self,
        mut stream: TunnelStream,
        key: WorkspaceKey,
        container: Option<String>,
        tail: u32,
    ) {
        let chunks = self
            .inner
            .runtime
            .follow_logs(&key, container.as_deref(), tail)
            .await;
        let mut chunks = match chunks {
            Ok(c) => c,
            Err(e) => return refuse(stream, &key, "following logs", e).await,
        };
        if write_json(&mut stream, &DialReply::Connected)
            .await
            .is_err()
        {
            return;
        }
        use futures::StreamExt;
        use tokio::io::AsyncReadExt;
        let (mut from_relay, mut to_relay) = tokio::io::split(stream);
        let mut scratch = [0u8; 64];
        loop {
            tokio::select! {
                // Cancel-safe: a chunk not yet taken stays in the stream.
                chunk = chunks.next() => match chunk {
                    Some(Ok(bytes)) => {
                        if to_relay.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::info!(workspace = %key, error = %error_chain(&e), "following logs ended");
                        break;
                    }
                    None => break,
                },
                // Cancel-safe: nothing is expected from the relay; any end of its side means
                // the client went away, and dropping `chunks` stops following.
                r = from_relay.read(&mut scratch) => {
                    if !matches!(r, Ok(n) if n > 0) {
                        return;
                    }
                }
            }
        }
        let _ = to_relay.shutdown().await;
    }

    /// Runs a process for the relay: the reply, then [`ExecFrame`]s both ways until the
    /// process ended (an `Exit` frame, then the stream closes) or the client went away (the
    /// stream ended or broke before `Exit`), which drops the session and so ends or detaches
    /// from the process.
    async fn serve_exec(&self, mut stream: TunnelStream, target: ExecTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let task = target.task.clone();
        let started = if target.command.is_empty() {
            Err(DialReply::Failed {
                code: DialErrorCode::ExecFailed,
                message: "the command is empty".into(),
            })
        } else {
            let spec = ExecSpec {
                container: target.container,
                command: target.command,
                env: target.env.into_iter().map(|e| (e.name, e.value)).collect(),
                tty: target.tty,
                size: target.size,
            };
            self.inner.runtime.exec(&key, spec).await.map_err(|e| {
                let code = match e {
                    RuntimeError::NotFound(_) => DialErrorCode::WorkspaceNotFound,
                    _ => DialErrorCode::ExecFailed,
                };
                DialReply::Failed {
                    code,
                    message: error_chain(&e),
                }
            })
        };
        let session = match started {
            Ok(session) => session,
            Err(reply) => {
                tracing::info!(workspace = %key, reply = ?reply, "exec failed");
                let _ = write_json(&mut stream, &reply).await;
                let _ = stream.shutdown().await;
                return;
            }
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(error = %error_chain(&e), "relay went away before the exec started");
            return;
        }
        match task {
            Some(ExecTask::BuildImage(build)) => {
                return self.serve_build(stream, key, session, build).await
            }
            Some(ExecTask::ApplyComponent { component }) => {
                return self.serve_apply(stream, key, session, component).await
            }
            None => {}
        }
        let ExecSession {
            stdin,
            mut output,
            resize,
            exit,
        } = session;
        let (mut from_client, mut to_client) = tokio::io::split(stream);
        let input = async move {
            let mut stdin = Some(stdin);
            loop {
                match tunnel::read_exec_frame(&mut from_client).await {
                    Ok(Some(ExecFrame::Stdin(bytes))) => {
                        // A process that closed its stdin just stops getting input; resizes
                        // still apply.
                        if let Some(s) = stdin.as_mut() {
                            if s.write_all(&bytes).await.is_err() || s.flush().await.is_err() {
                                stdin = None;
                            }
                        }
                    }
                    Ok(Some(ExecFrame::StdinEof)) => {
                        if let Some(mut s) = stdin.take() {
                            let _ = s.shutdown().await;
                        }
                    }
                    Ok(Some(ExecFrame::Resize(size))) => {
                        // A runtime that has finished no longer takes sizes; harmless.
                        let _ = resize.send(size).await;
                    }
                    Ok(Some(other)) => {
                        return format!("the client sent an agent-to-client frame: {other:?}")
                    }
                    Ok(None) => return "the client closed the session".to_owned(),
                    Err(e) => return error_chain(&e),
                }
            }
        };
        let pump = async move {
            while let Some(item) = output.next().await {
                let frame = match item {
                    Ok(ExecOutput::Stdout(b)) => ExecFrame::Stdout(b.to_vec()),
                    Ok(ExecOutput::Stderr(b)) => ExecFrame::Stderr(b.to_vec()),
                    Err(e) => {
                        tracing::info!(workspace = %key, error = %error_chain(&e), "exec output failed");
                        break;
                    }
                };
                tunnel::write_exec_frame(&mut to_client, &frame).await?;
            }
            let status = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        tokio::select! {
            // Cancel-safe: both arms are dropped together with the session; nothing of the
            // stream is reused afterwards.
            why = input => tracing::debug!(reason = %why, "exec client gone; ending the process"),
            // Cancel-safe: as above.
            r = pump => if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "exec client gone before the exit");
            },
        }
    }

    /// An image build: the exec'd process writes the build context (a tar archive), which
    /// streams into the runtime's builder; the client gets the build's progress as stdout
    /// and, at the end, the outcome as the exit (the process's own code when the context
    /// could not be read).
    async fn serve_build(
        &self,
        stream: TunnelStream,
        key: WorkspaceKey,
        session: ExecSession,
        build: warren_types::relay::BuildImageTask,
    ) {
        /// Most of the archiver's stderr kept to explain a failure.
        const MAX_STDERR: usize = 4096;
        let ExecSession {
            mut stdin,
            output,
            exit,
            ..
        } = session;
        // The archiver reads nothing.
        let _ = stdin.shutdown().await;
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = stderr.clone();
        let context = output
            .filter_map(move |item| {
                let out = match item {
                    Ok(ExecOutput::Stdout(b)) => Some(Ok(b)),
                    Ok(ExecOutput::Stderr(b)) => {
                        let mut e = kept.lock().unwrap_or_else(|p| p.into_inner());
                        let room = MAX_STDERR.saturating_sub(e.len());
                        e.extend_from_slice(&b[..b.len().min(room)]);
                        None
                    }
                    Err(e) => Some(Err(std::io::Error::other(error_chain(&e)))),
                };
                std::future::ready(out)
            })
            .boxed();
        let (from_client, mut to_client) = tokio::io::split(stream);
        let runtime = self.inner.runtime.clone();
        let image = build.image.clone();
        let pump = async move {
            let mut failure = None;
            let mut refused = None;
            match runtime.build_image(&key, &build, context).await {
                Ok(mut progress) => {
                    while let Some(line) = progress.next().await {
                        match line {
                            Ok(text) => {
                                tunnel::write_exec_frame(
                                    &mut to_client,
                                    &ExecFrame::Stdout(text.into_bytes()),
                                )
                                .await?
                            }
                            Err(e) => {
                                failure = Some(error_chain(&e));
                                break;
                            }
                        }
                    }
                }
                Err(e) => refused = Some(error_chain(&e)),
            }
            let archiver = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            let why = String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|p| p.into_inner()))
                .trim()
                .to_owned();
            let status = match (archiver.code, failure.or(refused.clone())) {
                // Refused before reading anything: what the archiver did does not matter.
                (_, Some(r)) if refused.is_some() => ExecExit {
                    code: Some(1),
                    message: Some(r),
                },
                (Some(c), _) if c != 0 => ExecExit {
                    code: Some(c),
                    message: Some(format!("reading the build context failed: {why}")),
                },
                (_, Some(f)) => ExecExit {
                    code: Some(1),
                    message: Some(f),
                },
                (Some(0), None) => ExecExit {
                    code: Some(0),
                    message: Some(format!("built {image}")),
                },
                (_, None) => archiver,
            };
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        until_client_gone(from_client, pump, "build").await;
    }

    /// A devfile component's objects: the exec'd process writes the manifest, the agent
    /// applies what it holds and reports each object, then the outcome as the exit.
    async fn serve_apply(
        &self,
        stream: TunnelStream,
        key: WorkspaceKey,
        session: ExecSession,
        component: String,
    ) {
        use warren_types::relay::MAX_MANIFEST_BYTES;
        let ExecSession {
            mut stdin,
            mut output,
            exit,
            ..
        } = session;
        let _ = stdin.shutdown().await;
        let (from_client, mut to_client) = tokio::io::split(stream);
        let runtime = self.inner.runtime.clone();
        let pump = async move {
            let (mut text, mut errors, mut too_big) = (Vec::new(), Vec::new(), false);
            while let Some(item) = output.next().await {
                match item {
                    Ok(ExecOutput::Stdout(b)) => {
                        if text.len() + b.len() > MAX_MANIFEST_BYTES {
                            too_big = true;
                        } else {
                            text.extend_from_slice(&b);
                        }
                    }
                    Ok(ExecOutput::Stderr(b)) => errors.extend_from_slice(
                        &b[..b.len().min(4096usize.saturating_sub(errors.len()))],
                    ),
                    Err(_) => break,
                }
            }
            let reader = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            let status = if reader.code != Some(0) {
                ExecExit {
                    code: reader.code.or(Some(1)),
                    message: Some(format!(
                        "reading the manifest of component {component} failed: {}",
                        String::from_utf8_lossy(&errors).trim()
                    )),
                }
            } else if too_big {
                ExecExit {
                    code: Some(1),
                    message: Some(format!(
                        "the manifest of component {component} is larger than {} KiB",
                        MAX_MANIFEST_BYTES >> 10
                    )),
                }
            } else {
                match manifest_objects(&String::from_utf8_lossy(&text)) {
                    Err(why) => ExecExit {
                        code: Some(1),
                        message: Some(format!("the manifest of component {component}: {why}")),
                    },
                    Ok(objects) => {
                        match runtime.apply_component(&key, &component, &objects).await {
                            Ok(lines) => {
                                for l in lines {
                                    tunnel::write_exec_frame(
                                        &mut to_client,
                                        &ExecFrame::Stdout(format!("{l}\n").into_bytes()),
                                    )
                                    .await?;
                                }
                                ExecExit {
                                    code: Some(0),
                                    message: Some(format!("applied component {component}")),
                                }
                            }
                            Err(e) => ExecExit {
                                code: Some(1),
                                message: Some(error_chain(&e)),
                            },
                        }
                    }
                }
            };
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        until_client_gone(from_client, pump, "apply").await;
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

/// Runs `work` (an agent task answering an exec session) until it ends or the client goes
/// away, whichever is first: the client only ever closes its side, so reading tells.
async fn until_client_gone<R, F>(mut from_client: R, work: F, what: &str)
where
    R: tokio::io::AsyncRead + Unpin,
    F: std::future::Future<Output = Result<(), TunnelError>>,
{
    let gone = async move {
        loop {
            match tunnel::read_exec_frame(&mut from_client).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    };
    tokio::select! {
        // Cancel-safe: dropping `work` drops its exec session and the runtime's request
        // (an engine build stops; an apply stops between API calls, its inventory written
        // first so the next apply prunes whatever was made).
        () = gone => tracing::debug!(task = what, "client gone; stopping"),
        // Cancel-safe: as above.
        r = work => if let Err(e) = r {
            tracing::debug!(task = what, error = %error_chain(&e), "client gone before the end");
        },
    }
}

/// The objects of a manifest: every YAML or JSON document, `List`s opened; each must be a
/// mapping with `apiVersion`, `kind` and `metadata.name`.
fn manifest_objects(text: &str) -> Result<Vec<serde_json::Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = serde_json::Value::deserialize(doc)
            .map_err(|e| format!("document {}: not YAML: {e}", i + 1))?;
        if v.is_null() {
            continue;
        }
        let items = if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
            v["items"].as_array().cloned().unwrap_or_default()
        } else {
            vec![v]
        };
        for o in items {
            if !o.is_object() || o["apiVersion"].as_str().is_none() || o["kind"].as_str().is_none()
            {
                return Err(format!(
                    "document {}: an object needs apiVersion and kind",
                    i + 1
                ));
            }
            if o["metadata"]["name"].as_str().is_none_or(str::is_empty) {
                return Err(format!("document {}: an object needs metadata.name", i + 1));
            }
            out.push(o);
        }
    }
    if out.is_empty() {
        return Err("it holds no object".into());
    }
    Ok(out)
}

/// Answers a stream the runtime could not serve: the failure (its code and the whole error
/// chain), then the end.
async fn refuse(mut stream: TunnelStream, key: &WorkspaceKey, what: &str, e: RuntimeError) {
    let code = match e {
        RuntimeError::NotFound(_) => DialErrorCode::WorkspaceNotFound,
        _ => DialErrorCode::Unreachable,
    };
    let message = error_chain(&e);
    tracing::info!(workspace = %key, error = %message, "{what} failed");
    let _ = write_json(&mut stream, &DialReply::Failed { code, message }).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod manifest_tests {
    use super::manifest_objects;

    #[test]
    fn manifests_are_documents_and_lists_of_named_objects() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"b\"}}]}\n";
        let names: Vec<String> = manifest_objects(text)
            .unwrap()
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["ConfigMap a", "Service b"]);
        assert!(manifest_objects("kind: ConfigMap\nmetadata: {name: a}\n")
            .unwrap_err()
            .contains("apiVersion and kind"));
        assert!(manifest_objects("apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .contains("metadata.name"));
        assert!(manifest_objects("a: [")
            .unwrap_err()
            .contains("document 1: not YAML"));
        assert!(manifest_objects("").unwrap_err().contains("no object"));
    }
}
