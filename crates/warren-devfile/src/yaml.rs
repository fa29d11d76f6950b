//! Rendered objects → the YAML agents apply, and the cheap edits the server makes per reconcile.

use serde_json::Value;

/// Deterministic multi-document YAML ("---" separated), keys sorted (serde_json's maps are
/// ordered by key, unless some crate in the build turns on its `preserve_order` feature; then
/// the keys are sorted here, more slowly but with the same output).
pub fn objects_to_yaml(objects: &[Value]) -> String {
    let mut out = String::with_capacity(objects.len() * 2048);
    let sorted = maps_are_sorted();
    for (i, o) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let owned;
        let o = if sorted {
            o
        } else {
            owned = sort_keys(o);
            &owned
        };
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

/// Whether `serde_json::Map` iterates in key order (it does without `preserve_order`).
fn maps_are_sorted() -> bool {
    static SORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SORTED.get_or_init(|| {
        let mut m = serde_json::Map::new();
        m.insert("b".into(), Value::Null);
        m.insert("a".into(), Value::Null);
        m.keys().next().map(String::as_str) == Some("a")
    })
}

fn sort_keys(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k.clone(), sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(sort_keys).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_out_sorted_and_replicas_only_touch_deployments() {
        let mut objs = vec![
            serde_json::json!({"kind": "Deployment", "spec": {"replicas": 1, "b": 1, "a": 2}}),
            serde_json::json!({"kind": "Service", "spec": {"replicas": 5}}),
        ];
        set_replicas(&mut objs, 0);
        let yaml = objects_to_yaml(&objs);
        assert_eq!(
            yaml,
            "kind: Deployment\nspec:\n  a: 2\n  b: 1\n  replicas: 0\n---\nkind: Service\nspec:\n  replicas: 5\n"
        );
        assert_eq!(sort_keys(&objs[0]), objs[0]);
        assert!(!is_static_object(&objs[0]) && is_static_object(&objs[1]));
    }
}
