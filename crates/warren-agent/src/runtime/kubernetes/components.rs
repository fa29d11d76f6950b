//! Objects of devfile `kubernetes`/`openshift` components (`warren ws run` of an `apply`
//! command): applied server-side into the workspace's namespace with this agent's field
//! manager, labelled with the agent, the workspace and the component, and recorded in an
//! inventory per component so a second apply prunes exactly what left the manifest and the
//! workspace's deletion removes them all.
//!
//! The agent applies them with its own, cluster-wide rights, so it judges them first
//! (`warren-admission`): only kinds and Service types the agent's admin allowed
//! ([`ComponentPolicy`]; Ingresses and Routes, NodePorts and LoadBalancers reach past the
//! proxy and are off by default), every pod meeting Kubernetes' `restricted` Pod Security
//! Standard, no label of Warren's own domain (its NetworkPolicies trust those), and only in a
//! namespace of the workspace's own (the workspace NetworkPolicy covers every pod there).

use super::objects::{ObjectRef, WORKSPACE_NAME_LABEL};
use super::{apply_error, runtime_error, KubernetesRuntime};
use crate::runtime::{RuntimeError, WorkspaceKey, AGENT_ID_LABEL};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch};
use kube::core::ApiResource;
use serde_json::Value;
use std::collections::BTreeSet;

/// Label naming the devfile component an object was applied for. Not `warren.dev/component`,
/// whose value `agent` is what workspaces' NetworkPolicies admit: a component named `agent`
/// must not get it.
pub const COMPONENT_LABEL: &str = "warren.dev/devfile-component";
/// Label on a component inventory: the workspace it belongs to.
pub const COMPONENT_OF_LABEL: &str = "warren.dev/component-of";
const INVENTORY_KEY: &str = "objects";

/// The namespaced kinds a devfile component may hold: (apiVersion, kind, plural).
pub const COMPONENT_KINDS: [(&str, &str, &str); 11] = [
    ("v1", "ConfigMap", "configmaps"),
    ("v1", "Secret", "secrets"),
    ("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("v1", "Service", "services"),
    ("v1", "Pod", "pods"),
    ("apps/v1", "Deployment", "deployments"),
    ("apps/v1", "StatefulSet", "statefulsets"),
    ("batch/v1", "Job", "jobs"),
    ("batch/v1", "CronJob", "cronjobs"),
    ("networking.k8s.io/v1", "Ingress", "ingresses"),
    ("route.openshift.io/v1", "Route", "routes"),
];

/// Which component objects an agent applies: kinds of [`COMPONENT_KINDS`] and Service types.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentPolicy {
    pub kinds: Vec<String>,
    pub service_types: Vec<String>,
}

/// Kinds applied unless the admin says otherwise: everything but what publishes a workspace
/// outside the proxy (Ingress, Route).
pub const DEFAULT_COMPONENT_KINDS: &[&str] = &[
    "ConfigMap",
    "Secret",
    "PersistentVolumeClaim",
    "Service",
    "Pod",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
];

impl Default for ComponentPolicy {
    fn default() -> Self {
        ComponentPolicy {
            kinds: DEFAULT_COMPONENT_KINDS
                .iter()
                .map(|k| k.to_string())
                .collect(),
            service_types: warren_admission::DEFAULT_SERVICE_TYPES
                .iter()
                .map(|t| t.to_string())
                .collect(),
        }
    }
}

impl ComponentPolicy {
    /// A policy from an admin's lists, each checked against what Warren knows.
    pub fn new(kinds: Vec<String>, service_types: Vec<String>) -> Result<ComponentPolicy, String> {
        for k in &kinds {
            if !COMPONENT_KINDS.iter().any(|(_, known, _)| known == k) {
                let known: Vec<&str> = COMPONENT_KINDS.iter().map(|(_, k, _)| *k).collect();
                return Err(format!(
                    "component kind {k:?} is not one Warren applies ({})",
                    known.join(", ")
                ));
            }
        }
        for t in &service_types {
            if !warren_admission::SERVICE_TYPES.contains(&t.as_str()) {
                return Err(format!(
                    "Service type {t:?} is not one of {}",
                    warren_admission::SERVICE_TYPES.join(", ")
                ));
            }
        }
        Ok(ComponentPolicy {
            kinds,
            service_types,
        })
    }
}

fn resource(api_version: &str, kind: &str) -> Option<ApiResource> {
    super::objects::resource_in(&COMPONENT_KINDS, api_version, kind)
}

/// Sets `protocol: TCP` on ports that name none: the API server's defaulting, which its
/// server-side apply (1.20) needs done beforehand for lists keyed by port and protocol.
fn default_protocols(body: &mut Value) {
    fn ports(list: Option<&mut Value>) {
        for p in list.and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(o) = p.as_object_mut() {
                o.entry("protocol").or_insert_with(|| "TCP".into());
            }
        }
    }
    fn pod_spec(spec: Option<&mut Value>) {
        let Some(spec) = spec else { return };
        for key in ["containers", "initContainers"] {
            for c in spec
                .get_mut(key)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                ports(c.get_mut("ports"));
            }
        }
    }
    match body["kind"].as_str() {
        Some("Service") => ports(body.pointer_mut("/spec/ports")),
        Some("Pod") => pod_spec(body.get_mut("spec")),
        Some("Deployment" | "StatefulSet" | "Job") => {
            pod_spec(body.pointer_mut("/spec/template/spec"))
        }
        Some("CronJob") => pod_spec(body.pointer_mut("/spec/jobTemplate/spec/template/spec")),
        _ => {}
    }
}

fn inventory_name(workspace: &str, component: &str) -> String {
    format!("warren-component-{workspace}-{component}")
}

impl KubernetesRuntime {
    fn configmaps(&self, workspace: &WorkspaceKey) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &workspace.namespace)
    }

    async fn component_inventory(
        &self,
        workspace: &WorkspaceKey,
        name: &str,
    ) -> Result<BTreeSet<ObjectRef>, RuntimeError> {
        let found = self
            .configmaps(workspace)
            .get_opt(name)
            .await
            .map_err(|e| runtime_error(format!("reading ConfigMap {name} of {workspace}"), e))?;
        let text = found
            .and_then(|c| c.data)
            .and_then(|d| d.get(INVENTORY_KEY).cloned());
        match text {
            None => Ok(BTreeSet::new()),
            Some(t) => serde_json::from_str(&t).map_err(|e| RuntimeError::Runtime {
                context: format!("reading ConfigMap {name} of {workspace}"),
                source: Box::new(e),
            }),
        }
    }

    async fn write_component_inventory(
        &self,
        workspace: &WorkspaceKey,
        component: &str,
        entries: &BTreeSet<ObjectRef>,
    ) -> Result<(), RuntimeError> {
        let name = inventory_name(&workspace.name, component);
        let body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": workspace.namespace,
                "labels": {
                    AGENT_ID_LABEL: self.agent_id,
                    WORKSPACE_NAME_LABEL: workspace.name,
                    COMPONENT_OF_LABEL: workspace.name,
                    COMPONENT_LABEL: component,
                },
            },
            "data": { INVENTORY_KEY: serde_json::to_string(entries).unwrap_or_else(|_| "[]".into()) },
        });
        self.configmaps(workspace)
            .patch(&name, &self.patch_params(), &Patch::Apply(&body))
            .await
            .map_err(|e| apply_error(workspace, &format!("ConfigMap {name}"), e))?;
        Ok(())
    }

    async fn delete_component_object(
        &self,
        workspace: &WorkspaceKey,
        entry: &ObjectRef,
    ) -> Result<(), RuntimeError> {
        let Some(res) = resource(&entry.api_version, &entry.kind) else {
            return Ok(());
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &workspace.namespace, &res);
        match api.delete(&entry.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(runtime_error(format!("deleting {entry} of {workspace}"), e)),
        }
    }

    /// Refuses to take over an object the component did not make: one of the workspace's
    /// (a pull secret's copy, say, which is in no inventory), another component's, or anything
    /// else in the namespace.
    async fn check_existing(
        &self,
        workspace: &WorkspaceKey,
        component: &str,
        prepared: &[(ObjectRef, ApiResource, Value)],
    ) -> Result<(), String> {
        for (reference, res, _) in prepared {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &workspace.namespace, res);
            let existing = api
                .get_opt(&reference.name)
                .await
                .map_err(|e| format!("reading {reference}: {}", warren_types::error_chain(&e)))?;
            let Some(existing) = existing else { continue };
            let labels = existing.metadata.labels.unwrap_or_default();
            let ours = labels.get(COMPONENT_OF_LABEL) == Some(&workspace.name)
                && labels.get(COMPONENT_LABEL).map(String::as_str) == Some(component);
            if !ours {
                return Err(format!(
                    "{reference} already exists and is not this component's; give the component's object another name"
                ));
            }
        }
        Ok(())
    }

    /// Refuses pods that read a Secret no component of the workspace made: the kubelet hands
    /// a pod any Secret of its namespace it names, and the namespace holds the workspace's
    /// Git credentials and copies of the admin's registry credentials.
    async fn check_secret_references(
        &self,
        workspace: &WorkspaceKey,
        objects: &[Value],
        current: &BTreeSet<ObjectRef>,
    ) -> Result<(), String> {
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &workspace.namespace);
        for object in objects {
            for name in warren_admission::secret_references(object) {
                if current.iter().any(|r| r.kind == "Secret" && r.name == name) {
                    continue;
                }
                let found = secrets.get_metadata_opt(&name).await.map_err(|e| {
                    format!("reading Secret {name}: {}", warren_types::error_chain(&e))
                })?;
                let a_components = found.is_some_and(|s| {
                    s.metadata
                        .labels
                        .unwrap_or_default()
                        .get(COMPONENT_OF_LABEL)
                        == Some(&workspace.name)
                });
                if !a_components {
                    return Err(format!(
                        "{} {} reads Secret {name}, which no component of the workspace made; a component's pods read only Secrets its components apply",
                        object["kind"].as_str().unwrap_or("object"),
                        object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
                    ));
                }
            }
        }
        Ok(())
    }

    /// Applies `objects` as devfile component `component` of the workspace; what was done,
    /// one line per object.
    pub(super) async fn apply_component_objects(
        &self,
        workspace: &WorkspaceKey,
        component: &str,
        objects: &[Value],
    ) -> Result<Vec<String>, RuntimeError> {
        let refuse = |message: String| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message: format!("component {component}: {message}"),
        };
        super::objects::check_key(workspace).map_err(&refuse)?;
        if !super::objects::owns_namespace(workspace) {
            return Err(refuse(format!(
                "the workspace is in the shared namespace {:?}; components are applied only in a workspace's own namespace, where its NetworkPolicy covers them",
                workspace.namespace
            )));
        }
        let policy = &self.options.components;
        // The workspace's own objects are not the component's to change.
        let own = self.read_inventory(workspace).await?.unwrap_or_default();
        let mut prepared = Vec::new();
        let mut current = BTreeSet::new();
        for (i, o) in objects.iter().enumerate() {
            let text = |f: &str| o.get(f).and_then(Value::as_str).unwrap_or("").to_owned();
            let (api_version, kind) = (text("apiVersion"), text("kind"));
            let name = o
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let Some(res) = resource(&api_version, &kind) else {
                let allowed: Vec<&str> = COMPONENT_KINDS.iter().map(|(_, k, _)| *k).collect();
                return Err(refuse(format!(
                    "object {} ({kind} {name}, apiVersion {api_version}): Warren applies only these namespaced kinds for devfile components: {}",
                    i + 1,
                    allowed.join(", ")
                )));
            };
            if !policy.kinds.contains(&kind) {
                return Err(refuse(format!(
                    "object {} ({kind} {name}): kind {kind} is not allowed on this agent (allowed: {})",
                    i + 1,
                    policy.kinds.join(", ")
                )));
            }
            if name.is_empty() {
                return Err(refuse(format!(
                    "object {} ({kind}) has no metadata.name",
                    i + 1
                )));
            }
            if name.starts_with("warren-") {
                return Err(refuse(format!(
                    "{kind} {name}: names starting with warren- are Warren's own"
                )));
            }
            let violations = warren_admission::tenant_object(o, &policy.service_types);
            if !violations.is_empty() {
                return Err(refuse(format!(
                    "{kind} {name} is refused: {} (Warren holds component pods to Kubernetes' restricted Pod Security Standard)",
                    warren_admission::describe(&violations)
                )));
            }
            let reference = ObjectRef {
                api_version: api_version.clone(),
                kind: kind.clone(),
                name: name.clone(),
            };
            if own.iter().any(|r| r.kind == kind && r.name == name) {
                return Err(refuse(format!(
                    "{kind} {name} is an object of the workspace itself; give the component's object another name"
                )));
            }
            let mut body = o.clone();
            let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) else {
                return Err(refuse(format!("{kind} {name}: metadata is not a mapping")));
            };
            super::objects::place_in_namespace(meta, workspace).map_err(|ns| {
                refuse(format!(
                    "{kind} {name} is in namespace {ns:?}; a component's objects go in the workspace's {:?}",
                    workspace.namespace
                ))
            })?;
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Default::default()));
            let Some(labels) = labels.as_object_mut() else {
                return Err(refuse(format!(
                    "{kind} {name}: metadata.labels is not a mapping"
                )));
            };
            labels.insert(AGENT_ID_LABEL.into(), self.agent_id.clone().into());
            labels.insert(COMPONENT_LABEL.into(), component.into());
            labels.insert(COMPONENT_OF_LABEL.into(), workspace.name.clone().into());
            default_protocols(&mut body);
            if !current.insert(reference.clone()) {
                return Err(refuse(format!("{kind} {name} is in the manifest twice")));
            }
            prepared.push((reference, res, body));
        }
        self.check_existing(workspace, component, &prepared)
            .await
            .map_err(&refuse)?;
        self.check_secret_references(workspace, objects, &current)
            .await
            .map_err(&refuse)?;
        let inventory = inventory_name(&workspace.name, component);
        let previous = self.component_inventory(workspace, &inventory).await?;
        // The union first: an agent dying half-way still knows what to prune next time.
        let union: BTreeSet<ObjectRef> = previous.union(&current).cloned().collect();
        if union != previous {
            self.write_component_inventory(workspace, component, &union)
                .await?;
        }
        let mut done = Vec::new();
        let params = self.patch_params();
        for (reference, res, body) in &prepared {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &workspace.namespace, res);
            api.patch(&reference.name, &params, &Patch::Apply(body))
                .await
                .map_err(|e| apply_error(workspace, &reference.to_string(), e))?;
            done.push(format!("applied {reference}"));
        }
        for stale in previous.difference(&current) {
            self.delete_component_object(workspace, stale).await?;
            done.push(format!("pruned {stale}"));
        }
        if union != current {
            self.write_component_inventory(workspace, component, &current)
                .await?;
        }
        Ok(done)
    }

    /// Deletes every component object of the workspace and their inventories (for a
    /// workspace in a shared namespace; a dedicated one goes with its namespace).
    pub(super) async fn delete_component_objects(
        &self,
        workspace: &WorkspaceKey,
    ) -> Result<(), RuntimeError> {
        let selector = format!(
            "{COMPONENT_OF_LABEL}={},{AGENT_ID_LABEL}={}",
            workspace.name, self.agent_id
        );
        let inventories = self
            .configmaps(workspace)
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| {
                runtime_error(format!("listing component inventories of {workspace}"), e)
            })?;
        for cm in inventories.items {
            let Some(name) = cm.metadata.name.clone() else {
                continue;
            };
            for entry in self.component_inventory(workspace, &name).await? {
                self.delete_component_object(workspace, &entry).await?;
            }
            match self
                .configmaps(workspace)
                .delete(&name, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    return Err(runtime_error(
                        format!("deleting ConfigMap {name} of {workspace}"),
                        e,
                    ))
                }
            }
        }
        Ok(())
    }
}
