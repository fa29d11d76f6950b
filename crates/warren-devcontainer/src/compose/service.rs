//! One Compose service: every key honoured, accepted with a notice of what Warren does
//! instead, or refused by name with the reason.

use crate::build::{join, Build};
use crate::properties::type_name;
use crate::{problem, unsupported, Input, Notice, Problem};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// What a dependent waits for (`depends_on.<service>.condition`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Started,
    Healthy,
    Completed,
}

/// A service's `healthcheck`, its times in seconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healthcheck {
    /// The program and its arguments (`CMD-SHELL` becomes `/bin/sh -c`).
    pub test: Vec<String>,
    pub interval: u32,
    pub timeout: u32,
    pub retries: u32,
    pub start_period: u32,
}

/// A volume mounted into a service's container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// A named volume: persistent, shared by the services that name it.
    Named { name: String, target: String },
    /// An anonymous volume or a `tmpfs`: lives as long as the container.
    Ephemeral { target: String },
}

/// One service as Warren runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub name: String,
    pub image: Option<String>,
    pub build: Option<Build>,
    pub entrypoint: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    pub env: BTreeMap<String, String>,
    /// Container ports forwarded (TCP).
    pub ports: Vec<u16>,
    pub volumes: Vec<Mount>,
    pub healthcheck: Option<Healthcheck>,
    pub depends_on: Vec<(String, Condition)>,
    /// Other names it is reached by (`hostname`, network aliases).
    pub aliases: Vec<String>,
    pub cpu_limit: Option<String>,
    pub memory_limit: Option<String>,
    pub cpu_request: Option<String>,
    pub memory_request: Option<String>,
    /// A dependent waits for it to be healthy: the containers after it start once its
    /// healthcheck passes.
    pub hold: bool,
    /// A dependent waits for it to complete: it runs to completion first (init container).
    pub init: bool,
    /// `cap_add`, `security_opt`: given when the agent's admin allows them.
    pub isolation: warren_devfile::IsolationExceptions,
}

/// The `env_file`s of a service (raw), with whether each may be missing.
pub(super) fn env_files(s: &Value) -> Vec<(String, bool)> {
    let one = |v: &Value| match v {
        Value::String(p) => Some((p.clone(), false)),
        Value::Object(o) => o.get("path").and_then(Value::as_str).map(|p| {
            let required = o.get("required").and_then(Value::as_bool).unwrap_or(true);
            (p.to_owned(), !required)
        }),
        _ => None,
    };
    match s.get("env_file") {
        Some(Value::Array(a)) => a.iter().filter_map(one).collect(),
        Some(v) => one(v).into_iter().collect(),
        None => vec![],
    }
}

/// The services a service depends on, in either form of `depends_on`.
pub(super) fn dependency_names(s: &Value) -> Vec<String> {
    let mut out: Vec<String> = match s.get("depends_on") {
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        Some(Value::Object(m)) => m.keys().cloned().collect(),
        _ => vec![],
    };
    if let Some(other) = s
        .get("network_mode")
        .and_then(Value::as_str)
        .and_then(|m| m.strip_prefix("service:"))
    {
        out.push(other.to_owned());
    }
    out
}

pub(super) struct Reader<'a, 'n> {
    /// `services.<name>`, for the problems.
    pub path: String,
    /// The Compose project's folder (the first file's), from the repository's root.
    pub project: &'a str,
    /// The dev container's own service.
    pub main: bool,
    pub workspace_folder: &'a str,
    pub input: &'a Input<'a>,
    pub volumes: &'a BTreeSet<String>,
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'n mut Vec<Notice>,
}

impl Reader<'_, '_> {
    pub(super) fn at(&self, key: &str) -> String {
        format!("{}.{key}", self.path)
    }

    pub(super) fn notice(&mut self, key: &str, message: impl Into<String>) {
        self.notices.push(Notice {
            path: self.at(key),
            message: message.into(),
        });
    }

    fn refuse(&mut self, key: &str, what: &str, why: &str) {
        let path = self.at(key);
        self.problems.push(unsupported(path, what, why));
    }

    pub(super) fn wrong(&mut self, key: &str, want: &str, v: &Value) {
        let path = self.at(key);
        self.problems.push(problem(
            path,
            format!("must be {want}, not {}", type_name(v)),
        ));
    }

    /// Reads service `name`; `None` when it has problems (pushed).
    pub fn read(&mut self, name: &str, v: &Value) -> Option<Service> {
        let before = self.problems.len();
        if !is_label(name) {
            self.problems.push(problem(
                &self.path,
                format!("the service name {name:?} must be a DNS label (lowercase letters, digits and `-`, at most 63) to name a container of the workspace"),
            ));
        }
        let Some(m) = v.as_object() else {
            self.wrong("", "a mapping", v);
            return None;
        };
        let mut s = Service {
            name: name.to_owned(),
            image: None,
            build: None,
            entrypoint: None,
            command: None,
            env: BTreeMap::new(),
            ports: vec![],
            volumes: vec![],
            healthcheck: None,
            depends_on: vec![],
            aliases: vec![],
            cpu_limit: None,
            memory_limit: None,
            cpu_request: None,
            memory_request: None,
            hold: false,
            init: false,
            isolation: Default::default(),
        };
        for (key, v) in m {
            self.key(key, v, &mut s);
        }
        // The files first, the service's own `environment` over them.
        let mut env = BTreeMap::new();
        for (rel, optional) in env_files(v) {
            let text = join(self.project, &rel)
                .ok()
                .and_then(|p| self.input.files.get(&p));
            match text {
                Some(t) => env.extend(super::interpolate::dot_env(t)),
                None if optional => {}
                None => self.problems.push(problem(
                    self.at("env_file"),
                    format!("{rel:?} is not in the repository"),
                )),
            }
        }
        env.append(&mut s.env);
        s.env = env;
        if s.image.is_none() && s.build.is_none() {
            self.problems.push(problem(
                &self.path,
                "a service names its `image`, or the Dockerfile to `build` it from",
            ));
        }
        (self.problems.len() == before).then_some(s)
    }

    fn key(&mut self, key: &str, v: &Value, s: &mut Service) {
        match key {
            "image" => match v.as_str() {
                Some(i) if !i.trim().is_empty() && !i.contains(char::is_whitespace) => {
                    s.image = Some(i.to_owned())
                }
                _ => self.wrong(key, "an image name", v),
            },
            "build" => s.build = self.build(v),
            "command" => s.command = self.words(key, v),
            "entrypoint" => s.entrypoint = self.words(key, v),
            "environment" => self.environment(v, &mut s.env),
            "env_file" | "profiles" | "expose" | "links" => {}
            "ports" => self.ports(v, &mut s.ports),
            "volumes" => self.mounts(v, &mut s.volumes),
            "tmpfs" => {
                let targets: Vec<&str> = match v {
                    Value::String(t) => vec![t.as_str()],
                    Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                for t in targets {
                    let target = t.split(':').next().unwrap_or(t).to_owned();
                    s.volumes.push(Mount::Ephemeral { target });
                }
            }
            "depends_on" => self.depends_on(v, &mut s.depends_on),
            "healthcheck" => s.healthcheck = self.healthcheck(v),
            "hostname" => match v.as_str() {
                Some(h) if is_label(h) => s.aliases.push(h.to_owned()),
                _ => self.wrong(key, "a host name (a DNS label)", v),
            },
            "networks" => {
                for alias in v
                    .as_object()
                    .into_iter()
                    .flat_map(|m| m.values())
                    .filter_map(|n| n.get("aliases").and_then(Value::as_array))
                    .flatten()
                    .filter_map(Value::as_str)
                {
                    if is_label(alias) {
                        s.aliases.push(alias.to_owned());
                    }
                }
            }
            "network_mode" => match v.as_str() {
                // The workspace's services share one network already.
                // `service:X` shares X's network, which Compose starts first.
                Some(m) if m.starts_with("service:") => {
                    let other = m.trim_start_matches("service:").to_owned();
                    if !s.depends_on.iter().any(|(d, _)| *d == other) {
                        s.depends_on.push((other, Condition::Started));
                    }
                }
                Some("bridge") => {}
                _ => self.refuse(key, &format!("`network_mode: {v}`"), "the services run in the workspace's own network, isolated from the machine's and from other workspaces'"),
            },
            "deploy" => self.deploy(v, s),
            "mem_limit" => s.memory_limit = self.quantity(key, v),
            "mem_reservation" => s.memory_request = self.quantity(key, v),
            "cpus" => s.cpu_limit = self.quantity(key, v),
            "user" => self.notice(key, "Warren runs every container as the agent's unprivileged user (its `security.runAsUser`), so the image's users are not switched to"),
            "restart" => self.notice(key, "Warren restarts a container that exits, with a back-off, as Kubernetes does; the policy is not chosen per service"),
            "init" | "stdin_open" | "tty" | "container_name" | "labels" | "logging" | "stop_signal" | "stop_grace_period" | "platform" | "pull_policy" | "shm_size" | "ulimits" | "working_dir" | "domainname" | "extra_hosts" | "dns" | "dns_search" | "mac_address" | "oom_score_adj" | "read_only" | "scale" | "sysctls" | "secrets" | "configs" | "volumes_from" => self.other(key, v),
            "cap_add" | "security_opt" => {
                let path = self.at(key);
                crate::isolation::Out {
                    problems: &mut *self.problems,
                    notices: &mut *self.notices,
                    isolation: &mut s.isolation,
                }
                .list(&path, v, key == "cap_add");
            }
            "privileged" | "devices" | "device_cgroup_rules" | "pid" | "ipc" | "userns_mode" | "cgroup" | "cgroup_parent" | "runtime" | "external_links" | "group_add" | "isolation" => {
                if !matches!(v, Value::Bool(false)) {
                    self.refuse(key, &format!("`{key}`"), "it would reach past the workspace's isolation to the machine and the other tenants' workspaces");
                }
            }
            other => self.refuse(other, &format!("the Compose key `{other}`"), "Warren does not know what to do with it"),
        }
    }

    /// The keys Warren does something else for, or not yet.
    fn other(&mut self, key: &str, v: &Value) {
        let notice = match key {
            "init" => "Warren's containers always run an init process that reaps orphans and passes signals on",
            "stdin_open" | "tty" => "terminals are opened by `warren ws exec` and the web terminal, each with its own TTY",
            "container_name" => "containers are named by Warren after the workspace and the service",
            "labels" | "logging" | "platform" | "pull_policy" => "the agent decides this for every workspace alike",
            "stop_signal" | "stop_grace_period" => "Warren stops containers with SIGTERM and its own grace period",
            "shm_size" | "ulimits" => "the container gets the runtime's defaults",
            "working_dir" if self.main => "terminals and commands start in the workspace folder",
            "scale" if v.as_u64().is_some_and(|n| n <= 1) => return,
            "read_only" if v == &Value::Bool(false) => return,
            _ => {
                let why = match key {
                    "extra_hosts" | "dns" | "dns_search" | "mac_address" | "domainname" => "the workspace's network is Warren's: the services reach each other by name, and the rest as the agent's network policy allows",
                    "secrets" | "configs" => "give secrets as the workspace's secret variables, which reach the containers' environment",
                    "volumes_from" => "name the volumes themselves",
                    _ => "it is not part of what Warren sets for a container",
                };
                return self.refuse(key, &format!("the Compose key `{key}`"), &format!("not yet: {why}"));
            }
        };
        self.notice(key, notice);
    }

    fn words(&mut self, key: &str, v: &Value) -> Option<Vec<String>> {
        match v {
            Value::Null => None,
            Value::String(s) => Some(vec!["/bin/sh".into(), "-c".into(), s.clone()]),
            Value::Array(a) if a.iter().all(Value::is_string) => Some(
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect(),
            ),
            _ => {
                self.wrong(key, "a string or a list of strings", v);
                None
            }
        }
    }

    fn environment(&mut self, v: &Value, env: &mut BTreeMap<String, String>) {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    let value = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        // `NAME:` with no value: from the shell in Compose; unset here.
                        Value::Null => continue,
                        _ => {
                            self.wrong(&format!("environment.{k}"), "a string", v);
                            continue;
                        }
                    };
                    env.insert(k.clone(), value);
                }
            }
            Value::Array(a) => {
                for item in a {
                    match item.as_str().map(|s| s.split_once('=')) {
                        Some(Some((k, v))) => {
                            env.insert(k.to_owned(), v.to_owned());
                        }
                        Some(None) => {}
                        None => self.wrong("environment", "a list of `NAME=value`", item),
                    }
                }
            }
            _ => self.wrong("environment", "a mapping or a list", v),
        }
    }

    fn ports(&mut self, v: &Value, out: &mut Vec<u16>) {
        let Some(items) = v.as_array() else {
            return self.wrong("ports", "a list", v);
        };
        for (i, item) in items.iter().enumerate() {
            let key = format!("ports[{i}]");
            let (target, protocol) = match item {
                Value::Number(n) => (n.to_string(), "tcp".to_owned()),
                Value::String(s) => {
                    let (spec, proto) = s.split_once('/').unwrap_or((s, "tcp"));
                    // `[host:]published:target`; the target is the container's.
                    let target = spec.rsplit(':').next().unwrap_or(spec).to_owned();
                    (target, proto.to_owned())
                }
                Value::Object(m) => (
                    m.get("target")
                        .map(|t| t.to_string().trim_matches('"').to_owned())
                        .unwrap_or_default(),
                    m.get("protocol")
                        .and_then(Value::as_str)
                        .unwrap_or("tcp")
                        .to_owned(),
                ),
                _ => {
                    self.wrong(&key, "a port", item);
                    continue;
                }
            };
            if protocol != "tcp" {
                self.notice(
                    &key,
                    format!(
                        "{item} is reached inside the workspace only: Warren forwards TCP ports"
                    ),
                );
                continue;
            }
            let range: Vec<u16> = match target.split_once('-') {
                Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
                    (Ok(a), Ok(b)) if a > 0 && a <= b && b - a < 16 => (a..=b).collect(),
                    _ => {
                        self.problems.push(problem(
                            self.at(&key),
                            format!("{item} is not a range of at most 16 ports"),
                        ));
                        continue;
                    }
                },
                None => match target.parse::<u16>() {
                    Ok(p) if p > 0 => vec![p],
                    _ => {
                        self.problems.push(problem(
                            self.at(&key),
                            format!("{item} is not a port (1-65535)"),
                        ));
                        continue;
                    }
                },
            };
            for p in range {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
    }

    fn mounts(&mut self, v: &Value, out: &mut Vec<Mount>) {
        let Some(items) = v.as_array() else {
            return self.wrong("volumes", "a list", v);
        };
        for (i, item) in items.iter().enumerate() {
            let key = format!("volumes[{i}]");
            let (kind, source, target) = match item {
                Value::String(s) => {
                    let parts: Vec<&str> = s.split(':').collect();
                    match parts.as_slice() {
                        [t] => ("volume", String::new(), t.to_string()),
                        [src, t, ..] => {
                            let bind = src.starts_with(['.', '/', '~']);
                            (
                                if bind { "bind" } else { "volume" },
                                src.to_string(),
                                t.to_string(),
                            )
                        }
                        [] => continue,
                    }
                }
                Value::Object(m) => {
                    let get = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                    let kind = match get("type").as_str() {
                        "bind" => "bind",
                        "tmpfs" => "tmpfs",
                        "volume" | "" => "volume",
                        other => {
                            self.refuse(
                                &key,
                                &format!("a mount of type {other:?}"),
                                "only volumes and tmpfs are mounted in a workspace",
                            );
                            continue;
                        }
                    };
                    (kind, get("source"), get("target"))
                }
                _ => {
                    self.wrong(&key, "a volume", item);
                    continue;
                }
            };
            if !target.starts_with('/') || target.split('/').any(|p| p == "..") {
                self.problems.push(problem(
                    self.at(&key),
                    format!("{target:?} must be an absolute path without `..`"),
                ));
                continue;
            }
            match kind {
                "bind" => self.bind(&key, &source, &target),
                "tmpfs" => out.push(Mount::Ephemeral { target }),
                _ if source.is_empty() => out.push(Mount::Ephemeral { target }),
                _ if self.volumes.contains(&source) => out.push(Mount::Named {
                    name: source,
                    target,
                }),
                _ => self.problems.push(problem(
                    self.at(&key),
                    format!("the volume {source:?} is not declared in the top-level `volumes`"),
                )),
            }
        }
    }

    /// A bind mount: the checkout bound into the dev container where its sources are (the
    /// templates bind `../..`, the folder holding the checkout, at `/workspaces`) is where
    /// Warren puts the sources anyway; anything else is a folder of the machine, refused.
    fn bind(&mut self, key: &str, source: &str, target: &str) {
        let relative = !source.starts_with(['/', '~']);
        let in_repository = relative && join(self.project, source).is_ok();
        let folder = self.workspace_folder;
        let holds_sources =
            folder == target || folder.starts_with(&format!("{}/", target.trim_end_matches('/')));
        if self.main && relative && holds_sources {
            self.notice(key, format!("the repository is not bound from a machine: Warren clones it into the workspace's volume, with the sources at {folder}"));
        } else if in_repository {
            self.refuse(
                key,
                &format!("binding {source:?} of the repository at {target}"),
                "not yet: only the dev container's service has the sources (at `workspaceFolder`)",
            );
        } else {
            self.refuse(
                key,
                &format!("a bind mount of {source:?}"),
                "it would expose a folder of the machine the workspace runs on; use a named volume",
            );
        }
    }

    fn depends_on(&mut self, v: &Value, out: &mut Vec<(String, Condition)>) {
        match v {
            Value::Array(a) => {
                for d in a {
                    match d.as_str() {
                        Some(d) => out.push((d.to_owned(), Condition::Started)),
                        None => self.wrong("depends_on", "a list of service names", d),
                    }
                }
            }
            Value::Object(m) => {
                for (d, spec) in m {
                    let key = format!("depends_on.{d}");
                    let condition = match spec.get("condition").and_then(Value::as_str) {
                        None | Some("service_started") => Condition::Started,
                        Some("service_healthy") => Condition::Healthy,
                        Some("service_completed_successfully") => Condition::Completed,
                        Some(other) => {
                            self.problems.push(problem(
                                self.at(&key),
                                format!("{other:?} is not a condition Compose knows"),
                            ));
                            continue;
                        }
                    };
                    if spec.get("restart").and_then(Value::as_bool) == Some(true) {
                        self.notice(&key, "a restart of it does not restart this service: each container restarts on its own");
                    }
                    out.push((d.clone(), condition));
                }
            }
            _ => self.wrong("depends_on", "a list or a mapping", v),
        }
    }

    fn deploy(&mut self, v: &Value, s: &mut Service) {
        let Some(m) = v.as_object() else {
            return self.wrong("deploy", "a mapping", v);
        };
        for (key, v) in m {
            match key.as_str() {
                "resources" => {
                    for (kind, spec) in v.as_object().into_iter().flatten() {
                        let at = format!("deploy.resources.{kind}");
                        let (cpu, memory) = match kind.as_str() {
                            "limits" => (&mut s.cpu_limit, &mut s.memory_limit),
                            "reservations" => (&mut s.cpu_request, &mut s.memory_request),
                            _ => continue,
                        };
                        for (k, v) in spec.as_object().into_iter().flatten() {
                            match k.as_str() {
                                "cpus" => *cpu = self.quantity(&format!("{at}.cpus"), v),
                                "memory" => *memory = self.quantity(&format!("{at}.memory"), v),
                                "devices" | "generic_resources" => self.refuse(
                                    &format!("{at}.{k}"),
                                    "devices (GPUs among them)",
                                    "not yet: Warren does not schedule devices to workspaces",
                                ),
                                _ => {}
                            }
                        }
                    }
                }
                "replicas" if v.as_u64().is_some_and(|n| n <= 1) => {}
                "replicas" => self.refuse(
                    "deploy.replicas",
                    "more than one replica of a service",
                    "a workspace runs one container per service",
                ),
                _ => self.notice(
                    &format!("deploy.{key}"),
                    "only `deploy.resources` applies to a workspace",
                ),
            }
        }
    }

    /// A CPU count or a memory size as a Kubernetes quantity (`512m` of Compose is 512 MiB).
    fn quantity(&mut self, key: &str, v: &Value) -> Option<String> {
        let text = match v {
            Value::Number(n) => n.to_string(),
            Value::String(s) => s.trim().to_owned(),
            _ => {
                self.wrong(key, "a number or a size", v);
                return None;
            }
        };
        let memory = !key.ends_with("cpus");
        if !memory {
            return match text.parse::<f64>() {
                Ok(c) if c > 0.0 => Some(format!("{}m", (c * 1000.0).round() as u64)),
                _ => {
                    self.problems.push(problem(
                        self.at(key),
                        format!("{text:?} is not a CPU count"),
                    ));
                    None
                }
            };
        }
        let lower = text.to_ascii_lowercase();
        let split = lower
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(lower.len());
        let (n, unit) = lower.split_at(split);
        let unit = match unit.trim_end_matches('b') {
            "" => "",
            "k" => "Ki",
            "m" => "Mi",
            "g" => "Gi",
            _ => {
                self.problems.push(problem(
                    self.at(key),
                    format!("{text:?} is not a size (such as 512m, 2g)"),
                ));
                return None;
            }
        };
        if n.is_empty() {
            self.problems.push(problem(
                self.at(key),
                format!("{text:?} is not a size (such as 512m, 2g)"),
            ));
            return None;
        }
        Some(format!("{n}{unit}"))
    }

    fn build(&mut self, v: &Value) -> Option<Build> {
        let (context, spec) = match v {
            Value::String(c) => (c.clone(), None),
            Value::Object(m) => (
                m.get("context")
                    .and_then(Value::as_str)
                    .unwrap_or(".")
                    .to_owned(),
                Some(m),
            ),
            _ => {
                self.wrong("build", "a path or a mapping", v);
                return None;
            }
        };
        let mut dockerfile = "Dockerfile".to_owned();
        let mut args = vec![];
        let mut target = None;
        for (k, v) in spec.into_iter().flatten() {
            match (k.as_str(), v) {
                ("context", _) => {}
                ("dockerfile", Value::String(d)) => dockerfile = d.clone(),
                ("target", Value::String(t)) => target = Some(t.clone()),
                ("args", Value::Object(m)) => {
                    for (name, v) in m {
                        let v = v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string());
                        args.push(format!("{name}={v}"));
                    }
                }
                ("args", Value::Array(a)) => {
                    args.extend(a.iter().filter_map(Value::as_str).filter(|s| s.contains('=')).map(str::to_owned));
                }
                ("cache_from", _) => self.notice("build.cache_from", "no image is pulled for its cache: the agent's engine builds with its own layer cache"),
                ("labels", _) => {}
                (other, _) => self.refuse(&format!("build.{other}"), &format!("`build.{other}`"), "Warren builds with its own fixed settings, inside the workspace's isolation"),
            }
        }
        args.sort();
        let context = match join(self.project, &context) {
            Ok(c) => c,
            Err(why) => {
                self.problems.push(problem(
                    self.at("build.context"),
                    format!("{context:?} {why}"),
                ));
                return None;
            }
        };
        let dockerfile = match join(&context, &dockerfile) {
            Ok(d) if d.starts_with(&format!("{context}/")) || context == "." => d,
            _ => {
                self.refuse(
                    "build.dockerfile",
                    "a Dockerfile outside its build context",
                    "the engine is sent the context alone",
                );
                return None;
            }
        };
        Some(Build {
            dockerfile,
            context,
            args,
            target,
        })
    }
}

/// Whether `s` is a DNS label (what a container and a host name may be).
fn is_label(s: &str) -> bool {
    warren_types::is_dns_label(s, 63)
}
