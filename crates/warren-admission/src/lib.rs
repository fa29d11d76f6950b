//! What the agent lets a tenant put into a cluster: objects a devfile `kubernetes` component or
//! a namespaced GitOps source asks for are applied with the agent's own, cluster-wide rights,
//! so the agent judges them first, and refuses with the field that broke a rule.
//!
//! Three rules, each a function over one object as JSON:
//! - [`pod_security`]: every pod an object makes (a Pod, a workload's template) meets
//!   Kubernetes' Pod Security Standards at a [`Level`] — `restricted` for tenants' objects. The
//!   namespaces Warren owns are also labelled for the API server's own PodSecurity admission,
//!   which is the backstop for kinds the agent cannot see into.
//! - [`services`]: a Service is of a type the admin allowed (`ClusterIP` by default: `NodePort`,
//!   `LoadBalancer` and `ExternalName` reach past the proxy), and never has `externalIPs`
//!   (CVE-2020-8554: any user who can set them intercepts traffic to those addresses).
//! - [`reserved_labels`]: no label or annotation of Warren's own `warren.dev` domain, which
//!   Warren's NetworkPolicies and inventories trust.
//! - [`claims`]: no claim for a volume chosen by name (`volumeName` binds any available
//!   PersistentVolume — a node's local disk, another tenant's released volume) or copied from
//!   another namespace.

pub mod pod_security;

pub use pod_security::{pod_security, Level, BASELINE_CAPABILITIES};

use serde_json::Value;
use std::fmt;

/// One broken rule: the field (a path from the object's root) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: String,
    pub problem: String,
}

impl Violation {
    pub(crate) fn new(field: impl Into<String>, problem: impl Into<String>) -> Violation {
        Violation {
            field: field.into(),
            problem: problem.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// The Service types Warren allows unless an admin says otherwise: reached only inside the
/// cluster, through the agent and the proxy.
pub const DEFAULT_SERVICE_TYPES: &[&str] = &["ClusterIP"];
/// Every Service type Kubernetes knows.
pub const SERVICE_TYPES: &[&str] = &["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];

/// A Service's type (`ClusterIP` when it names none) must be in `allowed`, and it must have no
/// `externalIPs`; other kinds pass.
pub fn services(object: &Value, allowed: &[String]) -> Vec<Violation> {
    if object.get("kind").and_then(Value::as_str) != Some("Service") {
        return vec![];
    }
    let mut found = vec![];
    let kind = object
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP");
    if !allowed.iter().any(|a| a == kind) {
        found.push(Violation::new(
            "spec.type",
            format!(
                "Service type {kind} is not allowed on this agent (allowed: {})",
                allowed.join(", ")
            ),
        ));
    }
    if object
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|ips| !ips.is_empty())
    {
        found.push(Violation::new(
            "spec.externalIPs",
            "external IPs are never allowed (whoever sets them intercepts traffic to those addresses)",
        ));
    }
    found
}

/// The domain of Warren's own labels and annotations.
pub const RESERVED_DOMAIN: &str = "warren.dev";

/// Whether `key` (a label or annotation key) is in Warren's domain: `warren.dev/…` or
/// `<anything>.warren.dev/…`.
pub fn is_reserved_key(key: &str) -> bool {
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    let prefix = prefix.to_ascii_lowercase();
    prefix == RESERVED_DOMAIN || prefix.ends_with(".warren.dev")
}

/// Labels and annotations in Warren's domain, on the object and on every pod template in it.
pub fn reserved_labels(object: &Value) -> Vec<Violation> {
    let mut found = vec![];
    let mut check = |path: &str, meta: Option<&Value>| {
        for field in ["labels", "annotations"] {
            let keys = meta
                .and_then(|m| m.get(field))
                .and_then(Value::as_object)
                .into_iter()
                .flat_map(|m| m.keys());
            for key in keys.filter(|k| is_reserved_key(k)) {
                found.push(Violation::new(
                    format!("{path}.{field}[{key}]"),
                    format!("keys of the {RESERVED_DOMAIN} domain are set only by Warren"),
                ));
            }
        }
    };
    check("metadata", object.get("metadata"));
    for (path, template) in pod_security::templates(object) {
        if path != "spec" {
            let meta_path = path.strip_suffix(".spec").unwrap_or(&path).to_owned() + ".metadata";
            check(&meta_path, template.get("metadata"));
        }
    }
    found
}

/// Claims that choose their volume: a PersistentVolumeClaim's, a StatefulSet's claim
/// templates', a pod's ephemeral volumes'.
pub fn claims(object: &Value) -> Vec<Violation> {
    let mut specs: Vec<(String, &Value)> = vec![];
    if object.get("kind").and_then(Value::as_str) == Some("PersistentVolumeClaim") {
        if let Some(spec) = object.get("spec") {
            specs.push(("spec".into(), spec));
        }
    }
    for (i, t) in object
        .pointer("/spec/volumeClaimTemplates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(spec) = t.get("spec") {
            specs.push((format!("spec.volumeClaimTemplates[{i}].spec"), spec));
        }
    }
    for (path, template) in pod_security::templates(object) {
        let volumes = template
            .pointer("/spec/volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for v in volumes {
            let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
            if let Some(spec) = v.pointer("/ephemeral/volumeClaimTemplate/spec") {
                specs.push((
                    format!("{path}.volumes[{name}].ephemeral.volumeClaimTemplate.spec"),
                    spec,
                ));
            }
        }
    }
    let mut found = vec![];
    for (path, spec) in specs {
        if spec
            .get("volumeName")
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
        {
            found.push(Violation::new(
                format!("{path}.volumeName"),
                "binding a PersistentVolume chosen by name is not allowed (the cluster provisions one)",
            ));
        }
        if spec
            .pointer("/dataSourceRef/namespace")
            .is_some_and(|v| !v.is_null() && v.as_str() != Some(""))
        {
            found.push(Violation::new(
                format!("{path}.dataSourceRef.namespace"),
                "copying a volume from another namespace is not allowed",
            ));
        }
    }
    found
}

/// The Secrets the pods of `object` read: volumes (projected ones too), `env` references and
/// `envFrom`. The kubelet hands a pod any Secret of its namespace it names, whoever may read
/// it through the API; the caller decides which names a tenant may use.
pub fn secret_references(object: &Value) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut add = |v: Option<&Value>| {
        if let Some(n) = v.and_then(Value::as_str).filter(|n| !n.is_empty()) {
            names.insert(n.to_owned());
        }
    };
    let list = |v: &Value, key: &str| -> Vec<Value> {
        v.get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    for (_, template) in pod_security::templates(object) {
        let spec = template.get("spec").cloned().unwrap_or(Value::Null);
        for v in list(&spec, "volumes") {
            add(v.pointer("/secret/secretName"));
            for source in v
                .pointer("/projected/sources")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                add(source.pointer("/secret/name"));
            }
        }
        for key in ["initContainers", "containers", "ephemeralContainers"] {
            for c in list(&spec, key) {
                for e in list(&c, "env") {
                    add(e.pointer("/valueFrom/secretKeyRef/name"));
                }
                for e in list(&c, "envFrom") {
                    add(e.pointer("/secretRef/name"));
                }
            }
        }
    }
    names
}

/// Every rule above for a tenant's object: restricted pods, allowed Services, no reserved keys.
pub fn tenant_object(object: &Value, service_types: &[String]) -> Vec<Violation> {
    let mut found = reserved_labels(object);
    found.extend(services(object, service_types));
    found.extend(claims(object));
    found.extend(pod_security(object, Level::Restricted));
    found
}

/// `violations` as one sentence part: the first few, and how many more.
pub fn describe(violations: &[Violation]) -> String {
    const SHOWN: usize = 5;
    let mut text = violations
        .iter()
        .take(SHOWN)
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if violations.len() > SHOWN {
        text.push_str(&format!("; and {} more", violations.len() - SHOWN));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn types(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn only_allowed_service_types_pass_and_external_ips_never() {
        let svc = |spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": spec});
        let cluster = types(DEFAULT_SERVICE_TYPES);
        assert!(services(&svc(json!({"ports": [{"port": 80}]})), &cluster).is_empty());
        assert!(services(&svc(json!({"type": "ClusterIP"})), &cluster).is_empty());
        let node = services(&svc(json!({"type": "NodePort"})), &cluster);
        assert_eq!(node.len(), 1);
        assert_eq!(node[0].field, "spec.type");
        assert!(node[0].problem.contains("NodePort"), "{}", node[0]);
        assert_eq!(
            services(&svc(json!({"type": "LoadBalancer"})), &cluster).len(),
            1
        );
        assert_eq!(
            services(&svc(json!({"type": "ExternalName"})), &cluster).len(),
            1
        );
        let allowed = types(&["ClusterIP", "NodePort"]);
        assert!(services(&svc(json!({"type": "NodePort"})), &allowed).is_empty());
        let ext = services(
            &svc(json!({"externalIPs": ["8.8.8.8"]})),
            &types(SERVICE_TYPES),
        );
        assert_eq!(ext.len(), 1);
        assert_eq!(ext[0].field, "spec.externalIPs");
        // Other kinds are not Services.
        assert!(services(
            &json!({"kind": "ConfigMap", "spec": {"type": "NodePort"}}),
            &cluster
        )
        .is_empty());
    }

    #[test]
    fn warrens_label_domain_is_refused_on_objects_and_templates() {
        assert!(is_reserved_key("warren.dev/component"));
        assert!(is_reserved_key("Agent.Warren.Dev/x"));
        assert!(!is_reserved_key("notwarren.dev/x"));
        assert!(!is_reserved_key("warren.dev"));
        assert!(!is_reserved_key("app.kubernetes.io/name"));
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "labels": {"app": "x", "warren.dev/component": "agent"}},
            "spec": {"template": {"metadata": {"labels": {"warren.dev/component": "agent"},
                "annotations": {"x.warren.dev/y": "1"}}, "spec": {"containers": []}}}});
        let found: Vec<String> = reserved_labels(&d)
            .iter()
            .map(|v| v.field.clone())
            .collect();
        assert_eq!(
            found,
            [
                "metadata.labels[warren.dev/component]",
                "spec.template.metadata.labels[warren.dev/component]",
                "spec.template.metadata.annotations[x.warren.dev/y]",
            ]
        );
        let cron = json!({"kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"jobTemplate": {"spec": {"template": {"metadata": {"labels": {"warren.dev/agent-id": "1"}}, "spec": {}}}}}});
        assert_eq!(
            reserved_labels(&cron)[0].field,
            "spec.jobTemplate.spec.template.metadata.labels[warren.dev/agent-id]"
        );
    }

    #[test]
    fn every_way_a_pod_reads_a_secret_is_found() {
        let d = json!({"kind": "Deployment", "spec": {"template": {"spec": {
            "volumes": [{"name": "a", "secret": {"secretName": "vol"}},
                {"name": "b", "projected": {"sources": [{"secret": {"name": "projected"}}, {"configMap": {"name": "cm"}}]}}],
            "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "env-from"}}]}],
            "containers": [{"name": "c", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "key-ref", "key": "k"}}},
                {"name": "Y", "value": "plain"}]}]}}}});
        let names: Vec<String> = secret_references(&d).into_iter().collect();
        assert_eq!(names, ["env-from", "key-ref", "projected", "vol"]);
        assert!(
            secret_references(&json!({"kind": "Secret", "metadata": {"name": "s"}})).is_empty()
        );
    }

    #[test]
    fn claims_never_choose_their_volume() {
        let pvc = json!({"kind": "PersistentVolumeClaim", "metadata": {"name": "c"},
            "spec": {"volumeName": "node-local-disk", "dataSourceRef": {"kind": "PersistentVolumeClaim", "name": "x", "namespace": "other"}}});
        let fields: Vec<String> = claims(&pvc).into_iter().map(|v| v.field).collect();
        assert_eq!(fields, ["spec.volumeName", "spec.dataSourceRef.namespace"]);
        let sts = json!({"kind": "StatefulSet", "spec": {
            "volumeClaimTemplates": [{"spec": {"volumeName": "pv-1"}}],
            "template": {"spec": {"containers": [], "volumes": [{"name": "scratch",
                "ephemeral": {"volumeClaimTemplate": {"spec": {"volumeName": "pv-2"}}}}]}}}});
        let fields: Vec<String> = claims(&sts).into_iter().map(|v| v.field).collect();
        assert_eq!(
            fields,
            [
                "spec.volumeClaimTemplates[0].spec.volumeName",
                "spec.template.spec.volumes[scratch].ephemeral.volumeClaimTemplate.spec.volumeName"
            ]
        );
        let plain = json!({"kind": "PersistentVolumeClaim", "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
        assert!(claims(&plain).is_empty());
    }

    #[test]
    fn descriptions_name_the_first_few() {
        let v: Vec<Violation> = (0..7)
            .map(|i| Violation::new(format!("f{i}"), "bad"))
            .collect();
        assert_eq!(
            describe(&v),
            "f0: bad; f1: bad; f2: bad; f3: bad; f4: bad; and 2 more"
        );
    }
}
