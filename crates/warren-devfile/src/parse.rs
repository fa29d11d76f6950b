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
    DevfileError, DevfileErrors, MAX_DEVFILE_BYTES, MAX_ENV_BYTES, MAX_ENV_VARS, MAX_ENV_VAR_BYTES,
    UNSUPPORTED_MARKER,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};

type Errors = Vec<DevfileError>;

// ---------------------------------------------------------------------------------------------
// Raw model (what the schema allows)
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawComponent {
    name: String,
    attributes: Option<Map<String, Value>>,
    container: Option<RawContainer>,
    kubernetes: Option<RawKubernetes>,
    openshift: Option<RawKubernetes>,
    volume: Option<RawVolume>,
    image: Option<RawImage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawContainer {
    image: String,
    annotation: Option<RawAnnotation>,
    args: Option<Vec<String>>,
    command: Option<Vec<String>>,
    cpu_limit: Option<String>,
    cpu_request: Option<String>,
    dedicated_pod: Option<bool>,
    endpoints: Option<Vec<RawEndpoint>>,
    env: Option<Vec<RawEnv>>,
    memory_limit: Option<String>,
    memory_request: Option<String>,
    mount_sources: Option<bool>,
    source_mapping: Option<String>,
    volume_mounts: Option<Vec<RawVolumeMount>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnnotation {
    deployment: Option<BTreeMap<String, String>>,
    service: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEndpoint {
    name: String,
    // i128: the schema says "integer", any size; the port range is checked later.
    target_port: i128,
    annotation: Option<BTreeMap<String, String>>,
    #[allow(dead_code)]
    attributes: Option<Map<String, Value>>,
    exposure: Option<Exposure>,
    path: Option<String>,
    protocol: Option<Protocol>,
    secure: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnv {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolumeMount {
    name: String,
    path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawKubernetes {
    uri: Option<String>,
    inlined: Option<String>,
    deploy_by_default: Option<bool>,
    endpoints: Option<Vec<RawEndpoint>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    ephemeral: Option<bool>,
    size: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawImage {
    image_name: String,
    auto_build: Option<bool>,
    dockerfile: Option<RawDockerfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawDockerfile {
    args: Option<Vec<String>>,
    build_context: Option<String>,
    devfile_registry: Option<RawDevfileRegistry>,
    git: Option<RawDockerfileGit>,
    root_required: Option<bool>,
    uri: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawDevfileRegistry {
    id: String,
    registry_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawDockerfileGit {
    checkout_from: Option<RawCheckoutFrom>,
    file_location: Option<String>,
    remotes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RawCheckoutFrom {
    remote: Option<String>,
    revision: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawCommand {
    id: String,
    #[allow(dead_code)]
    attributes: Option<Map<String, Value>>,
    exec: Option<RawExec>,
    apply: Option<RawApply>,
    composite: Option<RawComposite>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawExec {
    command_line: String,
    component: String,
    env: Option<Vec<RawEnv>>,
    group: Option<RawGroup>,
    #[allow(dead_code)]
    hot_reload_capable: Option<bool>,
    label: Option<String>,
    working_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawApply {
    component: String,
    group: Option<RawGroup>,
    label: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawComposite {
    commands: Option<Vec<String>>,
    group: Option<RawGroup>,
    label: Option<String>,
    parallel: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawGroup {
    kind: GroupKind,
    #[allow(dead_code)]
    is_default: Option<bool>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum GroupKind {
    Build,
    Run,
    Test,
    Debug,
    Deploy,
}

impl GroupKind {
    fn as_str(self) -> &'static str {
        match self {
            GroupKind::Build => "build",
            GroupKind::Run => "run",
            GroupKind::Test => "test",
            GroupKind::Debug => "debug",
            GroupKind::Deploy => "deploy",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawEvents {
    post_start: Option<Vec<String>>,
    post_stop: Option<Vec<String>>,
    pre_start: Option<Vec<String>>,
    pre_stop: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
struct RawMetadata {
    architectures: Option<Vec<Architecture>>,
    attributes: Option<Map<String, Value>>,
    description: Option<String>,
    display_name: Option<String>,
    global_memory_limit: Option<String>,
    icon: Option<String>,
    language: Option<String>,
    name: Option<String>,
    project_type: Option<String>,
    provider: Option<String>,
    support_url: Option<String>,
    tags: Option<Vec<String>>,
    version: Option<String>,
    website: Option<String>,
    /// The schema allows any other key in metadata.
    #[serde(flatten)]
    other: Map<String, Value>,
}

#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum Architecture {
    Amd64,
    Arm64,
    Ppc64le,
    S390x,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawProject {
    name: String,
    attributes: Option<Map<String, Value>>,
    clone_path: Option<String>,
    description: Option<String>,
    sub_dir: Option<String>,
    git: Option<RawProjectGit>,
    zip: Option<RawZip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
struct RawProjectGit {
    checkout_from: Option<RawCheckoutFrom>,
    remotes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct RawZip {
    location: Option<String>,
}

/// The structurally valid document, part by part.
#[derive(Default)]
struct RawDevfile {
    schema_version: String,
    metadata: Option<RawMetadata>,
    variables: BTreeMap<String, String>,
    attributes: Map<String, Value>,
    components: Vec<RawComponent>,
    commands: Vec<RawCommand>,
    events: Option<RawEvents>,
    /// Present top-level keys Warren refuses (`parent`, `projects`, …).
    refused_keys: Vec<&'static str>,
}

// ---------------------------------------------------------------------------------------------
// Stage 1 and 2: syntax and structure
// ---------------------------------------------------------------------------------------------

const TOP_LEVEL_KEYS: &[&str] = &[
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
fn read_value(text: &str) -> Result<Value, Errors> {
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
    // Through `serde_yaml::Value` rather than straight into JSON: its mappings refuse
    // duplicate keys, which would otherwise silently keep the last one.
    let yaml: serde_yaml::Value = serde_yaml::from_str(text).map_err(|e| {
        let message = match e.location() {
            Some(l) => format!(
                "not valid YAML or JSON at line {}, column {}: {}",
                l.line(),
                l.column(),
                strip_location(&e.to_string())
            ),
            None => format!("not valid YAML or JSON: {e}"),
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

/// YAML → JSON data model: keys must be strings, no tags, finite numbers; a float with no
/// fraction is an integer (JSON Schema's view: `8080.0` is an integer).
fn yaml_to_json(v: serde_yaml::Value, path: &str, errors: &mut Errors) -> Value {
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

fn yaml_kind(v: &serde_yaml::Value) -> String {
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

fn strip_location(s: &str) -> &str {
    s.split(" at line ").next().unwrap_or(s)
}

fn kind_of(v: &Value) -> &'static str {
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

fn join(prefix: &str, inner: &serde_path_to_error::Path) -> String {
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

fn typed<T: DeserializeOwned>(value: &Value, path: &str, errors: &mut Errors) -> Option<T> {
    match serde_path_to_error::deserialize::<_, T>(value.clone()) {
        Ok(v) => Some(v),
        Err(e) => {
            // serde_path_to_error already ends the path with an unknown key's name.
            let p = join(path, e.path());
            let message = e
                .into_inner()
                .to_string()
                .replace("expected i128", "expected an integer")
                .replace("expected a borrowed string", "expected a string");
            errors.push(DevfileError::new(p, message));
            None
        }
    }
}

/// The schema never allows `null`, except inside free-form `attributes` and unknown
/// metadata keys; serde would read `null` as an absent option, so it is checked here.
fn find_nulls(value: &Value, path: &str, free_form: bool, errors: &mut Errors) {
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

const METADATA_KEYS: &[&str] = &[
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

fn structure(value: &Value) -> Result<RawDevfile, Errors> {
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
    if let Some(v) = top.get("components") {
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("components[{i}]");
                    if let Some(c) = typed::<RawComponent>(item, &path, &mut errors) {
                        component_structure(&c, &path, &mut errors);
                        raw.components.push(c);
                    }
                }
            }
            other => errors.push(DevfileError::new(
                "components",
                format!("invalid type: {}, expected a sequence", kind_of(other)),
            )),
        }
    }
    if let Some(v) = top.get("commands") {
        match v {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("commands[{i}]");
                    if let Some(c) = typed::<RawCommand>(item, &path, &mut errors) {
                        check_name(&c.id, 63, &format!("{path}.id"), &mut errors);
                        let n = [c.exec.is_some(), c.apply.is_some(), c.composite.is_some()]
                            .iter()
                            .filter(|b| **b)
                            .count();
                        if n != 1 {
                            errors.push(DevfileError::new(
                                path.clone(),
                                format!(
                                    "a command must have exactly one of exec, apply, composite (found {n})"
                                ),
                            ));
                        }
                        raw.commands.push(c);
                    }
                }
            }
            other => errors.push(DevfileError::new(
                "commands",
                format!("invalid type: {}, expected a sequence", kind_of(other)),
            )),
        }
    }
    for key in ["projects", "starterProjects", "dependentProjects"] {
        if let Some(v) = top.get(key) {
            match v {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let path = format!("{key}[{i}]");
                        if let Some(p) = typed::<RawProject>(item, &path, &mut errors) {
                            check_name(&p.name, 63, &format!("{path}.name"), &mut errors);
                            let bad_field = match key {
                                "starterProjects" => p.clone_path.is_some().then_some("clonePath"),
                                _ => p
                                    .description
                                    .as_ref()
                                    .map(|_| "description")
                                    .or(p.sub_dir.as_ref().map(|_| "subDir")),
                            };
                            if let Some(f) = bad_field {
                                errors.push(DevfileError::new(
                                    path.clone(),
                                    format!("unknown field `{f}`"),
                                ));
                            }
                            if p.git.is_some() == p.zip.is_some() {
                                errors.push(DevfileError::new(
                                    path,
                                    "a project must have exactly one of git, zip",
                                ));
                            }
                        }
                    }
                }
                other => errors.push(DevfileError::new(
                    key,
                    format!("invalid type: {}, expected a sequence", kind_of(other)),
                )),
            }
            raw.refused_keys.push(match key {
                "projects" => "projects",
                "starterProjects" => "starterProjects",
                _ => "dependentProjects",
            });
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

fn component_structure(c: &RawComponent, path: &str, errors: &mut Errors) {
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
        match &img.dockerfile {
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

fn endpoints_structure(eps: Option<&[RawEndpoint]>, path: &str, errors: &mut Errors) {
    for (i, e) in eps.unwrap_or_default().iter().enumerate() {
        check_name(&e.name, 15, &format!("{path}.endpoints[{i}].name"), errors);
    }
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$` with a maximum length (DNS-1123 label).
pub(crate) fn is_dns_label(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && s.chars().count() <= max
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

fn check_name(name: &str, max: usize, path: &str, errors: &mut Errors) {
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
fn is_semver(s: &str, schema: bool) -> bool {
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

// ---------------------------------------------------------------------------------------------
// Stage 3: variables
// ---------------------------------------------------------------------------------------------

/// Replaces `{{name}}` in every string (not in `variables` itself, not in keys).
fn substitute(value: &mut Value, vars: &BTreeMap<String, String>, path: &str, errors: &mut Errors) {
    match value {
        Value::String(s) if s.contains("{{") => match substitute_str(s, vars) {
            Ok(new) => *s = new,
            Err(msg) => errors.push(DevfileError::new(path, msg)),
        },
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, vars, &format!("{path}[{i}]"), errors);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if path.is_empty() && k == "variables" {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                substitute(v, vars, &p, errors);
            }
        }
        _ => {}
    }
}

fn substitute_str(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut unknown = Vec::new();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = after[..end].trim();
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                unknown.push(name.to_owned());
                out.push_str(&rest[start..start + 4 + end]);
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if unknown.is_empty() {
        Ok(out)
    } else {
        let names: Vec<String> = unknown.iter().map(|n| format!("{{{{{n}}}}}")).collect();
        Err(format!(
            "refers to undefined variable{} {} (define {} in the devfile's `variables`)",
            if names.len() > 1 { "s" } else { "" },
            names.join(", "),
            if names.len() > 1 { "them" } else { "it" }
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Stages 4 and 5: support and semantics
// ---------------------------------------------------------------------------------------------

pub(crate) fn parse(text: &str) -> Result<Devfile, DevfileErrors> {
    let mut value = read_value(text).map_err(DevfileErrors)?;
    let raw = structure(&value).map_err(DevfileErrors)?;
    let mut errors = Errors::new();
    // Unknown references are reported and left as they are; the later stages still run so
    // the user sees every problem at once.
    substitute(&mut value, &raw.variables, "", &mut errors);
    // Substitution only changes string contents, so the structure still holds.
    let raw = structure(&value).map_err(DevfileErrors)?;
    let devfile = semantics(raw, &mut errors);
    match devfile {
        Some(d) if errors.is_empty() => Ok(d),
        _ => Err(DevfileErrors(errors)),
    }
}

fn unsupported(path: impl Into<String>, what: &str, why: &str) -> DevfileError {
    DevfileError::new(path, format!("{what} {UNSUPPORTED_MARKER}: {why}"))
}

const OVERRIDE_ATTRIBUTES: &[&str] = &["pod-overrides", "container-overrides"];

fn check_override_attributes(attrs: Option<&Map<String, Value>>, path: &str, errors: &mut Errors) {
    for key in OVERRIDE_ATTRIBUTES {
        if attrs.is_some_and(|a| a.contains_key(*key)) {
            errors.push(unsupported(
                format!("{path}.{key}"),
                &format!("the `{key}` attribute is"),
                "Warren sets the pod and container specs itself (security context, resources); remove it",
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
        if e.name.is_empty()
            || e.name.contains('=')
            || e.name.chars().any(|c| c.is_control())
            || (shell && !shell_ok)
        {
            errors.push(DevfileError::new(
                p,
                format!("{:?} is not a valid environment variable name", e.name),
            ));
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
        }
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
        Refused(&'static str),
    }
    let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
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
        } else if c.kubernetes.is_some() {
            errors.push(unsupported(
                format!("{path}.kubernetes"),
                &format!("component {:?}: `kubernetes` components are", c.name),
                "Warren renders the workspace's objects itself and applies no user manifests; run the application inside a container component instead",
            ));
            Kind::Refused("kubernetes")
        } else if c.openshift.is_some() {
            errors.push(unsupported(
                format!("{path}.openshift"),
                &format!("component {:?}: `openshift` components are", c.name),
                "Warren renders the workspace's objects itself and applies no user manifests",
            ));
            Kind::Refused("openshift")
        } else {
            errors.push(unsupported(
                format!("{path}.image"),
                &format!("component {:?}: `image` components are", c.name),
                "Warren does not build images; build and push the image elsewhere and reference it from a container component",
            ));
            Kind::Refused("image")
        };
        kinds.entry(c.name.clone()).or_insert(kind);
        check_override_attributes(c.attributes.as_ref(), &format!("{path}.attributes"), errors);
    }

    // Commands.
    let mut commands = Vec::new();
    let mut command_kinds: BTreeMap<String, &'static str> = BTreeMap::new();
    for (i, c) in raw.commands.iter().enumerate() {
        let path = format!("commands[{i}]");
        if command_kinds.contains_key(&c.id) {
            errors.push(DevfileError::new(
                format!("{path}.id"),
                format!("command id {:?} is used more than once", c.id),
            ));
        }
        check_reserved(&c.id, "command", format!("{path}.id"), errors);
        let refers = |component: &str, p: String, errors: &mut Errors| {
            match kinds.get(component) {
            None => errors.push(DevfileError::new(
                p,
                format!("refers to component {component:?}, which the devfile does not define"),
            )),
            Some(Kind::Container) => {}
            Some(Kind::Volume) => errors.push(DevfileError::new(
                p,
                format!("refers to {component:?}, a volume component; commands need a container component"),
            )),
            Some(Kind::Refused(k)) => errors.push(DevfileError::new(
                p,
                format!(
                    "refers to component {component:?}, {} `{k}` component, which Warren refuses (see that component); remove this command too",
                    if k.starts_with(['i', 'o']) { "an" } else { "a" }
                ),
            )),
        }
        };
        if let Some(e) = &c.exec {
            refers(&e.component, format!("{path}.exec.component"), errors);
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
            refers(&a.component, format!("{path}.apply.component"), errors);
            command_kinds.entry(c.id.clone()).or_insert("apply");
            commands.push(Command {
                id: c.id.clone(),
                label: a.label.clone(),
                group: a.group.as_ref().map(|g| g.kind.as_str().to_owned()),
                action: CommandAction::Apply {
                    component: a.component.clone(),
                },
            });
        } else {
            errors.push(unsupported(
                format!("{path}.composite"),
                &format!("command {:?}: `composite` commands are", c.id),
                "Warren runs single exec commands; list the commands in `events` or run them one by one",
            ));
            command_kinds.entry(c.id.clone()).or_insert("composite");
        }
    }

    // Events.
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
        for (key, list, out) in [
            ("preStart", &ev.pre_start, &mut pre_start),
            ("postStart", &ev.post_start, &mut post_start),
        ] {
            for (i, id) in list.iter().flatten().enumerate() {
                let p = format!("events.{key}[{i}]");
                match command_kinds.get(id) {
                    None => errors.push(DevfileError::new(
                        p,
                        format!("refers to command {id:?}, which the devfile does not define"),
                    )),
                    Some(&"composite") => errors.push(DevfileError::new(
                        p,
                        format!("refers to command {id:?}, a composite command, which Warren refuses (see that command)"),
                    )),
                    Some(&"apply") if key == "postStart" => errors.push(DevfileError::new(
                        p,
                        format!("refers to apply command {id:?}; postStart events run exec commands only (apply commands belong in preStart)"),
                    )),
                    Some(kind) => {
                        if out.contains(id) {
                            errors.push(DevfileError::new(p, format!("command {id:?} is listed more than once")));
                        }
                        if *kind == "apply" {
                            if let Some(cmd) = commands.iter().find(|c| &c.id == id) {
                                init_only.insert(cmd.component().to_owned());
                            }
                        }
                        out.push(id.clone());
                    }
                }
            }
        }
    }

    for key in &raw.refused_keys {
        let why = match *key {
            "parent" => "Warren does not fetch parent devfiles; inline what you need from the parent and remove `parent`",
            "projects" => "a workspace gets exactly one project, its own repository, which Warren clones into /projects; remove `projects`",
            "starterProjects" => "starter projects are templates for creating a new project; a Warren workspace clones its project's repository instead, so remove `starterProjects`",
            _ => "Warren clones only the workspace's own project; remove `dependentProjects`",
        };
        errors.push(unsupported(*key, &format!("`{key}` is"), why));
    }

    // Container and volume details.
    let mut containers = Vec::new();
    let mut volumes = Vec::new();
    let mut endpoint_names: BTreeMap<String, String> = BTreeMap::new();
    let mut ports: BTreeMap<u16, String> = BTreeMap::new();
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
        let cpu_req = quantity(&ct.cpu_request, format!("{cp}.cpuRequest"), true, errors);
        let cpu_lim = quantity(&ct.cpu_limit, format!("{cp}.cpuLimit"), true, errors);
        let mem_req = quantity(
            &ct.memory_request,
            format!("{cp}.memoryRequest"),
            false,
            errors,
        );
        let mem_lim = quantity(&ct.memory_limit, format!("{cp}.memoryLimit"), false, errors);
        // Below these, container runtimes refuse to create the container (runc: memory under
        // 6 MiB; Docker and Podman: under 0.01 CPU) with an error naming none of this.
        if mem_lim.is_some_and(|m| m < MIN_MEMORY_LIMIT_BYTES) {
            errors.push(DevfileError::new(
                format!("{cp}.memoryLimit"),
                format!(
                    "{} is below 6Mi, the least memory a container can be given",
                    ct.memory_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if cpu_lim.is_some_and(|c| c < MIN_CPU_LIMIT_MILLIS) {
            errors.push(DevfileError::new(
                format!("{cp}.cpuLimit"),
                format!(
                    "{} is below 10m, the least CPU a container can be given",
                    ct.cpu_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if matches!((cpu_req, cpu_lim), (Some(r), Some(l)) if r > l) {
            errors.push(DevfileError::new(
                format!("{cp}.cpuRequest"),
                format!(
                    "cpuRequest {} is more than cpuLimit {}",
                    ct.cpu_request.as_deref().unwrap_or_default(),
                    ct.cpu_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        if matches!((mem_req, mem_lim), (Some(r), Some(l)) if r > l) {
            errors.push(DevfileError::new(
                format!("{cp}.memoryRequest"),
                format!(
                    "memoryRequest {} is more than memoryLimit {}",
                    ct.memory_request.as_deref().unwrap_or_default(),
                    ct.memory_limit.as_deref().unwrap_or_default()
                ),
            ));
        }
        let source_mapping = ct
            .source_mapping
            .clone()
            .unwrap_or_else(|| "/projects".into());
        if !is_abs_path(&source_mapping) || normalize_path(&source_mapping) == "/" {
            errors.push(DevfileError::new(
                format!("{cp}.sourceMapping"),
                format!("{source_mapping:?} must be an absolute directory path other than /"),
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
            if let Some(other) = ports.insert(port, e.name.clone()) {
                errors.push(DevfileError::new(
                    format!("{ep}.targetPort"),
                    format!("port {port} is already used by endpoint {other:?}"),
                ));
            }
            if let Some(p) = e
                .path
                .as_ref()
                .filter(|p| !p.is_empty() && !p.starts_with('/'))
            {
                errors.push(DevfileError::new(
                    format!("{ep}.path"),
                    format!("{p:?} must start with /"),
                ));
            }
            endpoints.push(DevfileEndpoint {
                name: e.name.clone(),
                target_port: port,
                exposure: e.exposure.unwrap_or(Exposure::Public),
                protocol: e.protocol.unwrap_or(Protocol::Http),
                path: e.path.clone(),
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
            if !is_abs_path(&path) || normalize_path(&path) == "/" {
                errors.push(DevfileError::new(
                    format!("{mp}.path"),
                    format!("{path:?} must be an absolute directory path other than /"),
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
            cpu_request: ct.cpu_request.clone(),
            cpu_limit: ct.cpu_limit.clone(),
            memory_request: ct.memory_request.clone(),
            memory_limit: ct.memory_limit.clone(),
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
            let names: Vec<&str> = many.iter().map(|i| containers[*i].name.as_str()).collect();
            errors.push(DevfileError::new(
                "components",
                format!(
                    "{} containers ({}) and none is marked as the main one; add the attribute `warren.dev/main: true` to one of them",
                    names.len(),
                    names.join(", ")
                ),
            ));
            None
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
        let on = commands.iter().find(|c| &c.id == id).map(|c| c.component());
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
