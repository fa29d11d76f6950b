//! The internal listener (the server and proxies): signal, tunnel, exec and logs.

use super::*;
use crate::registry::AgentSession;
use crate::tunnel::{self, read_json, write_json, TunnelStream};
use crate::Relay;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warren_jwt::bearer;
use warren_types::relay::{
    DialErrorCode, DialReply, DialTarget, ExecQuery, ExecTarget, LogsTarget, SignalResponse,
    StreamOpen, TunnelQuery, EXEC_ROUTE, LOGS_ROUTE, PEER_EXEC_ROUTE, PEER_LOGS_ROUTE,
    PEER_TUNNEL_ROUTE, SIGNAL_ROUTE, TUNNEL_ROUTE,
};
use warren_types::trace::{SignalDetail, TraceId, TRACE_HEADER};
use warren_types::AgentId;

pub(crate) fn internal_router(relay: Relay) -> Router {
    Router::new()
        .route(SIGNAL_ROUTE, post(signal))
        .route(TUNNEL_ROUTE, get(tunnel_open))
        .route(EXEC_ROUTE, get(exec_open))
        .route(LOGS_ROUTE, get(logs_open))
        .route(warren_types::gitops::POLL_PATH, post(gitops_poll))
        .route("/metrics", get(warren_metrics::metrics_page))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(
            "relay",
            warren_metrics::track,
        ))
        .with_state(relay)
}

/// A refused internal request, turned into an `ApiError` response.
pub(super) struct Rejection(
    pub(super) StatusCode,
    pub(super) &'static str,
    pub(super) String,
);

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        error(self.0, self.1, self.2)
    }
}

pub(super) fn check_internal(relay: &Relay, headers: &HeaderMap) -> Result<(), Rejection> {
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

pub(super) fn parse_agent(raw: &str) -> Result<AgentId, Rejection> {
    raw.parse().map_err(|_| {
        Rejection(
            StatusCode::BAD_REQUEST,
            "invalid_agent_id",
            format!("agent id `{raw}` is not an integer"),
        )
    })
}

/// The trace id a request carries in `X-Request-Id`, when it is a valid one.
pub(super) fn trace_of(headers: &HeaderMap) -> Option<TraceId> {
    headers
        .get(TRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceId::parse)
}

/// Delivers a signal to each of `sessions`, with what caused it; returns how many took it.
pub(super) async fn signal_sessions(sessions: Vec<AgentSession>, trace: Option<&TraceId>) -> usize {
    let detail = SignalDetail {
        trace: trace.cloned(),
    };
    let sends = sessions.into_iter().map(|s| {
        let detail = detail.clone();
        async move {
        let send = async {
            let mut stream = s.session.open().await?;
            write_json(&mut stream, &StreamOpen::Signal).await?;
            // Agents from before trace ids stop reading after the header and may close the
            // stream first: the signal itself is through.
            if write_json(&mut stream, &detail).await.is_err() {
                return Ok(());
            }
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
        }
    });
    futures::future::join_all(sends)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
}

pub(super) async fn signal(
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
    let trace = trace_of(&headers);
    let local = signal_sessions(relay.local_sessions(agent), trace.as_ref());
    let remote = async {
        let candidates = relay.remote_candidates(agent).await;
        let forwards = candidates
            .iter()
            .map(|(instance, url)| relay.forward_signal(agent, *instance, url, trace.as_ref()));
        futures::future::join_all(forwards)
            .await
            .into_iter()
            .sum::<usize>()
    };
    let (local, remote) = tokio::join!(local, remote);
    let delivered = local + remote;
    match &trace {
        Some(t) => {
            tracing::info!(agent = %agent, trace = %t, connections = delivered, "signalled the agent")
        }
        None => tracing::debug!(agent = %agent, connections = delivered, "signalled the agent"),
    }
    Json(SignalResponse {
        connections: delivered,
    })
    .into_response()
}

/// What became of one attempt to open a tunnel.
pub(super) enum Attempt<S> {
    Open(S),
    /// This candidate holds no (working) connection: try the next one.
    NotHere,
    /// A definite answer for the client (the agent could not dial, …).
    Failed(Response),
}

/// Longest JSON exec request accepted (argv and environment of an SSH session fit easily).
pub(super) const MAX_EXEC_REQUEST_LEN: usize = 16 * 1024;

/// What a client asked the agent to open: a byte stream to an endpoint or an exec session.
#[derive(Debug, Clone)]
pub(super) enum StreamTarget {
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

    /// The metrics label of what is opened.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            StreamTarget::Dial(_) => "tunnel",
            StreamTarget::Exec(_) => "exec",
            StreamTarget::Logs(_) => "logs",
        }
    }

    pub(super) fn peer_route(&self) -> &'static str {
        match self {
            StreamTarget::Dial(_) => PEER_TUNNEL_ROUTE,
            StreamTarget::Exec(_) => PEER_EXEC_ROUTE,
            StreamTarget::Logs(_) => PEER_LOGS_ROUTE,
        }
    }

    /// The same query string the internal endpoint took, for the gateway instance.
    pub(super) fn peer_query(&self) -> Result<Vec<(String, String)>, serde_json::Error> {
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

pub(super) fn parse_target(
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

pub(super) fn parse_exec(
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

pub(super) fn parse_logs(
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
pub(super) async fn dial_local(
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
/// `counted`: the kind of stream for the metrics, or `None` when it goes to another relay
/// instance, which holds the agent's connection and counts it (once per stream in all).
pub(super) fn splice<S>(
    relay: &Relay,
    counted: Option<&'static str>,
    mut req: Request,
    stream: S,
) -> Response
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let on_upgrade = hyper::upgrade::on(&mut req);
    // A token of its own, cancelled with the relay's: the copy checks it on every wake-up,
    // and checking locks the token, which every tunnel would share.
    let shutdown = relay.shutdown.child_token();
    let (open, from_agent, to_agent) = match counted {
        Some(kind) => {
            metrics::counter!("warren_relay_streams_total", "kind" => kind).increment(1);
            (
                metrics::gauge!("warren_relay_open_streams", "kind" => kind),
                metrics::counter!("warren_relay_stream_bytes_total", "kind" => kind, "direction" => "from_agent"),
                metrics::counter!("warren_relay_stream_bytes_total", "kind" => kind, "direction" => "to_agent"),
            )
        }
        None => (
            metrics::Gauge::noop(),
            metrics::Counter::noop(),
            metrics::Counter::noop(),
        ),
    };
    relay.tasks.spawn(async move {
        let _open = warren_metrics::Open::new(open);
        let mut stream = warren_metrics::CountingIo::new(stream, from_agent, to_agent);
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
pub(super) const WAIT_RECHECK: Duration = Duration::from_secs(1);

pub(super) async fn tunnel_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_target(query), req).await
}

pub(super) async fn exec_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<ExecQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_exec(query), req).await
}

pub(super) async fn logs_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<LogsTarget>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    internal_open(relay, agent, parse_logs(query), req).await
}

/// The internal tunnel and exec endpoints: check the caller, then open the stream through
/// whichever instance holds the agent, waiting a bounded time for a late agent.
pub(super) async fn internal_open(
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
                Attempt::Open(stream) => return splice(&relay, Some(target.kind()), req, stream),
                Attempt::Failed(resp) => return resp,
                Attempt::NotHere => {}
            }
        }
        for (instance, url) in relay.remote_candidates(agent).await {
            match relay.forward_stream(agent, instance, &url, &target).await {
                Attempt::Open(stream) => return splice(&relay, None, req, stream),
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

/// A push webhook reached the server: the streams reading this repository poll now.
pub(super) async fn gitops_poll(
    State(relay): State<Relay>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if let Err(resp) = check_internal(&relay, &headers) {
        return resp.into_response();
    }
    let Ok(req) = serde_json::from_slice::<warren_types::gitops::PollRequest>(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_body",
            "expected {\"url\": \"…\"}",
        );
    };
    relay.gitops.poke(&req.url).await;
    StatusCode::NO_CONTENT.into_response()
}
