//! Realistic workspace objects mirroring desired-config.md's table (the renderer lives on
//! another branch; these follow the same names, labels and security settings).

use serde_json::{json, Value};
use warren_agent::runtime::{WorkspaceKey, AGENT_ID_LABEL, WORKSPACE_ID_LABEL};

/// One workspace's key in its own namespace.
pub fn key(name: &str) -> WorkspaceKey {
    WorkspaceKey {
        name: name.into(),
        namespace: format!("warren-ws-{name}"),
    }
}

/// A unique-enough name per test (tests share one cluster).
pub fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let pid = std::process::id() % 10_000;
    format!("{prefix}-{pid}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Every object of a workspace; `quota` adds the ResourceQuota (only for dedicated namespaces).
pub fn workspace_objects(
    key: &WorkspaceKey,
    agent: i64,
    workspace_id: i64,
    replicas: i64,
    quota: bool,
) -> Vec<Value> {
    let name = &key.name;
    let ns = &key.namespace;
    let labels = json!({
        AGENT_ID_LABEL: agent.to_string(),
        WORKSPACE_ID_LABEL: workspace_id.to_string(),
        "team": "platform",
    });
    let annotations = json!({
        "warren.dev/host-template": format!("{{port}}-{name}.ws.localhost"),
        WORKSPACE_ID_LABEL: workspace_id.to_string(),
    });
    let meta = |object_name: String| json!({"name": object_name, "namespace": ns, "labels": labels, "annotations": annotations});
    let security = json!({
        "runAsNonRoot": true, "runAsUser": 5001, "runAsGroup": 0,
        "allowPrivilegeEscalation": false, "privileged": false,
        "capabilities": {"drop": ["ALL"]},
    });
    let mut objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(name.clone()),
        "spec": {
            "replicas": replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {WORKSPACE_ID_LABEL: workspace_id.to_string()}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "serviceAccountName": name,
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 5001, "fsGroup": 0,
                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "initContainers": [{
                        "name": "warren-prestart", "image": "registry.local/tools:1",
                        "command": ["/bin/sh", "/warren/scripts/prestart.sh"],
                        // As the renderer gives its init containers: a namespace with a quota
                        // refuses a pod any of whose containers names no requests and limits
                        // (once the API server's quota cache holds the quota; a race that
                        // hid this until more tests ran beside these).
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "1000m", "memory": "256Mi"},
                        },
                        "securityContext": security,
                        "volumeMounts": [{"name": "warren-scripts", "mountPath": "/warren/scripts"}],
                    }],
                    "containers": [{
                        "name": "main", "image": "registry.local/devbox:1",
                        "command": ["/bin/sh", "/warren/scripts/start.sh"],
                        "ports": [{"name": "http-8080", "containerPort": 8080, "protocol": "TCP"}],
                        "envFrom": [{"secretRef": {"name": format!("{name}-env")}}],
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "256Mi"},
                            // Written as the renderer writes them, not as the API server
                            // stores them ("1", "1Gi"): a re-apply must still be a no-op.
                            "limits": {"cpu": "1000m", "memory": "1024Mi"},
                        },
                        "securityContext": security,
                        "volumeMounts": [
                            {"name": "warren-data", "mountPath": "/projects"},
                            {"name": "warren-files", "mountPath": "/warren/files", "readOnly": true},
                            {"name": "warren-scripts", "mountPath": "/warren/scripts"},
                        ],
                    }],
                    "volumes": [
                        {"name": "warren-data", "persistentVolumeClaim": {"claimName": format!("{name}-warren-data")}},
                        {"name": "warren-files", "secret": {"secretName": format!("{name}-files")}},
                        {"name": "warren-scripts", "configMap": {"name": format!("{name}-scripts")}},
                    ],
                },
            },
        }}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": meta(name.clone()),
            "spec": {"selector": {WORKSPACE_ID_LABEL: workspace_id.to_string()},
                "ports": [{"name": "http-8080", "port": 8080, "targetPort": 8080, "protocol": "TCP"}]}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(format!("{name}-warren-data")),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(name.clone()),
            "automountServiceAccountToken": false,
            "imagePullSecrets": [{"name": "registry-credentials"}]}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(format!("{name}-env")),
            "type": "Opaque", "data": {"GIT_AUTHOR_NAME": "RGV2", "EDITOR": "dmlt"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": meta(format!("{name}-files")),
            // No file variables: the renderer writes an empty map.
            "type": "Opaque", "data": {}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(format!("{name}-scripts")),
            "data": {"start.sh": "#!/bin/sh\nexec sleep infinity\n", "prestart.sh": "#!/bin/sh\ntrue\n"}}),
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(name.clone()),
        "spec": {
            "podSelector": {"matchLabels": {WORKSPACE_ID_LABEL: workspace_id.to_string()}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [{"namespaceSelector": {},
                "podSelector": {"matchLabels": {"warren.dev/component": "agent"}}}]}],
            "egress": [
                {"to": [{"ipBlock": {"cidr": "0.0.0.0/0",
                    "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]}}]},
                {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
            ],
        }}),
    ];
    if quota {
        objects.push(json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta(name.clone()),
            "spec": {"hard": {"limits.cpu": "2000m", "limits.memory": "4Gi", "requests.cpu": "1", "requests.memory": "2048Mi"}}}));
    }
    objects
}
