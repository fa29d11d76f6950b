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

// ---- proxy → server (access.md) ----
//
// The proxy authenticates with the same kind of JWT as the relay (HS256 over the relay ↔
// server shared secret, ≤ 30 s), with issuer [`PROXY_JWT_ISSUER`] and audience
// `warren-server` ([`crate::reconcile::SERVER_JWT_AUDIENCE`]).

/// JWT issuer of the proxy's calls to the server.
pub const PROXY_JWT_ISSUER: &str = "warren-proxy";
/// `GET` with [`WorkspaceAccessQuery`]: may this user reach this port of this workspace?
pub const WORKSPACE_ACCESS_PATH: &str = "/internal/workspaces/access";
/// `POST` with [`ActivityReport`] (204): last user activity per workspace.
pub const WORKSPACE_ACTIVITY_PATH: &str = "/internal/workspaces/activity";
/// `POST` with [`WorkspaceStartRequest`] → 200 [`WorkspaceAccess`] (the new states): the
/// stopped-workspace page's start button. 404 unless the user owns the workspace; 409 when
/// its state allows no start.
pub const WORKSPACE_START_PATH: &str = "/internal/workspaces/start";
/// `POST` with [`SessionReport`] (204): terminals and SSH sessions opened and closed through a
/// proxy, recorded in the audit log (who, from where, how long).
pub const SESSIONS_PATH: &str = "/internal/sessions";
/// Most events in one [`SessionReport`].
pub const MAX_SESSION_EVENTS: usize = 1000;

/// What kind of session a proxy carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionKind {
    /// The web terminal.
    Terminal,
    /// A shell, command or subsystem over SSH.
    Ssh,
    /// The injected editor in the browser: from its first WebSocket of a caller, source and
    /// workspace to its last one's end (a window holds several, and reconnects).
    Editor,
}

impl SessionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            SessionKind::Terminal => "terminal",
            SessionKind::Ssh => "ssh",
            SessionKind::Editor => "editor",
        }
    }
}

/// One session's opening (no `closed_at_ms`) or end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionEvent {
    pub kind: SessionKind,
    pub workspace_id: crate::ids::WorkspaceId,
    /// Who opened it.
    pub user_id: crate::ids::UserId,
    /// The client's address as the proxy saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    pub opened_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed_at_ms: Option<i64>,
    /// What ran: `shell`, `exec`, a subsystem's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
}

/// Body of [`SESSIONS_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionReport {
    pub events: Vec<SessionEvent>,
}

/// `GET` with [`SshAuthorizeQuery`]: may this SSH key or token open this workspace?
pub const SSH_AUTHORIZE_PATH: &str = "/internal/ssh/authorize";
/// The proxy's question about a host that is no workspace it may reach: is it a redirect
/// mount the caller may see, and where does it lead? Query: [`WorkspaceAccessQuery`] (the
/// port is not looked at); 200 [`EntryRedirect`], else the same 404 as every refusal.
pub const ENTRY_REDIRECT_PATH: &str = "/internal/entries/redirect";
/// `POST` with [`ShareRedeemRequest`] → 200 [`ShareRedemption`]: a share link's secret,
/// brought to the workspace host it opens. Every refusal (unknown, expired, revoked, another
/// host or port) is the same 404.
pub const SHARE_REDEEM_PATH: &str = "/internal/share-links/redeem";

/// Query of [`WORKSPACE_ACCESS_PATH`]: at most one of `user` (the user id from the proxy's
/// session cookie), `bearer` (a personal access token with the `workspace` scope) and
/// `share` (a share link the proxy's share cookie names); none asks for anyone, without
/// signing in (a public port).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceAccessQuery {
    /// The workspace's name (the `{workspace-name}` part of the host).
    pub host: String,
    /// A declared endpoint port; `None` asks for the workspace itself (the web terminal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<crate::ids::UserId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer: Option<String>,
    /// A share link's id, from the proxy's signed share cookie for this host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<i64>,
    /// The client's address, for the audit log's record of a refused token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<std::net::IpAddr>,
}

/// Body of [`SHARE_REDEEM_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShareRedeemRequest {
    /// The workspace's name (from the host the link was opened on).
    pub host: String,
    pub port: u16,
    /// The link's secret (`wrn_share_…`).
    pub token: String,
}

/// 200 answer of [`SHARE_REDEEM_PATH`]: what the proxy's share cookie carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareRedemption {
    pub link_id: i64,
    pub workspace_id: crate::ids::WorkspaceId,
    /// When the link ends (unix ms); the cookie ends then too.
    pub expires_at_ms: i64,
}

/// 200 answer of [`WORKSPACE_ACCESS_PATH`]; every refusal is a 404 that says nothing more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceAccess {
    pub allowed: bool,
    pub workspace_id: crate::ids::WorkspaceId,
    pub workspace_name: String,
    pub agent_id: AgentId,
    pub namespace: String,
    pub port: Option<u16>,
    pub desired_state: crate::state::DesiredState,
    pub actual_state: crate::state::ActualState,
    pub user_id: crate::ids::UserId,
    /// The idle timeout stopped the workspace and its agent's policy lets a request start
    /// it again: the proxy asks for `Running` on the owner's behalf instead of showing the
    /// start button.
    #[serde(default)]
    pub wake_on_request: bool,
    /// The entry is a mount backed by a connector (`workspace_name` is the mount, the agent
    /// is the connector's, `workspace_id` is 0): no activity, timers or start button.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mount: bool,
    /// Why the entry cannot serve now (its connector is silent or reports a fault): the
    /// proxy answers 503 with this reason instead of trying.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// A `proxy` mount to a URL: the agent dials it (TLS included); the proxy sends the
    /// URL's host as `Host` and puts its path before the request's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_url: Option<String>,
    /// Whether the caller may start the workspace (the stopped page's button): false for
    /// someone who reaches it through a softlink without using the workspace itself.
    #[serde(default = "yes")]
    pub may_start: bool,
    /// When a lifecycle timer stops or terminates the workspace next, and why: the web
    /// terminal warns its user ten minutes before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_stop: Option<PlannedStop>,
    /// The port is the workspace's injected editor: the proxy records its WebSockets as an
    /// editor session for the audit log.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub editor: bool,
}

/// A lifecycle timer's next change of a workspace, as the proxy tells it in terminals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStop {
    /// Unix ms.
    pub at_ms: i64,
    /// Terminated rather than stopped.
    pub terminated: bool,
    pub reason: String,
}

fn yes() -> bool {
    true
}

/// Body of [`WORKSPACE_START_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceStartRequest {
    pub workspace_id: crate::ids::WorkspaceId,
    pub user_id: crate::ids::UserId,
}

/// Body of [`WORKSPACE_ACTIVITY_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityReport {
    pub workspaces: Vec<WorkspaceActivity>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceActivity {
    pub workspace_id: crate::ids::WorkspaceId,
    /// Unix milliseconds of the last request, WebSocket frame or SSH data.
    pub last_activity_ms: i64,
}

/// Query of [`SSH_AUTHORIZE_PATH`]: `username` is the workspace name; exactly one of
/// `public_key_fingerprint` (`SHA256:…` as `ssh-keygen -l` prints it) and `token` (a
/// personal access token with the `workspace` scope, the SSH password).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SshAuthorizeQuery {
    pub username: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The SSH client's address, for the audit log's record of a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<std::net::IpAddr>,
}

/// 200 answer of [`SSH_AUTHORIZE_PATH`]; every refusal is a 404.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshAuthorization {
    pub user_id: crate::ids::UserId,
    /// The username of the user who connects (`user_id`), for the session log.
    pub username: String,
    pub workspace_id: crate::ids::WorkspaceId,
    pub workspace_name: String,
    pub agent_id: AgentId,
    pub namespace: String,
    pub desired_state: crate::state::DesiredState,
    pub actual_state: crate::state::ActualState,
    /// As [`WorkspaceAccess::wake_on_request`]: the session may start the workspace.
    #[serde(default)]
    pub wake_on_request: bool,
    /// As [`WorkspaceAccess::mount`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mount: bool,
    /// As [`WorkspaceAccess::unavailable`]: the session is refused with this reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// As [`WorkspaceAccess::planned_stop`]: a shell session is warned ten minutes before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_stop: Option<PlannedStop>,
}

/// 200 answer of [`ENTRY_REDIRECT_PATH`]: exactly one of the two is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryRedirect {
    /// An entry of this Warren, at the end of the chain: the proxy sends the client to the
    /// same port (or terminal) and path on that entry's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entry: Option<String>,
    /// An absolute `http(s)` URL elsewhere: the request's path and query are appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// `POST`: a proxy starting offers the keys it holds and gets the keys every replica shares
/// (the first offer is adopted, so a proxy upgraded from keeping its own keeps its sessions and
/// host key); `GET`: the cookie keys alone, which replicas poll to learn rotations.
pub const PROXY_KEYS_PATH: &str = "/internal/proxy/keys";

/// How long a new cookie key is published to replicas before it signs: several of their polls.
pub const PROXY_KEY_PUBLISH_SECS: i64 = 20;

/// `POST` [`HandoffUse`]: 204 the first time a sign-in hand-off is used, 409 after, whichever
/// replica asks.
pub const PROXY_HANDOFF_PATH: &str = "/internal/proxy/handoffs";

/// Body of `POST` [`PROXY_KEYS_PATH`]: what the starting proxy would use on its own.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyKeyOffer {
    /// A cookie-signing key: 32 bytes, base64url without padding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cookie_key: Option<String>,
    /// An SSH host key, OpenSSH private key format, and its public key (`ssh-ed25519 …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_host_key: Option<OfferedHostKey>,
}

/// An SSH host key offered by a proxy.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OfferedHostKey {
    pub private_key: String,
    pub public_key: String,
}

/// One cookie-signing key as replicas get it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyCookieKey {
    /// Its generation: each rotation adds one.
    pub generation: i64,
    /// 32 bytes, base64url without padding.
    pub secret: String,
    /// From when (unix seconds) it signs; until then it only verifies.
    pub signing_from: i64,
}

/// Answer of [`PROXY_KEYS_PATH`].
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyKeys {
    /// Oldest first; at most the last few generations.
    pub cookie_keys: Vec<ProxyCookieKey>,
    /// The shared SSH host key (OpenSSH private key format); only in answers to `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_host_key: Option<String>,
}

impl std::fmt::Debug for ProxyKeyOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyKeyOffer")
            .field("cookie_key", &self.cookie_key.as_ref().map(|_| "…"))
            .field(
                "ssh_host_key",
                &self.ssh_host_key.as_ref().map(|k| &k.public_key),
            )
            .finish()
    }
}

impl std::fmt::Debug for OfferedHostKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfferedHostKey")
            .field("public_key", &self.public_key)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ProxyCookieKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyCookieKey")
            .field("generation", &self.generation)
            .field("signing_from", &self.signing_from)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ProxyKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProxyKeys")
            .field("cookie_keys", &self.cookie_keys)
            .finish_non_exhaustive()
    }
}

/// `PUT` [`ProxyPresence`]: a proxy says it serves, every few seconds;
/// `DELETE ?instance=`: it stops. The server points the workspace URLs of a region's agents at
/// that region's proxies while one of them has said so within [`PROXY_PRESENCE_STALE_SECS`],
/// and at the central proxy otherwise.
pub const PROXY_PRESENCE_PATH: &str = "/internal/proxy/presence";

/// How long a proxy's presence holds without a new one: three of its polls, so one lost
/// poll does not send users elsewhere.
pub const PROXY_PRESENCE_STALE_SECS: i64 = 15;

/// Body of `PUT` [`PROXY_PRESENCE_PATH`]: where a proxy serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyPresence {
    /// Random for each start of the process (16 to 64 of `A-Z a-z 0-9 _ -`).
    pub instance: String,
    /// The region it is the front door of (a DNS label); `None`: the central proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Workspace hosts on it are `{port}-{workspace}.{workspace_domain}`.
    pub workspace_domain: String,
    /// `http` or `https`, as browsers reach it.
    pub public_scheme: String,
    /// The port browsers reach it on; `None`: the scheme's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_port: Option<u16>,
    /// Its SSH server as clients reach it (`host:port`), when it serves SSH and was told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_address: Option<String>,
}

/// Query of `DELETE` [`PROXY_PRESENCE_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyLeaving {
    pub instance: String,
}

/// Body of `POST` [`PROXY_HANDOFF_PATH`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffUse {
    /// The hand-off's id (random, from its signed claims).
    pub jti: String,
    /// When it expires (unix seconds); it is remembered until then.
    pub expires_at: i64,
}
