//! Internal wire types between the server and the relay (relay.md, reconcile.md).
//!
//! Both directions authenticate with a short-lived HS256 JWT signed with the relay ↔ server
//! shared secret: relay → server with issuer `warren-relay` and audience `warren-server`
//! (constants in [`crate::reconcile`]), server → relay with issuer `warren-server` and
//! audience `warren-relay`. The token travels as `Authorization: Bearer <jwt>`.

use crate::ids::AgentId;
use serde::{Deserialize, Serialize};

/// Server endpoint the relay calls to check an agent token.
pub const AUTHENTICATE_AGENT_PATH: &str = "/internal/agents/authenticate";

/// JWT issuer of the server's calls to relays.
pub const SERVER_JWT_ISSUER: &str = "warren-server";
/// JWT audience of the relays' internal endpoints.
pub const RELAY_JWT_AUDIENCE: &str = "warren-relay";
/// Longest validity of any internal JWT, in seconds.
pub const INTERNAL_JWT_MAX_VALIDITY_SECS: i64 = 30;
/// Clock skew tolerated on `nbf`/`exp`, in seconds.
pub const INTERNAL_JWT_LEEWAY_SECS: u64 = 5;

/// Relay endpoint the server calls (no body) to make an agent reconcile now; `{agent_id}`
/// is replaced by the agent's id. Best effort: 2xx means delivered or queued.
pub const SIGNAL_PATH_TEMPLATE: &str = "/internal/agents/{agent_id}/signal";

/// The signal path for one agent.
pub fn signal_path(agent: AgentId) -> String {
    SIGNAL_PATH_TEMPLATE.replace("{agent_id}", &agent.to_string())
}

/// Claims of every internal JWT. `sub` is the agent id when the call is about one agent
/// (always for reconcile); `exp - iat` must not exceed [`INTERNAL_JWT_MAX_VALIDITY_SECS`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InternalClaims {
    pub iss: String,
    pub aud: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub: Option<String>,
    pub iat: i64,
    pub nbf: i64,
    pub exp: i64,
}

/// Body of `POST /internal/agents/authenticate`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthenticateAgentRequest {
    pub token: String,
}

/// 200 answer of `POST /internal/agents/authenticate` (401 when the token is not valid).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticateAgentResponse {
    pub agent_id: AgentId,
    pub agent_name: String,
}
