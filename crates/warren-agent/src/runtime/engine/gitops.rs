//! GitOps on a container engine: a source's Deployments, Services, ConfigMaps, Secrets and
//! PersistentVolumeClaims realised the way workspaces' objects are (`plan`), any other kind
//! reported as an error naming it (gitops.md, "The container-engine runtime").
//!
//! Each Deployment becomes a pod of its own — a *unit* — with the Services that select it
//! publishing its ports, and the ConfigMaps, Secrets and claims of its namespace at hand. The
//! units live in a sibling of the workspace runtime: the same engine and agent, another
//! owner id (`<owner>g`) and state directory, so no listing, reconcile or orphan collection
//! of workspaces ever sees a GitOps object, nor the other way round. A claim becomes a volume
//! of its own (not the pod's) when a Deployment first mounts it — as a `WaitForFirstConsumer`
//! class binds — and survives the Deployment, as a PVC does; it goes only when it leaves Git
//! and the source prunes.
//!
//! An inventory per source (`<state_dir>/gitops/sources/<source>.json`) records what the
//! source applied, with a digest of each object as applied, so pruning deletes exactly what
//! left Git, and an unchanged object is counted as such. Every sync applies every unit again:
//! the engine runtime's apply is idempotent and restores a container removed or stopped by
//! hand (drift).

// Capabilities a GitOps container may add: Kubernetes' "baseline" Pod Security Standard.
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use warren_admission::BASELINE_CAPABILITIES;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use warren_gitops::{Manifest, Rights};
use warren_types::gitops::{ObjectHealth, SyncError};

use super::files::{create_private_dir, write_private_file};
use super::plan::{canonical_json, WORKSPACE_NAMESPACE_LABEL, WORKSPACE_NAME_LABEL};
use super::{
    is_dns_label, runtime_err, status_of, ApplyOptions, EngineRuntime, Inner, SharedClaims,
    OWNER_LABEL,
};
use crate::runtime::{
    GitopsOutcome, GitopsSync, RuntimeError, WorkspaceKey, WorkspaceRuntime, AGENT_ID_LABEL,
    GITOPS_AGENT_LABEL, GITOPS_SOURCE_LABEL, WORKSPACE_ID_LABEL,
};
use bollard::query_parameters::RemoveVolumeOptions;

mod sync;

/// The kinds the engine realises, by `apiVersion` and kind.
const REALISED: &[(&str, &str)] = &[
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "PersistentVolumeClaim"),
];

/// How often a pruned Deployment's deletion is pushed on before it is left to the next sync.
const DELETE_ROUNDS: usize = 5;

/// One object the source applied, as the inventory records it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
struct Entry {
    api_version: String,
    kind: String,
    namespace: String,
    name: String,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}/{}",
            self.api_version, self.kind, self.namespace, self.name
        )
    }
}

/// The inventory file: each entry with the digest of what was applied for it.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Inventory {
    #[serde(default)]
    objects: Vec<(Entry, String)>,
}

fn digest(parts: &[&Value]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(canonical_json(p));
        h.update([0]);
    }
    hex::encode(&h.finalize()[..12])
}

/// The engine name of a source's Deployment (its unit) or claim (its volume): a hash that
/// keeps agents, sources, kinds and namespaces apart, and the object's own name, cut to keep
/// the whole a DNS label. A unit's name starts `warren-g-` (no workspace name starts with
/// `warren-`, so no workspace's container, network or volume can be named like a unit's);
/// a claim's volume `warren-g.`, which no name derived from a workspace's contains.
fn engine_name(sync: &GitopsSync<'_>, kind: &str, namespace: &str, name: &str) -> String {
    let mut h = Sha256::new();
    for part in [sync.agent, &sync.source.name, kind, namespace, name] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let hash = &hex::encode(h.finalize())[..10];
    let cut: String = name.chars().take(40).collect();
    let sep = if kind == "PersistentVolumeClaim" {
        '.'
    } else {
        '-'
    };
    format!("warren-g{sep}{hash}-{}", cut.trim_end_matches('-'))
}

/// Holds a Deployment from Git to Kubernetes' baseline Pod Security Standard, adapted to an
/// engine shared with workspaces: no host namespaces, no capability beyond the baseline set
/// (privileged and hostPath are refused by `plan` for every pod), and no `warren-` volume or
/// container name — those are the workspace renderer's (the shared tools volume), not Git's.
fn baseline(deployment: &Value) -> Result<(), String> {
    let pod = deployment
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if pod.get(field) == Some(&Value::Bool(true)) {
            return Err(format!(
                "spec.template.spec.{field} is not allowed for objects from Git"
            ));
        }
    }
    let reserved = |n: &str| n.starts_with("warren-");
    for v in pod["volumes"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or_default();
        if reserved(name) {
            return Err(format!(
                "volume name {name:?}: names starting with warren- are reserved"
            ));
        }
    }
    for list in ["initContainers", "containers"] {
        for c in pod[list].as_array().into_iter().flatten() {
            let name = c["name"].as_str().unwrap_or_default();
            if reserved(name) {
                return Err(format!(
                    "container name {name:?}: names starting with warren- are reserved"
                ));
            }
            let added = c
                .pointer("/securityContext/capabilities/add")
                .and_then(Value::as_array);
            for cap in added.into_iter().flatten() {
                let cap = cap.as_str().unwrap_or_default();
                let bare = cap.trim_start_matches("CAP_");
                if !BASELINE_CAPABILITIES.contains(&bare) {
                    return Err(format!(
                        "container {name:?} adds capability {cap:?}, beyond the baseline set \
                         objects from Git may add ({})",
                        BASELINE_CAPABILITIES.join(", ")
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The ConfigMaps and Secrets a Deployment's pod uses (volumes, `env`, `envFrom`).
fn references(deployment: &Value) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut config_maps, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    let pod = deployment
        .pointer("/spec/template/spec")
        .cloned()
        .unwrap_or(Value::Null);
    let add = |set: &mut BTreeSet<String>, v: Option<&Value>| {
        if let Some(n) = v.and_then(Value::as_str) {
            set.insert(n.to_owned());
        }
    };
    for v in pod["volumes"].as_array().into_iter().flatten() {
        add(&mut config_maps, v.pointer("/configMap/name"));
        add(&mut secrets, v.pointer("/secret/secretName"));
    }
    for list in ["initContainers", "containers"] {
        for c in pod[list].as_array().into_iter().flatten() {
            for e in c["env"].as_array().into_iter().flatten() {
                add(
                    &mut config_maps,
                    e.pointer("/valueFrom/configMapKeyRef/name"),
                );
                add(&mut secrets, e.pointer("/valueFrom/secretKeyRef/name"));
            }
            for e in c["envFrom"].as_array().into_iter().flatten() {
                add(&mut config_maps, e.pointer("/configMapRef/name"));
                add(&mut secrets, e.pointer("/secretRef/name"));
            }
        }
    }
    (config_maps, secrets)
}

/// Whether a Service's selector selects a pod template's labels.
fn selects(service: &Value, template_labels: &Value) -> bool {
    let Some(selector) = service.pointer("/spec/selector").and_then(Value::as_object) else {
        return false;
    };
    !selector.is_empty()
        && selector
            .iter()
            .all(|(k, v)| template_labels.get(k) == Some(v))
}

/// The claims a Deployment's pod mounts.
fn claims_of(deployment: &Value) -> Vec<String> {
    deployment
        .pointer("/spec/template/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.pointer("/persistentVolumeClaim/claimName"))
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

/// Why a unit is not ready, after its replica count: how its containers ended (with their
/// last log lines), its restarts and back-off, or what it waits for; empty when nothing
/// tells.
fn not_ready_because(o: &crate::runtime::ObservedWorkspace, crashes: Option<String>) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(c) = crashes {
        parts.push(c);
    }
    match &o.pod_failure {
        Some(f) => parts.push(format!("{}: {}", f.reason, f.message)),
        None => {
            let waiting = o.deployment.as_ref().and_then(|d| {
                d.pointer("/status/conditions")?
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "Available" && c["status"] == "False")?
                    .get("message")?
                    .as_str()
                    .map(str::to_owned)
            });
            parts.extend(waiting);
        }
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(": {}", parts.join("; "))
    }
}

/// One admitted object.
struct Admitted<'a> {
    manifest: &'a Manifest,
    entry: Entry,
    /// As applied: the source's namespace and labels set.
    body: Value,
}

impl EngineRuntime {
    /// The runtime GitOps units live in (see the module docs); made once, at connect.
    pub(super) fn gitops_engine(&self) -> EngineRuntime {
        self.inner
            .gitops
            .get_or_init(|| {
                let mut config = self.inner.config.clone();
                config.state_dir = self.inner.config.state_dir.join("gitops");
                // Its own (empty) directory: Git may not name the operator's registry
                // credentials.
                config.pull_secrets_dir = Some(config.state_dir.join("pull-secrets"));
                let (changes, _) = tokio::sync::watch::channel(0);
                let sibling = EngineRuntime {
                    inner: Arc::new(Inner {
                        docker: self.inner.docker.clone(),
                        host: self.inner.host.clone(),
                        is_podman: self.inner.is_podman,
                        engine_cdi: self.inner.engine_cdi.clone(),
                        config,
                        owner: format!("{}g", self.inner.owner),
                        changes,
                        locks: Default::default(),
                        builds: Default::default(),
                        starters: Default::default(),
                        restarted: Default::default(),
                        next_starter: std::sync::atomic::AtomicU64::new(0),
                        usable: Default::default(),
                        probing: Default::default(),
                        view: std::sync::Mutex::new(super::observed::View::stale()),
                        index: std::sync::Mutex::default(),
                        looking: tokio::sync::Mutex::new(()),
                        subnets: Default::default(),
                        libpod: std::sync::OnceLock::new(),
                        egress: Default::default(),
                        shutdown: self.inner.shutdown.child_token(),
                        service: tokio::sync::Mutex::new(None),
                        isolation_warning: self.inner.isolation_warning.clone(),
                        firewall: tokio::sync::Mutex::new(None),
                        tools: tokio::sync::Mutex::new(Default::default()),
                        gitops: std::sync::OnceLock::new(),
                        parent: Some(Arc::downgrade(&self.inner)),
                        kubernetes_pods: Some(super::plan::KubernetesPods {
                            user_namespace: self.inner.is_podman,
                            remapped_users: self.inner.remapped_users,
                        }),
                        remapped_users: self.inner.remapped_users,
                        crashes: Default::default(),
                        probers: Default::default(),
                        host_ports: self.inner.host_ports.clone(),
                    }),
                };
                // Its own events (its containers carry its owner id) wake its restarts.
                tokio::spawn(super::background::watch_events(
                    Arc::downgrade(&sibling.inner),
                    sibling.inner.shutdown.clone(),
                ));
                tokio::spawn(super::restarts::supervise(
                    Arc::downgrade(&sibling.inner),
                    sibling.inner.shutdown.clone(),
                ));
                sibling
            })
            .clone()
    }

    fn inventory_path(&self, source: &str) -> PathBuf {
        self.inner
            .config
            .state_dir
            .join("gitops")
            .join("sources")
            .join(format!("{source}.json"))
    }

    /// The source's inventory; `None` when it exists but cannot be read — then nothing may
    /// be pruned (what the source applied is unknown) until a sync writes a new one; the
    /// unreadable file is kept beside it for a person to look at.
    fn read_inventory(&self, source: &str) -> Option<BTreeMap<Entry, String>> {
        let path = self.inventory_path(source);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(BTreeMap::new()),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the GitOps inventory; not pruning");
                return None;
            }
        };
        match serde_json::from_slice::<Inventory>(&bytes) {
            Ok(inv) => Some(inv.objects.into_iter().collect()),
            Err(e) => {
                let aside = path.with_extension("json.unreadable");
                let _ = std::fs::rename(&path, &aside);
                tracing::warn!(path = %path.display(), kept = %aside.display(), error = %e, "the GitOps inventory is unreadable; not pruning until the next sync");
                None
            }
        }
    }

    fn write_inventory(
        &self,
        source: &str,
        entries: &BTreeMap<Entry, String>,
    ) -> Result<(), RuntimeError> {
        let path = self.inventory_path(source);
        let io = |e: std::io::Error| runtime_err(format!("writing {}", path.display()), e);
        if let Some(dir) = path.parent() {
            create_private_dir(dir).map_err(io)?;
        }
        let inv = Inventory {
            objects: entries
                .iter()
                .map(|(e, d)| (e.clone(), d.clone()))
                .collect(),
        };
        let bytes = serde_json::to_vec(&inv)
            .map_err(|e| runtime_err("encoding the GitOps inventory".into(), e))?;
        let tmp = path.with_extension("json.tmp");
        write_private_file(&tmp, &bytes).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Labels of a claim's volume: the sibling's installation, the volume as its own
    /// "workspace", and the source.
    fn claim_labels(
        gitops: &EngineRuntime,
        sync: &GitopsSync<'_>,
        namespace: &str,
        volume: &str,
    ) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                AGENT_ID_LABEL.to_owned(),
                gitops.inner.config.agent_id.to_string(),
            ),
            (OWNER_LABEL.to_owned(), gitops.inner.owner.clone()),
            (WORKSPACE_NAME_LABEL.to_owned(), volume.to_owned()),
            (WORKSPACE_NAMESPACE_LABEL.to_owned(), namespace.to_owned()),
            (GITOPS_AGENT_LABEL.to_owned(), sync.agent.to_owned()),
            (GITOPS_SOURCE_LABEL.to_owned(), sync.source.name.clone()),
        ])
    }

    /// Removes what an object that left Git realised on the engine; whether anything was
    /// removed. A Deployment's unit is deleted (its own volumes with it, never a claim's); a
    /// claim's volume only while no container uses it; the data kinds and Services live on
    /// in no engine object of their own (the units were applied without them already).
    async fn prune_unit_object(
        &self,
        gitops: &EngineRuntime,
        sync: &GitopsSync<'_>,
        e: &Entry,
    ) -> Result<bool, String> {
        match e.kind.as_str() {
            "Deployment" => {
                let key = WorkspaceKey {
                    namespace: e.namespace.clone(),
                    name: engine_name(sync, "Deployment", &e.namespace, &e.name),
                };
                for _ in 0..DELETE_ROUNDS {
                    match gitops.delete(&key).await {
                        Ok(warren_types::reconcile::TerminationProgress::Terminated) => {
                            return Ok(true)
                        }
                        Ok(_) => {}
                        Err(RuntimeError::NotFound(_)) => return Ok(false),
                        Err(err) => return Err(warren_types::error_chain(&err)),
                    }
                }
                Err("its containers are still being removed; retried at the next sync".into())
            }
            "PersistentVolumeClaim" => {
                let volume = engine_name(sync, "PersistentVolumeClaim", &e.namespace, &e.name);
                let docker = &gitops.inner.docker;
                let found = match docker.inspect_volume(&volume).await {
                    Ok(v) => v,
                    Err(err) if status_of(&err) == Some(404) => return Ok(false),
                    Err(err) => return Err(super::error_message(&err)),
                };
                let ours = gitops
                    .selector()
                    .workspace(&volume)
                    .matches_map(&found.labels)
                    && found.labels.get(GITOPS_SOURCE_LABEL) == Some(&sync.source.name);
                if !ours {
                    return Ok(false);
                }
                match docker
                    .remove_volume(&volume, None::<RemoveVolumeOptions>)
                    .await
                {
                    Ok(()) => Ok(true),
                    Err(err) if status_of(&err) == Some(404) => Ok(false),
                    Err(err) if status_of(&err) == Some(409) => Err(format!(
                        "volume {volume} is still in use by a container; retried at the next sync"
                    )),
                    Err(err) => Err(super::error_message(&err)),
                }
            }
            _ => Ok(true),
        }
    }
}
