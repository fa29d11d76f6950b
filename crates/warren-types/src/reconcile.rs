//! The agent ⇄ server reconcile protocol (reconcile.md); field names are fixed by the spec.

use crate::state::{ActualState, DesiredState};
use serde::{Deserialize, Serialize};

/// Path of the server's reconcile endpoint, called by the relay on an agent's behalf.
pub const RECONCILE_PATH: &str = "/internal/agents/reconcile";

/// Header the relay uses to name the agent it authenticated (the JWT's `sub` must match).
pub const AGENT_ID_HEADER: &str = "x-warren-agent-id";

/// JWT issuer used by relays towards the server.
pub const RELAY_JWT_ISSUER: &str = "warren-relay";
/// JWT audience of the server's internal endpoints.
pub const SERVER_JWT_AUDIENCE: &str = "warren-server";
/// Longest validity the server accepts for a relay JWT, in seconds.
pub const RELAY_JWT_MAX_VALIDITY_SECS: i64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpdateType {
    Full,
    Partial,
}

/// Body of `POST /internal/agents/reconcile`. Unknown fields are rejected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileRequest {
    pub update_type: UpdateType,
    pub workspace_agent_infos: Vec<WorkspaceAgentInfo>,
    /// What one workspace of this agent can get at most (a Warren extension: the host's
    /// CPUs and memory on a container engine), so the server refuses a size the agent
    /// cannot give. Sent with full reconciles when the runtime knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<HostCapacity>,
    /// Why the agent cannot see its runtime right now (a Warren extension). Such a request
    /// carries no workspace infos; the server records the fault, shows it with the agent's
    /// workspaces (their states may be out of date) and answers with nothing to do. The
    /// next request without it clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_fault: Option<String>,
    /// Why the runtime does not isolate workspaces as their NetworkPolicies ask (a Warren
    /// extension: a container engine where the agent cannot set firewall rules). Read on
    /// full reconciles only, where its absence clears an earlier one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_warning: Option<String>,
    /// Set by `warren connect` (a Warren extension, spec/mounts.md): this call is the
    /// heartbeat of the connector backing `mount`, and carries no workspace infos. The
    /// server refuses it from a token that backs another mount, or from an agent's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<MountReport>,
    /// What the agent found probing the URLs of the `proxy` mounts it reaches (a Warren
    /// extension; [`ReconcileResponse::mounts`] lists them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountReport>,
    /// What the agent measured its workspaces using since it last reported (a Warren
    /// extension, issue 44): sent about once a minute, and again when the call that carried
    /// it failed. The server adds it to the workspaces' usage.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub used: Vec<WorkspaceUsed>,
}

/// What one workspace's containers used over an interval the agent measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceUsed {
    pub name: String,
    pub namespace: String,
    /// CPU time, in milliseconds (that is, millicore-seconds).
    pub cpu_ms: u64,
    /// Working-set memory times the seconds it was held, in MiB-seconds.
    pub memory_mib_s: u64,
}

/// A `proxy` mount an agent reaches: it probes `url` and dials it for the mount's tunnels,
/// and nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyMountSpec {
    pub name: String,
    /// `http` or `https`, with a host and maybe a port and path.
    pub url: String,
}

/// The condition a connector reports about itself, and the server sets `Unknown` when the
/// connector falls silent.
pub const CONNECTOR_CONDITION: &str = "WorkspaceConnectorConnected";

/// The condition an agent reports about the URL of a `proxy` mount it reaches, and the
/// server sets `Unknown` when the agent falls silent.
pub const URL_CONDITION: &str = "WorkspaceUrlReachable";

/// What the machine behind a mount reports about it (spec/mounts.md): every condition whose
/// type starts with `Workspace` is copied onto the mount; any of them `False` makes it
/// `Unavailable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MountReport {
    /// The mount it backs.
    pub mount: String,
    /// The machine's ports served under the mount's name.
    #[serde(default)]
    pub ports: Vec<u16>,
    #[serde(default)]
    pub conditions: Vec<crate::api::Condition>,
}

/// The most one workspace can use on an agent's runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCapacity {
    /// CPUs, in millicores.
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// What the agent saw of one workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceAgentInfo {
    pub name: String,
    pub namespace: String,
    /// A whole Deployment object (metadata, spec, status), real or synthesised.
    #[serde(default)]
    pub latest_k8s_deployment_info: Option<serde_json::Value>,
    #[serde(default)]
    pub termination_progress: Option<TerminationProgress>,
    #[serde(default)]
    pub error_details: Option<ErrorDetails>,
    #[serde(default)]
    pub pod_failure: Option<PodFailure>,
    /// Why the workspace's pod does not run yet although nothing failed (it cannot be
    /// scheduled on any node): the workspace stays `Starting` and shows this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_waiting: Option<PodWaiting>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TerminationProgress {
    Terminating,
    Terminated,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorType {
    Applier,
    Runtime,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetails {
    pub error_type: ErrorType,
    pub error_message: String,
}

/// A pod-level failure the Deployment status alone would hide (crash loop, missing image).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodFailure {
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// Why a pod waits without having failed: the scheduler found no node for it (reason
/// `Unschedulable`, the scheduler's message naming what no node has).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PodWaiting {
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// Response of the reconcile endpoint (status 201).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconcileResponse {
    /// Named for wire compatibility with the protocol Warren grew from.
    pub workspace_rails_infos: Vec<WorkspaceRailsInfo>,
    pub settings: ReconcileSettings,
    /// Warren's extension: the names of the agent's GitOps sources; the agent keeps one
    /// stream per name open to its relay (`crate::gitops`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gitops_sources: Vec<String>,
    /// Warren's extension: the `proxy` mounts this agent reaches (spec/mounts.md); the
    /// agent probes each and reports in [`ReconcileRequest::mounts`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<ProxyMountSpec>,
}

impl ReconcileResponse {
    /// An answer that asks nothing of the agent: only the settings it runs with.
    pub fn nothing(settings: ReconcileSettings) -> ReconcileResponse {
        ReconcileResponse {
            workspace_rails_infos: vec![],
            settings,
            gitops_sources: vec![],
            mounts: vec![],
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkspaceRailsInfo {
    pub name: String,
    pub namespace: String,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub deployment_resource_version: Option<String>,
    /// Multi-document YAML of Kubernetes objects, or null when nothing must be applied.
    pub config_to_apply: Option<String>,
    #[serde(default)]
    pub image_pull_secrets: Vec<ImagePullSecretRef>,
}

/// Annotation of a workspace's Deployment in `config_to_apply`: which rendering of the
/// workspace's objects it is (random, new at every render). The agent applies the Deployment
/// last and reports it back with its annotations, so a reported generation says every object of
/// that rendering was applied; a full reconcile then leaves out the objects of a workspace that
/// reports its current generation and is settled in its desired state (reconcile.md, as Warren
/// deviates from it: ten thousand unchanged configurations are not sent, opened and re-applied
/// every hour).
pub const CONFIG_GENERATION_ANNOTATION: &str = "warren.dev/config-generation";

/// Annotation of a workspace's ServiceAccount: `namespace/name,…` of its image pull secrets,
/// so a Kubernetes agent can copy each into the workspace's namespace (an engine agent reads
/// them by name from its own directory).
pub const PULL_SECRET_SOURCES_ANNOTATION: &str = "warren.dev/image-pull-secret-sources";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImagePullSecretRef {
    pub name: String,
    pub namespace: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconcileSettings {
    pub full_reconciliation_interval_seconds: u64,
    pub partial_reconciliation_interval_seconds: u64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        ReconcileSettings {
            full_reconciliation_interval_seconds: 3600,
            partial_reconciliation_interval_seconds: 10,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rejects_unknown_fields() {
        let body = r#"{"update_type":"full","workspace_agent_infos":[],"extra":1}"#;
        let err = serde_json::from_str::<ReconcileRequest>(body).unwrap_err();
        assert!(err.to_string().contains("unknown field `extra`"), "{err}");
        let body = r#"{"update_type":"partial","workspace_agent_infos":[
            {"name":"a","namespace":"n","latest_k8s_deployment_info":null,
             "termination_progress":"Terminating","error_details":null}]}"#;
        let req: ReconcileRequest = serde_json::from_str(body).unwrap();
        assert_eq!(
            req.workspace_agent_infos[0].termination_progress,
            Some(TerminationProgress::Terminating)
        );
    }
}
