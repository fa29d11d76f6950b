//! What a stopped prebuild keeps on a cluster, reported on its Deployment as the
//! `warren.dev/stored-bytes` annotation: the capacity of its bound claims, which the storage
//! behind them sets aside whatever the files take (a cluster tells no more without its
//! metrics). Asked of the API once per version of the stopped Deployment, not at every look.

use super::*;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::ListParams;
use std::collections::HashMap;
use warren_types::prebuild::{PREBUILD_LABEL, STORED_BYTES_ANNOTATION};

/// The measure of each stopped prebuild, by namespace: the Deployment's resource version it
/// was taken at, and the bytes.
pub(super) type Measured = Mutex<HashMap<String, (String, u64)>>;

fn measured(m: &Measured) -> std::sync::MutexGuard<'_, HashMap<String, (String, u64)>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether `deployment` is a prebuild's own, scaled to none.
fn stopped_prebuild(deployment: &serde_json::Value) -> bool {
    let labels = deployment.pointer("/metadata/labels");
    let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(|v| v.as_str());
    label(PREBUILD_LABEL) == Some("true")
        && label(crate::runtime::GITOPS_SOURCE_LABEL).is_none()
        && deployment
            .pointer("/spec/replicas")
            .and_then(|r| r.as_i64())
            == Some(0)
}

/// The capacity of the claims of `claims` that are bound; `None` when one cannot be read.
fn bound_capacity(claims: &[PersistentVolumeClaim]) -> Option<u64> {
    let mut total = 0u64;
    for claim in claims {
        let Some(status) = &claim.status else {
            continue;
        };
        if status.phase.as_deref() != Some("Bound") {
            continue;
        }
        let storage = status.capacity.as_ref()?.get("storage")?;
        let bytes = warren_types::quantity::parse_memory_bytes(&storage.0).ok()?;
        total = total.saturating_add(bytes);
    }
    Some(total)
}

impl KubernetesRuntime {
    /// Sets the annotation on each stopped prebuild of `observed`, and takes it off every
    /// other Deployment: only the agent's measure is reported, never one the applied
    /// objects claim.
    pub(super) async fn report_stored_bytes(&self, observed: &mut [ObservedWorkspace]) {
        let mut seen = std::collections::HashSet::new();
        for o in observed.iter_mut() {
            let Some(deployment) = o.deployment.as_mut() else {
                continue;
            };
            if let Some(a) = deployment
                .pointer_mut("/metadata/annotations")
                .and_then(|a| a.as_object_mut())
            {
                a.remove(STORED_BYTES_ANNOTATION);
            }
            if !stopped_prebuild(deployment) {
                continue;
            }
            let namespace = o.key.namespace.clone();
            seen.insert(namespace.clone());
            let version = deployment
                .pointer("/metadata/resourceVersion")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned();
            let known = measured(&self.measured)
                .get(&namespace)
                .filter(|(v, _)| *v == version)
                .map(|(_, b)| *b);
            let bytes = match known {
                Some(b) => b,
                None => {
                    let api =
                        Api::<PersistentVolumeClaim>::namespaced(self.client.clone(), &namespace);
                    let claims = match api.list(&ListParams::default()).await {
                        Ok(list) => list.items,
                        Err(e) => {
                            tracing::debug!(namespace = %namespace, error = %e, "listing a stopped prebuild's claims failed: its space is not reported");
                            continue;
                        }
                    };
                    let Some(b) = bound_capacity(&claims) else {
                        continue;
                    };
                    measured(&self.measured).insert(namespace.clone(), (version, b));
                    b
                }
            };
            let metadata = &mut deployment["metadata"];
            if !metadata["annotations"].is_object() {
                metadata["annotations"] = serde_json::json!({});
            }
            metadata["annotations"][STORED_BYTES_ANNOTATION] = serde_json::json!(bytes.to_string());
        }
        measured(&self.measured).retain(|ns, _| seen.contains(ns));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim(phase: &str, capacity: Option<&str>) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim::default();
        let mut status = k8s_openapi::api::core::v1::PersistentVolumeClaimStatus {
            phase: Some(phase.into()),
            ..Default::default()
        };
        status.capacity = capacity
            .map(|q| std::collections::BTreeMap::from([("storage".into(), Quantity(q.into()))]));
        c.status = Some(status);
        c
    }

    #[test]
    fn the_bound_claims_capacity_is_what_a_prebuild_keeps() {
        assert_eq!(
            bound_capacity(&[claim("Bound", Some("1Gi")), claim("Bound", Some("512Mi"))]),
            Some(1536 << 20)
        );
        assert_eq!(bound_capacity(&[claim("Pending", None)]), Some(0));
        assert_eq!(bound_capacity(&[claim("Bound", None)]), None);
        assert_eq!(bound_capacity(&[claim("Bound", Some("lots"))]), None);
    }

    #[test]
    fn only_a_stopped_prebuild_is_measured() {
        let d = |labels: serde_json::Value, replicas: i64| serde_json::json!({"metadata": {"labels": labels}, "spec": {"replicas": replicas}});
        assert!(stopped_prebuild(&d(
            serde_json::json!({PREBUILD_LABEL: "true"}),
            0
        )));
        assert!(!stopped_prebuild(&d(
            serde_json::json!({PREBUILD_LABEL: "true"}),
            1
        )));
        assert!(!stopped_prebuild(&d(serde_json::json!({}), 0)));
    }
}
