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

mod background;
mod build;
mod connect;
mod containers;
mod exec;
mod files;
pub mod firewall;
mod gitops;
mod index;
mod networks;
mod observed;
pub mod plan;
mod probes;
mod ready;
pub mod registry_auth;
mod restarts;
pub mod scope;
mod select;
mod start;
pub mod status;
mod storage;
mod tools;

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

pub use connect::{services_on, ConnectError, PodmanService};
use plan::{
    ContainerPlan, DataSets, PodPlan, Role, CONTAINER_LABEL, ORDER_LABEL, POD_HASH_LABEL,
    PORTS_LABEL, ROLE_LABEL, WORKSPACE_NAMESPACE_LABEL, WORKSPACE_NAME_LABEL,
};
use select::Selector;
use status::{ContainerObservation, PodObservation};

use super::{
    ByteStream, ObservedWorkspace, RuntimeError, WorkspaceKey, WorkspaceRuntime, AGENT_ID_LABEL,
    WORKSPACE_ID_LABEL,
};

/// Claims a pod mounts from volumes it does not own: PVC name → (engine volume, its labels).
pub(super) type SharedClaims = BTreeMap<String, (String, BTreeMap<String, String>)>;

/// How an apply treats its objects beyond what they say.
#[derive(Debug, Default)]
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

/// Configuration of the engine runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// The agent this runtime belongs to; every container, volume and network is labelled
    /// with it, and only those are listed.
    pub agent_id: AgentId,
    /// `unix:///path`, `tcp://host:port`; auto-detected when absent (`DOCKER_HOST`,
    /// `/var/run/docker.sock`, `/run/podman/podman.sock`,
    /// `$XDG_RUNTIME_DIR/podman/podman.sock`, then a `podman system service` of our own).
    #[serde(default)]
    pub host: Option<String>,
    /// Start our own `podman system service` even when another socket answers.
    #[serde(default)]
    pub own_podman_service: bool,
    /// Where Secret/ConfigMap files and per-workspace records live (created 0700).
    pub state_dir: PathBuf,
    /// Seconds a container gets to stop on SIGTERM before it is killed.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout_secs: u32,
    /// Where image pull secrets are kept, `<dir>/<name>.json` each (see `registry_auth`);
    /// `<state_dir>/pull-secrets` when absent.
    #[serde(default)]
    pub pull_secrets_dir: Option<PathBuf>,
    /// Whether workspaces may build images here (devfile `image` components). Builds run
    /// on the engine's default network, outside the workspaces' NetworkPolicies, with what
    /// the Dockerfile says; an agent whose engine should run only pulled images turns them
    /// off, and a build is then refused saying so.
    #[serde(default = "default_image_builds")]
    pub image_builds: bool,
}

fn default_stop_timeout() -> u32 {
    10
}

fn default_image_builds() -> bool {
    true
}

impl EngineConfig {
    pub fn new(agent_id: AgentId, state_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            agent_id,
            host: None,
            own_podman_service: false,
            state_dir: state_dir.into(),
            stop_timeout_secs: default_stop_timeout(),
            pull_secrets_dir: None,
            image_builds: default_image_builds(),
        }
    }

    /// The directory of image pull secrets in use.
    pub fn pull_secrets_dir(&self) -> PathBuf {
        self.pull_secrets_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("pull-secrets"))
    }

    /// Checks the configuration before anything is bound or started.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.state_dir.as_os_str().is_empty() {
            return Err(EngineError::Config("state_dir must not be empty".into()));
        }
        if self.stop_timeout_secs > 600 {
            return Err(EngineError::Config(format!(
                "stop_timeout_secs is {}; at most 600 is allowed",
                self.stop_timeout_secs
            )));
        }
        if let Some(h) = &self.host {
            if !(h.starts_with("unix://") || h.starts_with("tcp://") || h.starts_with("http://")) {
                return Err(EngineError::Config(format!(
                    "host {h:?} must start with unix://, tcp:// or http://"
                )));
            }
        }
        Ok(())
    }
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
    config: EngineConfig,
    /// This installation's owner id (see [`OWNER_LABEL`]).
    owner: String,
    changes: watch::Sender<u64>,
    /// One lock per workspace: applies and deletes of one workspace never interleave.
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
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
}

impl EngineRuntime {
    /// Connects to the configured or auto-detected engine, starting `podman system service`
    /// when only the `podman` binary exists.
    pub async fn connect(config: EngineConfig) -> Result<Self, EngineError> {
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
        let is_podman = match connection.docker.version().await {
            Ok(v) => v
                .components
                .unwrap_or_default()
                .iter()
                .any(|c| c.name.to_ascii_lowercase().contains("podman")),
            // Both engines answer `version`; assume Docker, whose handling is the safe one.
            Err(_) => false,
        };
        tracing::info!(host = %connection.host, is_podman, "connected to the container engine");
        let security_options = match connection.docker.info().await {
            Ok(info) => info.security_options.unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let rootless = security_options.iter().any(|o| o.contains("rootless"));
        // Podman lists `name=userns` for a rootless service too; a user namespace it makes
        // per container (`plan::AUTO_USER_NAMESPACE`) is what counts there.
        let remapped_users = !is_podman && security_options.iter().any(|o| o.contains("userns"));
        let isolation_warning = firewall::unavailable(&connection.host, rootless).await;
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
            config,
            owner,
            changes,
            locks: Mutex::default(),
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
        });
        tokio::spawn(background::watch_events(
            Arc::downgrade(&inner),
            inner.shutdown.clone(),
        ));
        if inner.service.lock().await.is_some() {
            tokio::spawn(background::supervise_service(
                Arc::downgrade(&inner),
                inner.shutdown.clone(),
            ));
        }
        let runtime = EngineRuntime { inner };
        // Made now, so the first firewall rules already cover GitOps pods that kept running.
        runtime.gitops_engine();
        runtime.collect_stale_firewall_tables().await;
        // Rules for workspaces that kept running while the agent was away (or a reboot).
        if let Err(e) = runtime.sync_firewall().await {
            tracing::warn!(error = %warren_types::error_chain(&e), "restoring the workspaces' firewall rules failed; retried at the next apply");
        }
        Ok(runtime)
    }

    /// Deletes the tables of installations that have no network left on this engine (an
    /// agent removed, or one that died with its workspaces deleted behind its back): their
    /// rules name subnets a new network may get. A live installation always has its
    /// networks, so its table is never taken.
    async fn collect_stale_firewall_tables(&self) {
        if self.inner.isolation_warning.is_some() {
            return;
        }
        for (owner, table) in firewall::owner_tables().await {
            if owner == self.inner.owner {
                continue;
            }
            // Its GitOps pods' networks (the sibling's owner id, `gitops`) are in its
            // table too: an installation running only those is live.
            let mut left = 0;
            let mut failed = None;
            for owner in [owner.clone(), format!("{owner}g")] {
                let options = ListNetworksOptions {
                    filters: Some(HashMap::from([(
                        "label".to_owned(),
                        vec![format!("{OWNER_LABEL}={owner}")],
                    )])),
                };
                match self.inner.docker.list_networks(Some(options)).await {
                    Ok(networks) => left += networks.len(),
                    Err(e) => failed = Some(e),
                }
            }
            let listed = match failed {
                Some(e) => Err(e),
                None => Ok(left),
            };
            match listed {
                Ok(0) => {
                    let script = format!("table inet {table}\ndelete table inet {table}\n");
                    match firewall::nft(&["-f", "-"], Some(&script)).await {
                        Ok(_) => tracing::info!(table, "removed the firewall table of an installation with no workspace networks left"),
                        Err(e) => tracing::warn!(table, error = %e, "removing a stale firewall table failed"),
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %error_message(&e), "listing networks for stale firewall tables failed");
                    return;
                }
            }
        }
    }

    /// Why workspaces are not isolated here, if they are not.
    pub fn isolation_warning(&self) -> Option<&str> {
        self.inner.isolation_warning.as_deref()
    }

    /// Brings the agent's nftables table in line with the workspace networks of this
    /// installation and their policies (see `firewall`); a no-op where the agent cannot
    /// enforce them, or when nothing changed.
    pub(super) async fn sync_firewall(&self) -> Result<(), RuntimeError> {
        if let Some(parent) = &self.inner.parent {
            return match parent.upgrade() {
                Some(inner) => Box::pin(EngineRuntime { inner }.sync_firewall()).await,
                None => Ok(()),
            };
        }
        if self.inner.isolation_warning.is_some() {
            return Ok(());
        }
        let mut applied = self.inner.firewall.lock().await;
        let mut nets = self.workspace_nets("").await?;
        if let Some(gitops) = self.inner.gitops.get() {
            nets.extend(gitops.workspace_nets("gitops ").await?);
        }
        let table = firewall::table_name(&self.inner.owner, self.inner.config.agent_id.get());
        let rules = firewall::rules(&nets);
        let script = match applied.as_ref() {
            Some(old) => match firewall::update(&table, old, &rules) {
                Some(script) => script,
                None => return Ok(()),
            },
            None => firewall::ruleset(&table, &rules),
        };
        let incremental = applied.is_some();
        if let Err(message) = firewall::nft(&["-f", "-"], Some(&script)).await {
            // The table is not as remembered (changed by hand, or an update cut short):
            // replaced whole, as at start.
            *applied = None;
            if !incremental {
                return Err(RuntimeError::Apply {
                    workspace: "the workspaces' firewall rules".into(),
                    message,
                });
            }
            tracing::warn!(error = %message, "updating the firewall rules failed; replacing the whole table");
            firewall::nft(&["-f", "-"], Some(&firewall::ruleset(&table, &rules)))
                .await
                .map_err(|message| RuntimeError::Apply {
                    workspace: "the workspaces' firewall rules".into(),
                    message,
                })?;
        }
        tracing::debug!(
            workspaces = nets.len(),
            incremental,
            "firewall rules applied"
        );
        *applied = Some(rules);
        Ok(())
    }

    /// The networks of this runtime's pods with what their policies allow, named with
    /// `prefix` in the rules' comments.
    async fn workspace_nets(
        &self,
        prefix: &str,
    ) -> Result<Vec<firewall::WorkspaceNet>, RuntimeError> {
        let known = lock(&self.inner.subnets).clone();
        let subnets = match known {
            Some(known) => known,
            None => {
                // At start (and after `resync`): what the engine holds. From then on the
                // runtime keeps it current as it makes and removes networks, so an update
                // lists no network of another workspace.
                let mut listed = BTreeMap::new();
                for network in self.networks(&self.selector()).await? {
                    let Some(workspace) = network.labels.get(WORKSPACE_NAME_LABEL).cloned() else {
                        continue;
                    };
                    if let Some(subnet) = firewall::ipv4_subnet(&network.subnets) {
                        listed.insert(workspace, subnet);
                    }
                }
                *lock(&self.inner.subnets) = Some(listed.clone());
                listed
            }
        };
        Ok(subnets
            .into_iter()
            .map(|(workspace, subnet)| firewall::WorkspaceNet {
                egress: self.egress_of(&workspace),
                workspace: format!("{prefix}{workspace}"),
                subnet,
            })
            .collect())
    }

    /// Records the subnet of workspace `name`'s network (`None`: it has none any more).
    fn set_subnet(&self, name: &str, subnet: Option<ipnet::Ipv4Net>) {
        if let Some(known) = lock(&self.inner.subnets).as_mut() {
            known.remove(name);
            if let Some(subnet) = subnet {
                // A subnet belongs to one network at a time: an entry still naming it is
                // of a network removed behind the runtime's back, whose policy must not
                // apply to this one.
                known.retain(|_, s| *s != subnet);
                known.insert(name.to_owned(), subnet);
            }
        }
    }

    /// The workspace's egress, as its record says.
    fn egress_of(&self, workspace: &str) -> Option<firewall::Egress> {
        if let Some(egress) = lock(&self.inner.egress).get(workspace) {
            return egress.clone();
        }
        let egress = self.read_record(workspace).and_then(|r| r.egress);
        lock(&self.inner.egress).insert(workspace.to_owned(), egress.clone());
        egress
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
                Err(e) if status_of(&e) == Some(404) => {}
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
        // A GitOps unit's containers, network and volumes name their source (`gitops`).
        for key in [super::GITOPS_AGENT_LABEL, super::GITOPS_SOURCE_LABEL] {
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

    async fn apply_locked(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
        options: &ApplyOptions,
    ) -> Result<Option<PodPlan>, RuntimeError> {
        let shared = &options.shared;
        let name = &workspace.name;
        let apply_err = |message: String| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        };
        if !is_dns_label(name) {
            return Err(apply_err(format!(
                "workspace name {name:?} is not a DNS label"
            )));
        }
        let mut parsed = plan::parse_objects(objects).map_err(|e| apply_err(e.to_string()))?;
        parsed.claim_volumes = shared
            .iter()
            .map(|(claim, (volume, _))| (claim.clone(), volume.clone()))
            .collect();
        let shared_labels: BTreeMap<String, BTreeMap<String, String>> = shared
            .values()
            .map(|(volume, labels)| (volume.clone(), labels.clone()))
            .collect();
        let previous = self.read_record(name);
        // A set of Deployments only is a partial reconcile's: the policy stays as it was.
        let egress = match &parsed.network_policy {
            Some(p) => firewall::Egress::from_policy(p),
            None if parsed.only_deployments => previous.as_ref().and_then(|r| r.egress.clone()),
            None => None,
        };
        let pull_secrets = if parsed.only_deployments {
            let mut names = previous
                .as_ref()
                .map(|r| r.pull_secrets.clone())
                .unwrap_or_default();
            names.extend(
                parsed
                    .pull_secrets
                    .iter()
                    .filter(|n| !names.contains(n))
                    .cloned()
                    .collect::<Vec<_>>(),
            );
            names
        } else {
            parsed.pull_secrets.clone()
        };
        let kept = previous.as_ref().filter(|_| !options.complete);
        let mut secrets = kept.map(|r| r.secrets.clone()).unwrap_or_default();
        secrets.extend(parsed.secrets.clone());
        let mut config_maps = kept.map(|r| r.config_maps.clone()).unwrap_or_default();
        config_maps.extend(parsed.config_maps.clone());
        let labels = self.base_labels(workspace, &parsed.deployment_json);
        let files_dir = self.workspace_dir(name).join("files");
        let cx = plan::PlanContext {
            workspace,
            files_dir: &files_dir,
            labels: &labels,
            kubernetes: self.inner.kubernetes_pods,
        };
        let mut plan = plan::plan(&parsed, &secrets, &config_maps, &cx)
            .map_err(|e| apply_err(e.to_string()))?;
        // After the hash: a build changes what a name runs at the pod's next start, as a
        // rebuilt tag does (`outdated_images`), never a running pod.
        let scope = self.build_scope(name, &parsed.deployment_json);
        self.use_own_builds(&mut plan, &scope).await?;
        tracing::debug!(workspace = %workspace, replicas = plan.replicas, hash = %plan.hash, "applying");

        let mut record = Record {
            agent_id: self.inner.config.agent_id,
            name: name.clone(),
            namespace: workspace.namespace.clone(),
            replicas: plan.replicas,
            pod_hash: plan.hash.clone(),
            deployment: parsed.deployment_json.clone(),
            volumes: plan
                .volumes
                .keys()
                .filter(|v| !plan.shared_volumes.contains(*v))
                .cloned()
                .collect(),
            // Set until the pod is known to run, so `list` never mistakes containers not
            // created or started yet for missing or exited ones.
            starting: plan.replicas == 1,
            failure: None,
            deleting: false,
            secrets,
            config_maps,
            egress,
            pull_secrets: pull_secrets.clone(),
        };
        self.write_record(&record)?;
        write_files(&files_dir, &plan).map_err(|e| {
            runtime_err(
                format!("writing the Secret and ConfigMap files of {name}"),
                e,
            )
        })?;
        self.ensure_network(&plan, &labels).await?;
        // Before any container exists: a workspace never runs without its rules.
        self.sync_firewall().await?;
        let new_volumes = self.ensure_volumes(&plan, &labels, &shared_labels).await?;

        // Recreate: any container of another pod hash goes, volumes stay. So does a stopped
        // container about to start whose image reference now names another image (rebuilt
        // under the same tag): a start runs what the reference names now, as a new pod
        // would on Kubernetes.
        let existing = self.workspace_containers(name).await?;
        // Only a pod about to start: a running one is not restarted behind its user's back.
        let pod_running = existing
            .iter()
            .any(|c| summary_role(c) == Role::App && summary_running(c));
        let outdated = if plan.replicas == 1 && !pod_running {
            self.outdated_images(&plan, &existing).await
        } else {
            BTreeSet::new()
        };
        // One outdated container recreates the whole pod, as Kubernetes would: the others
        // may join its namespaces.
        let (current, stale): (Vec<_>, Vec<_>) = existing.into_iter().partition(|c| {
            label(c, POD_HASH_LABEL) == Some(plan.hash.as_str()) && outdated.is_empty()
        });
        let recreated = stale.len();
        if !stale.is_empty() {
            tracing::info!(workspace = %workspace, images_changed = outdated.len(), "pod spec or images changed: recreating its containers");
            let mut running: Vec<&ContainerSummary> =
                stale.iter().filter(|c| summary_running(c)).collect();
            running.sort_by_key(|c| std::cmp::Reverse((summary_role(c), summary_order(c))));
            for c in running {
                let id = c.id.clone().unwrap_or_default();
                self.stop(&id)
                    .await
                    .map_err(|e| runtime_err(format!("stopping container {id}"), e))?;
            }
            self.remove_all(stale).await?;
        }
        // A pod from Git that ran with this spec and has exited is the supervisor's to
        // restart, after its back-off (`restarts`): a sync's apply must not restart a
        // crash-looping pod at every interval.
        let ran = self.inner.kubernetes_pods.is_some()
            && recreated == 0
            && previous.as_ref().is_some_and(|p| {
                // A start that failed (the containers never ran) is tried again here.
                p.pod_hash == plan.hash
                    && p.replicas == 1
                    && !p.starting
                    && !p.deleting
                    && p.failure.is_none()
            });
        let present: BTreeSet<String> = current
            .iter()
            .filter_map(|c| {
                label(c, CONTAINER_LABEL)
                    .map(|n| format!("{}/{n}", label(c, ROLE_LABEL).unwrap_or("")))
            })
            .collect();
        if let Some(tools) = plan.tools.as_ref().filter(|_| plan.replicas == 1) {
            self.ensure_tools(tools, &pull_secrets).await;
        }
        let mut created = false;
        for c in &plan.containers {
            if present.contains(&format!("{}/{}", c.role.label(), c.name)) {
                continue;
            }
            created = true;
            if let Err(failure) = self.create(c, &pull_secrets, name, &scope).await? {
                tracing::info!(workspace = %workspace, reason = %failure.reason, "pod failure while creating containers");
                record.failure = Some(failure);
                record.starting = false;
                self.write_record(&record)?;
                return Ok(None);
            }
        }

        // After the creates: the image is pulled by now.
        self.give_volumes_to_pod_user(&plan, &new_volumes, &labels)
            .await;

        let containers = self.workspace_containers(name).await?;
        if plan.replicas == 0 {
            let mut running: Vec<&ContainerSummary> =
                containers.iter().filter(|c| summary_running(c)).collect();
            running.sort_by_key(|c| std::cmp::Reverse((summary_role(c), summary_order(c))));
            for c in running {
                let id = c.id.clone().unwrap_or_default();
                self.stop(&id)
                    .await
                    .map_err(|e| runtime_err(format!("stopping container {id}"), e))?;
            }
            return Ok(None);
        }
        let all_running = containers
            .iter()
            .filter(|c| summary_role(c) != Role::Init)
            .all(summary_running);
        if all_running || (ran && !created) {
            record.starting = false;
            self.write_record(&record)?;
            return Ok(None);
        }
        Ok(Some(plan))
    }

    /// `apply`, with the options GitOps needs (see `gitops`).
    pub(super) async fn apply_with(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
        options: &ApplyOptions,
    ) -> Result<(), RuntimeError> {
        let guard = self.lock_workspace(&workspace.name).await;
        let result = self.apply_locked(workspace, objects, options).await;
        self.changed(&workspace.name);
        let plan = match result {
            Ok(Some(plan)) => plan,
            Ok(None) => return Ok(()),
            Err(e) => return Err(e),
        };
        let token = self.inner.shutdown.child_token();
        let generation = self
            .inner
            .next_starter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.inner.starters).insert(workspace.name.clone(), (generation, token.clone()));
        let this = self.clone();
        let name = workspace.name.clone();
        tokio::spawn(async move {
            let _guard = guard;
            this.start_sequence(name.clone(), plan, token).await;
            let mut starters = lock(&this.inner.starters);
            if starters.get(&name).is_some_and(|(g, _)| *g == generation) {
                starters.remove(&name);
            }
        });
        Ok(())
    }

    /// The containers of the current pod. Exit codes and log tails are read only when the
    /// pod should run (`details`): a stopped pod's exited containers are no failure, and a
    /// list of many stopped workspaces stays one engine call.
    async fn observe(
        &self,
        containers: &[ContainerSummary],
        record: Option<&Record>,
        details: bool,
    ) -> Vec<ContainerObservation> {
        let mut out = Vec::new();
        let mut sorted: Vec<&ContainerSummary> = containers
            .iter()
            .filter(|c| {
                record.is_none_or(|r| label(c, POD_HASH_LABEL) == Some(r.pod_hash.as_str()))
            })
            .collect();
        sorted.sort_by_key(|c| (summary_role(c), summary_order(c)));
        for c in sorted {
            let id = c.id.clone().unwrap_or_default();
            let status = c.state.map(|s| s.to_string()).unwrap_or_default();
            let mut obs = ContainerObservation {
                role: summary_role(c),
                name: label(c, CONTAINER_LABEL).unwrap_or("").to_owned(),
                status: status.clone(),
                exit_code: 0,
                oom_killed: false,
                error: String::new(),
                log_tail: String::new(),
            };
            if details
                && matches!(
                    status.as_str(),
                    "exited" | "dead" | "restarting" | "stopped"
                )
            {
                match self.inspect(&id).await.map(|i| i.state) {
                    Ok(Some(s)) if s.exit_code.is_some() => {
                        obs.exit_code = s.exit_code.unwrap_or_default();
                        obs.oom_killed = s.oom_killed.unwrap_or(false);
                        obs.error = s.error.unwrap_or_default();
                        // Possibly Podman's blip right after a start afresh, which the
                        // watch undoes (`start::watch_restart`): not known yet.
                        if obs.exit_code == 0
                            && obs.role == Role::App
                            && record.is_some_and(|r| self.restart_watched(&r.name))
                        {
                            obs.status = status::UNKNOWN.to_owned();
                            out.push(obs);
                            continue;
                        }
                    }
                    // How it ended is not known yet: never guessed (a default of 0 once
                    // reported "exited with code 0" for `exit 3`); the pod is reported as
                    // not ready, with no failure, until a later look knows.
                    _ => {
                        obs.status = status::UNKNOWN.to_owned();
                        out.push(obs);
                        continue;
                    }
                }
                if obs.exit_code != 0 || obs.role != Role::Init {
                    obs.log_tail = self.log_tail(&id).await;
                }
            }
            out.push(obs);
        }
        out
    }

    async fn log_tail(&self, id: &str) -> String {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: "5".into(),
            ..Default::default()
        };
        let mut stream = self.inner.docker.logs(id, Some(options));
        let mut text = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            if text.len() > 4096 {
                break;
            }
        }
        // Only short logs go into the message; a user reads long ones with `warren ws logs`.
        if text.len() > 1000 {
            let cut = text.len() - 1000;
            let cut = (cut..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            text = format!("…{}", &text[cut..]);
        }
        text
    }
}

#[async_trait]
impl WorkspaceRuntime for EngineRuntime {
    async fn logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        self.logs_of(workspace, container, tail).await
    }

    async fn follow_logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<super::LogStream, RuntimeError> {
        self.log_stream(workspace, container, tail, true).await
    }

    async fn exec(
        &self,
        workspace: &WorkspaceKey,
        spec: super::ExecSpec,
    ) -> Result<super::ExecSession, RuntimeError> {
        self.exec_in(workspace, spec).await
    }

    async fn build_image(
        &self,
        workspace: &WorkspaceKey,
        task: &warren_types::relay::BuildImageTask,
        context: super::BuildContext,
    ) -> Result<super::BuildProgress, RuntimeError> {
        self.build(workspace, task, context).await
    }

    async fn apply(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        self.apply_with(workspace, objects, &ApplyOptions::default())
            .await
    }

    async fn sync_gitops(
        &self,
        sync: &super::GitopsSync<'_>,
    ) -> Result<super::GitopsOutcome, RuntimeError> {
        self.sync_gitops_objects(sync).await
    }

    async fn delete(&self, workspace: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError> {
        let name = &workspace.name;
        if !is_dns_label(name) {
            return Err(RuntimeError::NotFound(format!("workspace {name:?}")));
        }
        let _guard = self.lock_workspace(name).await;
        self.forget_prober(name);
        let mut moved = false;
        if let Some(mut record) = self.read_record(name) {
            if !record.deleting {
                record.deleting = true;
                self.write_record(&record)?;
                moved = true;
            }
        }
        let progress = self.delete_locked(name, &mut moved).await;
        if moved {
            // The workspace's network may be gone: its rules go too, off the deletion's
            // path. Nothing waits on it: rules of a removed network refer to no container,
            // and an apply brings the rules up to date before it creates anything.
            let runtime = self.clone();
            tokio::spawn(async move {
                if let Err(e) = runtime.sync_firewall().await {
                    tracing::warn!(error = %warren_types::error_chain(&e), "updating the firewall rules after a deletion failed; retried at the next change");
                }
            });
            // Only a deletion that changed something tells the reconciler to look again; one
            // that could not (blocked, failed) waits for its retry timer instead of waking
            // itself in a loop.
            self.changed(name);
        }
        progress
    }

    fn isolation_warning(&self) -> Option<String> {
        self.inner.isolation_warning.clone()
    }

    async fn capacity(&self) -> Option<warren_types::reconcile::HostCapacity> {
        let info = self.inner.docker.info().await.ok()?;
        let cpus = u64::try_from(info.ncpu?).ok().filter(|n| *n > 0)?;
        let memory = u64::try_from(info.mem_total?).ok().filter(|n| *n > 0)?;
        Some(warren_types::reconcile::HostCapacity {
            cpu_millis: cpus * 1000,
            memory_bytes: memory,
        })
    }

    async fn usage(&self) -> Result<Vec<super::WorkspaceUsage>, RuntimeError> {
        // The engine's statistics of each running app container (one sample each, a few at a
        // time); init containers come and go, so they are left out.
        let running: Vec<(WorkspaceKey, String, String)> = self
            .containers(&self.selector())
            .await?
            .into_iter()
            .filter(|c| c.state.map(|s| s.to_string()).as_deref() == Some("running"))
            .filter(|c| label(c, ROLE_LABEL) != Some(Role::Init.label()))
            .filter_map(|c| {
                let key = WorkspaceKey {
                    name: label(&c, WORKSPACE_NAME_LABEL)?.to_owned(),
                    namespace: label(&c, WORKSPACE_NAMESPACE_LABEL)
                        .unwrap_or_default()
                        .to_owned(),
                };
                let container = label(&c, CONTAINER_LABEL)?.to_owned();
                Some((key, container, c.id?))
            })
            .collect();
        let docker = self.inner.docker.clone();
        let samples: Vec<Option<super::WorkspaceUsage>> = futures::stream::iter(running)
            .map(|(workspace, container, id)| {
                let docker = docker.clone();
                async move {
                    let options = bollard::query_parameters::StatsOptions {
                        stream: false,
                        one_shot: true,
                    };
                    let mut stats = docker.stats(&id, Some(options));
                    // A container that stopped meanwhile, or says nothing in time, is left
                    // out of this scrape (its series is missing, not zero).
                    let s = match tokio::time::timeout(STATS_TIMEOUT, stats.next()).await {
                        Ok(Some(Ok(s))) => s,
                        _ => return None,
                    };
                    let cpu_ns = s.cpu_stats?.cpu_usage?.total_usage?;
                    let memory = s.memory_stats?;
                    // The working set: page cache the kernel can drop is not in use.
                    let inactive = memory
                        .stats
                        .as_ref()
                        .and_then(|m| m.get("total_inactive_file").or(m.get("inactive_file")))
                        .copied()
                        .unwrap_or(0);
                    Some(super::WorkspaceUsage {
                        workspace,
                        container,
                        cpu_seconds: cpu_ns as f64 / 1e9,
                        memory_bytes: memory.usage?.saturating_sub(inactive),
                    })
                }
            })
            .buffer_unordered(4)
            .collect()
            .await;
        let mut usage: Vec<super::WorkspaceUsage> = samples.into_iter().flatten().collect();
        usage.sort_by(|a, b| (&a.workspace, &a.container).cmp(&(&b.workspace, &b.container)));
        Ok(usage)
    }

    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        self.observed().await
    }

    fn resync(&self) {
        self.look_again_at_all();
        // The firewall's networks are listed afresh too, at the next update.
        *lock(&self.inner.subnets) = None;
        if let Some(gitops) = self.inner.gitops.get() {
            *lock(&gitops.inner.subnets) = None;
        }
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    async fn dial(
        &self,
        workspace: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let name = &workspace.name;
        let hash = self.read_record(name).map(|r| r.pod_hash);
        let owner = self
            .workspace_containers(name)
            .await?
            .into_iter()
            .filter(|c| summary_role(c) == Role::App && summary_order(c) == 0)
            .find(|c| {
                hash.as_deref()
                    .is_none_or(|h| label(c, POD_HASH_LABEL) == Some(h))
            })
            .ok_or_else(|| RuntimeError::NotFound(format!("workspace {workspace}")))?;
        let key = format!("{port}/tcp");
        let declared = label(&owner, PORTS_LABEL)
            .unwrap_or("")
            .split(',')
            .any(|p| p == key);
        if !declared {
            return self.dial_unpublished(workspace, &owner, port).await;
        }
        let id = owner.id.clone().unwrap_or_default();
        let inspect = self
            .inspect(&id)
            .await
            .map_err(|e| runtime_err(format!("inspecting the pod of {workspace}"), e))?;
        let host_port = inspect
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|p| p.get(&key).cloned().flatten())
            .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port))
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| {
                RuntimeError::NotFound(format!(
                    "a published port {port} of workspace {workspace} (is it running?)"
                ))
            })?;
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", host_port))
            .await
            .map_err(|e| {
                runtime_err(
                    format!("connecting to port {port} of workspace {workspace}"),
                    e,
                )
            })?;
        Ok(Box::new(stream))
    }
}

/// Podman reports a container that has just exited as `stopped` for a few milliseconds, a
/// state Docker's API (and so bollard's types) does not have, and a listing that races with a
/// container's exit can fail with a 500 naming the vanished process; both answers are retried
/// briefly.
async fn retry_transient<T, F, Fut>(mut call: F) -> Result<T, bollard::errors::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, bollard::errors::Error>>,
{
    let mut attempts = 0;
    loop {
        match call().await {
            Err(e) if attempts < 40 && is_transient(&e) => {
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

fn is_transient(e: &bollard::errors::Error) -> bool {
    match e {
        bollard::errors::Error::JsonDataError { .. } => true,
        // e.g. "read /proc/24709/cgroup: no such process" while a container exits.
        bollard::errors::Error::DockerResponseServerError {
            status_code: 500,
            message,
        } => message.contains("no such process") || message.contains("no such file or directory"),
        _ => false,
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

fn is_dns_label(s: &str) -> bool {
    warren_types::is_dns_label(s, 63)
}
