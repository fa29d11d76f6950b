//! The Kubernetes runtime: server-side apply with one field manager, inventory-based prune,
//! watches of the agent's Deployments, Pods and namespaces (by the agent-id label), dialing
//! workspace pods (any port: which ones browsers may reach is the proxy's check) and exec in
//! them (`exec.rs`).
//!
//! A set holding nothing but the Deployment is a partial one (reconcile.md lets a partial
//! response leave out every object that does not change with desired state): it is applied
//! and nothing is pruned. Any other set is the workspace's complete set.
//!
//! Which objects belong to a workspace is recorded in the cluster itself (an inventory
//! ConfigMap `warren-inventory-<name>` in the workspace's namespace), so a restarted agent
//! prunes and deletes exactly what an earlier one applied.
//!
//! A workspace owns its namespace when it is named `warren-ws-<name>` and was created by this
//! agent (labels `warren.dev/agent-id` and `warren.dev/workspace-name`); deleting the
//! workspace then deletes the namespace and relies on the cluster's namespace controller to
//! remove the content (`Terminating` until the namespace is gone; without a namespace
//! controller that never ends). Any other namespace is shared: deletion removes the objects
//! of the inventory and then the inventory, never the namespace.
//!
//! The agent's service account needs, cluster-wide: namespaces get/list/watch/create/delete;
//! deployments and pods list/watch; and in workspace namespaces get/patch/delete on the kinds
//! of [`KINDS`] (server-side apply is a PATCH); pods/exec and pods/portforward (the editor
//! listens on its pod's loopback, reached by port forwarding); and list on
//! `pods.metrics.k8s.io` for what workspaces use (`usage`).
//!
//! Namespaces the agent makes for a workspace are labelled for the API server's PodSecurity
//! admission at the strongest level the workspace's own pod meets (`restricted` unless the
//! agent's configuration allows privilege escalation), and the agent itself holds a devfile
//! component's objects to `restricted` before applying them (components.rs).

mod builds;
mod components;
mod exec;
mod gitops;
mod objects;
mod quantity;
mod seed;
mod space;
mod status;
mod usage;
mod workspace_runtime;

pub use builds::{BuildSettings, BuilderError, ImageBuilder, BUILD_LOG};
pub use components::{ComponentPolicy, DEFAULT_COMPONENT_KINDS};
pub use exec::exit_from_status;
pub use objects::{dedicated_namespace, inventory_name, KINDS, WORKSPACE_NAME_LABEL};
pub use status::{pod_failure, FAILURE_REASONS};

use super::{
    ByteStream, ObservedWorkspace, RuntimeError, WorkspaceKey, WorkspaceRuntime, AGENT_ID_LABEL,
};
use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef as StoreRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use objects::{owns_namespace, ObjectRef};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use warren_types::config::EDITOR_PORT_ANNOTATION;
use warren_types::reconcile::TerminationProgress;
use warren_types::AgentId;

/// Settings of the Kubernetes runtime.
#[derive(Debug, Clone)]
pub struct KubernetesOptions {
    /// The one field manager every object is applied with.
    pub field_manager: String,
    /// How long `list` and `dial` wait for the watches' first complete listing.
    pub ready_timeout: Duration,
    /// How long `dial` waits for a TCP connection to the pod.
    pub dial_timeout: Duration,
    /// What devfile `kubernetes` components may apply.
    pub components: ComponentPolicy,
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        KubernetesOptions {
            field_manager: "warren-agent".into(),
            ready_timeout: Duration::from_secs(10),
            dial_timeout: Duration::from_secs(10),
            components: ComponentPolicy::default(),
        }
    }
}

/// The PodSecurity admission's labels on a workspace's own namespace.
const POD_SECURITY_ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const POD_SECURITY_VERSION: &str = "pod-security.kubernetes.io/enforce-version";

/// The last error a watch reported, kept for `list`'s error when the watches never become ready.
type LastError = Arc<Mutex<Option<String>>>;

/// A `WorkspaceRuntime` on a Kubernetes cluster.
pub struct KubernetesRuntime {
    client: Client,
    agent_id: String,
    options: KubernetesOptions,
    deployments: Store<Deployment>,
    pods: Store<Pod>,
    namespaces: Store<Namespace>,
    changes: watch::Receiver<u64>,
    /// What the watches send `changes` with, for changes they cannot see (builds).
    changed: Arc<watch::Sender<u64>>,
    last_error: LastError,
    tasks: Vec<JoinHandle<()>>,
    /// Whether exec can tell a process where its stdin ends (asked once, see `exec.rs`).
    exec_closes_stdin: tokio::sync::OnceCell<bool>,
    /// Images built at workspaces' starts (`builds`).
    builds: Arc<builds::Builds>,
    /// The seeding containers a copy was started for (`seed`): pod uid, pod, container.
    seeding: Arc<Mutex<std::collections::HashSet<String>>>,
    /// What stopped prebuilds keep (`space`).
    measured: Arc<space::Measured>,
    /// Containers' CPU seconds, integrated from the Metrics API's rates (`usage`).
    usage: std::sync::Arc<usage::Integrated>,
}

impl Drop for KubernetesRuntime {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl KubernetesRuntime {
    /// Starts the watches (Deployments, Pods and namespaces labelled with this agent's id, in
    /// every namespace); must be called within a tokio runtime. The watches retry with
    /// backoff on errors and re-list after reconnecting, so the view survives API outages.
    pub fn new(client: Client, agent_id: AgentId, options: KubernetesOptions) -> Self {
        let agent_id = agent_id.to_string();
        let selector = format!("{AGENT_ID_LABEL}={agent_id}");
        let (sender, changes) = watch::channel(0u64);
        let sender = Arc::new(sender);
        let last_error = LastError::default();
        let (deployments, d) = spawn_reflector(
            Api::<Deployment>::all(client.clone()),
            &selector,
            sender.clone(),
            last_error.clone(),
        );
        let (pods, p) = spawn_reflector(
            Api::<Pod>::all(client.clone()),
            &selector,
            sender.clone(),
            last_error.clone(),
        );
        let (namespaces, n) = spawn_reflector(
            Api::<Namespace>::all(client.clone()),
            &selector,
            sender.clone(),
            last_error.clone(),
        );
        KubernetesRuntime {
            client,
            agent_id,
            options,
            deployments,
            pods,
            namespaces,
            changes,
            changed: sender,
            last_error,
            tasks: vec![d, p, n],
            exec_closes_stdin: tokio::sync::OnceCell::new(),
            builds: Arc::default(),
            seeding: Arc::default(),
            measured: Default::default(),
            usage: Default::default(),
        }
    }

    /// Builds the images workspaces ask for at start with `builder` (without one, such a
    /// workspace is refused by name).
    pub fn with_builder(mut self, builder: ImageBuilder) -> Self {
        self.builds = Arc::new(builds::Builds::new(Some(Arc::new(builder))));
        self
    }

    /// Whether the API server's exec carries the end of stdin (`v5.channel.k8s.io`, from
    /// Kubernetes 1.30); asked once. An unanswered question is asked again next time, and
    /// counts as no meanwhile (holding stdin open loses nothing; closing it loses output).
    async fn exec_closes_stdin(&self) -> bool {
        let asked = self
            .exec_closes_stdin
            .get_or_try_init(|| async {
                let info = self.client.apiserver_version().await?;
                let closes = exec::version_closes_stdin(&info.major, &info.minor);
                tracing::debug!(
                    version = %info.git_version,
                    closes,
                    "the API server's exec tells processes where stdin ends: {closes}"
                );
                Ok::<_, kube::Error>(closes)
            })
            .await;
        match asked {
            Ok(closes) => *closes,
            Err(e) => {
                tracing::debug!(error = %e, "reading the API server's version");
                false
            }
        }
    }

    /// The workspace's Deployment from the watch (a key that cannot be ours, or no such
    /// Deployment: `NotFound`).
    async fn deployment_of(
        &self,
        workspace: &WorkspaceKey,
    ) -> Result<Arc<Deployment>, RuntimeError> {
        objects::check_key(workspace)
            .map_err(|m| RuntimeError::NotFound(format!("workspace {workspace:?} ({m})")))?;
        self.ready().await?;
        let reference = StoreRef::<Deployment>::new(&workspace.name).within(&workspace.namespace);
        self.deployments
            .get(&reference)
            .ok_or_else(|| RuntimeError::NotFound(format!("workspace {workspace}")))
    }

    /// Waits until every watch has listed once, so the stores are a complete view.
    async fn ready(&self) -> Result<(), RuntimeError> {
        let all = async {
            self.deployments.wait_until_ready().await?;
            self.pods.wait_until_ready().await?;
            self.namespaces.wait_until_ready().await
        };
        match tokio::time::timeout(self.options.ready_timeout, all).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(RuntimeError::Runtime {
                context: "watching the kubernetes api".into(),
                source: Box::new(e),
            }),
            Err(_) => {
                let cause = self
                    .last_error
                    .lock()
                    .ok()
                    .and_then(|e| e.clone())
                    .unwrap_or_else(|| "no answer".into());
                Err(RuntimeError::Runtime {
                    context: format!(
                        "listing workspaces: the kubernetes api did not answer within {:?}",
                        self.options.ready_timeout
                    ),
                    source: cause.into(),
                })
            }
        }
    }

    fn inventory_api(&self, workspace: &WorkspaceKey) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &workspace.namespace)
    }

    /// The recorded inventory; `None` when there is none.
    async fn read_inventory(
        &self,
        workspace: &WorkspaceKey,
    ) -> Result<Option<BTreeSet<ObjectRef>>, RuntimeError> {
        let name = inventory_name(&workspace.name);
        let found = self
            .inventory_api(workspace)
            .get_opt(&name)
            .await
            .map_err(|e| runtime_error(format!("reading inventory of {workspace}"), e))?;
        let Some(map) = found else {
            return Ok(None);
        };
        let data = map
            .data
            .as_ref()
            .and_then(|d| d.get(objects::INVENTORY_KEY));
        objects::parse_inventory(data.map(String::as_str))
            .map(Some)
            .map_err(|e| RuntimeError::Runtime {
                context: format!("reading inventory ConfigMap {name} of {workspace}"),
                source: Box::new(e),
            })
    }

    async fn write_inventory(
        &self,
        workspace: &WorkspaceKey,
        entries: &BTreeSet<ObjectRef>,
    ) -> Result<(), RuntimeError> {
        let name = inventory_name(&workspace.name);
        let body = objects::inventory_object(workspace, &self.agent_id, entries);
        self.inventory_api(workspace)
            .patch(&name, &self.patch_params(), &Patch::Apply(&body))
            .await
            .map_err(|e| apply_error(workspace, &format!("ConfigMap {name}"), e))?;
        Ok(())
    }

    fn patch_params(&self) -> PatchParams {
        PatchParams::apply(&self.options.field_manager).force()
    }

    /// Copies the image pull secrets the workspace's ServiceAccount names
    /// (`PULL_SECRET_SOURCES_ANNOTATION`: `namespace/name,…`, the agent configuration's
    /// `image_pull_secrets`) into the workspace's namespace, where the kubelet looks for
    /// them; a copy follows its source at every apply. A missing or unreadable source is an
    /// apply error naming it.
    async fn copy_pull_secrets(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        let apply_err = |message: String| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        };
        for (namespace, name) in objects::pull_secret_sources(objects).map_err(apply_err)? {
            let source = format!("{namespace}/{name}");
            let (namespace, name) = (namespace.as_str(), name.as_str());
            if namespace == workspace.namespace {
                continue;
            }
            let from: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
            let secret = from.get_opt(name).await.map_err(|e| {
                apply_err(format!(
                    "reading image pull secret {namespace}/{name}: {}",
                    warren_types::error_chain(&e)
                ))
            })?;
            let Some(secret) = secret else {
                return Err(apply_err(format!(
                    "image pull secret {namespace}/{name} does not exist (the agent \
                     configuration's image_pull_secrets names it)"
                )));
            };
            let copy = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": workspace.namespace,
                    "labels": {
                        (super::AGENT_ID_LABEL): self.agent_id,
                        (objects::WORKSPACE_NAME_LABEL): workspace.name,
                    },
                    "annotations": {"warren.dev/copied-from": source},
                },
                "type": secret.type_,
                "data": secret.data,
            });
            let to: Api<Secret> = Api::namespaced(self.client.clone(), &workspace.namespace);
            to.patch(name, &self.patch_params(), &Patch::Apply(&copy))
                .await
                .map_err(|e| {
                    apply_err(format!(
                        "copying image pull secret {namespace}/{name}: {}",
                        warren_types::error_chain(&e)
                    ))
                })?;
        }
        Ok(())
    }

    /// Creates the namespace when missing, labelled with this agent (and with the workspace
    /// when it is the workspace's own); an existing shared namespace is left as it is. The
    /// workspace's own namespace carries the PodSecurity admission labels for `level`
    /// (`restricted`, `baseline` or `privileged`), added to one made before them.
    async fn ensure_namespace(
        &self,
        workspace: &WorkspaceKey,
        level: &str,
    ) -> Result<(), RuntimeError> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let existing = api
            .get_opt(&workspace.namespace)
            .await
            .map_err(|e| runtime_error(format!("reading namespace of {workspace}"), e))?;
        let own = owns_namespace(workspace);
        let security: BTreeMap<String, String> = if own {
            [
                (POD_SECURITY_ENFORCE.to_owned(), level.to_owned()),
                (POD_SECURITY_VERSION.to_owned(), "latest".to_owned()),
            ]
            .into()
        } else {
            BTreeMap::new()
        };
        if let Some(ns) = existing {
            if ns.metadata.deletion_timestamp.is_some() {
                return Err(RuntimeError::Apply {
                    workspace: workspace.to_string(),
                    message: format!("namespace {} is being deleted", workspace.namespace),
                });
            }
            let labels = ns.metadata.labels.unwrap_or_default();
            let missing = security.iter().any(|(k, v)| labels.get(k) != Some(v));
            if missing {
                let patch = serde_json::json!({"metadata": {"labels": security}});
                api.patch(
                    &workspace.namespace,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
                .map_err(|e| {
                    apply_error(
                        workspace,
                        &format!("Namespace {} (Pod Security labels)", workspace.namespace),
                        e,
                    )
                })?;
            }
            return Ok(());
        }
        let mut labels = BTreeMap::from([(AGENT_ID_LABEL.to_owned(), self.agent_id.clone())]);
        if own {
            labels.insert(WORKSPACE_NAME_LABEL.to_owned(), workspace.name.clone());
            labels.extend(security);
        }
        let mut ns = Namespace::default();
        ns.metadata.name = Some(workspace.namespace.clone());
        ns.metadata.labels = Some(labels);
        match api.create(&PostParams::default(), &ns).await {
            Ok(_) => {
                tracing::debug!(namespace = %workspace.namespace, "created the workspace's namespace");
                Ok(())
            }
            // Created concurrently (another apply of a workspace sharing it): fine.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(apply_error(
                workspace,
                &format!("Namespace {}", workspace.namespace),
                e,
            )),
        }
    }

    /// A connection to `port` on the loopback of `pod`, through the API server's port
    /// forwarding (the editor listens there, out of every other pod's reach).
    async fn forward(
        &self,
        workspace: &WorkspaceKey,
        pod: &str,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let context = || format!("forwarding port {port} of workspace {workspace}");
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &workspace.namespace);
        let ports = [port];
        let forwarding =
            tokio::time::timeout(self.options.dial_timeout, pods.portforward(pod, &ports));
        let mut forwarder = match forwarding.await {
            Ok(Ok(f)) => f,
            Ok(Err(e)) => return Err(runtime_error(context(), e)),
            Err(_) => {
                return Err(RuntimeError::Runtime {
                    context: context(),
                    source: "the API server did not answer in time".into(),
                })
            }
        };
        let Some(stream) = forwarder.take_stream(port) else {
            return Err(RuntimeError::Runtime {
                context: context(),
                source: "the forwarder has no stream for the port".into(),
            });
        };
        let (workspace, pod) = (workspace.to_string(), pod.to_owned());
        // The forwarder's task ends when either side closes; what it says then is only logged
        // (the connection's user sees the stream end).
        tokio::spawn(async move {
            if let Err(e) = forwarder.join().await {
                tracing::debug!(%workspace, %pod, port, error = %warren_types::error_chain(&e), "port forwarding ended");
            }
        });
        Ok(Box::new(stream))
    }

    fn dynamic_api(
        &self,
        workspace: &WorkspaceKey,
        entry: &ObjectRef,
    ) -> Option<Api<DynamicObject>> {
        let resource = entry.resource()?;
        Some(Api::namespaced_with(
            self.client.clone(),
            &workspace.namespace,
            &resource,
        ))
    }

    /// Deletes one object; a missing one counts as deleted.
    async fn delete_object(
        &self,
        workspace: &WorkspaceKey,
        entry: &ObjectRef,
    ) -> Result<(), RuntimeError> {
        let Some(api) = self.dynamic_api(workspace, entry) else {
            return Ok(());
        };
        match api.delete(&entry.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(runtime_error(format!("deleting {entry} of {workspace}"), e)),
        }
    }

    async fn exists(
        &self,
        workspace: &WorkspaceKey,
        entry: &ObjectRef,
    ) -> Result<bool, RuntimeError> {
        let Some(api) = self.dynamic_api(workspace, entry) else {
            return Ok(false);
        };
        api.get_opt(&entry.name)
            .await
            .map(|o| o.is_some())
            .map_err(|e| runtime_error(format!("reading {entry} of {workspace}"), e))
    }

    /// Deletes the workspace's namespace when it is its own and was created by this agent.
    /// `None` when the namespace is not the workspace's to delete.
    async fn delete_namespace(
        &self,
        workspace: &WorkspaceKey,
    ) -> Result<Option<TerminationProgress>, RuntimeError> {
        if !owns_namespace(workspace) {
            return Ok(None);
        }
        let api: Api<Namespace> = Api::all(self.client.clone());
        let found = api
            .get_opt(&workspace.namespace)
            .await
            .map_err(|e| runtime_error(format!("reading namespace of {workspace}"), e))?;
        let Some(ns) = found else {
            tracing::debug!(namespace = %workspace.namespace, "the workspace's namespace is gone");
            return Ok(Some(TerminationProgress::Terminated));
        };
        let labels = ns.metadata.labels.clone().unwrap_or_default();
        let ours = labels.get(AGENT_ID_LABEL) == Some(&self.agent_id)
            && labels.get(WORKSPACE_NAME_LABEL) == Some(&workspace.name);
        if !ours {
            tracing::debug!(namespace = %workspace.namespace, "not the workspace's own namespace: deleting its objects only");
            return Ok(None);
        }
        if ns.metadata.deletion_timestamp.is_none() {
            tracing::debug!(namespace = %workspace.namespace, "deleting the workspace's namespace");
            match api
                .delete(&workspace.namespace, &DeleteParams::background())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Ok(Some(TerminationProgress::Terminated));
                }
                Err(e) => {
                    return Err(runtime_error(
                        format!("deleting namespace {}", workspace.namespace),
                        e,
                    ));
                }
            }
        }
        Ok(Some(TerminationProgress::Terminating))
    }
}

fn spawn_reflector<K>(
    api: Api<K>,
    selector: &str,
    changes: Arc<watch::Sender<u64>>,
    last_error: LastError,
) -> (Store<K>, JoinHandle<()>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = watcher(api, watcher::Config::default().labels(selector))
        .default_backoff()
        .reflect(writer);
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => {
                    if let Ok(mut e) = last_error.lock() {
                        *e = None;
                    }
                    changes.send_modify(|v| *v = v.wrapping_add(1));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "kubernetes watch failed, retrying");
                    if let Ok(mut last) = last_error.lock() {
                        *last = Some(e.to_string());
                    }
                }
            }
        }
    });
    (reader, task)
}

/// An error reaching or reading the API server.
fn runtime_error(context: String, e: kube::Error) -> RuntimeError {
    RuntimeError::Runtime {
        context,
        source: Box::new(e),
    }
}

/// An error applying an object: the API server's refusals (validation, conflicts, admission,
/// a namespace being deleted) are `Apply` with its message; everything else is `Runtime`.
fn apply_error(workspace: &WorkspaceKey, what: &str, e: kube::Error) -> RuntimeError {
    match e {
        kube::Error::Api(resp) if matches!(resp.code, 400 | 403 | 404 | 409 | 422) => {
            RuntimeError::Apply {
                workspace: workspace.to_string(),
                message: format!("{what}: {}", resp.message),
            }
        }
        e => runtime_error(format!("applying {what} of {workspace}"), e),
    }
}
