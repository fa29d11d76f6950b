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
//! The project's git URL and ref travel in the `<name>-env` Secret (a URL may carry a token),
//! never in the ConfigMap.

use crate::model::{CommandAction, Container, Devfile, Exposure, Protocol};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::networking::v1 as net;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use warren_types::api::{VariableKind, WorkspaceResources};
use warren_types::config::{AgentConfig, ResourceList};
use warren_types::quantity::{
    format_cpu_millis, format_memory_bytes, parse_cpu_millis, parse_memory_bytes, QuantityError,
};
use warren_types::{AgentId, DesiredState, WorkspaceId};

/// Where the `<name>-files` Secret (file variables) is mounted, read-only, in every container.
pub const FILES_MOUNT_PATH: &str = "/warren/variables";
/// Where the `<name>-scripts` ConfigMap is mounted in wrapped containers.
pub const SCRIPTS_MOUNT_PATH: &str = "/warren/scripts";

const LABEL_AGENT: &str = "warren.dev/agent-id";
const LABEL_WORKSPACE: &str = "warren.dev/workspace-id";
const ANNOTATION_HOST: &str = "warren.dev/host-template";
/// Pods allowed to reach workspace pods (the agent, which the proxy path goes through).
const LABEL_COMPONENT: &str = "warren.dev/component";
const AGENT_COMPONENT: &str = "agent";
const DATA_VOLUME: &str = "warren-data";
const SCRIPTS_VOLUME: &str = "warren-scripts";
const FILES_VOLUME: &str = "warren-variables";
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
    #[error("workspace name {0:?} is not a DNS label of at most 40 characters")]
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

fn quantity_err(field: impl Into<String>) -> impl FnOnce(QuantityError) -> RenderError {
    let field = field.into();
    move |source| RenderError::Quantity { field, source }
}

/// DNS-1123 label of at most 63 characters; longer names are cut and get a hash suffix so
/// two long names stay distinct.
pub(crate) fn object_name(base: &str) -> String {
    if base.len() <= 63 {
        return base.to_owned();
    }
    let hash = hex::encode(&Sha256::digest(base.as_bytes())[..4]);
    let mut cut = base[..54].trim_end_matches('-').to_owned();
    cut.push('-');
    cut.push_str(&hash);
    cut
}

struct Ctx<'a> {
    name: &'a str,
    namespace: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    selector: BTreeMap<String, String>,
}

impl Ctx<'_> {
    fn meta(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels.clone()),
            annotations: Some(self.annotations.clone()),
            ..Default::default()
        }
    }
}

/// Resolved cpu/memory of one container, in exact units and as written.
#[derive(Default, Clone)]
struct Res {
    cpu_req: Option<(u64, String)>,
    cpu_lim: Option<(u64, String)>,
    mem_req: Option<(u64, String)>,
    mem_lim: Option<(u64, String)>,
}

impl Res {
    fn to_k8s(&self) -> Option<core::ResourceRequirements> {
        let list = |cpu: &Option<(u64, String)>, mem: &Option<(u64, String)>| {
            let mut m = BTreeMap::new();
            if let Some((_, s)) = cpu {
                m.insert("cpu".to_owned(), Quantity(s.clone()));
            }
            if let Some((_, s)) = mem {
                m.insert("memory".to_owned(), Quantity(s.clone()));
            }
            (!m.is_empty()).then_some(m)
        };
        let requests = list(&self.cpu_req, &self.mem_req);
        let limits = list(&self.cpu_lim, &self.mem_lim);
        if requests.is_none() && limits.is_none() {
            return None;
        }
        Some(core::ResourceRequirements {
            requests,
            limits,
            ..Default::default()
        })
    }
}

fn parse_q(
    s: &Option<String>,
    cpu: bool,
    field: &str,
) -> Result<Option<(u64, String)>, RenderError> {
    match s {
        None => Ok(None),
        Some(v) => {
            let n = if cpu {
                parse_cpu_millis(v)
            } else {
                parse_memory_bytes(v)
            }
            .map_err(quantity_err(field))?;
            Ok(Some((n, v.clone())))
        }
    }
}

fn resolve_resources(
    c: &Container,
    defaults: &ResourceList,
    default_limits: &ResourceList,
    user: Option<&WorkspaceResources>,
) -> Result<Res, RenderError> {
    let d = "default_resources_per_workspace_container";
    let pick = |devfile: &Option<String>, default: &Option<String>, cpu: bool, field: &str| {
        match devfile {
            Some(_) => parse_q(devfile, cpu, &format!("devfile container {:?}", c.name)),
            None => parse_q(default, cpu, field),
        }
    };
    let mut r = Res {
        cpu_req: pick(
            &c.cpu_request,
            &defaults.cpu,
            true,
            &format!("{d}.requests.cpu"),
        )?,
        cpu_lim: pick(
            &c.cpu_limit,
            &default_limits.cpu,
            true,
            &format!("{d}.limits.cpu"),
        )?,
        mem_req: pick(
            &c.memory_request,
            &defaults.memory,
            false,
            &format!("{d}.requests.memory"),
        )?,
        mem_lim: pick(
            &c.memory_limit,
            &default_limits.memory,
            false,
            &format!("{d}.limits.memory"),
        )?,
    };
    if let Some(u) = user {
        if let Some(v) = parse_q(&u.cpu, true, "requested workspace cpu")? {
            r.cpu_lim = Some(v);
        }
        if let Some(v) = parse_q(&u.memory, false, "requested workspace memory")? {
            r.mem_lim = Some(v);
        }
    }
    // A default request may exceed a devfile (or requested) limit: requests = min(request, limit).
    for (req, lim) in [(&mut r.cpu_req, &r.cpu_lim), (&mut r.mem_req, &r.mem_lim)] {
        if let (Some(q), Some(l)) = (req.as_ref(), lim.as_ref()) {
            if q.0 > l.0 {
                *req = Some(l.clone());
            }
        }
    }
    Ok(r)
}

/// Checks the sum over the pod against `max_resources_per_workspace`.
fn check_cap(
    app: &[(&str, Res)],
    init: &[(&str, Res)],
    cap: &warren_types::config::ResourceRequirements,
) -> Result<(), RenderError> {
    type Get = fn(&Res) -> &Option<(u64, String)>;
    /// (resource, kind, devfile field, accessor, cap, is cpu)
    type Check<'c> = (
        &'static str,
        &'static str,
        &'static str,
        Get,
        &'c Option<String>,
        bool,
    );
    let checks: [Check<'_>; 4] = [
        (
            "cpu",
            "limits",
            "cpuLimit",
            |r| &r.cpu_lim,
            &cap.limits.cpu,
            true,
        ),
        (
            "memory",
            "limits",
            "memoryLimit",
            |r| &r.mem_lim,
            &cap.limits.memory,
            false,
        ),
        (
            "cpu",
            "requests",
            "cpuRequest",
            |r| &r.cpu_req,
            &cap.requests.cpu,
            true,
        ),
        (
            "memory",
            "requests",
            "memoryRequest",
            |r| &r.mem_req,
            &cap.requests.memory,
            false,
        ),
    ];
    for (resource, kind, field, get, cap_value, cpu) in checks {
        let Some(cap_s) = cap_value else { continue };
        let cap_n = if cpu {
            parse_cpu_millis(cap_s)
        } else {
            parse_memory_bytes(cap_s)
        }
        .map_err(quantity_err(format!(
            "max_resources_per_workspace.{kind}.{resource}"
        )))?;
        let mut sum: u64 = 0;
        let mut max_init: u64 = 0;
        for (list, is_init) in [(app, false), (init, true)] {
            for (name, r) in list {
                // Kubernetes defaults a missing request to the limit; with neither, the
                // container is unbounded and a quota would refuse the pod.
                let fallback = match (kind, resource) {
                    ("requests", "cpu") => r.cpu_lim.as_ref(),
                    ("requests", _) => r.mem_lim.as_ref(),
                    _ => None,
                };
                let value = get(r).as_ref().or(fallback);
                let Some((n, _)) = value else {
                    return Err(RenderError::Unbounded {
                        container: (*name).to_owned(),
                        resource,
                        kind,
                        field,
                    });
                };
                if is_init {
                    max_init = max_init.max(*n);
                } else {
                    sum = sum.saturating_add(*n);
                }
            }
        }
        // Init containers run one at a time before the others: the pod needs the larger.
        let total = sum.max(max_init);
        if total > cap_n {
            let fmt = |n: u64| {
                if cpu {
                    format_cpu_millis(n)
                } else {
                    format_memory_bytes(n)
                }
            };
            return Err(RenderError::ExceedsCap {
                resource,
                kind,
                asked: fmt(total),
                cap: cap_s.clone(),
            });
        }
    }
    Ok(())
}

fn is_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Single-quotes a string for `/bin/sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Double-quotes a path for `/bin/sh`, leaving `$VAR` expansion (devfiles write
/// `${PROJECT_SOURCE}` in `workingDir`).
fn sh_dquote_expand(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        if matches!(ch, '"' | '\\' | '`') {
            out.push('\\');
        }
        out.push(ch);
    }
    out.push('"');
    out
}

fn check_metadata_map(map: &BTreeMap<String, String>, labels: bool) -> Result<(), RenderError> {
    for (k, v) in map {
        let bad = |reason: &str| RenderError::Metadata {
            key: k.clone(),
            reason: reason.into(),
        };
        let (prefix, name) = match k.rsplit_once('/') {
            Some((p, n)) => (Some(p), n),
            None => (None, k.as_str()),
        };
        if name.is_empty()
            || name.len() > 63
            || !name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        {
            return Err(bad(
                "the name part must be 1–63 letters, digits, '-', '_' or '.'",
            ));
        }
        if prefix.is_some_and(|p| p.is_empty() || p.len() > 253) {
            return Err(bad("the prefix must be a DNS subdomain"));
        }
        if labels
            && (v.len() > 63
                || !v
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.')))
        {
            return Err(bad(
                "a label value must be at most 63 letters, digits, '-', '_' or '.'",
            ));
        }
    }
    Ok(())
}

/// Renders the workspace's objects. See the module docs for the startup design.
pub fn render(devfile: &Devfile, req: &RenderRequest<'_>) -> Result<Rendered, RenderError> {
    let cfg = req.agent_config;
    let name = req.workspace_name;
    if !crate::parse::is_dns_label(name, 40) {
        return Err(RenderError::WorkspaceName(name.to_owned()));
    }
    let namespace = match &cfg.shared_namespace {
        Some(ns) => {
            if !crate::parse::is_dns_label(ns, 63) {
                return Err(RenderError::Namespace(ns.clone()));
            }
            ns.clone()
        }
        None => format!("warren-ws-{name}"),
    };
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

    // Variables.
    let mut env_data: BTreeMap<String, ByteString> = BTreeMap::new();
    let mut file_data: BTreeMap<String, ByteString> = BTreeMap::new();
    for v in req.variables {
        let bad = |reason: &str| RenderError::Variable {
            key: v.key.clone(),
            reason: reason.into(),
        };
        let target = match v.kind {
            VariableKind::Env => {
                if !is_env_name(&v.key) {
                    return Err(bad("not a valid environment variable name (letters, digits, '_', not starting with a digit)"));
                }
                if v.key.starts_with("WARREN_")
                    || v.key == "PROJECTS_ROOT"
                    || v.key == "PROJECT_SOURCE"
                {
                    return Err(bad("reserved for Warren"));
                }
                &mut env_data
            }
            VariableKind::File => {
                if !is_secret_key(&v.key) {
                    return Err(bad(
                        "not a valid file name (letters, digits, '-', '_', '.')",
                    ));
                }
                &mut file_data
            }
        };
        if target
            .insert(v.key.clone(), ByteString(v.value.clone().into_bytes()))
            .is_some()
        {
            return Err(bad("given more than once"));
        }
    }
    if let Some(p) = &req.project {
        env_data.insert(
            "WARREN_PROJECT_GIT_URL".into(),
            ByteString(p.git_url.as_bytes().to_vec()),
        );
        env_data.insert(
            "WARREN_PROJECT_GIT_REF".into(),
            ByteString(p.git_ref.as_bytes().to_vec()),
        );
    }

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
        let Some(c) = devfile.container(cmd.component()) else {
            continue;
        };
        match &cmd.action {
            CommandAction::Exec { .. } => {
                init_specs.push((object_name(&format!("warren-prestart-{id}")), c, Some(cmd)))
            }
            CommandAction::Apply { .. } => init_specs.push((c.name.clone(), c, None)),
        }
    }
    let init_res: Vec<(&str, Res)> = init_specs
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
                    .is_some_and(|cmd| cmd.component() == c.name)
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
            metadata: ctx.meta(sa_name.clone()),
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
    let mut scripts = BTreeMap::new();
    for c in devfile
        .containers
        .iter()
        .filter(|c| !c.init_only && wrapped(c))
    {
        scripts.insert(
            format!("start-{}.sh", c.name),
            startup_script(devfile, c, req),
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

    // Service and endpoints.
    let mut endpoints = Vec::new();
    let mut service_ports = Vec::new();
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
            if e.exposure != Exposure::None {
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
    let project_source = |c: &Container| match &req.project {
        Some(p) => format!("{}/{}", c.source_mapping.trim_end_matches('/'), p.name),
        None => c.source_mapping.clone(),
    };
    let sec = core::SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(cfg.security.run_as_user),
        run_as_group: Some(cfg.security.run_as_group),
        allow_privilege_escalation: Some(cfg.security.allow_privilege_escalation),
        privileged: Some(false),
        capabilities: Some(core::Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        ..Default::default()
    };
    let build = |c: &Container, name: String, with_scripts: bool| -> core::Container {
        let mut env = vec![
            core::EnvVar {
                name: "PROJECTS_ROOT".into(),
                value: Some(c.source_mapping.clone()),
                ..Default::default()
            },
            core::EnvVar {
                name: "PROJECT_SOURCE".into(),
                value: Some(project_source(c)),
                ..Default::default()
            },
            core::EnvVar {
                name: "WARREN_WORKSPACE_NAME".into(),
                value: Some(name_of(req)),
                ..Default::default()
            },
        ];
        env.extend(c.env.iter().map(|e| core::EnvVar {
            name: e.name.clone(),
            value: Some(e.value.clone()),
            ..Default::default()
        }));
        let mut mounts = Vec::new();
        if c.mount_sources {
            mounts.push(core::VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: c.source_mapping.clone(),
                ..Default::default()
            });
        }
        for m in &c.volume_mounts {
            mounts.push(core::VolumeMount {
                name: m.name.clone(),
                mount_path: m.path.clone(),
                ..Default::default()
            });
        }
        if with_scripts {
            mounts.push(core::VolumeMount {
                name: SCRIPTS_VOLUME.into(),
                mount_path: SCRIPTS_MOUNT_PATH.into(),
                read_only: Some(true),
                ..Default::default()
            });
        }
        mounts.push(core::VolumeMount {
            name: FILES_VOLUME.into(),
            mount_path: FILES_MOUNT_PATH.into(),
            read_only: Some(true),
            ..Default::default()
        });
        let ports: Vec<core::ContainerPort> = c
            .endpoints
            .iter()
            .map(|e| core::ContainerPort {
                container_port: i32::from(e.target_port),
                name: Some(port_name(&e.name, e.target_port)),
                protocol: Some(k8s_protocol(e.protocol).into()),
                ..Default::default()
            })
            .collect();
        core::Container {
            name,
            image: Some(c.image.clone()),
            image_pull_policy: Some("IfNotPresent".into()),
            command: (!c.command.is_empty()).then(|| c.command.clone()),
            args: (!c.args.is_empty()).then(|| c.args.clone()),
            env: Some(env),
            env_from: Some(vec![core::EnvFromSource {
                secret_ref: Some(core::SecretEnvSource {
                    name: env_secret.clone(),
                    optional: None,
                }),
                ..Default::default()
            }]),
            ports: (!ports.is_empty()).then_some(ports),
            resources: res_by_name.get(c.name.as_str()).and_then(Res::to_k8s),
            security_context: Some(sec.clone()),
            volume_mounts: Some(mounts),
            ..Default::default()
        }
    };
    let mut containers = Vec::new();
    for c in devfile.containers.iter().filter(|c| !c.init_only) {
        let wrap = wrapped(c);
        let mut k = build(c, c.name.clone(), wrap);
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
            annotations: Some(deployment_annotations.clone()),
            ..ctx.meta(object_name(name))
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
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
                    host_users: cfg.security.use_user_namespaces.then_some(false),
                    runtime_class_name: cfg.security.runtime_class_name.clone(),
                    security_context: Some(core::PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(cfg.security.run_as_user),
                        run_as_group: Some(cfg.security.run_as_group),
                        fs_group: Some(cfg.security.run_as_group),
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

fn name_of(req: &RenderRequest<'_>) -> String {
    req.workspace_name.to_owned()
}

fn k8s_protocol(p: Protocol) -> &'static str {
    if p == Protocol::Udp {
        "UDP"
    } else {
        "TCP"
    }
}

/// A port name (IANA_SVC_NAME: ≤ 15 chars, a letter, no `--`); endpoint names that do not
/// qualify become `p<port>`.
fn port_name(name: &str, port: u16) -> String {
    let ok = name.len() <= 15
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.contains("--")
        && crate::parse::is_dns_label(name, 15);
    if ok {
        name.to_owned()
    } else {
        format!("p{port}")
    }
}

fn network_policy(ctx: &Ctx<'_>, cfg: &AgentConfig) -> net::NetworkPolicy {
    let dns_ports = ["UDP", "TCP"]
        .iter()
        .map(|p| net::NetworkPolicyPort {
            port: Some(IntOrString::Int(53)),
            protocol: Some((*p).into()),
            end_port: None,
        })
        .collect();
    let mut egress = vec![net::NetworkPolicyEgressRule {
        ports: Some(dns_ports),
        to: None,
    }];
    if !cfg.network_policy.egress.is_empty() {
        egress.push(net::NetworkPolicyEgressRule {
            ports: None,
            to: Some(
                cfg.network_policy
                    .egress
                    .iter()
                    .map(|r| net::NetworkPolicyPeer {
                        ip_block: Some(net::IPBlock {
                            cidr: r.allow.clone(),
                            except: (!r.except.is_empty()).then(|| r.except.clone()),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
        });
    }
    net::NetworkPolicy {
        metadata: ctx.meta(object_name(ctx.name)),
        spec: Some(net::NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(ctx.selector.clone()),
                match_expressions: None,
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![net::NetworkPolicyIngressRule {
                from: Some(vec![net::NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector::default()),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(
                            [(LABEL_COMPONENT.to_owned(), AGENT_COMPONENT.to_owned())].into(),
                        ),
                        match_expressions: None,
                    }),
                    ip_block: None,
                }]),
                ports: None,
            }]),
            egress: Some(egress),
        }),
    }
}

/// `cd <workingDir> && export …; <commandLine>` for one exec command.
/// `default_dir` applies when the command gives no `workingDir`: the project for postStart
/// commands, the sources root for preStart ones (they run before the clone).
fn command_script(
    command_line: &str,
    working_dir: Option<&str>,
    default_dir: &str,
    env: &[crate::model::EnvVar],
) -> String {
    let mut s = String::new();
    // Exec command env names are checked to be shell identifiers at parse time.
    for e in env {
        s.push_str(&format!("export {}={}\n", e.name, sh_quote(&e.value)));
    }
    let wd = working_dir.unwrap_or(default_dir);
    s.push_str(&format!("cd {} || exit 1\n", sh_dquote_expand(wd)));
    s.push_str(command_line);
    s.push('\n');
    s
}

fn startup_script(devfile: &Devfile, c: &Container, req: &RenderRequest<'_>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "#!/bin/sh");
    let _ = writeln!(
        s,
        "# Warren startup for container {} of workspace {}: the startup work runs in the\n\
         # background (log: $PROJECTS_ROOT/.warren/logs/{}.log), then the container's command runs.",
        c.name, req.workspace_name, c.name
    );
    let _ = writeln!(s, "root=\"${{PROJECTS_ROOT:-/projects}}\"");
    let _ = writeln!(s, "state=\"$root/.warren\"");
    let _ = writeln!(s, "logs=\"$state/logs\"");
    let _ = writeln!(s, "mkdir -p \"$logs\" 2>/dev/null || logs=/tmp");
    let _ = writeln!(s, "log=\"$logs/{}.log\"", c.name);
    let _ = writeln!(s, "say() {{ echo \"$(date -u +%Y-%m-%dT%H:%M:%SZ) $*\"; }}");
    let _ = writeln!(s, "(");
    let _ = writeln!(s, "  say \"starting container {}\"", c.name);
    if c.main {
        if let Some(p) = &req.project {
            let dest = sh_quote(p.name);
            let _ = write!(
                s,
                r#"  dest="$root"/{dest}
  tmp="$root"/.warren/clone-{name}
  url="$WARREN_PROJECT_GIT_URL"
  ref="$WARREN_PROJECT_GIT_REF"
  if [ -e "$dest" ]; then
    say "project {name} already present in $dest, not cloning"
  elif ! command -v git >/dev/null 2>&1; then
    say "cannot clone project {name}: git is not installed in image {image}"
  else
    rm -rf "$tmp"
    say "cloning project {name} (shallow)"
    if {{ [ -n "$ref" ] && git clone --quiet --depth 1 --branch "$ref" -- "$url" "$tmp"; }} ||
       {{ [ -z "$ref" ] && git clone --quiet --depth 1 -- "$url" "$tmp"; }} ||
       {{ rm -rf "$tmp" && git init --quiet "$tmp" && git -C "$tmp" remote add origin "$url" &&
          git -C "$tmp" fetch --quiet --depth 1 origin "$ref" && git -C "$tmp" checkout --quiet FETCH_HEAD; }}; then
      mv "$tmp" "$dest" && say "cloned project {name} into $dest"
      (
        git -C "$dest" config remote.origin.fetch '+refs/heads/*:refs/remotes/origin/*' &&
          git -C "$dest" fetch --quiet --unshallow --tags origin && say "unshallowed project {name}" ||
          say "unshallowing project {name} failed; the shallow clone stays usable"
      ) &
    else
      rm -rf "$tmp"
      say "cloning project {name} failed (see the messages above)"
    fi
  fi
"#,
                name = p.name.replace(['\n', '"', '`', '$', '\\'], "_"),
                image = c.image.replace(['\n', '"', '`', '$', '\\'], "_"),
            );
        }
        let _ = writeln!(s, "  touch \"$state/cloned\"");
    } else if c.mount_sources && req.project.is_some() {
        let _ = writeln!(
            s,
            "  i=0; while [ ! -e \"$state/cloned\" ] && [ \"$i\" -lt 600 ]; do sleep 1; i=$((i+1)); done"
        );
    }
    for id in &devfile.post_start {
        let Some(cmd) = devfile.command(id) else {
            continue;
        };
        let CommandAction::Exec {
            component,
            command_line,
            working_dir,
            env,
        } = &cmd.action
        else {
            continue;
        };
        if component != &c.name {
            continue;
        }
        let body = command_script(
            command_line,
            working_dir.as_deref(),
            "${PROJECT_SOURCE}",
            env,
        );
        let _ = writeln!(s, "  say \"running postStart command {id}\"");
        let _ = writeln!(s, "  if /bin/sh -c {} ; then", sh_quote(&body));
        let _ = writeln!(s, "    say \"postStart command {id} succeeded\"");
        let _ = writeln!(s, "  else");
        let _ = writeln!(
            s,
            "    say \"postStart command {id} failed with status $?; not running the later ones\""
        );
        let _ = writeln!(s, "    say \"startup of container {} failed\"", c.name);
        let _ = writeln!(s, "    exit 1");
        let _ = writeln!(s, "  fi");
    }
    let _ = writeln!(s, "  say \"startup of container {} done\"", c.name);
    let _ = writeln!(s, ") >>\"$log\" 2>&1 &");
    let _ = writeln!(s, "if [ \"$#\" -gt 0 ]; then exec \"$@\"; fi");
    let _ = writeln!(s, "trap 'exit 0' TERM INT");
    let _ = writeln!(s, "while :; do sleep 3600 & wait $!; done");
    s
}
