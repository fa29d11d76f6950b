//! A user's own secrets — environment variables and files given to their workspaces — and
//! the identity their commits are made with.

use super::*;

/// Most secrets one user may keep.
pub const MAX_USER_SECRETS: usize = 100;
/// Largest value of one secret, in bytes.
pub const MAX_USER_SECRET_BYTES: usize = 64 * 1024;

/// One of a user's secrets as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserSecret {
    /// An environment variable's name, or a file's under `/warren/variables/`.
    pub name: String,
    pub kind: VariableKind,
    /// Comma-separated globs of project names (a workspace opened from a repository by its
    /// URL: the repository's folder name); it goes only to workspaces of those. Every
    /// workspace of the user's when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<String>,
    /// Also given to the user's workspaces that others may use — those in a team space (its
    /// developers and owners) or granted to someone for a softlink — who could read it
    /// there; by default only to those no one else may use.
    #[serde(default)]
    pub shared_workspaces: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `PUT /users/me/secrets/{name}`.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSecretRequest {
    /// Sealed at rest and never shown again.
    pub value: String,
    #[serde(default = "env_kind")]
    pub kind: VariableKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<String>,
    #[serde(default)]
    pub shared_workspaces: bool,
}

impl std::fmt::Debug for SetSecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SetSecretRequest")
            .field("kind", &self.kind)
            .field("projects", &self.projects)
            .field("shared_workspaces", &self.shared_workspaces)
            .finish_non_exhaustive()
    }
}

fn env_kind() -> VariableKind {
    VariableKind::Env
}

/// Body of `PUT /users/me/profile`: the name and email address the user's commits are made
/// with in their workspaces (`GIT_AUTHOR_*`, `GIT_COMMITTER_*`); an absent field is cleared.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetProfileRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

/// One of a user's own Git credentials as the API shows it: never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserGitCredential {
    pub id: i64,
    /// `https://host[:port]`, `http://host[:port]` or `ssh://host[:port]`: the repositories
    /// it is used for.
    pub host: String,
    /// `token`, `basic` or `ssh_key`.
    pub kind: String,
    /// Also given to the user's workspaces others may use (see [`UserSecret`]).
    #[serde(default)]
    pub shared_workspaces: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Body of `POST /users/me/git-credentials`: sets (or replaces) the credential for a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetGitCredentialRequest {
    /// The host (`https://git.example.com`, `ssh://git.example.com`) or a repository's URL.
    pub host: String,
    pub credential: crate::git::GitCredential,
    #[serde(default)]
    pub shared_workspaces: bool,
}
