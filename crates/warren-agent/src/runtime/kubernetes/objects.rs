//! The object kinds Warren renders, their validation before anything is sent, and the inventory.

use super::super::{RuntimeError, WorkspaceKey, AGENT_ID_LABEL};
use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeSet;

/// Label on a dedicated workspace namespace and on the inventory: the workspace name.
pub const WORKSPACE_NAME_LABEL: &str = "warren.dev/workspace-name";
/// Key of the inventory ConfigMap's data holding the applied objects.
pub const INVENTORY_KEY: &str = "objects";

/// One kind Warren renders: (apiVersion, kind, plural). Ordered so that what a pod refers to
/// (service account, secrets, config map, volumes) exists before the Deployment creates pods.
pub const KINDS: [(&str, &str, &str); 8] = [
    ("v1", "ServiceAccount", "serviceaccounts"),
    ("v1", "Secret", "secrets"),
    ("v1", "ConfigMap", "configmaps"),
    ("v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("v1", "ResourceQuota", "resourcequotas"),
    ("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"),
    ("v1", "Service", "services"),
    ("apps/v1", "Deployment", "deployments"),
];

/// Position of `kind` in [`KINDS`] (unknown kinds last).
pub fn rank_of(kind: &str) -> usize {
    KINDS
        .iter()
        .position(|(_, k, _)| *k == kind)
        .unwrap_or(KINDS.len())
}

/// A Secret's `namespace/name` (a pull secret's source, the push secret): the namespace a
/// DNS label, the name a DNS subdomain.
pub(super) fn secret_source(source: &str) -> Result<(String, String), String> {
    let subdomain = |n: &str| {
        !n.is_empty()
            && n.len() <= 253
            && n.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            })
    };
    match source.split_once('/') {
        Some((ns, name))
            if subdomain(name)
                && check_key(&WorkspaceKey {
                    name: "x".into(),
                    namespace: ns.to_owned(),
                })
                .is_ok() =>
        {
            Ok((ns.to_owned(), name.to_owned()))
        }
        _ => Err(format!("secret {source:?} is not namespace/name")),
    }
}

/// The `namespace/name` sources of the pull secrets the objects' ServiceAccount names
/// (`PULL_SECRET_SOURCES_ANNOTATION`, the agent configuration's `image_pull_secrets`).
pub(super) fn pull_secret_sources(
    objects: &[serde_json::Value],
) -> Result<Vec<(String, String)>, String> {
    let sources = objects
        .iter()
        .filter(|o| o["kind"] == "ServiceAccount")
        .find_map(|o| {
            o["metadata"]["annotations"][warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    sources
        .split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            secret_source(s).map_err(|_| format!("image pull secret {s:?} is not namespace/name"))
        })
        .collect()
}

/// Checks that a workspace key names a DNS-1123 label name in a DNS-1123 label namespace.
pub fn check_key(key: &WorkspaceKey) -> Result<(), String> {
    let label = |what: &str, text: &str| {
        let valid = !text.is_empty()
            && text.len() <= 63
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !text.starts_with('-')
            && !text.ends_with('-');
        if valid {
            Ok(())
        } else {
            Err(format!(
                "{what} {text:?} is not a DNS label (lowercase letters, digits and '-', at most 63)"
            ))
        }
    };
    label("name", &key.name)?;
    label("namespace", &key.namespace)
}

/// Names the namespace a workspace gets when it does not share one (desired-config.md).
pub fn dedicated_namespace(name: &str) -> String {
    format!("warren-ws-{name}")
}

/// Whether the workspace owns its namespace, so deleting the workspace deletes the namespace.
/// Decided from the name alone so that a shared namespace (or `default`) is never deleted.
pub fn owns_namespace(key: &WorkspaceKey) -> bool {
    key.namespace == dedicated_namespace(&key.name)
}

/// The inventory ConfigMap's name.
pub fn inventory_name(workspace: &str) -> String {
    format!("warren-inventory-{workspace}")
}

/// Identifies one applied object within the workspace's namespace.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub name: String,
}

impl ObjectRef {
    /// The API resource to address this object with; `None` for a kind Warren does not render.
    pub fn resource(&self) -> Option<ApiResource> {
        resource_of(&self.api_version, &self.kind)
    }

    /// Position in [`KINDS`], for applying in dependency order.
    fn rank(&self) -> usize {
        rank_of(&self.kind)
    }
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

/// The API resource of an allowed apiVersion/kind pair.
pub fn resource_of(api_version: &str, kind: &str) -> Option<ApiResource> {
    resource_in(&KINDS, api_version, kind)
}

/// The API resource of `api_version`/`kind` when `kinds` (apiVersion, kind, plural) lists it.
pub fn resource_in(
    kinds: &[(&str, &str, &str)],
    api_version: &str,
    kind: &str,
) -> Option<ApiResource> {
    let (_, _, plural) = kinds
        .iter()
        .find(|(v, k, _)| *v == api_version && *k == kind)?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Some(ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, kind),
        plural,
    ))
}

/// One object ready to be applied.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub reference: ObjectRef,
    pub resource: ApiResource,
    pub body: Value,
}

/// Checks every object before anything is sent, so a bad set changes nothing: an allowed
/// kind, a name, the workspace's namespace (filled in when absent), this agent's label
/// (added when absent, refused when it names another agent; also on the pod template so
/// that the pod watch sees the workspace's pods). Resource quantities are written the way the
/// API server stores them, so a re-apply is a no-op. Returns them in apply order.
pub fn prepare(
    workspace: &WorkspaceKey,
    agent_id: &str,
    objects: &[Value],
) -> Result<Vec<Prepared>, RuntimeError> {
    let refuse = |message: String| RuntimeError::Apply {
        workspace: workspace.to_string(),
        message,
    };
    let mut seen = BTreeSet::new();
    let mut prepared = Vec::with_capacity(objects.len());
    for (index, object) in objects.iter().enumerate() {
        let text = |field: &str| object.get(field).and_then(Value::as_str).unwrap_or("");
        let (api_version, kind) = (text("apiVersion"), text("kind"));
        if !object.is_object() {
            return Err(refuse(format!("object {index} is not a mapping")));
        }
        let Some(resource) = resource_of(api_version, kind) else {
            return Err(refuse(format!(
                "object {index}: kind {kind:?} (apiVersion {api_version:?}) is not one Warren renders"
            )));
        };
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        if name.is_empty() {
            return Err(refuse(format!(
                "object {index} ({kind}) has no metadata.name"
            )));
        }
        let mut body = object.clone();
        let metadata = body
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| refuse(format!("{kind} {name}: metadata is not a mapping")))?;
        place_in_namespace(metadata, workspace).map_err(|ns| {
            refuse(format!(
                "{kind} {name} is in namespace {ns:?}, not the workspace's {:?}",
                workspace.namespace
            ))
        })?;
        ensure_agent_label(metadata, agent_id)
            .map_err(|m| refuse(format!("{kind} {name}: {m}")))?;
        if kind == "Deployment" {
            if name != workspace.name {
                return Err(refuse(format!(
                    "Deployment {name} must be named after the workspace {:?}",
                    workspace.name
                )));
            }
            if let Some(template) = body
                .pointer_mut("/spec/template/metadata")
                .and_then(Value::as_object_mut)
            {
                ensure_agent_label(template, agent_id)
                    .map_err(|m| refuse(format!("Deployment {name} pod template: {m}")))?;
            }
        }
        super::quantity::canonicalise(kind, &mut body);
        drop_empty_data(kind, &mut body);
        let reference = ObjectRef {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
        };
        if reference.kind == "ConfigMap" && reference.name == inventory_name(&workspace.name) {
            return Err(refuse(format!(
                "ConfigMap {name} is reserved for Warren's inventory"
            )));
        }
        if !seen.insert((reference.kind.clone(), reference.name.clone())) {
            return Err(refuse(format!("{kind} {name} appears twice")));
        }
        prepared.push(Prepared {
            reference,
            resource,
            body,
        });
    }
    prepared.sort_by_key(|p| p.reference.rank());
    Ok(prepared)
}

/// Removes empty `data` maps of Secrets and ConfigMaps: the API server stores none, so an
/// applied empty map differs from the stored object and every re-apply would rewrite it.
fn drop_empty_data(kind: &str, body: &mut Value) {
    if kind != "Secret" && kind != "ConfigMap" {
        return;
    }
    if let Some(map) = body.as_object_mut() {
        for field in ["data", "binaryData", "stringData"] {
            let empty = map
                .get(field)
                .is_some_and(|v| v.as_object().is_some_and(|m| m.is_empty()) || v.is_null());
            if empty {
                map.remove(field);
            }
        }
    }
}

/// Whether a set is a partial one: nothing but Deployments (the only objects that change with
/// desired state), which a partial reconcile response may send alone. Warren always renders
/// other objects (service account, volumes) into a complete set.
pub fn is_partial(prepared: &[Prepared]) -> bool {
    prepared.iter().all(|p| p.reference.kind == "Deployment")
}

/// Puts an object into the workspace's namespace (when it names none); the namespace it
/// names otherwise, as the error.
pub fn place_in_namespace(
    metadata: &mut serde_json::Map<String, Value>,
    workspace: &WorkspaceKey,
) -> Result<(), String> {
    match metadata.get("namespace").and_then(Value::as_str) {
        None => {
            metadata.insert("namespace".into(), workspace.namespace.clone().into());
            Ok(())
        }
        Some(ns) if ns == workspace.namespace => Ok(()),
        Some(ns) => Err(ns.to_owned()),
    }
}

fn ensure_agent_label(
    metadata: &mut serde_json::Map<String, Value>,
    agent_id: &str,
) -> Result<(), String> {
    let labels = metadata
        .entry("labels")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(labels) = labels.as_object_mut() else {
        return Err("metadata.labels is not a mapping".into());
    };
    match labels.get(AGENT_ID_LABEL).and_then(Value::as_str) {
        None => {
            labels.insert(AGENT_ID_LABEL.into(), agent_id.into());
            Ok(())
        }
        Some(id) if id == agent_id => Ok(()),
        Some(other) => Err(format!(
            "labelled for agent {other:?}, not this agent {agent_id:?}"
        )),
    }
}

/// Reads the inventory ConfigMap's entries; an unreadable inventory counts as empty only
/// when its data key is missing, otherwise it is an error (pruning from a wrong set would
/// delete the wrong objects).
pub fn parse_inventory(data: Option<&str>) -> Result<BTreeSet<ObjectRef>, serde_json::Error> {
    match data {
        None => Ok(BTreeSet::new()),
        Some(text) => serde_json::from_str(text),
    }
}

/// The inventory ConfigMap for `entries`.
pub fn inventory_object(
    workspace: &WorkspaceKey,
    agent_id: &str,
    entries: &BTreeSet<ObjectRef>,
) -> Value {
    let text = serde_json::to_string(entries).unwrap_or_else(|_| "[]".into());
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": inventory_name(&workspace.name),
            "namespace": workspace.namespace,
            "labels": {
                AGENT_ID_LABEL: agent_id,
                WORKSPACE_NAME_LABEL: workspace.name,
            },
        },
        "data": { INVENTORY_KEY: text },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> WorkspaceKey {
        WorkspaceKey {
            name: "brave-otter-x1".into(),
            namespace: "warren-ws-brave-otter-x1".into(),
        }
    }

    #[test]
    fn refuses_unknown_kinds_naming_them() {
        let objs = [
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "x"}}),
        ];
        let err = prepare(&key(), "7", &objs).unwrap_err().to_string();
        assert!(err.contains("ClusterRole"), "{err}");
        let objs = [json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}})];
        assert!(prepare(&key(), "7", &objs)
            .unwrap_err()
            .to_string()
            .contains("Pod"));
    }

    #[test]
    fn fills_namespace_and_label_and_orders() {
        let objs = [
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "brave-otter-x1"},
                "spec": {"template": {"metadata": {"labels": {"a": "b"}}}}}),
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": "brave-otter-x1", "labels": {AGENT_ID_LABEL: "7"}}}),
        ];
        let p = prepare(&key(), "7", &objs).unwrap();
        assert_eq!(p[0].reference.kind, "ServiceAccount");
        assert_eq!(
            p[1].body["metadata"]["namespace"],
            "warren-ws-brave-otter-x1"
        );
        assert_eq!(
            p[1].body["spec"]["template"]["metadata"]["labels"][AGENT_ID_LABEL],
            "7"
        );
    }

    #[test]
    fn refuses_foreign_namespace_agent_and_duplicates() {
        let other_ns = [json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "kube-system"}})];
        assert!(prepare(&key(), "7", &other_ns)
            .unwrap_err()
            .to_string()
            .contains("kube-system"));
        let other_agent = [json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "labels": {AGENT_ID_LABEL: "8"}}})];
        assert!(prepare(&key(), "7", &other_agent)
            .unwrap_err()
            .to_string()
            .contains("\"8\""));
        let s = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}});
        assert!(prepare(&key(), "7", &[s.clone(), s])
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(prepare(&key(), "7", &[json!("x")]).is_err());
    }

    #[test]
    fn empty_secret_data_is_left_out() {
        let objs = [
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "type": "Opaque", "data": {}, "stringData": null}),
        ];
        let p = prepare(&key(), "7", &objs).unwrap();
        assert!(p[0].body.get("data").is_none());
        assert!(p[0].body.get("stringData").is_none());
        assert_eq!(p[0].body["type"], "Opaque");
    }

    #[test]
    fn keys_must_be_dns_labels() {
        assert!(check_key(&key()).is_ok());
        for (name, namespace) in [
            ("", "ns"),
            ("a", ""),
            ("A", "ns"),
            ("a", "-ns"),
            ("a/b", "ns"),
        ] {
            let k = WorkspaceKey {
                name: name.into(),
                namespace: namespace.into(),
            };
            assert!(check_key(&k).is_err(), "{k:?}");
        }
    }

    #[test]
    fn namespace_ownership_is_by_name() {
        assert!(owns_namespace(&key()));
        let shared = WorkspaceKey {
            name: "a".into(),
            namespace: "default".into(),
        };
        assert!(!owns_namespace(&shared));
    }

    #[test]
    fn inventory_round_trips() {
        let mut set = BTreeSet::new();
        set.insert(ObjectRef {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: "s".into(),
        });
        let obj = inventory_object(&key(), "7", &set);
        let text = obj["data"][INVENTORY_KEY].as_str();
        assert_eq!(parse_inventory(text).unwrap(), set);
        assert!(parse_inventory(Some("{")).is_err());
        assert!(parse_inventory(None).unwrap().is_empty());
    }
}
