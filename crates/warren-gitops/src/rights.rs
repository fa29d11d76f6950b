//! What a source may do to one object: its kinds, its mode, its namespace. The relay checks
//! objects before sending them (to report early) and the agent checks them again before
//! applying (the relay's word is not trusted alone); both call [`Rights::admit`].

use warren_types::gitops::{Policy, Source, SourceMode};

use crate::kinds::{known_cluster_scoped, split_api_version, KindSet};
use crate::manifests::Manifest;

/// A source's rights, with the admin policy's deny list folded in.
#[derive(Debug, Clone)]
pub struct Rights {
    mode: SourceMode,
    namespace: Option<String>,
    kinds: KindSet,
}

impl Rights {
    pub fn new(source: &Source, policy: &Policy) -> Rights {
        Rights {
            mode: if source.mode == SourceMode::Cluster && !policy.allow_cluster_mode {
                // A policy tightened after the source was configured holds it to a namespace.
                SourceMode::Namespaced
            } else {
                source.mode
            },
            namespace: source.namespace.clone(),
            kinds: KindSet::new(
                source.kinds.allow.as_deref(),
                &source.kinds.deny,
                &policy.deny,
            ),
        }
    }

    /// Whether the source may apply `m`, and in which namespace (`None`: cluster-scoped).
    /// `namespaced` is the kind's scope as the API server says; `None` when unknown (the
    /// relay), where built-in cluster-scoped kinds are recognised by name.
    pub fn admit(&self, m: &Manifest, namespaced: Option<bool>) -> Result<Option<String>, String> {
        let (group, _) = split_api_version(m.api_version());
        let namespaced = namespaced.unwrap_or(!known_cluster_scoped(group, m.kind()));
        // The mode's rule first: it is the more fundamental refusal.
        if self.mode == SourceMode::Namespaced && !namespaced {
            return Err(format!(
                "{} is cluster-scoped; a namespaced source may not manage it",
                m.kind()
            ));
        }
        self.kinds.permits(m.api_version(), m.kind())?;
        match self.mode {
            SourceMode::Namespaced => {
                // A team's repository: nothing of the node's, no label Warren's policies
                // trust, no Service intercepting other addresses (cluster-mode sources are
                // the admin's own, who may deploy Warren itself through them).
                let mut violations = warren_admission::reserved_labels(&m.object);
                let all_types: Vec<String> = warren_admission::SERVICE_TYPES
                    .iter()
                    .map(|t| t.to_string())
                    .collect();
                violations.extend(warren_admission::services(&m.object, &all_types));
                violations.extend(warren_admission::pod_security(
                    &m.object,
                    warren_admission::Level::Baseline,
                ));
                if !violations.is_empty() {
                    return Err(format!(
                        "refused: {} (a namespaced source's pods meet the baseline Pod Security Standard)",
                        warren_admission::describe(&violations)
                    ));
                }
                let Some(own) = self.namespace.as_deref() else {
                    return Err("the source has no namespace".into());
                };
                if !namespaced {
                    return Err(format!(
                        "{} is cluster-scoped; a namespaced source may not manage it",
                        m.kind()
                    ));
                }
                match m.namespace() {
                    Some(ns) if ns != own => Err(format!(
                        "namespace {ns:?} is outside the source's namespace {own:?}"
                    )),
                    _ => Ok(Some(own.to_owned())),
                }
            }
            SourceMode::Cluster if !namespaced => Ok(None),
            SourceMode::Cluster => Ok(Some(
                m.namespace()
                    .or(self.namespace.as_deref())
                    .unwrap_or("default")
                    .to_owned(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_namespaced_source_cannot_reach_the_node_or_forge_warrens_labels() {
        let r = Rights::new(&source("namespaced"), &Policy::default());
        let pod = manifest(serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"hostPID": true, "containers": [{"name": "c", "image": "x"}],
                "volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}));
        let e = r.admit(&pod, None).unwrap_err();
        assert!(
            e.contains("spec.hostPID") && e.contains("spec.volumes[root].hostPath"),
            "{e}"
        );
        let agent = manifest(
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d"}, "spec": {"template": {
                "metadata": {"labels": {"warren.dev/component": "agent"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        );
        let e = r.admit(&agent, None).unwrap_err();
        assert!(
            e.contains("spec.template.metadata.labels[warren.dev/component]"),
            "{e}"
        );
        let svc = manifest(serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s"}, "spec": {"externalIPs": ["1.2.3.4"]}}));
        assert!(r.admit(&svc, None).unwrap_err().contains("externalIPs"));
        // An ordinary app is fine.
        let app = manifest(
            serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "d"}}, "spec": {"template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
        );
        assert_eq!(r.admit(&app, None), Ok(Some("team-a".into())));
    }

    fn manifest(v: serde_json::Value) -> Manifest {
        Manifest {
            file: "f.yaml".into(),
            document: 1,
            object: v,
        }
    }

    fn source(mode: &str) -> Source {
        serde_json::from_value(json!({
            "name": "s", "repository": "r", "mode": mode, "namespace": "team-a",
            "kinds": {"allow": ["*/*"], "deny": ["v1/Secret"]}
        }))
        .unwrap()
    }

    #[test]
    fn namespaced_sources_stay_in_their_namespace() {
        let r = Rights::new(&source("namespaced"), &Policy::default());
        let cm = |ns: Option<&str>| {
            let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            manifest(o)
        };
        assert_eq!(r.admit(&cm(None), None), Ok(Some("team-a".into())));
        assert_eq!(
            r.admit(&cm(Some("team-a")), None),
            Ok(Some("team-a".into()))
        );
        let e = r.admit(&cm(Some("kube-system")), None).unwrap_err();
        assert!(e.contains("outside the source's namespace"), "{e}");
        let ns =
            manifest(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
        assert!(r.admit(&ns, None).unwrap_err().contains("cluster-scoped"));
        let crd_instance = manifest(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        );
        assert!(r
            .admit(&crd_instance, Some(false))
            .unwrap_err()
            .contains("cluster-scoped"));
        let secret =
            manifest(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}));
        assert!(r.admit(&secret, None).unwrap_err().contains("denied"));
    }

    #[test]
    fn cluster_sources_default_the_namespace_unless_the_policy_forbids_them() {
        let r = Rights::new(&source("cluster"), &Policy::default());
        let ns =
            manifest(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}));
        assert_eq!(r.admit(&ns, None), Ok(None));
        let cm = manifest(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "other"}}),
        );
        assert_eq!(r.admit(&cm, None), Ok(Some("other".into())));
        let strict = Policy {
            deny: vec!["rbac.authorization.k8s.io/*".into()],
            allow_cluster_mode: false,
        };
        let r = Rights::new(&source("cluster"), &strict);
        assert!(r.admit(&ns, None).unwrap_err().contains("cluster-scoped"));
        let role = manifest(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "r"}}),
        );
        assert!(r.admit(&role, None).unwrap_err().contains("denied"));
    }
}
