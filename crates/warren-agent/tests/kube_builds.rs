//! A Kubernetes workspace whose images are built at its start, against a real kube-apiserver
//! (no kubelet) with Podman as the builder: while its build waits the workspace shows
//! starting and nothing exists in the cluster; a build that cannot be had shows as the
//! workspace's failure, which an apply of the same objects does not build again; a stop is
//! applied at once; a pod naming the build registry's workspace images is refused; and
//! without a build registry a workspace with builds is refused by name.
//!
//! The build contexts come from a stand-in for the relay (the seam is `BuildContexts`); the
//! whole path, with pushes and pulls, is `warren`'s `devcontainer_kube_e2e`.

use crate::common::engine_available;
use crate::kube_common;

use async_trait::async_trait;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;
use kube_common::fixtures::{key, unique, workspace_objects};
use kube_common::{cluster, eventually, observed};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use warren_agent::runtime::kubernetes::{
    BuildSettings, ImageBuilder, KubernetesOptions, KubernetesRuntime,
};
use warren_agent::runtime::{
    BuildContexts, FetchedContext, RuntimeError, WorkspaceKey, WorkspaceRuntime,
};
use warren_types::state::ActualState;
use warren_types::AgentId;

/// The build registry: nothing is pushed in these tests.
const REGISTRY: &str = "registry.invalid:5000/builds";

/// Refuses every context once `gate` lets it, counting the asks.
struct Refusing {
    gate: tokio::sync::Semaphore,
    fetches: AtomicUsize,
}

#[async_trait]
impl BuildContexts for Refusing {
    async fn fetch(
        &self,
        _workspace: &str,
        _image: &str,
        _feature: Option<&str>,
    ) -> Result<FetchedContext, String> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let _permit = self.gate.acquire().await.map_err(|e| e.to_string())?;
        Err("project \"shop\": repository unreachable".into())
    }
}

/// The workspace's objects with its container's image built at start.
fn building(key: &WorkspaceKey, agent: i64, replicas: i64) -> Vec<Value> {
    let mut objects = workspace_objects(key, agent, 7, replicas, false);
    let task = serde_json::json!([{"image": "localhost/shop/app:dev", "dockerfile": "Dockerfile"}]);
    for o in objects.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["template"]["metadata"]["annotations"]
            [warren_types::relay::IMAGE_BUILDS_ANNOTATION] = Value::String(task.to_string());
        o["spec"]["template"]["spec"]["containers"][0]["image"] =
            Value::String("localhost/shop/app:dev".into());
    }
    objects
}

fn agent_id() -> i64 {
    use std::sync::atomic::AtomicI64;
    static N: AtomicI64 = AtomicI64::new(1);
    i64::from(std::process::id()) * 1000 + 900 + N.fetch_add(1, Ordering::Relaxed)
}

#[tokio::test]
async fn a_build_shows_starting_then_its_failure_and_a_stop_is_applied_at_once() {
    let Some(cluster) = cluster() else {
        return;
    };
    if !engine_available() {
        return;
    }
    let client = cluster.client().await;
    let agent = agent_id();
    let state = tempfile::tempdir().expect("temp dir");
    let builder = ImageBuilder::connect(
        AgentId(agent),
        BuildSettings {
            engine: None,
            registry: REGISTRY.into(),
            push_secret: None,
            state_dir: state.path().to_path_buf(),
            plain_http_registries: vec![],
            outbound_allow: vec![],
        },
    )
    .await
    .expect("the builder's engine");
    let runtime =
        KubernetesRuntime::new(client.clone(), AgentId(agent), KubernetesOptions::default())
            .with_builder(builder);
    let contexts = Arc::new(Refusing {
        gate: tokio::sync::Semaphore::new(0),
        fetches: AtomicUsize::new(0),
    });
    runtime.use_build_contexts(contexts.clone());
    let ws = key(&unique("kbuild"));
    let objects = building(&ws, agent, 1);

    // The apply returns with the build waiting; the workspace shows starting, and the
    // cluster has no Deployment of it yet.
    runtime.apply(&ws, &objects).await.expect("apply");
    eventually(60, "the build asking for its context", || async {
        (contexts.fetches.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    let o = observed(&runtime, &ws)
        .await
        .expect("listed while building");
    assert_eq!(
        kube_common::derived_state(&o),
        ActualState::Starting,
        "{o:?}"
    );
    assert!(o.pod_failure.is_none());
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ws.namespace);
    assert!(deployments.get_opt(&ws.name).await.expect("get").is_none());
    // The same objects again (a full reconcile): the build goes on, not over.
    runtime.apply(&ws, &objects).await.expect("apply again");

    // The context cannot be had: the workspace's failure says why.
    contexts.gate.add_permits(100);
    let o = eventually(60, "the failure", || async {
        observed(&runtime, &ws)
            .await
            .filter(|o| o.pod_failure.is_some())
    })
    .await;
    assert_eq!(kube_common::derived_state(&o), ActualState::Failed);
    let failure = o.pod_failure.expect("failure");
    assert_eq!(failure.reason, "ImageBuildFailed");
    assert!(
        failure.message.contains("repository unreachable"),
        "{failure:?}"
    );
    // Applied again unchanged, it is not built again.
    runtime.apply(&ws, &objects).await.expect("apply again");
    let o = observed(&runtime, &ws).await.expect("listed");
    assert!(o.pod_failure.is_some());
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);

    // Stopped: applied at once, nothing built; the failure is gone with the build.
    runtime
        .apply(&ws, &building(&ws, agent, 0))
        .await
        .expect("stop");
    let d = eventually(30, "the stopped Deployment", || async {
        deployments.get_opt(&ws.name).await.ok().flatten()
    })
    .await;
    assert_eq!(d.spec.and_then(|s| s.replicas), Some(0));
    let o = eventually(30, "the stopped workspace listed", || async {
        observed(&runtime, &ws).await.filter(|o| {
            o.deployment
                .as_ref()
                .is_some_and(|d| d["spec"]["replicas"] == 0)
        })
    })
    .await;
    assert!(o.pod_failure.is_none(), "{o:?}");
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);

    // A pod naming the build registry's workspace images itself is refused.
    let mut thief = building(&ws, agent, 1);
    for o in thief.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = Value::String(format!(
            "{REGISTRY}/warren-ws/localhost/shop/app/other.1.k:sha-1"
        ));
    }
    match runtime.apply(&ws, &thief).await {
        Err(RuntimeError::Apply { message, .. }) => {
            assert!(
                message.contains("only the workspace it was built for"),
                "{message}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    delete(&runtime, &ws).await;

    // Without a build registry, a workspace with builds is refused by name.
    let plain =
        KubernetesRuntime::new(client.clone(), AgentId(agent), KubernetesOptions::default());
    let other = key(&unique("kbuild"));
    match plain.apply(&other, &building(&other, agent, 1)).await {
        Err(RuntimeError::Apply { message, .. }) => {
            assert!(message.contains("build registry"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn delete(runtime: &KubernetesRuntime, ws: &WorkspaceKey) {
    use warren_types::reconcile::TerminationProgress;
    eventually(120, "the workspace deleted", || async {
        matches!(
            runtime.delete(ws).await,
            Ok(TerminationProgress::Terminated)
        )
        .then_some(())
    })
    .await;
}
