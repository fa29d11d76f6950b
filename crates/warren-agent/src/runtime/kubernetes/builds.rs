//! Images a workspace builds at its start (devfile `autoBuild`, a dev container's `build`
//! and Features, Compose services with a `build`) on a Kubernetes agent: a Docker-compatible
//! engine beside the agent builds them as the engine runtime does (`engine::push`), pushes
//! them to a registry the cluster pulls from, and the workspace's pod runs the pushed
//! references in place of the names its template asks for.
//!
//! An apply whose pod template lists builds (and wants a replica) starts them in a task of
//! its own and returns; until they end, `list` shows the workspace starting (a Deployment
//! of the objects with a rollout under way), after a failure it shows the failure, and when
//! they succeed the task applies the same objects again, now with the pushed references.
//! The next apply of other objects or a delete cancels a build under way; an apply of the
//! same objects leaves it alone. A workspace builds once: later starts find its images on
//! the builder's engine and push them again (a no-op for the registry), so an agent restart
//! costs no rebuild.
//!
//! Tenancy: images of the build registry are run only by the workspace they were built for:
//! their names end in the workspace's unguessable key, and an apply whose objects name the
//! registry's `warren-ws/` images themselves is refused. The builder reads the base images'
//! and Features' registries with the workspace's image pull secrets (the agent
//! configuration's `image_pull_secrets`, copied from the cluster into the builder's
//! pull-secrets directory), and pushes with the credentials of its own push secret, which
//! never reaches a workspace's namespace.

use super::*;
use crate::runtime::engine::push::{check_registry, PushTarget};
use crate::runtime::engine::{objects_digest, EngineConfig, EngineError, EngineRuntime};
use std::collections::HashMap;
use std::path::PathBuf;
use tokio_util::sync::CancellationToken;
use warren_types::reconcile::PodFailure;
use warren_types::relay::IMAGE_BUILDS_ANNOTATION;

/// The container name `warren ws logs --container` reads a workspace's build output with,
/// as on the engine.
pub use crate::runtime::engine::BUILD_LOG;

/// How the builder is set up.
#[derive(Debug, Clone)]
pub struct BuildSettings {
    /// The engine's API (`unix://…`, `tcp://…`); `None` finds one as the engine runtime does.
    pub engine: Option<String>,
    /// Where images are pushed and the cluster pulls them from: `host[:port][/path]`.
    pub registry: String,
    /// `namespace/name` of a `kubernetes.io/dockerconfigjson` Secret with the credentials
    /// for pushing there; `None` pushes anonymously.
    pub push_secret: Option<String>,
    /// The builder's own files (records, build logs, copies of pull secrets).
    pub state_dir: PathBuf,
    /// Registries the agent reaches over plain HTTP for Features.
    pub plain_http_registries: Vec<String>,
    /// Special-purpose ranges the agent's fetches of Features may reach.
    pub outbound_allow: Vec<ipnet::IpNet>,
}

impl BuildSettings {
    /// Checks what can be checked before anything connects.
    pub fn validate(&self) -> Result<(), String> {
        check_registry(&self.registry)?;
        if let Some(secret) = &self.push_secret {
            objects::secret_source(secret)?;
        }
        Ok(())
    }
}

/// Why the builder could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuilderError {
    #[error("invalid build settings: {0}")]
    Settings(String),
    #[error("connecting to the engine that builds images")]
    Engine(#[source] EngineError),
}

/// The engine that builds and where it pushes.
pub struct ImageBuilder {
    engine: EngineRuntime,
    registry: String,
    push_secret: Option<(String, String)>,
}

impl std::fmt::Debug for ImageBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageBuilder")
            .field("engine", &self.engine.host())
            .field("registry", &self.registry)
            .field("push_secret", &self.push_secret)
            .finish()
    }
}

impl ImageBuilder {
    /// Connects to the engine (starting `podman system service` when only the binary
    /// exists, as the engine runtime does).
    pub async fn connect(agent: AgentId, settings: BuildSettings) -> Result<Self, BuilderError> {
        settings.validate().map_err(BuilderError::Settings)?;
        let mut config = EngineConfig::new(agent, &settings.state_dir);
        config.host = settings.engine.clone();
        config.plain_http_registries = settings.plain_http_registries.clone();
        config.outbound_allow = settings.outbound_allow.clone();
        let engine = EngineRuntime::connect_builder(config)
            .await
            .map_err(BuilderError::Engine)?;
        let push_secret = match &settings.push_secret {
            Some(s) => Some(objects::secret_source(s).map_err(BuilderError::Settings)?),
            None => None,
        };
        Ok(ImageBuilder {
            engine,
            registry: settings.registry,
            push_secret,
        })
    }

    /// The engine that builds (its handle is shared).
    pub fn engine(&self) -> &EngineRuntime {
        &self.engine
    }
}

/// Where one workspace's builds stand.
enum Phase {
    Running(CancellationToken),
    Failed(PodFailure),
    /// Requested name → pushed reference.
    Done(BTreeMap<String, String>),
}

struct WorkspaceBuild {
    key: WorkspaceKey,
    /// The pod template's list of builds: what was built.
    tasks: String,
    /// The objects the build was started for: what a running or failed build answers.
    digest: String,
    /// Their Deployment, shown while the build runs or after it failed.
    deployment: serde_json::Value,
    /// Changes with each phase, as a resourceVersion does.
    generation: u64,
    phase: Phase,
}

/// The runtime's builds at start: by workspace name, where its builds stand. An entry lives
/// until the workspace is deleted or applied without builds.
#[derive(Default)]
pub(super) struct Builds {
    builder: Option<Arc<ImageBuilder>>,
    state: Mutex<HashMap<String, WorkspaceBuild>>,
    generation: std::sync::atomic::AtomicU64,
}

impl Builds {
    pub(super) fn new(builder: Option<Arc<ImageBuilder>>) -> Self {
        Builds {
            builder,
            ..Default::default()
        }
    }

    fn next_generation(&self) -> u64 {
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// What an apply does with objects that may list builds.
pub(super) enum Prepared {
    /// Apply these (the pushed references in place of the requested names).
    Apply(Vec<serde_json::Value>),
    /// A build runs (or failed) for these objects: nothing to apply now.
    Building,
}

/// The pod template's containers and init containers whose image is a key of `pushed` run
/// the pushed reference instead.
pub(super) fn use_pushed(
    objects: &[serde_json::Value],
    pushed: &BTreeMap<String, String>,
) -> Vec<serde_json::Value> {
    let mut out = objects.to_vec();
    for o in out.iter_mut().filter(|o| o["kind"] == "Deployment") {
        for list in ["containers", "initContainers"] {
            let Some(containers) = o
                .pointer_mut(&format!("/spec/template/spec/{list}"))
                .and_then(serde_json::Value::as_array_mut)
            else {
                continue;
            };
            for c in containers {
                let Some(image) = c["image"].as_str() else {
                    continue;
                };
                if let Some(reference) = pushed.get(image) {
                    c["image"] = serde_json::Value::String(reference.clone());
                    // The reference names one image for good: a node that has it uses it.
                    c["imagePullPolicy"] = serde_json::Value::String("IfNotPresent".into());
                }
            }
        }
    }
    out
}

/// The first image of the objects' pod templates that names the build registry's workspace
/// images.
fn names_built_image(objects: &[serde_json::Value], registry: &str) -> Option<String> {
    let prefix = format!("{registry}/warren-ws/");
    objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .flat_map(|o| {
            ["containers", "initContainers"]
                .into_iter()
                .flat_map(move |list| {
                    o.pointer(&format!("/spec/template/spec/{list}"))
                        .and_then(serde_json::Value::as_array)
                        .into_iter()
                        .flatten()
                })
        })
        .filter_map(|c| c["image"].as_str())
        // Host names are case-insensitive: `Registry.Example.com/…` is the same registry.
        .find(|i| i.to_ascii_lowercase().starts_with(&prefix))
        .map(str::to_owned)
}

/// Whether a Deployment the cluster has wants its pod running.
fn wants_a_replica(deployment: Option<&serde_json::Value>) -> bool {
    deployment
        .and_then(|d| d.pointer("/spec/replicas"))
        .and_then(serde_json::Value::as_i64)
        .is_some_and(|r| r > 0)
}

/// What `list` shows of a workspace whose build runs or failed: its Deployment with a
/// rollout under way (starting), with a resourceVersion of the build's own.
fn building_deployment(deployment: &serde_json::Value, generation: u64) -> serde_json::Value {
    let mut d = deployment.clone();
    d["metadata"]["resourceVersion"] =
        serde_json::Value::String(format!("warren-build-{generation}"));
    d["status"] = serde_json::json!({
        "observedGeneration": 0,
        "replicas": 0,
        "conditions": [
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
             "message": "the workspace's images are being built"},
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        ],
    });
    d
}

impl KubernetesRuntime {
    /// A second handle on this runtime for a task: the same client, watches and builds,
    /// owning none of the watch tasks (dropping it stops nothing).
    pub(super) fn handle(&self) -> KubernetesRuntime {
        KubernetesRuntime {
            client: self.client.clone(),
            agent_id: self.agent_id.clone(),
            options: self.options.clone(),
            deployments: self.deployments.clone(),
            pods: self.pods.clone(),
            namespaces: self.namespaces.clone(),
            changes: self.changes.clone(),
            changed: self.changed.clone(),
            last_error: self.last_error.clone(),
            tasks: vec![],
            exec_closes_stdin: tokio::sync::OnceCell::new(),
            builds: self.builds.clone(),
            seeding: self.seeding.clone(),
            measured: self.measured.clone(),
            usage: self.usage.clone(),
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The objects to apply for `workspace`, or that its builds run first.
    pub(super) fn with_builds(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<Prepared, RuntimeError> {
        let apply_err = |message: String| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        };
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment");
        let tasks = deployment
            .and_then(|d| {
                d.pointer("/spec/template/metadata/annotations")?
                    .get(IMAGE_BUILDS_ANNOTATION)
            })
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let Some(builder) = self.builds.builder.clone() else {
            if tasks.is_some() {
                return Err(apply_err(
                    "its images are built when it starts (devfile `autoBuild`, a dev \
                     container's `build` or Features), and this Kubernetes agent has no build \
                     registry to push them to (the agent's `build_registry` setting, with an \
                     engine that builds); set one, run it on an agent on Podman or Docker, or \
                     build the image elsewhere and name it in `image`"
                        .into(),
                ));
            }
            return Ok(Prepared::Apply(objects.to_vec()));
        };
        if let Some(image) = names_built_image(objects, &builder.registry) {
            return Err(apply_err(format!(
                "image {image} is a build of the build registry, which only the workspace it \
                 was built for runs; name the image to build instead"
            )));
        }
        let (Some(tasks), Some(deployment)) = (tasks, deployment) else {
            self.forget_build(&workspace.name);
            return Ok(Prepared::Apply(objects.to_vec()));
        };
        let digest = objects_digest(objects);
        let replicas = deployment
            .pointer("/spec/replicas")
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(1);
        let mut state = lock(&self.builds.state);
        if let Some(current) = state.get(&workspace.name) {
            match &current.phase {
                Phase::Done(pushed) if current.tasks == tasks => {
                    return Ok(Prepared::Apply(use_pushed(objects, pushed)));
                }
                Phase::Running(_) | Phase::Failed(_) if current.digest == digest => {
                    return Ok(Prepared::Building);
                }
                _ => {}
            }
        }
        if let Some(WorkspaceBuild {
            phase: Phase::Running(token),
            ..
        }) = state.remove(&workspace.name)
        {
            token.cancel();
        }
        if replicas == 0 {
            // Stopped: nothing runs the images, so nothing is built until it starts.
            drop(state);
            self.bump();
            return Ok(Prepared::Apply(objects.to_vec()));
        }
        let token = CancellationToken::new();
        state.insert(
            workspace.name.clone(),
            WorkspaceBuild {
                key: workspace.clone(),
                tasks: tasks.clone(),
                digest: digest.clone(),
                deployment: deployment.clone(),
                generation: self.builds.next_generation(),
                phase: Phase::Running(token.clone()),
            },
        );
        drop(state);
        self.bump();
        let this = self.handle();
        let key = workspace.clone();
        let objects = objects.to_vec();
        tokio::spawn(async move {
            let built = tokio::select! {
                // Cancel-safe: a dropped build leaves its layers on the builder's engine
                // and nothing in the cluster; the next apply builds again.
                _ = token.cancelled() => return,
                r = this.build(&builder, &key, &objects) => r,
            };
            // The pushed references applied before the build counts as done, so `list`
            // shows the workspace starting until its Deployment exists.
            let outcome = match built {
                Ok(pushed) => match this
                    .apply_objects(&key, &use_pushed(&objects, &pushed))
                    .await
                {
                    Ok(()) => Phase::Done(pushed),
                    Err(e) => Phase::Failed(PodFailure {
                        reason: "ApplyFailed".into(),
                        message: format!(
                            "applying the workspace with its built images: {}",
                            warren_types::error_chain(&e)
                        ),
                    }),
                },
                Err(failure) => Phase::Failed(failure),
            };
            if let Phase::Failed(f) = &outcome {
                tracing::info!(workspace = %key, reason = %f.reason, message = %f.message, "the workspace's images could not be built or run");
            }
            {
                let mut state = lock(&this.builds.state);
                let Some(entry) = state.get_mut(&key.name).filter(|e| e.digest == digest) else {
                    return;
                };
                entry.generation = this.builds.next_generation();
                entry.phase = outcome;
            }
            this.bump();
        });
        Ok(Prepared::Building)
    }

    /// Builds and pushes the workspace's images: the pull secrets staged for the builder,
    /// the push credentials read.
    async fn build(
        &self,
        builder: &ImageBuilder,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<BTreeMap<String, String>, PodFailure> {
        let fail = |message: String| PodFailure {
            reason: crate::runtime::engine::BUILD_FAILED_REASON.into(),
            message,
        };
        let deployment = objects
            .iter()
            .find(|o| o["kind"] == "Deployment")
            .cloned()
            .unwrap_or_default();
        let pull_secrets = self
            .stage_pull_secrets(builder, objects)
            .await
            .map_err(fail)?;
        let credentials = match &builder.push_secret {
            Some((namespace, name)) => {
                let text = self.docker_config(namespace, name).await.map_err(fail)?;
                let host = builder.registry.split('/').next().unwrap_or_default();
                crate::runtime::engine::registry_auth::credentials_in(&text, host)
                    .map_err(|e| fail(format!("push secret {namespace}/{name}: {e}")))?
            }
            None => None,
        };
        let target = PushTarget {
            registry: builder.registry.clone(),
            credentials,
        };
        builder
            .engine
            .build_and_push(workspace, &deployment, pull_secrets, &target)
            .await
    }

    /// The `.dockerconfigjson` of Secret `namespace/name`.
    async fn docker_config(&self, namespace: &str, name: &str) -> Result<String, String> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|e| {
                format!(
                    "reading Secret {namespace}/{name}: {}",
                    warren_types::error_chain(&e)
                )
            })?
            .ok_or_else(|| format!("Secret {namespace}/{name} does not exist"))?;
        let data = secret
            .data
            .unwrap_or_default()
            .remove(".dockerconfigjson")
            .ok_or_else(|| {
                format!("Secret {namespace}/{name} has no .dockerconfigjson (type kubernetes.io/dockerconfigjson)")
            })?;
        String::from_utf8(data.0)
            .map_err(|_| format!("Secret {namespace}/{name}: .dockerconfigjson is not UTF-8"))
    }

    /// Copies the image pull secrets the workspace's ServiceAccount names into the
    /// builder's pull-secrets directory (0600), so its base images and Features are fetched
    /// with them; their names.
    async fn stage_pull_secrets(
        &self,
        builder: &ImageBuilder,
        objects: &[serde_json::Value],
    ) -> Result<Vec<String>, String> {
        let dir = builder.engine.pull_secrets_dir();
        let mut names = vec![];
        for (namespace, name) in objects::pull_secret_sources(objects)? {
            let text = self.docker_config(&namespace, &name).await?;
            let file = format!("{namespace}.{name}");
            crate::runtime::engine::write_secret_file(
                &dir,
                &format!("{file}.json"),
                text.as_bytes(),
            )
            .map_err(|e| format!("writing a copy of pull secret {namespace}/{name}: {e}"))?;
            names.push(file);
        }
        Ok(names)
    }

    /// Forgets the builds of `name` (a build under way is cancelled).
    pub(super) fn forget_build(&self, name: &str) {
        let removed = lock(&self.builds.state).remove(name);
        if let Some(WorkspaceBuild {
            phase: Phase::Running(token),
            ..
        }) = removed
        {
            token.cancel();
        }
    }

    /// Deleting a workspace: its builds are cancelled and the builder's images of it go.
    pub(super) async fn delete_builds(&self, workspace: &WorkspaceKey) -> Result<(), RuntimeError> {
        self.forget_build(&workspace.name);
        match &self.builds.builder {
            Some(builder) => builder.engine.forget_builds(workspace).await,
            None => Ok(()),
        }
    }

    /// `list`'s view with the workspaces whose builds run or failed shown as such.
    pub(super) fn overlay_builds(&self, observed: &mut Vec<ObservedWorkspace>) {
        let state = lock(&self.builds.state);
        for build in state.values() {
            let (pod_failure, done) = match &build.phase {
                Phase::Done(_) => (None, true),
                Phase::Running(_) => (None, false),
                Phase::Failed(f) => (Some(f.clone()), false),
            };
            let shown = ObservedWorkspace {
                key: build.key.clone(),
                deployment: Some(building_deployment(&build.deployment, build.generation)),
                pod_failure,
                pod_waiting: None,
                terminating: false,
            };
            match observed.iter_mut().find(|o| o.key == build.key) {
                // Being deleted says more than a build that no longer matters, pods that
                // run (the images pushed again after an agent restart) more than the push
                // under way, and the cluster's Deployment more than a finished build.
                Some(o) if done || o.terminating || wants_a_replica(o.deployment.as_ref()) => {}
                Some(o) => *o = shown,
                // Built and applied, the Deployment not seen by the watch yet: still starting.
                None => observed.push(shown),
            }
        }
        observed.sort_by(|a, b| a.key.cmp(&b.key));
    }

    /// The output of the workspace's builds, when `container` asks for it.
    pub(super) fn build_log(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
        follow: bool,
    ) -> Option<Result<crate::runtime::LogStream, RuntimeError>> {
        if container != Some(BUILD_LOG) {
            return None;
        }
        Some(match &self.builds.builder {
            Some(builder) => builder.engine.builds_log(workspace, tail, follow),
            None => Err(RuntimeError::NotFound(format!(
                "a build of workspace {workspace}: this agent builds no images"
            ))),
        })
    }

    /// Hands the builder where build contexts come from.
    pub(super) fn builder_contexts(&self, contexts: Arc<dyn crate::runtime::BuildContexts>) {
        if let Some(builder) = &self.builds.builder {
            builder.engine.use_build_contexts(contexts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn objects(image: &str) -> Vec<serde_json::Value> {
        vec![
            json!({"kind": "ServiceAccount", "metadata": {"name": "w", "annotations": {
                warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION: "warren/regcred,default/builds"
            }}}),
            json!({"kind": "Deployment", "metadata": {"name": "w"}, "spec": {"replicas": 1,
            "template": {"spec": {
                "initContainers": [{"name": "db-init", "image": "localhost/warren/compose-db:latest"}],
                "containers": [
                    {"name": "app", "image": image},
                    {"name": "db", "image": "localhost/warren/compose-db:latest"},
                    {"name": "editor", "image": "busybox"},
                ]}}}}),
        ]
    }

    #[test]
    fn pushed_references_replace_the_requested_names_only() {
        let pushed = BTreeMap::from([
            (
                "app:dev".to_owned(),
                "r.example.com/warren-ws/app/w.1.k:sha-1".to_owned(),
            ),
            (
                "localhost/warren/compose-db:latest".to_owned(),
                "r.example.com/warren-ws/db/w.1.k:sha-2".to_owned(),
            ),
        ]);
        let out = use_pushed(&objects("app:dev"), &pushed);
        let spec = &out[1]["spec"]["template"]["spec"];
        assert_eq!(
            spec["containers"][0]["image"],
            "r.example.com/warren-ws/app/w.1.k:sha-1"
        );
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(
            spec["containers"][1]["image"],
            "r.example.com/warren-ws/db/w.1.k:sha-2"
        );
        assert_eq!(
            spec["initContainers"][0]["image"],
            "r.example.com/warren-ws/db/w.1.k:sha-2"
        );
        assert_eq!(spec["containers"][2]["image"], "busybox");
        assert!(spec["containers"][2].get("imagePullPolicy").is_none());
    }

    #[test]
    fn an_image_of_the_build_registry_named_by_a_devfile_is_found() {
        let shouted = objects("R.Example.COM/builds/warren-ws/app/other.2.k:sha-9");
        assert!(names_built_image(&shouted, "r.example.com/builds").is_some());
        let stolen = objects("r.example.com/builds/warren-ws/app/other.2.k:sha-9");
        assert_eq!(
            names_built_image(&stolen, "r.example.com/builds").as_deref(),
            Some("r.example.com/builds/warren-ws/app/other.2.k:sha-9")
        );
        assert!(names_built_image(
            &objects("r.example.com/builds/mine:1"),
            "r.example.com/builds"
        )
        .is_none());
    }

    #[test]
    fn a_build_shows_as_a_starting_deployment() {
        let d = &objects("app:dev")[1];
        let shown = building_deployment(d, 7);
        assert_eq!(
            warren_types::lifecycle::derive_from_deployment(&shown),
            warren_types::state::ActualState::Starting
        );
        assert_eq!(shown["metadata"]["resourceVersion"], "warren-build-7");
    }

    #[test]
    fn pull_secret_sources_and_push_secrets_are_namespace_and_name() {
        assert_eq!(
            objects::pull_secret_sources(&objects("x")).unwrap(),
            vec![
                ("warren".to_owned(), "regcred".to_owned()),
                ("default".to_owned(), "builds".to_owned())
            ]
        );
        assert!(objects::secret_source("default/builds").is_ok());
        assert!(objects::secret_source("default/registry.push").is_ok());
        for bad in ["builds", "/builds", "Default/builds", "a/b/c", "ns/"] {
            assert!(objects::secret_source(bad).is_err(), "{bad}");
        }
    }
}
