//! Compose's ways of writing a service once: a service's `extends` (a service of the same
//! document or of another Compose file, merged under it as Compose merges files) and the
//! top-level `include` (another Compose file's services and volumes added). Both are resolved
//! on the merged document before its services are read, so everything after sees services
//! written out in full.
//!
//! The files named must be beside the first Compose file: Compose reads a file's relative
//! paths (a `build` context, an `env_file`) from that file's folder, and Warren reads every
//! service's from the project's, so a file elsewhere would mean something else here.

use super::{folder_of, interpolate, merge, parse, substitute};
use crate::{build::join, problem, unsupported, Problem};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The longest chain of `extends` (or nesting of `include`) followed; Compose files in the
/// wild use one or two.
const MAX_DEPTH: usize = 8;

/// The files a document names through `include` and its services' `extends.file`, as given.
pub(super) fn named_files(doc: &Value) -> Vec<String> {
    let mut out = vec![];
    for item in doc
        .get("include")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item {
            Value::String(s) => out.push(s.clone()),
            Value::Object(m) => match m.get("path") {
                Some(Value::String(s)) => out.push(s.clone()),
                Some(Value::Array(a)) => {
                    out.extend(a.iter().filter_map(Value::as_str).map(str::to_owned))
                }
                _ => {}
            },
            _ => {}
        }
    }
    let services = doc.get("services").and_then(Value::as_object);
    for s in services.into_iter().flat_map(|m| m.values()) {
        if let Some(f) = s.pointer("/extends/file").and_then(Value::as_str) {
            out.push(f.to_owned());
        }
    }
    out
}

/// Loads the other Compose files `include` and `extends` name, and resolves both.
pub(super) struct Loader<'a> {
    /// The first Compose file's folder.
    pub project: &'a str,
    pub files: &'a BTreeMap<String, String>,
    pub values: &'a interpolate::Values<'a>,
    pub unset: &'a mut Vec<String>,
    pub problems: &'a mut Vec<Problem>,
    /// Files read so far, parsed and substituted, by path.
    pub loaded: BTreeMap<String, Value>,
}

impl Loader<'_> {
    /// The file `rel` (from the project's folder) names, read once; `at` is where it was named.
    fn file(&mut self, at: &str, rel: &str) -> Option<(String, Value)> {
        let path = match join(self.project, rel) {
            Ok(p) => p,
            Err(why) => {
                self.problems.push(problem(at, format!("{rel:?} {why}")));
                return None;
            }
        };
        if folder_of(&path) != self.project {
            self.problems.push(unsupported(
                at,
                &format!("a Compose file in another folder ({path})"),
                "Compose reads its relative paths from its own folder and Warren from the first Compose file's; put it beside that one",
            ));
            return None;
        }
        if let Some(v) = self.loaded.get(&path) {
            return Some((path.clone(), v.clone()));
        }
        let Some(text) = self.files.get(&path) else {
            self.problems
                .push(problem(at, format!("{path} is not in the repository")));
            return None;
        };
        match parse(text, &path).and_then(|v| substitute(v, &path, self.values, self.unset)) {
            Ok(v) => {
                self.loaded.insert(path.clone(), v.clone());
                Some((path, v))
            }
            Err(p) => {
                self.problems.push(p);
                None
            }
        }
    }

    /// `doc`'s `include` (naming files from the project's folder) replaced by what the files
    /// define; `chain` holds the files being included, to name a cycle.
    pub(super) fn include(&mut self, doc: &mut Value, chain: &mut Vec<String>) {
        let Some(list) = doc.as_object_mut().and_then(|m| m.remove("include")) else {
            return;
        };
        let Value::Array(items) = list else {
            self.problems
                .push(problem("include", "must be a list of Compose files"));
            return;
        };
        for (i, item) in items.iter().enumerate() {
            let at = format!("include[{i}]");
            for rel in self.include_paths(&at, item) {
                let Some((path, mut included)) = self.file(&at, &rel) else {
                    continue;
                };
                if chain.contains(&path) || chain.len() >= MAX_DEPTH {
                    chain.push(path);
                    self.problems.push(problem(
                        &at,
                        format!("includes itself again: {}", chain.join(" → ")),
                    ));
                    chain.pop();
                    continue;
                }
                chain.push(path.clone());
                self.include(&mut included, chain);
                chain.pop();
                // An included file is a project of its own: its services extend within it.
                self.extends(&mut included);
                self.add(doc, included, &at, &path);
            }
        }
    }

    /// The paths of one `include` item: a path, or `{path: …}` with one path or several.
    fn include_paths(&mut self, at: &str, item: &Value) -> Vec<String> {
        let m = match item {
            Value::String(s) => return vec![s.clone()],
            Value::Object(m) => m,
            _ => {
                self.problems
                    .push(problem(at, "must be a path or a mapping with `path`"));
                return vec![];
            }
        };
        for key in m.keys().filter(|k| *k != "path") {
            self.problems.push(unsupported(
                format!("{at}.{key}"),
                &format!("`include`'s `{key}`"),
                "an included file is read as part of this project, with its variables and folder",
            ));
        }
        match m.get("path") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => a
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => {
                self.problems.push(problem(
                    format!("{at}.path"),
                    "must be a path or a list of paths",
                ));
                vec![]
            }
        }
    }

    /// The services and volumes of `included` (from `path`) added to `doc`; a service both
    /// define is refused, as Compose refuses it.
    fn add(&mut self, doc: &mut Value, included: Value, at: &str, path: &str) {
        let Value::Object(mut inc) = included else {
            return;
        };
        for key in ["services", "volumes"] {
            let Some(Value::Object(items)) = inc.remove(key) else {
                continue;
            };
            let into = doc
                .as_object_mut()
                .map(|d| d.entry(key).or_insert_with(|| Value::Object(Map::new())));
            let Some(Value::Object(into)) = into else {
                continue;
            };
            for (name, v) in items {
                match into.get(&name) {
                    Some(old) if key == "volumes" && *old == v => {}
                    Some(_) => self.problems.push(problem(
                        at,
                        format!("{path} defines {key}.{name}, which this project defines already"),
                    )),
                    None => {
                        into.insert(name, v);
                    }
                }
            }
        }
        for key in inc.keys() {
            if matches!(key.as_str(), "secrets" | "configs") {
                self.problems.push(unsupported(
                    at,
                    &format!("Compose's top-level `{key}` (in {path})"),
                    "not yet: give secrets as the workspace's secret variables",
                ));
            }
        }
    }

    /// Every service of `doc` with its `extends` resolved.
    pub(super) fn extends(&mut self, doc: &mut Value) {
        let Some(services) = doc.get("services").and_then(Value::as_object).cloned() else {
            return;
        };
        if !services.values().any(|s| s.get("extends").is_some()) {
            return;
        }
        let mut out = Map::new();
        for name in services.keys() {
            let mut chain = vec![];
            if let Some(v) = self.resolve(&services, "", name, name, &mut chain) {
                out.insert(name.clone(), v);
            }
        }
        doc["services"] = Value::Object(out);
    }

    /// Service `name` of `services` (those of file `file`, `""` for the project's own) merged
    /// over what it extends; `of` is the service being resolved, for the problems.
    fn resolve(
        &mut self,
        services: &Map<String, Value>,
        file: &str,
        name: &str,
        of: &str,
        chain: &mut Vec<String>,
    ) -> Option<Value> {
        let at = format!("services.{of}.extends");
        let Some(service) = services.get(name) else {
            let in_file = if file.is_empty() {
                String::new()
            } else {
                format!(" of {file}")
            };
            self.problems
                .push(problem(&at, format!("{name:?} is not a service{in_file}")));
            return None;
        };
        let Some(ext) = service.get("extends") else {
            return Some(service.clone());
        };
        let key = if file.is_empty() {
            name.to_owned()
        } else {
            format!("{file}:{name}")
        };
        if chain.contains(&key) || chain.len() >= MAX_DEPTH {
            chain.push(key);
            self.problems.push(problem(
                &at,
                format!(
                    "a chain of `extends` that does not end: {}",
                    chain.join(" → ")
                ),
            ));
            return None;
        }
        let (base_file, base_name) = match ext {
            Value::String(s) => (None, s.clone()),
            Value::Object(m) => {
                let Some(s) = m.get("service").and_then(Value::as_str) else {
                    self.problems.push(problem(
                        &at,
                        "names the `service` to extend (and, for another Compose file, its `file`)",
                    ));
                    return None;
                };
                match m.get("file") {
                    None => (None, s.to_owned()),
                    Some(Value::String(f)) => (Some(f.clone()), s.to_owned()),
                    Some(_) => {
                        self.problems
                            .push(problem(format!("{at}.file"), "must be a path"));
                        return None;
                    }
                }
            }
            _ => {
                self.problems.push(problem(
                    &at,
                    "must be a service's name or a mapping with `service` (and `file`)",
                ));
                return None;
            }
        };
        chain.push(key);
        let base = match base_file {
            None => self.resolve(services, file, &base_name, of, chain),
            Some(rel) => {
                let (path, other) = self.file(&format!("{at}.file"), &rel)?;
                let theirs = other
                    .get("services")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                self.resolve(&theirs, &path, &base_name, of, chain)
            }
        };
        chain.pop();
        let mut out = base?;
        let mut own = service.clone();
        if let Some(m) = own.as_object_mut() {
            m.remove("extends");
        }
        merge(&mut out, own, "");
        Some(out)
    }
}
