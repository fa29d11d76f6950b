//! GitOps on the real kube-apiserver (built by `.ci/setup-kubernetes.sh`): a source's objects
//! applied server-side in its namespace with its labels, a second commit changing, adding
//! and pruning objects, unchanged objects counted as such, rights enforced again by the agent
//! (cluster-scoped kinds and other namespaces refused for a namespaced source while the rest
//! applies), an object the source did not make neither taken over nor pruned, a hand edit
//! restored, and a cluster source bringing a CustomResourceDefinition (waited for until
//! established), a Namespace and an object in it, in dependency order whatever the files say.

use crate::kube_common;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::Client;
use kube_common::cluster;
use kube_common::fixtures::unique;
use serde_json::{json, Value};
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{GitopsSync, WorkspaceRuntime, GITOPS_SOURCE_LABEL};
use warren_gitops::Manifest;
use warren_types::gitops::{Policy, Source};
use warren_types::AgentId;

/// The start of a crash in the API server's log (Go prints `fatal error:` or `panic:` and
/// then every goroutine), else its last lines.
fn apiserver_crash(c: &kube_common::Cluster) -> String {
    let log = std::fs::read_to_string(c.dir.join("kube-apiserver.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    match lines
        .iter()
        .position(|l| l.starts_with("fatal error") || l.starts_with("panic:"))
    {
        Some(i) => lines[i.saturating_sub(5)..(i + 25).min(lines.len())].join("\n"),
        None => c.log_tail("kube-apiserver"),
    }
}

async fn setup() -> Option<(Client, KubernetesRuntime)> {
    let cluster = cluster()?;
    let client = cluster.client().await;
    let runtime = KubernetesRuntime::new(client.clone(), AgentId(7), KubernetesOptions::default());
    Some((client, runtime))
}

async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

fn manifests(objects: &[Value]) -> Vec<Manifest> {
    objects
        .iter()
        .enumerate()
        .map(|(i, o)| Manifest {
            file: format!("deploy/{i}.yaml"),
            document: 1,
            object: o.clone(),
        })
        .collect()
}

fn source(name: &str, v: Value) -> Source {
    let mut base = json!({"name": name, "repository": "r", "prune": true});
    for (k, val) in v.as_object().unwrap() {
        base[k] = val.clone();
    }
    serde_json::from_value(base).unwrap()
}

fn cm(name: &str, value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"value": value}})
}

async fn sync(
    runtime: &KubernetesRuntime,
    source: &Source,
    commit: &str,
    objects: &[Value],
) -> warren_agent::runtime::GitopsOutcome {
    let policy = Policy::default();
    let objects = manifests(objects);
    runtime
        .sync_gitops(&GitopsSync {
            agent: "7",
            source,
            policy: &policy,
            commit,
            objects: &objects,
            prune: source.prune,
        })
        .await
        .unwrap_or_else(|e| {
            panic!(
                "sync: {}\n{}",
                warren_types::error_chain(&e),
                cluster().map(apiserver_crash).unwrap_or_default()
            )
        })
}

#[tokio::test]
async fn a_namespaced_source_applies_changes_prunes_and_keeps_its_rights() {
    let Some((client, runtime)) = setup().await else {
        return;
    };
    let ns = unique("gitops-team");
    namespace(&client, &ns).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    // Someone else's ConfigMap: never taken over, never pruned.
    configmaps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "hand-made"}, "data": {"a": "b"}}))
                .unwrap(),
        )
        .await
        .unwrap();
    let src = source("web", json!({"namespace": ns}));
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "example.invalid/web:1",
                                                       "ports": [{"containerPort": 80}]}]}}}});
    let out = sync(
        &runtime,
        &src,
        "c1",
        &[cm("settings", "1"), deployment.clone()],
    )
    .await;
    assert_eq!(
        (out.applied, out.unchanged, out.pruned),
        (2, 0, 0),
        "{:?}",
        out.errors
    );
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    let settings = configmaps.get("settings").await.unwrap();
    let labels = settings.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get(GITOPS_SOURCE_LABEL).map(String::as_str),
        Some("web")
    );
    assert!(
        out.health
            .iter()
            .any(|h| h.object.contains("Deployment") && !h.ready),
        "{:?}",
        out.health
    );

    // The same commit again: nothing changes.
    let out = sync(
        &runtime,
        &src,
        "c1",
        &[cm("settings", "1"), deployment.clone()],
    )
    .await;
    assert_eq!((out.applied, out.unchanged), (0, 2), "{:?}", out.errors);

    // A hand edit is restored by the next sync.
    configmaps
        .patch(
            "settings",
            &PatchParams::apply("kubectl-by-hand").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"value": "edited"}})),
        )
        .await
        .unwrap();
    let out = sync(
        &runtime,
        &src,
        "c1",
        &[cm("settings", "1"), deployment.clone()],
    )
    .await;
    assert_eq!(out.applied, 1, "{:?}", out.errors);
    let settings = configmaps.get("settings").await.unwrap();
    assert_eq!(settings.data.unwrap()["value"], "1");

    // A new commit: one changed, one added, the Deployment deleted from Git → pruned.
    // Outside the source's rights: a Namespace, a ConfigMap of another namespace, and the
    // ConfigMap someone else made; those are errors, the rest applies.
    let mut elsewhere = cm("x", "y");
    elsewhere["metadata"]["namespace"] = json!("kube-system");
    let objects = [
        cm("settings", "2"),
        cm("added", "a"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "sneaky"}}),
        elsewhere,
        cm("hand-made", "mine now?"),
    ];
    let out = sync(&runtime, &src, "c2", &objects).await;
    let errors: Vec<String> = out
        .errors
        .iter()
        .map(|e| format!("{}: {}", e.object.as_deref().unwrap_or("-"), e.message))
        .collect();
    assert_eq!(errors.len(), 3, "{errors:#?}");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("Namespace is cluster-scoped")),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("outside the source's namespace")),
        "{errors:#?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("hand-made") && e.contains("not taken over")),
        "{errors:#?}"
    );
    assert_eq!((out.applied, out.pruned), (2, 1), "{errors:#?}");
    let deployments: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")),
    );
    assert!(
        deployments.get_opt("web").await.unwrap().is_none(),
        "pruned"
    );
    assert_eq!(
        configmaps.get("hand-made").await.unwrap().data.unwrap()["a"],
        "b"
    );
    assert!(Api::<Namespace>::all(client.clone())
        .get_opt("sneaky")
        .await
        .unwrap()
        .is_none());

    // Without prune, what leaves Git stays.
    let keep = source("web", json!({"namespace": ns, "prune": false}));
    let out = sync(&runtime, &keep, "c3", &[cm("settings", "2")]).await;
    assert_eq!(out.pruned, 0);
    assert!(configmaps.get_opt("added").await.unwrap().is_some());
}

#[tokio::test]
async fn a_cluster_source_brings_a_crd_a_namespace_and_its_objects_in_order() {
    let Some((client, runtime)) = setup().await else {
        return;
    };
    let group = format!("{}.example.com", unique("g"));
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object",
                                   "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    let ns = unique("gitops-cluster");
    let mut in_ns = cm("settings", "1");
    in_ns["metadata"]["namespace"] = json!(ns);
    let widget = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                        "metadata": {"name": "first", "namespace": ns},
                        "spec": {"size": 3}});
    // Listed in the wrong order on purpose: the custom object, an object, their namespace,
    // then the CRD the custom object needs.
    let objects = [
        widget,
        in_ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        crd,
    ];
    let src = source(
        "platform",
        json!({"mode": "cluster", "namespace": "default", "kinds": {"allow": ["*/*"]}}),
    );
    let out = sync(&runtime, &src, "c1", &objects).await;
    assert!(out.errors.is_empty(), "{:?}", out.errors);
    assert_eq!(out.applied, 4);
    let crds: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "customresourcedefinitions",
        ),
    );
    let established = crds.get(&format!("widgets.{group}")).await.unwrap().data["status"]
        ["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "the sync waited for the CRD to be established");
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    assert!(configmaps.get_opt("settings").await.unwrap().is_some());
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(&group, "v1", "Widget"),
            "widgets",
        ),
    );
    let w = widgets.get("first").await.unwrap();
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(
        w.metadata
            .labels
            .unwrap_or_default()
            .get("warren.dev/gitops-source")
            .map(String::as_str),
        Some("platform")
    );

    // Everything leaves Git: pruned, dependents first.
    let out = sync(&runtime, &src, "c2", &[]).await;
    assert_eq!(out.pruned, 4, "{:?}", out.errors);
}
