//! Bodies of the API's tree: projects, spaces, mounts, grants and members.

use super::*;

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
    /// The agent its prebuilds run on, while it has them (`warren project prebuilds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prebuild_agent: Option<String>,
    /// The refs prebuilt, the default ref first, while it has prebuilds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prebuild_refs: Vec<String>,
    /// A ref's newest prebuild older than this many hours gets a new one (none: pushes only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prebuild_every_hours: Option<u32>,
    /// The size of its warm pool (stopped workspaces made from the default ref's newest
    /// prebuild, waiting for the next users who create one), while it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prebuild_pool: Option<u32>,
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
