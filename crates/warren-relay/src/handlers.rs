//! The relay's HTTP handlers: the agent connection upgrade, and the internal signal and tunnel
//! endpoints; plus serving the streams an agent opens.

use crate::registry::{AgentSession, ConnectionEntry, ConnectionId};
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
    AuthenticateResponse, DialErrorCode, DialReply, ReconcileReply, SignalResponse, StreamOpen,
    TunnelQuery, AGENT_CONNECT_PATH, AGENT_ID_RESPONSE_HEADER, SIGNAL_ROUTE, TUNNEL_PROTOCOL,
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

fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

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

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}

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
    async fn local_sessions(&self, agent: AgentId) -> Vec<AgentSession> {
        match self.registry.lookup(agent).await {
            Ok(entries) => entries
                .into_iter()
                .filter(|e| e.instance == self.instance)
                .filter_map(|e| self.local.get(e.connection))
                .filter(|s| !s.session.is_closed())
                .collect(),
            Err(e) => {
                tracing::warn!(agent = %agent, error = %error_chain(&e), "connection registry lookup failed");
                vec![]
            }
        }
    }

    /// Waits up to the configured bound for `agent` to have a session here.
    async fn wait_for_sessions(&self, agent: AgentId) -> Vec<AgentSession> {
        let mut connected = self.registry.subscribe();
        let deadline = tokio::time::Instant::now() + self.config.agent_wait();
        loop {
            let sessions = self.local_sessions(agent).await;
            if !sessions.is_empty() {
                return sessions;
            }
            tokio::select! {
                // Cancel-safe: a missed broadcast is covered by the lookup at the top of the loop.
                r = connected.recv() => match r {
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return vec![],
                },
                // Cancel-safe: a sleep holds no state.
                _ = tokio::time::sleep_until(deadline) => return vec![],
                // Cancel-safe: cancellation is level-triggered.
                _ = self.shutdown.cancelled() => return vec![],
            }
        }
    }
}

// ---- internal listener ----

pub(crate) fn internal_router(relay: Relay) -> Router {
    Router::new()
        .route(SIGNAL_ROUTE, post(signal))
        .route(TUNNEL_ROUTE, get(tunnel_open))
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
    let sessions = relay.local_sessions(agent).await;
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
    let delivered = futures::future::join_all(sends)
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
    tracing::debug!(agent = %agent, connections = delivered, "signalled");
    Json(SignalResponse {
        connections: delivered,
    })
    .into_response()
}

async fn tunnel_open(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
    mut req: Request,
) -> Response {
    if let Err(resp) = check_internal(&relay, req.headers()) {
        return resp.into_response();
    }
    let agent = match parse_agent(&agent) {
        Ok(a) => a,
        Err(resp) => return resp.into_response(),
    };
    let target = match query {
        Ok(Query(q)) => q,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                format!("expected ?workspace=&namespace=&port=: {e}"),
            )
        }
    };
    if !wants_tunnel(req.headers()) {
        return upgrade_required();
    }
    let sessions = relay.wait_for_sessions(agent).await;
    if sessions.is_empty() {
        return error(
            StatusCode::NOT_FOUND,
            "agent_not_connected",
            format!("agent {agent} is not connected"),
        );
    }
    // Replicas of one agent share the runtime, so any of them can dial; the first whose
    // connection still opens a stream is used.
    let mut stream = None;
    for s in &sessions {
        match s.session.open().await {
            Ok(st) => {
                stream = Some(st);
                break;
            }
            Err(e) => tracing::info!(agent = %agent, error = %error_chain(&e), "connection gone"),
        }
    }
    let Some(mut stream) = stream else {
        return error(
            StatusCode::NOT_FOUND,
            "agent_not_connected",
            format!("agent {agent} is not connected"),
        );
    };
    let dial = async {
        write_json(&mut stream, &StreamOpen::Dial(target.clone())).await?;
        read_json::<_, DialReply>(&mut stream).await
    };
    match tokio::time::timeout(relay.config.dial_timeout(), dial).await {
        Ok(Ok(DialReply::Connected)) => {}
        Ok(Ok(DialReply::Failed { code, message })) => {
            let (status, code) = match code {
                DialErrorCode::WorkspaceNotFound => (StatusCode::NOT_FOUND, "workspace_not_found"),
                DialErrorCode::Unreachable => (StatusCode::BAD_GATEWAY, "workspace_unreachable"),
            };
            return error(status, code, message);
        }
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_GATEWAY,
                "agent_error",
                format!("the agent connection failed: {}", error_chain(&e)),
            )
        }
        Err(_) => {
            return error(
                StatusCode::GATEWAY_TIMEOUT,
                "dial_timeout",
                format!(
                    "the agent did not reach port {} of {}/{} in time",
                    target.port, target.namespace, target.workspace
                ),
            )
        }
    }
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
            r = tokio::io::copy_bidirectional(&mut client, &mut stream) => {
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
