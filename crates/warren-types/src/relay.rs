//! The relay's wire protocols: the agent tunnel (agent ⇄ relay) and the relay's internal endpoints.
//!
//! **Agent tunnel.** The agent dials the relay's agent listener and sends an HTTP/1.1 request
//! `GET /v1/agent/connect` with `Connection: upgrade`, `Upgrade: warren-tunnel/1` and
//! `Authorization: Bearer <agent token>`. The relay checks the token with the server before
//! answering: 401 with an [`crate::api::ApiError`] body when it is refused, `101 Switching
//! Protocols` when it is accepted. After the 101 the raw connection carries yamux (the agent
//! is the yamux client, the relay the server); either side opens streams.
//!
//! Every yamux stream starts with one frame (a big-endian `u32` length, then that many bytes)
//! holding a JSON [`StreamOpen`]; what follows depends on the kind:
//! - `reconcile` (agent → relay): one frame with the request body, unchanged JSON bytes of a
//!   `ReconcileRequest`; the relay answers with a JSON [`ReconcileReply`] frame and then one
//!   frame with the server's response body, unchanged.
//! - `signal` (relay → agent): nothing more; the stream is closed. "Reconcile now".
//! - `ping` (agent → relay, every [`HEARTBEAT_INTERVAL_SECS`]): the relay answers with one
//!   empty frame; no answer in time and the agent reconnects.
//! - `dial` (relay → agent): the agent dials the workspace endpoint and answers with a JSON
//!   [`DialReply`] frame; on success raw bytes follow in both directions until either side
//!   closes.
//!
//! **Internal listener** (server and proxy; `Authorization: Bearer <JWT>`, HS256 with the
//! relay↔server shared secret, audience [`RELAY_JWT_AUDIENCE`], at most 30 s of validity):
//! - `POST /internal/agents/{agent_id}/signal` → 200 [`SignalResponse`];
//! - `GET /internal/agents/{agent_id}/tunnel?workspace=&namespace=&port=` with the same
//!   `Upgrade: warren-tunnel/1` → 101 and then raw bytes to the workspace endpoint, or 404
//!   (agent not connected) / 502 (the agent could not dial) with an `ApiError` body.

use crate::ids::AgentId;
use serde::{Deserialize, Serialize};

/// Value of the `Upgrade` header on both the agent connection and internal tunnels.
pub const TUNNEL_PROTOCOL: &str = "warren-tunnel/1";
/// Path agents dial on the relay's agent listener.
pub const AGENT_CONNECT_PATH: &str = "/v1/agent/connect";
/// Route (axum syntax) of the "reconcile now" signal on the relay's internal listener.
pub const SIGNAL_ROUTE: &str = "/internal/agents/{agent_id}/signal";
/// Route (axum syntax) of a byte stream to a workspace endpoint on the internal listener.
pub const TUNNEL_ROUTE: &str = "/internal/agents/{agent_id}/tunnel";
/// Path of the server's endpoint that checks an agent token; the relay calls it.
pub const AUTHENTICATE_PATH: &str = "/internal/agents/authenticate";
/// Response header on the agent connection's 101 naming the authenticated agent.
pub const AGENT_ID_RESPONSE_HEADER: &str = "x-warren-agent-id";

/// JWT issuer used by the server towards relays.
pub const SERVER_JWT_ISSUER: &str = "warren-server";
/// JWT issuer used by proxies towards relays.
pub const PROXY_JWT_ISSUER: &str = "warren-proxy";
/// JWT audience of the relay's internal endpoints.
pub const RELAY_JWT_AUDIENCE: &str = "warren-relay";
/// Longest validity a relay accepts for a JWT on its internal endpoints, in seconds.
pub const INTERNAL_JWT_MAX_VALIDITY_SECS: i64 = 30;

/// The agent pings the relay this often; a ping unanswered within the timeout makes it
/// reconnect (a vanished relay host sends no TCP reset).
pub const HEARTBEAT_INTERVAL_SECS: u64 = 15;
pub const HEARTBEAT_TIMEOUT_SECS: u64 = 10;
/// The relay closes an agent connection that opened no stream (not even a ping) for this long.
pub const AGENT_IDLE_TIMEOUT_SECS: u64 = 60;

/// Largest frame either side accepts; bigger frames are a protocol error, never an allocation.
pub const MAX_FRAME_LEN: u32 = 64 * 1024 * 1024;

/// The path of the signal endpoint for one agent.
pub fn signal_path(agent: AgentId) -> String {
    format!("/internal/agents/{agent}/signal")
}

/// The path of the tunnel endpoint for one agent (add [`TunnelQuery`] as the query string).
pub fn tunnel_path(agent: AgentId) -> String {
    format!("/internal/agents/{agent}/tunnel")
}

/// Prefixes `payload` with its length, the framing of every message on a tunnel stream.
pub fn encode_frame(payload: &[u8]) -> Result<Vec<u8>, FrameTooLarge> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME_LEN)
        .ok_or(FrameTooLarge { len: payload.len() })?;
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
pub struct FrameTooLarge {
    pub len: usize,
}

/// Body of `POST /internal/agents/authenticate` (relay → server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthenticateRequest {
    pub token: String,
}

/// 200 answer of `POST /internal/agents/authenticate`; a refused token is a 401.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticateResponse {
    pub agent_id: AgentId,
    pub agent_name: String,
}

/// The first frame of every tunnel stream: what the stream is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum StreamOpen {
    /// Agent → relay: a reconcile call; the request body follows in the next frame.
    Reconcile,
    /// Relay → agent: reconcile now (a desired state changed on the server).
    Signal,
    /// Relay → agent: open a byte stream to a workspace endpoint.
    Dial(DialTarget),
    /// Agent → relay: liveness check; the relay answers with one empty frame.
    Ping,
}

/// A workspace endpoint the agent dials on the relay's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DialTarget {
    /// Workspace name.
    pub workspace: String,
    pub namespace: String,
    pub port: u16,
}

/// Query string of the internal tunnel endpoint.
pub type TunnelQuery = DialTarget;

/// The relay's answer to a `reconcile` stream: the server's status; its body follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileReply {
    pub status: u16,
}

/// The agent's answer to a `dial` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum DialReply {
    /// Connected; raw bytes follow.
    Connected,
    /// The endpoint could not be reached; the stream is closed after this frame.
    Failed {
        code: DialErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DialErrorCode {
    /// No such workspace on this agent's runtime.
    WorkspaceNotFound,
    /// The workspace exists but its endpoint did not accept the connection.
    Unreachable,
}

/// 200 answer of the signal endpoint: how many connections of the agent were signalled
/// (0 when the agent is not connected; it reconciles fully when it connects anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalResponse {
    pub connections: usize,
}

/// Claims of the short-lived HS256 JWTs between relay, server and proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InternalClaims {
    pub iss: String,
    pub aud: String,
    /// The agent id on reconcile calls (relay → server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
}

// ---- relay↔relay (several relay instances) ----

/// Private relay↔relay endpoint: deliver a signal to this instance's own connections only.
pub const PEER_SIGNAL_ROUTE: &str = "/peer/agents/{agent_id}/signal";
/// Private relay↔relay endpoint: open a tunnel through this instance's own connection only.
pub const PEER_TUNNEL_ROUTE: &str = "/peer/agents/{agent_id}/tunnel";
/// Issuer and audience of relay↔relay JWTs (signed with a secret only relays share).
pub const PEER_JWT_ISSUER: &str = "warren-relay";
/// Longest validity a relay accepts on a relay↔relay JWT.
pub const PEER_JWT_MAX_VALIDITY_SECS: i64 = 30;
/// Error code a gateway instance answers (404) when it holds no connection of the agent.
pub const AGENT_NOT_HERE: &str = "agent_not_here";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_open_wire_form() {
        let open = StreamOpen::Dial(DialTarget {
            workspace: "w".into(),
            namespace: "n".into(),
            port: 8080,
        });
        let json = serde_json::to_string(&open).unwrap();
        assert_eq!(
            json,
            r#"{"type":"dial","workspace":"w","namespace":"n","port":8080}"#
        );
        assert_eq!(serde_json::from_str::<StreamOpen>(&json).unwrap(), open);
        assert_eq!(
            serde_json::to_string(&StreamOpen::Reconcile).unwrap(),
            r#"{"type":"reconcile"}"#
        );
        let failed = DialReply::Failed {
            code: DialErrorCode::Unreachable,
            message: "refused".into(),
        };
        let json = serde_json::to_string(&failed).unwrap();
        assert_eq!(
            json,
            r#"{"result":"failed","code":"unreachable","message":"refused"}"#
        );
        assert!(serde_json::from_str::<StreamOpen>(r#"{"type":"exec"}"#).is_err());
    }

    #[test]
    fn frames_are_length_prefixed_and_bounded() {
        assert_eq!(encode_frame(b"ab").unwrap(), vec![0, 0, 0, 2, b'a', b'b']);
        assert_eq!(signal_path(AgentId(7)), "/internal/agents/7/signal");
    }
}
