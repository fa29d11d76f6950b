//! Bodies of the REST API under `/api/v1`, shared by the server, the client and the CLI.

use crate::config::AgentConfig;
use crate::ids::{AgentId, MountId, ProjectId, SpaceId, SshKeyId, TokenId, UserId, WorkspaceId};
use crate::state::{ActualState, DesiredState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

mod lists;
pub use lists::{Page, WorkspaceListQuery};

/// Prefix of every REST route.
pub const API_PREFIX: &str = "/api/v1";

/// Every API error: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    pub error: ApiErrorBody,
}

impl ApiError {
    /// The code and message of an error answer's body; for a body that is not this JSON (a
    /// load balancer's page, say), no code and the start of the text.
    pub fn parts_of(body: &[u8]) -> (String, String) {
        match serde_json::from_slice::<ApiError>(body) {
            Ok(e) => (e.error.code, e.error.message),
            Err(_) => (
                String::new(),
                String::from_utf8_lossy(body).chars().take(200).collect(),
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiErrorBody {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_field`, `quota_exceeded`.
    pub code: String,
    /// Human-readable, names the offending field or state.
    pub message: String,
}

// ---- users, tokens, keys ----

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct User {
    pub id: UserId,
    pub username: String,
    pub is_admin: bool,
    pub created_at: DateTime<Utc>,
    /// When an admin disabled the account: it cannot sign in, use its tokens or keys, or
    /// reach its workspaces (which were stopped) until enabled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<DateTime<Utc>>,
    /// When an admin asked for the account's deletion; it is deleted once its workspaces
    /// are terminated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_requested_at: Option<DateTime<Utc>>,
    /// A Git repository of dotfiles, cloned into the home of the user's new workspaces at
    /// first start, its install script run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dotfiles_url: Option<String>,
}

/// Body of `PUT /users/me/dotfiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetDotfilesRequest {
    /// A public Git repository (no credentials in the URL).
    pub url: String,
}

/// An admin's change to an account; absent fields stay as they are.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateUserRequest {
    /// Grant (`true`) or revoke (`false`) admin rights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_admin: Option<bool>,
    /// Disable (`true`: running workspaces are stopped) or enable (`false`) the account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled: Option<bool>,
    /// A new password (an admin's reset); every session and token of the account is revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
}

/// A user's change of their own password.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangePasswordRequest {
    pub current_password: String,
    pub new_password: String,
    /// Also revoke every other token and every browser session (the token making this
    /// request is kept).
    #[serde(default)]
    pub revoke_sessions: bool,
}

// Requests carrying a password show everything but it: they must never reach a log line.
impl std::fmt::Debug for CreateUserRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateUserRequest")
            .field("username", &self.username)
            .field("is_admin", &self.is_admin)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for UpdateUserRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpdateUserRequest")
            .field("is_admin", &self.is_admin)
            .field("disabled", &self.disabled)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl std::fmt::Debug for PasswordLoginRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordLoginRequest")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ChangePasswordRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangePasswordRequest")
            .field("revoke_sessions", &self.revoke_sessions)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateUserRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub is_admin: bool,
}

/// Body of `POST /api/v1/oauth/clients`: an OAuth client of Warren's authorization server
/// (the proxy, or a third-party tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOAuthClient {
    /// Chosen id (1–100 of `A-Z a-z 0-9 . _ -`); generated when absent.
    #[serde(default)]
    pub client_id: Option<String>,
    pub name: String,
    /// Matched exactly against the authorization request's `redirect_uri`.
    pub redirect_uris: Vec<String>,
    /// First-party clients (Warren's own proxy) skip the consent page.
    #[serde(default)]
    pub first_party: bool,
    /// Confidential clients get a secret; public ones rely on PKCE alone.
    #[serde(default = "yes")]
    pub confidential: bool,
}

fn yes() -> bool {
    true
}

/// An OAuth client as the API shows it (never its secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OAuthClient {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    pub confidential: bool,
    pub created_at: DateTime<Utc>,
}

/// 201 answer: the client and, for a confidential one, its secret (shown once).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedOAuthClient {
    pub client: OAuthClient,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
}

impl std::fmt::Debug for CreatedOAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreatedOAuthClient")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// What a personal access token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TokenScope {
    /// Everything the user may do through the REST API.
    Api,
    /// Read-only REST API access.
    ReadApi,
    /// Reach workspaces through the proxy (HTTP bearer, SSH password).
    Workspace,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTokenRequest {
    pub name: String,
    pub scopes: Vec<TokenScope>,
    /// Defaults to 30 days; at most 365.
    #[serde(default)]
    pub expires_in_days: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Token {
    pub id: TokenId,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked: bool,
    pub last_used_at: Option<DateTime<Utc>>,
}

/// Returned once at creation: the only time the secret is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedToken {
    pub token: Token,
    pub secret: String,
}

/// `POST /api/v1/session`: exchange a username and password for a token (used by `warren login`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PasswordLoginRequest {
    pub username: String,
    pub password: String,
    #[serde(default)]
    pub token_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddSshKeyRequest {
    /// An OpenSSH public key line, e.g. `ssh-ed25519 AAAA... comment`.
    pub public_key: String,
    #[serde(default)]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SshKey {
    pub id: SshKeyId,
    pub name: String,
    pub fingerprint: String,
    pub public_key: String,
    pub created_at: DateTime<Utc>,
}

// ---- agents ----

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAgentRequest {
    pub name: String,
    #[serde(default)]
    pub config: Option<AgentConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Agent {
    pub id: AgentId,
    pub name: String,
    pub config: AgentConfig,
    pub created_at: DateTime<Utc>,
    /// Last reconcile call the server answered for this agent.
    pub last_seen_at: Option<DateTime<Utc>>,
    /// Why the agent cannot see its runtime (container engine or cluster), as it last
    /// reported; `None` while all is well.
    #[serde(default)]
    pub runtime_fault: Option<String>,
    /// Since when that fault has lasted.
    #[serde(default)]
    pub runtime_fault_since: Option<DateTime<Utc>>,
    /// Why workspaces on this agent are not isolated from each other or from blocked
    /// networks (a container engine where the agent cannot set firewall rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_warning: Option<String>,
}

/// Returned once at agent creation: the only time the agent token is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreatedAgent {
    pub agent: Agent,
    pub token: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateAgentRequest {
    pub config: AgentConfig,
}

// ---- projects ----

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProjectRequest {
    pub name: String,
    /// The repository, without credentials in it (give them as `credential`).
    pub git_url: String,
    #[serde(default)]
    pub default_ref: Option<String>,
    /// Where the devfile lives in the repository (default `.devfile.yaml`); the server reads
    /// it at the workspace's ref when the project stores no devfile.
    #[serde(default)]
    pub devfile_path: Option<String>,
    /// The devfile's text, used instead of the repository's.
    #[serde(default)]
    pub devfile: Option<String>,
    /// Who may see and use the project (default `private`: its members and admins).
    #[serde(default)]
    pub visibility: Option<ProjectVisibility>,
    /// How to authenticate to the repository; stored encrypted, never returned.
    #[serde(default)]
    pub credential: Option<crate::git::GitCredential>,
}

/// Who may see and use a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProjectVisibility {
    /// Its members and admins.
    Private,
    /// Every signed-in user.
    Internal,
}

impl ProjectVisibility {
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectVisibility::Private => "private",
            ProjectVisibility::Internal => "internal",
        }
    }
}

/// A member's rights on a project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProjectRole {
    /// Uses the project and manages it: credentials, members, visibility, deletion.
    Maintainer,
    /// Sees the project and creates workspaces from it.
    Developer,
}

impl ProjectRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ProjectRole::Maintainer => "maintainer",
            ProjectRole::Developer => "developer",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Project {
    pub id: ProjectId,
    pub name: String,
    pub git_url: String,
    pub default_ref: String,
    pub devfile_path: String,
    pub has_devfile: bool,
    pub visibility: ProjectVisibility,
    /// The kind of the stored credential (`token`, `basic`, `ssh_key`); its secret is never
    /// returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// A maintainer's change to a project; absent fields stay as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProjectRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<ProjectVisibility>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devfile_path: Option<String>,
}

/// A user's membership of a project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProjectMember {
    pub user_id: UserId,
    pub username: String,
    pub role: ProjectRole,
    pub created_at: DateTime<Utc>,
}

/// Body of `PUT /projects/{project}/members/{user}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetProjectMemberRequest {
    pub role: ProjectRole,
}

// ---- spaces ----

/// A member's rights on a space and everything below it; ordered from least to most.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum SpaceRole {
    /// Sees the space's entries.
    Viewer,
    /// Creates and uses entries.
    Developer,
    /// Manages the space: spaces below it, its members.
    Owner,
}

impl SpaceRole {
    pub fn as_str(self) -> &'static str {
        match self {
            SpaceRole::Viewer => "viewer",
            SpaceRole::Developer => "developer",
            SpaceRole::Owner => "owner",
        }
    }

    pub fn parse(s: &str) -> Option<SpaceRole> {
        match s {
            "viewer" => Some(SpaceRole::Viewer),
            "developer" => Some(SpaceRole::Developer),
            "owner" => Some(SpaceRole::Owner),
            _ => None,
        }
    }
}

/// A space of the tree: `acme`, `acme/platform`, `users/alice`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Space {
    pub id: SpaceId,
    pub path: String,
    /// The caller's role here (held here or on a space above); `None` for an admin who is
    /// not a member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_role: Option<SpaceRole>,
    pub created_at: DateTime<Utc>,
}

/// What a user may do with a workspace, from its ownership and the roles on its space.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceRight {
    /// See it: the API, the web UI, lists and the tree.
    See,
    /// Also start and stop it, reach its ports, terminal and SSH, read its logs, run its
    /// commands.
    Use,
    /// Also resize and terminate it.
    Manage,
}

impl WorkspaceRight {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkspaceRight::See => "see",
            WorkspaceRight::Use => "use",
            WorkspaceRight::Manage => "manage",
        }
    }
}

/// The type of a mount (spec/mounts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MountType {
    /// Requests go to a URL an agent reaches, or through a connector.
    Proxy,
    /// A softlink: another entry serves requests under the mount's name.
    Workspace,
    /// `308` to another entry's host (same port and path), or to an external URL.
    Redirect,
}

impl MountType {
    pub const fn as_str(self) -> &'static str {
        match self {
            MountType::Proxy => "proxy",
            MountType::Workspace => "workspace",
            MountType::Redirect => "redirect",
        }
    }

    pub fn parse(s: &str) -> Option<MountType> {
        Some(match s {
            "proxy" => MountType::Proxy,
            "workspace" => MountType::Workspace,
            "redirect" => MountType::Redirect,
            _ => return None,
        })
    }
}

/// Where a mount is in its life (spec/mounts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum MountPhase {
    /// The spec is accepted.
    Initializing,
    /// The backing object is known, not yet reachable.
    Connecting,
    /// Traffic flows; `status.url` is set.
    Ready,
    /// The backing object is silent past its deadline.
    Unknown,
    /// A `Workspace…` condition is `False`: what backs it is down (the reason says why).
    Unavailable,
}

/// A condition reported by what backs a mount, as Kubernetes writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// A mount's status: `{phase, conditions, url}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MountStatus {
    pub phase: MountPhase,
    pub conditions: Vec<Condition>,
    /// Where its traffic goes once mounted: for a redirect, the URL it sends clients to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// For a redirect to an entry: the entry at the end of the chain (`warren ws ssh` and
    /// `open` go there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
}

/// A mount: an entry of the tree Warren does not run as containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Mount {
    pub id: MountId,
    pub name: String,
    #[serde(rename = "type")]
    pub mount_type: MountType,
    /// Path of the space it lives in.
    pub space: String,
    pub owner_username: String,
    /// The entry it stands for.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The URL it stands for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub status: MountStatus,
    /// A `proxy` mount backed by `warren connect` (no `url`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connector: bool,
    /// The ports a connector serves (`{port}-{name}.{domain}`), as it last reported them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// What the caller may do with it: see it, use it, or manage it (remove it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_right: Option<WorkspaceRight>,
    pub created_at: DateTime<Utc>,
    /// Only in the answer that created a connector mount: the token `warren connect` dials
    /// in with, good for this mount alone. Shown once; stored hashed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector_token: Option<String>,
}

/// A user allowed to make softlinks (`workspace` mounts) to a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceGrant {
    pub user_id: UserId,
    pub username: String,
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /api/v1/mounts`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMountRequest {
    /// The entry's name: a host name label like a workspace's, unique among workspaces and
    /// mounts.
    pub name: String,
    /// `redirect`, `workspace` (a softlink: needs the target owner's grant) or `proxy` (with
    /// `connector`: a machine attached with `warren connect`).
    #[serde(rename = "type")]
    pub mount_type: String,
    /// The entry it stands for (a workspace or a mount).
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The URL it stands for (`http` or `https`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// For `proxy`: the agent that reaches `url`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
    /// For `proxy`: backed by `warren connect` on an existing machine; the answer carries
    /// the connector's token, once.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connector: bool,
    /// The space's path; the creator's personal space when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
}

/// What kind of entry of the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// A workspace Warren runs.
    Workspace,
    /// A mount (its `type` in `mount_type`).
    Mount,
}

/// One entry of the tree, as `warren ws tree` draws it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TreeEntry {
    pub name: String,
    pub kind: EntryKind,
    pub owner_username: String,
    /// A mount's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mount_type: Option<MountType>,
    /// A mount's phase (a workspace's state is `actual_state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MountPhase>,
    /// Where a mount points: the entry or URL it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points_to: Option<String>,
    /// A workspace's states (a mount's are `Running`: it has no containers of its own).
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    /// Why it is not as asked (`Failed`, `Error`), or why its states may be out of date
    /// (its agent cannot see its runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// URL of its main endpoint, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// A space of the tree with the entries in it the caller may see.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TreeSpace {
    pub path: String,
    /// The caller's role here; `None` for an admin who is not a member, or for a space shown
    /// only because it holds the caller's own workspaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_role: Option<SpaceRole>,
    pub entries: Vec<TreeEntry>,
}

/// Answer of `GET /api/v1/tree`: every space the caller sees (at or below `root`), in path
/// order, each with its entries in name order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Tree {
    /// The space asked for; `None`: the whole tree the caller sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    pub spaces: Vec<TreeSpace>,
    /// More entries exist than one answer holds ([`MAX_TREE_ENTRIES`]); ask for a space
    /// further down.
    pub truncated: bool,
}

/// Most entries one tree answer holds.
pub const MAX_TREE_ENTRIES: usize = 50_000;

/// Body of `POST /spaces`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSpaceRequest {
    /// `acme` (admins) or `acme/platform` (owners of `acme`).
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SpaceMember {
    pub user_id: UserId,
    pub username: String,
    pub role: SpaceRole,
    pub created_at: DateTime<Utc>,
}

/// Body of `PUT /spaces/{space}/members/{user}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSpaceMemberRequest {
    pub role: SpaceRole,
}

// ---- workspaces ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VariableKind {
    Env,
    File,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariableInput {
    pub key: String,
    pub value: String,
    #[serde(default = "default_variable_kind")]
    pub kind: VariableKind,
    /// Secret values are encrypted at rest and never returned.
    #[serde(default)]
    pub secret: bool,
}

fn default_variable_kind() -> VariableKind {
    VariableKind::Env
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Variable {
    pub key: String,
    pub kind: VariableKind,
    pub secret: bool,
    /// `None` for secret variables.
    pub value: Option<String>,
}

/// A whole-workspace size, e.g. `{"cpu": "2", "memory": "4Gi"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceResources {
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkspaceRequest {
    /// Project name or id; its devfile is used unless `devfile` is given.
    #[serde(default)]
    pub project: Option<String>,
    /// A devfile's text (YAML).
    #[serde(default)]
    pub devfile: Option<String>,
    /// Agent name or id; defaults to the only agent when there is exactly one.
    #[serde(default)]
    pub agent: Option<String>,
    /// Requested name; generated (`adjective-animal-xxxx`) when absent.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub resources: Option<WorkspaceResources>,
    #[serde(default)]
    pub variables: Vec<VariableInput>,
    /// Git ref to check out instead of the project's default.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// Without a project: the devfile's starter project to clone, by name (default: its
    /// first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starter: Option<String>,
    /// Path of the space it goes to (where the caller is a developer or owner); the
    /// caller's personal space `users/<username>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub name: String,
    pub namespace: String,
    pub owner: UserId,
    pub owner_username: String,
    /// Path of the space it lives in.
    #[serde(default)]
    pub space: String,
    pub agent: AgentId,
    pub agent_name: String,
    pub project: Option<ProjectId>,
    pub project_name: Option<String>,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub desired_state_updated_at: DateTime<Utc>,
    /// When the actual state last changed (a failure newer than a request is that
    /// request's outcome; an older one is not).
    #[serde(default)]
    pub actual_state_updated_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Last use through the proxy (HTTP, WebSocket, terminal, SSH), as the idle timeout
    /// sees it; reported in batches, so up to a few seconds behind. `None`: never used.
    #[serde(default)]
    pub last_activity_at: Option<DateTime<Utc>>,
    /// URL of the main endpoint, when the devfile declares one.
    pub url: Option<String>,
    /// The workspace's web terminal on the proxy (also where `warren ws port-forward`
    /// connects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_url: Option<String>,
    /// The editor injected into the workspace (VS Code in the browser), when its agent
    /// injects one; also listed in `endpoints` as `warren-editor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub editor_url: Option<String>,
    /// Every declared endpoint: name → URL.
    pub endpoints: BTreeMap<String, String>,
    /// Why the workspace is `Failed` or `Error`, in words a user can act on.
    pub failure_reason: Option<String>,
    /// Set while the workspace's agent cannot see its runtime: the states shown are the
    /// last ones it reported and may be out of date.
    #[serde(default)]
    pub agent_fault: Option<String>,
    /// Why this workspace is not isolated as its agent's configuration asks (see the
    /// agent's `isolation_warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_warning: Option<String>,
    /// What the caller may do with it (spec/mounts.md roles): `see`, `use` (start, stop,
    /// reach, logs, commands) or `manage` (also resize and terminate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_right: Option<WorkspaceRight>,
    pub resources: WorkspaceResources,
    pub variables: Vec<Variable>,
    /// Grows with every change of the workspace; `GET …?watch_version=` waits for it to move.
    #[serde(default)]
    pub version: i64,
    /// What Warren did with the workspace's devfile that its owner should know: parts it
    /// accepts without acting on them, choices it made (`path: message`). In the answers
    /// about one workspace (create, get), not in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The devfile's commands, runnable with `POST …/commands/{command}/run` (`warren ws
    /// run`). In the answers about one workspace (create, get), not in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<WorkspaceCommand>,
}

/// A command of a workspace's devfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceCommand {
    /// The devfile's command id.
    pub id: String,
    /// `exec`, `apply` or `composite`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `build`, `run`, `test`, `debug` or `deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// What it does, in a few words (`make test in runtime`, `build + deploy`).
    pub summary: String,
    /// Run by Warren at workspace start (`preStart`/`postStart` events).
    #[serde(default)]
    pub at_start: bool,
}

/// One line of the answer of `POST /api/v1/workspaces/{workspace}/commands/{command}/run`
/// (`application/x-ndjson`): the steps of the command as they start, their output and how
/// they end, then `done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CommandRunEvent {
    /// An exec or apply command (a step of a composite) starts.
    Started {
        command: String,
        kind: String,
        /// The component it runs on.
        component: String,
    },
    /// Output of a running step (text; bytes that are not UTF-8 are replaced).
    Output {
        command: String,
        stream: OutputStream,
        data: String,
    },
    /// A step ended: its exit code (`None` when unknown) and what went wrong.
    Finished {
        command: String,
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The whole command ended: 0 when every step succeeded, else the first failure's code
    /// (1 when a step failed without one); `failed` names that step.
    Done {
        exit_code: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDesiredStateRequest {
    pub desired_state: DesiredState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeWorkspaceRequest {
    pub resources: WorkspaceResources,
}

/// `GET /api/v1/access`: how users reach their workspaces besides the API (for the CLI's
/// `warren ws ssh` and `warren ws ssh-config`). Any authenticated user may ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccessInfo {
    /// The proxy's SSH server; `None` when this installation offers no SSH.
    pub ssh: Option<SshEndpoint>,
}

/// Where the proxy's SSH server is reached: `ssh -p {port} {workspace}@{host}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SshEndpoint {
    pub host: String,
    pub port: u16,
    /// The server's host keys in OpenSSH form (`ssh-ed25519 AAAA…`), when the installation
    /// publishes them: clients pin these instead of trusting the first key they see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_keys: Vec<String>,
}

/// The prefix of the `Host` names Warren's `ssh-config` blocks use (`warren-<workspace>`).
pub const SSH_HOST_PREFIX: &str = "warren-";

impl SshEndpoint {
    /// One OpenSSH `Host` block for `workspace`; with `known_hosts` (the file holding the
    /// pinned host keys, as OpenSSH should read its path), the host key is checked against
    /// that file only.
    pub fn host_block(&self, workspace: &str, known_hosts: Option<&str>) -> String {
        let mut block = format!(
            "Host {SSH_HOST_PREFIX}{workspace}\n    HostName {}\n    Port {}\n    User {workspace}\n",
            self.host, self.port
        );
        if let Some(file) = known_hosts {
            block.push_str(&format!(
                "    UserKnownHostsFile {file}\n    StrictHostKeyChecking yes\n"
            ));
        }
        block
    }

    /// `known_hosts` lines for the published host keys (`[host]:port key`, or `host key` on
    /// port 22, as OpenSSH looks them up).
    pub fn known_hosts_lines(&self) -> Vec<String> {
        let name = if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        };
        self.host_keys
            .iter()
            .map(|k| format!("{name} {k}"))
            .collect()
    }

    /// Checks one OpenSSH public key line (`algorithm base64 [comment]`) and returns it
    /// without the comment.
    pub fn parse_host_key(line: &str) -> Result<String, String> {
        let mut words = line.split_whitespace();
        let (Some(algorithm), Some(data)) = (words.next(), words.next()) else {
            return Err("not an OpenSSH public key (`ssh-ed25519 AAAA… [comment]`)".into());
        };
        let algorithm_ok = !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '@'));
        let data_ok = data.len() >= 16
            && data
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='));
        if !algorithm_ok || !data_ok {
            return Err(format!(
                "{:?} is not an OpenSSH public key (`ssh-ed25519 AAAA… [comment]`)",
                line.chars().take(40).collect::<String>()
            ));
        }
        Ok(format!("{algorithm} {data}"))
    }

    /// Parses `host`, `host:port`, `[v6]:port` or a bare IPv6 address (port 22 when none).
    pub fn parse(address: &str) -> Result<SshEndpoint, String> {
        let bad = |why: &str| format!("{address:?} is not an SSH address (`host[:port]`): {why}");
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing `]`"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(p.strip_prefix(':').ok_or_else(|| bad("junk after `]`"))?),
                ),
            }
        } else if address.matches(':').count() > 1 {
            (address, None)
        } else {
            match address.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (address, None),
            }
        };
        if host.is_empty()
            || host
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '@' | '/' | '"' | '\''))
        {
            return Err(bad("bad host"));
        }
        let port = match port {
            None => 22,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("bad port"))?,
        };
        Ok(SshEndpoint {
            host: host.to_owned(),
            port,
            host_keys: Vec::new(),
        })
    }
}

#[cfg(test)]
mod ssh_endpoint_tests {
    use super::SshEndpoint;

    #[test]
    fn host_keys_are_checked_and_become_known_hosts_lines() {
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0";
        assert_eq!(
            SshEndpoint::parse_host_key(&format!("{key} warren proxy host key")).unwrap(),
            key
        );
        for bad in ["", "ssh-ed25519", "ssh-ed25519 not;base64!!!!!!!!!!", "a b"] {
            assert!(SshEndpoint::parse_host_key(bad).is_err(), "{bad:?}");
        }
        let mut e = SshEndpoint::parse("ssh.example.com:2222").unwrap();
        e.host_keys = vec![key.into()];
        assert_eq!(
            e.known_hosts_lines(),
            [format!("[ssh.example.com]:2222 {key}")]
        );
        e.port = 22;
        assert_eq!(e.known_hosts_lines(), [format!("ssh.example.com {key}")]);
    }

    #[test]
    fn parses_the_usual_forms() {
        let p = |s| SshEndpoint::parse(s).map(|e| (e.host, e.port));
        assert_eq!(p("ssh.example.com"), Ok(("ssh.example.com".into(), 22)));
        assert_eq!(p("127.0.0.1:2222"), Ok(("127.0.0.1".into(), 2222)));
        assert_eq!(p("[::1]:2222"), Ok(("::1".into(), 2222)));
        assert_eq!(p("::1"), Ok(("::1".into(), 22)));
        assert!(p("").is_err());
        assert!(p("host:0").is_err());
        assert!(p("host:x").is_err());
        assert!(p("a b:22").is_err());
        assert!(p("u@host:22").is_err());
    }
}
