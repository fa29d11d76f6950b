//! The devfile a [`Config`] runs as: one main container component (`devcontainer`) with the
//! image (built first by an `image` component with `autoBuild` when the configuration has a
//! `build` or `features`), environment, forwarded ports as public endpoints, volumes and resources; the
//! lifecycle commands as `postStart` exec commands, the once-per-workspace ones guarded by a
//! marker on the workspace's volume.
//!
//! Where the sources go: Warren clones the repository into `<sourceMapping>/<project>`, so a
//! `workspaceFolder` of `/workspaces/<project>` (the specification's default) is kept exactly;
//! another folder becomes the `sourceMapping` with the repository inside it, said by a notice.

use crate::compose::{Mount, Service};
use crate::properties::{Config, Lifecycle, Stage};
use crate::Notice;
use serde_json::{json, Value};
use warren_types::features::HOOKS_DIR;

/// The main container component's name.
pub const COMPONENT: &str = "devcontainer";
/// The name of the `image` component that builds it, when the configuration has a `build`.
pub const IMAGE_COMPONENT: &str = "devcontainer-build";

/// Where the once-per-workspace commands leave their marks, under `$HOME` (on the
/// workspace's volume, so a stop and start keeps them and a new workspace has none).
pub const MARKER_DIR: &str = ".warren/devcontainer";

/// The devfile of `config`, for a repository named `project`.
pub fn build(config: &Config, project: &str, notices: &mut Vec<Notice>) -> Value {
    let (source_mapping, sources) = sources(&config.workspace_folder, project);
    if sources != config.workspace_folder {
        notices.push(Notice {
            path: "workspaceFolder".into(),
            message: format!(
                "Warren clones the repository into a folder of its name, so its sources are at {sources} (the volume is mounted at {source_mapping})"
            ),
        });
    }
    let compose = config.compose.as_ref();
    let main_name = compose.map_or(COMPONENT.to_owned(), |c| c.services[c.main].name.clone());
    let mut container = json!({
        "image": config.image,
        "mountSources": true,
        "sourceMapping": source_mapping,
    });
    if !config.command.is_empty() {
        container["command"] = json!(config.command);
    }
    if !config.args.is_empty() {
        container["args"] = json!(config.args);
    }
    if !config.env.is_empty() {
        container["env"] = env_list(&config.env);
    }
    let mut endpoint_names = Vec::new();
    if !config.ports.is_empty() {
        container["endpoints"] = config
            .ports
            .iter()
            .map(|p| endpoint(p.label.as_deref(), p.port, p.https, &mut endpoint_names))
            .collect();
    }
    if let Some(cpus) = config.cpus {
        container["cpuRequest"] = json!(cpus.to_string());
        container["cpuLimit"] = json!(cpus.to_string());
    }
    if let Some(m) = &config.memory {
        container["memoryRequest"] = json!(m);
        container["memoryLimit"] = json!(m);
    }
    let mut taken: Vec<String> = vec![COMPONENT.into(), IMAGE_COMPONENT.into()];
    taken.extend(
        compose
            .into_iter()
            .flat_map(|c| c.services.iter().map(|s| s.name.clone())),
    );
    let mut volumes = Volumes {
        taken,
        named: Default::default(),
        components: vec![],
    };
    let mounts: Vec<Value> = config
        .mounts
        .iter()
        .map(|m| json!({"name": volumes.component(&m.source, m.ephemeral), "path": m.target}))
        .collect();
    if !mounts.is_empty() {
        container["volumeMounts"] = Value::Array(mounts);
    }
    let mut main = json!({
        "name": main_name,
        "attributes": {"warren.dev/main": true},
        "container": container,
    });
    isolation_attribute(&mut main, &main_isolation(config, compose));
    let mut components = vec![];
    let mut commands = vec![];
    let mut pre_start = vec![];
    if let Some(c) = compose {
        let main_service = &c.services[c.main];
        resources(
            &mut main["container"],
            main_service,
            config.cpus.is_some(),
            config.memory.is_some(),
        );
        healthcheck(&mut main, main_service);
        for (i, s) in c.services.iter().enumerate() {
            if i == c.main {
                components.push(main.take());
                continue;
            }
            components.extend(service_components(s, &mut volumes, &mut endpoint_names));
            if s.init {
                let id = format!("run-{}", s.name);
                commands.push(json!({"id": id, "apply": {"component": s.name}}));
                pre_start.push(id);
            }
        }
    } else {
        components.push(main);
    }
    components.append(&mut volumes.components);
    if config.build.is_some() || config.features.is_some() {
        let at = components
            .iter()
            .position(|c| c["name"] == main_name.as_str())
            .unwrap_or(0);
        components.insert(at + 1, image_component(config));
    }
    let Lifecycles {
        post_start,
        post_attach,
        waited,
        prebuild,
    } = lifecycle_commands(config, &main_name, &sources, &mut commands, notices);
    let mut devfile = json!({
        "schemaVersion": "2.2.0",
        "metadata": {"name": label(config.name.as_deref().unwrap_or(""), 63, COMPONENT)},
        "components": components,
    });
    if let Some(c) = compose {
        devfile["attributes"][warren_devfile::HOST_ALIASES_ATTRIBUTE] = json!(c.host_aliases);
    }
    if let Some(e) = &config.editor {
        devfile["attributes"][warren_devfile::EDITOR_ATTRIBUTE] = json!(e);
    }
    if !post_attach.is_empty() {
        devfile["attributes"][warren_devfile::POST_ATTACH_ATTRIBUTE] = json!(post_attach);
    }
    if !prebuild.is_empty() {
        devfile["attributes"][warren_devfile::PREBUILD_ATTRIBUTE] = json!(prebuild);
    }
    let needs = warren_types::host_requirements::HostRequirements {
        cpus: config.cpus,
        memory: config.memory.clone(),
        storage: config.storage.clone(),
        gpu: config.gpu,
    };
    if !needs.is_empty() {
        devfile["attributes"][warren_devfile::HOST_REQUIREMENTS_ATTRIBUTE] = json!(needs);
    }
    // Only when commands come after it: otherwise usable is when every command ran.
    if post_start.last() != waited.as_ref() {
        devfile["attributes"][warren_devfile::WAIT_FOR_ATTRIBUTE] =
            json!(waited.unwrap_or_default());
    }
    if !commands.is_empty() {
        devfile["commands"] = Value::Array(commands);
    }
    let events = events(&[("preStart", pre_start), ("postStart", post_start)]);
    if !events.is_null() {
        devfile["events"] = events;
    }
    devfile
}

/// The lifecycle commands of a dev container, as exec commands of its main container.
struct Lifecycles {
    /// Run at each start, in order (the once-per-workspace ones guarded).
    post_start: Vec<String>,
    post_attach: Vec<String>,
    /// The last command `waitFor` covers (none: usable once the sources are in place).
    waited: Option<String>,
    /// What a prebuild runs: `onCreateCommand` and `updateContentCommand`, as the
    /// specification's prebuilds do (`postCreateCommand` waits for the workspace's user).
    prebuild: Vec<String>,
}

/// Adds a command per lifecycle stage to `commands`, labelled with its property's name.
fn lifecycle_commands(
    config: &Config,
    main_name: &str,
    sources: &str,
    commands: &mut Vec<Value>,
    notices: &mut Vec<Notice>,
) -> Lifecycles {
    let mut post_start = vec![];
    let mut post_attach = vec![];
    let mut waited: Option<String> = None;
    let mut prebuild = vec![];
    for (stage, line) in stage_lines(config) {
        let id = command_id(stage);
        let line = if stage.once() {
            once(&id, &line, stage == Stage::UpdateContent)
        } else {
            line
        };
        commands.push(json!({
            "id": id,
            "exec": {"component": main_name, "commandLine": line, "workingDir": sources,
                "label": stage.property()},
        }));
        if stage == Stage::PostAttach {
            post_attach.push(id);
            continue;
        }
        if config.wait_for.is_some_and(|w| stage <= w) {
            waited = Some(id.clone());
        }
        if matches!(stage, Stage::OnCreate | Stage::UpdateContent) {
            prebuild.push(id.clone());
        }
        post_start.push(id);
        if stage == Stage::UpdateContent && config.lifecycle.iter().any(|(s, _)| *s == stage) {
            notices.push(Notice {
                path: stage.property().into(),
                message: "runs once, at the workspace's first start, after the clone: Warren does not update a workspace's sources by itself".into(),
            });
        }
    }
    Lifecycles {
        post_start,
        post_attach,
        waited,
        prebuild,
    }
}

/// The devfile's `events`, those with commands; `null` when none has any.
fn events(lists: &[(&str, Vec<String>)]) -> Value {
    let events: serde_json::Map<String, Value> = lists
        .iter()
        .filter(|(_, ids)| !ids.is_empty())
        .map(|(event, ids)| ((*event).to_owned(), json!(ids)))
        .collect();
    if events.is_empty() {
        Value::Null
    } else {
        Value::Object(events)
    }
}

/// The volume components of the workspace, one per named volume (shared by the containers
/// that mount it) and one per anonymous or `tmpfs` mount.
struct Volumes {
    /// Component names in use.
    taken: Vec<String>,
    /// Named volume → its component.
    named: std::collections::BTreeMap<String, String>,
    components: Vec<Value>,
}

impl Volumes {
    /// The component mounted for `source` (empty: anonymous), made when new.
    fn component(&mut self, source: &str, ephemeral: bool) -> String {
        if !ephemeral && !source.is_empty() {
            if let Some(name) = self.named.get(source) {
                return name.clone();
            }
        }
        let name = unique(&label(source, 63, "volume"), &self.taken);
        self.taken.push(name.clone());
        if !ephemeral && !source.is_empty() {
            self.named.insert(source.to_owned(), name.clone());
        }
        self.components
            .push(json!({"name": name, "volume": {"ephemeral": ephemeral}}));
        name
    }
}

fn env_list(env: &std::collections::BTreeMap<String, String>) -> Value {
    env.iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect()
}

/// A public endpoint on `port`, its name unique among `names` (recorded there).
fn endpoint(label_text: Option<&str>, port: u16, https: bool, names: &mut Vec<String>) -> Value {
    let name = endpoint_name(label_text, port, names);
    names.push(name.clone());
    json!({
        "name": name,
        "targetPort": port,
        "exposure": "public",
        "protocol": if https { "https" } else { "http" },
    })
}

/// A Compose service's limits and reservations on its container component (the dev
/// container's own only where `hostRequirements` did not size it).
fn resources(container: &mut Value, s: &Service, cpu_set: bool, memory_set: bool) {
    for (key, value, set) in [
        ("cpuLimit", &s.cpu_limit, cpu_set),
        ("cpuRequest", &s.cpu_request, cpu_set),
        ("memoryLimit", &s.memory_limit, memory_set),
        ("memoryRequest", &s.memory_request, memory_set),
    ] {
        if let (Some(v), false) = (value, set) {
            container[key] = json!(v);
        }
    }
}

/// The healthcheck a dependent waits on, as the component's attribute.
fn healthcheck(component: &mut Value, s: &Service) {
    if let (Some(h), true) = (&s.healthcheck, s.hold) {
        component["attributes"][warren_devfile::HEALTHCHECK_ATTRIBUTE] = json!({
            "test": h.test,
            "intervalSeconds": h.interval,
            "timeoutSeconds": h.timeout,
            "retries": h.retries,
            "startPeriodSeconds": h.start_period,
        });
    }
}

/// A container component's [`warren_devfile::ISOLATION_ATTRIBUTE`], when it asks for anything.
fn isolation_attribute(component: &mut Value, x: &warren_devfile::IsolationExceptions) {
    if !x.is_empty() {
        component["attributes"][warren_devfile::ISOLATION_ATTRIBUTE] =
            json!({"capAdd": x.cap_add, "securityOpt": x.security_opt});
    }
}

/// What the dev container asks beyond the confinement: its own, and (with Compose) its
/// service's.
fn main_isolation(
    config: &Config,
    compose: Option<&crate::compose::Compose>,
) -> warren_devfile::IsolationExceptions {
    let mut isolation = config.isolation.clone();
    if let Some(c) = compose {
        let own = &c.services[c.main].isolation;
        for cap in &own.cap_add {
            if !isolation.cap_add.contains(cap) {
                isolation.cap_add.push(cap.clone());
            }
        }
        for o in &own.security_opt {
            if !isolation.security_opt.contains(o) {
                isolation.security_opt.push(o.clone());
            }
        }
    }
    isolation
}

/// The components of a Compose service beside the dev container: its container, and the
/// `image` component building its image when it has a `build`.
fn service_components(
    s: &Service,
    volumes: &mut Volumes,
    endpoint_names: &mut Vec<String>,
) -> Vec<Value> {
    let built = format!("localhost/warren/compose-{}:latest", s.name);
    let image = match (&s.build, &s.image) {
        (Some(_), _) => built.clone(),
        (None, Some(i)) => i.clone(),
        (None, None) => String::new(),
    };
    let mut container = json!({"image": image, "mountSources": false});
    if let Some(e) = &s.entrypoint {
        container["command"] = json!(e);
    }
    if let Some(c) = &s.command {
        container["args"] = json!(c);
    }
    if !s.env.is_empty() {
        container["env"] = env_list(&s.env);
    }
    if !s.ports.is_empty() {
        container["endpoints"] = s
            .ports
            .iter()
            .map(|p| endpoint(None, *p, false, endpoint_names))
            .collect();
    }
    let mounts: Vec<Value> = s
        .volumes
        .iter()
        .map(|m| match m {
            Mount::Named { name, target } => {
                json!({"name": volumes.component(name, false), "path": target})
            }
            Mount::Ephemeral { target } => {
                json!({"name": volumes.component("", true), "path": target})
            }
        })
        .collect();
    if !mounts.is_empty() {
        container["volumeMounts"] = Value::Array(mounts);
    }
    resources(&mut container, s, false, false);
    let mut component = json!({"name": s.name, "container": container});
    healthcheck(&mut component, s);
    isolation_attribute(&mut component, &s.isolation);
    let mut out = vec![component];
    if let Some(b) = &s.build {
        let mut dockerfile = json!({"uri": b.dockerfile, "buildContext": b.context});
        if !b.args.is_empty() {
            dockerfile["args"] = json!(b.args);
        }
        let mut image = json!({"name": format!("{}-build", s.name), "image": {"imageName": built, "autoBuild": true, "dockerfile": dockerfile}});
        if let Some(t) = &b.target {
            image["attributes"] = json!({(warren_devfile::BUILD_TARGET_ATTRIBUTE): t});
        }
        out.push(image);
    }
    out
}

/// The `image` component that builds the dev container's image at the workspace's start:
/// from its Dockerfile, or from its `image` as the base, with its Features on top.
fn image_component(config: &Config) -> Value {
    let mut image = json!({"imageName": config.image, "autoBuild": true});
    let mut attributes = serde_json::Map::new();
    if let Some(b) = &config.build {
        let mut dockerfile = json!({"uri": b.dockerfile, "buildContext": b.context});
        if !b.args.is_empty() {
            dockerfile["args"] = json!(b.args);
        }
        image["dockerfile"] = dockerfile;
        if let Some(t) = &b.target {
            attributes.insert(warren_devfile::BUILD_TARGET_ATTRIBUTE.into(), json!(t));
        }
    }
    if let Some(f) = &config.features {
        attributes.insert(
            warren_types::features::FEATURES_ATTRIBUTE.into(),
            serde_json::to_value(f).unwrap_or_default(),
        );
    }
    let mut component = json!({"name": IMAGE_COMPONENT, "image": image});
    if !attributes.is_empty() {
        component["attributes"] = Value::Object(attributes);
    }
    component
}

/// The shell text each lifecycle stage runs, in the specification's order: the
/// configuration's command, after the commands its Features contribute (which the build that
/// installs them leaves in [`HOOKS_DIR`]; with Features, every stage looks there).
fn stage_lines(config: &Config) -> Vec<(Stage, String)> {
    let mut out = vec![];
    for stage in [
        Stage::OnCreate,
        Stage::UpdateContent,
        Stage::PostCreate,
        Stage::PostStart,
        Stage::PostAttach,
    ] {
        let own = config
            .lifecycle
            .iter()
            .find(|(s, _)| *s == stage)
            .map(|(_, c)| command_line(c));
        // A Feature's own postAttachCommand is not run (the build says so).
        let hooks = config.features.as_ref().filter(|_| stage != Stage::PostAttach).map(|_| {
            format!(
                "for hook in {HOOKS_DIR}/{}/*; do\n  [ -f \"$hook\" ] || continue\n  echo \"warren: running the Feature command $hook\"\n  sh \"$hook\" || exit $?\ndone",
                command_id(stage)
            )
        });
        match (hooks, own) {
            (Some(h), Some(o)) => out.push((stage, format!("{h}\n{o}"))),
            (Some(line), None) | (None, Some(line)) => out.push((stage, line)),
            (None, None) => {}
        }
    }
    out
}

/// (`sourceMapping`, the repository's folder) for the configuration's `workspaceFolder`.
fn sources(folder: &str, project: &str) -> (String, String) {
    match folder.rsplit_once('/') {
        Some((parent, base)) if base == project && !parent.is_empty() => {
            (parent.to_owned(), folder.to_owned())
        }
        _ => (folder.to_owned(), format!("{folder}/{project}")),
    }
}

/// The id of a stage's devfile command, and the folder of its Feature commands.
pub fn command_id(stage: Stage) -> String {
    match stage {
        Stage::OnCreate => "on-create",
        Stage::UpdateContent => "update-content",
        Stage::PostCreate => "post-create",
        Stage::PostStart => "post-start",
        Stage::PostAttach => "post-attach",
    }
    .into()
}

/// Single-quotes a word for `/bin/sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The shell text of a lifecycle command: a string as written, an array as its quoted words,
/// an object as its commands run at once, failing when any of them fails.
pub fn command_line(c: &Lifecycle) -> String {
    match c {
        Lifecycle::Shell(s) => s.clone(),
        Lifecycle::Exec(argv) => argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "),
        Lifecycle::Parallel(parts) => {
            let mut s = String::from("pids=\n");
            for (name, part) in parts {
                s.push_str(&format!(
                    "( echo {}; {} ) & pids=\"$pids $!\"\n",
                    quote(&format!("running {name}")),
                    command_line(part)
                ));
            }
            s.push_str("status=0\nfor p in $pids; do wait \"$p\" || status=1; done\nexit $status");
            s
        }
    }
}

/// `line` run at the first start only: a marker under `$HOME` records that it succeeded, so a
/// failed run is tried again at the next start.
fn once(id: &str, line: &str, again_for_new_sources: bool) -> String {
    // A workspace started from a prebuild whose sources have moved on since (the startup
    // script says so) runs `updateContentCommand` again: it is there for new content.
    let done = if again_for_new_sources {
        "[ -e \"$mark\" ] && [ -z \"${WARREN_SOURCES_UPDATED:-}\" ]"
    } else {
        "[ -e \"$mark\" ]"
    };
    format!(
        "mark=\"$HOME/{MARKER_DIR}/{id}.done\"\nif {done}; then exit 0; fi\n( {line}\n) || exit $?\nmkdir -p \"$HOME/{MARKER_DIR}\" && : >\"$mark\""
    )
}

/// A DNS label of at most `max` characters made of `s` (lowercase, other characters as `-`),
/// or `fallback` when nothing is left.
fn label(s: &str, max: usize, fallback: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
    }
    let out: String = out.chars().take(max).collect();
    let out = out.trim_end_matches('-').to_owned();
    if out.is_empty() {
        fallback.to_owned()
    } else {
        out
    }
}

/// `name`, or `name-2`, `name-3`… when taken.
fn unique(name: &str, taken: &[String]) -> String {
    let mut candidate = name.to_owned();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{}-{n}", &name[..name.len().min(60)]);
        n += 1;
    }
    candidate
}

/// An endpoint's name (at most 15 characters): its label's, else `port-<port>`.
fn endpoint_name(label_text: Option<&str>, port: u16, taken: &[String]) -> String {
    let fallback = format!("port-{port}");
    let name = match label_text {
        Some(l) => label(l, 15, &fallback),
        None => fallback.clone(),
    };
    if taken.contains(&name) {
        fallback
    } else {
        name
    }
}
