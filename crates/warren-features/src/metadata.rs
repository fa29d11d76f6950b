//! `devcontainer-feature.json`: a Feature's metadata, read as the specification defines it.
//! What would reach past a workspace's isolation or Warren's own start of the container is
//! refused by name; the options are resolved into the values `install.sh` gets.

use crate::FeatureError;
use serde_json::Value;
use std::collections::BTreeMap;
use warren_devcontainer::properties::lifecycle_command;
use warren_types::features::{FeatureSource, FeatureValue};

/// Most bytes of a `devcontainer-feature.json`.
pub const MAX_METADATA_BYTES: usize = 256 * 1024;
/// Most options one Feature declares or is given.
const MAX_OPTIONS: usize = 256;

/// The lifecycle stages a Feature may contribute commands to, as the workspace runs them
/// (their devfile command ids and [`warren_types::features::HOOKS_DIR`] folders).
pub const HOOK_STAGES: [(&str, &str); 4] = [
    ("onCreateCommand", "on-create"),
    ("updateContentCommand", "update-content"),
    ("postCreateCommand", "post-create"),
    ("postStartCommand", "post-start"),
];

/// One declared option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptionSpec {
    pub boolean: bool,
    pub default: Option<FeatureValue>,
    /// `enum`: the only values allowed (`proposals` only suggest, so they are not kept).
    pub allowed: Option<Vec<String>>,
}

/// What Warren uses of a Feature's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub id: String,
    pub version: String,
    pub name: String,
    pub options: BTreeMap<String, OptionSpec>,
    /// `containerEnv`, set in the image after the install (values may use `${VAR}`).
    pub container_env: BTreeMap<String, String>,
    /// `dependsOn`: (reference, options), in the order given.
    pub depends_on: Vec<(String, BTreeMap<String, FeatureValue>)>,
    /// `installsAfter`: Feature ids, lowercased, without versions.
    pub installs_after: Vec<String>,
    /// The lifecycle commands it contributes: (stage folder, shell text).
    pub hooks: Vec<(&'static str, String)>,
    pub deprecated: bool,
    /// What the build log should say Warren did not act on (its `postAttachCommand`, its
    /// editor customizations).
    pub not_applied: Vec<String>,
}

/// Reads the metadata of the Feature from `source`.
pub fn parse(source: &FeatureSource, text: &str) -> Result<Metadata, FeatureError> {
    let invalid = |m: String| FeatureError::invalid(source, m);
    if text.len() > MAX_METADATA_BYTES {
        return Err(invalid(format!(
            "devcontainer-feature.json is {} bytes; at most {MAX_METADATA_BYTES} are read",
            text.len()
        )));
    }
    let value = warren_devcontainer::jsonc::parse(text)
        .map_err(|p| invalid(format!("devcontainer-feature.json: {p}")))?;
    let Value::Object(top) = value else {
        return Err(invalid("devcontainer-feature.json is not an object".into()));
    };
    let string = |key: &str| -> Result<String, FeatureError> {
        match top.get(key) {
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
            _ => Err(invalid(format!(
                "devcontainer-feature.json has no `{key}` (the specification requires `id`, `version` and `name`)"
            ))),
        }
    };
    let mut m = Metadata {
        id: string("id")?,
        version: string("version")?,
        name: string("name")?,
        options: BTreeMap::new(),
        container_env: BTreeMap::new(),
        depends_on: vec![],
        installs_after: vec![],
        hooks: vec![],
        deprecated: top.get("deprecated") == Some(&Value::Bool(true)),
        not_applied: vec![],
    };
    refuse_isolation(source, &top)?;
    for key in ["capAdd", "securityOpt"] {
        if let Some(items) = top
            .get(key)
            .and_then(Value::as_array)
            .filter(|a| !a.is_empty())
        {
            let list: Vec<String> = items.iter().map(|i| i.to_string()).collect();
            // Mostly debuggers' wishes (the Go, Rust and C++ Features): the Feature works
            // without them, and refusing it would refuse the languages' own Features.
            m.not_applied.push(format!(
                "its `{key}` {} is not given to the container: a Feature cannot widen the workspace's confinement; the dev container's own `{key}` may ask for it, which the agent's admin may allow",
                list.join(", ")
            ));
        }
    }
    if let Some(v) = top.get("options") {
        m.options = options(source, v)?;
    }
    if let Some(v) = top.get("containerEnv") {
        m.container_env = container_env(source, v)?;
    }
    match top.get("dependsOn") {
        None => {}
        Some(Value::Object(deps)) => {
            for (key, v) in deps {
                m.depends_on
                    .push((key.clone(), given_options(source, key, v)?));
            }
        }
        Some(_) => return Err(invalid("`dependsOn` must be an object".into())),
    }
    match top.get("installsAfter") {
        None => {}
        Some(Value::Array(ids)) => {
            for id in ids {
                let Some(id) = id.as_str() else {
                    return Err(invalid("`installsAfter` must list Feature ids".into()));
                };
                m.installs_after
                    .push(warren_types::features::oci_name(&id.to_ascii_lowercase()).to_owned());
            }
        }
        Some(_) => return Err(invalid("`installsAfter` must be an array".into())),
    }
    for (property, stage) in HOOK_STAGES {
        if let Some(v) = top.get(property) {
            let command = lifecycle_command(property, v).map_err(|p| invalid(p.to_string()))?;
            if let Some(c) = command {
                m.hooks
                    .push((stage, warren_devcontainer::devfile::command_line(&c)));
            }
        }
    }
    if top.contains_key("postAttachCommand") {
        m.not_applied.push(
            "its `postAttachCommand` is not run: Warren runs no command when a session attaches"
                .into(),
        );
    }
    if let Some(Value::Object(c)) = top.get("customizations") {
        for tool in c.keys() {
            m.not_applied.push(format!(
                "its `customizations.{tool}` are not applied to the injected editor"
            ));
        }
    }
    Ok(m)
}

/// What a Feature may ask of the container that Warren does not give any workspace (its
/// `capAdd` and `securityOpt` are only noted as not given: see [`parse`]).
fn refuse_isolation(
    source: &FeatureSource,
    top: &serde_json::Map<String, Value>,
) -> Result<(), FeatureError> {
    let refuse = |what: &str, why: &str| FeatureError::Unsupported {
        feature: source.to_string(),
        what: what.to_owned(),
        why: why.to_owned(),
    };
    if top.get("privileged") == Some(&Value::Bool(true)) {
        return Err(refuse(
            "a privileged container (`privileged`)",
            "it would reach the machine and the other tenants' workspaces",
        ));
    }
    if top
        .get("mounts")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        return Err(refuse(
            "`mounts`",
            "a Feature's mounts are decided after the workspace's definition is stored, where Warren checks every volume; declare the volume in the dev container's own `mounts`",
        ));
    }
    if top
        .get("entrypoint")
        .and_then(Value::as_str)
        .is_some_and(|e| !e.trim().is_empty())
    {
        return Err(refuse(
            "an `entrypoint`",
            "Warren starts the workspace's container with its own init and runs nothing before it; start the service from a lifecycle command",
        ));
    }
    Ok(())
}

fn options(
    source: &FeatureSource,
    v: &Value,
) -> Result<BTreeMap<String, OptionSpec>, FeatureError> {
    let invalid = |m: String| FeatureError::invalid(source, m);
    let Value::Object(map) = v else {
        return Err(invalid("`options` must be an object".into()));
    };
    if map.len() > MAX_OPTIONS {
        return Err(invalid(format!("more than {MAX_OPTIONS} options")));
    }
    let mut out = BTreeMap::new();
    for (name, spec) in map {
        let boolean = match spec.get("type").and_then(Value::as_str) {
            Some("boolean") => true,
            Some("string") | None => false,
            Some(other) => {
                return Err(invalid(format!(
                "option {name:?} has type {other:?}; the specification has `boolean` and `string`"
            )))
            }
        };
        let default = match spec.get("default") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(FeatureValue::Bool(*b)),
            Some(Value::String(s)) => Some(FeatureValue::String(s.clone())),
            Some(_) => {
                return Err(invalid(format!(
                    "option {name:?} has a default that is neither a string nor a boolean"
                )))
            }
        };
        let allowed = spec.get("enum").and_then(Value::as_array).map(|a| {
            a.iter()
                .map(|x| match x {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect()
        });
        out.insert(
            name.clone(),
            OptionSpec {
                boolean,
                default,
                allowed,
            },
        );
    }
    Ok(out)
}

fn container_env(
    source: &FeatureSource,
    v: &Value,
) -> Result<BTreeMap<String, String>, FeatureError> {
    let invalid = |m: String| FeatureError::invalid(source, m);
    let Value::Object(map) = v else {
        return Err(invalid("`containerEnv` must be an object".into()));
    };
    let mut out = BTreeMap::new();
    for (name, value) in map {
        let valid_name = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_name {
            return Err(invalid(format!(
                "`containerEnv` {name:?} is not an environment variable name"
            )));
        }
        let Some(value) = value.as_str() else {
            return Err(invalid(format!("`containerEnv.{name}` must be a string")));
        };
        if value.contains(['\n', '\r', '\0']) {
            return Err(invalid(format!(
                "`containerEnv.{name}` holds a line break or NUL"
            )));
        }
        out.insert(name.clone(), value.to_owned());
    }
    Ok(out)
}

/// Options as a configuration or a `dependsOn` gives them: an object of strings and
/// booleans, or a string (the `version`).
fn given_options(
    source: &FeatureSource,
    key: &str,
    v: &Value,
) -> Result<BTreeMap<String, FeatureValue>, FeatureError> {
    match v {
        Value::String(s) => Ok(BTreeMap::from([(
            "version".to_owned(),
            FeatureValue::String(s.clone()),
        )])),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), FeatureValue::String(s.clone()))),
                Value::Bool(b) => Ok((k.clone(), FeatureValue::Bool(*b))),
                _ => Err(FeatureError::invalid(
                    source,
                    format!("`dependsOn.{key}.{k}` must be a string or a boolean"),
                )),
            })
            .collect(),
        _ => Err(FeatureError::invalid(
            source,
            format!("`dependsOn.{key}` must be an object of options"),
        )),
    }
}

/// The options `install.sh` gets: each declared one (the given value, else its default),
/// then the given ones it does not declare (passed on, as the reference tools do). A value
/// outside an `enum`, or a non-boolean for a boolean, is refused.
pub fn resolve_options(
    source: &FeatureSource,
    metadata: &Metadata,
    given: &BTreeMap<String, FeatureValue>,
) -> Result<BTreeMap<String, FeatureValue>, FeatureError> {
    if given.len() > MAX_OPTIONS {
        return Err(FeatureError::invalid(source, "too many options"));
    }
    let mut out = BTreeMap::new();
    for (name, spec) in &metadata.options {
        let value = match given.get(name) {
            Some(v) => checked(source, name, spec, v)?,
            None => match &spec.default {
                Some(d) => d.clone(),
                None => continue,
            },
        };
        out.insert(name.clone(), value);
    }
    for (name, v) in given {
        out.entry(name.clone()).or_insert_with(|| v.clone());
    }
    Ok(out)
}

fn checked(
    source: &FeatureSource,
    name: &str,
    spec: &OptionSpec,
    v: &FeatureValue,
) -> Result<FeatureValue, FeatureError> {
    if spec.boolean {
        return match v {
            FeatureValue::Bool(_) => Ok(v.clone()),
            FeatureValue::String(s) if s == "true" || s == "false" => {
                Ok(FeatureValue::Bool(s == "true"))
            }
            FeatureValue::String(s) => Err(FeatureError::invalid(
                source,
                format!("option {name:?} is a boolean, not {s:?}"),
            )),
        };
    }
    let text = v.to_string();
    if let Some(allowed) = &spec.allowed {
        if !allowed.contains(&text) {
            return Err(FeatureError::invalid(
                source,
                format!(
                    "option {name:?} is {text:?}; it must be one of {}",
                    allowed.join(", ")
                ),
            ));
        }
    }
    Ok(FeatureValue::String(text))
}

/// An option's name as the environment variable `install.sh` reads (the specification's
/// rule: other characters than letters, digits and `_` become `_`, leading digits and `_`
/// one `_`, then upper case).
pub fn env_name(option: &str) -> String {
    let replaced: String = option
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let trimmed = replaced.trim_start_matches(|c: char| c.is_ascii_digit() || c == '_');
    let name = if trimmed.len() == replaced.len() {
        replaced
    } else {
        format!("_{trimmed}")
    };
    name.to_ascii_uppercase()
}

#[cfg(test)]
mod tests {
    use super::env_name;

    #[test]
    fn option_names_become_variables_as_the_specification_says() {
        assert_eq!(env_name("version"), "VERSION");
        assert_eq!(env_name("installZsh"), "INSTALLZSH");
        assert_eq!(env_name("node-gyp.deps"), "NODE_GYP_DEPS");
        assert_eq!(env_name("1st"), "_ST");
        assert_eq!(env_name("__x"), "_X");
    }
}
