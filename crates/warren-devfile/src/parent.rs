//! `parent`: a devfile built on another one, fetched by `uri` or by `id` from a devfile
//! registry, and merged with the child by the specification's rules.
//!
//! Resolution is the one place devfile handling does I/O, so the fetching is the caller's
//! ([`ParentFetcher`]: the server caches, the CLI does not); this module decides what to
//! fetch (registry index, version selection), guards against loops and depth, and merges:
//!
//! - the parent's `components`, `commands`, `projects`, `starterProjects` come first, the
//!   child's after them; a child element with a key the parent has is an error (change a
//!   parent's element through the parent's overrides instead);
//! - overrides (`parent.components`, `parent.commands`, … beside `uri`/`id`) patch the
//!   parent's elements of the same key: mappings merge key by key, lists of named items
//!   (`env`, `endpoints`, `volumeMounts`) merge by name, other values are replaced; an override
//!   may not add an element the parent does not have;
//! - `variables` and `attributes`: parent's, then the overrides', then the child's win;
//!   `events` lists are joined (parent's first); `metadata` and `schemaVersion` are the
//!   child's.

use crate::{DevfileError, DevfileErrors};
use serde_json::{Map, Value};

/// How many parents deep a devfile may go.
pub const MAX_PARENT_DEPTH: usize = 5;
/// The default registry when a devfile names a parent by `id` without `registryUrl` and the
/// caller configured none.
pub const NO_REGISTRY: &str = "no devfile registry is configured (the server's --devfile-registry, or the parent's registryUrl)";

/// Where a parent comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParentRef {
    Uri(String),
    Id {
        id: String,
        registry_url: Option<String>,
        /// A version, `latest`, or `None` for the registry's default.
        version: Option<String>,
    },
}

/// Fetches a URL's body as text (the caller bounds size and time).
pub trait ParentFetcher {
    fn fetch(&self, url: &str) -> impl std::future::Future<Output = Result<String, String>> + Send;
}

/// A devfile with its parents merged in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The flattened devfile (YAML), with no `parent`; the text itself when it had none.
    pub text: String,
    /// Where each parent came from, nearest first (`id nodejs 2.1.1 from URL`).
    pub parents: Vec<String>,
}

fn err(path: &str, message: impl Into<String>) -> DevfileErrors {
    DevfileErrors(vec![DevfileError::new(path, message)])
}

/// The parent a devfile names, if any; `kubernetes` parents are refused by name.
pub fn parent_ref(value: &Value) -> Result<Option<ParentRef>, DevfileErrors> {
    let Some(p) = value.get("parent") else {
        return Ok(None);
    };
    let Some(p) = p.as_object() else {
        return Err(err(
            "parent",
            "must be a mapping (uri, or id with registryUrl and version)",
        ));
    };
    let text = |k: &str| -> Result<Option<String>, DevfileErrors> {
        match p.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_owned())),
            Some(_) => Err(err(&format!("parent.{k}"), "must be a non-empty string")),
        }
    };
    if p.contains_key("kubernetes") {
        return Err(err(
            "parent.kubernetes",
            format!(
                "a parent from a Kubernetes DevWorkspaceTemplate {}: Warren reads no cluster objects for devfiles; use the template's devfile by `uri` or registry `id`",
                crate::UNSUPPORTED_MARKER
            ),
        ));
    }
    match (text("uri")?, text("id")?) {
        (Some(uri), None) => {
            check_url(&uri, "parent.uri")?;
            Ok(Some(ParentRef::Uri(uri)))
        }
        (None, Some(id)) => {
            let registry_url = text("registryUrl")?;
            if let Some(u) = &registry_url {
                check_url(u, "parent.registryUrl")?;
            }
            if !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
            {
                return Err(err(
                    "parent.id",
                    format!("{id:?} is not a registry stack name"),
                ));
            }
            let version = text("version")?;
            if let Some(v) = &version {
                if !v
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-' || b == b'+')
                {
                    return Err(err("parent.version", format!("{v:?} is not a version")));
                }
            }
            Ok(Some(ParentRef::Id {
                id,
                registry_url,
                version,
            }))
        }
        _ => Err(err("parent", "a parent needs exactly one of uri and id")),
    }
}

fn check_url(u: &str, path: &str) -> Result<(), DevfileErrors> {
    if u.starts_with("https://") || u.starts_with("http://") {
        Ok(())
    } else {
        Err(err(
            path,
            format!("{u:?}: Warren fetches parents over http or https only"),
        ))
    }
}

/// Merges `parent` (already flattened) into `child` (whose `parent` names it).
pub fn merge(child: &Value, parent: &Value) -> Result<Value, DevfileErrors> {
    let mut errors = Vec::new();
    let mut out = parent.as_object().cloned().unwrap_or_default();
    let child = child.as_object().cloned().unwrap_or_default();
    let overrides = child
        .get("parent")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for (key, name_key) in LISTS {
        // The parent's elements, patched by the overrides.
        let mut list: Vec<Value> = out
            .get(*key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for (i, o) in overrides
            .get(*key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = o.get(*name_key).and_then(Value::as_str).unwrap_or_default();
            match list.iter_mut().find(|e| e.get(*name_key).and_then(Value::as_str) == Some(name)) {
                Some(target) => patch(target, o),
                None => errors.push(DevfileError::new(
                    format!("parent.{key}[{i}].{name_key}"),
                    format!("the parent has no {} {name:?}: overrides may change the parent's elements, not add new ones (add it to the devfile's own {key})", singular(key)),
                )),
            }
        }
        // Then the child's own, which may not reuse the parent's keys.
        for (i, c) in child
            .get(*key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = c.get(*name_key).and_then(Value::as_str).unwrap_or_default();
            if list
                .iter()
                .any(|e| e.get(*name_key).and_then(Value::as_str) == Some(name))
            {
                errors.push(DevfileError::new(
                    format!("{key}[{i}].{name_key}"),
                    format!("the parent already has a {} {name:?}; change it under `parent.{key}` (parent overrides) instead", singular(key)),
                ));
            } else {
                list.push(c.clone());
            }
        }
        if list.is_empty() {
            out.remove(*key);
        } else {
            out.insert((*key).into(), Value::Array(list));
        }
    }
    for key in ["variables", "attributes"] {
        let mut m = out
            .get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for src in [overrides.get(key), child.get(key)].into_iter().flatten() {
            if let Some(o) = src.as_object() {
                for (k, v) in o {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
        if !m.is_empty() {
            out.insert(key.into(), Value::Object(m));
        }
    }
    if let Some(ev) = child.get("events").and_then(Value::as_object) {
        let mut events = out
            .get("events")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (k, v) in ev {
            let mut list = events
                .get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for id in v.as_array().into_iter().flatten() {
                if !list.contains(id) {
                    list.push(id.clone());
                }
            }
            events.insert(k.clone(), Value::Array(list));
        }
        out.insert("events".into(), Value::Object(events));
    }
    for key in ["schemaVersion", "metadata"] {
        match child.get(key) {
            Some(v) => {
                out.insert(key.into(), v.clone());
            }
            None if key == "metadata" => {}
            None => {}
        }
    }
    for k in overrides.keys() {
        if !matches!(
            k.as_str(),
            "uri" | "id" | "registryUrl" | "version" | "kubernetes" | "attributes" | "variables"
        ) && !LISTS.iter().any(|(l, _)| l == k)
        {
            errors.push(DevfileError::new(format!("parent.{k}"), "not a parent field (uri, id, registryUrl, version, or overrides of components, commands, projects, starterProjects, variables, attributes)"));
        }
    }
    out.remove("parent");
    if errors.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(DevfileErrors(errors))
    }
}

const LISTS: &[(&str, &str)] = &[
    ("components", "name"),
    ("commands", "id"),
    ("projects", "name"),
    ("starterProjects", "name"),
    ("dependentProjects", "name"),
];

fn singular(key: &str) -> &str {
    match key {
        "components" => "component",
        "commands" => "command",
        "projects" => "project",
        "starterProjects" => "starter project",
        _ => "dependent project",
    }
}

/// Lists whose items are merged by `name` rather than replaced.
const NAMED_LISTS: &[&str] = &["env", "endpoints", "volumeMounts"];

/// A strategic merge of `o` into `target`: mappings key by key, named lists by name, the
/// rest replaced.
fn patch(target: &mut Value, o: &Value) {
    match (target, o) {
        (Value::Object(t), Value::Object(o)) => {
            for (k, v) in o {
                match t.get_mut(k) {
                    Some(Value::Array(items))
                        if NAMED_LISTS.contains(&k.as_str()) && v.is_array() =>
                    {
                        for item in v.as_array().into_iter().flatten() {
                            let name = item.get("name");
                            match items
                                .iter_mut()
                                .find(|e| e.get("name") == name && name.is_some())
                            {
                                Some(e) => patch(e, item),
                                None => items.push(item.clone()),
                            }
                        }
                    }
                    Some(existing) if existing.is_object() && v.is_object() => patch(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, o) => *t = o.clone(),
    }
}

/// One entry of a registry's `/index`.
#[derive(serde::Deserialize)]
struct IndexEntry {
    name: String,
    #[serde(default)]
    versions: Vec<IndexVersion>,
}

#[derive(serde::Deserialize)]
struct IndexVersion {
    version: String,
    #[serde(default)]
    default: bool,
}

/// Compares dotted versions numerically where they are numbers (`2.10.0` > `2.9.1`).
fn version_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let parts = |s: &str| -> Vec<(u64, String)> {
        s.split(['.', '-', '+'])
            .map(|p| (p.parse().unwrap_or(0), p.to_owned()))
            .collect()
    };
    parts(a).cmp(&parts(b))
}

/// The version to fetch from a registry's index: the one asked for, the highest for
/// `latest`, else the registry's default (or the highest when it marks none).
fn choose_version(
    index: &str,
    id: &str,
    wanted: Option<&str>,
    registry: &str,
) -> Result<String, String> {
    let entries: Vec<IndexEntry> = serde_json::from_str(index).map_err(|e| {
        format!("the index of registry {registry} is not a devfile registry index: {e}")
    })?;
    let entry = entries
        .into_iter()
        .find(|e| e.name == id)
        .ok_or_else(|| format!("registry {registry} has no stack {id:?}"))?;
    let mut versions: Vec<IndexVersion> = entry.versions;
    versions.sort_by(|a, b| version_cmp(&a.version, &b.version));
    let highest = versions.last().map(|v| v.version.clone());
    match wanted {
        Some("latest") => {
            highest.ok_or_else(|| format!("stack {id:?} of registry {registry} lists no versions"))
        }
        Some(v) => versions
            .iter()
            .find(|x| x.version == v)
            .map(|x| x.version.clone())
            .ok_or_else(|| {
                let all: Vec<&str> = versions.iter().map(|x| x.version.as_str()).collect();
                format!(
                    "stack {id:?} of registry {registry} has no version {v} (it has {})",
                    all.join(", ")
                )
            }),
        None => Ok(versions
            .iter()
            .find(|x| x.default)
            .map(|x| x.version.clone())
            .or(highest)
            .unwrap_or_else(|| "latest".into())),
    }
}

/// Fetches `r`: its text and where it came from.
async fn fetch_ref<F: ParentFetcher>(
    r: &ParentRef,
    registries: &[String],
    fetcher: &F,
) -> Result<(String, String), DevfileErrors> {
    match r {
        ParentRef::Uri(u) => fetcher
            .fetch(u)
            .await
            .map(|t| (t, u.clone()))
            .map_err(|e| err("parent.uri", format!("fetching {u}: {e}"))),
        ParentRef::Id {
            id,
            registry_url,
            version,
        } => {
            let candidates: Vec<&str> = match registry_url {
                Some(u) => vec![u.as_str()],
                None => registries.iter().map(String::as_str).collect(),
            };
            if candidates.is_empty() {
                return Err(err(
                    "parent.id",
                    format!("parent {id:?} by id: {NO_REGISTRY}"),
                ));
            }
            let mut problems = Vec::new();
            for reg in candidates {
                let base = reg.trim_end_matches('/');
                let index = match fetcher.fetch(&format!("{base}/index")).await {
                    Ok(i) => i,
                    Err(e) => {
                        problems.push(format!("{base}/index: {e}"));
                        continue;
                    }
                };
                let chosen = match choose_version(&index, id, version.as_deref(), base) {
                    Ok(v) => v,
                    Err(e) => {
                        problems.push(e);
                        continue;
                    }
                };
                let url = format!("{base}/devfiles/{id}/{chosen}");
                match fetcher.fetch(&url).await {
                    Ok(t) => return Ok((t, format!("id {id} {chosen} from {base}"))),
                    Err(e) => problems.push(format!("{url}: {e}")),
                }
            }
            Err(err(
                "parent.id",
                format!(
                    "parent {id:?} could not be fetched: {}",
                    problems.join("; ")
                ),
            ))
        }
    }
}

/// `text` with every parent fetched and merged in; the text unchanged when it names none.
pub async fn resolve<F: ParentFetcher>(
    text: &str,
    registries: &[String],
    fetcher: &F,
) -> Result<Resolved, DevfileErrors> {
    let value = crate::parse::read_value(text).map_err(DevfileErrors)?;
    if parent_ref(&value)?.is_none() {
        return Ok(Resolved {
            text: text.to_owned(),
            parents: vec![],
        });
    }
    // The chain, child first: fetch each parent until one has no parent of its own.
    let mut chain = vec![value];
    let mut parents: Vec<String> = Vec::new();
    while let Some(r) = parent_ref(chain.last().unwrap_or(&Value::Null))? {
        if parents.len() >= MAX_PARENT_DEPTH {
            return Err(err(
                "parent",
                format!(
                    "more than {MAX_PARENT_DEPTH} parents deep ({})",
                    parents.join(" → ")
                ),
            ));
        }
        let (ptext, origin) = fetch_ref(&r, registries, fetcher).await?;
        if parents.contains(&origin) {
            return Err(err(
                "parent",
                format!(
                    "the parents form a loop: {} → {origin}",
                    parents.join(" → ")
                ),
            ));
        }
        let pvalue = crate::parse::read_value(&ptext).map_err(|errs| {
            DevfileErrors(
                errs.into_iter()
                    .map(|e| {
                        DevfileError::new(
                            "parent",
                            format!(
                                "the parent ({origin}) {}{}",
                                if e.path.is_empty() {
                                    String::new()
                                } else {
                                    format!("at {}: ", e.path)
                                },
                                e.message
                            ),
                        )
                    })
                    .collect(),
            )
        })?;
        parents.push(origin);
        chain.push(pvalue);
    }
    // Merge from the top: the farthest parent into its child, and so on down.
    let mut merged = chain.pop().unwrap_or(Value::Null);
    while let Some(child) = chain.pop() {
        merged = merge(&child, &merged)?;
    }
    let mut text = String::new();
    text.push_str("# The devfile with its parent merged in by Warren:\n");
    for p in &parents {
        text.push_str(&format!("#   parent {p}\n"));
    }
    if let Some(obj) = merged.as_object_mut() {
        let attrs = obj
            .entry("attributes")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(a) = attrs.as_object_mut() {
            a.insert(PARENT_ATTRIBUTE.into(), Value::String(parents.join(" → ")));
        }
    }
    text.push_str(
        &serde_yaml::to_string(&merged)
            .map_err(|e| err("", format!("writing the merged devfile: {e}")))?,
    );
    Ok(Resolved { text, parents })
}

/// The attribute a flattened devfile records its parents in (shown as a notice).
pub const PARENT_ATTRIBUTE: &str = "warren.dev/parent";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_as_numbers() {
        assert!(version_cmp("2.10.0", "2.9.1").is_gt());
        let index = r#"[{"name":"go","versions":[{"version":"1.0.2"},{"version":"2.1.0","default":true},{"version":"2.10.0"}]}]"#;
        assert_eq!(choose_version(index, "go", None, "r").unwrap(), "2.1.0");
        assert_eq!(
            choose_version(index, "go", Some("latest"), "r").unwrap(),
            "2.10.0"
        );
        assert_eq!(
            choose_version(index, "go", Some("1.0.2"), "r").unwrap(),
            "1.0.2"
        );
        assert!(choose_version(index, "go", Some("3"), "r")
            .unwrap_err()
            .contains("has no version 3 (it has 1.0.2, 2.1.0, 2.10.0)"));
        assert!(choose_version(index, "node", None, "r")
            .unwrap_err()
            .contains("no stack \"node\""));
    }
}
