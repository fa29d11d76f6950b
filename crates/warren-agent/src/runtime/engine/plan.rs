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
                claims.insert(p.metadata.name.unwrap_or_default());
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
    pub replicas: i32,
    pub network: String,
    /// Engine volume name → PVC name.
    pub volumes: BTreeMap<String, String>,
    /// The volumes of `volumes` the pod uses but does not own (`Objects::claim_volumes`):
    /// created with their own labels, never removed with the pod.
    pub shared_volumes: BTreeSet<String>,
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
}

/// Builds the pod plan. `secrets`/`config_maps` are the objects' data merged with what was
/// stored from earlier applies (partial reconciles may omit Secrets, reconcile.md).
pub fn plan(
    objects: &Objects,
    secrets: &DataSets,
    config_maps: &DataSets,
    cx: &PlanContext<'_>,
) -> Result<PodPlan, PlanError> {
    let ws = cx.workspace.name.as_str();
    let spec_err = |m: String| PlanError::Spec(m);
    let dspec = objects
        .deployment
        .spec
        .as_ref()
        .ok_or_else(|| spec_err("the Deployment has no spec".into()))?;
    let replicas = dspec.replicas.unwrap_or(1);
    if !(0..=1).contains(&replicas) {
        return Err(spec_err(format!(
            "spec.replicas is {replicas}; a workspace runs 0 or 1 replicas"
        )));
    }
    let pod = dspec
        .template
        .spec
        .as_ref()
        .ok_or_else(|| spec_err("the Deployment has no spec.template.spec".into()))?;
    if pod.containers.is_empty() {
        return Err(spec_err("spec.template.spec.containers is empty".into()));
    }
    let mut init_containers = pod.init_containers.clone().unwrap_or_default();
    // The renderer's tools init container filling an emptyDir: one shared volume instead.
    let tools_volume_is_empty_dir = pod
        .volumes
        .iter()
        .flatten()
        .any(|v| v.name == warren_types::config::TOOLS_VOLUME && v.empty_dir.is_some());
    let tools_init = init_containers
        .iter()
        .position(|c| c.name == warren_types::config::TOOLS_VOLUME)
        .filter(|_| tools_volume_is_empty_dir)
        .map(|i| init_containers.remove(i));
    if cx.kubernetes.is_some() {
        // A Deployment's pods always restart (`restarts`), as the API server insists.
        if let Some(policy) = pod.restart_policy.as_deref().filter(|p| *p != "Always") {
            return Err(spec_err(format!(
                "spec.template.spec.restartPolicy {policy:?} is not allowed for a Deployment \
                 (only \"Always\")"
            )));
        }
        // Probes are honoured for a pod from Git (`probes`): one the engine cannot run is
        // refused by name, never ignored.
        if let Some(why) = pod.containers.iter().find_map(super::probes::unsupported) {
            return Err(spec_err(why));
        }
    }
    let mut seen = BTreeSet::new();
    for c in init_containers.iter().chain(&pod.containers) {
        if c.name.is_empty()
            || !c
                .name
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || ch == '-')
        {
            return Err(spec_err(format!(
                "container name {:?} is not a DNS label",
                c.name
            )));
        }
        if !seen.insert(c.name.clone()) {
            return Err(spec_err(format!(
                "container name {:?} is used twice",
                c.name
            )));
        }
    }

    // Volumes: PVC → named volume, Secret/ConfigMap → files, emptyDir → named volume too.
    let mut volumes = BTreeMap::new();
    let mut shared_volumes = BTreeSet::new();
    let mut files = Vec::new();
    let mut sources: HashMap<String, Source> = HashMap::new();
    for v in pod.volumes.clone().unwrap_or_default() {
        let shared_tools = tools_init
            .as_ref()
            .filter(|_| v.name == warren_types::config::TOOLS_VOLUME);
        let source = if let Some(init) = shared_tools {
            let image = init.image.clone().unwrap_or_default();
            // Not in `volumes`: no workspace owns it, so none creates or removes it.
            Source::Volume(tools_volume_name(&image))
        } else if let Some(pvc) = &v.persistent_volume_claim {
            let engine = match objects.claim_volumes.get(&pvc.claim_name) {
                Some(shared) => {
                    shared_volumes.insert(shared.clone());
                    shared.clone()
                }
                None => volume_name(ws, &pvc.claim_name),
            };
            volumes.insert(engine.clone(), pvc.claim_name.clone());
            Source::Volume(engine)
        } else if v.empty_dir.is_some() {
            let engine = volume_name(ws, &format!("{ws}-{}", v.name));
            volumes.insert(engine.clone(), v.name.clone());
            Source::Volume(engine)
        } else if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = match secrets.get(&name) {
                Some(d) => d,
                None if s.optional == Some(true) => &BTreeMap::new(),
                None => {
                    return Err(spec_err(format!(
                        "volume {:?} uses Secret {name:?}, which is not among the objects",
                        v.name
                    )))
                }
            };
            let items = s.items.clone().unwrap_or_default();
            let modes = cx.kubernetes.map(|k| (s.default_mode, k));
            files.extend(project(&v.name, data, &items, &name, modes)?);
            Source::Dir(PathBuf::from(&v.name))
        } else if let Some(c) = &v.config_map {
            let name = c.name.clone();
            let data = match config_maps.get(&name) {
                Some(d) => d,
                None if c.optional == Some(true) => &BTreeMap::new(),
                None => {
                    return Err(spec_err(format!(
                        "volume {:?} uses ConfigMap {name:?}, which is not among the objects",
                        v.name
                    )))
                }
            };
            let items = c.items.clone().unwrap_or_default();
            let modes = cx.kubernetes.map(|k| (c.default_mode, k));
            files.extend(project(&v.name, data, &items, &name, modes)?);
            Source::Dir(PathBuf::from(&v.name))
        } else {
            return Err(spec_err(format!(
                "volume {:?}: only persistentVolumeClaim, emptyDir, secret and configMap volumes \
                 are supported by the container-engine runtime",
                v.name
            )));
        };
        if !is_safe_relative(&v.name) {
            return Err(spec_err(format!(
                "volume name {:?} is not a DNS label",
                v.name
            )));
        }
        sources.insert(v.name.clone(), source);
    }

    // A workspace's files belong to its user; a pod from Git's to root and its fsGroup.
    let (uid, gid) = match cx.kubernetes {
        None => {
            let user = pod_user(pod.security_context.as_ref(), None, Some(DEFAULT_UID))?;
            (user.uid.unwrap_or_default(), user.gid.unwrap_or_default())
        }
        Some(_) => {
            let fs_group = pod.security_context.as_ref().and_then(|s| s.fs_group);
            let gid = u32::try_from(fs_group.unwrap_or(0))
                .map_err(|_| spec_err(format!("fsGroup {} is invalid", fs_group.unwrap_or(0))))?;
            (0, gid)
        }
    };

    // Service ports → target ports published by the namespace owner.
    let mut ports = BTreeSet::new();
    if let Some(svc) = objects.service.as_ref().and_then(|s| s.spec.as_ref()) {
        for p in svc.ports.clone().unwrap_or_default() {
            let target = match &p.target_port {
                None => p.port,
                Some(IntOrString::Int(i)) => *i,
                Some(IntOrString::String(named)) => pod
                    .containers
                    .iter()
                    .flat_map(|c| c.ports.clone().unwrap_or_default())
                    .find(|cp| cp.name.as_deref() == Some(named.as_str()))
                    .map(|cp| cp.container_port)
                    .ok_or_else(|| {
                        spec_err(format!(
                            "Service targetPort {named:?} names no container port"
                        ))
                    })?,
            };
            if !(1..=65535).contains(&target) {
                return Err(spec_err(format!(
                    "Service targetPort {target} is out of range"
                )));
            }
            let proto = p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase();
            if proto != "tcp" && proto != "udp" {
                return Err(spec_err(format!(
                    "Service port protocol {proto:?} is not supported"
                )));
            }
            ports.insert(format!("{target}/{proto}"));
        }
    }
    let ports: Vec<String> = ports.into_iter().collect();

    let network = network_name(ws);
    let mut containers = Vec::new();
    let owner = container_name(ws, Role::App, &pod.containers[0].name);
    let env_cx = EnvContext {
        workspace: cx.workspace,
        secrets,
        config_maps,
    };
    for (role, list) in [(Role::Init, &init_containers), (Role::App, &pod.containers)] {
        for (order, c) in list.iter().enumerate() {
            let (mut body, image_user) = container_body(
                c,
                pod.security_context.as_ref(),
                &sources,
                cx.files_dir,
                &env_cx,
                cx.kubernetes,
            )?;
            let host_config = body.host_config.get_or_insert_with(Default::default);
            if cx.kubernetes.is_some_and(|k| k.user_namespace) {
                // The app containers share the owner's, as they share its network; init
                // containers run before it exists, each in one of its own.
                host_config.userns_mode = Some(if role == Role::App && order > 0 {
                    format!("container:{owner}")
                } else {
                    AUTO_USER_NAMESPACE.to_owned()
                });
            }
            if role == Role::App && order == 0 {
                // The first app container owns the pod's network namespace: it joins the
                // workspace network under the workspace's name and publishes the ports.
                host_config.network_mode = Some(network.clone());
                host_config.port_bindings = Some(
                    ports
                        .iter()
                        .map(|p| {
                            let binding = PortBinding {
                                host_ip: Some("127.0.0.1".into()),
                                host_port: Some(String::new()),
                            };
                            (p.clone(), Some(vec![binding]))
                        })
                        .collect(),
                );
                body.exposed_ports = Some(ports.clone());
                body.hostname = Some(ws.to_owned());
                body.networking_config = Some(NetworkingConfig {
                    endpoints_config: Some(HashMap::from([(
                        network.clone(),
                        EndpointSettings {
                            aliases: Some(vec![ws.to_owned()]),
                            ..Default::default()
                        },
                    )])),
                });
            } else if role == Role::App {
                host_config.network_mode = Some(format!("container:{owner}"));
            } else {
                // Init containers finish before the app containers start, so nothing is
                // shared on localhost: they only need the workspace network.
                host_config.network_mode = Some(network.clone());
            }
            containers.push(ContainerPlan {
                role,
                name: c.name.clone(),
                engine_name: container_name(ws, role, &c.name),
                order,
                pull_policy: c
                    .image_pull_policy
                    .clone()
                    .unwrap_or_else(|| "IfNotPresent".into()),
                body,
                image_user,
            });
        }
    }

    let tools = match &tools_init {
        Some(init) => {
            let (mut body, _) = container_body(
                init,
                pod.security_context.as_ref(),
                &sources,
                cx.files_dir,
                &env_cx,
                None,
            )?;
            // Filled once for every workspace: root owns the shared volume (on Docker a new
            // volume is root's), with no capability and no network, and leaves every file
            // readable by all.
            body.user = Some("0:0".into());
            let host_config = body.host_config.get_or_insert_with(Default::default);
            host_config.network_mode = Some("none".into());
            let image = init.image.clone().unwrap_or_default();
            let mut labels: HashMap<String, String> = HashMap::new();
            labels.insert(TOOLS_IMAGE_LABEL.into(), image.clone());
            body.labels = Some(labels);
            Some(ToolsPlan {
                volume: tools_volume_name(&image),
                image,
                body,
            })
        }
        None => None,
    };

    // The hash covers what the containers are created from, not the contents of mounted files
    // (those are rewritten in place, as Kubernetes updates Secret volumes in place).
    let mut hasher = Sha256::new();
    for c in &containers {
        let v = serde_json::to_value(&c.body).map_err(|e| spec_err(e.to_string()))?;
        hasher.update(c.role.label());
        hasher.update([0]);
        hasher.update(&c.engine_name);
        hasher.update([0]);
        hasher.update(canonical_json(&v));
        hasher.update([0]);
    }
    for (engine, claim) in &volumes {
        hasher.update(format!("volume {engine} {claim}\0"));
    }
    let hash = hex::encode(&hasher.finalize()[..12]);

    // Labels last: they carry the hash.
    for c in &mut containers {
        let mut labels: HashMap<String, String> = cx
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(POD_HASH_LABEL.into(), hash.clone());
        labels.insert(ROLE_LABEL.into(), c.role.label().into());
        labels.insert(CONTAINER_LABEL.into(), c.name.clone());
        labels.insert(ORDER_LABEL.into(), c.order.to_string());
        if c.role == Role::App && c.order == 0 {
            labels.insert(PORTS_LABEL.into(), ports.join(","));
        }
        c.body.labels = Some(labels);
    }

    Ok(PodPlan {
        hash,
        replicas,
        network,
        volumes,
        shared_volumes,
        files,
        ports,
        uid,
        gid,
        kubernetes: cx.kubernetes.is_some(),
        containers,
        tools,
    })
}

/// Where a pod volume comes from on the engine.
enum Source {
    Volume(String),
    Dir(PathBuf),
}

struct EnvContext<'a> {
    workspace: &'a WorkspaceKey,
    secrets: &'a DataSets,
    config_maps: &'a DataSets,
}

/// The container's create body, and what to check of its image's user when it runs as that.
fn container_body(
    c: &Container,
    pod_sc: Option<&PodSecurityContext>,
    sources: &HashMap<String, Source>,
    files_dir: &Path,
    env_cx: &EnvContext<'_>,
    kubernetes: Option<KubernetesPods>,
) -> Result<(ContainerCreateBody, Option<ImageUser>), PlanError> {
    let err = |m: String| PlanError::Spec(format!("container {:?}: {m}", c.name));
    let image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| err("no image".into()))?;
    let sc = c.security_context.as_ref();
    if sc.and_then(|s| s.privileged) == Some(true) {
        return Err(err("privileged containers are not allowed".into()));
    }
    let default_uid = kubernetes.is_none().then_some(DEFAULT_UID);
    let user = pod_user(pod_sc, sc, default_uid)?;
    let mut image_user = None;
    let user_field = match (user.uid, user.gid) {
        (Some(uid), Some(gid)) => Some(format!("{uid}:{gid}")),
        // As the engine and the kubelet do: the group is the image's for that user.
        (Some(uid), None) => Some(uid.to_string()),
        (None, group) => {
            image_user = Some(ImageUser {
                non_root: user.non_root,
                root_allowed: kubernetes.is_some_and(KubernetesPods::root_allowed),
                group,
            });
            None
        }
    };
    if kubernetes.is_some_and(|k| !k.root_allowed()) && user.uid == Some(0) {
        return Err(err(
            "runAsUser 0 is not allowed on this engine: it cannot give the container a user \
             namespace (Docker without userns-remap), so root in it would be root on the host"
                .into(),
        ));
    }
    let mut security_opt = Vec::new();
    // Without a user namespace, a set-user-id binary of the image would be root on the host.
    let no_escalation = sc.and_then(|s| s.allow_privilege_escalation) == Some(false)
        || kubernetes.is_some_and(|k| !k.root_allowed());
    if no_escalation {
        security_opt.push("no-new-privileges".to_owned());
    }
    let named = |list: Option<&Vec<String>>| -> BTreeSet<String> {
        list.into_iter()
            .flatten()
            .map(|c| c.trim_start_matches("CAP_").to_ascii_uppercase())
            .collect()
    };
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let added = named(caps.and_then(|c| c.add.as_ref()));
    let cap_add: Vec<String> = match kubernetes {
        // A workspace has no capability it does not ask for.
        None => added.into_iter().collect(),
        // A pod from Git has the container runtime's defaults (Kubernetes' baseline set),
        // less what it drops, plus what it adds.
        Some(_) => {
            let dropped = named(caps.and_then(|c| c.drop.as_ref()));
            let mut set: BTreeSet<String> = if dropped.contains("ALL") {
                BTreeSet::new()
            } else {
                warren_admission::BASELINE_CAPABILITIES
                    .iter()
                    .map(|c| (*c).to_owned())
                    .filter(|c| !dropped.contains(c))
                    .collect()
            };
            set.extend(added);
            set.into_iter().collect()
        }
    };

    let (mut memory, mut nano_cpus) = (None, None);
    if let Some(limits) = c.resources.as_ref().and_then(|r| r.limits.as_ref()) {
        if let Some(m) = limits.get("memory") {
            let bytes = warren_types::quantity::parse_memory_bytes(&m.0)
                .map_err(|e| err(format!("resources.limits.memory: {e}")))?;
            memory = Some(i64::try_from(bytes).map_err(|_| err("memory limit too large".into()))?);
        }
        if let Some(cpu) = limits.get("cpu") {
            let millis = warren_types::quantity::parse_cpu_millis(&cpu.0)
                .map_err(|e| err(format!("resources.limits.cpu: {e}")))?;
            let nanos = millis
                .checked_mul(1_000_000)
                .and_then(|n| i64::try_from(n).ok())
                .ok_or_else(|| err("cpu limit too large".into()))?;
            nano_cpus = Some(nanos);
        }
    }

    let mut mounts = Vec::new();
    for m in c.volume_mounts.clone().unwrap_or_default() {
        let source = sources
            .get(&m.name)
            .ok_or_else(|| err(format!("volumeMount {:?} names no volume", m.name)))?;
        let sub = m.sub_path.clone().filter(|s| !s.is_empty());
        if let Some(s) = &sub {
            if !is_safe_relative(s) {
                return Err(err(format!(
                    "volumeMount {:?}: subPath {s:?} is not allowed",
                    m.name
                )));
            }
        }
        let read_only = m.read_only.unwrap_or(false);
        let mount = match source {
            Source::Volume(v) => Mount {
                target: Some(m.mount_path.clone()),
                source: Some(v.clone()),
                typ: Some(MountType::VOLUME),
                read_only: Some(read_only),
                volume_options: sub.map(|s| bollard::models::MountVolumeOptions {
                    subpath: Some(s),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Source::Dir(dir) => {
                let mut path = files_dir.join(dir);
                if let Some(s) = sub {
                    path = path.join(s);
                }
                Mount {
                    target: Some(m.mount_path.clone()),
                    source: Some(path.to_string_lossy().into_owned()),
                    typ: Some(MountType::BIND),
                    // Secret and ConfigMap files are always read-only, as on Kubernetes.
                    read_only: Some(true),
                    ..Default::default()
                }
            }
        };
        mounts.push(mount);
    }

    let mut env = resolve_env(c, env_cx).map_err(err)?;
    // The editor listens on the container's network address: the agent reaches declared ports
    // through published ones, which the engine forwards to that address, and the firewall
    // keeps every other workspace off it. A devfile's own value gives way.
    env.retain(|e| !e.starts_with(&format!("{EDITOR_ADDRESS_ENV}=")));
    env.push(format!("{EDITOR_ADDRESS_ENV}=0.0.0.0"));
    let readonly_rootfs = sc.and_then(|s| s.read_only_root_filesystem).filter(|r| *r);
    // A pod from Git's processes carry its fsGroup and supplemental groups, as on
    // Kubernetes (its files are the fsGroup's).
    let group_add: Vec<String> = match (kubernetes, pod_sc) {
        (Some(_), Some(p)) => p
            .fs_group
            .into_iter()
            .chain(p.supplemental_groups.iter().flatten().copied())
            .filter(|g| *g >= 0)
            .map(|g| g.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        _ => Vec::new(),
    };

    let body = ContainerCreateBody {
        image: Some(image),
        entrypoint: c.command.clone(),
        cmd: c.args.clone(),
        working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
        env: Some(env),
        user: user_field,
        tty: c.tty,
        open_stdin: c.stdin,
        host_config: Some(HostConfig {
            init: Some(true),
            memory,
            nano_cpus,
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: (!cap_add.is_empty()).then_some(cap_add),
            security_opt: (!security_opt.is_empty()).then_some(security_opt),
            privileged: Some(false),
            readonly_rootfs,
            group_add: (!group_add.is_empty()).then_some(group_add),
            mounts: Some(mounts),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok((body, image_user))
}

/// The user a container's securityContext (then its pod's) names.
struct PodUser {
    uid: Option<u32>,
    gid: Option<u32>,
    non_root: bool,
}

/// The permission bits of a projected file on Kubernetes: `defaultMode`, else 0644. In a
/// user namespace the files' owner (the host's root) is no one, so what their owner may read
/// every user of the pod may (the agent's 0700 state directory keeps them from the host).
fn file_mode(default_mode: Option<i32>, k: KubernetesPods) -> u32 {
    let mode = default_mode
        .and_then(|m| u32::try_from(m).ok())
        .map_or(0o644, |m| m & 0o777);
    if k.user_namespace && mode & 0o400 != 0 {
        mode | 0o044
    } else {
        mode
    }
}

/// The uid/gid a container runs as: the container's securityContext, then the pod's, then
/// `default_uid` (a workspace's 5001, with group 0); none for a pod from Git that names
/// none (its image's). Root is refused when `runAsNonRoot` is set.
fn pod_user(
    pod: Option<&PodSecurityContext>,
    container: Option<&SecurityContext>,
    default_uid: Option<i64>,
) -> Result<PodUser, PlanError> {
    let uid = container
        .and_then(|s| s.run_as_user)
        .or(pod.and_then(|s| s.run_as_user))
        .or(default_uid);
    let gid = container
        .and_then(|s| s.run_as_group)
        .or(pod.and_then(|s| s.run_as_group))
        .or(default_uid.map(|_| 0));
    let non_root = container
        .and_then(|s| s.run_as_non_root)
        .or(pod.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if non_root && uid == Some(0) {
        return Err(PlanError::Spec(
            "runAsNonRoot is set but runAsUser is 0".into(),
        ));
    }
    let uid = uid
        .map(|uid| {
            u32::try_from(uid).map_err(|_| PlanError::Spec(format!("runAsUser {uid} is invalid")))
        })
        .transpose()?;
    let gid = gid
        .map(|gid| {
            u32::try_from(gid).map_err(|_| PlanError::Spec(format!("runAsGroup {gid} is invalid")))
        })
        .transpose()?;
    Ok(PodUser { uid, gid, non_root })
}

fn resolve_env(c: &Container, cx: &EnvContext<'_>) -> Result<Vec<String>, String> {
    // Later entries win, as on Kubernetes (env over envFrom).
    let mut vars: Vec<(String, String)> = Vec::new();
    let mut set = |k: String, v: String| {
        vars.retain(|(name, _)| *name != k);
        vars.push((k, v));
    };
    let text = |bytes: &[u8], what: &str| {
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{what} is not UTF-8 text"))
    };
    for from in c.env_from.clone().unwrap_or_default() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (set_name, optional, data) = if let Some(s) = &from.secret_ref {
            (
                s.name.clone(),
                s.optional == Some(true),
                cx.secrets.get(&s.name),
            )
        } else if let Some(m) = &from.config_map_ref {
            (
                m.name.clone(),
                m.optional == Some(true),
                cx.config_maps.get(&m.name),
            )
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    set(format!("{prefix}{k}"), text(v, &format!("{set_name}.{k}"))?);
                }
            }
            None if optional => {}
            None => {
                return Err(format!(
                    "envFrom names {set_name:?}, which is not among the objects"
                ))
            }
        }
    }
    for e in c.env.clone().unwrap_or_default() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, None) => String::new(),
            (None, Some(from)) => {
                let lookup = |sets: &DataSets, name: &str, key: &str, optional: bool| match sets
                    .get(name)
                    .and_then(|d| d.get(key))
                {
                    Some(v) => text(v, &format!("{name}.{key}")).map(Some),
                    None if optional => Ok(None),
                    None => Err(format!(
                        "env {:?}: {name}.{key} is not among the objects",
                        e.name
                    )),
                };
                let found = if let Some(s) = &from.secret_key_ref {
                    lookup(cx.secrets, &s.name, &s.key, s.optional == Some(true))?
                } else if let Some(m) = &from.config_map_key_ref {
                    lookup(cx.config_maps, &m.name, &m.key, m.optional == Some(true))?
                } else if let Some(f) = &from.field_ref {
                    Some(match f.field_path.as_str() {
                        "metadata.name" => cx.workspace.name.clone(),
                        "metadata.namespace" => cx.workspace.namespace.clone(),
                        other => {
                            return Err(format!(
                                "env {:?}: fieldRef {other:?} is not supported by the \
                                 container-engine runtime",
                                e.name
                            ))
                        }
                    })
                } else {
                    return Err(format!(
                        "env {:?}: this valueFrom is not supported by the container-engine runtime",
                        e.name
                    ));
                };
                match found {
                    Some(v) => v,
                    None => continue,
                }
            }
        };
        set(e.name.clone(), value);
    }
    for (k, _) in &vars {
        if k.is_empty() || k.contains('=') {
            return Err(format!("environment variable name {k:?} is invalid"));
        }
    }
    Ok(vars.into_iter().map(|(k, v)| format!("{k}={v}")).collect())
}

/// The files of one Secret/ConfigMap volume: every key, or the listed items.
fn project(
    volume: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: &[k8s_openapi::api::core::v1::KeyToPath],
    object: &str,
    modes: Option<(Option<i32>, KubernetesPods)>,
) -> Result<Vec<PlannedFile>, PlanError> {
    let mut out = Vec::new();
    let mode = modes.map(|(default, k)| file_mode(default, k));
    let pairs: Vec<(String, String, Option<u32>)> = if items.is_empty() {
        data.keys().map(|k| (k.clone(), k.clone(), mode)).collect()
    } else {
        items
            .iter()
            .map(|i| {
                // An item's own mode, where the pod's files have modes at all.
                let own = modes.map(|(default, k)| file_mode(i.mode.or(default), k));
                (i.key.clone(), i.path.clone(), own)
            })
            .collect()
    };
    for (key, path, mode) in pairs {
        if !is_safe_relative(&path) {
            return Err(PlanError::Spec(format!(
                "volume {volume:?}: file path {path:?} must be relative and stay inside the volume"
            )));
        }
        let contents = data.get(&key).cloned().ok_or_else(|| {
            PlanError::Spec(format!("volume {volume:?}: {object} has no key {key:?}"))
        })?;
        out.push(PlannedFile {
            path: Path::new(volume).join(path),
            contents,
            mode,
        });
    }
    Ok(out)
}

/// A relative path without `..`, absolute parts or empty components.
fn is_safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && p.split('/')
            .all(|part| !part.is_empty() && part != "." && part != "..")
}

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
