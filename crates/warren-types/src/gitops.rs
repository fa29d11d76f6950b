//! GitOps wire types: registered repositories, an agent's sources, and the admin policy
//! that caps them (`spec/gitops.md`). The rules that check them live in `warren-gitops`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::git::GitCredential;
use crate::RepositoryId;

/// A Git repository registered with the server. Its credential and webhook secret are
/// sealed at rest and never returned: only their presence is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Repository {
    pub id: RepositoryId,
    pub name: String,
    pub url: String,
    /// The kind of the stored credential (`token`, `basic`, `ssh_key`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<String>,
    /// Whether a webhook secret is set (pushes to the webhook are accepted only then).
    pub webhook: bool,
    /// The sources that read it, as `agent/source`.
    #[serde(default)]
    pub used_by: Vec<String>,
    pub created_at: DateTime<Utc>,
}

/// Registers a repository.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRepositoryRequest {
    /// 1-63 characters of a-z, 0-9 and '-'.
    pub name: String,
    /// `https://`, `http://`, `ssh://`, `git://` or `file://`, without credentials in it.
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<GitCredential>,
    /// The secret forges sign (GitHub, Gitea) or send (GitLab) push webhooks with; at least
    /// 16 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret: Option<String>,
}

impl std::fmt::Debug for CreateRepositoryRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateRepositoryRequest")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("credential", &self.credential)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| ".."),
            )
            .finish()
    }
}

/// A new webhook secret (write-only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookSecretRequest {
    pub secret: String,
}

impl std::fmt::Debug for WebhookSecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecretRequest { .. }")
    }
}

/// What a source may touch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SourceMode {
    /// Only namespaced objects, only in the source's `namespace`.
    #[default]
    Namespaced,
    /// Any object; `namespace` is the default for namespaced objects that name none.
    Cluster,
}

impl SourceMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SourceMode::Namespaced => "namespaced",
            SourceMode::Cluster => "cluster",
        }
    }
}

/// Kind patterns, `<group or apiVersion>/<Kind>`: `apps/*`, `v1/ConfigMap`,
/// `networking.k8s.io/v1/Ingress`, `*/*`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KindRules {
    /// What the source may manage; absent: the workload and configuration kinds
    /// (`warren_gitops::DEFAULT_ALLOW`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Refused even when allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// One source of an agent: a repository, a ref and paths in it, and what it may touch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Unique per agent; 1-63 characters of a-z, 0-9 and '-'.
    pub name: String,
    /// A registered repository's name.
    pub repository: String,
    /// Branch, tag or full commit id; `main` when absent.
    #[serde(rename = "ref", default = "default_ref")]
    pub git_ref: String,
    /// Globs of the files to read; absent or empty: every `.yaml`, `.yml` and `.json`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default)]
    pub mode: SourceMode,
    /// Namespaced mode: the only namespace it may touch (required). Cluster mode: the
    /// default for namespaced objects that name none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default)]
    pub kinds: KindRules,
    /// Delete the objects this source applied that left Git; off unless set.
    #[serde(default)]
    pub prune: bool,
    /// How often the repository is polled when no webhook arrives (`30s`, `5m`, `1h`);
    /// `60s` when absent.
    #[serde(default = "default_interval")]
    pub interval: String,
}

fn default_ref() -> String {
    "main".into()
}

fn default_interval() -> String {
    "60s".into()
}

/// An agent's GitOps configuration (`warren agent gitops set AGENT -f sources.yaml`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentGitops {
    #[serde(default)]
    pub sources: Vec<Source>,
}

/// The admin's cap on every source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// Kind patterns no source may manage, whatever it allows.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Whether `cluster` mode sources may be configured at all.
    #[serde(default = "yes")]
    pub allow_cluster_mode: bool,
}

fn yes() -> bool {
    true
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            deny: Vec::new(),
            allow_cluster_mode: true,
        }
    }
}

/// One thing that went wrong in a sync, naming the file or the object (or both) it concerns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SyncError {
    /// The file in the repository, relative to its root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// The object, as `apiVersion kind namespace/name` (or `kind name` when cluster-scoped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    pub message: String,
}

/// One object as the relay sends it: where it came from, and the object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncObject {
    pub file: String,
    /// 1-based position of its document in the file.
    pub document: usize,
    pub object: serde_json::Value,
}

/// Frames of a GitOps stream (agent ⇄ relay), each one length-prefixed JSON frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
// One frame at a time is built, sent and dropped; boxing the large variant buys nothing.
#[allow(clippy::large_enum_variant)]
pub enum GitopsFrame {
    /// Relay → agent: the objects of a commit, what could not be read, and the rules to
    /// check them against (the agent does not trust the relay's own check alone).
    Sync {
        commit: String,
        source: Source,
        policy: Policy,
        objects: Vec<SyncObject>,
        errors: Vec<SyncError>,
    },
    /// Relay → agent: this source cannot be synced now (a repository that cannot be read);
    /// nothing is deleted because of it.
    Failed { message: String },
    /// Relay → agent: the stream ends for good (the source was removed, or the agent's
    /// token no longer valid).
    Stopped { reason: String },
    /// Agent → relay: the outcome of a sync, forwarded to the server.
    Status(Box<SourceStatus>),
}

/// A workload's readiness as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ObjectHealth {
    pub object: String,
    pub ready: bool,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// What an agent last reported for one source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceStatus {
    pub source: String,
    /// The commit last applied (absent until one was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When the agent finished the sync this reports.
    pub synced_at: DateTime<Utc>,
    pub applied: u32,
    pub unchanged: u32,
    pub pruned: u32,
    #[serde(default)]
    pub errors: Vec<SyncError>,
    #[serde(default)]
    pub health: Vec<ObjectHealth>,
    /// When a relay first saw `commit` at the ref (set by the relay, not the agent): the
    /// lag from there to `synced_at` is Warren's own delay in applying a push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detected_at: Option<DateTime<Utc>>,
}

/// Relay → server (internal): may this agent sync this source now, and with what?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizeSourceRequest {
    pub source: String,
    /// SHA-256 (hex) of the token the agent connected with: a token reset since then
    /// ends the source's sync.
    pub token_digest: String,
}

/// The server's answer: everything the relay needs to poll, credential included (it stays
/// in the relay's memory and never reaches the agent).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceGrant {
    pub source: Source,
    pub policy: Policy,
    pub repository: String,
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential: Option<GitCredential>,
}

impl std::fmt::Debug for SourceGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceGrant")
            .field("source", &self.source.name)
            .field("repository", &self.repository)
            .field("url", &self.url)
            .field("credential", &self.credential)
            .finish()
    }
}

/// Server → relays (internal): poll the sources reading this repository now (a push
/// webhook arrived).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollRequest {
    pub url: String,
}

/// Internal routes of the server the relays call.
pub const AUTHORIZE_SOURCE_PATH: &str = "/internal/gitops/authorize";
pub const SOURCE_STATUS_PATH: &str = "/internal/gitops/status";
/// Internal route of the relays the server calls when a push arrives.
pub const POLL_PATH: &str = "/internal/gitops/poll";
