//! `dockerComposeFile` + `service` + `runServices`: a dev container described by Docker
//! Compose. Its services become containers of the workspace's one pod: the named `service` is
//! the dev container (where terminals, SSH and the editor land), the others run beside it.
//!
//! What `docker compose up` gives them, Warren gives them in the pod:
//! - each service reaches the others by name (and by `hostname` and network aliases): the
//!   names resolve to the pod's own address, where every service listens, as Kubernetes'
//!   `hostAliases` do;
//! - `depends_on` orders the start: a dependency starts first; one a service waits to be
//!   healthy (`condition: service_healthy`) holds the start of the containers after it until
//!   its `healthcheck` passes, and fails the workspace's start when it stays unhealthy; one a
//!   service waits to complete (`service_completed_successfully`) runs to completion before
//!   any other, as an init container;
//! - named volumes are the workspace's own persistent volumes, shared by the services that
//!   name them; anonymous volumes and `tmpfs` live as long as the container;
//! - `ports` (and `forwardPorts` of `service:port`) become endpoints on the workspace's
//!   authenticated hosts.
//!
//! Compose's own variables are substituted from the workspace's variables and the `.env`
//! file beside the first Compose file. Several Compose files are merged in order, as
//! `docker compose -f a -f b` does; then `include` and services' `extends` are resolved
//! (`extends`). Whatever would reach past the workspace's isolation
//! (`privileged`, host devices, host networking, bind mounts of the machine's folders) is
//! refused by name; `cap_add` and `security_opt` are given when the agent's admin allows each
//! value (`crate::isolation`); what Warren does differently is said in a notice.

pub(crate) mod config;
mod extends;
mod health;
mod interpolate;
mod service;

use crate::{build::join, problem, unsupported, Input, Notice, Problem};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub use service::{Condition, Healthcheck, Mount, Service};

/// At most this many services run in one workspace (published configurations use two to
/// five; the bound keeps a pod within what runtimes and users can follow).
pub const MAX_SERVICES: usize = 16;

/// A Compose dev container, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compose {
    /// The services that run, each after those it depends on.
    pub services: Vec<Service>,
    /// The dev container's service, in `services`.
    pub main: usize,
    /// The names the services reach each other by, all resolving to the pod.
    pub host_aliases: Vec<String>,
}

/// A file of the repository a configuration reads besides itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    /// From the repository's root.
    pub path: String,
    /// Read when present (Compose's `.env`, an `env_file` marked `required: false`).
    pub optional: bool,
}

/// The Compose files `top` names, from the repository's root; problems for paths that leave
/// it.
fn compose_files(
    top: &serde_json::Map<String, Value>,
    folder: &str,
    problems: &mut Vec<Problem>,
) -> Vec<String> {
    let list: Vec<(String, &Value)> = match top.get("dockerComposeFile") {
        None => return vec![],
        Some(Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("dockerComposeFile[{i}]"), v))
            .collect(),
        Some(v) => vec![("dockerComposeFile".to_owned(), v)],
    };
    if list.is_empty() {
        problems.push(problem("dockerComposeFile", "names no Compose file"));
    }
    let mut out = vec![];
    for (path, v) in list {
        match v.as_str().map(|rel| (rel, join(folder, rel))) {
            Some((_, Ok(p))) => out.push(p),
            Some((rel, Err(why))) => problems.push(problem(path, format!("{rel:?} {why}"))),
            None => problems.push(problem(path, "must be a path (a string)")),
        }
    }
    out
}

/// The folder of the repository holding `path` (`.` for the root).
fn folder_of(path: &str) -> &str {
    path.rsplit_once('/').map_or(".", |(f, _)| f)
}

/// The files a configuration (its variables substituted) reads besides itself, as far as
/// `input.files` already holds the Compose files: the Compose files, the `.env` beside the
/// first, and the services' `env_file`s. A caller reads them and asks again until nothing new
/// is named.
pub fn needed_files(top: &Value, input: &Input<'_>) -> Vec<Needed> {
    let Some(top) = top.as_object() else {
        return vec![];
    };
    let folder = input.path.rsplit_once('/').map_or("", |(f, _)| f);
    let files = compose_files(top, folder, &mut vec![]);
    let Some(first) = files.first() else {
        return vec![];
    };
    let project = folder_of(first);
    let mut out: Vec<Needed> = files
        .iter()
        .map(|p| Needed {
            path: p.clone(),
            optional: false,
        })
        .collect();
    out.push(Needed {
        path: join(project, ".env").unwrap_or_default(),
        optional: true,
    });
    // The files `include` and `extends` name are read too, and what they name in turn.
    let mut read = files.clone();
    let mut i = 0;
    while i < read.len() {
        let f = read[i].clone();
        i += 1;
        let Some(doc) = input.files.get(&f).and_then(|t| parse(t, &f).ok()) else {
            continue;
        };
        for rel in extends::named_files(&doc) {
            if let Ok(path) = join(project, &rel) {
                if !read.contains(&path) {
                    read.push(path.clone());
                    out.push(Needed {
                        path,
                        optional: false,
                    });
                }
            }
        }
        for s in doc
            .get("services")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
        {
            for (rel, optional) in service::env_files(s) {
                if let Ok(path) = join(project, &rel) {
                    if !out.iter().any(|n| n.path == path) {
                        out.push(Needed { path, optional });
                    }
                }
            }
        }
    }
    out.truncate(crate::MAX_FILES);
    out
}

/// One Compose file's YAML as JSON; the problem names the file.
fn parse(text: &str, file: &str) -> Result<Value, Problem> {
    if text.len() > crate::MAX_CONFIG_BYTES {
        return Err(problem(
            file,
            format!(
                "the Compose file is {} bytes; at most {} are accepted",
                text.len(),
                crate::MAX_CONFIG_BYTES
            ),
        ));
    }
    let yaml: serde_yaml::Value =
        serde_yaml::from_str(text).map_err(|e| problem(file, format!("not valid YAML: {e}")))?;
    let mut yaml = yaml;
    yaml.apply_merge().map_err(|e| {
        problem(
            file,
            format!("a YAML merge key (`<<`) that cannot be applied: {e}"),
        )
    })?;
    let v = serde_json::to_value(yaml)
        .map_err(|e| problem(file, format!("not a Compose file: {e}")))?;
    if !v.is_object() {
        return Err(problem(file, "a Compose file is a mapping at its top"));
    }
    Ok(v)
}

/// `b` merged over `a` as Compose merges files given in order: mappings key by key, lists of
/// the service's ports, volumes and the like appended, anything else replaced.
fn merge(a: &mut Value, b: Value, key: &str) {
    // `environment` (and a build's `args`) may be a mapping in one file and a list of
    // `NAME=value` in the next: the same thing, merged by name.
    let (a, b) = if matches!(key, "environment" | "args") {
        as_mapping(a);
        let mut b = b;
        as_mapping(&mut b);
        (a, b)
    } else {
        (a, b)
    };
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(old) => merge(old, v, &k),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if !matches!(key, "command" | "entrypoint" | "test") => {
            for v in b {
                if !a.contains(&v) {
                    a.push(v);
                }
            }
        }
        (a, b) => *a = b,
    }
}

/// Every string of `v` (and every mapping key) with Compose's variables substituted.
fn substitute(
    v: Value,
    path: &str,
    values: &interpolate::Values<'_>,
    unset: &mut Vec<String>,
) -> Result<Value, Problem> {
    Ok(match v {
        Value::String(s) => Value::String(interpolate::substitute(&s, path, values, unset)?),
        Value::Array(a) => Value::Array(
            a.into_iter()
                .enumerate()
                .map(|(i, v)| substitute(v, &format!("{path}[{i}]"), values, unset))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                // Extension fields (`x-…`) hold anchors' sources; nothing reads them.
                if k.starts_with("x-") {
                    continue;
                }
                let p = format!("{path}.{k}");
                out.insert(k, substitute(v, &p, values, unset)?);
            }
            Value::Object(out)
        }
        other => other,
    })
}

/// A list of `NAME=value` (or `NAME`, which Compose takes from the shell: left unset) as
/// the mapping it stands for.
fn as_mapping(v: &mut Value) {
    if let Value::Array(items) = v {
        let mut m = serde_json::Map::new();
        for item in items.iter().filter_map(Value::as_str) {
            match item.split_once('=') {
                Some((k, val)) => m.insert(k.to_owned(), Value::String(val.to_owned())),
                None => m.insert(item.to_owned(), Value::Null),
            };
        }
        *v = Value::Object(m);
    }
}

/// What reading a Compose dev container needs besides the configuration.
pub(crate) struct Reading<'a, 'n> {
    pub input: &'a Input<'a>,
    /// The configuration's folder.
    pub folder: &'a str,
    /// The sources' folder in the dev container.
    pub workspace_folder: &'a str,
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'n mut Vec<Notice>,
}

impl Reading<'_, '_> {
    /// The Compose dev container `top` describes; `None` when it names no Compose file (or
    /// what it names cannot be read: the problems say why).
    pub fn read(&mut self, top: &serde_json::Map<String, Value>) -> Option<Compose> {
        let files = compose_files(top, self.folder, self.problems);
        let first = files.first()?.clone();
        let project = folder_of(&first).to_owned();
        let dot_env = join(&project, ".env")
            .ok()
            .and_then(|p| self.input.files.get(&p))
            .map(|t| interpolate::dot_env(t))
            .unwrap_or_default();
        let values = interpolate::Values {
            variables: self.input.local_env,
            dot_env,
        };
        let mut merged = Value::Object(Default::default());
        let mut unset = vec![];
        for f in &files {
            let Some(text) = self.input.files.get(f) else {
                self.problems.push(problem(
                    "dockerComposeFile",
                    format!("{f} is not in the repository"),
                ));
                continue;
            };
            match parse(text, f).and_then(|v| substitute(v, f, &values, &mut unset)) {
                Ok(v) => merge(&mut merged, v, ""),
                Err(p) => self.problems.push(p),
            }
        }
        if self.problems.is_empty() {
            let mut loader = extends::Loader {
                project: &project,
                files: self.input.files,
                values: &values,
                unset: &mut unset,
                problems: &mut *self.problems,
                loaded: BTreeMap::new(),
            };
            loader.include(&mut merged, &mut files.clone());
            loader.extends(&mut merged);
        }
        if !self.problems.is_empty() {
            return None;
        }
        for name in unset {
            self.notice(
                "dockerComposeFile",
                format!("the Compose variable {name} is not set (give it as a variable of the workspace, or in the `.env` file beside the Compose file): it is empty"),
            );
        }
        self.document(&merged, top, &project)
    }

    fn notice(&mut self, path: &str, message: impl Into<String>) {
        self.notices.push(Notice {
            path: path.to_owned(),
            message: message.into(),
        });
    }

    /// The merged document: its top-level keys, its services read, the ones that run chosen
    /// and ordered.
    fn document(
        &mut self,
        doc: &Value,
        top: &serde_json::Map<String, Value>,
        project: &str,
    ) -> Option<Compose> {
        let empty = serde_json::Map::new();
        let doc = doc.as_object().unwrap_or(&empty);
        for key in doc.keys() {
            match key.as_str() {
                "services" | "volumes" | "version" | "name" => {}
                "networks" => self.notice("networks", "the services share the workspace's one network, where each reaches the others by name; the networks are not made"),
                "secrets" | "configs" => self.problems.push(unsupported(
                    key,
                    &format!("Compose's top-level `{key}`"),
                    "not yet: give secrets as the workspace's secret variables",
                )),
                other => self.problems.push(problem(other, "not a top-level key of a Compose file")),
            }
        }
        let volumes = self.declared_volumes(doc.get("volumes"));
        let Some(services) = doc.get("services").and_then(Value::as_object) else {
            self.problems
                .push(problem("services", "the Compose files define no services"));
            return None;
        };
        let main_name = match top.get("service") {
            Some(Value::String(s)) if services.contains_key(s) => s.clone(),
            Some(Value::String(s)) => {
                self.problems.push(problem(
                    "service",
                    format!(
                        "{s:?} is not a service of the Compose files ({})",
                        names(services.keys())
                    ),
                ));
                return None;
            }
            _ => {
                self.problems.push(problem(
                    "service",
                    "a Compose dev container names the `service` it is (a string)",
                ));
                return None;
            }
        };
        let run = self.run_services(top, services, &main_name)?;
        let mut read = BTreeMap::new();
        for name in &run {
            let mut r = service::Reader {
                path: format!("services.{name}"),
                project,
                main: *name == main_name,
                workspace_folder: self.workspace_folder,
                input: self.input,
                volumes: &volumes,
                problems: self.problems,
                notices: self.notices,
            };
            if let Some(s) = r.read(name, &services[name.as_str()]) {
                read.insert(name.clone(), s);
            }
        }
        if !self.problems.is_empty() {
            return None;
        }
        self.assemble(read, &main_name)
    }

    /// The named volumes the top-level `volumes` declares.
    fn declared_volumes(&mut self, v: Option<&Value>) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let Some(m) = v.and_then(Value::as_object) else {
            return out;
        };
        for (name, spec) in m {
            let path = format!("volumes.{name}");
            for key in spec.as_object().into_iter().flat_map(|o| o.keys()) {
                match key.as_str() {
                    "name" | "labels" => {}
                    "external" => self.problems.push(unsupported(
                        format!("{path}.external"),
                        "an external volume",
                        "it would be a volume of the machine made outside Warren, shared with whatever else uses it; name a volume of the workspace's own",
                    )),
                    other => self.problems.push(unsupported(
                        format!("{path}.{other}"),
                        &format!("a volume's `{other}`"),
                        "the workspace's volumes are made by the agent with its own storage settings",
                    )),
                }
            }
            out.insert(name.clone());
        }
        out
    }

    /// The services that run: `runServices` (by default every service without `profiles`),
    /// the dev container's always, and what they depend on.
    fn run_services(
        &mut self,
        top: &serde_json::Map<String, Value>,
        services: &serde_json::Map<String, Value>,
        main: &str,
    ) -> Option<Vec<String>> {
        let mut run: BTreeSet<String> = match top.get("runServices") {
            None => services
                .iter()
                .filter(|(_, s)| s.get("profiles").is_none())
                .map(|(n, _)| n.clone())
                .collect(),
            Some(Value::Array(a)) => {
                let mut out = BTreeSet::new();
                for (i, v) in a.iter().enumerate() {
                    match v.as_str() {
                        Some(s) if services.contains_key(s) => {
                            out.insert(s.to_owned());
                        }
                        _ => self.problems.push(problem(
                            format!("runServices[{i}]"),
                            format!(
                                "{v} is not a service of the Compose files ({})",
                                names(services.keys())
                            ),
                        )),
                    }
                }
                out
            }
            Some(_) => {
                self.problems
                    .push(problem("runServices", "must be a list of service names"));
                return None;
            }
        };
        run.insert(main.to_owned());
        // What they depend on starts too, as `docker compose up` starts it.
        let mut queue: Vec<String> = run.iter().cloned().collect();
        while let Some(name) = queue.pop() {
            for dep in service::dependency_names(&services[name.as_str()]) {
                if services.contains_key(&dep) && run.insert(dep.clone()) {
                    queue.push(dep);
                }
            }
        }
        if run.len() > MAX_SERVICES {
            self.problems.push(problem(
                "runServices",
                format!(
                    "{} services would run; a workspace runs at most {MAX_SERVICES}",
                    run.len()
                ),
            ));
            return None;
        }
        Some(run.into_iter().collect())
    }

    /// The services in start order, with what their dependents ask of them.
    fn assemble(&mut self, mut read: BTreeMap<String, Service>, main: &str) -> Option<Compose> {
        // What dependents ask: to be healthy first (hold), or to have completed (init).
        let asks: Vec<(String, String, Condition)> = read
            .values()
            .flat_map(|s| {
                s.depends_on
                    .iter()
                    .map(|(d, c)| (s.name.clone(), d.clone(), *c))
            })
            .collect();
        for (who, dep, condition) in asks {
            let path = format!("services.{who}.depends_on.{dep}");
            let Some(d) = read.get_mut(&dep) else {
                self.problems.push(problem(
                    &path,
                    format!("{dep:?} is not a service of the Compose files"),
                ));
                continue;
            };
            match condition {
                Condition::Started => {}
                Condition::Healthy if d.healthcheck.is_some() => d.hold = true,
                Condition::Healthy => self.notice(&path, format!("{dep} has no `healthcheck` in the Compose files (an image's own HEALTHCHECK is not read): it counts as healthy once started")),
                Condition::Completed if dep == main => self.problems.push(problem(&path, "the dev container's own service never completes; nothing can wait for it to")),
                Condition::Completed => {
                    if !d.init {
                        self.notice(&path, format!("{dep} runs to completion before every other service starts (as an init container), not only before {who}"));
                    }
                    d.init = true;
                }
            }
        }
        let order = self.start_order(&read)?;
        let mut services: Vec<Service> = order.iter().filter_map(|n| read.remove(n)).collect();
        for s in services
            .iter()
            .filter(|s| s.init && !s.depends_on.is_empty())
        {
            self.notice(&format!("services.{}.depends_on", s.name), "it runs before the other services (as an init container), so what it depends on is not running yet");
        }
        // Init containers first, as the pod runs them.
        services.sort_by_key(|s| !s.init);
        let main = services.iter().position(|s| s.name == main)?;
        let mut host_aliases = vec![];
        for s in &services {
            for a in std::iter::once(&s.name).chain(&s.aliases) {
                if !host_aliases.contains(a) {
                    host_aliases.push(a.clone());
                }
            }
        }
        Some(Compose {
            services,
            main,
            host_aliases,
        })
    }

    /// The services' names, each after those it depends on (a cycle is a problem).
    fn start_order(&mut self, read: &BTreeMap<String, Service>) -> Option<Vec<String>> {
        let mut order: Vec<String> = vec![];
        let mut left: Vec<&Service> = read.values().collect();
        while !left.is_empty() {
            let ready: Vec<String> = left
                .iter()
                .filter(|s| {
                    s.depends_on
                        .iter()
                        .all(|(d, _)| order.contains(d) || !read.contains_key(d))
                })
                .map(|s| s.name.clone())
                .collect();
            if ready.is_empty() {
                self.problems.push(problem(
                    "services",
                    format!(
                        "the services depend on each other in a cycle ({})",
                        names(left.iter().map(|s| &s.name))
                    ),
                ));
                return None;
            }
            left.retain(|s| !ready.contains(&s.name));
            order.extend(ready);
        }
        Some(order)
    }
}

/// Names, comma-separated.
fn names<'a>(it: impl Iterator<Item = &'a String>) -> String {
    it.map(String::as_str).collect::<Vec<_>>().join(", ")
}
