//! The relay↔relay endpoint: requests for agents whose connection this instance holds.

use super::*;
use crate::registry::InstanceId;
use crate::Relay;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::time::Duration;
use warren_jwt::bearer;
use warren_types::api::ApiError;
use warren_types::relay::{
    ExecQuery, LogsTarget, SignalResponse, TunnelQuery, AGENT_NOT_HERE, PEER_EXEC_ROUTE,
    PEER_LOGS_ROUTE, PEER_SIGNAL_ROUTE, PEER_TUNNEL_ROUTE, TUNNEL_PROTOCOL,
};
use warren_types::trace::{TraceId, TRACE_HEADER};
use warren_types::AgentId;

impl Relay {
    pub(super) fn peer_url(base: &url::Url, route: &str, agent: AgentId) -> String {
        format!(
            "{}{}",
            base.as_str().trim_end_matches('/'),
            route.replace("{agent_id}", &agent.to_string())
        )
    }

    /// Forwards a signal to the gateway `instance`; returns how many connections took it.
    pub(super) async fn forward_signal(
        &self,
        agent: AgentId,
        instance: InstanceId,
        base: &url::Url,
        trace: Option<&TraceId>,
    ) -> usize {
        let Some(peer) = &self.peer else { return 0 };
        let token = match peer.keys.mint(agent) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "cannot sign a relay↔relay token");
                return 0;
            }
        };
        let mut req = peer
            .http
            .post(Self::peer_url(base, PEER_SIGNAL_ROUTE, agent))
            .bearer_auth(token)
            .timeout(SIGNAL_TIMEOUT);
        if let Some(t) = trace {
            req = req.header(TRACE_HEADER, t.as_str());
        }
        let resp = req.send().await;
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
    pub(super) async fn forward_stream(
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

pub(super) fn check_peer(
    relay: &Relay,
    headers: &HeaderMap,
    agent: AgentId,
) -> Result<(), Rejection> {
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

pub(super) fn not_here(agent: AgentId) -> Response {
    error(
        StatusCode::NOT_FOUND,
        AGENT_NOT_HERE,
        format!("this relay instance holds no connection of agent {agent}"),
    )
}

pub(super) async fn peer_signal(
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
    let trace = trace_of(&headers);
    let delivered = signal_sessions(sessions, trace.as_ref()).await;
    if let Some(t) = &trace {
        tracing::info!(agent = %agent, trace = %t, connections = delivered, "signalled the agent for another relay");
    }
    Json(SignalResponse {
        connections: delivered,
    })
    .into_response()
}

pub(super) async fn peer_tunnel(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<TunnelQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_target(query), req).await
}

pub(super) async fn peer_exec(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<ExecQuery>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_exec(query), req).await
}

pub(super) async fn peer_logs(
    State(relay): State<Relay>,
    Path(agent): Path<String>,
    query: Result<Query<LogsTarget>, axum::extract::rejection::QueryRejection>,
    req: Request,
) -> Response {
    peer_open(relay, agent, parse_logs(query), req).await
}

/// A gateway's side of a forwarded tunnel or exec session.
pub(super) async fn peer_open(
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
        Attempt::Open(stream) => splice(&relay, Some(target.kind()), req, stream),
        Attempt::Failed(resp) => resp,
        Attempt::NotHere => not_here(agent),
    }
}
