//! Stages 1 and 2: size, syntax (YAML or JSON into one value) and the schema's structure.

use super::*;
use crate::{DevfileError, DevfileErrors, MAX_DEVFILE_BYTES};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------------------------
// Stage 1 and 2: syntax and structure
// ---------------------------------------------------------------------------------------------

pub(super) const TOP_LEVEL_KEYS: &[&str] = &[
    "attributes",
    "commands",
    "components",
    "dependentProjects",
    "events",
    "metadata",
    "parent",
    "projects",
    "schemaVersion",
    "starterProjects",
    "variables",
];

/// Reads the text into a JSON value (YAML is a superset of JSON).
pub(crate) fn read_value(text: &str) -> Result<Value, Errors> {
    if text.len() > MAX_DEVFILE_BYTES {
        return Err(vec![DevfileError::new(
            "",
            format!(
                "the devfile is {} bytes, more than the {} bytes (1 MiB) Warren accepts",
                text.len(),
                MAX_DEVFILE_BYTES
            ),
        )]);
    }
    if text.trim().is_empty() {
        return Err(vec![DevfileError::new("", "the devfile is empty")]);
    }
    // Before the parser, whose work grows with flow nesting for every token.
    let limits = warren_types::bounded::Limits {
        max_bytes: MAX_DEVFILE_BYTES,
        ..Default::default()
    };
    warren_types::bounded::check_yaml(text, &limits).map_err(|e| {
        vec![DevfileError::new(
            "",
            format!("refused before parsing: {e}"),
        )]
    })?;
    // Through `serde_yaml::Value` rather than straight into JSON: its mappings refuse
    // duplicate keys, which would otherwise silently keep the last one.
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        let full = e.to_string();
        let what = readable(strip_location(&full));
        let message = match e.location() {
            Some(l) => {
                // A duplicate key is reported at its mapping's start; point at the key.
                let (line, column) = duplicate_key(&what)
                    .and_then(|k| duplicate_key_position(text, l.line(), l.column(), &k))
                    .unwrap_or((l.line(), l.column()));
                format!("not valid YAML or JSON at line {line}, column {column}: {what}")
            }
            None => format!("not valid YAML or JSON: {what}"),
        };
        vec![DevfileError::new("", message)]
    })?;
    let mut errors = Errors::new();
    let value = yaml_to_json(yaml, "", &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    if !value.is_object() {
        return Err(vec![DevfileError::new(
            "",
            format!(
                "expected a mapping (schemaVersion, components, …), found {}",
                kind_of(&value)
            ),
        )]);
    }
    Ok(value)
}

/// The key of serde_yaml's "duplicate entry with key \"…\"" message.
fn duplicate_key(message: &str) -> Option<String> {
    let rest = message.split("duplicate entry with key ").nth(1)?;
    serde_json::from_str::<String>(rest.trim()).ok()
}

/// YAML → JSON data model: keys must be strings, no tags, finite numbers; a float with no
/// fraction is an integer (JSON Schema's view: `8080.0` is an integer).
pub(super) fn yaml_to_json(v: serde_yaml::Value, path: &str, errors: &mut Errors) -> Value {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::String(s) => Value::String(s),
        Y::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                let f = n.as_f64().unwrap_or(f64::NAN);
                if !f.is_finite() {
                    errors.push(DevfileError::new(
                        path,
                        format!("{n} is not a finite number"),
                    ));
                    Value::Null
                } else if f.fract() == 0.0 && f.abs() < 9.0e15 {
                    Value::from(f as i64)
                } else {
                    serde_json::Number::from_f64(f)
                        .map(Value::Number)
                        .unwrap_or(Value::Null)
                }
            }
        }
        Y::Sequence(items) => Value::Array(
            items
                .into_iter()
                .enumerate()
                .map(|(i, item)| yaml_to_json(item, &format!("{path}[{i}]"), errors))
                .collect(),
        ),
        Y::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    other => {
                        errors.push(DevfileError::new(
                            path,
                            format!("mapping keys must be strings, found {}", yaml_kind(&other)),
                        ));
                        continue;
                    }
                };
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                let v = yaml_to_json(v, &p, errors);
                out.insert(key, v);
            }
            Value::Object(out)
        }
        Y::Tagged(t) => {
            errors.push(DevfileError::new(
                path,
                format!("YAML tags ({}) are not allowed in a devfile", t.tag),
            ));
            Value::Null
        }
    }
}

pub(super) fn yaml_kind(v: &serde_yaml::Value) -> String {
    use serde_yaml::Value as Y;
    match v {
        Y::Null => "null".into(),
        Y::Bool(b) => format!("the boolean {b}"),
        Y::Number(n) => format!("the number {n}"),
        Y::String(s) => format!("{s:?}"),
        Y::Sequence(_) => "a sequence".into(),
        Y::Mapping(_) => "a mapping".into(),
        Y::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

pub(super) fn strip_location(s: &str) -> &str {
    s.split(" at line ").next().unwrap_or(s)
}

/// A serde message in the devfile's terms: no Rust type names (`struct RawProjectGit`,
/// `u128`), the schema's words instead.
pub(super) fn readable(message: &str) -> String {
    let mut out = message
        .replace("expected i128", "expected an integer")
        .replace("expected a borrowed string", "expected a string")
        .replace(
            "recursion limit exceeded",
            "nested too deeply (at most 128 levels)",
        );
    // `invalid type: integer `…` as u128, expected any YAML value`: a number no 64-bit
    // integer holds.
    if let Some(i) = out
        .find(" as u128, expected any YAML value")
        .or_else(|| out.find(" as i128, expected any YAML value"))
    {
        out = format!("{}: too large for a 64-bit integer", &out[..i]);
    }
    // `expected struct RawX` / `expected enum RawX`.
    for (marker, words) in [
        ("expected struct ", "expected a mapping"),
        ("expected enum ", "expected one of the allowed values"),
    ] {
        while let Some(i) = out.find(marker) {
            let rest = &out[i + marker.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
                .unwrap_or(rest.len());
            out = format!("{}{words}{}", &out[..i], &rest[end..]);
        }
    }
    out
}

/// Where the second `key` of the mapping that starts at `line`/`column` (1-based, as the
/// YAML parser reports a duplicate) is: the line and column of that entry, if found.
pub(super) fn duplicate_key_position(
    text: &str,
    line: usize,
    column: usize,
    key: &str,
) -> Option<(usize, usize)> {
    let mut seen = 0;
    for (n, l) in text.lines().enumerate().skip(line.saturating_sub(1)) {
        // The first line may start with `- ` before the mapping's column.
        let Some(entry) = l.get(column.saturating_sub(1)..) else {
            continue;
        };
        let indent = l.len() - l.trim_start().len();
        if n + 1 > line && indent < column.saturating_sub(1) && !l.trim().is_empty() {
            break; // The mapping ended.
        }
        let names_key = [key.to_owned(), format!("{key:?}"), format!("'{key}'")]
            .iter()
            .any(|k| {
                entry
                    .strip_prefix(k.as_str())
                    .is_some_and(|r| r.trim_start().starts_with(':'))
            });
        if names_key {
            seen += 1;
            if seen == 2 {
                return Some((n + 1, column));
            }
        }
    }
    None
}

pub(super) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a sequence",
        Value::Object(_) => "a mapping",
    }
}

/// Checks a devfile's structure exactly as the official JSON schema does (types, required
/// fields, unknown keys, enums, name patterns, one-of choices), nothing more: no support
/// restrictions, no cross references.
pub fn check_structure(text: &str) -> Result<(), DevfileErrors> {
    let value = read_value(text).map_err(DevfileErrors)?;
    structure(&value).map(|_| ()).map_err(DevfileErrors)
}

pub(super) fn join(prefix: &str, inner: &serde_path_to_error::Path) -> String {
    let inner = inner.to_string();
    if inner == "." {
        prefix.to_owned()
    } else if prefix.is_empty() {
        inner
    } else if inner.starts_with('[') {
        format!("{prefix}{inner}")
    } else {
        format!("{prefix}.{inner}")
    }
}

pub(super) fn typed<T: DeserializeOwned>(
    value: &Value,
    path: &str,
    errors: &mut Errors,
) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value.clone()) {
        Ok(v) => Some(v),
        Err(e) => {
            // serde_path_to_error already ends the path with an unknown key's name.
            let p = join(path, e.path());
            let message = readable(&e.into_inner().to_string());
            errors.push(DevfileError::new(p, message));
            None
        }
    }
}

/// The schema never allows `null`, except inside free-form `attributes` and unknown
/// metadata keys; serde would read `null` as an absent option, so it is checked here.
pub(super) fn find_nulls(value: &Value, path: &str, free_form: bool, errors: &mut Errors) {
    if free_form {
        return;
    }
    match value {
        Value::Null => errors.push(DevfileError::new(path, "expected a value, found null")),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_nulls(item, &format!("{path}[{i}]"), false, errors);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                let free = k == "attributes"
                    || (path == "metadata" && !METADATA_KEYS.contains(&k.as_str()))
                    || path.is_empty() && k == "parent";
                find_nulls(v, &p, free, errors);
            }
        }
        _ => {}
    }
}

pub(super) const METADATA_KEYS: &[&str] = &[
    "architectures",
    "description",
    "displayName",
    "globalMemoryLimit",
    "icon",
    "language",
    "name",
    "projectType",
    "provider",
    "supportUrl",
    "tags",
    "version",
    "website",
];

pub(super) fn structure(value: &Value) -> Result<RawDevfile, Errors> {
    let mut errors = Errors::new();
    let Some(top) = value.as_object() else {
        return Err(vec![DevfileError::new("", "expected a mapping")]);
    };
    find_nulls(value, "", false, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut raw = RawDevfile::default();
    for key in top.keys() {
        if !TOP_LEVEL_KEYS.contains(&key.as_str()) {
            errors.push(DevfileError::new(
                key.clone(),
                format!(
                    "unknown field `{key}`, expected one of {}",
                    TOP_LEVEL_KEYS.join(", ")
                ),
            ));
        }
    }
    match top.get("schemaVersion") {
        None => errors.push(DevfileError::new("schemaVersion", "missing required field")),
        Some(Value::String(s)) => {
            if !is_semver(s, true) {
                errors.push(DevfileError::new(
                    "schemaVersion",
                    format!("{s:?} is not a devfile schema version (like 2.2.0)"),
                ));
            }
            raw.schema_version = s.clone();
        }
        Some(other) => errors.push(DevfileError::new(
            "schemaVersion",
            format!("invalid type: {}, expected a string", kind_of(other)),
        )),
    }
    if let Some(m) = top.get("metadata") {
        raw.metadata = typed::<RawMetadata>(m, "metadata", &mut errors);
        if let Some(md) = &raw.metadata {
            if let Some(v) = md.version.as_ref().filter(|v| !is_semver(v, false)) {
                errors.push(DevfileError::new(
                    "metadata.version",
                    format!("{v:?} is not a semantic version (like 1.0.0)"),
                ));
            }
            if let Some(archs) = &md.architectures {
                let set: BTreeSet<_> = archs.iter().collect();
                if set.len() != archs.len() {
                    errors.push(DevfileError::new(
                        "metadata.architectures",
                        "lists an architecture more than once",
                    ));
                }
            }
        }
    }
    if let Some(v) = top.get("variables") {
        raw.variables = typed(v, "variables", &mut errors).unwrap_or_default();
    }
    if let Some(v) = top.get("attributes") {
        raw.attributes = typed(v, "attributes", &mut errors).unwrap_or_default();
    }
    if let Some(v) = top.get("events") {
        raw.events = typed(v, "events", &mut errors);
    }
    for (path, c) in items::<RawComponent>(top, "components", &mut errors) {
        component_structure(&c, &path, &mut errors);
        raw.components.push(c);
    }
    for (path, c) in items::<RawCommand>(top, "commands", &mut errors) {
        check_name(&c.id, 63, &format!("{path}.id"), &mut errors);
        let n = [c.exec.is_some(), c.apply.is_some(), c.composite.is_some()]
            .iter()
            .filter(|b| **b)
            .count();
        if n != 1 {
            errors.push(DevfileError::new(
                path.clone(),
                format!("a command must have exactly one of exec, apply, composite (found {n})"),
            ));
        }
        raw.commands.push(c);
    }
    for key in ["projects", "starterProjects", "dependentProjects"] {
        for (path, p) in items::<RawProject>(top, key, &mut errors) {
            project_structure(key, &p, &path, &mut errors);
            if key == "starterProjects" {
                raw.starter_projects.push((path, p));
            } else {
                raw.projects.push((path, p));
            }
        }
    }
    if let Some(v) = top.get("parent") {
        match v {
            Value::Object(m) => {
                let n = ["uri", "id", "kubernetes"]
                    .iter()
                    .filter(|k| m.contains_key(**k))
                    .count();
                if n != 1 {
                    errors.push(DevfileError::new(
                        "parent",
                        format!(
                            "a parent must have exactly one of uri, id, kubernetes (found {n})"
                        ),
                    ));
                }
            }
            other => errors.push(DevfileError::new(
                "parent",
                format!("invalid type: {}, expected a mapping", kind_of(other)),
            )),
        }
        raw.refused_keys.push("parent");
    }
    if errors.is_empty() {
        Ok(raw)
    } else {
        Err(errors)
    }
}

/// Each item of the sequence at `key` read as a `T`, with its path (`key[i]`); an item that
/// is not a `T`, or a `key` that is not a sequence, is an error naming it.
fn items<T: serde::de::DeserializeOwned>(
    top: &serde_json::Map<String, Value>,
    key: &str,
    errors: &mut Errors,
) -> Vec<(String, T)> {
    let mut out = Vec::new();
    match top.get(key) {
        None => {}
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("{key}[{i}]");
                if let Some(t) = typed::<T>(item, &path, errors) {
                    out.push((path, t));
                }
            }
        }
        Some(other) => errors.push(DevfileError::new(
            key,
            format!("invalid type: {}, expected a sequence", kind_of(other)),
        )),
    }
    out
}

/// A project's own rules: a name, exactly one source, and only the fields its list has
/// (`clonePath` is not a starter project's, `description` and `subDir` only a starter's).
fn project_structure(key: &str, p: &RawProject, path: &str, errors: &mut Errors) {
    check_name(&p.name, 63, &format!("{path}.name"), errors);
    let bad_field = match key {
        "starterProjects" => p.clone_path.is_some().then_some("clonePath"),
        _ => p
            .description
            .as_ref()
            .map(|_| "description")
            .or(p.sub_dir.as_ref().map(|_| "subDir")),
    };
    if let Some(f) = bad_field {
        errors.push(DevfileError::new(path, format!("unknown field `{f}`")));
    }
    if p.git.is_some() == p.zip.is_some() {
        errors.push(DevfileError::new(
            path,
            "a project must have exactly one of git, zip",
        ));
    }
}

pub(super) fn component_structure(c: &RawComponent, path: &str, errors: &mut Errors) {
    check_name(&c.name, 63, &format!("{path}.name"), errors);
    let n = [
        c.container.is_some(),
        c.kubernetes.is_some(),
        c.openshift.is_some(),
        c.volume.is_some(),
        c.image.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if n != 1 {
        errors.push(DevfileError::new(
            path,
            format!(
                "a component must have exactly one of container, kubernetes, openshift, volume, image (found {n})"
            ),
        ));
    }
    if let Some(ct) = &c.container {
        endpoints_structure(
            ct.endpoints.as_deref(),
            &format!("{path}.container"),
            errors,
        );
        for (i, m) in ct.volume_mounts.iter().flatten().enumerate() {
            check_name(
                &m.name,
                63,
                &format!("{path}.container.volumeMounts[{i}].name"),
                errors,
            );
        }
    }
    for (kind, k) in [("kubernetes", &c.kubernetes), ("openshift", &c.openshift)] {
        if let Some(k) = k {
            let p = format!("{path}.{kind}");
            if k.uri.is_some() == k.inlined.is_some() {
                errors.push(DevfileError::new(
                    p.clone(),
                    "must have exactly one of uri, inlined",
                ));
            }
            endpoints_structure(k.endpoints.as_deref(), &p, errors);
        }
    }
    if let Some(img) = &c.image {
        let p = format!("{path}.image");
        // A dev container's image built on its `image` has no Dockerfile (`parse/features`).
        let on_base = c
            .attributes
            .as_ref()
            .and_then(|a| a.get(warren_types::features::FEATURES_ATTRIBUTE))
            .is_some_and(|f| f.get("baseImage").is_some());
        match &img.dockerfile {
            None if on_base => {}
            None => errors.push(DevfileError::new(p, "missing field `dockerfile`")),
            Some(d) => {
                let n = [
                    d.uri.is_some(),
                    d.devfile_registry.is_some(),
                    d.git.is_some(),
                ]
                .iter()
                .filter(|b| **b)
                .count();
                if n != 1 {
                    errors.push(DevfileError::new(
                        format!("{p}.dockerfile"),
                        format!("must have exactly one of uri, devfileRegistry, git (found {n})"),
                    ));
                }
            }
        }
    }
}

pub(super) fn endpoints_structure(eps: Option<&[RawEndpoint]>, path: &str, errors: &mut Errors) {
    for (i, e) in eps.unwrap_or_default().iter().enumerate() {
        check_name(&e.name, 15, &format!("{path}.endpoints[{i}].name"), errors);
    }
}

pub(crate) use warren_types::is_dns_label;

pub(super) fn check_name(name: &str, max: usize, path: &str, errors: &mut Errors) {
    if !is_dns_label(name, max) {
        errors.push(DevfileError::new(
            path,
            format!(
                "{name:?} is not a valid name: at most {max} lowercase letters, digits and '-', starting and ending with a letter or digit"
            ),
        ));
    }
}

/// The schema's version pattern; `schema` restricts the major version to 2–9.
pub(super) fn is_semver(s: &str, schema: bool) -> bool {
    let (core, build) = match s.split_once('+') {
        Some((c, b)) => (c, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match core.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (core, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    if schema && (parts[0].len() != 1 || !(b'2'..=b'9').contains(&parts[0].as_bytes()[0])) {
        return false;
    }
    let ids_ok = |x: &str, upper: bool| {
        x.split('.').all(|id| {
            !id.is_empty()
                && id.bytes().all(|b| {
                    b.is_ascii_digit()
                        || b.is_ascii_lowercase()
                        || b == b'-'
                        || (upper && b.is_ascii_uppercase())
                })
        })
    };
    pre.is_none_or(|p| ids_ok(p, false)) && build.is_none_or(|b| ids_ok(b, true))
}
