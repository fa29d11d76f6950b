//! The rendering of a workspace's objects, part by part in the order they are emitted (see
//! the parent module's docs): the request checked, the labels and names, the resources and
//! their cap, the ServiceAccount, Secrets, ConfigMap and claims with the pod's volumes, the
//! Service with the endpoints, the NetworkPolicy and ResourceQuota, the Deployment.

use super::*;
use warren_types::features::FeatureSource;
use warren_types::prebuild::{PREBUILD_LABEL, SEED_FROM_ANNOTATION, SEED_FROM_ID_ANNOTATION};
use warren_types::relay::{BuildImageTask, IMAGE_BUILDS_ANNOTATION};

pub(super) fn render(devfile: &Devfile, req: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    let namespace = check_request(req)?;
    pod::check_isolation(devfile, req.agent_config)?;
    let ctx = context(req, namespace.clone());
    let (env_data, file_data) = variables::secret_data(req)?;
    let plan = Plan::new(devfile, req, ctx)?;
    let mut objects: Vec<serde_json::Value> = Vec::new();
    let storage = plan.storage(env_data, file_data, &mut objects);
    let endpoints = plan.service(&mut objects);
    plan.policy_and_quota(&mut objects);
    push(&mut objects, serde_json::to_value(plan.deployment(storage)));
    Ok(Rendered {
        namespace,
        objects,
        endpoints,
    })
}

/// The images built before the containers start, as the agent reads them
/// ([`IMAGE_BUILDS_ANNOTATION`]); `None` when there are none.
/// A dev container's base image and OCI Features come through the agent's mirrors, as its
/// containers' images do.
fn image_builds(devfile: &Devfile, cfg: &AgentConfig) -> Option<String> {
    let builds: Vec<BuildImageTask> = devfile
        .images
        .iter()
        .filter(|i| i.auto_build)
        // Parsing refused an autoBuild image without build paths.
        .filter_map(|i| {
            let (_, dockerfile) = i.build_paths().ok()?;
            let features = i.features.clone().map(|mut f| {
                f.base_image = f.base_image.map(|b| cfg.mirrored_image(&b));
                for feature in &mut f.features {
                    if let FeatureSource::Oci(r) = &mut feature.source {
                        *r = cfg.mirrored_image(r);
                    }
                }
                f
            });
            Some(BuildImageTask {
                image: i.image_name.clone(),
                dockerfile,
                args: i.args.clone(),
                target: i.target.clone(),
                features: features.map(Box::new),
            })
        })
        .collect();
    (!builds.is_empty()).then(|| serde_json::to_string(&builds).unwrap_or_default())
}

/// Adds an object's JSON to the output.
fn push(objects: &mut Vec<serde_json::Value>, v: Result<serde_json::Value, serde_json::Error>) {
    // Serializing k8s-openapi types to a JSON value cannot fail (string keys only).
    if let Ok(v) = v {
        objects.push(v);
    }
}

/// The labels, annotations and selector every object of the workspace carries.
fn context<'r>(req: &RenderRequest<'r>, namespace: String) -> Ctx<'r> {
    let cfg = req.agent_config;
    let name = req.workspace_name;
    let mut labels = cfg.labels.clone();
    labels.insert(LABEL_AGENT.into(), req.agent_id.to_string());
    labels.insert(LABEL_WORKSPACE.into(), req.workspace_id.to_string());
    if req.prebuild {
        labels.insert(PREBUILD_LABEL.into(), "true".into());
    }
    let mut annotations = cfg.annotations.clone();
    annotations.insert(
        ANNOTATION_HOST.into(),
        format!("{{port}}-{name}.{}", cfg.workspace_domain),
    );
    annotations.insert(LABEL_WORKSPACE.into(), req.workspace_id.to_string());
    let selector: BTreeMap<String, String> =
        [(LABEL_WORKSPACE.to_owned(), req.workspace_id.to_string())].into();
    Ctx {
        name,
        namespace,
        labels,
        annotations,
        selector,
    }
}

/// The names of what `storage` made that the pod refers to, and the pod's volumes.
struct Storage {
    sa_name: String,
    env_secret: String,
    pod_volumes: Vec<core::Volume>,
}

/// What every later part reads: the devfile, the request, and what was worked out from them
/// first (each container's resources within the cap, the init containers, the editor).
struct Plan<'a, 'r> {
    devfile: &'a Devfile,
    req: &'a RenderRequest<'r>,
    cfg: &'r AgentConfig,
    name: &'r str,
    ctx: Ctx<'r>,
    editor: Option<editor::EditorPlan>,
    res_by_name: BTreeMap<&'a str, Res>,
    init_specs: Vec<(String, &'a Container, Option<&'a crate::model::Command>)>,
    data_size: String,
}

impl<'a, 'r> Plan<'a, 'r> {
    /// Resources and cap: each container's resources, the init containers preStart runs, the
    /// editor, all within the workspace's cap; the data volume's size.
    fn new(
        devfile: &'a Devfile,
        req: &'a RenderRequest<'r>,
        ctx: Ctx<'r>,
    ) -> Result<Plan<'a, 'r>, RenderError> {
        let cfg = req.agent_config;
        let defaults = &cfg.default_resources_per_workspace_container;
        let mut app_res: Vec<(&str, Res)> = Vec::new();
        let mut res_by_name: BTreeMap<&str, Res> = BTreeMap::new();
        for c in &devfile.containers {
            let user = if c.main { req.resources } else { None };
            let r = resolve_resources(c, &defaults.requests, &defaults.limits, user)?;
            res_by_name.insert(&c.name, r.clone());
            if !c.init_only {
                app_res.push((&c.name, r));
            }
        }
        let mut init_specs: Vec<(String, &Container, Option<&crate::model::Command>)> = Vec::new();
        for id in &devfile.pre_start {
            let Some(cmd) = devfile.command(id) else {
                continue;
            };
            let Some(c) = cmd.component().and_then(|n| devfile.container(n)) else {
                continue;
            };
            match &cmd.action {
                CommandAction::Exec { .. } => {
                    init_specs.push((object_name(&format!("warren-prestart-{id}")), c, Some(cmd)))
                }
                CommandAction::Apply { .. } => init_specs.push((c.name.clone(), c, None)),
                // Parsing expands composites of events into their exec and apply commands.
                CommandAction::Composite { .. } => {}
            }
        }
        let editor = editor::plan(devfile, cfg);
        let mut init_res: Vec<(&str, Res)> = init_specs
            .iter()
            .map(|(n, c, _)| {
                (
                    n.as_str(),
                    res_by_name
                        .get(c.name.as_str())
                        .cloned()
                        .unwrap_or_default(),
                )
            })
            .collect();
        if editor.is_some() {
            init_res.push((
                warren_types::config::TOOLS_VOLUME,
                editor::tools_resources(),
            ));
        }
        if let Some(cap) = &cfg.max_resources_per_workspace {
            check_cap(&app_res, &init_res, cap)?;
        }
        let data_size = match req.machine.and_then(|m| m.storage.as_ref()) {
            Some(size) => parse_memory_bytes(size)
                .map(|_| size.clone())
                .map_err(quantity_err("machine class storage"))?,
            None => parse_memory_bytes(&cfg.data_volume_size)
                .map(|_| cfg.data_volume_size.clone())
                .map_err(quantity_err("data_volume_size"))?,
        };
        Ok(Plan {
            devfile,
            req,
            cfg,
            name: req.workspace_name,
            ctx,
            editor,
            res_by_name,
            init_specs,
            data_size,
        })
    }

    /// Whether the startup script wraps container `c`: the main one, and those postStart
    /// commands run in.
    fn wrapped(&self, c: &Container) -> bool {
        c.main
            || self.devfile.post_start.iter().any(|id| {
                self.devfile
                    .command(id)
                    .is_some_and(|cmd| cmd.component() == Some(c.name.as_str()))
            })
    }

    /// The ServiceAccount, the Secrets, the scripts' ConfigMap and the claims, and the pod's
    /// volumes on them.
    fn storage(
        &self,
        env_data: BTreeMap<String, k8s_openapi::ByteString>,
        file_data: BTreeMap<String, k8s_openapi::ByteString>,
        objects: &mut Vec<serde_json::Value>,
    ) -> Storage {
        let (devfile, req, cfg, name, ctx) =
            (self.devfile, self.req, self.cfg, self.name, &self.ctx);
        let editor = &self.editor;
        let wrapped = |c: &Container| self.wrapped(c);
        let sa_name = object_name(name);
        push(
            objects,
            serde_json::to_value(core::ServiceAccount {
                metadata: {
                    let mut m = ctx.meta(sa_name.clone());
                    // Where each pull secret comes from: a Kubernetes agent copies it into the
                    // workspace's namespace; an engine agent reads it by name from its directory.
                    if !cfg.image_pull_secrets.is_empty() {
                        let sources: Vec<String> = cfg
                            .image_pull_secrets
                            .iter()
                            .map(|s| format!("{}/{}", s.namespace, s.name))
                            .collect();
                        m.annotations.get_or_insert_with(Default::default).insert(
                            warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION.into(),
                            sources.join(","),
                        );
                    }
                    m
                },
                automount_service_account_token: Some(false),
                image_pull_secrets: (!cfg.image_pull_secrets.is_empty()).then(|| {
                    cfg.image_pull_secrets
                        .iter()
                        .map(|s| core::LocalObjectReference {
                            name: s.name.clone(),
                        })
                        .collect()
                }),
                ..Default::default()
            }),
        );
        let env_secret = object_name(&format!("{name}-env"));
        let files_secret = object_name(&format!("{name}-files"));
        let scripts_cm = object_name(&format!("{name}-scripts"));
        for (secret_name, data) in [(&env_secret, env_data), (&files_secret, file_data)] {
            push(
                objects,
                serde_json::to_value(core::Secret {
                    metadata: ctx.meta(secret_name.clone()),
                    type_: Some("Opaque".into()),
                    data: Some(data),
                    ..Default::default()
                }),
            );
        }
        let git_secret = object_name(&format!("{name}-git"));
        let credential = req.project.and_then(|p| p.credential);
        if let Some(c) = credential {
            push(
                objects,
                serde_json::to_value(core::Secret {
                    metadata: ctx.meta(git_secret.clone()),
                    type_: Some("Opaque".into()),
                    data: Some(git_secret_data(c)),
                    ..Default::default()
                }),
            );
        }
        let mut scripts = BTreeMap::new();
        for c in devfile
            .containers
            .iter()
            .filter(|c| !c.init_only && wrapped(c))
        {
            scripts.insert(
                format!("start-{}.sh", c.name),
                startup_script(devfile, c, req, editor.as_ref()),
            );
        }
        if let Some(script) = super::scripts::post_attach_script(devfile) {
            scripts.insert(
                crate::POST_ATTACH_SCRIPT
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                script,
            );
        }
        push(
            objects,
            serde_json::to_value(core::ConfigMap {
                metadata: ctx.meta(scripts_cm.clone()),
                data: Some(scripts),
                ..Default::default()
            }),
        );
        let git_secret = credential.is_some().then_some(git_secret);
        let pod_volumes = self.volumes(scripts_cm, files_secret, git_secret, objects);
        Storage {
            sa_name,
            env_secret,
            pod_volumes,
        }
    }

    /// The claims (the data volume's, then one per persistent devfile volume) and the pod's
    /// volumes: those, the devfile's ephemeral ones, the scripts, the files, the editor's
    /// tools and the Git credential.
    fn volumes(
        &self,
        scripts_cm: String,
        files_secret: String,
        git_secret: Option<String>,
        objects: &mut Vec<serde_json::Value>,
    ) -> Vec<core::Volume> {
        let (devfile, name, ctx) = (self.devfile, self.name, &self.ctx);
        let (editor, data_size) = (&self.editor, &self.data_size);
        // A new workspace's claims name the prebuild whose same-named volumes they start
        // as copies of.
        let claim_meta = |claim: String| {
            let mut meta = ctx.meta(claim);
            if let Some(seed) = &self.req.seed {
                let annotations = meta.annotations.get_or_insert_with(Default::default);
                annotations.insert(SEED_FROM_ANNOTATION.into(), seed.workspace.to_owned());
                annotations.insert(
                    SEED_FROM_ID_ANNOTATION.into(),
                    seed.workspace_id.to_string(),
                );
            }
            meta
        };
        let pvc = |claim: String, size: &str| core::PersistentVolumeClaim {
            metadata: claim_meta(claim),
            spec: Some(core::PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                resources: Some(core::VolumeResourceRequirements {
                    requests: Some([("storage".to_owned(), Quantity(size.to_owned()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let data_claim = object_name(&format!("{name}-{DATA_VOLUME}"));
        push(
            objects,
            serde_json::to_value(pvc(data_claim.clone(), data_size)),
        );
        let mut pod_volumes = vec![core::Volume {
            name: DATA_VOLUME.into(),
            persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                claim_name: data_claim,
                read_only: None,
            }),
            ..Default::default()
        }];
        for v in &devfile.volumes {
            if v.ephemeral {
                pod_volumes.push(core::Volume {
                    name: v.name.clone(),
                    empty_dir: Some(core::EmptyDirVolumeSource {
                        size_limit: v.size.clone().map(Quantity),
                        medium: None,
                    }),
                    ..Default::default()
                });
            } else {
                let claim = object_name(&format!("{name}-{}", v.name));
                push(
                    objects,
                    serde_json::to_value(pvc(
                        claim.clone(),
                        v.size.as_deref().unwrap_or(DEFAULT_VOLUME_SIZE),
                    )),
                );
                pod_volumes.push(core::Volume {
                    name: v.name.clone(),
                    persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                        claim_name: claim,
                        read_only: None,
                    }),
                    ..Default::default()
                });
            }
        }
        pod_volumes.push(core::Volume {
            name: SCRIPTS_VOLUME.into(),
            config_map: Some(core::ConfigMapVolumeSource {
                name: scripts_cm,
                default_mode: Some(0o555),
                ..Default::default()
            }),
            ..Default::default()
        });
        pod_volumes.push(core::Volume {
            name: FILES_VOLUME.into(),
            secret: Some(core::SecretVolumeSource {
                secret_name: Some(files_secret),
                default_mode: Some(0o440),
                ..Default::default()
            }),
            ..Default::default()
        });
        if editor.is_some() {
            pod_volumes.push(editor::volume());
        }
        if let Some(git_secret) = git_secret {
            pod_volumes.push(core::Volume {
                name: GIT_VOLUME.into(),
                secret: Some(core::SecretVolumeSource {
                    secret_name: Some(git_secret),
                    default_mode: Some(0o440),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        pod_volumes
    }

    /// The Service (a port per port and protocol) and the endpoints the server publishes.
    fn service(&self, objects: &mut Vec<serde_json::Value>) -> Vec<Endpoint> {
        let (devfile, name, ctx, editor) = (self.devfile, self.name, &self.ctx, &self.editor);
        let mut endpoints = Vec::new();
        let mut service_ports = Vec::new();
        // A Service port per port and protocol: endpoints sharing a port share it.
        let mut service_port_keys = std::collections::BTreeSet::new();
        let mut service_annotations = ctx.annotations.clone();
        for c in devfile.containers.iter().filter(|c| !c.init_only) {
            service_annotations.extend(c.service_annotations.clone());
            for e in &c.endpoints {
                endpoints.push(Endpoint {
                    name: e.name.clone(),
                    port: e.target_port,
                    container: c.name.clone(),
                    main: c.main,
                    exposure: e.exposure.as_str().into(),
                    protocol: e.protocol.as_str().into(),
                    path: e.path.clone(),
                });
                let port_key = (e.target_port, k8s_protocol(e.protocol));
                if e.exposure != Exposure::None && service_port_keys.insert(port_key) {
                    service_ports.push(core::ServicePort {
                        name: Some(port_name(&e.name, e.target_port)),
                        port: i32::from(e.target_port),
                        target_port: Some(IntOrString::Int(i32::from(e.target_port))),
                        protocol: Some(k8s_protocol(e.protocol).into()),
                        ..Default::default()
                    });
                }
            }
        }
        if let Some(e) = &editor {
            endpoints.push(editor::endpoint(e));
            if service_port_keys.insert((e.port, "TCP")) {
                service_ports.push(core::ServicePort {
                    name: Some(port_name(warren_types::config::EDITOR_ENDPOINT, e.port)),
                    port: i32::from(e.port),
                    target_port: Some(IntOrString::Int(i32::from(e.port))),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                });
            }
        }
        let headless = service_ports.is_empty();
        push(
            objects,
            serde_json::to_value(core::Service {
                metadata: ObjectMeta {
                    annotations: Some(service_annotations),
                    ..ctx.meta(object_name(name))
                },
                spec: Some(core::ServiceSpec {
                    selector: Some(ctx.selector.clone()),
                    // A Service without ports must be headless to be valid.
                    cluster_ip: headless.then(|| "None".into()),
                    ports: (!headless).then_some(service_ports),
                    type_: Some("ClusterIP".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        );
        endpoints
    }

    /// The NetworkPolicy, when enabled, and the ResourceQuota of a capped workspace in a
    /// namespace of its own.
    fn policy_and_quota(&self, objects: &mut Vec<serde_json::Value>) {
        let (cfg, name, ctx) = (self.cfg, self.name, &self.ctx);
        if cfg.network_policy.enabled {
            push(objects, serde_json::to_value(network_policy(ctx, cfg)));
        }
        if let (Some(cap), None) = (&cfg.max_resources_per_workspace, &cfg.shared_namespace) {
            let mut hard = BTreeMap::new();
            for (key, v) in [
                ("requests.cpu", &cap.requests.cpu),
                ("requests.memory", &cap.requests.memory),
                ("limits.cpu", &cap.limits.cpu),
                ("limits.memory", &cap.limits.memory),
            ] {
                if let Some(v) = v {
                    hard.insert(key.to_owned(), Quantity(v.clone()));
                }
            }
            push(
                objects,
                serde_json::to_value(core::ResourceQuota {
                    metadata: ctx.meta(object_name(name)),
                    spec: Some(core::ResourceQuotaSpec {
                        hard: Some(hard),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            );
        }
    }

    /// One container of the pod, as `pod::container` makes it.
    fn build(
        &self,
        c: &Container,
        name: String,
        with_scripts: bool,
        env_secret: &str,
    ) -> core::Container {
        let (devfile, req) = (self.devfile, self.req);
        let project_dir = req
            .project
            .as_ref()
            .map(|p| p.name)
            .or_else(|| devfile.projects.first().map(|p| p.clone_path.as_str()))
            .or_else(|| scripts::starter(devfile, req).map(|p| p.clone_path.as_str()));
        let res = self.res_by_name.get(c.name.as_str());
        pod::container(c, name, with_scripts, req, project_dir, env_secret, res)
    }

    /// The app containers, each wrapped or not, the editor's port and mount on its
    /// container; and whether a command with no port to probe runs (ready only after a
    /// moment).
    fn app_containers(&self, env_secret: &str) -> (Vec<core::Container>, bool) {
        let (devfile, editor) = (self.devfile, &self.editor);
        let wrapped = |c: &Container| self.wrapped(c);
        let build = |c: &Container, name: String, with_scripts: bool| {
            self.build(c, name, with_scripts, env_secret)
        };
        let mut containers = Vec::new();
        // A command with no port to probe is ready only after running a moment (below).
        let mut min_ready = false;
        for c in devfile.containers.iter().filter(|c| !c.init_only) {
            let wrap = wrapped(c);
            let mut k = build(c, c.name.clone(), wrap);
            if c.main {
                if let Some(m) = self.req.machine {
                    pod::add_devices(&mut k, &m.devices);
                }
            }
            k.readiness_probe = pod::readiness_probe(c, wrap);
            if let Some(h) = &c.healthcheck {
                k.lifecycle = Some(pod::healthcheck_hook(&c.name, h));
            }
            if let Some(e) = editor.as_ref().filter(|e| e.container == c.name) {
                k.volume_mounts
                    .get_or_insert_with(Vec::new)
                    .push(editor::mount());
                k.ports
                    .get_or_insert_with(Vec::new)
                    .push(core::ContainerPort {
                        container_port: i32::from(e.port),
                        name: Some(port_name(warren_types::config::EDITOR_ENDPOINT, e.port)),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    });
            }
            min_ready |= k.readiness_probe.is_none() && pod::runs_a_command(c, wrap);
            if wrap {
                let mut payload = c.command.clone();
                payload.extend(c.args.iter().cloned());
                k.command = Some(vec![
                    "/bin/sh".into(),
                    format!("{SCRIPTS_MOUNT_PATH}/start-{}.sh", c.name),
                ]);
                k.args = (!payload.is_empty()).then_some(payload);
            }
            containers.push(k);
        }
        (containers, min_ready)
    }

    /// The init containers: the editor's tools fill, then the preStart commands in order.
    fn init_containers(&self, env_secret: &str) -> Vec<core::Container> {
        let (cfg, editor) = (self.cfg, &self.editor);
        let build = |c: &Container, name: String, with_scripts: bool| {
            self.build(c, name, with_scripts, env_secret)
        };
        let mut init_containers = Vec::new();
        if let Some(e) = &editor {
            init_containers.push(editor::init_container(e, pod::security_context(cfg)));
        }
        for (init_name, c, cmd) in &self.init_specs {
            let mut k = build(c, init_name.clone(), false);
            if let Some(crate::model::Command {
                action:
                    CommandAction::Exec {
                        command_line,
                        working_dir,
                        env,
                        ..
                    },
                ..
            }) = cmd
            {
                k.ports = None;
                k.command = Some(vec!["/bin/sh".into(), "-c".into()]);
                // Init containers run before the clone, so the project directory may not exist yet.
                k.args = Some(vec![command_script(
                    command_line,
                    working_dir.as_deref(),
                    "${PROJECTS_ROOT}",
                    env,
                )]);
            }
            init_containers.push(k);
        }
        init_containers
    }

    /// The Deployment: one replica while the workspace runs, none otherwise, its pod made
    /// of the containers above on the storage's volumes.
    fn deployment(&self, storage: Storage) -> Deployment {
        let (devfile, req, cfg, name, ctx, editor) = (
            self.devfile,
            self.req,
            self.cfg,
            self.name,
            &self.ctx,
            &self.editor,
        );
        let Storage {
            sa_name,
            env_secret,
            pod_volumes,
        } = storage;
        let (containers, min_ready) = self.app_containers(&env_secret);
        let init_containers = self.init_containers(&env_secret);
        let mut deployment_annotations = ctx.annotations.clone();
        for c in &devfile.containers {
            deployment_annotations.extend(c.deployment_annotations.clone());
        }
        let replicas = match req.desired_state {
            DesiredState::Running => 1,
            DesiredState::Stopped | DesiredState::RestartRequested | DesiredState::Terminated => 0,
        };
        Deployment {
            metadata: ObjectMeta {
                annotations: Some({
                    // Read by the agent, from the Deployment alone: the pods need not restart.
                    let mut a = deployment_annotations.clone();
                    if let Some(e) = &editor {
                        a.insert(EDITOR_PORT_ANNOTATION.into(), e.port.to_string());
                    }
                    a.insert(
                        warren_types::config::MAIN_CONTAINER_ANNOTATION.into(),
                        devfile.main_container().name.clone(),
                    );
                    // Whose output tells the startup's status (the main container first).
                    let mut telling = vec![devfile.main_container().name.clone()];
                    telling.extend(
                        devfile
                            .containers
                            .iter()
                            .filter(|c| !c.main && !c.init_only && self.wrapped(c))
                            .map(|c| c.name.clone()),
                    );
                    a.insert(
                        warren_types::startup::STARTUP_CONTAINERS_ANNOTATION.into(),
                        telling.join(","),
                    );
                    a
                }),
                ..ctx.meta(object_name(name))
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                // A command that could exit at once counts as available only after running 1 s.
                min_ready_seconds: min_ready.then_some(1),
                selector: LabelSelector {
                    match_labels: Some(ctx.selector.clone()),
                    match_expressions: None,
                },
                strategy: Some(DeploymentStrategy {
                    type_: Some("Recreate".into()),
                    rolling_update: None,
                }),
                template: core::PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(ctx.labels.clone()),
                        annotations: Some({
                            // On the pod: a change of what is built makes a new pod.
                            let mut a = deployment_annotations;
                            if let Some(builds) = image_builds(devfile, cfg) {
                                a.insert(IMAGE_BUILDS_ANNOTATION.into(), builds);
                            }
                            a
                        }),
                        ..Default::default()
                    }),
                    spec: Some(core::PodSpec {
                        service_account_name: Some(sa_name),
                        automount_service_account_token: Some(false),
                        enable_service_links: Some(false),
                        // As long as the engine runtime waits (its stop timeout): a devfile
                        // command that is PID 1 without a SIGTERM handler (a shell, `sleep`)
                        // ignores the signal and is killed only at the end of the grace period,
                        // 30 s by default (seen on a real node: 44 s to stop a workspace). The
                        // containers keep their own process namespaces, as on the engine: a
                        // shared one would let each read the others' files and environment.
                        termination_grace_period_seconds: Some(10),
                        host_users: cfg.security.use_user_namespaces.then_some(false),
                        runtime_class_name: (req.machine)
                            .and_then(|m| m.runtime_class.clone())
                            .or_else(|| cfg.security.runtime_class_name.clone()),
                        node_selector: (req.machine)
                            .filter(|m| !m.node_selector.is_empty())
                            .map(|m| m.node_selector.clone()),
                        tolerations: (req.machine)
                            .filter(|m| !m.tolerations.is_empty())
                            .map(|m| m.tolerations.iter().map(pod::toleration).collect()),
                        security_context: Some(core::PodSecurityContext {
                            run_as_non_root: Some(true),
                            run_as_user: Some(cfg.security.run_as_user),
                            run_as_group: Some(cfg.security.run_as_group),
                            fs_group: Some(cfg.security.run_as_group),
                            // The container runtime's default seccomp filter: Kubernetes'
                            // `restricted` Pod Security Standard, which the agent holds every pod
                            // in a workspace's namespace to, asks for it.
                            seccomp_profile: Some(core::SeccompProfile {
                                type_: "RuntimeDefault".into(),
                                localhost_profile: None,
                            }),
                            ..Default::default()
                        }),
                        init_containers: (!init_containers.is_empty()).then_some(init_containers),
                        // The names the containers reach one another by (Compose services').
                        host_aliases: (!devfile.host_aliases.is_empty()).then(|| {
                            vec![core::HostAlias {
                                ip: "127.0.0.1".into(),
                                hostnames: Some(devfile.host_aliases.clone()),
                            }]
                        }),
                        containers,
                        volumes: Some(pod_volumes),
                        ..Default::default()
                    }),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}
