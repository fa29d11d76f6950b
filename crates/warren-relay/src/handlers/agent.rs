//! The agent listener: the connection upgrade, and serving the streams an agent opens.

use super::*;
use crate::registry::{AgentSession, ConnectionEntry, ConnectionId, InstanceId};
use crate::server::{BuildContextAnswer, ServerError};
use crate::tunnel::{self, read_frame, read_json, write_frame, write_json, TunnelStream};
use crate::Relay;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use warren_jwt::bearer;
use warren_types::api::{ApiError, ApiErrorBody};
use warren_types::relay::{
    AuthenticateResponse, BuildContextReply, ReconcileReply, StreamOpen, AGENT_CONNECT_PATH,
    AGENT_ID_RESPONSE_HEADER,
};
use warren_types::AgentId;

pub(crate) fn agent_router(relay: Relay) -> Router {
    Router::new()
        .route(AGENT_CONNECT_PATH, get(agent_connect))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "not_found", "no such endpoint") })
        .layer(axum::middleware::from_fn_with_state(
            "relay",
            warren_metrics::track,
        ))
        .with_state(relay)
}

pub(super) async fn agent_connect(State(relay): State<Relay>, mut req: Request) -> Response {
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
    let token_digest = crate::server::token_digest(token);
    let on_upgrade = hyper::upgrade::on(&mut req);
    let agent_id = agent.agent_id;
    let task_relay = relay.clone();
    relay.tasks.spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                task_relay
                    .serve_agent(agent, token_digest, TokioIo::new(upgraded))
                    .await
            }
            Err(e) => {
                tracing::warn!(agent = %agent_id, error = %e, "agent connection upgrade failed")
            }
        }
    });
    switching_protocols(Some((AGENT_ID_RESPONSE_HEADER, agent_id.to_string())))
}

/// Finishes when the agent opened no stream for `limit` (its heartbeat stopped: the host or
/// network vanished without a TCP reset).
pub(super) async fn idle_watchdog(last_seen: &Mutex<Instant>, limit: Duration) {
    loop {
        let seen = *last_seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.elapsed() >= limit {
            return;
        }
        tokio::time::sleep_until(seen + limit).await;
    }
}

pub(crate) use warren_types::error_chain;

/// What the first frames of a stream an agent opened ask for.
enum Head {
    Reconcile(Vec<u8>),
    Gitops(String),
    BuildContext(warren_types::relay::BuildContextRequest),
    /// Answered already (a ping).
    Done,
    NotServed,
}

impl Relay {
    /// Holds one agent connection until it closes or the relay stops; it is routable exactly
    /// while this runs.
    pub(super) async fn serve_agent<T>(
        &self,
        agent: AuthenticateResponse,
        token_digest: String,
        io: T,
    ) where
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
                let digest = token_digest.clone();
                tokio::spawn(
                    async move { relay.serve_agent_stream(agent_id, &digest, stream).await },
                );
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
                metrics::counter!("warren_relay_agent_connects_total").increment(1);
                let _open =
                    warren_metrics::Open::new(metrics::gauge!("warren_relay_agent_connections"));
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

    /// Serves a stream the agent opened: reconcile calls, pings, GitOps sources and build
    /// contexts.
    pub(super) async fn serve_agent_stream(
        &self,
        agent: AgentId,
        token_digest: &str,
        mut stream: TunnelStream,
    ) {
        let head = tokio::time::timeout(STREAM_HEADER_TIMEOUT, async {
            let open: StreamOpen = read_json(&mut stream).await?;
            Ok::<_, tunnel::TunnelError>(match open {
                StreamOpen::Reconcile => Head::Reconcile(read_frame(&mut stream).await?),
                StreamOpen::Ping => {
                    write_frame(&mut stream, b"").await?;
                    stream
                        .shutdown()
                        .await
                        .map_err(tunnel::TunnelError::Write)?;
                    Head::Done
                }
                StreamOpen::Gitops { source } => Head::Gitops(source),
                StreamOpen::BuildContext(req) => Head::BuildContext(req),
                _ => Head::NotServed,
            })
        })
        .await;
        let body = match head {
            Ok(Ok(Head::Reconcile(body))) => body,
            Ok(Ok(Head::Gitops(source))) => {
                self.serve_gitops(agent, token_digest.to_owned(), source, stream)
                    .await;
                return;
            }
            Ok(Ok(Head::BuildContext(req))) => {
                self.serve_build_context(agent, req, stream).await;
                return;
            }
            Ok(Ok(Head::Done)) => return,
            Ok(Ok(Head::NotServed)) => {
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
        let started = tokio::time::Instant::now();
        let forwarded = self.server.reconcile(agent, body).await;
        let outcome = match &forwarded {
            Ok(f) if f.status < 400 => "ok",
            Ok(_) => "refused",
            Err(_) => "server_unreachable",
        };
        metrics::histogram!("warren_relay_reconcile_forward_seconds", "outcome" => outcome)
            .record(started.elapsed().as_secs_f64());
        let (status, body) = match forwarded {
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

    /// Answers an agent's request for a build context: the server's answer, then its tar
    /// archive in frames and an empty frame at the end. A server that fails part way makes
    /// the stream end without that frame, which the agent takes as a failed build.
    async fn serve_build_context(
        &self,
        agent: AgentId,
        req: warren_types::relay::BuildContextRequest,
        mut stream: TunnelStream,
    ) {
        let answer = self.server.build_context(agent, &req).await;
        let result = async {
            let mut resp = match answer {
                Ok(BuildContextAnswer::Refused { status, message }) => {
                    let reply = BuildContextReply {
                        status,
                        commit: None,
                        key: None,
                        message: Some(message),
                    };
                    write_json(&mut stream, &reply).await?;
                    return stream.shutdown().await.map_err(tunnel::TunnelError::Write);
                }
                Ok(BuildContextAnswer::Archive {
                    commit,
                    key,
                    response,
                }) => {
                    let reply = BuildContextReply {
                        status: 200,
                        commit: Some(commit),
                        key,
                        message: None,
                    };
                    write_json(&mut stream, &reply).await?;
                    response
                }
                Err(e) => {
                    tracing::warn!(agent = %agent, error = %error_chain(&e), "cannot fetch a build context");
                    let reply = BuildContextReply {
                        status: 502,
                        commit: None,
                        key: None,
                        message: Some("the relay cannot reach the server".into()),
                    };
                    write_json(&mut stream, &reply).await?;
                    return stream.shutdown().await.map_err(tunnel::TunnelError::Write);
                }
            };
            loop {
                match resp.chunk().await {
                    Ok(Some(chunk)) if chunk.is_empty() => continue,
                    Ok(Some(chunk)) => write_frame(&mut stream, &chunk).await?,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(agent = %agent, workspace = %req.workspace, error = %error_chain(&e), "the server's build context broke off");
                        // No end frame: the agent sees the context cut short.
                        return stream.shutdown().await.map_err(tunnel::TunnelError::Write);
                    }
                }
            }
            write_frame(&mut stream, b"").await?;
            stream.shutdown().await.map_err(tunnel::TunnelError::Write)
        };
        if let Err(e) = result.await {
            tracing::info!(agent = %agent, workspace = %req.workspace, error = %error_chain(&e), "cannot pass on a build context");
        }
    }

    /// This instance's live sessions of `agent`.
    pub(super) fn local_sessions(&self, agent: AgentId) -> Vec<AgentSession> {
        self.local.for_agent(agent)
    }

    /// Other instances holding a connection of `agent`, with their relay↔relay URLs; empty
    /// when this relay does not forward.
    pub(super) async fn remote_candidates(&self, agent: AgentId) -> Vec<(InstanceId, url::Url)> {
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
