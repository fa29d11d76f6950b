//! Rendered objects → the YAML agents apply, and the cheap edits the server makes per reconcile.

use serde_json::Value;

/// Deterministic multi-document YAML ("---" separated), keys sorted (serde_json's maps are
/// ordered by key).
pub fn objects_to_yaml(objects: &[Value]) -> String {
    let mut out = String::with_capacity(objects.len() * 2048);
    for (i, o) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        // A `serde_json::Value` always serializes to YAML (string keys, finite numbers).
        match serde_yaml::to_string(o) {
            Ok(s) => out.push_str(&s),
            Err(e) => out.push_str(&format!("# unserializable object: {e}\n")),
        }
    }
    out
}

/// Sets `spec.replicas` of the Deployment(s) in the set without re-rendering.
pub fn set_replicas(objects: &mut [Value], replicas: i32) {
    for o in objects.iter_mut() {
        if o.get("kind").and_then(Value::as_str) != Some("Deployment") {
            continue;
        }
        if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("replicas".into(), Value::from(replicas));
        }
    }
}

/// True for objects that do not change with desired state (everything but the Deployment),
/// which a partial reconcile may omit.
pub fn is_static_object(object: &Value) -> bool {
    object.get("kind").and_then(Value::as_str) != Some("Deployment")
}
