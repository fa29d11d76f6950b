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
                        config,
                        owner: format!("{}g", self.inner.owner),
                        changes,
                        locks: Default::default(),
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

    /// See the module docs.
    pub(super) async fn sync_gitops_objects(
        &self,
        sync: &GitopsSync<'_>,
    ) -> Result<GitopsOutcome, RuntimeError> {
        // The name becomes a file name; the relay's word is not trusted alone.
        warren_types::check_name(&sync.source.name).map_err(|e| RuntimeError::Apply {
            workspace: format!("GitOps source {:?}", sync.source.name),
            message: e,
        })?;
        let gitops = self.gitops_engine();
        let rights = Rights::new(sync.source, sync.policy);
        let (previous, prune) = match self.read_inventory(&sync.source.name) {
            Some(p) => (p, sync.prune),
            None => (BTreeMap::new(), false),
        };
        let mut out = GitopsOutcome::default();
        // What the inventory keeps: applied now, or refused now but not deleted because of it.
        let mut keep: BTreeMap<Entry, String> = BTreeMap::new();
        let mut admitted: Vec<Admitted<'_>> = Vec::new();
        let mut seen: BTreeSet<Entry> = BTreeSet::new();
        for m in sync.objects {
            let error = |message: String| SyncError {
                file: Some(m.file.clone()),
                object: Some(m.display()),
                message,
            };
            if !REALISED.contains(&(m.api_version(), m.kind())) {
                out.errors.push(error(format!(
                    "this runtime does not realise {} {} objects from Git (a container engine \
                     realises apps/v1 Deployment and v1 Service, ConfigMap, Secret and \
                     PersistentVolumeClaim)",
                    m.api_version(),
                    m.kind()
                )));
                continue;
            }
            let namespace = match rights.admit(m, Some(true)) {
                Ok(ns) => ns.unwrap_or_else(|| "default".into()),
                Err(message) => {
                    out.errors.push(error(message));
                    // Where it would have gone (as `admit` places it), so what it was is kept.
                    let entry = Entry {
                        api_version: m.api_version().to_owned(),
                        kind: m.kind().to_owned(),
                        namespace: m
                            .namespace()
                            .or(sync.source.namespace.as_deref())
                            .unwrap_or("default")
                            .to_owned(),
                        name: m.name().to_owned(),
                    };
                    if let Some(d) = previous.get(&entry) {
                        keep.insert(entry, d.clone());
                    }
                    continue;
                }
            };
            if !is_dns_label(m.name()) && m.kind() != "ConfigMap" && m.kind() != "Secret" {
                out.errors.push(error(format!(
                    "name {:?} is not a DNS label (lowercase letters, digits and '-', at \
                     most 63)",
                    m.name()
                )));
                continue;
            }
            let entry = Entry {
                api_version: m.api_version().to_owned(),
                kind: m.kind().to_owned(),
                namespace: namespace.clone(),
                name: m.name().to_owned(),
            };
            if !seen.insert(entry.clone()) {
                out.errors.push(error(format!(
                    "{entry} is defined twice; the first definition is applied"
                )));
                continue;
            }
            let mut body = m.object.clone();
            if let Some(meta) = body["metadata"].as_object_mut() {
                meta.insert("namespace".into(), Value::from(namespace.as_str()));
                let labels = meta
                    .entry("labels")
                    .or_insert_with(|| serde_json::json!({}));
                if let Some(labels) = labels.as_object_mut() {
                    // Warren's own labels are not Git's to set (a workspace id would make
                    // the unit look like a workspace).
                    labels.remove(WORKSPACE_ID_LABEL);
                    labels.insert(GITOPS_AGENT_LABEL.into(), Value::from(sync.agent));
                    labels.insert(
                        GITOPS_SOURCE_LABEL.into(),
                        Value::from(sync.source.name.as_str()),
                    );
                }
            }
            admitted.push(Admitted {
                manifest: m,
                entry,
                body,
            });
        }

        // Recorded before anything is applied: a crash in the middle must not leave a unit
        // the inventory does not know (it could never be pruned).
        let mut early = previous.clone();
        for a in &admitted {
            early.entry(a.entry.clone()).or_default();
        }
        self.write_inventory(&sync.source.name, &early)?;

        // Units: each Deployment with what its pod uses from its namespace.
        let claims_in_git: BTreeSet<(String, String)> = admitted
            .iter()
            .filter(|a| a.entry.kind == "PersistentVolumeClaim")
            .map(|a| (a.entry.namespace.clone(), a.entry.name.clone()))
            .collect();
        for d in admitted.iter().filter(|a| a.entry.kind == "Deployment") {
            let ns = &d.entry.namespace;
            let error = |message: String| SyncError {
                file: Some(d.manifest.file.clone()),
                object: Some(d.manifest.display()),
                message,
            };
            if let Err(message) = baseline(&d.body) {
                out.errors.push(error(message));
                if let Some(digest) = previous.get(&d.entry) {
                    keep.insert(d.entry.clone(), digest.clone());
                }
                continue;
            }
            let template_labels = d
                .body
                .pointer("/spec/template/metadata/labels")
                .cloned()
                .unwrap_or(Value::Null);
            let mut services = admitted.iter().filter(|a| {
                a.entry.kind == "Service"
                    && &a.entry.namespace == ns
                    && selects(&a.body, &template_labels)
            });
            let service = services.next();
            for other in services {
                out.errors.push(SyncError {
                    file: Some(other.manifest.file.clone()),
                    object: Some(other.manifest.display()),
                    message: format!(
                        "selects Deployment {ns}/{} whose ports Service {} already publishes; \
                         a container engine publishes one Service per Deployment",
                        d.entry.name,
                        service.map(|s| s.entry.name.as_str()).unwrap_or_default()
                    ),
                });
            }
            let mut shared = SharedClaims::new();
            let mut missing = Vec::new();
            for claim in claims_of(&d.body) {
                let key = (ns.clone(), claim.clone());
                if !claims_in_git.contains(&key) {
                    missing.push(claim);
                    continue;
                }
                let volume = engine_name(sync, "PersistentVolumeClaim", ns, &claim);
                let labels = Self::claim_labels(&gitops, sync, ns, &volume);
                shared.insert(claim, (volume, labels));
            }
            if !missing.is_empty() {
                out.errors.push(error(format!(
                    "mounts PersistentVolumeClaim {} that the source does not define in \
                     namespace {ns}; it is not started",
                    missing.join(", ")
                )));
                if let Some(digest) = previous.get(&d.entry) {
                    keep.insert(d.entry.clone(), digest.clone());
                }
                continue;
            }
            let mut objects: Vec<Value> = vec![d.body.clone()];
            if let Some(s) = service {
                objects.push(s.body.clone());
            }
            // Only what the pod uses: a change elsewhere in the namespace leaves it alone.
            let (config_maps, secrets) = references(&d.body);
            objects.extend(
                admitted
                    .iter()
                    .filter(|a| {
                        &a.entry.namespace == ns
                            && match a.entry.kind.as_str() {
                                "ConfigMap" => config_maps.contains(&a.entry.name),
                                "Secret" => secrets.contains(&a.entry.name),
                                "PersistentVolumeClaim" => shared.contains_key(&a.entry.name),
                                _ => false,
                            }
                    })
                    .map(|a| a.body.clone()),
            );
            let mut parts: Vec<&Value> = objects.iter().collect();
            let shared_json = serde_json::to_value(
                shared
                    .iter()
                    .map(|(c, (v, _))| (c.clone(), v.clone()))
                    .collect::<BTreeMap<_, _>>(),
            )
            .unwrap_or_default();
            parts.push(&shared_json);
            let unit_digest = digest(&parts);
            let key = WorkspaceKey {
                namespace: ns.clone(),
                name: engine_name(sync, "Deployment", ns, &d.entry.name),
            };
            let existed = gitops.read_record(&key.name).is_some();
            let options = ApplyOptions {
                shared,
                complete: true,
            };
            match gitops.apply_with(&key, &objects, &options).await {
                Ok(()) => {
                    if existed && previous.get(&d.entry) == Some(&unit_digest) {
                        out.unchanged += 1;
                    } else {
                        out.applied += 1;
                    }
                    keep.insert(d.entry.clone(), unit_digest);
                }
                Err(e) => {
                    out.errors.push(error(warren_types::error_chain(&e)));
                    if let Some(digest) = previous.get(&d.entry) {
                        keep.insert(d.entry.clone(), digest.clone());
                    }
                }
            }
        }

        // The data kinds: applied is recorded (their effect is in the units that use them).
        for a in admitted.iter().filter(|a| a.entry.kind != "Deployment") {
            let d = digest(&[&a.body]);
            if previous.get(&a.entry) == Some(&d) {
                out.unchanged += 1;
            } else {
                out.applied += 1;
            }
            keep.insert(a.entry.clone(), d);
        }

        if prune {
            let gone: Vec<Entry> = previous
                .keys()
                .filter(|e| !keep.contains_key(*e))
                .cloned()
                .collect();
            // Workloads before the claims they mount.
            let mut gone = gone;
            gone.sort_by_key(|e| e.kind == "PersistentVolumeClaim");
            for e in gone {
                match self.prune_unit_object(&gitops, sync, &e).await {
                    Ok(true) => out.pruned += 1,
                    Ok(false) => {}
                    Err(message) => {
                        out.errors
                            .push(crate::runtime::prune_error(e.to_string(), &message));
                        if let Some(d) = previous.get(&e) {
                            keep.insert(e.clone(), d.clone());
                        }
                    }
                }
            }
        } else {
            for (e, d) in &previous {
                keep.entry(e.clone()).or_insert_with(|| d.clone());
            }
        }
        self.write_inventory(&sync.source.name, &keep)?;

        // Health of the workloads, as the engine reports them now: no engine events reach
        // the units' runtime, so it looks at all of them.
        gitops.look_again_at_all();
        let observed = gitops.list().await.unwrap_or_default();
        for e in keep.keys().filter(|e| e.kind == "Deployment") {
            let unit = engine_name(sync, "Deployment", &e.namespace, &e.name);
            let status = observed.iter().find(|o| o.key.name == unit);
            let Some(o) = status else { continue };
            let Some(d) = o.deployment.as_ref() else {
                continue;
            };
            let want = d
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let have = d
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let mut message = format!("{have}/{want} replicas ready");
            if have < want {
                message.push_str(&not_ready_because(o, gitops.crash_report(&unit)));
            } else if let Some(restarts) = gitops.crash_report(&unit) {
                // Ready again after restarts: what restarted it stays in view, as a pod's
                // restart count and last state do on Kubernetes.
                message.push_str(&format!("; {restarts}"));
            }
            out.health.push(ObjectHealth {
                object: format!("{} {} {}/{}", e.api_version, e.kind, e.namespace, e.name),
                ready: have >= want,
                message,
            });
        }
        Ok(out)
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
