//! Devfile text → validated [`Devfile`], in the stages described in the crate docs.
//!
//! The raw serde model mirrors the official devfile 2.2/2.3 JSON schema (including the parts
//! Warren refuses), so a structurally broken `kubernetes` component is reported as broken
//! rather than merely unsupported. The document is first read into a `serde_json::Value` so
//! YAML and JSON behave alike and types are strict (`cpuLimit: 2` is a number, not a string —
//! the schema says so too). `parent` is only checked for being an object with its one-of
//! choice, since Warren refuses it whatever its content.

use crate::model::*;
use crate::{
    DevfileError, DevfileErrors, MAX_ENV_BYTES, MAX_ENV_VARS, MAX_ENV_VAR_BYTES, UNSUPPORTED_MARKER,
};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};

type Errors = Vec<DevfileError>;
mod outer;
mod projects;
mod raw;
mod schema;
mod variables;

use raw::*;
pub use schema::check_structure;
pub(crate) use schema::is_dns_label;
pub(crate) use schema::read_value;
use schema::*;
use variables::*;

// ---------------------------------------------------------------------------------------------
// Stages 4 and 5: support and semantics
// ---------------------------------------------------------------------------------------------

pub(crate) fn parse(text: &str) -> Result<Devfile, DevfileErrors> {
    let mut value = read_value(text).map_err(DevfileErrors)?;
    let raw = structure(&value).map_err(DevfileErrors)?;
    let mut errors = Errors::new();
    // Unknown references are reported and left as they are; the later stages still run so
    // the user sees every problem at once.
    let mut notices = Vec::new();
    substitute(&mut value, &raw.variables, "", &mut errors, &mut notices);
    // Substitution only changes string contents, so the structure still holds.
    let raw = structure(&value).map_err(DevfileErrors)?;
    let devfile = semantics(raw, &mut errors);
    match devfile {
        Some(mut d) if errors.is_empty() => {
            notices.append(&mut d.notices);
            d.notices = notices;
            Ok(d)
        }
        _ => Err(DevfileErrors(errors)),
    }
}

fn unsupported(path: impl Into<String>, what: &str, why: &str) -> DevfileError {
    DevfileError::new(path, format!("{what} {UNSUPPORTED_MARKER}: {why}"))
}

/// Why Warren cannot mount a volume at `path`, which the specification leaves open.
fn mount_path_problem(path: &str) -> Option<&'static str> {
    if !is_abs_path(path) {
        Some("Warren mounts volumes at absolute paths without `..` (container engines refuse relative ones); start it with /")
    } else if normalize_path(path) == "/" {
        Some("a volume cannot replace the container's root directory; choose a directory below /")
    } else {
        None
    }
}

const OVERRIDE_ATTRIBUTES: &[&str] = &["pod-overrides", "container-overrides"];

fn check_override_attributes(attrs: Option<&Map<String, Value>>, path: &str, errors: &mut Errors) {
    check_override_attributes_of(attrs, OVERRIDE_ATTRIBUTES, path, errors)
}

fn check_override_attributes_of(
    attrs: Option<&Map<String, Value>>,
    keys: &[&str],
    path: &str,
    errors: &mut Errors,
) {
    for key in keys {
        if attrs.is_some_and(|a| a.contains_key(*key)) {
            errors.push(unsupported(
                format!("{path}.{key}"),
                &format!("the `{key}` attribute is"),
                "Warren sets the pod spec itself (security context, volumes, service account); size containers with their cpu/memory fields or `container-overrides` resources",
            ));
        }
    }
}

fn is_main_attr(attrs: Option<&Map<String, Value>>) -> Option<Result<bool, ()>> {
    attrs
        .and_then(|a| a.get("warren.dev/main"))
        .map(|v| match v {
            Value::Bool(b) => Ok(*b),
            Value::String(s) if s == "true" => Ok(true),
            Value::String(s) if s == "false" => Ok(false),
            _ => Err(()),
        })
}

/// The least memory limit a container runtime accepts (runc's floor).
const MIN_MEMORY_LIMIT_BYTES: u64 = 6 << 20;
/// The least CPU limit Docker and Podman accept (`--cpus 0.01`).
const MIN_CPU_LIMIT_MILLIS: u64 = 10;

fn quantity(value: &Option<String>, path: String, cpu: bool, errors: &mut Errors) -> Option<u64> {
    let v = value.as_ref()?;
    let parsed = if cpu {
        parse_cpu_millis(v)
    } else {
        parse_memory_bytes(v)
    };
    match parsed {
        Ok(n) => Some(n),
        Err(e) => {
            errors.push(DevfileError::new(path, e.to_string()));
            None
        }
    }
}

/// `shell`: the names are `export`ed by a shell script, so they must be shell identifiers.
fn env_list(raw: Option<Vec<RawEnv>>, path: &str, shell: bool, errors: &mut Errors) -> Vec<EnvVar> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    let raw = raw.unwrap_or_default();
    if raw.len() > MAX_ENV_VARS {
        // One error, not one per variable: the list is the problem.
        errors.push(DevfileError::new(
            path,
            format!(
                "{} environment variables; at most {MAX_ENV_VARS} are allowed",
                raw.len()
            ),
        ));
        return out;
    }
    let total: usize = raw.iter().map(|e| e.name.len() + e.value.len() + 2).sum();
    if total > MAX_ENV_BYTES {
        errors.push(DevfileError::new(
            path,
            format!(
                "the environment variables take {total} bytes together; at most {MAX_ENV_BYTES} are allowed (a new process cannot be given more)"
            ),
        ));
        return out;
    }
    for (i, e) in raw.into_iter().enumerate() {
        let p = format!("{path}[{i}].name");
        if e.name.len() + e.value.len() + 1 > MAX_ENV_VAR_BYTES {
            errors.push(DevfileError::new(
                format!("{path}[{i}].value"),
                format!(
                    "{}: longer than {MAX_ENV_VAR_BYTES} bytes with its name, which Linux refuses",
                    e.name
                ),
            ));
            continue;
        }
        let shell_ok = e
            .name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && e.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let problem = if shell {
            (!shell_ok).then(|| {
                format!(
                    "{:?} is not a valid environment variable name for a command (letters, digits and '_', not starting with a digit)",
                    e.name
                )
            })
        } else {
            crate::k8s::env_name_problem(&e.name)
        };
        if let Some(problem) = problem {
            errors.push(DevfileError::new(p, problem));
        } else if e.name == "PROJECTS_ROOT" || e.name == "PROJECT_SOURCE" {
            errors.push(DevfileError::new(
                p,
                format!("{} is set by Warren and cannot be overridden", e.name),
            ));
        } else if e.name.starts_with("WARREN_") {
            errors.push(DevfileError::new(
                p,
                format!(
                    "{}: names starting with WARREN_ are reserved for Warren",
                    e.name
                ),
            ));
        } else if !seen.insert(e.name.clone()) {
            errors.push(DevfileError::new(
                p,
                format!("{} is set more than once", e.name),
            ));
        }
        out.push(EnvVar {
            name: e.name,
            value: e.value,
        });
    }
    out
}

fn check_reserved(name: &str, what: &str, path: String, errors: &mut Errors) {
    if name.starts_with("warren-") {
        errors.push(DevfileError::new(
            path,
            format!("{what} {name:?}: names starting with \"warren-\" are reserved for Warren"),
        ));
    }
}

fn check_annotations(map: &BTreeMap<String, String>, path: &str, errors: &mut Errors) {
    for key in map.keys() {
        if key.starts_with("warren.dev/") || key.contains("/warren.dev") {
            errors.push(DevfileError::new(
                format!("{path}.{key}"),
                "annotations in the warren.dev namespace are reserved for Warren",
            ));
        } else if let Some(problem) = crate::k8s::qualified_name_problem(key) {
            errors.push(DevfileError::new(format!("{path}.{key}"), problem));
        }
    }
    let total: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
    if total > crate::k8s::MAX_ANNOTATIONS_BYTES {
        errors.push(DevfileError::new(
            path,
            format!(
                "the annotations take {total} bytes together; Kubernetes accepts at most {}",
                crate::k8s::MAX_ANNOTATIONS_BYTES
            ),
        ));
    }
}

fn is_abs_path(p: &str) -> bool {
    p.starts_with('/') && !p.split('/').any(|s| s == "..") && !p.contains('\0')
}

fn normalize_path(p: &str) -> String {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        "/".into()
    } else {
        t.to_owned()
    }
}

fn semantics(raw: RawDevfile, errors: &mut Errors) -> Option<Devfile> {
    // Schema version: the schema allows 2–9.x; Warren knows 2.0–2.3.
    let supported_version = {
        let mut it = raw.schema_version.split(['.', '-', '+']);
        matches!(
            (it.next(), it.next()),
            (Some("2"), Some("0" | "1" | "2" | "3"))
        )
    };
    if !supported_version {
        errors.push(unsupported(
            "schemaVersion",
            &format!("schemaVersion {}", raw.schema_version),
            "Warren reads devfiles 2.0.0 to 2.3.x",
        ));
    }
    check_override_attributes(Some(&raw.attributes), "attributes", errors);

    // Components.
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Container,
        Volume,
        Image,
        Manifest(&'static str),
    }
    let mut notices = Vec::new();
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
    let mut images = Vec::new();
    let mut manifests = Vec::new();
    for (i, c) in raw.components.iter().enumerate() {
        let path = format!("components[{i}]");
        if kinds.contains_key(&c.name) {
            errors.push(DevfileError::new(
                format!("{path}.name"),
                format!("component name {:?} is used more than once", c.name),
            ));
        }
        check_reserved(&c.name, "component", format!("{path}.name"), errors);
        let kind = if c.container.is_some() {
            Kind::Container
        } else if c.volume.is_some() {
            Kind::Volume
        } else if let Some(k) = &c.kubernetes {
            manifests.extend(outer::manifest(
                c,
                k,
                "kubernetes",
                &path,
                errors,
                &mut notices,
            ));
            Kind::Manifest("kubernetes")
        } else if let Some(k) = &c.openshift {
            manifests.extend(outer::manifest(
                c,
                k,
                "openshift",
                &path,
                errors,
                &mut notices,
            ));
            Kind::Manifest("openshift")
        } else if let Some(im) = &c.image {
            images.extend(outer::image(c, im, &path, errors));
            Kind::Image
        } else {
            errors.push(DevfileError::new(
                path.clone(),
                format!("component {:?} has no type (container, volume, image, kubernetes or openshift)", c.name),
            ));
            continue;
        };
        kinds.entry(c.name.clone()).or_insert(kind);
        // `container-overrides` of a container component are honoured (resources only).
        let own: Vec<&str> = if kind == Kind::Container {
            vec!["pod-overrides"]
        } else {
            OVERRIDE_ATTRIBUTES.to_vec()
        };
        check_override_attributes_of(
            c.attributes.as_ref(),
            &own,
            &format!("{path}.attributes"),
            errors,
        );
    }

    // Commands.
    let mut commands = Vec::new();
    let mut command_kinds: BTreeMap<String, &'static str> = BTreeMap::new();
    let mut command_paths: BTreeMap<String, String> = BTreeMap::new();
    for (i, c) in raw.commands.iter().enumerate() {
        let path = format!("commands[{i}]");
        if command_kinds.contains_key(&c.id) {
            errors.push(DevfileError::new(
                format!("{path}.id"),
                format!("command id {:?} is used more than once", c.id),
            ));
        }
        command_paths
            .entry(c.id.clone())
            .or_insert_with(|| path.clone());
        check_reserved(&c.id, "command", format!("{path}.id"), errors);
        let refers = |component: &str, p: String, apply: bool, errors: &mut Errors| {
            let problem = match kinds.get(component) {
                None => Some(format!("refers to component {component:?}, which the devfile does not define")),
                Some(Kind::Container) => None,
                Some(Kind::Image | Kind::Manifest(_)) if apply => None,
                Some(Kind::Volume) => Some(format!(
                    "refers to {component:?}, a volume component; commands need a container component"
                )),
                Some(Kind::Image) => Some(format!(
                    "refers to {component:?}, an image component; only apply commands can build it, exec commands need a container component"
                )),
                Some(Kind::Manifest(k)) => Some(format!(
                    "refers to {component:?}, a {k} component; only apply commands can apply it, exec commands need a container component"
                )),
            };
            if let Some(problem) = problem {
                errors.push(DevfileError::new(p, problem));
            }
        };
        if let Some(e) = &c.exec {
            refers(
                &e.component,
                format!("{path}.exec.component"),
                false,
                errors,
            );
            let env = env_list(
                e.env.as_ref().map(|v| {
                    v.iter()
                        .map(|x| RawEnv {
                            name: x.name.clone(),
                            value: x.value.clone(),
                        })
                        .collect()
                }),
                &format!("{path}.exec.env"),
                true,
                errors,
            );
            command_kinds.entry(c.id.clone()).or_insert("exec");
            commands.push(Command {
                id: c.id.clone(),
                label: e.label.clone(),
                group: e.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Exec {
                    component: e.component.clone(),
                    command_line: e.command_line.clone(),
                    working_dir: e.working_dir.clone(),
                    env,
                },
            });
        } else if let Some(a) = &c.apply {
            refers(
                &a.component,
                format!("{path}.apply.component"),
                true,
                errors,
            );
            command_kinds.entry(c.id.clone()).or_insert("apply");
            commands.push(Command {
                id: c.id.clone(),
                label: a.label.clone(),
                group: a.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Apply {
                    component: a.component.clone(),
                },
            });
        } else if let Some(comp) = &c.composite {
            command_kinds.entry(c.id.clone()).or_insert("composite");
            commands.push(Command {
                id: c.id.clone(),
                label: comp.label.clone(),
                group: comp.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Composite {
                    commands: comp.commands.clone().unwrap_or_default(),
                    parallel: comp.parallel.unwrap_or(false),
                },
            });
        } else {
            errors.push(DevfileError::new(
                path.clone(),
                format!("command {:?} has no type (exec, apply or composite)", c.id),
            ));
        }
    }
    outer::check_composites(&commands, &command_paths, errors);
    let composites_ok = !errors
        .iter()
        .any(|e| e.path.contains(".composite.commands"));

    // Events: composites stand for their exec and apply commands, run one after another.
    let mut pre_start = Vec::new();
    let mut post_start = Vec::new();
    let mut init_only: BTreeSet<String> = BTreeSet::new();
    if let Some(ev) = &raw.events {
        for (key, list) in [("preStop", &ev.pre_stop), ("postStop", &ev.post_stop)] {
            if list.is_some() {
                errors.push(unsupported(
                    format!("events.{key}"),
                    &format!("`{key}` events are"),
                    "Warren stops a workspace by scaling it to zero and runs nothing at stop time; remove them",
                ));
            }
        }
        let probe = Devfile {
            commands: commands.clone(),
            ..Devfile::empty()
        };
        for (key, list, out) in [
            ("preStart", &ev.pre_start, &mut pre_start),
            ("postStart", &ev.post_start, &mut post_start),
        ] {
            for (i, id) in list.iter().flatten().enumerate() {
                let p = format!("events.{key}[{i}]");
                if !command_kinds.contains_key(id) {
                    errors.push(DevfileError::new(
                        p,
                        format!("refers to command {id:?}, which the devfile does not define"),
                    ));
                    continue;
                }
                if !composites_ok {
                    continue;
                }
                let leaves = probe.leaf_commands(id);
                if matches!(
                    probe.command(id).map(|c| &c.action),
                    Some(CommandAction::Composite { parallel: true, .. })
                ) {
                    notices.push(Notice {
                        path: p.clone(),
                        message: format!("composite command {id:?} is parallel; at workspace start its commands run one after another"),
                    });
                }
                for leaf in leaves {
                    let what = match (&leaf.action, leaf.component().and_then(|n| kinds.get(n))) {
                        (CommandAction::Exec { .. }, _) => None,
                        (CommandAction::Apply { .. }, Some(Kind::Container)) if key == "preStart" => None,
                        (CommandAction::Apply { .. }, Some(Kind::Container)) => Some(format!(
                            "apply command {:?}: postStart events run exec commands only (apply commands of containers belong in preStart)",
                            leaf.id
                        )),
                        (CommandAction::Apply { component }, Some(Kind::Image)) => Some(format!(
                            "apply command {:?} builds image component {component:?}, which Warren does on demand only (`warren ws run`), not at workspace start",
                            leaf.id
                        )),
                        (CommandAction::Apply { component }, Some(Kind::Manifest(k))) => Some(format!(
                            "apply command {:?} applies {k} component {component:?}, which Warren does on demand only (`warren ws run`), not at workspace start",
                            leaf.id
                        )),
                        _ => None,
                    };
                    if let Some(why) = what {
                        errors.push(DevfileError::new(
                            p.clone(),
                            format!("{why} {UNSUPPORTED_MARKER}"),
                        ));
                        continue;
                    }
                    if out.contains(&leaf.id) {
                        errors.push(DevfileError::new(
                            p.clone(),
                            format!("command {:?} is listed more than once", leaf.id),
                        ));
                        continue;
                    }
                    if let CommandAction::Apply { component } = &leaf.action {
                        init_only.insert(component.clone());
                    }
                    out.push(leaf.id.clone());
                }
            }
        }
    }
    let in_events: BTreeSet<&String> = pre_start.iter().chain(&post_start).collect();
    for im in &images {
        let applied = commands
            .iter()
            .any(|c| c.component() == Some(im.name.as_str()));
        if !applied {
            notices.push(Notice {
                path: component_path(&raw, &im.name),
                message: format!(
                    "image component {:?} is never built: no apply command uses it",
                    im.name
                ),
            });
        }
    }
    for m in &manifests {
        let applied = commands
            .iter()
            .any(|c| c.component() == Some(m.name.as_str()));
        if !applied {
            notices.push(Notice {
                path: component_path(&raw, &m.name),
                message: format!(
                    "{} component {:?} is never applied: no apply command uses it",
                    m.kind, m.name
                ),
            });
        }
    }
    let on_demand: Vec<&str> = commands
        .iter()
        .filter(|c| !in_events.contains(&c.id))
        .map(|c| c.id.as_str())
        .collect();
    if !on_demand.is_empty() {
        notices.push(Notice {
            path: "commands".into(),
            message: format!(
                "run on demand with `warren ws run WORKSPACE COMMAND`, not at start: {}",
                on_demand.join(", ")
            ),
        });
    }

    for key in &raw.refused_keys {
        errors.push(DevfileError::new(
            *key,
            format!("`{key}` must be fetched and merged first: the server does that when it creates the workspace, and `warren devfile validate` does too"),
        ));
    }
    if let Some(Value::String(from)) = raw.attributes.get(crate::parent::PARENT_ATTRIBUTE) {
        notices.push(Notice {
            path: "parent".into(),
            message: format!("merged in from {from}"),
        });
    }
    if let Some(m) = &raw.metadata {
        let shown_nowhere: Vec<&str> = [
            ("architectures", m.architectures.is_some()),
            ("attributes", m.attributes.is_some()),
            ("description", m.description.is_some()),
            ("displayName", m.display_name.is_some()),
            ("globalMemoryLimit", m.global_memory_limit.is_some()),
            ("icon", m.icon.is_some()),
            ("language", m.language.is_some()),
            ("projectType", m.project_type.is_some()),
            ("provider", m.provider.is_some()),
            ("supportUrl", m.support_url.is_some()),
            ("tags", m.tags.is_some()),
            ("version", m.version.is_some()),
            ("website", m.website.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, present)| present.then_some(k))
        .chain(m.other.keys().map(String::as_str))
        .collect();
        if !shown_nowhere.is_empty() {
            notices.push(Notice {
                path: "metadata".into(),
                message: format!(
                    "{} describe the devfile for registries and are not used by Warren (only `name` is)",
                    shown_nowhere.join(", ")
                ),
            });
        }
    }
    for (i, c) in raw.commands.iter().enumerate() {
        if c.exec
            .as_ref()
            .is_some_and(|e| e.hot_reload_capable.is_some())
        {
            notices.push(Notice {
                path: format!("commands[{i}].exec.hotReloadCapable"),
                message: format!(
                    "command {:?}: Warren does not restart commands when files change",
                    c.id
                ),
            });
        }
    }
    let devfile_projects = projects::projects(&raw.projects, false, errors, &mut notices);
    let starter_projects = projects::projects(&raw.starter_projects, true, errors, &mut notices);
    if let Some(clash) = starter_projects.iter().find(|s| {
        devfile_projects
            .iter()
            .any(|p| p.clone_path == s.clone_path)
    }) {
        errors.push(DevfileError::new(
            "starterProjects",
            format!(
                "starter project {:?} would go to the same directory as a project ({})",
                clash.name, clash.clone_path
            ),
        ));
    }

    // Container and volume details.
    let mut containers = Vec::new();
    let mut volumes = Vec::new();
    let mut endpoint_names: BTreeMap<String, String> = BTreeMap::new();
    let mut ports: BTreeMap<u16, (String, String)> = BTreeMap::new();
    for (i, c) in raw.components.iter().enumerate() {
        let path = format!("components[{i}]");
        if let Some(v) = &c.volume {
            quantity(&v.size, format!("{path}.volume.size"), false, errors);
            volumes.push(Volume {
                name: c.name.clone(),
                size: v.size.clone(),
                ephemeral: v.ephemeral.unwrap_or(false),
            });
        }
        let Some(ct) = &c.container else { continue };
        let ov = outer::container_overrides(
            c.attributes.as_ref(),
            &format!("{path}.attributes"),
            errors,
        );
        let cpu_limit = ov.cpu_limit.or_else(|| ct.cpu_limit.clone());
        let cpu_request = ov.cpu_request.or_else(|| ct.cpu_request.clone());
        let memory_limit = ov.memory_limit.or_else(|| ct.memory_limit.clone());
        let memory_request = ov.memory_request.or_else(|| ct.memory_request.clone());
        let cp = format!("{path}.container");
        if ct.dedicated_pod == Some(true) {
            errors.push(unsupported(
                format!("{cp}.dedicatedPod"),
                &format!("component {:?}: `dedicatedPod` is", c.name),
                "every container of a Warren workspace runs in the workspace's one pod",
            ));
        }
        if ct.image.trim().is_empty() {
            errors.push(DevfileError::new(
                format!("{cp}.image"),
                "the image must not be empty",
            ));
        }
        let cpu_req = quantity(&cpu_request, format!("{cp}.cpuRequest"), true, errors);
        let cpu_lim = quantity(&cpu_limit, format!("{cp}.cpuLimit"), true, errors);
        let mem_req = quantity(
            &memory_request,
            format!("{cp}.memoryRequest"),
            false,
            errors,
        );
        let mem_lim = quantity(&memory_limit, format!("{cp}.memoryLimit"), false, errors);
        // Below these, container runtimes refuse to create the container (runc: memory under
        // 6 MiB; Docker and Podman: under 0.01 CPU) with an error naming none of this.
        if mem_lim.is_some_and(|m| m < MIN_MEMORY_LIMIT_BYTES) {
            errors.push(DevfileError::new(
                format!("{cp}.memoryLimit"),
                format!(
                    "{} is below 6Mi, the least memory a container can be given",
                    memory_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if cpu_lim.is_some_and(|c| c < MIN_CPU_LIMIT_MILLIS) {
            errors.push(DevfileError::new(
                format!("{cp}.cpuLimit"),
                format!(
                    "{} is below 10m, the least CPU a container can be given",
                    cpu_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if matches!((cpu_req, cpu_lim), (Some(r), Some(l)) if r > l) {
            errors.push(DevfileError::new(
                format!("{cp}.cpuRequest"),
                format!(
                    "cpuRequest {} is more than cpuLimit {}",
                    cpu_request.as_deref().unwrap_or_default(),
                    cpu_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if matches!((mem_req, mem_lim), (Some(r), Some(l)) if r > l) {
            errors.push(DevfileError::new(
                format!("{cp}.memoryRequest"),
                format!(
                    "memoryRequest {} is more than memoryLimit {}",
                    memory_request.as_deref().unwrap_or_default(),
                    memory_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        let source_mapping = ct
            .source_mapping
            .clone()
            .unwrap_or_else(|| "/projects".into());
        if let Some(why) = mount_path_problem(&source_mapping) {
            errors.push(unsupported(
                format!("{cp}.sourceMapping"),
                &format!("sourceMapping {source_mapping:?} is"),
                why,
            ));
        }
        let mut endpoints = Vec::new();
        for (j, e) in ct.endpoints.iter().flatten().enumerate() {
            let ep = format!("{cp}.endpoints[{j}]");
            if let Some(other) = endpoint_names.insert(e.name.clone(), c.name.clone()) {
                errors.push(DevfileError::new(
                    format!("{ep}.name"),
                    format!(
                        "endpoint name {:?} is already used in component {other:?}",
                        e.name
                    ),
                ));
            }
            check_reserved(&e.name, "endpoint", format!("{ep}.name"), errors);
            if e.annotation.is_some() {
                errors.push(unsupported(
                    format!("{ep}.annotation"),
                    &format!(
                        "endpoint {:?}: `annotation` (for an Ingress or Route) is",
                        e.name
                    ),
                    "Warren exposes endpoints through its own proxy, not an Ingress or Route",
                ));
            }
            let port = match u16::try_from(e.target_port) {
                Ok(p) if p > 0 => p,
                _ => {
                    errors.push(DevfileError::new(
                        format!("{ep}.targetPort"),
                        format!("{} is not a port number (1 to 65535)", e.target_port),
                    ));
                    continue;
                }
            };
            // Endpoints of one container may share a port (the specification allows it:
            // e.g. two paths of one server); containers of one pod share its network, so
            // two containers cannot.
            match ports.get(&port) {
                Some((container, other)) if *container != c.name => {
                    errors.push(DevfileError::new(
                        format!("{ep}.targetPort"),
                        format!(
                            "port {port} is already used by endpoint {other:?} of container {container:?}; \
                             the containers of a workspace share one network"
                        ),
                    ));
                }
                Some(_) => {}
                None => {
                    ports.insert(port, (c.name.clone(), e.name.clone()));
                }
            }
            endpoints.push(DevfileEndpoint {
                name: e.name.clone(),
                target_port: port,
                exposure: e.exposure.unwrap_or(Exposure::Public),
                protocol: e.protocol.unwrap_or(Protocol::Http),
                // The specification does not require the leading `/` URLs need.
                path: e.path.as_ref().filter(|p| !p.is_empty()).map(|p| {
                    if p.starts_with('/') {
                        p.clone()
                    } else {
                        format!("/{p}")
                    }
                }),
                secure: e.secure.unwrap_or(false),
            });
        }
        let mut mount_paths: BTreeSet<String> = BTreeSet::new();
        let mount_sources = ct.mount_sources.unwrap_or(true);
        if mount_sources {
            mount_paths.insert(normalize_path(&source_mapping));
        }
        let mut volume_mounts = Vec::new();
        for (j, m) in ct.volume_mounts.iter().flatten().enumerate() {
            let mp = format!("{cp}.volumeMounts[{j}]");
            match kinds.get(&m.name) {
                Some(Kind::Volume) => {}
                Some(_) => errors.push(DevfileError::new(
                    format!("{mp}.name"),
                    format!("{:?} is not a volume component", m.name),
                )),
                None => errors.push(DevfileError::new(
                    format!("{mp}.name"),
                    format!(
                        "refers to volume {:?}, which the devfile does not define",
                        m.name
                    ),
                )),
            }
            let path = m.path.clone().unwrap_or_else(|| format!("/{}", m.name));
            if let Some(why) = mount_path_problem(&path) {
                errors.push(unsupported(
                    format!("{mp}.path"),
                    &format!("mount path {path:?} is"),
                    why,
                ));
            } else if normalize_path(&path) == "/warren" || path.starts_with("/warren/") {
                errors.push(DevfileError::new(
                    format!("{mp}.path"),
                    format!("{path:?}: /warren is reserved for Warren"),
                ));
            } else if !mount_paths.insert(normalize_path(&path)) {
                errors.push(DevfileError::new(
                    format!("{mp}.path"),
                    format!("{path:?} is already a mount point in this container"),
                ));
            }
            volume_mounts.push(VolumeMount {
                name: m.name.clone(),
                path,
            });
        }
        let env = env_list(
            ct.env.as_ref().map(|v| {
                v.iter()
                    .map(|x| RawEnv {
                        name: x.name.clone(),
                        value: x.value.clone(),
                    })
                    .collect()
            }),
            &format!("{cp}.env"),
            false,
            errors,
        );
        let (deployment_annotations, service_annotations) = match &ct.annotation {
            Some(a) => (
                a.deployment.clone().unwrap_or_default(),
                a.service.clone().unwrap_or_default(),
            ),
            None => Default::default(),
        };
        check_annotations(
            &deployment_annotations,
            &format!("{cp}.annotation.deployment"),
            errors,
        );
        check_annotations(
            &service_annotations,
            &format!("{cp}.annotation.service"),
            errors,
        );
        let main = match is_main_attr(c.attributes.as_ref()) {
            None => false,
            Some(Ok(b)) => b,
            Some(Err(())) => {
                errors.push(DevfileError::new(
                    format!("{path}.attributes.warren.dev/main"),
                    "expected true or false",
                ));
                false
            }
        };
        containers.push(Container {
            name: c.name.clone(),
            image: ct.image.clone(),
            command: ct.command.clone().unwrap_or_default(),
            args: ct.args.clone().unwrap_or_default(),
            env,
            cpu_request: cpu_request.clone(),
            cpu_limit: cpu_limit.clone(),
            memory_request: memory_request.clone(),
            memory_limit: memory_limit.clone(),
            mount_sources,
            source_mapping,
            endpoints,
            volume_mounts,
            deployment_annotations,
            service_annotations,
            init_only: init_only.contains(&c.name),
            main,
        });
    }

    // The main container.
    let marked: Vec<usize> = (0..containers.len())
        .filter(|i| containers[*i].main)
        .collect();
    let candidates: Vec<usize> = (0..containers.len())
        .filter(|i| !containers[*i].init_only)
        .collect();
    let main = match (marked.as_slice(), candidates.as_slice()) {
        ([m], _) => {
            if containers[*m].init_only {
                errors.push(DevfileError::new(
                    component_path(&raw, &containers[*m].name),
                    format!(
                        "the main container {:?} is applied by a preStart event, so it only runs as an init container",
                        containers[*m].name
                    ),
                ));
            }
            Some(*m)
        }
        ([], [only]) => Some(*only),
        ([], []) => {
            if !errors.iter().any(|e| e.is_unsupported()) || containers.is_empty() {
                errors.push(DevfileError::new(
                    "components",
                    "the devfile has no container component; Warren needs one to run the workspace",
                ));
            }
            None
        }
        ([], many) => {
            // A deterministic choice: among the containers that mount the sources (the
            // main one must), the one with the most endpoints, the first of equals.
            let names: Vec<&str> = many.iter().map(|i| containers[*i].name.as_str()).collect();
            let pool: Vec<usize> = many
                .iter()
                .copied()
                .filter(|i| containers[*i].mount_sources)
                .collect();
            let pool = if pool.is_empty() { many.to_vec() } else { pool };
            let most = pool
                .iter()
                .map(|i| containers[*i].endpoints.len())
                .max()
                .unwrap_or(0);
            let chosen = pool
                .iter()
                .copied()
                .find(|i| containers[*i].endpoints.len() == most)
                .unwrap_or(many[0]);
            let why = if most > 0
                && pool
                    .iter()
                    .filter(|i| containers[**i].endpoints.len() == most)
                    .count()
                    == 1
            {
                "it has the most endpoints"
            } else {
                "it is the first that mounts the sources"
            };
            notices.push(Notice {
                path: "components".into(),
                message: format!(
                    "{} containers ({}) and none is marked as the main one: Warren chose {:?} ({why}); mark one with the attribute `warren.dev/main: true` to choose",
                    names.len(),
                    names.join(", "),
                    containers[chosen].name
                ),
            });
            Some(chosen)
        }
        (many, _) => {
            let names: Vec<&str> = many.iter().map(|i| containers[*i].name.as_str()).collect();
            errors.push(DevfileError::new(
                "components",
                format!(
                    "{} containers are marked `warren.dev/main: true` ({}); exactly one must be",
                    names.len(),
                    names.join(", ")
                ),
            ));
            None
        }
    };
    if let Some(m) = main {
        containers[m].main = true;
        if !containers[m].mount_sources {
            errors.push(DevfileError::new(
                format!("{}.container.mountSources", component_path(&raw, &containers[m].name)),
                "the main container must mount the project sources (Warren clones the project there)",
            ));
        }
    }
    // Init-only containers (applied by preStart) never run alongside the others.
    for c in containers.iter().filter(|c| c.init_only) {
        if !c.endpoints.is_empty() {
            errors.push(DevfileError::new(
                format!("{}.container.endpoints", component_path(&raw, &c.name)),
                format!(
                    "container {:?} is applied by a preStart event and only runs as an init container, so its endpoints would never be reachable",
                    c.name
                ),
            ));
        }
    }
    for (i, id) in post_start.iter().enumerate() {
        let on = commands
            .iter()
            .find(|c| &c.id == id)
            .and_then(|c| c.component());
        if let Some(c) = on.and_then(|n| containers.iter().find(|c| c.name == n && c.init_only)) {
            errors.push(DevfileError::new(
                format!("events.postStart[{i}]"),
                format!(
                    "command {id:?} runs in container {:?}, which is applied by a preStart event and only runs as an init container",
                    c.name
                ),
            ));
        }
    }
    let main = main?;
    Some(Devfile {
        schema_version: raw.schema_version,
        metadata_name: raw.metadata.and_then(|m| m.name),
        variables: raw.variables,
        containers,
        volumes,
        commands,
        pre_start,
        post_start,
        main,
        projects: devfile_projects,
        starter_projects,
        notices,
        images,
        manifests,
    })
}

fn component_path(raw: &RawDevfile, name: &str) -> String {
    raw.components
        .iter()
        .position(|c| c.name == name)
        .map(|i| format!("components[{i}]"))
        .unwrap_or_else(|| "components".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_patterns() {
        assert!(is_semver("2.2.0", true));
        assert!(is_semver("2.3.0-alpha.1+Build", true));
        assert!(!is_semver("1.0.0", true));
        assert!(!is_semver("2.2", true));
        assert!(!is_semver("2.2.0-", true));
        assert!(is_semver("10.0.0", false));
    }

    #[test]
    fn dns_labels() {
        assert!(is_dns_label("a-1", 63));
        assert!(!is_dns_label("-a", 63));
        assert!(!is_dns_label("A", 63));
        assert!(!is_dns_label(&"a".repeat(16), 15));
    }

    #[test]
    fn substitution() {
        let vars: BTreeMap<String, String> = [("v".to_string(), "x".to_string())].into();
        assert_eq!(substitute_str("a{{v}}b{{ v }}", &vars).unwrap(), "axbx");
        let e = substitute_str("{{nope}}", &vars).unwrap_err();
        assert!(e.contains("{{nope}}"), "{e}");
        assert_eq!(
            substitute_str("{{unterminated", &vars).unwrap(),
            "{{unterminated"
        );
    }
}
