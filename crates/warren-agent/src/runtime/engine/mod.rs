//! The container-engine runtime: realises a workspace's Kubernetes objects on Docker or
//! Podman (desired-config.md, "Realising the objects on a container engine").
//!
//! Everything the runtime knows is rebuilt from the engine (container, volume and network
//! labels) and from a small record per workspace in the state directory (the desired replica
//! count, the Deployment last applied and Secret data a partial reconcile may omit), so an
//! agent restart loses nothing.
//!
//! Wiring: `EngineRuntime::connect(EngineConfig::new(agent_id, state_dir)).await?` (validates
//! the configuration, creates `state_dir` 0700, finds or starts an engine), hand it to the
//! reconciler as a `WorkspaceRuntime`, and call [`EngineRuntime::shutdown`] on exit (stops
//! background work and a `podman system service` it started; workspaces keep running).
//! `apply` returns once containers exist; the start sequence (init containers, then app
//! containers) runs in the background and is reported through `changes()` and `list()`.

mod apply;
mod autobuild;
mod background;
mod build;
mod config;
mod connect;
mod containers;
mod exec;
mod feature_build;
mod files;
pub mod firewall;
mod gitops;
mod helpers;
mod host_ports;
mod index;
mod networks;
mod observed;
pub mod plan;
mod policy;
mod probes;
pub mod push;
mod ready;
pub mod registry_auth;
mod restarts;
pub mod scope;
mod seed;
mod select;
mod snapshot;
mod start;
pub mod status;
mod storage;
mod tools;
mod transient;
mod workspace_runtime;

use files::{create_private_dir, write_files, write_private_file};

use async_trait::async_trait;
use bollard::models::{ContainerSummary, NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectNetworkOptions, ListContainersOptions,
    ListNetworksOptions, ListVolumesOptions, LogsOptions, RemoveContainerOptions,
    RemoveVolumeOptions, StopContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, OwnedMutexGuard};
use tokio_util::sync::CancellationToken;
use warren_types::reconcile::{PodFailure, TerminationProgress};
use warren_types::AgentId;

pub use autobuild::{objects_digest, BUILD_FAILED_REASON, BUILD_LOG};
pub use config::EngineConfig;
pub use connect::{services_on, ConnectError, PodmanService};
use plan::{
    ContainerPlan, DataSets, PodPlan, Role, CONTAINER_LABEL, OBJECTS_ENV_LABEL, ORDER_LABEL,
    POD_HASH_LABEL, PORTS_LABEL, ROLE_LABEL, WORKSPACE_NAMESPACE_LABEL, WORKSPACE_NAME_LABEL,
};
use select::Selector;
use status::{ContainerObservation, PodObservation};
use transient::retry_transient;

use super::{
    ByteStream, ObservedWorkspace, RuntimeError, WorkspaceKey, WorkspaceRuntime, AGENT_ID_LABEL,
    WORKSPACE_ID_LABEL,
};

/// Claims a pod mounts from volumes it does not own: PVC name → (engine volume, its labels).
pub(super) type SharedClaims = BTreeMap<String, (String, BTreeMap<String, String>)>;

/// How an apply treats its objects beyond what they say.
#[derive(Debug, Default, Clone)]
pub(super) struct ApplyOptions {
    /// Claims backed by volumes the pod does not own.
    pub shared: SharedClaims,
    /// The objects are the whole set (GitOps): Secret and ConfigMap data not among them is
    /// gone, not kept from an earlier apply as a partial reconcile's omissions are.
    pub complete: bool,
}

/// Label naming the Warren installation that owns an object. Agent ids are database keys, so
/// two installations (two `warren up` homes, a developer's Warren and a test run) can both
/// have agent 1 on one engine; without this label each would list, report and delete the
/// other's containers.
pub const OWNER_LABEL: &str = "warren.dev/engine-owner";

/// File in the state directory holding this installation's owner id.
const OWNER_FILE: &str = "owner-id";
/// How long one container's statistics may take (a scrape waits for all of them).
const STATS_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads the owner id from the state directory, creating a random one on first use.
fn load_or_create_owner(state_dir: &std::path::Path) -> std::io::Result<String> {
    let path = state_dir.join(OWNER_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) if !text.trim().is_empty() => return Ok(text.trim().to_owned()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let id = format!("{:016x}", rand::random::<u64>());
    let tmp = state_dir.join(format!("{OWNER_FILE}.tmp"));
    std::fs::write(&tmp, &id)?;
    std::fs::rename(&tmp, &path)?;
    Ok(id)
}

/// Why the runtime could not be created.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error("creating the state directory {path}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What an engine connection is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// Running workspaces: the [`WorkspaceRuntime`].
    Workspaces,
    /// Building images pushed for another runtime ([`EngineRuntime::connect_builder`]).
    Builds,
}

/// The container-engine [`WorkspaceRuntime`].
#[derive(Clone)]
pub struct EngineRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EngineRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineRuntime")
            .field("host", &self.inner.host)
            .field("agent_id", &self.inner.config.agent_id)
            .finish()
    }
}

struct Inner {
    docker: Docker,
    host: String,
    /// Podman answers the Docker API with a few differences the runtime tolerates.
    is_podman: bool,
    /// Whether the engine applies a CDI device requested by name (`plan::cdi`).
    engine_cdi: plan::cdi::EngineCdi,
    config: EngineConfig,
    /// This installation's owner id (see [`OWNER_LABEL`]).
    owner: String,
    changes: watch::Sender<u64>,
    /// One lock per workspace: applies and deletes of one workspace never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Builds at start: where their contexts come from, which are under way (`autobuild`).
    builds: autobuild::Builds,
    /// The running start sequence per workspace, cancelled by the next apply or delete.
    starters: Mutex<HashMap<String, (u64, CancellationToken)>>,
    next_starter: std::sync::atomic::AtomicU64,
    /// Workspaces started afresh a moment ago and watched for an early exit Podman caused,
    /// with the watch's generation (`start::watch_restart`).
    restarted: Mutex<HashMap<String, u64>>,
    /// Workspaces whose pod (this pod hash) was found usable (`ready`).
    usable: Mutex<HashMap<String, String>>,
    /// Workspaces with a readiness probe under way.
    probing: Mutex<std::collections::HashSet<String>>,
    /// What `list` last saw, and what it must look at again (`observed`).
    view: Mutex<observed::View>,
    /// The names of each workspace's containers, so a look at one workspace inspects its
    /// containers instead of listing (`index`).
    index: Mutex<index::ContainerIndex>,
    /// Held while `list` looks at the engine.
    looking: tokio::sync::Mutex<()>,
    /// The subnet of each workspace network, by workspace; `None` until listed (`firewall`).
    subnets: Mutex<Option<BTreeMap<String, ipnet::Ipv4Net>>>,
    /// A client for Podman's own API (`networks`), made on first use.
    libpod: std::sync::OnceLock<(reqwest::Client, String)>,
    /// Each workspace's egress as its record last said, so a firewall update reads no
    /// record of another workspace.
    egress: Mutex<HashMap<String, Option<firewall::Egress>>>,
    shutdown: CancellationToken,
    service: tokio::sync::Mutex<Option<PodmanService>>,
    /// Why workspaces cannot be isolated here (`firewall::unavailable`); `None` when the
    /// agent enforces their NetworkPolicies itself.
    isolation_warning: Option<String>,
    /// The rules in force (`firewall::rules`), so an update changes only what differs;
    /// `None` until the table has been written whole. The lock also serialises updates.
    firewall: tokio::sync::Mutex<Option<firewall::Applied>>,
    /// The shared tools volumes this agent filled or failed to fill, by tools image; the
    /// lock serialises fills.
    tools: tokio::sync::Mutex<HashMap<String, tools::ToolsState>>,
    /// The sibling runtime GitOps objects live in (`gitops`), made on first use.
    gitops: std::sync::OnceLock<EngineRuntime>,
    /// Set in that sibling: the runtime whose firewall table holds its networks too, so
    /// GitOps pods and workspaces are cut off from each other like workspaces are.
    parent: Option<std::sync::Weak<Inner>>,
    /// Set in that sibling: its pods run as Kubernetes would run them (`plan::KubernetesPods`)
    /// and are restarted when they exit, with the kubelet's back-off (`restarts`).
    kubernetes_pods: Option<plan::KubernetesPods>,
    /// Docker runs every container in a remapped user namespace (`userns-remap`): root in
    /// a container is no one on the host.
    remapped_users: bool,
    /// The restarts of pods that exited, by workspace (`restarts`; the sibling's only).
    crashes: Mutex<HashMap<String, restarts::Crashes>>,
    /// The probers of running pods (`probes`; the sibling's only).
    probers: Mutex<probes::Probers>,
    /// The host ports of published ports (`host_ports`), shared with the sibling.
    host_ports: Arc<host_ports::HostPorts>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The events task and start sequences end; a podman service we started is killed by
        // its `kill_on_drop`.
        self.shutdown.cancel();
    }
}

/// Per-workspace record in `<state_dir>/workspaces/<name>/state.json` (0600).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    agent_id: AgentId,
    name: String,
    namespace: String,
    replicas: i32,
    pod_hash: String,
    /// The Deployment last applied.
    deployment: serde_json::Value,
    /// Engine volume names of the pod.
    volumes: Vec<String>,
    /// The start sequence has been asked for and has not finished.
    starting: bool,
    failure: Option<PodFailure>,
    deleting: bool,
    /// Secret and ConfigMap data seen so far (a partial reconcile may omit them).
    secrets: DataSets,
    config_maps: DataSets,
    /// What the workspace's NetworkPolicy lets it reach (`None`: no policy).
    #[serde(default)]
    egress: Option<firewall::Egress>,
    /// Its image pull secrets' names (a partial reconcile omits the ServiceAccount).
    #[serde(default)]
    pull_secrets: Vec<String>,
    /// New volumes still to be filled from a prebuild's before the pod first starts (kept
    /// across a build's wait and an agent restart).
    #[serde(default)]
    pending_seeds: Vec<String>,
    /// A stopped prebuild whose volumes are being saved as snapshots (`snapshot`): reported
    /// as stopping until they are.
    #[serde(default)]
    saving: bool,
    /// Saving them failed since the pod last ran: not tried again until it runs and stops.
    #[serde(default)]
    save_failed: bool,
    /// What a stopped prebuild's volumes and snapshots take (`snapshot::prebuild_space`),
    /// reported on its Deployment; measured once per stop.
    #[serde(default)]
    stored_bytes: Option<u64>,
}

impl EngineRuntime {
    /// Connects to the configured or auto-detected engine, starting `podman system service`
    /// when only the `podman` binary exists.
    pub async fn connect(config: EngineConfig) -> Result<Self, EngineError> {
        Self::connect_as(config, Purpose::Workspaces).await
    }

    /// Connects to an engine that only builds images for another runtime (`push`): the
    /// Kubernetes runtime's builder. It runs no workspace, so it neither watches the
    /// engine's events nor touches the firewall, whose tables other runtimes on the same
    /// machine may own.
    pub async fn connect_builder(config: EngineConfig) -> Result<Self, EngineError> {
        Self::connect_as(config, Purpose::Builds).await
    }

    async fn connect_as(config: EngineConfig, purpose: Purpose) -> Result<Self, EngineError> {
        config.validate()?;
        create_private_dir(&config.state_dir).map_err(|source| EngineError::StateDir {
            path: config.state_dir.clone(),
            source,
        })?;
        let connection = if config.own_podman_service {
            let podman = connect::find_podman().ok_or_else(|| ConnectError::NoEngine {
                tried: "a `podman` binary on PATH".into(),
            })?;
            connect::spawn_podman(&podman, &config.state_dir).await?
        } else if let Some(host) = &config.host {
            connect::Connection {
                docker: connect::connect_host(host).await?,
                host: host.clone(),
                service: None,
            }
        } else {
            connect::auto(&config.state_dir).await?
        };
        let (is_podman, version) = match connection.docker.version().await {
            Ok(v) => (
                v.components
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.name.to_ascii_lowercase().contains("podman")),
                v.version.unwrap_or_default(),
            ),
            // Both engines answer `version`; assume Docker, whose handling is the safe one.
            Err(_) => (false, String::new()),
        };
        let (security_options, cdi_spec_dirs) = match connection.docker.info().await {
            Ok(info) => (
                info.security_options.unwrap_or_default(),
                info.cdi_spec_dirs.unwrap_or_default(),
            ),
            Err(_) => (Vec::new(), Vec::new()),
        };
        let engine_cdi = plan::cdi::EngineCdi::of(is_podman, &version, &cdi_spec_dirs);
        tracing::info!(host = %connection.host, is_podman, %version, ?engine_cdi, "connected to the container engine");
        let rootless = security_options.iter().any(|o| o.contains("rootless"));
        // Podman lists `name=userns` for a rootless service too; a user namespace it makes
        // per container (`plan::AUTO_USER_NAMESPACE`) is what counts there.
        let remapped_users = !is_podman && security_options.iter().any(|o| o.contains("userns"));
        let isolation_warning = match purpose {
            Purpose::Workspaces => firewall::unavailable(&connection.host, rootless).await,
            Purpose::Builds => None,
        };
        if let Some(w) = &isolation_warning {
            tracing::warn!("{w}");
        }
        let owner =
            load_or_create_owner(&config.state_dir).map_err(|source| EngineError::StateDir {
                path: config.state_dir.join(OWNER_FILE),
                source,
            })?;
        let (changes, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            docker: connection.docker,
            host: connection.host,
            is_podman,
            engine_cdi,
            config,
            owner,
            changes,
            locks: Mutex::default(),
            builds: Default::default(),
            starters: Mutex::default(),
            restarted: Mutex::default(),
            next_starter: std::sync::atomic::AtomicU64::new(0),
            usable: Mutex::default(),
            probing: Mutex::default(),
            view: Mutex::new(observed::View::stale()),
            index: Mutex::default(),
            looking: tokio::sync::Mutex::new(()),
            subnets: Mutex::default(),
            libpod: std::sync::OnceLock::new(),
            egress: Mutex::default(),
            shutdown: CancellationToken::new(),
            service: tokio::sync::Mutex::new(connection.service),
            isolation_warning,
            firewall: tokio::sync::Mutex::new(None),
            tools: tokio::sync::Mutex::new(HashMap::new()),
            gitops: std::sync::OnceLock::new(),
            parent: None,
            kubernetes_pods: None,
            remapped_users,
            crashes: Mutex::default(),
            probers: Mutex::default(),
            host_ports: host_ports::HostPorts::for_this_host(),
        });
        if purpose == Purpose::Workspaces {
            tokio::spawn(background::watch_events(
                Arc::downgrade(&inner),
                inner.shutdown.clone(),
            ));
        }
        if inner.service.lock().await.is_some() {
            tokio::spawn(background::supervise_service(
                Arc::downgrade(&inner),
                inner.shutdown.clone(),
            ));
        }
        let runtime = EngineRuntime { inner };
        if purpose == Purpose::Builds {
            return Ok(runtime);
        }
        // Made now, so the first firewall rules already cover GitOps pods that kept running.
        runtime.gitops_engine();
        runtime.collect_stale_firewall_tables().await;
        // Snapshots whose prebuild went while the agent was away, or whose removal was
        // refused then (a clone still used them) and no later removal came.
        runtime.prune_snapshots("").await;
        // Rules for workspaces that kept running while the agent was away (or a reboot).
        if let Err(e) = runtime.sync_firewall().await {
            tracing::warn!(error = %warren_types::error_chain(&e), "restoring the workspaces' firewall rules failed; retried at the next apply");
        }
        Ok(runtime)
    }

    /// Whether the engine is Podman (else Docker or compatible).
    pub fn is_podman(&self) -> bool {
        self.inner.is_podman
    }

    /// The engine address in use (`unix:///run/podman/podman.sock`, …).
    pub fn host(&self) -> &str {
        &self.inner.host
    }

    /// The API client, for callers that inspect the engine (tests, diagnostics).
    pub fn docker(&self) -> &Docker {
        &self.inner.docker
    }

    /// Stops background work and a `podman system service` this runtime started. Containers
    /// keep running: they belong to the workspaces, not to the agent process.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let starters: Vec<CancellationToken> = lock(&self.inner.starters)
            .drain()
            .map(|(_, (_, t))| t)
            .collect();
        for t in starters {
            t.cancel();
        }
        if let Some(service) = self.inner.service.lock().await.take() {
            service.stop().await;
        }
    }

    fn bump(&self) {
        self.inner.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Every object of this installation; `.workspace(name)` narrows it to one workspace.
    /// All listings go through it (see `select`).
    fn selector(&self) -> Selector {
        Selector::installation(
            self.inner.config.agent_id.to_string(),
            self.inner.owner.clone(),
        )
    }

    fn workspace_dir(&self, name: &str) -> PathBuf {
        self.inner.config.state_dir.join("workspaces").join(name)
    }

    fn read_record(&self, name: &str) -> Option<Record> {
        let path = self.workspace_dir(name).join("state.json");
        let bytes = std::fs::read(&path).ok()?;
        match serde_json::from_slice::<Record>(&bytes) {
            Ok(r) if r.agent_id == self.inner.config.agent_id => Some(r),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "ignoring unreadable workspace record");
                None
            }
        }
    }

    fn write_record(&self, record: &Record) -> Result<(), RuntimeError> {
        let dir = self.workspace_dir(&record.name);
        let io =
            |e: std::io::Error| runtime_err(format!("writing the record of {}", record.name), e);
        create_private_dir(&dir).map_err(io)?;
        let bytes = serde_json::to_vec(record)
            .map_err(|e| runtime_err(format!("encoding the record of {}", record.name), e))?;
        let tmp = dir.join("state.json.tmp");
        write_private_file(&tmp, &bytes).map_err(io)?;
        std::fs::rename(&tmp, dir.join("state.json")).map_err(io)?;
        lock(&self.inner.egress).insert(record.name.clone(), record.egress.clone());
        Ok(())
    }

    /// Acquires the workspace's lock after cancelling its start sequence, if one runs.
    async fn lock_workspace(&self, name: &str) -> OwnedMutexGuard<()> {
        if let Some((_, token)) = lock(&self.inner.starters).remove(name) {
            token.cancel();
        }
        // What comes now decides the pod's fate: an exit is no longer Podman's blip.
        lock(&self.inner.restarted).remove(name);
        self.workspace_mutex(name).lock_owned().await
    }

    /// The mutex behind workspace `name`'s lock (see `lock_workspace`).
    fn workspace_mutex(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.locks)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The workspace's lock when no one holds it (an apply, a delete, a start sequence).
    fn lock_workspace_now(
        &self,
        name: &str,
    ) -> Result<OwnedMutexGuard<()>, tokio::sync::TryLockError> {
        self.workspace_mutex(name).try_lock_owned()
    }

    /// The containers `selector` selects. A workspace's are inspected by name while the
    /// index knows them (`index`); otherwise, and for the whole installation, listed.
    async fn containers(&self, selector: &Selector) -> Result<Vec<ContainerSummary>, RuntimeError> {
        if let Some(workspace) = selector.workspace_name() {
            let (names, since) = {
                let index = lock(&self.inner.index);
                (index.lookup(workspace), index.now())
            };
            if let Some(names) = names {
                return self.inspected(selector, workspace, names, since).await;
            }
        }
        let since = lock(&self.inner.index).now();
        let options = ListContainersOptions {
            all: true,
            filters: Some(HashMap::from([("label".to_owned(), selector.filters())])),
            ..Default::default()
        };
        let docker = &self.inner.docker;
        let all = retry_transient(|| docker.list_containers(Some(options.clone())))
            .await
            .map_err(|e| runtime_err("listing containers".into(), e))?;
        let selected: Vec<ContainerSummary> = all
            .into_iter()
            .filter(|c| {
                let labels = c.labels.as_ref();
                selector.matches(|k| labels.and_then(|l| l.get(k)).map(String::as_str))
            })
            .collect();
        if selector.workspace_name().is_none() {
            let listed = selected.iter().filter_map(|c| {
                Some((
                    label(c, WORKSPACE_NAME_LABEL)?.to_owned(),
                    index::summary_name(c)?.to_owned(),
                ))
            });
            lock(&self.inner.index).set_all(listed.collect::<Vec<_>>(), since);
            self.note_host_ports(&selected);
        }
        Ok(selected)
    }

    /// Workspace `workspace`'s containers `names`, inspected (a lookup begun at `since`);
    /// those gone or not the selector's are dropped, from the answer and the index.
    async fn inspected(
        &self,
        selector: &Selector,
        workspace: &str,
        names: Vec<String>,
        since: u64,
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            match self.inspect(&name).await {
                Ok(i) => {
                    let c = index::summary_of(i);
                    let labels = c.labels.as_ref();
                    if selector.matches(|k| labels.and_then(|l| l.get(k)).map(String::as_str)) {
                        out.push(c);
                        continue;
                    }
                }
                Err(e) if container_gone(&e) => {}
                Err(e) => return Err(runtime_err(format!("inspecting container {name}"), e)),
            }
            lock(&self.inner.index).forget(workspace, &name, since);
        }
        Ok(out)
    }

    /// Container `name` of workspace `workspace` exists now (see `index`).
    pub(super) fn indexed(&self, workspace: &str, name: &str) {
        lock(&self.inner.index).add(workspace, name);
    }

    async fn inspect(
        &self,
        name: &str,
    ) -> Result<bollard::models::ContainerInspectResponse, bollard::errors::Error> {
        let docker = &self.inner.docker;
        retry_transient(|| docker.inspect_container(name, None)).await
    }

    async fn workspace_containers(
        &self,
        name: &str,
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        self.containers(&self.selector().workspace(name)).await
    }

    /// The volumes `selector` selects, with their labels.
    async fn labelled_volumes(
        &self,
        selector: &Selector,
    ) -> Result<Vec<(String, BTreeMap<String, String>)>, RuntimeError> {
        let options = ListVolumesOptions {
            filters: Some(HashMap::from([("label".to_owned(), selector.filters())])),
        };
        let docker = &self.inner.docker;
        let volumes = retry_transient(|| docker.list_volumes(Some(options.clone())))
            .await
            .map_err(|e| runtime_err("listing volumes".into(), e))?;
        Ok(volumes
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| (v.name, v.labels.into_iter().collect::<BTreeMap<_, _>>()))
            .filter(|(_, labels)| selector.matches_btree(labels))
            .collect())
    }

    /// The networks `selector` selects, with their labels.
    async fn labelled_networks(
        &self,
        selector: &Selector,
    ) -> Result<Vec<(String, BTreeMap<String, String>)>, RuntimeError> {
        Ok(self
            .networks(selector)
            .await?
            .into_iter()
            .map(|n| (n.name, n.labels))
            .collect())
    }

    /// The namespace of the images workspace `name` builds (`scope`), from the
    /// workspace id its Deployment carries.
    fn build_scope(&self, name: &str, deployment: &serde_json::Value) -> scope::BuildScope {
        let id = deployment
            .pointer("/metadata/labels")
            .and_then(|l| l.get(WORKSPACE_ID_LABEL))
            .and_then(serde_json::Value::as_str);
        scope::BuildScope::new(&self.inner.owner, name, id)
    }

    fn base_labels(
        &self,
        workspace: &WorkspaceKey,
        deployment: &serde_json::Value,
    ) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        labels.insert(
            AGENT_ID_LABEL.to_owned(),
            self.inner.config.agent_id.to_string(),
        );
        labels.insert(OWNER_LABEL.to_owned(), self.inner.owner.clone());
        labels.insert(WORKSPACE_NAME_LABEL.to_owned(), workspace.name.clone());
        labels.insert(
            WORKSPACE_NAMESPACE_LABEL.to_owned(),
            workspace.namespace.clone(),
        );
        if let Some(id) = deployment
            .pointer("/metadata/labels")
            .and_then(|l| l.get(WORKSPACE_ID_LABEL))
            .and_then(serde_json::Value::as_str)
        {
            labels.insert(WORKSPACE_ID_LABEL.to_owned(), id.to_owned());
        }
        // A GitOps unit's containers, network and volumes name their source (`gitops`); a
        // prebuild's volumes are marked as the only ones a new workspace's may copy (`seed`).
        for key in [
            super::GITOPS_AGENT_LABEL,
            super::GITOPS_SOURCE_LABEL,
            warren_types::prebuild::PREBUILD_LABEL,
        ] {
            if let Some(v) = deployment
                .pointer("/metadata/labels")
                .and_then(|l| l.get(key))
                .and_then(serde_json::Value::as_str)
            {
                labels.insert(key.to_owned(), v.to_owned());
            }
        }
        labels
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn label<'a>(c: &'a ContainerSummary, key: &str) -> Option<&'a str> {
    c.labels.as_ref()?.get(key).map(String::as_str)
}

fn summary_role(c: &ContainerSummary) -> Role {
    label(c, ROLE_LABEL)
        .and_then(Role::from_label)
        .unwrap_or(Role::App)
}

fn summary_order(c: &ContainerSummary) -> usize {
    label(c, ORDER_LABEL)
        .and_then(|o| o.parse().ok())
        .unwrap_or(0)
}

fn summary_running(c: &ContainerSummary) -> bool {
    matches!(
        c.state.map(|s| s.to_string()).as_deref(),
        Some("running" | "restarting" | "paused")
    )
}

fn status_of(e: &bollard::errors::Error) -> Option<u16> {
    match e {
        bollard::errors::Error::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// The container no longer exists. Podman 4.3 answers an inspect of a container removed while
/// it looked it up (a helper ending between the listing and the inspect) with 500 "no such
/// container" rather than 404; engine_seed saw it fail a whole listing.
fn container_gone(e: &bollard::errors::Error) -> bool {
    match status_of(e) {
        Some(404) => true,
        Some(500) => error_message(e).contains("no such container"),
        _ => false,
    }
}

fn error_message(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}

fn runtime_err(
    context: String,
    source: impl std::error::Error + Send + Sync + 'static,
) -> RuntimeError {
    RuntimeError::Runtime {
        context,
        source: Box::new(source),
    }
}

/// Writes `bytes` as file `name` of `dir` (made 0700 when missing), readable by the agent
/// alone: a secret's copy.
pub fn write_secret_file(dir: &std::path::Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    create_private_dir(dir)?;
    let tmp = dir.join(format!("{name}.tmp"));
    write_private_file(&tmp, bytes)?;
    std::fs::rename(&tmp, dir.join(name))
}

fn is_dns_label(s: &str) -> bool {
    warren_types::is_dns_label(s, 63)
}
