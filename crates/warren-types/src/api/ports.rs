//! Bodies of a workspace's ports and share links (issue 41, item 4): who may reach each
//! port, changed live, and links that open one port for whoever holds them.

use super::*;
use crate::sharing::PortVisibility;

/// Where a port's visibility comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VisibilitySource {
    /// The agent's `ports.default_visibility`.
    AgentDefault,
    /// The devfile's `warren.dev/visibility` attribute of the endpoint.
    Definition,
    /// Set by a user (`warren ws port`, the web UI).
    User,
    /// Fixed by Warren: the injected editor is a shell into the workspace, never shared
    /// wider than those who may use it.
    Warren,
}

/// A port of a workspace that the proxy serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspacePort {
    pub port: u16,
    /// The devfile's endpoints on this port.
    pub endpoints: Vec<String>,
    pub url: String,
    /// Who may reach it now (never wider than `max_visibility`).
    pub visibility: PortVisibility,
    pub source: VisibilitySource,
    /// The widest its agent allows.
    pub max_visibility: PortVisibility,
}

/// Body of `PUT /api/v1/workspaces/{workspace}/ports/{port}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPortRequest {
    /// The new visibility; `null` goes back to the devfile's (else the agent's default).
    pub visibility: Option<PortVisibility>,
}

/// Body of `POST /api/v1/workspaces/{workspace}/ports/{port}/share-links`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateShareLinkRequest {
    /// How long it opens the port (default: a day; at most the agent's
    /// `ports.max_share_link_secs`).
    #[serde(default)]
    pub expires_in_secs: Option<u64>,
}

/// A share link: it opens one port of a workspace, without signing in, until it expires or
/// is revoked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShareLink {
    pub id: i64,
    pub port: u16,
    /// The link to hand over, with its secret: only in the answer that made it (the server
    /// keeps only a digest and cannot show it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<DateTime<Utc>>,
}
