//! A validated devfile + agent configuration + request → the workspace's Kubernetes objects.
//!
//! Objects (desired-config.md): ServiceAccount, Secret `<name>-env`, Secret `<name>-files`,
//! ConfigMap `<name>-scripts`, PVCs (`<name>-warren-data`, then one per persistent devfile
//! volume), Service, NetworkPolicy (when enabled), ResourceQuota (when capped and not in a
//! shared namespace), Deployment — always in that order, so equal input gives equal output.
//!
//! # How containers start
//!
//! Warren's startup work (clone the project, then the devfile's `postStart` commands) runs
//! *inside* the main container, as a background step of a wrapper script, like a Kubernetes
//! `postStart` hook but with nothing the container engine runtime cannot do (Podman has no
//! hooks): the main container (and any container that has `postStart` commands) runs
//! `/bin/sh /warren/scripts/start-<container>.sh [command…]`. The script starts the startup
//! work in the background, logging to `$PROJECTS_ROOT/.warren/logs/<container>.log`, then
//! `exec`s the devfile's `command` + `args`, or, when the devfile gives neither, keeps the
//! container alive with a `sleep` loop that ends on SIGTERM. Only `/bin/sh` is needed (and
//! `git` for the clone; a missing `git` is logged, not fatal).
//!
//! A devfile that gives `args` but no `command` relies on the image's entrypoint, which Warren
//! cannot know; for *wrapped* containers those `args` are run as the command (the common
//! devfile idiom `args: [tail, -f, /dev/null]` keeps working). Containers that are not wrapped
//! keep the image's entrypoint and their `command`/`args` exactly as written.
//!
//! The clone is shallow (`--depth 1`, the requested ref), goes to a temporary directory that
//! is renamed into `/projects/<project>` only when complete (a restart retries cleanly; an
//! existing checkout is never touched), then is unshallowed in the background. Sidecars with
//! `postStart` commands wait (up to 10 minutes) for the clone before running theirs.
//! `preStart` commands run as init containers, before the clone (so their default working
//! directory is `$PROJECTS_ROOT`, not the not-yet-cloned project): an `exec` command in the
//! image of its component, an `apply` command as the applied container itself (which then
//! runs only as an init container).
//!
//! The project's git URL and ref travel in the `<name>-env` Secret, never in the ConfigMap.
//!
//! # A home that persists
//!
//! Wrapped containers that mount the sources get `HOME=<sources>/.home` ([`HOME_DIR`]), on the
//! workspace volume: shell history, dotfiles and editor state survive stops and restarts. The
//! wrapper creates it on first start, before the container's command runs, seeded with a copy
//! of the image's home (the user's `/etc/passwd` entry); a devfile that sets `HOME` itself
//! keeps its own. The owner's dotfiles repository, if they set one, is cloned into
//! `~/.dotfiles` at first start and its install script run (or its dotfiles linked), in the
//! background and logged; a failure there never stops the workspace.

mod editor;
mod names;
mod network;
mod pod;
mod resources;
mod scripts;
mod variables;

pub(crate) use names::object_name;
use names::*;
use network::network_policy;
pub use network::{protected_egress, PROTECTED as PROTECTED_EGRESS};
use resources::*;
use scripts::*;

use crate::model::{CommandAction, Container, Devfile, Exposure};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use warren_types::api::{VariableKind, WorkspaceResources};
use warren_types::config::{AgentConfig, EDITOR_PORT_ANNOTATION};
use warren_types::git::GitCredential;
use warren_types::quantity::{parse_memory_bytes, QuantityError};
use warren_types::{AgentId, DesiredState, WorkspaceId};

/// Where the `<name>-files` Secret (file variables) is mounted, read-only, in every container.
pub const FILES_MOUNT_PATH: &str = "/warren/variables";
/// Where the `<name>-scripts` ConfigMap is mounted in wrapped containers.
pub const SCRIPTS_MOUNT_PATH: &str = "/warren/scripts";
/// The home directory under the sources root, on the workspace volume.
pub const HOME_DIR: &str = ".home";
/// Where the `<name>-git` Secret (the project's credential) is mounted, read-only, in
/// containers that mount the sources.
pub const GIT_MOUNT_PATH: &str = "/warren/git";

const LABEL_AGENT: &str = "warren.dev/agent-id";
const LABEL_WORKSPACE: &str = "warren.dev/workspace-id";
const ANNOTATION_HOST: &str = "warren.dev/host-template";
/// Pods allowed to reach workspace pods (the agent, which the proxy path goes through).
const LABEL_COMPONENT: &str = "warren.dev/component";
const AGENT_COMPONENT: &str = "agent";
const DATA_VOLUME: &str = "warren-data";
const SCRIPTS_VOLUME: &str = "warren-scripts";
const FILES_VOLUME: &str = "warren-variables";
const GIT_VOLUME: &str = "warren-git";
/// Size of a devfile volume that does not give one.
const DEFAULT_VOLUME_SIZE: &str = "1Gi";

/// The project cloned into the workspace.
#[derive(Debug, Clone, Copy)]
pub struct ProjectSource<'a> {
    /// Directory name under the sources root (`/projects/<name>`).
    pub name: &'a str,
    pub git_url: &'a str,
    /// Branch, tag or commit; empty for the repository's default branch.
    pub git_ref: &'a str,
    /// How to authenticate to the repository: files of a Secret `<name>-git` mounted at
    /// [`GIT_MOUNT_PATH`], used by a Git credential helper (HTTPS) or `GIT_SSH_COMMAND` (SSH)
    /// named in the environment, so clone, fetch and push work with no secret in the
    /// environment, the process list or the checkout's `.git/config`.
    pub credential: Option<&'a GitCredential>,
}

/// A user/workspace variable with its final value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedVariable {
    pub key: String,
    pub value: String,
    pub kind: VariableKind,
}

#[derive(Debug, Clone, Copy)]
pub struct RenderRequest<'a> {
    /// Already validated DNS-safe by the server.
    pub workspace_name: &'a str,
    pub workspace_id: WorkspaceId,
    pub agent_id: AgentId,
    pub agent_config: &'a AgentConfig,
    pub project: Option<ProjectSource<'a>>,
    /// User-requested whole-workspace size (create/resize): sets the MAIN container's limits
    /// (cpu/memory); its requests become min(request, limit). None = devfile/defaults.
    pub resources: Option<&'a WorkspaceResources>,
    pub variables: &'a [ResolvedVariable],
    pub desired_state: DesiredState,
    /// The owner's dotfiles repository, cloned into the home and installed at first start.
    pub dotfiles_url: Option<&'a str>,
    /// The starter project cloned when there is no `project`, by name; the devfile's first
    /// when `None` (or when it names none).
    pub starter: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rendered {
    pub namespace: String,
    /// Every object, as JSON (apiVersion, kind, metadata, ...), in a deterministic order.
    pub objects: Vec<serde_json::Value>,
    /// Declared endpoints of all containers (for URLs and for the proxy's allow-list).
    pub endpoints: Vec<Endpoint>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub port: u16,
    pub container: String,
    pub main: bool,
    /// `public`, `internal` or `none`.
    pub exposure: String,
    /// `http`, `https`, `ws`, `wss`, `tcp` or `udp`.
    pub protocol: String,
    pub path: Option<String>,
}

/// Why a valid devfile cannot be rendered for this agent and request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error(
        "workspace asks for {resource} {kind} {asked} in total, more than the agent's max_resources_per_workspace {kind} {resource} {cap}"
    )]
    ExceedsCap {
        resource: &'static str,
        kind: &'static str,
        asked: String,
        cap: String,
    },
    #[error(
        "container {container:?} has no {resource} {kind}, but the agent caps the workspace's {resource} {kind} (max_resources_per_workspace); set {field} in the devfile or a default in default_resources_per_workspace_container"
    )]
    Unbounded {
        container: String,
        resource: &'static str,
        kind: &'static str,
        field: &'static str,
    },
    #[error("invalid quantity in {field}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    /// The workspace name names its Service, which must be a DNS-1035 label.
    #[error("workspace name: {0}")]
    WorkspaceName(String),
    #[error("namespace {0:?} is not a valid namespace name")]
    Namespace(String),
    #[error("project name {0:?} cannot be a directory name (no '/', not '.' or '..', not empty)")]
    ProjectName(String),
    #[error("variable {key:?}: {reason}")]
    Variable { key: String, reason: String },
    #[error("invalid label or annotation {key:?} in the agent configuration: {reason}")]
    Metadata { key: String, reason: String },
}

/// The `/bin/sh -c` script that runs an exec command on demand (`warren ws run`): its
/// environment exported, in its `workingDir` (without one: the project's directory, as for
/// postStart commands, where the container has it — one that does not mount the sources
/// stays in its own working directory), then its command line.
pub fn exec_command_script(
    command_line: &str,
    working_dir: Option<&str>,
    env: &[crate::model::EnvVar],
) -> String {
    match working_dir {
        Some(_) => command_script(command_line, working_dir, "${PROJECT_SOURCE}", env),
        None => {
            let mut s = String::new();
            for e in env {
                s.push_str(&format!(
                    "export {}={}\n",
                    e.name,
                    scripts::sh_quote(&e.value)
                ));
            }
            s.push_str("if [ -n \"${PROJECT_SOURCE:-}\" ] && [ -d \"$PROJECT_SOURCE\" ]; then cd \"$PROJECT_SOURCE\" || exit 1; fi\n");
            s.push_str(command_line);
            s.push('\n');
            s
        }
    }
}

/// Renders the workspace's objects. See the module docs for the startup design.
pub fn render(devfile: &Devfile, req: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    let cfg = req.agent_config;
    let name = req.workspace_name;
    if let Some(problem) = crate::k8s::dns1035_label_problem(name, 40) {
        return Err(RenderError::WorkspaceName(problem));
    }
    let namespace = match &cfg.shared_namespace {
        Some(ns) => {
            // `warren-ws-<name>` is a workspace's own namespace to the agent, which deletes it
            // with the workspace.
            if !crate::parse::is_dns_label(ns, 63) || ns.starts_with("warren-ws-") {
                return Err(RenderError::Namespace(ns.clone()));
            }
            ns.clone()
        }
        None => format!("warren-ws-{name}"),
    };
    let agent_namespace = &cfg.network_policy.agent_namespace;
    if !crate::parse::is_dns_label(agent_namespace, 63) {
        return Err(RenderError::Namespace(agent_namespace.clone()));
    }
    if let Some(p) = req.project.as_ref().filter(|p| {
        p.name.is_empty()
            || p.name == "."
            || p.name == ".."
            || p.name.contains('/')
            || p.name.contains('\0')
            || p.name.len() > 255
    }) {
        return Err(RenderError::ProjectName(p.name.to_owned()));
    }
    check_metadata_map(&cfg.labels, true)?;
    check_metadata_map(&cfg.annotations, false)?;

    let mut labels = cfg.labels.clone();
    labels.insert(LABEL_AGENT.into(), req.agent_id.to_string());
    labels.insert(LABEL_WORKSPACE.into(), req.workspace_id.to_string());
    let mut annotations = cfg.annotations.clone();
    annotations.insert(
        ANNOTATION_HOST.into(),
        format!("{{port}}-{name}.{}", cfg.workspace_domain),
    );
    annotations.insert(LABEL_WORKSPACE.into(), req.workspace_id.to_string());
    let selector: BTreeMap<String, String> =
        [(LABEL_WORKSPACE.to_owned(), req.workspace_id.to_string())].into();
    let ctx = Ctx {
        name,
        namespace: namespace.clone(),
        labels,
        annotations,
        selector,
    };

    let (env_data, file_data) = variables::secret_data(req)?;

    // Resources and cap.
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
    let data_size = parse_memory_bytes(&cfg.data_volume_size)
        .map(|_| cfg.data_volume_size.clone())
        .map_err(quantity_err("data_volume_size"))?;

    // Which containers are wrapped by the startup script.
    let wrapped = |c: &Container| {
        c.main
            || devfile.post_start.iter().any(|id| {
                devfile
                    .command(id)
                    .is_some_and(|cmd| cmd.component() == Some(c.name.as_str()))
            })
    };

    let mut objects: Vec<serde_json::Value> = Vec::new();
    let push = |objects: &mut Vec<serde_json::Value>,
                v: Result<serde_json::Value, serde_json::Error>| {
        // Serializing k8s-openapi types to a JSON value cannot fail (string keys only).
        if let Ok(v) = v {
            objects.push(v);
        }
    };

    let sa_name = object_name(name);
    push(
        &mut objects,
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
            &mut objects,
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
            &mut objects,
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
    push(
        &mut objects,
        serde_json::to_value(core::ConfigMap {
            metadata: ctx.meta(scripts_cm.clone()),
            data: Some(scripts),
            ..Default::default()
        }),
    );
    let pvc = |claim: String, size: &str| core::PersistentVolumeClaim {
        metadata: ctx.meta(claim),
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
        &mut objects,
        serde_json::to_value(pvc(data_claim.clone(), &data_size)),
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
                &mut objects,
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
    if credential.is_some() {
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

    // Service and endpoints.
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
        &mut objects,
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

    if cfg.network_policy.enabled {
        push(
            &mut objects,
            serde_json::to_value(network_policy(&ctx, cfg)),
        );
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
            &mut objects,
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

    // The pod.
    // `PROJECT_SOURCE`: the workspace's project, else the devfile's first project, else the
    // starter project cloned in their place (the devfile specification's order).
    let project_dir = req
        .project
        .as_ref()
        .map(|p| p.name)
        .or_else(|| devfile.projects.first().map(|p| p.clone_path.as_str()))
        .or_else(|| scripts::starter(devfile, req).map(|p| p.clone_path.as_str()));
    let build = |c: &Container, name: String, with_scripts: bool| {
        let res = res_by_name.get(c.name.as_str());
        pod::container(c, name, with_scripts, req, project_dir, &env_secret, res)
    };
    let mut containers = Vec::new();
    // A command with no port to probe is ready only after running a moment (below).
    let mut min_ready = false;
    for c in devfile.containers.iter().filter(|c| !c.init_only) {
        let wrap = wrapped(c);
        let mut k = build(c, c.name.clone(), wrap);
        k.readiness_probe = pod::readiness_probe(c, wrap);
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
    let mut init_containers = Vec::new();
    if let Some(e) = &editor {
        init_containers.push(editor::init_container(e, pod::security_context(cfg)));
    }
    for (init_name, c, cmd) in &init_specs {
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
    let mut deployment_annotations = ctx.annotations.clone();
    for c in &devfile.containers {
        deployment_annotations.extend(c.deployment_annotations.clone());
    }
    let replicas = match req.desired_state {
        DesiredState::Running => 1,
        DesiredState::Stopped | DesiredState::RestartRequested | DesiredState::Terminated => 0,
    };
    let deployment = Deployment {
        metadata: ObjectMeta {
            annotations: Some({
                // Read by the agent, from the Deployment alone: the pods need not restart.
                let mut a = deployment_annotations.clone();
                if let Some(e) = &editor {
                    a.insert(EDITOR_PORT_ANNOTATION.into(), e.port.to_string());
                }
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
                    annotations: Some(deployment_annotations),
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
                    runtime_class_name: cfg.security.runtime_class_name.clone(),
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
                    containers,
                    volumes: Some(pod_volumes),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    push(&mut objects, serde_json::to_value(deployment));
    Ok(Rendered {
        namespace,
        objects,
        endpoints,
    })
}

/// The `<name>-git` Secret's files: `credentials` (what a credential helper prints for
/// `get`) for HTTPS, `ssh-key` and `known_hosts` for SSH.
fn git_secret_data(c: &GitCredential) -> BTreeMap<String, k8s_openapi::ByteString> {
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        data.insert(k.to_owned(), k8s_openapi::ByteString(v.into_bytes()));
    };
    match c {
        GitCredential::SshKey {
            private_key,
            known_hosts,
        } => {
            put("ssh-key", format!("{}\n", private_key.trim_end()));
            put("known_hosts", known_hosts.clone().unwrap_or_default());
        }
        other => {
            if let Some((user, password)) = other.username_password() {
                put(
                    "credentials",
                    format!("username={user}\npassword={password}\n"),
                );
            }
        }
    }
    data
}

/// The environment that points Git at the mounted credential: a credential helper scoped to
/// the repository's origin (so the secret goes to that host only), or an SSH command with
/// the key. Names only paths, never the secret.
pub(super) fn git_credential_env(p: &ProjectSource<'_>) -> Vec<(String, String)> {
    match p.credential {
        None => vec![],
        Some(GitCredential::SshKey { known_hosts, .. }) => {
            let strict = if known_hosts.as_deref().is_some_and(|k| !k.trim().is_empty()) {
                "yes"
            } else {
                "accept-new"
            };
            vec![(
                "GIT_SSH_COMMAND".into(),
                format!(
                    "ssh -i {GIT_MOUNT_PATH}/ssh-key -o IdentitiesOnly=yes \
                     -o UserKnownHostsFile={GIT_MOUNT_PATH}/known_hosts -o StrictHostKeyChecking={strict}"
                ),
            )]
        }
        Some(_) => {
            let key = match http_origin(p.git_url) {
                Some(origin) => format!("credential.{origin}.helper"),
                None => "credential.helper".into(),
            };
            vec![
                ("GIT_CONFIG_COUNT".into(), "1".into()),
                ("GIT_CONFIG_KEY_0".into(), key),
                (
                    "GIT_CONFIG_VALUE_0".into(),
                    format!("!f() {{ test \"$1\" = get && cat {GIT_MOUNT_PATH}/credentials; }}; f"),
                ),
            ]
        }
    }
}

/// `scheme://host[:port]` of an http(s) URL.
fn http_origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority.rsplit('@').next()?;
    (!host.is_empty()).then(|| format!("{}://{host}", scheme.to_ascii_lowercase()))
}
