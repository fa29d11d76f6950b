//! Every property of the specification (`devContainer.base.schema.json`), each honoured,
//! accepted with a notice of what Warren does instead, or refused by name with the reason.
//! The result is [`Config`]: only what the devfile is made of.

use crate::{problem, unsupported, Input, Notice, Problem, Problems};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use warren_types::features::FeatureBuild;

pub use crate::lifecycle::{Lifecycle, Stage};

/// A forwarded port and how it is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub port: u16,
    /// `portsAttributes.<port>.label`.
    pub label: Option<String>,
    /// `portsAttributes.<port>.protocol` is `https`: the server in the container speaks TLS.
    pub https: bool,
}

/// A port another Compose service listens on (`forwardPorts` of `"db:5432"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicePort {
    /// Where it was named (`forwardPorts[1]`).
    pub path: String,
    pub service: String,
    pub port: u16,
}

/// A named volume mounted into the container (`mounts` of `type=volume`, or `tmpfs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeMount {
    pub source: String,
    pub target: String,
    /// A `tmpfs` mount: lives as long as the container.
    pub ephemeral: bool,
}

/// What a configuration asks of Warren, once every property has been looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub name: Option<String>,
    pub image: String,
    /// The sources' folder in the container.
    pub workspace_folder: String,
    pub ports: Vec<Port>,
    /// `containerEnv`, then `remoteEnv` (which wins for a name in both), in name order.
    pub env: BTreeMap<String, String>,
    pub mounts: Vec<VolumeMount>,
    pub lifecycle: Vec<(Stage, Lifecycle)>,
    /// `waitFor`: the last stage a workspace waits for before it is usable (the
    /// specification's default `updateContentCommand`); `None` for `initializeCommand`: usable
    /// once the sources are in place.
    pub wait_for: Option<Stage>,
    /// `hostRequirements.cpus`.
    pub cpus: Option<u64>,
    /// `hostRequirements.memory`, as a Kubernetes quantity.
    pub memory: Option<String>,
    /// `hostRequirements.storage`, as a Kubernetes quantity: only a machine class gives it.
    pub storage: Option<String>,
    /// `hostRequirements.gpu`: only a machine class gives one.
    pub gpu: warren_types::host_requirements::GpuRequirement,
    /// The image built from a Dockerfile instead of `image` (which is then
    /// [`crate::build::IMAGE`]).
    pub build: Option<crate::build::Build>,
    /// The Features installed on top of the image (or of what `build` makes); with an
    /// `image`, that image becomes the base and `image` [`crate::build::IMAGE`].
    pub features: Option<FeatureBuild>,
    /// A Compose dev container: its services (the dev container's own among them, whose
    /// image, environment, ports and volumes are also in the fields above).
    pub compose: Option<crate::compose::Compose>,
    /// What the dev container runs (a Compose service's `entrypoint` and `command`, run by
    /// Warren's start script), when not Warren's keep-alive.
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// `customizations.vscode`, for the injected editor.
    pub editor: Option<warren_devfile::EditorCustomizations>,
    /// `capAdd`, `securityOpt` and those given in `runArgs` (`crate::isolation`).
    pub isolation: warren_devfile::IsolationExceptions,
}

/// Reads `value` (an object, variables already substituted).
pub fn read(
    value: &Value,
    input: &Input<'_>,
    notices: &mut Vec<Notice>,
) -> Result<Config, Problems> {
    let empty = Map::new();
    let top = value.as_object().unwrap_or(&empty);
    let mut r = Reader {
        problems: Vec::new(),
        notices,
        ports_attributes: BTreeMap::new(),
        service_ports: Vec::new(),
        override_command: None,
    };
    let mut config = Config {
        name: None,
        image: String::new(),
        workspace_folder: format!("/workspaces/{}", input.project),
        ports: Vec::new(),
        env: BTreeMap::new(),
        mounts: Vec::new(),
        lifecycle: Vec::new(),
        wait_for: Some(Stage::UpdateContent),
        cpus: None,
        memory: None,
        storage: None,
        gpu: Default::default(),
        build: None,
        features: None,
        compose: None,
        command: vec![],
        args: vec![],
        editor: None,
        isolation: Default::default(),
    };
    // Attributes first: the ports read later are labelled with them.
    if let Some(v) = top.get("portsAttributes") {
        r.ports_attributes(v);
    }
    let mut remote_env = BTreeMap::new();
    for (key, v) in top {
        r.property(key, v, &mut config, &mut remote_env);
    }
    let folder = input.path.rsplit_once('/').map_or("", |(f, _)| f);
    config.build = crate::build::Reading {
        folder,
        problems: &mut r.problems,
        notices: &mut *r.notices,
    }
    .read(top);
    if let Some(v) = top.get("customizations") {
        config.editor = crate::customizations::Reading {
            folder,
            workspace_folder: &config.workspace_folder.clone(),
            problems: &mut r.problems,
            notices: &mut *r.notices,
        }
        .read(v);
    }
    let compose = crate::compose::Reading {
        input,
        folder,
        workspace_folder: &config.workspace_folder.clone(),
        problems: &mut r.problems,
        notices: &mut *r.notices,
    }
    .read(top);
    let pending = crate::compose::config::Pending {
        service_ports: std::mem::take(&mut r.service_ports),
        override_command: r.override_command,
    };
    crate::compose::config::apply(
        compose,
        top,
        pending,
        &mut config,
        &mut r.problems,
        &mut *r.notices,
    );
    // A Compose dev container's image and build are its service's (`compose::config`).
    let own_image = config
        .compose
        .is_none()
        .then_some((&config.build, config.image.is_empty()));
    match own_image.unwrap_or((&None, false)) {
        (Some(_), false) => r.problems.push(problem(
            "image",
            "name either the `image` to run or the Dockerfile to `build` it from, not both",
        )),
        (Some(_), true) => config.image = crate::build::IMAGE.to_owned(),
        (None, true)
            if !["build", "dockerFile", "context", "dockerComposeFile"]
                .iter()
                .any(|k| top.contains_key(*k)) =>
        {
            r.problems.push(problem(
                "",
                "a dev container names its `image`, the Dockerfile to `build` it from, or its `dockerComposeFile`",
            ))
        }
        (None, _) => {}
    }
    let (features, install_order) = crate::features::Reading {
        folder,
        problems: &mut r.problems,
        notices: &mut *r.notices,
    }
    .read(top);
    if !features.is_empty() && !config.image.is_empty() {
        let base_image = (config.build.is_none()).then(|| config.image.clone());
        if base_image.is_some() {
            config.image = crate::build::IMAGE.to_owned();
        }
        let user = |key: &str| top.get(key).and_then(Value::as_str).map(str::to_owned);
        config.features = Some(FeatureBuild {
            base_image,
            features,
            install_order,
            container_user: user("containerUser"),
            remote_user: user("remoteUser"),
        });
    }
    config.env.extend(remote_env);
    config.lifecycle.sort_by_key(|(stage, _)| *stage);
    for p in &mut config.ports {
        if let Some(a) = r.ports_attributes.get(&p.port) {
            p.label.clone_from(&a.0);
            p.https = a.1;
        }
    }
    if r.problems.is_empty() {
        Ok(config)
    } else {
        Err(Problems(r.problems))
    }
}

/// A lifecycle command given elsewhere than in a configuration (a Feature's metadata), read
/// by the same rules; `path` names it in the problems. `None` when it is empty.
pub fn lifecycle_command(path: &str, v: &Value) -> Result<Option<Lifecycle>, Problems> {
    let mut notices = Vec::new();
    let mut r = Reader {
        problems: Vec::new(),
        notices: &mut notices,
        ports_attributes: BTreeMap::new(),
        service_ports: Vec::new(),
        override_command: None,
    };
    let command = r.command(path, v);
    if r.problems.is_empty() {
        Ok(command)
    } else {
        Err(Problems(r.problems))
    }
}

struct Reader<'n> {
    problems: Vec<Problem>,
    notices: &'n mut Vec<Notice>,
    /// Port → (label, https).
    ports_attributes: BTreeMap<u16, (Option<String>, bool)>,
    /// `forwardPorts` of other services' ports, placed once the Compose files are read.
    service_ports: Vec<ServicePort>,
    /// `overrideCommand`, as given.
    override_command: Option<bool>,
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Reader<'_> {
    fn notice(&mut self, path: &str, message: impl Into<String>) {
        self.notices.push(Notice {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    fn wrong_type(&mut self, path: &str, want: &str, v: &Value) {
        self.problems.push(problem(
            path,
            format!("must be {want}, not {}", type_name(v)),
        ));
    }

    fn string<'v>(&mut self, path: &str, v: &'v Value) -> Option<&'v str> {
        match v {
            Value::String(s) => Some(s),
            _ => {
                self.wrong_type(path, "a string", v);
                None
            }
        }
    }

    fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            _ => {
                self.wrong_type(path, "a boolean", v);
                None
            }
        }
    }

    fn refuse(&mut self, path: &str, what: &str, why: &str) {
        self.problems.push(unsupported(path, what, why));
    }

    fn property(
        &mut self,
        key: &str,
        v: &Value,
        config: &mut Config,
        remote_env: &mut BTreeMap<String, String>,
    ) {
        match key {
            // The schema's own URL: nothing to do.
            "$schema" => {}
            "name" => config.name = self.string(key, v).map(str::to_owned),
            "image" => {
                if let Some(s) = self.string(key, v) {
                    if s.trim().is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
                        self.problems.push(problem(key, format!("{s:?} is not an image name")));
                    } else {
                        config.image = s.to_owned();
                    }
                }
            }
            // Read together, after the rest (`crate::build`).
            "build" | "dockerFile" | "context" => {}
            // Read together, after the rest (`crate::compose`).
            "dockerComposeFile" | "service" | "runServices" => {}
            // Read together, after the rest (`crate::features`).
            "features" | "overrideFeatureInstallOrder" => {}
            "secrets" => self.notice(
                key,
                "recommended secrets are not asked for: give them as the workspace's variables, which `${localEnv:NAME}` reads",
            ),
            "forwardPorts" => self.forward_ports(v, config),
            "appPort" => self.app_port(v, config),
            // Read before the others (see `read`).
            "portsAttributes" => {}
            "otherPortsAttributes" => self.notice(
                key,
                "Warren forwards only the ports the configuration lists (each on its own authenticated host), so attributes for other ports have nothing to apply to",
            ),
            "updateRemoteUserUID" => self.notice(
                key,
                "every workspace runs as the agent's unprivileged user (its `security.runAsUser`), so the user's id is never changed",
            ),
            "containerEnv" => self.env(key, v, &mut config.env),
            "remoteEnv" => self.env(key, v, remote_env),
            "containerUser" | "remoteUser" => {
                if let Some(u) = self.string(key, v) {
                    let what = if u == "root" || u == "0" {
                        "root never runs a workspace (tenants share the machine)"
                    } else {
                        "the image's users are not switched to"
                    };
                    self.notice(
                        key,
                        format!("{what}: Warren runs the container, its commands, terminals and SSH sessions as the agent's unprivileged user (its `security.runAsUser`), with `$HOME` on the workspace's volume"),
                    );
                }
            }
            "mounts" => self.mounts(v, config),
            "init" => {
                if self.boolean(key, v) == Some(false) {
                    self.notice(key, "Warren's workspace always runs an init process that reaps orphans and passes signals on");
                }
            }
            "privileged" => {
                if self.boolean(key, v) == Some(true) {
                    self.refuse(key, "a privileged container", "it would reach the machine and the other tenants' workspaces");
                }
            }
            "capAdd" | "securityOpt" | "runArgs" => {
                let mut out = crate::isolation::Out {
                    problems: &mut self.problems,
                    notices: &mut *self.notices,
                    isolation: &mut config.isolation,
                };
                match key {
                    "runArgs" => crate::isolation::run_args(&mut out, v, &mut config.env),
                    _ => out.list(key, v, key == "capAdd"),
                }
            }
            "initializeCommand" => self.refuse(
                key,
                "`initializeCommand`",
                "it runs on the user's own machine before the container is made, and a Warren workspace is made on the server's agents",
            ),
            "onCreateCommand" => self.lifecycle(Stage::OnCreate, v, config),
            "updateContentCommand" => self.lifecycle(Stage::UpdateContent, v, config),
            "postCreateCommand" => self.lifecycle(Stage::PostCreate, v, config),
            "postStartCommand" => self.lifecycle(Stage::PostStart, v, config),
            "postAttachCommand" => self.lifecycle(Stage::PostAttach, v, config),
            "waitFor" => {
                if let Some(s) = self.string(key, v) {
                    match Stage::waited_for(s) {
                        Some(stage) => {
                            config.wait_for = stage;
                            self.notice(key, format!("`warren ws create --wait` returns once the lifecycle commands up to {s} ran; the later ones go on in the background, their output in `warren ws logs`"));
                        }
                        None => self.problems.push(problem(key, format!("{s:?} is not a lifecycle command: expected initializeCommand, onCreateCommand, updateContentCommand, postCreateCommand or postStartCommand"))),
                    }
                }
            }
            "userEnvProbe" => self.notice(
                key,
                "Warren probes no shell for its environment: commands and sessions get the container's environment (`containerEnv`, `remoteEnv`)",
            ),
            "hostRequirements" => self.host_requirements(v, config),
            // Read together, after the rest (`crate::customizations`).
            "customizations" => {}
            "shutdownAction" => self.notice(
                key,
                "Warren's workspaces are stopped by their users or by the idle and lifetime policies, not when a tool closes",
            ),
            // Decided with the Compose files (`Reader::compose`).
            "overrideCommand" => self.override_command = self.boolean(key, v),
            "workspaceFolder" => {
                if let Some(f) = self.string(key, v) {
                    if !f.starts_with('/') || f.split('/').any(|p| p == "..") {
                        self.problems.push(problem(key, format!("{f:?} must be an absolute path without `..`")));
                    } else {
                        config.workspace_folder = f.trim_end_matches('/').to_owned();
                        if config.workspace_folder.is_empty() {
                            self.problems.push(problem(key, "the sources cannot be the container's root"));
                        }
                    }
                }
            }
            "workspaceMount" => self.notice(
                key,
                "Warren puts the repository's sources on the workspace's own volume at `workspaceFolder` itself; the mount of a folder of the user's machine is not made",
            ),
            other => self.notice(
                other,
                "not a property of the dev container specification (a misspelling, or another tool's): ignored",
            ),
        }
    }

    fn port(&mut self, path: &str, v: &Value) -> Option<u16> {
        match v {
            Value::Number(n) => match n.as_u64().and_then(|p| u16::try_from(p).ok()) {
                Some(p) if p > 0 => Some(p),
                _ => {
                    self.problems
                        .push(problem(path, format!("{n} is not a port (1-65535)")));
                    None
                }
            },
            Value::String(s) => match s.split_once(':') {
                Some((host, port)) => {
                    // Another Compose service's: placed once the services are read.
                    match port.parse::<u16>() {
                        Ok(p) if p > 0 => self.service_ports.push(ServicePort {
                            path: path.to_owned(),
                            service: host.to_owned(),
                            port: p,
                        }),
                        _ => self
                            .problems
                            .push(problem(path, format!("{s:?} is not a port (1-65535)"))),
                    }
                    None
                }
                None => match s.parse::<u16>() {
                    Ok(p) if p > 0 => Some(p),
                    _ => {
                        self.problems
                            .push(problem(path, format!("{s:?} is not a port (1-65535)")));
                        None
                    }
                },
            },
            _ => {
                self.wrong_type(path, "a port number", v);
                None
            }
        }
    }

    fn add_port(&mut self, port: u16, config: &mut Config) {
        if !config.ports.iter().any(|p| p.port == port) {
            config.ports.push(Port {
                port,
                label: None,
                https: false,
            });
        }
    }

    fn forward_ports(&mut self, v: &Value, config: &mut Config) {
        let Some(items) = v.as_array() else {
            self.wrong_type("forwardPorts", "an array", v);
            return;
        };
        for (i, item) in items.iter().enumerate() {
            if let Some(p) = self.port(&format!("forwardPorts[{i}]"), item) {
                self.add_port(p, config);
            }
        }
    }

    /// `appPort`: a port, `"host:container"`, or an array of them; Warren forwards the
    /// container's port on its own host, as `forwardPorts` does.
    fn app_port(&mut self, v: &Value, config: &mut Config) {
        let items = match v {
            Value::Array(items) => items.clone(),
            other => vec![other.clone()],
        };
        for (i, item) in items.iter().enumerate() {
            let path = if v.is_array() {
                format!("appPort[{i}]")
            } else {
                "appPort".into()
            };
            let port = match item {
                Value::String(s) if s.contains(':') => {
                    let container = s.rsplit(':').next().unwrap_or_default();
                    self.notice(&path, format!("{s:?}: no port of the machine is published; the container's port {container} is forwarded on its own authenticated host"));
                    self.port(&path, &Value::String(container.to_owned()))
                }
                other => self.port(&path, other),
            };
            if let Some(p) = port {
                self.add_port(p, config);
            }
        }
        self.notice("appPort", "forwarded as `forwardPorts` is: on the workspace's authenticated host for the port, not on the machine's own port");
    }

    fn ports_attributes(&mut self, v: &Value) {
        let Some(m) = v.as_object() else {
            self.wrong_type("portsAttributes", "an object", v);
            return;
        };
        for (key, attrs) in m {
            let path = format!("portsAttributes.{key}");
            let Ok(port) = key.parse::<u16>() else {
                self.notice(&path, "attributes of a port range or of a process's command line apply to ports found by watching the container, and Warren forwards only the ports the configuration lists");
                continue;
            };
            let Some(a) = attrs.as_object() else {
                self.wrong_type(&path, "an object", attrs);
                continue;
            };
            let mut label = None;
            let mut https = false;
            for (k, x) in a {
                let p = format!("{path}.{k}");
                match k.as_str() {
                    "label" => label = self.string(&p, x).map(str::to_owned),
                    "protocol" => match x.as_str() {
                        Some("https") => https = true,
                        Some("http") => {}
                        _ => self.problems.push(problem(&p, "must be \"http\" or \"https\"")),
                    },
                    "requireLocalPort" | "elevateIfNeeded" => self.notice(&p, "no port of the user's machine is used: the port is reached on its own authenticated host"),
                    "onAutoForward" => self.notice(&p, "Warren forwards the listed ports when the workspace starts and opens nothing by itself; `warren ws show` and the web UI list their URLs"),
                    _ => self.notice(&p, "not an attribute of a port in the specification: ignored"),
                }
            }
            self.ports_attributes.insert(port, (label, https));
        }
    }

    fn env(&mut self, key: &str, v: &Value, into: &mut BTreeMap<String, String>) {
        let Some(m) = v.as_object() else {
            self.wrong_type(key, "an object", v);
            return;
        };
        for (name, value) in m {
            let path = format!("{key}.{name}");
            // The API server's rule, the one the devfile is checked against.
            if let Some(why) = warren_devfile::k8s::env_name_problem(name) {
                self.problems.push(problem(&path, why));
                continue;
            }
            match value {
                Value::String(s) => {
                    into.insert(name.clone(), s.clone());
                }
                // `remoteEnv` may unset a variable with null.
                Value::Null if key == "remoteEnv" => {
                    into.remove(name);
                }
                other => self.wrong_type(&path, "a string", other),
            }
        }
    }

    fn mounts(&mut self, v: &Value, config: &mut Config) {
        let Some(items) = v.as_array() else {
            self.wrong_type("mounts", "an array", v);
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("mounts[{i}]");
            let fields: BTreeMap<String, String> = match item {
                Value::String(s) => s
                    .split(',')
                    .map(|kv| {
                        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                        (k.trim().to_owned(), v.trim().to_owned())
                    })
                    .collect(),
                Value::Object(m) => m
                    .iter()
                    .map(|(k, v)| {
                        (
                            k.clone(),
                            v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                        )
                    })
                    .collect(),
                other => {
                    self.wrong_type(&path, "a string or an object", other);
                    continue;
                }
            };
            let get = |k: &[&str]| {
                k.iter()
                    .find_map(|k| fields.get(*k))
                    .cloned()
                    .unwrap_or_default()
            };
            let kind = get(&["type"]);
            let target = get(&["target", "destination", "dst"]);
            let source = get(&["source", "src"]);
            match kind.as_str() {
                "bind" => {
                    self.refuse(&path, &format!("a bind mount of {source:?}"), "it would expose a folder of the machine the workspace runs on; use a named volume (`type=volume`)");
                    continue;
                }
                "volume" | "tmpfs" => {}
                other => {
                    self.problems.push(problem(
                        &path,
                        format!("{other:?} is not a mount type (volume, bind or tmpfs)"),
                    ));
                    continue;
                }
            }
            if !target.starts_with('/') || target.split('/').any(|p| p == "..") {
                self.problems.push(problem(
                    &path,
                    format!("the target {target:?} must be an absolute path without `..`"),
                ));
                continue;
            }
            let ephemeral = kind == "tmpfs";
            if !ephemeral && source.is_empty() {
                self.problems
                    .push(problem(&path, "a volume mount names its volume (`source`)"));
                continue;
            }
            config.mounts.push(VolumeMount {
                source: if ephemeral {
                    format!("tmpfs-{i}")
                } else {
                    source
                },
                target,
                ephemeral,
            });
        }
    }

    fn lifecycle(&mut self, stage: Stage, v: &Value, config: &mut Config) {
        if let Some(command) = self.command(stage.property(), v) {
            config.lifecycle.push((stage, command));
        }
    }

    /// A lifecycle command in any of its three forms; `None` when it is empty or wrong.
    fn command(&mut self, path: &str, v: &Value) -> Option<Lifecycle> {
        Some(match v {
            Value::Object(m) => {
                let mut parts = BTreeMap::new();
                for (name, c) in m {
                    let p = format!("{path}.{name}");
                    if let Some(c) = self.one_command(&p, c) {
                        parts.insert(name.clone(), c);
                    }
                }
                if parts.is_empty() {
                    return None;
                }
                Lifecycle::Parallel(parts)
            }
            other => self.one_command(path, other)?,
        })
    }

    fn one_command(&mut self, path: &str, v: &Value) -> Option<Lifecycle> {
        match v {
            Value::String(s) if s.trim().is_empty() => None,
            Value::String(s) => Some(Lifecycle::Shell(s.clone())),
            Value::Array(items) => {
                let argv: Option<Vec<String>> = items
                    .iter()
                    .map(|x| x.as_str().map(str::to_owned))
                    .collect();
                match argv {
                    Some(a) if !a.is_empty() => Some(Lifecycle::Exec(a)),
                    Some(_) => None,
                    None => {
                        self.problems.push(problem(
                            path,
                            "a command given as an array holds strings only",
                        ));
                        None
                    }
                }
            }
            other => {
                self.wrong_type(path, "a string or an array of strings", other);
                None
            }
        }
    }

    fn host_requirements(&mut self, v: &Value, config: &mut Config) {
        let Some(m) = v.as_object() else {
            self.wrong_type("hostRequirements", "an object", v);
            return;
        };
        for (k, x) in m {
            let path = format!("hostRequirements.{k}");
            match k.as_str() {
                "cpus" => match x.as_u64() {
                    Some(n) if n >= 1 => config.cpus = Some(n),
                    _ => self
                        .problems
                        .push(problem(&path, "must be a whole number of CPUs, at least 1")),
                },
                "memory" => match x.as_str().and_then(quantity) {
                    Some(q) => config.memory = Some(q),
                    None => self.problems.push(problem(
                        &path,
                        format!("{x} is not an amount of memory (a number with kb, mb, gb or tb)"),
                    )),
                },
                "storage" => match x.as_str().and_then(quantity) {
                    Some(q) => config.storage = Some(q),
                    None => self.problems.push(problem(
                        &path,
                        format!("{x} is not an amount of storage (a number with kb, mb, gb or tb)"),
                    )),
                },
                // `true`, `"optional"`, or `{cores, memory}` (a GPU of at least that much,
                // which a machine class's device name cannot tell: any GPU).
                "gpu" => {
                    use warren_types::host_requirements::GpuRequirement;
                    config.gpu = match x {
                        Value::Bool(false) => GpuRequirement::No,
                        Value::Bool(true) => GpuRequirement::Required,
                        Value::String(s) if s == "optional" => GpuRequirement::Optional,
                        Value::Object(_) => {
                            self.notice(&path, "any GPU meets it: a machine class says how many GPUs it has, not their cores or memory");
                            GpuRequirement::Required
                        }
                        other => {
                            self.wrong_type(
                                &path,
                                "true, false, \"optional\" or {cores, memory}",
                                other,
                            );
                            GpuRequirement::No
                        }
                    };
                }
                _ => self.notice(
                    &path,
                    "not a host requirement of the specification: ignored",
                ),
            }
        }
    }
}

/// `4gb` → `4Gi`: the specification's units, read as binary multiples (so the workspace gets
/// at least what was asked).
fn quantity(s: &str) -> Option<String> {
    let s = s.trim().to_ascii_lowercase();
    let (digits, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s.as_str(), ""),
    };
    let n: u64 = digits.parse().ok()?;
    let unit = match unit {
        "" => "",
        "kb" => "Ki",
        "mb" => "Mi",
        "gb" => "Gi",
        "tb" => "Ti",
        _ => return None,
    };
    (n > 0).then(|| format!("{n}{unit}"))
}
