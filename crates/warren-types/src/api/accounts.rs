//! Bodies of the API's accounts: users, OAuth clients, tokens, SSH keys and agents.

use super::*;

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
    /// The user's working hours: their running workspaces stop at the end of the day, and
    /// those that stopped start again in the morning (on top of the agents' limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_hours: Option<crate::schedule::WorkingHours>,
    /// The name the user's commits are made with in their workspaces (their username when
    /// absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_name: Option<String>,
    /// The email address the user's commits are made with in their workspaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
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
