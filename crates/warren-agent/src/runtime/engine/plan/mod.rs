//! Turns one workspace's Kubernetes objects into what an engine runs: containers, volumes, files.
//!
//! Pure (no engine calls), so the mapping of desired-config.md's table is unit-tested on its
//! own. The first app container owns the pod's network namespace and publishes the Service
//! ports; the other app containers join it with `container:<name>`, so they share localhost
//! as in a pod. Init containers run before any app container, on the workspace network.
//! (No separate "pause" container: it would cost a container create and start per workspace
//! and needs an image that may not exist locally.)

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, Mount, MountType, NetworkingConfig,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, PersistentVolumeClaim, PodSecurityContext, Secret, SecurityContext,
    Service,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use crate::runtime::WorkspaceKey;
use warren_types::config::EDITOR_ADDRESS_ENV;

/// Label: workspace name (the key the runtime groups containers, volumes and networks by).
pub const WORKSPACE_NAME_LABEL: &str = "warren.dev/workspace-name";
/// Label: workspace namespace.
pub const WORKSPACE_NAMESPACE_LABEL: &str = "warren.dev/workspace-namespace";
/// Label: hash of the pod spec a container was created from (Recreate when it differs).
pub const POD_HASH_LABEL: &str = "warren.dev/pod-hash";
/// Label: hash of the environment's values from Secrets and ConfigMaps a container was
/// created with (`object_env_names`): a stopped pod whose values changed is made again
/// when it starts, as a new pod would be on Kubernetes; a running one is left as it is.
pub const OBJECTS_ENV_LABEL: &str = "warren.dev/objects-env-hash";
/// Label: `init` or `container`.
pub const ROLE_LABEL: &str = "warren.dev/role";
/// Label: the container's name in the pod spec.
pub const CONTAINER_LABEL: &str = "warren.dev/container";
/// Label: position of the container within its role (init containers run in this order).
pub const ORDER_LABEL: &str = "warren.dev/order";
/// Label: the published target ports, comma-separated (for `dial` and the synthesised status).
pub const PORTS_LABEL: &str = "warren.dev/ports";

/// Label of the shared tools volume and of the container filling it: the tools image.
pub const TOOLS_IMAGE_LABEL: &str = "warren.dev/tools-image";

/// The user a pod runs as when its spec names none: non-root, group 0 (desired-config.md).
pub const DEFAULT_UID: i64 = 5001;

/// Why objects cannot be realised; reported as an applier error.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("object {index} ({kind}) is invalid: {message}")]
    Invalid {
        index: usize,
        kind: String,
        message: String,
    },
    #[error("kind {kind} (object {index}) is not supported by the container-engine runtime")]
    UnsupportedKind { index: usize, kind: String },
    #[error("the objects contain no Deployment")]
    NoDeployment,
    #[error("the objects contain more than one Deployment")]
    TwoDeployments,
    #[error("{0}")]
    Spec(String),
}

/// Secret or ConfigMap data by object name, key → bytes.
pub type DataSets = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// The objects of one workspace, parsed with the Kubernetes types.
#[derive(Debug, Clone)]
pub struct Objects {
    pub deployment: Deployment,
    /// The Deployment as given (reported back, lightly changed, by the synthesised status).
    pub deployment_json: Value,
    pub service: Option<Service>,
    pub secrets: DataSets,
    pub config_maps: DataSets,
    pub claims: BTreeSet<String>,
    /// The workspace's NetworkPolicy, when the set holds one.
    pub network_policy: Option<k8s_openapi::api::networking::v1::NetworkPolicy>,
    /// The set holds Deployments only (a partial reconcile's).
    pub only_deployments: bool,
    /// Names of the image pull secrets of the ServiceAccount and the pod spec.
    pub pull_secrets: Vec<String>,
    /// Claims backed by a volume the pod does not own (PVC name → engine volume): a GitOps
    /// PersistentVolumeClaim outlives the Deployments that mount it, as on Kubernetes.
    pub claim_volumes: BTreeMap<String, String>,
    /// Claims that start as copies of a prebuild's (PVC name → the prebuild's workspace and
    /// id, from the claim's [`warren_types::prebuild::SEED_FROM_ANNOTATION`]).
    pub seeds: BTreeMap<String, (String, String)>,
}

/// Parses the objects, keeping the kinds the engine realises (the NetworkPolicy as firewall
/// rules, `firewall`) and skipping those without an engine equivalent (ServiceAccount,
/// ResourceQuota, Namespace).
pub fn parse_objects(objects: &[Value]) -> Result<Objects, PlanError> {
    let mut deployment = None;
    let mut service = None;
    let mut secrets = DataSets::new();
    let mut config_maps = DataSets::new();
    let mut claims = BTreeSet::new();
    let mut seeds = BTreeMap::new();
    let mut network_policy = None;
    let mut only_deployments = true;
    let mut pull_secrets: Vec<String> = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        let kind = object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let invalid = |e: serde_json::Error| PlanError::Invalid {
            index,
            kind: kind.clone(),
            message: e.to_string(),
        };
        only_deployments &= kind == "Deployment";
        match kind.as_str() {
            "Deployment" => {
                if deployment.is_some() {
                    return Err(PlanError::TwoDeployments);
                }
                let d: Deployment = serde_json::from_value(object.clone()).map_err(invalid)?;
                deployment = Some((d, object.clone()));
            }
            "Service" => {
                service = Some(serde_json::from_value::<Service>(object.clone()).map_err(invalid)?)
            }
            "Secret" => {
                let s: Secret = serde_json::from_value(object.clone()).map_err(invalid)?;
                let mut data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                for (k, v) in s.string_data.unwrap_or_default() {
                    data.insert(k, v.into_bytes());
                }
                secrets.insert(s.metadata.name.unwrap_or_default(), data);
            }
            "ConfigMap" => {
                let c: ConfigMap = serde_json::from_value(object.clone()).map_err(invalid)?;
                let mut data: BTreeMap<String, Vec<u8>> = c
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, v) in c.binary_data.unwrap_or_default() {
                    data.insert(k, v.0);
                }
                config_maps.insert(c.metadata.name.unwrap_or_default(), data);
            }
            "PersistentVolumeClaim" => {
                let p: PersistentVolumeClaim =
                    serde_json::from_value(object.clone()).map_err(invalid)?;
                let name = p.metadata.name.unwrap_or_default();
                let annotations = p.metadata.annotations.unwrap_or_default();
                if let (Some(from), Some(id)) = (
                    annotations.get(warren_types::prebuild::SEED_FROM_ANNOTATION),
                    annotations.get(warren_types::prebuild::SEED_FROM_ID_ANNOTATION),
                ) {
                    seeds.insert(name.clone(), (from.clone(), id.clone()));
                }
                claims.insert(name);
            }
            "NetworkPolicy" => {
                network_policy = Some(serde_json::from_value(object.clone()).map_err(invalid)?);
            }
            "ServiceAccount" => {
                let sa: k8s_openapi::api::core::v1::ServiceAccount =
                    serde_json::from_value(object.clone()).map_err(invalid)?;
                pull_secrets.extend(
                    sa.image_pull_secrets
                        .unwrap_or_default()
                        .into_iter()
                        .map(|r| r.name),
                );
            }
            "ResourceQuota" | "Namespace" | "LimitRange" => {}
            _ => return Err(PlanError::UnsupportedKind { index, kind }),
        }
    }
    let (deployment, deployment_json) = deployment.ok_or(PlanError::NoDeployment)?;
    for r in deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.image_pull_secrets.clone())
        .unwrap_or_default()
    {
        if !pull_secrets.contains(&r.name) {
            pull_secrets.push(r.name);
        }
    }
    Ok(Objects {
        deployment,
        deployment_json,
        service,
        secrets,
        config_maps,
        claims,
        network_policy,
        only_deployments,
        pull_secrets,
        claim_volumes: BTreeMap::new(),
        seeds,
    })
}

/// Role of a container in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Init,
    App,
}

impl Role {
    pub fn label(self) -> &'static str {
        match self {
            Role::Init => "init",
            Role::App => "container",
        }
    }

    pub fn from_label(s: &str) -> Option<Role> {
        match s {
            "init" => Some(Role::Init),
            "container" => Some(Role::App),
            _ => None,
        }
    }
}

/// One container to create.
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub role: Role,
    /// The name in the pod spec.
    pub name: String,
    /// The engine's container name.
    pub engine_name: String,
    pub order: usize,
    /// `imagePullPolicy`: `Never` forbids pulling a missing image; `Always` and
    /// `IfNotPresent` pull only when the image is missing (an engine keeps no pull record).
    pub pull_policy: String,
    pub body: ContainerCreateBody,
    /// Set where the container runs as its image's user (a pod from Git naming none): what
    /// to check of that user at create.
    pub image_user: Option<ImageUser>,
    /// Its `postStart` exec hook (`lifecycle.postStart.exec.command`).
    pub post_start: Option<Vec<String>>,
}

/// A file to write under the workspace's state directory before the containers start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Relative to the workspace's files directory.
    pub path: PathBuf,
    pub contents: Vec<u8>,
    /// Its permission bits where the pod runs as on Kubernetes (`defaultMode`, an item's
    /// `mode`; 0644 when neither says); `None` for a workspace's private 0600 files.
    pub mode: Option<u32>,
}

/// How a pod from Git runs, as Kubernetes would run it (`PlanContext::kubernetes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubernetesPods {
    /// Every container of the pod in a user namespace of its own (Podman's `auto`), the app
    /// containers sharing the first one's: root inside is no one outside.
    pub user_namespace: bool,
    /// The engine runs every container in a remapped user namespace (Docker's
    /// `userns-remap`): root inside is no one outside there too.
    pub remapped_users: bool,
}

impl KubernetesPods {
    /// Whether a container may run as root: only where root inside is no one outside.
    pub fn root_allowed(self) -> bool {
        self.user_namespace || self.remapped_users
    }
}

/// What the engine must check about the image's user once the image is there
/// (`ContainerPlan::image_user`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageUser {
    /// `runAsNonRoot`: an image running as root (or as a user named, not numbered, which
    /// cannot be verified) is refused, as the kubelet refuses it.
    pub non_root: bool,
    /// Root inside is no one outside (`KubernetesPods::root_allowed`); otherwise an image
    /// running as root, or as a user named rather than numbered (which may be root), is
    /// refused.
    pub root_allowed: bool,
    /// `runAsGroup` set without `runAsUser`: added to the image's user at create.
    pub group: Option<u32>,
}

/// The mode of a new user namespace: big enough for every id an image may use (as a
/// Kubernetes pod's user namespace), allocated by Podman from the `containers` ranges of
/// `/etc/subuid` and `/etc/subgid`.
pub const AUTO_USER_NAMESPACE: &str = "auto:size=65536";

/// Everything of the pod an engine realises.
#[derive(Debug, Clone)]
pub struct PodPlan {
    pub hash: String,
    /// The hash of the environment's values from objects (`OBJECTS_ENV_LABEL`).
    pub env_hash: String,
    pub replicas: i32,
    pub network: String,
    /// Engine volume name → PVC name.
    pub volumes: BTreeMap<String, String>,
    /// The volumes of `volumes` the pod uses but does not own (`Objects::claim_volumes`):
    /// created with their own labels, never removed with the pod.
    pub shared_volumes: BTreeSet<String>,
    /// Volumes of `volumes` that start as copies of a prebuild's, when they are created.
    pub seeds: BTreeMap<String, VolumeSeed>,
    pub files: Vec<PlannedFile>,
    /// Published target ports (`<port>/<proto>`).
    pub ports: Vec<String>,
    /// uid and gid the containers run as (files are chowned to them). A pod from Git
    /// (`kubernetes`) leaves its files to root and its `fsGroup`, world-readable as on
    /// Kubernetes, whatever user its containers run as.
    pub uid: u32,
    pub gid: u32,
    /// The pod runs as on Kubernetes (`PlanContext::kubernetes`).
    pub kubernetes: bool,
    /// In start order: init containers, then app containers; the first app container owns
    /// the network namespace.
    pub containers: Vec<ContainerPlan>,
    /// The injected tools (the editor), filled into a volume shared by every workspace
    /// instead of copied by an init container at every start.
    pub tools: Option<ToolsPlan>,
}

/// The prebuild volume a new volume is copied from, and the prebuild workspace whose labels
/// that volume must carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSeed {
    pub source: String,
    pub workspace: String,
    pub workspace_id: String,
}

/// The shared tools volume of a pod, and how to fill it.
#[derive(Debug, Clone)]
pub struct ToolsPlan {
    /// The engine volume, named after the tools image, mounted read-only by the pod.
    pub volume: String,
    pub image: String,
    /// The tools init container's own body, its mount pointing at the shared volume.
    pub body: ContainerCreateBody,
}

/// The volume holding the files of tools image `image`, shared by every workspace of the
/// engine: an image's contents decide them, so one copy serves all.
pub fn tools_volume_name(image: &str) -> String {
    let digest = Sha256::digest(image.as_bytes());
    format!("warren-tools-{}", &hex::encode(digest)[..16])
}

impl PodPlan {
    /// The app container owning the pod's network namespace (started first, stopped last).
    pub fn owner(&self) -> Option<&ContainerPlan> {
        self.containers.iter().find(|c| c.role == Role::App)
    }
}

/// Names derived from the workspace name (desired-config.md).
pub fn network_name(workspace: &str) -> String {
    format!("warren-{workspace}")
}

/// `warren-<workspace>-<volume>` where the PVC is `<workspace>-<volume>`.
pub fn volume_name(workspace: &str, claim: &str) -> String {
    let volume = claim
        .strip_prefix(&format!("{workspace}-"))
        .unwrap_or(claim);
    format!("warren-{workspace}-{volume}")
}

/// Workspace names are DNS labels, so `.` cannot be part of one: no two workspaces' container
/// names collide.
pub fn container_name(workspace: &str, _role: Role, name: &str) -> String {
    format!("warren-{workspace}.c.{name}")
}

/// Context the plan needs besides the objects.
#[derive(Debug, Clone)]
pub struct PlanContext<'a> {
    pub workspace: &'a WorkspaceKey,
    /// Where the workspace's Secret/ConfigMap files are written (host path).
    pub files_dir: &'a Path,
    /// Labels every container, volume and network carries.
    pub labels: &'a BTreeMap<String, String>,
    /// The pod comes from Git and runs as Kubernetes would run it: as its image's user when
    /// it names none, with the baseline capabilities unless it drops them, its files
    /// world-readable. `None`: a workspace's pod (Warren's user 5001:0, no capability it does
    /// not ask for, private files).
    pub kubernetes: Option<KubernetesPods>,
    /// The host's CDI devices, for containers that ask for devices (a machine class's).
    pub cdi: &'a CdiDevices,
}

pub mod cdi;
mod container;
mod pod;

pub use cdi::CdiDevices;

use container::{
    container_body, is_safe_relative, object_env_names, pod_user, project, EnvContext, Source,
};
pub use pod::plan;

/// JSON with object keys sorted, so the hash does not depend on map order.
pub fn canonical_json(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> =
                    m.iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    fn write(v: &Value, out: &mut String) {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(&sort(v), &mut out);
    out
}
