//! Everything the server does with devfiles and rendered objects; the only module that
//! uses `warren-devfile`.

use crate::error::HttpError;
use crate::store::Store;
use serde_json::Value;

/// The YAML the agent applies: the stored objects with the Deployment's replicas set.
pub fn config_for_agent(
    store: &Store,
    sealed_objects: &str,
    replicas: i32,
) -> Result<String, HttpError> {
    let plain = store.sbox.open(sealed_objects)?;
    let mut objects: Vec<Value> = serde_json::from_slice(&plain)
        .map_err(|e| HttpError::internal("decoding stored objects", &e))?;
    set_replicas(&mut objects, replicas);
    Ok(objects_to_yaml(&objects))
}

fn set_replicas(objects: &mut [Value], replicas: i32) {
    for o in objects.iter_mut() {
        if o.get("kind").and_then(Value::as_str) == Some("Deployment") {
            if let Some(spec) = o.get_mut("spec").and_then(Value::as_object_mut) {
                spec.insert("replicas".into(), Value::from(replicas));
            }
        }
    }
}

fn objects_to_yaml(objects: &[Value]) -> String {
    let mut out = String::new();
    for o in objects {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(o).unwrap_or_default());
    }
    out
}

/// The server's built-in default devfile (until the devfile library lands: a minimal one).
pub fn builtin_default_devfile() -> &'static str {
    "schemaVersion: 2.2.0\n"
}

/// Parses a devfile (until the devfile library lands: only the size is checked).
pub fn parse(text: &str, field: &str) -> Result<(), HttpError> {
    if text.len() > 3 * 1024 * 1024 {
        return Err(HttpError::new(
            http::StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_devfile",
            format!("{field}: too large"),
        ));
    }
    Ok(())
}
