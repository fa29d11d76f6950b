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
mod attributes;
mod containers;
mod features;
mod outer;
mod projects;
mod raw;
mod schema;
mod semantics;
mod variables;

use raw::*;
pub use schema::check_structure;
pub(crate) use schema::is_dns_label;
pub(crate) use schema::read_value;
use schema::*;
use semantics::semantics;
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
