//! The relay's HTTP handlers: the agent connection upgrade, and the internal signal, tunnel and
//! exec endpoints; plus serving the streams an agent opens. Tunnels and exec sessions share
//! one path (wait for the agent, route across instances, splice the upgraded connection);
//! they differ only in the [`StreamOpen`] the agent receives.

use crate::registry::{AgentSession, ConnectionEntry, ConnectionId, InstanceId};
use crate::server::ServerError;
use crate::tunnel::{self, read_frame, read_json, write_frame, write_json, TunnelStream};
use crate::Relay;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warren_types::api::{ApiError, ApiErrorBody};
use warren_types::relay::{
    AuthenticateResponse, DialErrorCode, DialReply, DialTarget, ExecQuery, ExecTarget, LogsTarget,
    ReconcileReply, SignalResponse, StreamOpen, TunnelQuery, AGENT_CONNECT_PATH,
    AGENT_ID_RESPONSE_HEADER, AGENT_NOT_HERE, EXEC_ROUTE, LOGS_ROUTE, PEER_EXEC_ROUTE,
    PEER_LOGS_ROUTE, PEER_SIGNAL_ROUTE, PEER_TUNNEL_ROUTE, SIGNAL_ROUTE, TUNNEL_PROTOCOL,
    TUNNEL_ROUTE,
};
use warren_types::AgentId;

/// Time an agent has to send a stream's first frames.
const STREAM_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed to deliver a signal to one connection.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = ApiError {
        error: ApiErrorBody {
            code: code.into(),
            message: message.into(),
        },
    };
    (status, Json(body)).into_response()
}

use warren_jwt::bearer;

fn wants_tunnel(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(TUNNEL_PROTOCOL));
    let connection = headers
        .get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
    upgrade && connection
}

fn upgrade_required() -> Response {
    error(
        StatusCode::UPGRADE_REQUIRED,
        "upgrade_required",
        format!("this endpoint needs `Connection: upgrade` and `Upgrade: {TUNNEL_PROTOCOL}`"),
    )
}

fn switching_protocols(extra: Option<(&'static str, String)>) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(TUNNEL_PROTOCOL));
    if let Some((name, value)) = extra {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
}

// ---- agent listener ----

pub(crate) fn agent_router(relay: Relay) -> Router {
    Router::new()
        .route(AGENT_CONNECT_PATH, get(agent_connect))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .with_state(relay)
}

async fn agent_connect(State(relay): State<Relay>, mut req: Request) -> Response {
    if !wants_tunnel(req.headers()) {
        return upgrade_required();
    }
    let Some(token) = bearer(req.headers()) else {
        return error(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "an agent token is required as `Authorization: Bearer <token>`",
        );
    };
    let agent = match relay.server.authenticate(token).await {
        Ok(agent) => agent,
        Err(ServerError::Refused) => {
            return error(
                StatusCode::UNAUTHORIZED,
                "invalid_agent_token",
                "the agent token was refused by the server",
            )
        }
        Err(e) => {
            tracing::warn!(error = %error_chain(&e), "cannot check an agent token");
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_unavailable",
                "the relay cannot check agent tokens right now; retry later",
            );
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    let agent_id = agent.agent_id;
    let task_relay = relay.clone();
    relay.tasks.spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => task_relay.serve_agent(agent, TokioIo::new(upgraded)).await,
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "agent connection upgrade failed")
            }
        }
    });
    switching_protocols(Some((AGENT_ID_RESPONSE_HEADER, agent_id.to_string())))
}

/// Finishes when the agent opened no stream for `limit` (its heartbeat stopped: the host or
/// network vanished without a TCP reset).
async fn idle_watchdog(last_seen: &Mutex<Instant>, limit: Duration) {
    loop {
        let seen = *last_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.elapsed() >= limit {
            return;
        }
        tokio::time::sleep_until(seen + limit).await;
    }
}

pub(crate) use warren_types::error_chain;

impl Relay {
    /// Holds one agent connection until it closes or the relay stops; it is routable exactly
    /// while this runs.
    async fn serve_agent<T>(&self, agent: AuthenticateResponse, io: T)
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let entry = ConnectionEntry {
            agent: agent.agent_id,
            instance: self.instance,
            connection: ConnectionId(uuid::Uuid::new_v4()),
        };
        let inbound_relay = self.clone();
        let agent_id = agent.agent_id;
        let last_seen = Arc::new(Mutex::new(Instant::now()));
        let seen = last_seen.clone();
        let conn_token = self.shutdown.child_token();
        let (session, driver) =
            tunnel::start(io, yamux::Mode::Server, conn_token.clone(), move |stream| {
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                let relay = inbound_relay.clone();
                tokio::spawn(async move { relay.serve_agent_stream(agent_id, stream).await });
            });
        self.local.insert(
            entry.connection,
            AgentSession {
                agent: agent.agent_id,
                agent_name: agent.agent_name.clone(),
                session,
            },
        );
        let registered = self.registry.register(entry).await;
        match &registered {
            Ok(()) => {
                tracing::info!(agent = %agent.agent_id, name = %agent.agent_name, connection = %entry.connection.0, "agent connected");
                tokio::pin!(driver);
                let result = tokio::select! {
                    // Cancel-safe: not cancelled here; the watchdog arm only closes the
                    // session through its token and the driver is then awaited to the end.
                    r = &mut driver => r,
                    // Cancel-safe: the watchdog holds only a sleep.
                    _ = idle_watchdog(&last_seen, self.config.agent_idle_timeout()) => {
                        tracing::warn!(agent = %agent.agent_id, "agent connection idle too long; closing");
                        conn_token.cancel();
                        driver.await
                    }
                };
                if let Err(e) = result {
                    tracing::info!(agent = %agent.agent_id, error = %e, "agent connection failed");
                }
            }
            // An unroutable connection is useless; dropping it makes the agent reconnect.
            Err(e) => {
                tracing::warn!(agent = %agent.agent_id, error = %error_chain(e), "cannot register an agent connection")
            }
        }
        self.local.remove(entry.connection);
        if let Err(e) = self.registry.unregister(entry).await {
            tracing::warn!(agent = %agent.agent_id, error = %error_chain(&e), "cannot unregister an agent connection");
        }
        tracing::info!(agent = %agent.agent_id, connection = %entry.connection.0, "agent disconnected");
    }

    /// Serves a stream the agent opened: only reconcile calls go this way.
    async fn serve_agent_stream(&self, agent: AgentId, mut stream: TunnelStream) {
        let head = tokio::time::timeout(STREAM_HEADER_TIMEOUT, async {
            let open: StreamOpen = read_json(&mut stream).await?;
            let body = match open {
                StreamOpen::Reconcile => read_frame(&mut stream).await?,
                StreamOpen::Ping => {
                    write_frame(&mut stream, b"").await?;
                    stream
                        .shutdown()
                        .await
                        .map_err(tunnel::TunnelError::Write)?;
                    return Ok(Some(None));
                }
                _ => return Ok(None),
            };
            Ok::<_, tunnel::TunnelError>(Some(Some(body)))
        })
        .await;
        let body = match head {
            Ok(Ok(Some(Some(body)))) => body,
            Ok(Ok(Some(None))) => return,
            Ok(Ok(None)) => {
                tracing::warn!(agent = %agent, "agent opened a stream the relay does not serve");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(agent = %agent, error = %error_chain(&e), "bad stream from agent");
                return;
            }
            Err(_) => {
                tracing::warn!(agent = %agent, "agent stream sent no header in time");
                return;
            }
        };
        let (status, body) = match self.server.reconcile(agent, body).await {
            Ok(f) => (f.status, f.body),
            Err(e) => {
                tracing::warn!(agent = %agent, error = %error_chain(&e), "cannot forward a reconcile call");
                let body = ApiError {
                    error: ApiErrorBody {
                        code: "server_unavailable".into(),
                        message: "the relay cannot reach the server".into(),
                    },
                };
                (502, serde_json::to_vec(&body).unwrap_or_default())
            }
        };
        let reply = async {
            write_json(&mut stream, &ReconcileReply { status }).await?;
            write_frame(&mut stream, &body).await?;
            stream.shutdown().await.map_err(tunnel::TunnelError::Write)
        };
        if let Err(e) = reply.await {
            tracing::info!(agent = %agent, error = %error_chain(&e), "cannot answer a reconcile call");
        }
    }

    /// This instance's live sessions of `agent`.
    fn local_sessions(&self, agent: AgentId) -> Vec<AgentSession> {
        self.local.for_agent(agent)
    }

    /// Other instances holding a connection of `agent`, with their relay↔relay URLs; empty
    /// when this relay does not forward.
    async fn remote_candidates(&self, agent: AgentId) -> Vec<(InstanceId, url::Url)> {
        if self.peer.is_none() {
            return vec![];
        }
        let entries = match self.registry.lookup(agent).await {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(agent = %agent, error = %error_chain(&e), "connection registry lookup failed");
                return vec![];
            }
        };
        let mut instances: Vec<InstanceId> = entries
            .into_iter()
            .map(|e| e.instance)
            .filter(|i| *i != self.instance)
            .collect();
        instances.sort();
        instances.dedup();
        let mut out = Vec::new();
        for i in instances {
            match self.registry.peer_url(i).await {
                Ok(Some(url)) => out.push((i, url)),
                Ok(None) => {
                    tracing::debug!(agent = %agent, instance = %i.0, "skipping an instance that is gone")
                }
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "connection registry lookup failed")
                }
            }
        }
        out
    }
}

// ---- internal listener ----

pub(crate) fn internal_router(relay: Relay) -> Router {
    Router::new()
        .route(SIGNAL_ROUTE, post(signal))
        .route(TUNNEL_ROUTE, get(tunnel_open))
        .route(EXEC_ROUTE, get(exec_open))
        .route(LOGS_ROUTE, get(logs_open))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .with_state(relay)
}

/// A refused internal request, turned into an `ApiError` response.
struct Rejection(StatusCode, &'static str, String);

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        error(self.0, self.1, self.2)
    }
}

fn check_internal(relay: &Relay, headers: &HeaderMap) -> Result<(), Rejection> {
    let Some(token) = bearer(headers) else {
        return Err(Rejection(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "a JWT is required as `Authorization: Bearer <token>`".into(),
        ));
    };
    relay.keys.verify_internal(token).map(|_| ()).map_err(|e| {
        Rejection(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            format!("the token was refused: {}", error_chain(&e)),
        )
    })
}

fn parse_agent(raw: &str) -> Result<AgentId, Rejection> {
    raw.parse().map_err(|_| {
        Rejection(
            StatusCode::BAD_REQUEST,
            "invalid_agent_id",
            format!("agent id `{raw}` is not an integer"),
        )
    })
}

/// Delivers a signal to each of `sessions`; returns how many took it.
async fn signal_sessions(sessions: Vec<AgentSession>) -> usize {
    let sends = sessions.into_iter().map(|s| async move {
        let send = async {
            let mut stream = s.session.open().await?;
            write_json(&mut stream, &StreamOpen::Signal).await?;
            stream.shutdown().await.map_err(tunnel::TunnelError::Write)
        };
        match tokio::time::timeout(SIGNAL_TIMEOUT, send).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                tracing::info!(agent = %s.agent, error = %error_chain(&e), "cannot signal a connection");
                false
            }
            Err(_) => false,
        }
    });
    futures::future::join_all(sends)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
}

async fn signal(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    if let Err(resp) = check_internal(&relay, &headers) {
        return resp.into_response();
    }
    let agent = match parse_agent(&agent) {
        Ok(a) => a,
        Err(resp) => return resp.into_response(),
    };
    let local = signal_sessions(relay.local_sessions(agent));
    let remote = async {
        let candidates = relay.remote_candidates(agent).await;
        let forwards = candidates
            .iter()
            .map(|(instance, url)| relay.forward_signal(agent, *instance, url));
        futures::future::join_all(forwards)
            .await
            .into_iter()
            .sum::<usize>()
    };
    let (local, remote) = tokio::join!(local, remote);
    let delivered = local + remote;
    tracing::debug!(agent = %agent, connections = delivered, "signalled");
    Json(SignalResponse {
        connections: delivered,
    })
    .into_response()
}

/// What became of one attempt to open a tunnel.
enum Attempt<S> {
    Open(S),
    /// This candidate holds no (working) connection: try the next one.
    NotHere,
    /// A definite answer for the client (the agent could not dial, …).
    Failed(Response),
}

/// Longest JSON exec request accepted (argv and environment of an SSH session fit easily).
const MAX_EXEC_REQUEST_LEN: usize = 16 * 1024;

/// What a client asked the agent to open: a byte stream to an endpoint or an exec session.
#[derive(Debug, Clone)]
enum StreamTarget {
    Dial(DialTarget),
    Exec(ExecTarget),
    Logs(LogsTarget),
}

impl StreamTarget {
    fn open(&self) -> StreamOpen {
        match self {
            StreamTarget::Dial(t) => StreamOpen::Dial(t.clone()),
            StreamTarget::Exec(t) => StreamOpen::Exec(t.clone()),
            StreamTarget::Logs(t) => StreamOpen::Logs(t.clone()),
        }
    }

    fn peer_route(&self) -> &'static str {
        match self {
            StreamTarget::Dial(_) => PEER_TUNNEL_ROUTE,
            StreamTarget::Exec(_) => PEER_EXEC_ROUTE,
            StreamTarget::Logs(_) => PEER_LOGS_ROUTE,
        }
    }

    /// The same query string the internal endpoint took, for the gateway instance.
    fn peer_query(&self) -> Result<Vec<(String, String)>, serde_json::Error> {
        Ok(match self {
            StreamTarget::Dial(t) => vec![
                ("workspace".into(), t.workspace.clone()),
                ("namespace".into(), t.namespace.clone()),
                ("port".into(), t.port.to_string()),
            ],
            StreamTarget::Exec(t) => vec![("request".into(), serde_json::to_string(t)?)],
            StreamTarget::Logs(t) => {
                let mut q = vec![
                    ("workspace".into(), t.workspace.clone()),
                    ("namespace".into(), t.namespace.clone()),
                    ("tail".into(), t.tail.to_string()),
                ];
                q.extend(t.container.clone().map(|c| ("container".into(), c)));
                if t.follow {
                    q.push(("follow".into(), "true".into()));
                }
                q
            }
        })
    }

    /// For the timeout message: what the agent did not manage in time.
    fn describe(&self) -> String {
        match self {
            StreamTarget::Dial(t) => {
                format!("reach port {} of {}/{}", t.port, t.namespace, t.workspace)
            }
            StreamTarget::Exec(t) => {
                format!("start a process in {}/{}", t.namespace, t.workspace)
            }
            StreamTarget::Logs(t) => {
                format!("read the output of {}/{}", t.namespace, t.workspace)
            }
        }
    }
}

fn parse_target(
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StreamTarget, Rejection> {
    match query {
        Ok(Query(q)) => Ok(StreamTarget::Dial(q)),
        Err(e) => Err(Rejection(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            format!("expected ?workspace=&namespace=&port=: {e}"),
        )),
    }
}

fn parse_exec(
    query: Result<Query<ExecQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StreamTarget, Rejection> {
    let bad = |message: String| Rejection(StatusCode::BAD_REQUEST, "invalid_exec_request", message);
    let Query(q) = query.map_err(|e| {
        Rejection(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            format!("expected ?request=<JSON exec request>: {e}"),
        )
    })?;
    if q.request.len() > MAX_EXEC_REQUEST_LEN {
        return Err(bad(format!(
            "the exec request is {} bytes; at most {MAX_EXEC_REQUEST_LEN} are accepted",
            q.request.len()
        )));
    }
    let target: ExecTarget = serde_json::from_str(&q.request)
        .map_err(|e| bad(format!("the exec request is not valid: {e}")))?;
    if target.command.is_empty() {
        return Err(bad("the exec request's command is empty".into()));
    }
    Ok(StreamTarget::Exec(target))
}

fn parse_logs(
    query: Result<Query<LogsTarget>, axum::extract::rejection::QueryRejection>,
) -> Result<StreamTarget, Rejection> {
    match query {
        Ok(Query(q)) => Ok(StreamTarget::Logs(q)),
        Err(e) => Err(Rejection(
            StatusCode::BAD_REQUEST,
            "invalid_query",
            format!("expected ?workspace=&namespace=&tail=[&container=]: {e}"),
        )),
    }
}

/// Asks the agent, through one of this instance's `sessions`, to dial `target` or start its
/// process.
async fn dial_local(
    relay: &Relay,
    agent: AgentId,
    sessions: &[AgentSession],
    target: &StreamTarget,
) -> Attempt<TunnelStream> {
    // Replicas of one agent share the runtime, so any of them can dial; the first whose
    // connection still opens a stream is used.
    let mut stream = None;
    for s in sessions {
        match s.session.open().await {
            Ok(st) => {
                stream = Some(st);
                break;
            }
            Err(e) => tracing::info!(agent = %agent, error = %error_chain(&e), "connection gone"),
        }
    }
    let Some(mut stream) = stream else {
        return Attempt::NotHere;
    };
    let dial = async {
        write_json(&mut stream, &target.open()).await?;
        read_json::<_, DialReply>(&mut stream).await
    };
    match tokio::time::timeout(relay.config.dial_timeout(), dial).await {
        Ok(Ok(DialReply::Connected)) => Attempt::Open(stream),
        Ok(Ok(DialReply::Failed { code, message })) => {
            let (status, code) = match code {
                DialErrorCode::WorkspaceNotFound => (StatusCode::NOT_FOUND, "workspace_not_found"),
                DialErrorCode::Unreachable => (StatusCode::BAD_GATEWAY, "workspace_unreachable"),
                DialErrorCode::ExecFailed => (StatusCode::BAD_GATEWAY, "exec_failed"),
            };
            Attempt::Failed(error(status, code, message))
        }
        Ok(Err(e)) => Attempt::Failed(error(
            StatusCode::BAD_GATEWAY,
            "agent_error",
            format!("the agent connection failed: {}", error_chain(&e)),
        )),
        Err(_) => Attempt::Failed(error(
            StatusCode::GATEWAY_TIMEOUT,
            "dial_timeout",
            format!("the agent did not {} in time", target.describe()),
        )),
    }
}

/// Answers 101 and copies bytes between the client's upgraded connection and `stream`.
fn splice<S>(relay: &Relay, mut req: Request, mut stream: S) -> Response
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let on_upgrade = hyper::upgrade::on(&mut req);
    let shutdown = relay.shutdown.clone();
    relay.tasks.spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::info!(error = %e, "tunnel upgrade failed");
                return;
            }
        };
        let mut client = TokioIo::new(upgraded);
        tokio::select! {
            // Cancel-safe: dropping the copy drops both ends, which closes them.
            r = tokio::io::copy_bidirectional_with_sizes(&mut client, &mut stream, tunnel::COPY_BUFFER, tunnel::COPY_BUFFER) => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "tunnel ended");
                }
            }
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => {}
        }
    });
    switching_protocols(None)
}

/// How often a waiting request looks the table up again besides pub/sub wake-ups (covers a
/// message lost while Redis was away).
const WAIT_RECHECK: Duration = Duration::from_secs(1);

async fn tunnel_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_target(query), req).await
}

async fn exec_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<ExecQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_exec(query), req).await
}

async fn logs_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<LogsTarget>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_logs(query), req).await
}

/// The internal tunnel and exec endpoints: check the caller, then open the stream through
/// whichever instance holds the agent, waiting a bounded time for a late agent.
async fn internal_open(
    relay: Relay,
    agent: String,
    target: Result<StreamTarget, Rejection>,
    req: Request,
) -> Response {
    if let Err(resp) = check_internal(&relay, req.headers()) {
        return resp.into_response();
    }
    let agent = match parse_agent(&agent) {
        Ok(a) => a,
        Err(resp) => return resp.into_response(),
    };
    let target = match target {
        Ok(t) => t,
        Err(resp) => return resp.into_response(),
    };
    if !wants_tunnel(req.headers()) {
        return upgrade_required();
    }
    // Subscribed before the first lookup so a connect between lookup and wait is not missed.
    let mut connected = relay.registry.subscribe();
    let deadline = Instant::now() + relay.config.agent_wait();
    loop {
        let sessions = relay.local_sessions(agent);
        if !sessions.is_empty() {
            match dial_local(&relay, agent, &sessions, &target).await {
                Attempt::Open(stream) => return splice(&relay, req, stream),
                Attempt::Failed(resp) => return resp,
                Attempt::NotHere => {}
            }
        }
        for (instance, url) in relay.remote_candidates(agent).await {
            match relay.forward_stream(agent, instance, &url, &target).await {
                Attempt::Open(stream) => return splice(&relay, req, stream),
                Attempt::Failed(resp) => return resp,
                Attempt::NotHere => {}
            }
        }
        tokio::select! {
            // Cancel-safe: a missed broadcast is covered by the lookup at the top of the loop.
            r = connected.recv() => {
                if let Err(tokio::sync::broadcast::error::RecvError::Closed) = r {
                    break;
                }
            }
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(WAIT_RECHECK) => {}
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep_until(deadline) => break,
            // Cancel-safe: cancellation is level-triggered.
            _ = relay.shutdown.cancelled() => break,
        }
    }
    error(
        StatusCode::NOT_FOUND,
        "agent_not_connected",
        format!("agent {agent} is not connected"),
    )
}

// ---- relay↔relay ----

impl Relay {
    fn peer_url(base: &url::Url, route: &str, agent: AgentId) -> String {
        format!(
            "{}{}",
            base.as_str().trim_end_matches('/'),
            route.replace("{agent_id}", &agent.to_string())
        )
    }

    /// Forwards a signal to the gateway `instance`; returns how many connections took it.
    async fn forward_signal(&self, agent: AgentId, instance: InstanceId, base: &url::Url) -> usize {
        let Some(peer) = &self.peer else { return 0 };
        let token = match peer.keys.mint(agent) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot sign a relay↔relay token");
                return 0;
            }
        };
        let resp = peer
            .http
            .post(Self::peer_url(base, PEER_SIGNAL_ROUTE, agent))
            .bearer_auth(token)
            .timeout(SIGNAL_TIMEOUT)
            .send()
            .await;
        match resp {
            Ok(r) if r.status().is_success() => r
                .json::<SignalResponse>()
                .await
                .map(|s| s.connections)
                .unwrap_or(0),
            Ok(r) => {
                tracing::debug!(agent = %agent, instance = %instance.0, status = %r.status(), "gateway did not take the signal");
                0
            }
            Err(e) => {
                tracing::info!(agent = %agent, instance = %instance.0, error = %error_chain(&e), "cannot reach a gateway instance");
                0
            }
        }
    }

    /// Asks the gateway `instance` to open a tunnel or exec session through its own
    /// connection of `agent`.
    async fn forward_stream(
        &self,
        agent: AgentId,
        instance: InstanceId,
        base: &url::Url,
        target: &StreamTarget,
    ) -> Attempt<reqwest::Upgraded> {
        let Some(peer) = &self.peer else {
            return Attempt::NotHere;
        };
        let token = match peer.keys.mint(agent) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot sign a relay↔relay token");
                return Attempt::NotHere;
            }
        };
        let query = match target.peer_query() {
            Ok(q) => q,
            Err(e) => {
                return Attempt::Failed(error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("encoding the request for the gateway: {e}"),
                ))
            }
        };
        let resp = peer
            .http
            .get(Self::peer_url(base, target.peer_route(), agent))
            .query(&query)
            .bearer_auth(token)
            .header(header::CONNECTION, "upgrade")
            .header(header::UPGRADE, TUNNEL_PROTOCOL)
            .timeout(self.config.dial_timeout() + Duration::from_secs(2))
            .send()
            .await;
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                tracing::info!(agent = %agent, instance = %instance.0, error = %error_chain(&e), "cannot reach a gateway instance");
                return Attempt::NotHere;
            }
        };
        let status = resp.status();
        if status == reqwest::StatusCode::SWITCHING_PROTOCOLS {
            return match resp.upgrade().await {
                Ok(u) => Attempt::Open(u),
                Err(e) => {
                    tracing::info!(agent = %agent, error = %error_chain(&e), "gateway tunnel upgrade failed");
                    Attempt::NotHere
                }
            };
        }
        let body = resp.bytes().await.unwrap_or_default();
        let code = serde_json::from_slice::<ApiError>(&body)
            .map(|e| e.error.code)
            .unwrap_or_default();
        if code == AGENT_NOT_HERE || status.is_server_error() && code.is_empty() {
            tracing::debug!(agent = %agent, instance = %instance.0, "gateway does not hold the agent");
            return Attempt::NotHere;
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            tracing::warn!(instance = %instance.0, "a gateway instance refused our relay↔relay token (peer secrets differ?)");
            return Attempt::NotHere;
        }
        // The gateway's definite answer (dial failed, …) goes back to the client as is.
        let mut out = Response::new(Body::from(body));
        *out.status_mut() =
            StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        out.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Attempt::Failed(out)
    }
}

/// The relay↔relay listener: a gateway only serves its own connections and never routes
/// further, so a forwarded request cannot loop between instances.
pub(crate) fn peer_router(relay: Relay) -> Router {
    Router::new()
        .route(PEER_SIGNAL_ROUTE, post(peer_signal))
        .route(PEER_TUNNEL_ROUTE, get(peer_tunnel))
        .route(PEER_EXEC_ROUTE, get(peer_exec))
        .route(PEER_LOGS_ROUTE, get(peer_logs))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .with_state(relay)
}

fn check_peer(relay: &Relay, headers: &HeaderMap, agent: AgentId) -> Result<(), Rejection> {
    let Some(peer) = &relay.peer else {
        return Err(Rejection(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            "this relay accepts no relay↔relay requests".into(),
        ));
    };
    let Some(token) = bearer(headers) else {
        return Err(Rejection(
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "a relay JWT is required as `Authorization: Bearer <token>`".into(),
        ));
    };
    peer.keys.verify(token, agent).map_err(|e| {
        Rejection(
            StatusCode::UNAUTHORIZED,
            "invalid_token",
            format!("the token was refused: {}", error_chain(&e)),
        )
    })
}

fn not_here(agent: AgentId) -> Response {
    error(
        StatusCode::NOT_FOUND,
        AGENT_NOT_HERE,
        format!("this relay instance holds no connection of agent {agent}"),
    )
}

async fn peer_signal(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    let agent = match parse_agent(&agent) {
        Ok(a) => a,
        Err(resp) => return resp.into_response(),
    };
    if let Err(resp) = check_peer(&relay, &headers, agent) {
        return resp.into_response();
    }
    let sessions = relay.local_sessions(agent);
    if sessions.is_empty() {
        return not_here(agent);
    }
    let delivered = signal_sessions(sessions).await;
    Json(SignalResponse {
        connections: delivered,
    })
    .into_response()
}

async fn peer_tunnel(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_target(query), req).await
}

async fn peer_exec(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<ExecQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_exec(query), req).await
}

async fn peer_logs(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<LogsTarget>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_logs(query), req).await
}

/// A gateway's side of a forwarded tunnel or exec session.
async fn peer_open(
    relay: Relay,
    agent: String,
    target: Result<StreamTarget, Rejection>,
    req: Request,
) -> Response {
    let agent = match parse_agent(&agent) {
        Ok(a) => a,
        Err(resp) => return resp.into_response(),
    };
    if let Err(resp) = check_peer(&relay, req.headers(), agent) {
        return resp.into_response();
    }
    let target = match target {
        Ok(t) => t,
        Err(resp) => return resp.into_response(),
    };
    if !wants_tunnel(req.headers()) {
        return upgrade_required();
    }
    // No waiting and no routing: the routing instance decides what to try next.
    let sessions = relay.local_sessions(agent);
    match dial_local(&relay, agent, &sessions, &target).await {
        Attempt::Open(stream) => splice(&relay, req, stream),
        Attempt::Failed(resp) => resp,
        Attempt::NotHere => not_here(agent),
    }
}
