//! GitOps on Kubernetes: a source's objects applied server-side with their own field
//! manager, in dependency order (Namespaces, then CustomResourceDefinitions — waited for
//! until established — then the rest), each labelled with the agent and the source. An
//! inventory ConfigMap per source (`warren-gitops-<source>`, in the source's namespace, or
//! `default` for a cluster source without one) records what the source applied, so pruning
//! deletes exactly what left Git, and only objects that still carry the source's label.
//! An object that exists without the source's label is refused, never taken over: pruning it
//! later would delete something the source did not create.

use super::{runtime_error, KubernetesRuntime};
use crate::runtime::{
    GitopsOutcome, GitopsSync, RuntimeError, GITOPS_AGENT_LABEL, GITOPS_SOURCE_LABEL,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::time::Duration;
use warren_gitops::{Manifest, Rights};
use warren_types::gitops::{ObjectHealth, SyncError};

/// The field manager of GitOps applies (distinct from the workspaces').
pub const GITOPS_FIELD_MANAGER: &str = "warren-gitops";
const INVENTORY_KEY: &str = "objects";
/// How long a CustomResourceDefinition may take to be established before its objects are
/// reported as not served.
const CRD_ESTABLISHED: Duration = Duration::from_secs(30);

/// One applied object, as the inventory records it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Entry {
    api_version: String,
    kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    name: String,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {} {ns}/{}", self.api_version, self.kind, self.name),
            None => write!(f, "{} {} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// How many objects of one sync are applied at a time (after Namespaces and CRDs).
const APPLY_CONCURRENCY: usize = 8;

/// One object ready to apply.
struct Job<'a> {
    manifest: &'a Manifest,
    entry: Entry,
    body: Value,
    api: Api<DynamicObject>,
}

/// What applying one object did.
enum Outcome {
    Applied(Option<ObjectHealth>),
    Unchanged(Option<ObjectHealth>),
    Failed(SyncError),
    /// It exists and is not the source's.
    Foreign(SyncError, Entry),
}

fn rank(kind: &str) -> u8 {
    match kind {
        "Namespace" => 0,
        "CustomResourceDefinition" => 1,
        _ => 2,
    }
}

fn gvk(api_version: &str, kind: &str) -> GroupVersionKind {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    GroupVersionKind::gvk(group, version, kind)
}

fn inventory_name(source: &str) -> String {
    format!("warren-gitops-{source}")
}

fn inventory_namespace(sync: &GitopsSync<'_>) -> String {
    sync.source
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(resp) => resp.message.clone(),
        e => warren_types::error_chain(e),
    }
}

/// Sets `protocol: TCP` where a port list leaves it out (a Service's ports, a pod
/// template's container ports), as the API server's defaulting would. Server-side apply
/// keys these lists by port *and* protocol, and API servers before 1.26 refuse an element
/// without the key ("associative list with keys has an element that omits key field
/// \"protocol\""): manifests as commonly written, Argo CD's guestbook among them, would not
/// apply.
fn default_protocols(body: &mut Value) {
    fn fill(ports: Option<&mut Value>) {
        for p in ports.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(p) = p.as_object_mut() {
                p.entry("protocol").or_insert_with(|| Value::from("TCP"));
            }
        }
    }
    let kind = body["kind"].as_str().unwrap_or_default().to_owned();
    if kind == "Service" {
        fill(body.pointer_mut("/spec/ports"));
    }
    // Only the built-in kinds with pods: a custom resource's schema is its own.
    let pods = [
        "Pod",
        "Deployment",
        "StatefulSet",
        "DaemonSet",
        "ReplicaSet",
        "ReplicationController",
        "Job",
        "CronJob",
    ];
    if !pods.contains(&kind.as_str()) {
        return;
    }
    // A Pod's own spec, or a workload's template (CronJob's one level deeper).
    for spec in [
        "/spec",
        "/spec/template/spec",
        "/spec/jobTemplate/spec/template/spec",
    ] {
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            let Some(containers) = body
                .pointer_mut(&format!("{spec}/{list}"))
                .and_then(Value::as_array_mut)
            else {
                continue;
            };
            for c in containers {
                fill(c.get_mut("ports"));
            }
        }
    }
}

/// Whether a workload is ready, from its status.
fn health(entry: &Entry, object: &Value) -> Option<ObjectHealth> {
    let num = |p: &str| object.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let (ready, message) = match entry.kind.as_str() {
        "Deployment" | "StatefulSet" | "ReplicaSet" => {
            let want = object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            let have = num("/status/readyReplicas");
            (have >= want, format!("{have}/{want} replicas ready"))
        }
        "DaemonSet" => {
            let want = num("/status/desiredNumberScheduled");
            let have = num("/status/numberReady");
            (have >= want, format!("{have}/{want} pods ready"))
        }
        "Job" => {
            let done = num("/status/succeeded") > 0;
            (
                done,
                if done {
                    "complete".into()
                } else {
                    "not complete".into()
                },
            )
        }
        _ => return None,
    };
    Some(ObjectHealth {
        object: entry.to_string(),
        ready,
        message,
    })
}

impl KubernetesRuntime {
    fn gitops_params() -> PatchParams {
        PatchParams::apply(GITOPS_FIELD_MANAGER).force()
    }

    async fn gitops_inventory(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<BTreeSet<Entry>, RuntimeError> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let found = api.get_opt(name).await.map_err(|e| {
            runtime_error(format!("reading GitOps inventory {namespace}/{name}"), e)
        })?;
        let text = found
            .and_then(|c| c.data)
            .and_then(|d| d.get(INVENTORY_KEY).cloned());
        Ok(text
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default())
    }

    async fn write_gitops_inventory(
        &self,
        sync: &GitopsSync<'_>,
        entries: &BTreeSet<Entry>,
    ) -> Result<(), RuntimeError> {
        let namespace = inventory_namespace(sync);
        let name = inventory_name(&sync.source.name);
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    GITOPS_AGENT_LABEL: sync.agent,
                    GITOPS_SOURCE_LABEL: sync.source.name,
                },
            },
            "data": { INVENTORY_KEY: serde_json::to_string(entries).unwrap_or_else(|_| "[]".into()) },
        });
        Api::<ConfigMap>::namespaced(self.client.clone(), &namespace)
            .patch(&name, &Self::gitops_params(), &Patch::Apply(&body))
            .await
            .map_err(|e| {
                runtime_error(format!("writing GitOps inventory {namespace}/{name}"), e)
            })?;
        Ok(())
    }

    fn dynamic(&self, res: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, res),
            None => Api::all_with(self.client.clone(), res),
        }
    }

    /// Waits until the CustomResourceDefinition `name` is established.
    async fn crd_established(&self, name: &str) -> bool {
        let res = ApiResource::from_gvk_with_plural(
            &gvk("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        );
        let api = self.dynamic(&res, None);
        let deadline = tokio::time::Instant::now() + CRD_ESTABLISHED;
        loop {
            if let Ok(crd) = api.get(name).await {
                let established = crd.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True");
                if established {
                    return true;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The API server's resource for `api_version` `kind`. The API server serves a CRD's
    /// kind a moment after the CRD says `Established`, so a kind of a group a CRD of this
    /// sync brings (`brought`) is looked for again until `CRD_ESTABLISHED` has passed.
    async fn discover(
        &self,
        api_version: &str,
        kind: &str,
        brought: bool,
    ) -> Result<(ApiResource, ApiCapabilities), String> {
        let deadline = tokio::time::Instant::now() + CRD_ESTABLISHED;
        loop {
            match kube::discovery::pinned_kind(&self.client, &gvk(api_version, kind)).await {
                Ok(found) => return Ok(found),
                Err(_) if brought && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => {
                    return Err(format!(
                        "the API server does not serve {api_version} {kind}: {}",
                        kube_message(&e)
                    ))
                }
            }
        }
    }

    /// See the module docs.
    pub(super) async fn sync_gitops_objects(
        &self,
        sync: &GitopsSync<'_>,
    ) -> Result<GitopsOutcome, RuntimeError> {
        let rights = Rights::new(sync.source, sync.policy);
        let inv_ns = inventory_namespace(sync);
        let inv_name = inventory_name(&sync.source.name);
        let previous = self.gitops_inventory(&inv_ns, &inv_name).await?;
        let mut out = GitopsOutcome::default();
        let mut kinds: HashMap<(String, String), Result<(ApiResource, ApiCapabilities), String>> =
            HashMap::new();
        let mut wanted: BTreeSet<Entry> = BTreeSet::new();
        for rank_now in 0..=2u8 {
            let mut jobs: Vec<Job<'_>> = Vec::new();
            for m in sync.objects.iter().filter(|m| rank(m.kind()) == rank_now) {
                let error = |message: String| SyncError {
                    file: Some(m.file.clone()),
                    object: Some(m.display()),
                    message,
                };
                let key = (m.api_version().to_owned(), m.kind().to_owned());
                // Looked up once per kind, and only now: a kind a CRD of this sync brings
                // exists once that CRD (an earlier rank) is established.
                if !kinds.contains_key(&key) {
                    let brought = brought_by_a_crd(sync.objects, &key.0);
                    let found = self.discover(&key.0, &key.1, brought).await;
                    kinds.insert(key.clone(), found);
                }
                let (res, caps) = match &kinds[&key] {
                    Ok(x) => x.clone(),
                    Err(m2) => {
                        out.errors.push(error(m2.clone()));
                        continue;
                    }
                };
                let namespaced = caps.scope == Scope::Namespaced;
                let namespace = match rights.admit(m, Some(namespaced)) {
                    Ok(ns) => ns,
                    Err(message) => {
                        out.errors.push(error(message));
                        // Refused now, but what it was is not deleted because of it.
                        wanted.insert(Entry {
                            api_version: key.0.clone(),
                            kind: key.1.clone(),
                            namespace: m.namespace().map(str::to_owned),
                            name: m.name().to_owned(),
                        });
                        continue;
                    }
                };
                let entry = Entry {
                    api_version: key.0.clone(),
                    kind: key.1.clone(),
                    namespace: namespace.clone(),
                    name: m.name().to_owned(),
                };
                let mut body = m.object.clone();
                default_protocols(&mut body);
                match &namespace {
                    Some(ns) => body["metadata"]["namespace"] = Value::from(ns.as_str()),
                    None => {
                        if let Some(meta) = body["metadata"].as_object_mut() {
                            meta.remove("namespace");
                        }
                    }
                }
                if let Some(meta) = body["metadata"].as_object_mut() {
                    let labels = meta
                        .entry("labels")
                        .or_insert_with(|| serde_json::json!({}));
                    labels[GITOPS_AGENT_LABEL] = Value::from(sync.agent);
                    labels[GITOPS_SOURCE_LABEL] = Value::from(sync.source.name.as_str());
                }
                let api = self.dynamic(&res, namespace.as_deref());
                wanted.insert(entry.clone());
                jobs.push(Job {
                    manifest: m,
                    entry,
                    body,
                    api,
                });
            }
            // Namespaces and CRDs one by one (a CRD is waited for); the rest, independent of
            // each other, several at a time.
            let width = if rank_now == 2 { APPLY_CONCURRENCY } else { 1 };
            let mut pending = Vec::with_capacity(jobs.len());
            for job in jobs {
                pending.push(self.apply_gitops_object(sync, job));
            }
            let results: Vec<Outcome> = futures::stream::iter(pending)
                .buffer_unordered(width)
                .collect()
                .await;
            for r in results {
                match r {
                    Outcome::Applied(h) => {
                        out.applied += 1;
                        out.health.extend(h);
                    }
                    Outcome::Unchanged(h) => {
                        out.unchanged += 1;
                        out.health.extend(h);
                    }
                    Outcome::Failed(e) => out.errors.push(e),
                    Outcome::Foreign(e, entry) => {
                        out.errors.push(e);
                        // Not the source's: never in its inventory, so never pruned by it.
                        wanted.remove(&entry);
                    }
                }
            }
        }
        let mut inventory = wanted.clone();
        if sync.prune {
            // Dependents before what they live in: custom objects, then CRDs, then Namespaces.
            let mut gone: Vec<&Entry> = previous.difference(&wanted).collect();
            gone.sort_by_key(|e| std::cmp::Reverse(rank(&e.kind)));
            for e in gone {
                match self.prune_one(sync, e).await {
                    Ok(true) => out.pruned += 1,
                    Ok(false) => {}
                    Err(message) => {
                        out.errors
                            .push(crate::runtime::prune_error(e.to_string(), &message));
                        inventory.insert(e.clone());
                    }
                }
            }
        } else {
            inventory.extend(previous);
        }
        self.write_gitops_inventory(sync, &inventory).await?;
        Ok(out)
    }

    /// Applies one object of a sync: refused when it exists without the source's label;
    /// unchanged when the apply left its resourceVersion as it was.
    async fn apply_gitops_object(&self, sync: &GitopsSync<'_>, job: Job<'_>) -> Outcome {
        let m = job.manifest;
        let error = |message: String| SyncError {
            file: Some(m.file.clone()),
            object: Some(m.display()),
            message,
        };
        let existing = match job.api.get_opt(m.name()).await {
            Ok(x) => x,
            Err(e) => return Outcome::Failed(error(format!("reading it: {}", kube_message(&e)))),
        };
        if let Some(x) = &existing {
            let owner = x
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(GITOPS_SOURCE_LABEL));
            if owner.map(String::as_str) != Some(sync.source.name.as_str()) {
                return Outcome::Foreign(
                    error(match owner {
                        Some(other) => format!("is managed by source {other:?}"),
                        None => "exists and was not made by this source; it is not taken over \
                                 (delete it, or give the manifest another name)"
                            .into(),
                    }),
                    job.entry,
                );
            }
        }
        let before_object = existing.as_ref().and_then(|x| serde_json::to_value(x).ok());
        let before = existing.and_then(|x| x.metadata.resource_version);
        match job
            .api
            .patch(m.name(), &Self::gitops_params(), &Patch::Apply(&job.body))
            .await
        {
            Ok(applied) => {
                if job.entry.kind == "CustomResourceDefinition"
                    && !self.crd_established(m.name()).await
                {
                    return Outcome::Failed(error(format!(
                        "was not established within {} s",
                        CRD_ESTABLISHED.as_secs()
                    )));
                }
                let mut h = health(&job.entry, &applied.data);
                if let Some(h) = h.as_mut().filter(|_| job.entry.kind == "Deployment") {
                    if let Some(why) = self.pods_say(&job.entry, &applied.data, h.ready).await {
                        h.message
                            .push_str(&format!("{}{why}", if h.ready { "; " } else { ": " }));
                    }
                }
                let same_version = before.is_some() && applied.metadata.resource_version == before;
                let untouched = before_object.as_ref().is_some_and(|old| {
                    serde_json::to_value(&applied)
                        .is_ok_and(|new| untouched_by_apply(&job.body, old, &new))
                });
                if same_version || untouched {
                    Outcome::Unchanged(h)
                } else {
                    Outcome::Applied(h)
                }
            }
            Err(e) => Outcome::Failed(error(kube_message(&e))),
        }
    }

    /// Why a Deployment's pods are not ready, as their container statuses and the kubelet's
    /// probe events say (how the last run ended, restarts, the waiting reason such as
    /// `CrashLoopBackOff`, the last probe failure); for a ready one, its containers that
    /// restarted. `None` when no pod tells (none yet, or unreadable).
    async fn pods_say(&self, entry: &Entry, deployment: &Value, ready: bool) -> Option<String> {
        let selector = deployment
            .pointer("/spec/selector/matchLabels")?
            .as_object()?
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join(",");
        let namespace = entry.namespace.as_deref()?;
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(self.client.clone(), namespace);
        let list = pods
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .ok()?;
        let mut parts = Vec::new();
        for pod in &list.items {
            let Some(status) = pod.status.as_ref() else {
                continue;
            };
            // Read once per pod, for the first container it concerns.
            let mut probe_failure = None;
            let mut asked = false;
            for c in status.container_statuses.iter().flatten() {
                if c.ready && (!ready || c.restart_count == 0) {
                    continue;
                }
                let mut text = format!("container {}", c.name);
                if let Some(t) = c.last_state.as_ref().and_then(|s| s.terminated.as_ref()) {
                    if t.reason.as_deref() == Some("OOMKilled") {
                        text.push_str(&format!(
                            " was killed for using too much memory (exit code {})",
                            t.exit_code
                        ));
                    } else {
                        text.push_str(&format!(" exited with code {}", t.exit_code));
                    }
                }
                text.push_str(&format!(
                    "; restarted {} time{}",
                    c.restart_count,
                    if c.restart_count == 1 { "" } else { "s" }
                ));
                if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                    text.push_str(&format!("; {}", w.reason.as_deref().unwrap_or("waiting")));
                    if let Some(m) = w.message.as_deref().filter(|m| !m.is_empty()) {
                        text.push_str(&format!(": {m}"));
                    }
                } else if !c.ready && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some() {
                    text.push_str("; running, not ready");
                }
                if !asked {
                    asked = true;
                    probe_failure = self.last_probe_failure(namespace, pod).await;
                }
                if let Some(probe) = &probe_failure {
                    text.push_str(&format!("; {probe}"));
                }
                parts.push(text);
            }
            if !parts.is_empty() {
                break;
            }
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// The kubelet's last probe failure of `pod` ("Readiness probe failed: …"), from its
    /// `Unhealthy` events.
    async fn last_probe_failure(
        &self,
        namespace: &str,
        pod: &k8s_openapi::api::core::v1::Pod,
    ) -> Option<String> {
        let name = pod.metadata.name.as_deref()?;
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(self.client.clone(), namespace);
        let fields = format!("involvedObject.name={name},reason=Unhealthy");
        let list = events
            .list(&kube::api::ListParams::default().fields(&fields))
            .await
            .ok()?;
        list.items
            .iter()
            .max_by_key(|e| {
                e.last_timestamp
                    .as_ref()
                    .map(|t| t.0)
                    .or(e.event_time.as_ref().map(|t| t.0))
            })
            .and_then(|e| e.message.clone())
            .map(|m| m.trim().to_owned())
    }

    /// Deletes an object the source applied and that left Git, if it still carries the
    /// source's label; whether it was deleted.
    async fn prune_one(&self, sync: &GitopsSync<'_>, e: &Entry) -> Result<bool, String> {
        let (res, _) = kube::discovery::pinned_kind(&self.client, &gvk(&e.api_version, &e.kind))
            .await
            .map_err(|err| kube_message(&err))?;
        let api = self.dynamic(&res, e.namespace.as_deref());
        let Some(found) = api
            .get_opt(&e.name)
            .await
            .map_err(|err| kube_message(&err))?
        else {
            return Ok(false);
        };
        let ours = found
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(GITOPS_SOURCE_LABEL))
            .is_some_and(|s| *s == sync.source.name);
        if !ours {
            return Ok(false);
        }
        match api.delete(&e.name, &DeleteParams::background()).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(r)) if r.code == 404 => Ok(false),
            Err(err) => Err(kube_message(&err)),
        }
    }
}

/// Whether an apply of `body` left what it owns as it was, `old` and `new` being the object
/// before and after it: the values at every path the manifest sets, and the set of fields
/// this source's manager owns. Another writer between the read and the apply (the
/// Deployment controller's status and revision annotation, right after a create) changes
/// the resourceVersion without this source having changed anything; CI once counted such a
/// sync of an unchanged commit as an apply.
fn untouched_by_apply(body: &Value, old: &Value, new: &Value) -> bool {
    project(body, old) == project(body, new) && owned_fields(old) == owned_fields(new)
}

/// `of` cut down to the paths `shape` has (list items by position).
fn project(shape: &Value, of: &Value) -> Value {
    match shape {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .map(|(k, v)| (k.clone(), project(v, of.get(k).unwrap_or(&Value::Null))))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| project(v, of.get(i).unwrap_or(&Value::Null)))
                .collect(),
        ),
        _ => of.clone(),
    }
}

/// The fields the source's manager owns by its applies (`managedFields`), if any.
fn owned_fields(object: &Value) -> Option<&Value> {
    object
        .pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|m| m["manager"] == GITOPS_FIELD_MANAGER && m["operation"] == "Apply")
        .map(|m| &m["fieldsV1"])
}

/// Whether a CustomResourceDefinition among `objects` defines group of `api_version`.
fn brought_by_a_crd(objects: &[warren_gitops::Manifest], api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    !group.is_empty()
        && objects
            .iter()
            .any(|o| o.kind() == "CustomResourceDefinition" && o.object["spec"]["group"] == group)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apply_that_changed_nothing_of_its_own_is_told_apart() {
        let body = serde_json::json!({"kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "web", "image": "a:1"}]}}}});
        let owned = |f: &str| {
            serde_json::json!([{"manager": GITOPS_FIELD_MANAGER, "operation": "Apply",
            "fieldsV1": {"f:spec": {f: {}}}}, {"manager": "kube-controller-manager", "operation": "Update"}])
        };
        let object = |image: &str, status: &str, fields: &str| {
            serde_json::json!({"kind": "Deployment",
            "metadata": {"name": "web", "resourceVersion": status, "managedFields": owned(fields),
                         "annotations": {"deployment.kubernetes.io/revision": status}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "web", "image": image, "imagePullPolicy": "IfNotPresent"}]}}},
            "status": {"observedGeneration": status}})
        };
        let old = object("a:1", "1", "f:replicas");
        // The controller wrote its status and annotation in between: nothing of ours changed.
        assert!(untouched_by_apply(
            &body,
            &old,
            &object("a:1", "2", "f:replicas")
        ));
        // A value the manifest sets changed.
        assert!(!untouched_by_apply(
            &body,
            &old,
            &object("a:2", "2", "f:replicas")
        ));
        // The set of fields the source owns changed (one dropped from its manifest).
        assert!(!untouched_by_apply(
            &body,
            &old,
            &object("a:1", "2", "f:template")
        ));
    }
    use serde_json::json;

    #[test]
    fn port_lists_get_the_protocol_server_side_apply_keys_them_by() {
        let mut svc = json!({"kind": "Service", "spec": {"ports": [
            {"port": 80, "targetPort": 80}, {"port": 53, "protocol": "UDP"}]}});
        default_protocols(&mut svc);
        assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(svc["spec"]["ports"][1]["protocol"], "UDP");
        let mut deploy = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "containers": [{"name": "web", "ports": [{"containerPort": 80}]}, {"name": "bare"}],
            "initContainers": [{"name": "init", "ports": [{"containerPort": 9}]}]}}}});
        default_protocols(&mut deploy);
        let spec = &deploy["spec"]["template"]["spec"];
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert!(spec["containers"][1].get("ports").is_none());
        assert_eq!(spec["initContainers"][0]["ports"][0]["protocol"], "TCP");
        // Other kinds' `ports` are theirs.
        let mut other = json!({"kind": "Gateway", "spec": {"ports": [{"port": 1}]}});
        default_protocols(&mut other);
        assert!(other["spec"]["ports"][0].get("protocol").is_none());
    }
}
