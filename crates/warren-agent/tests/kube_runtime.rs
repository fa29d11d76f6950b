//! The Kubernetes runtime against a real kube-apiserver and kube-controller-manager (built by
//! `.ci/setup-kubernetes.sh`). There is no kubelet, so where a pod must "run" the test patches
//! the Pod's status subresource, and the real controllers move the ReplicaSet and Deployment:
//! these cover what a node does not change (apply, prune, inventories, shared namespaces,
//! API outages) and states a node rarely shows on demand. `kube_node.rs` runs pods for real.

use crate::kube_common;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use kube_common::fixtures::{key, unique, workspace_objects};
use kube_common::{cluster, eventually, observed};
use serde_json::json;
use std::collections::BTreeMap;
use warren_agent::runtime::kubernetes::{
    inventory_name, ComponentPolicy, KubernetesOptions, KubernetesRuntime,
};
use warren_agent::runtime::{
    ObservedWorkspace, RuntimeError, WorkspaceKey, WorkspaceRuntime, AGENT_ID_LABEL,
};
use warren_types::lifecycle::derive_actual_state;
use warren_types::reconcile::{TerminationProgress, WorkspaceAgentInfo};
use warren_types::state::ActualState;
use warren_types::AgentId;

/// A distinct agent id per test: the tests share one cluster and must not see each other.
fn agent_id() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static N: AtomicI64 = AtomicI64::new(1);
    i64::from(std::process::id()) * 1000 + N.fetch_add(1, Ordering::Relaxed)
}

async fn setup() -> Option<(Client, i64, KubernetesRuntime)> {
    let cluster = cluster()?;
    let client = cluster.client().await;
    let agent = agent_id();
    let runtime =
        KubernetesRuntime::new(client.clone(), AgentId(agent), KubernetesOptions::default());
    Some((client, agent, runtime))
}

fn derived(o: &ObservedWorkspace) -> ActualState {
    kube_common::derived_state(o)
}

/// Adds (or removes) a test finalizer on a ConfigMap, so its deletion waits for the test.
async fn hold(client: &Client, namespace: &str, config_map: &str, on: bool) {
    let finalizers: Vec<&str> = if on {
        vec!["warren.dev/test-hold"]
    } else {
        vec![]
    };
    Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .patch(
            config_map,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": finalizers}})),
        )
        .await
        .expect("patching finalizers");
}

/// Waits until `list()` shows the workspace in `state`.
async fn wait_state(
    runtime: &KubernetesRuntime,
    key: &WorkspaceKey,
    state: ActualState,
) -> ObservedWorkspace {
    eventually(60, &format!("{key} to be {state:?}"), || async {
        observed(runtime, key).await.filter(|o| derived(o) == state)
    })
    .await
}

async fn the_pod(client: &Client, key: &WorkspaceKey) -> Pod {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let list = pods.list(&ListParams::default()).await.ok();
        let found = list
            .into_iter()
            .flat_map(|l| l.items)
            .find(|p| p.metadata.deletion_timestamp.is_none());
        if let Some(p) = found {
            return p;
        }
        if tokio::time::Instant::now() > deadline {
            // What the controllers said instead (a refused pod, a quota not yet counted).
            let events: Api<k8s_openapi::api::core::v1::Event> =
                Api::namespaced(client.clone(), &key.namespace);
            let said: Vec<String> = events
                .list(&ListParams::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.reason.unwrap_or_default(),
                        e.message.unwrap_or_default()
                    )
                })
                .collect();
            panic!("timed out after 60s waiting for the controllers to create the workspace's pod; events: {said:#?}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Plays the kubelet: the pod runs (with `ip`) and is ready.
async fn mark_running(client: &Client, key: &WorkspaceKey, pod: &str, ip: &str) {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let condition = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now});
    let status = json!({"status": {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [condition("PodScheduled"), condition("Initialized"),
                       condition("ContainersReady"), condition("Ready")],
        "initContainerStatuses": [{"name": "warren-prestart", "ready": true, "restartCount": 0,
            "image": "registry.local/tools:1", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        "containerStatuses": [{"name": "main", "ready": true, "started": true, "restartCount": 0,
            "image": "registry.local/devbox:1", "imageID": "",
            "state": {"running": {"startedAt": now}}}],
    }});
    Api::<Pod>::namespaced(client.clone(), &key.namespace)
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patching pod status to running");
}

async fn mark_crash_loop(client: &Client, key: &WorkspaceKey, pod: &str) {
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let status = json!({"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now,
                        "reason": "ContainersNotReady"}],
        "containerStatuses": [{"name": "main", "ready": false, "restartCount": 4,
            "image": "registry.local/devbox:1", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 1m20s restarting failed container=main"}}}],
    }});
    Api::<Pod>::namespaced(client.clone(), &key.namespace)
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("patching pod status to crash loop");
}

/// Per object Warren applied in the namespace (by kind/name): its resourceVersion and the
/// time of Warren's last apply as the API server recorded it in `managedFields`.
async fn versions(client: &Client, key: &WorkspaceKey) -> BTreeMap<String, (String, String)> {
    let mut out = BTreeMap::new();
    for (api_version, kind, plural) in warren_agent::runtime::kubernetes::KINDS {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(group, version, kind),
            plural,
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &key.namespace, &ar);
        for o in api.list(&ListParams::default()).await.expect("list").items {
            let applied = o
                .managed_fields()
                .iter()
                .find(|m| m.manager.as_deref() == Some("warren-agent"))
                .and_then(|m| m.time.as_ref())
                .map(|t| t.0.to_rfc3339());
            if let Some(applied) = applied {
                let version = o.resource_version().unwrap_or_default();
                out.insert(format!("{kind}/{}", o.name_any()), (version, applied));
            }
        }
    }
    out
}

#[tokio::test]
async fn apply_creates_everything_reapply_changes_nothing_and_prune_removes() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let key = key(&unique("apply"));
    let objects = workspace_objects(&key, agent, 11, 1, true);
    runtime.apply(&key, &objects).await.expect("apply");

    let ns = Api::<Namespace>::all(client.clone())
        .get(&key.namespace)
        .await
        .expect("namespace");
    assert_eq!(ns.labels().get(AGENT_ID_LABEL), Some(&agent.to_string()));

    // The controllers are done with the Deployment (its status seen and a pod created), so
    // the resourceVersions below move only if the agent writes.
    the_pod(&client, &key).await;
    let first = versions(&client, &key).await;
    let expected: Vec<&str> = vec![
        "ConfigMap/",
        "Deployment/",
        "NetworkPolicy/",
        "PersistentVolumeClaim/",
        "ResourceQuota/",
        "Secret/",
        "Service/",
        "ServiceAccount/",
    ];
    for kind in expected {
        assert!(
            first.keys().any(|k| k.starts_with(kind)),
            "{kind} missing from {first:?}"
        );
    }
    // Eight rendered objects + the inventory, all with the one field manager.
    assert_eq!(first.len(), 10, "{first:?}");
    let deployment = Api::<Deployment>::namespaced(client.clone(), &key.namespace)
        .get(&key.name)
        .await
        .expect("deployment");
    let managers: Vec<_> = deployment
        .managed_fields()
        .iter()
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter_map(|m| m.manager.clone())
        .collect();
    assert_eq!(managers, vec!["warren-agent".to_string()]);

    // The same objects again: the API server records no write by Warren (the apply times
    // are per second, so the re-apply happens in a later second than the first one), and
    // the objects no controller touches keep their resourceVersion. (Controllers update
    // Deployment and quota status, service account token lists and PVC finalizers.)
    let applied_at = chrono::Utc::now();
    eventually(5, "the clock to reach the next second", || async {
        (chrono::Utc::now().timestamp() > applied_at.timestamp()).then_some(())
    })
    .await;
    runtime.apply(&key, &objects).await.expect("re-apply");
    let second = versions(&client, &key).await;
    assert_eq!(second.len(), first.len());
    for (object, (version, applied)) in &second {
        let (first_version, first_applied) = &first[object];
        // Kubernetes 1.20 (the test cluster) stamps a new apply time on a ResourceQuota
        // whose usage its quota admission wrote when the pod was created, though the apply
        // changes nothing (seen: only the time of the agent's entry moved).
        if object.starts_with("ResourceQuota/") {
            continue;
        }
        assert_eq!(applied, first_applied, "re-apply wrote {object}");
        let untouched = ["ConfigMap/", "Secret/", "NetworkPolicy/", "Service/"];
        if untouched.iter().any(|k| object.starts_with(k)) {
            assert_eq!(version, first_version, "re-apply changed {object}");
        }
    }

    // Without the quota and the file secret: both pruned, the rest untouched.
    let fewer: Vec<_> = objects
        .iter()
        .filter(|o| o["kind"] != "ResourceQuota")
        .filter(|o| o["metadata"]["name"] != format!("{}-files", key.name))
        .cloned()
        .collect();
    runtime.apply(&key, &fewer).await.expect("apply fewer");
    let after = versions(&client, &key).await;
    assert!(
        !after.contains_key(&format!("ResourceQuota/{}", key.name)),
        "{after:?}"
    );
    assert!(
        !after.contains_key(&format!("Secret/{}-files", key.name)),
        "{after:?}"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &key.namespace);
    assert!(secrets
        .get_opt(&format!("{}-files", key.name))
        .await
        .unwrap()
        .is_none());
    let service = format!("Service/{}", key.name);
    assert_eq!(
        after.get(&service),
        first.get(&service),
        "pruning touched the Service"
    );
    let inventory = Api::<ConfigMap>::namespaced(client.clone(), &key.namespace)
        .get(&inventory_name(&key.name))
        .await
        .expect("inventory");
    let listed = inventory.data.unwrap_or_default()["objects"].clone();
    assert!(!listed.contains("ResourceQuota"), "{listed}");
    assert!(listed.contains("NetworkPolicy"), "{listed}");
}

#[tokio::test]
async fn deployment_status_follows_the_pod_running_stopped_and_crash_loop() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let key = key(&unique("status"));
    runtime
        .apply(&key, &workspace_objects(&key, agent, 12, 1, false))
        .await
        .expect("apply");

    // The real deployment and replicaset controllers create the ReplicaSet and the Pod.
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), &key.namespace);
    eventually(60, "a ReplicaSet", || async {
        let list = replicasets.list(&ListParams::default()).await.ok()?;
        (!list.items.is_empty()).then_some(())
    })
    .await;
    let pod = the_pod(&client, &key).await;
    assert_eq!(pod.labels().get(AGENT_ID_LABEL), Some(&agent.to_string()));
    wait_state(&runtime, &key, ActualState::Starting).await;

    let before = *runtime.changes().borrow();
    mark_running(&client, &key, &pod.name_any(), "127.0.0.1").await;
    let running = wait_state(&runtime, &key, ActualState::Running).await;
    assert!(
        *runtime.changes().borrow() > before,
        "changes() did not move"
    );
    let deployment = running.deployment.expect("deployment");
    assert_eq!(deployment["kind"], "Deployment");
    assert!(deployment["metadata"]["resourceVersion"].is_string());
    assert!(deployment["metadata"].get("managedFields").is_none());
    assert_eq!(running.pod_failure, None);
    assert!(!running.terminating);

    // A crash loop shows as a pod failure, and the derived state is Failed.
    mark_crash_loop(&client, &key, &pod.name_any()).await;
    let failed = wait_state(&runtime, &key, ActualState::Failed).await;
    let failure = failed.pod_failure.expect("pod failure");
    assert_eq!(failure.reason, "CrashLoopBackOff");
    assert!(
        failure.message.contains("container main"),
        "{}",
        failure.message
    );

    // A preStart init container that failed shows too (init containers come first).
    let status = json!({"status": {"initContainerStatuses": [{"name": "warren-prestart",
        "ready": false, "restartCount": 1, "image": "registry.local/tools:1", "imageID": "",
        "state": {"terminated": {"exitCode": 3, "reason": "Error",
            "message": "git clone failed"}}}]}});
    Api::<Pod>::namespaced(client.clone(), &key.namespace)
        .patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("patching init container status");
    let failure = eventually(60, "the init container failure", || async {
        let o = observed(&runtime, &key).await?;
        o.pod_failure.filter(|f| f.reason == "InitContainerFailed")
    })
    .await;
    assert_eq!(
        failure.message,
        "init container warren-prestart exited with code 3: git clone failed"
    );

    // Scale to zero with a partial set (only the Deployment, as a partial reconcile response
    // sends it): the pod goes, the Deployment settles on zero, Stopped; nothing is pruned.
    let deployment_only: Vec<_> = workspace_objects(&key, agent, 12, 0, false)
        .into_iter()
        .filter(|o| o["kind"] == "Deployment")
        .collect();
    runtime
        .apply(&key, &deployment_only)
        .await
        .expect("apply stopped");
    let stopped = wait_state(&runtime, &key, ActualState::Stopped).await;
    assert_eq!(stopped.pod_failure, None);
    let kept = versions(&client, &key).await;
    assert_eq!(kept.len(), 9, "a partial set pruned objects: {kept:?}");
    assert!(kept.contains_key(&format!("PersistentVolumeClaim/{}-warren-data", key.name)));
}

#[tokio::test]
async fn an_invalid_object_is_an_apply_error_with_the_servers_message() {
    let Some((_client, agent, runtime)) = setup().await else {
        return;
    };
    let key = key(&unique("invalid"));
    let mut objects = workspace_objects(&key, agent, 13, 1, false);
    let service = objects.iter_mut().find(|o| o["kind"] == "Service").unwrap();
    service["spec"]["ports"][0]["port"] = json!(70000);
    let err = runtime.apply(&key, &objects).await.unwrap_err();
    let RuntimeError::Apply { message, .. } = &err else {
        panic!("expected an apply error, got {err:?}");
    };
    // The API server's validation message, naming the field.
    assert!(message.contains("spec.ports[0].port"), "{message}");
    assert!(
        message.contains(&format!("Service {}", key.name)),
        "{message}"
    );

    // A kind Warren does not render is refused before anything is sent.
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "x"}, "rules": []});
    let err = runtime.apply(&key, &[role]).await.unwrap_err().to_string();
    assert!(err.contains("\"Role\""), "{err}");
}

#[tokio::test]
async fn deleting_a_workspace_in_its_own_namespace_ends_terminated() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let key = key(&unique("delete"));
    runtime
        .apply(&key, &workspace_objects(&key, agent, 14, 1, true))
        .await
        .expect("apply");
    let pod = the_pod(&client, &key).await;
    mark_running(&client, &key, &pod.name_any(), "127.0.0.1").await;
    wait_state(&runtime, &key, ActualState::Running).await;
    // Holds the namespace in deletion until the test lets go, as a slow volume would.
    hold(
        &client,
        &key.namespace,
        &format!("{}-scripts", key.name),
        true,
    )
    .await;

    let started = std::time::Instant::now();
    assert_eq!(
        runtime.delete(&key).await.expect("delete"),
        TerminationProgress::Terminating
    );
    let terminating = eventually(60, "list() to show the workspace terminating", || async {
        observed(&runtime, &key).await.filter(|o| o.terminating)
    })
    .await;
    let info = WorkspaceAgentInfo {
        termination_progress: Some(TerminationProgress::Terminating),
        ..kube_common::info_of(&terminating)
    };
    assert_eq!(derive_actual_state(&info), ActualState::Terminating);
    assert_eq!(
        runtime.delete(&key).await.expect("delete again"),
        TerminationProgress::Terminating
    );
    // Applying into the namespace being deleted is refused, with the reason.
    let objects = workspace_objects(&key, agent, 14, 1, true);
    let err = runtime.apply(&key, &objects).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Apply { message, .. } if message.contains("being deleted")),
        "{err:?}"
    );
    hold(
        &client,
        &key.namespace,
        &format!("{}-scripts", key.name),
        false,
    )
    .await;
    // The namespace controller removes the content and then the namespace.
    eventually(120, "the namespace to be gone", || async {
        (runtime.delete(&key).await.expect("delete") == TerminationProgress::Terminated)
            .then_some(())
    })
    .await;
    eprintln!("namespace deletion took {:?}", started.elapsed());
    let gone = Api::<Namespace>::all(client.clone())
        .get_opt(&key.namespace)
        .await
        .unwrap();
    assert!(gone.is_none());
    eventually(30, "list() to forget the workspace", || async {
        observed(&runtime, &key).await.is_none().then_some(())
    })
    .await;
    // Idempotent.
    assert_eq!(
        runtime.delete(&key).await.expect("delete"),
        TerminationProgress::Terminated
    );
}

#[tokio::test]
async fn deleting_in_a_shared_namespace_removes_only_that_workspace() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let shared = unique("shared");
    let a = WorkspaceKey {
        name: unique("a"),
        namespace: shared.clone(),
    };
    let b = WorkspaceKey {
        name: unique("b"),
        namespace: shared.clone(),
    };
    runtime
        .apply(&a, &workspace_objects(&a, agent, 15, 1, false))
        .await
        .expect("apply a");
    runtime
        .apply(&b, &workspace_objects(&b, agent, 16, 1, false))
        .await
        .expect("apply b");

    // One of a's objects stays (a finalizer) until the test lets go.
    hold(&client, &shared, &format!("{}-scripts", a.name), true).await;
    assert_eq!(
        runtime.delete(&a).await.expect("delete a"),
        TerminationProgress::Terminating
    );
    assert_eq!(
        runtime.delete(&a).await.expect("delete a again"),
        TerminationProgress::Terminating
    );
    hold(&client, &shared, &format!("{}-scripts", a.name), false).await;
    eventually(60, "a to be terminated", || async {
        let p = runtime.delete(&a).await.expect("delete a");
        (p == TerminationProgress::Terminated).then_some(p)
    })
    .await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &shared);
    let names: Vec<String> = configmaps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    assert!(!names.iter().any(|n| n.contains(&a.name)), "{names:?}");
    assert!(names.contains(&inventory_name(&b.name)), "{names:?}");
    assert!(names.contains(&format!("{}-scripts", b.name)), "{names:?}");
    // The shared namespace itself stays.
    let ns = Api::<Namespace>::all(client.clone())
        .get(&shared)
        .await
        .expect("namespace");
    assert!(ns.metadata.deletion_timestamp.is_none());
    eventually(30, "list() to show only b", || async {
        let list = runtime.list().await.ok()?;
        let keys: Vec<_> = list.iter().map(|o| o.key.clone()).collect();
        (keys == vec![b.clone()]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restarted_agent_sees_the_same_workspaces() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let one = key(&unique("restart"));
    let two = key(&unique("restart"));
    runtime
        .apply(&one, &workspace_objects(&one, agent, 17, 1, false))
        .await
        .unwrap();
    runtime
        .apply(&two, &workspace_objects(&two, agent, 18, 0, false))
        .await
        .unwrap();
    let pod = the_pod(&client, &one).await;
    mark_running(&client, &one, &pod.name_any(), "127.0.0.1").await;
    wait_state(&runtime, &one, ActualState::Running).await;
    wait_state(&runtime, &two, ActualState::Stopped).await;
    let before = runtime.list().await.unwrap();
    drop(runtime);

    let again =
        KubernetesRuntime::new(client.clone(), AgentId(agent), KubernetesOptions::default());
    let after = again.list().await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after.len(), 2);
    // Another agent sees none of them.
    let other = KubernetesRuntime::new(
        client.clone(),
        AgentId(agent + 500),
        KubernetesOptions::default(),
    );
    assert!(other.list().await.unwrap().is_empty());
    // And the restarted agent prunes what the earlier one applied.
    let fewer: Vec<_> = workspace_objects(&one, agent, 17, 1, false)
        .into_iter()
        .filter(|o| o["kind"] != "NetworkPolicy")
        .collect();
    again.apply(&one, &fewer).await.unwrap();
    let versions = versions(&client, &one).await;
    assert!(
        !versions.keys().any(|k| k.starts_with("NetworkPolicy/")),
        "{versions:?}"
    );
}

#[tokio::test]
async fn dial_reaches_the_pod_ip_on_declared_and_undeclared_ports() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    // A local listener stands in for the workspace's process; the pod's IP is 127.0.0.1.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let key = key(&unique("dial"));
    let mut objects = workspace_objects(&key, agent, 19, 1, false);
    let service = objects.iter_mut().find(|o| o["kind"] == "Service").unwrap();
    service["spec"]["ports"][0]["targetPort"] = json!(port);
    runtime.apply(&key, &objects).await.unwrap();

    let missing = WorkspaceKey {
        name: "nope".into(),
        namespace: key.namespace.clone(),
    };
    assert!(matches!(
        runtime.dial(&missing, port).await.err(),
        Some(RuntimeError::NotFound(_))
    ));

    // No running pod yet: a runtime error, not a hang.
    let pod = the_pod(&client, &key).await;
    let err = runtime
        .dial(&key, port)
        .await
        .err()
        .expect("no pod running yet");
    assert!(matches!(err, RuntimeError::Runtime { .. }), "{err:?}");

    mark_running(&client, &key, &pod.name_any(), "127.0.0.1").await;
    wait_state(&runtime, &key, ActualState::Running).await;
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 4];
        socket.read_exact(&mut buf).await.unwrap();
        socket.write_all(b"pong").await.unwrap();
        buf
    });
    let mut stream = runtime.dial(&key, port).await.expect("dial");
    stream.write_all(b"ping").await.unwrap();
    let mut answer = [0u8; 4];
    stream.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"pong");
    assert_eq!(&server.await.unwrap(), b"ping");

    // A port no endpoint declares (SSH port forwarding) is dialled at the pod's IP too.
    let undeclared = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = undeclared.local_addr().unwrap().port();
    let accept = tokio::spawn(async move { undeclared.accept().await.is_ok() });
    runtime
        .dial(&key, other)
        .await
        .expect("dial an undeclared port");
    assert!(accept.await.unwrap());
}

#[tokio::test]
async fn image_pull_secrets_are_copied_into_the_workspace_namespace() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    // The operator's secret, in the agent's own namespace.
    let source_ns = unique("agent-home");
    Api::<Namespace>::all(client.clone())
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": source_ns}})).unwrap(),
        )
        .await
        .expect("source namespace");
    let config = json!({"auths": {"registry.example.com": {"auth": "YW5uOnMzY3JldA=="}}});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred", "namespace": source_ns},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &source_ns)
        .create(&Default::default(), &secret)
        .await
        .expect("source secret");

    let key = key(&unique("pull"));
    let mut objects = workspace_objects(&key, agent, 21, 1, true);
    let sa = objects
        .iter_mut()
        .find(|o| o["kind"] == "ServiceAccount")
        .unwrap();
    sa["metadata"]["annotations"] = json!({ (warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION): format!("{source_ns}/regcred") });
    sa["imagePullSecrets"] = json!([{"name": "regcred"}]);
    runtime.apply(&key, &objects).await.expect("apply");
    let copy = Api::<Secret>::namespaced(client.clone(), &key.namespace)
        .get("regcred")
        .await
        .expect("the copy in the workspace's namespace");
    assert_eq!(
        copy.type_.as_deref(),
        Some("kubernetes.io/dockerconfigjson")
    );
    assert_eq!(
        copy.data
            .as_ref()
            .and_then(|d| d.get(".dockerconfigjson"))
            .map(|b| b.0.clone()),
        Some(config.to_string().into_bytes())
    );
    assert_eq!(copy.labels().get(AGENT_ID_LABEL), Some(&agent.to_string()));

    // A source that does not exist is an apply error naming it.
    let key2 = kube_common::fixtures::key(&unique("pull-missing"));
    let mut objects = workspace_objects(&key2, agent, 22, 1, true);
    let sa = objects
        .iter_mut()
        .find(|o| o["kind"] == "ServiceAccount")
        .unwrap();
    sa["metadata"]["annotations"] = json!({ (warren_types::reconcile::PULL_SECRET_SOURCES_ANNOTATION): format!("{source_ns}/nope") });
    let err = runtime
        .apply(&key2, &objects)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("{source_ns}/nope")) && err.contains("does not exist"),
        "{err}"
    );
}

#[tokio::test]
async fn devfile_component_objects_are_applied_pruned_and_deleted_with_the_workspace() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let a = key(&unique("a"));
    let own = a.namespace.clone();
    runtime
        .apply(&a, &workspace_objects(&a, agent, 17, 1, false))
        .await
        .expect("apply the workspace");
    let config = |value: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config"}, "data": {"x": value}});
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "app"},
        "spec": {"selector": {"app": "app"}, "ports": [{"port": 8081, "targetPort": 8081}]}});

    let lines = runtime
        .apply_component(&a, "deploy", &[config("1"), service.clone()])
        .await
        .expect("apply the component");
    assert_eq!(
        lines,
        ["applied ConfigMap app-config", "applied Service app"]
    );
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &own);
    let cm = configmaps.get("app-config").await.expect("the ConfigMap");
    let labels = cm.labels();
    assert_eq!(
        labels
            .get("warren.dev/devfile-component")
            .map(String::as_str),
        Some("deploy")
    );
    assert_eq!(labels.get(AGENT_ID_LABEL), Some(&agent.to_string()));
    let services: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &own,
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
    );
    assert!(services.get_opt("app").await.expect("get").is_some());

    // Again, without the Service: the ConfigMap changes, the Service is pruned.
    let lines = runtime
        .apply_component(&a, "deploy", &[config("2")])
        .await
        .expect("apply again");
    assert_eq!(
        lines,
        ["applied ConfigMap app-config", "pruned Service app"]
    );
    let cm = configmaps.get("app-config").await.expect("the ConfigMap");
    assert_eq!(
        cm.data.unwrap_or_default().get("x").map(String::as_str),
        Some("2")
    );
    eventually(30, "the Service to be pruned", || async {
        services.get_opt("app").await.ok()?.is_none().then_some(())
    })
    .await;

    // Refusals name the object and why, and change nothing.
    for (object, needle) in [
        (
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "admin-ish"}}),
            "Warren applies only these namespaced kinds",
        ),
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
            "in namespace \"kube-system\"",
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": a.name}}),
            "is an object of the workspace itself",
        ),
    ] {
        let e = runtime
            .apply_component(&a, "deploy", &[object])
            .await
            .expect_err("refused");
        assert!(
            matches!(e, RuntimeError::Apply { .. }) && e.to_string().contains(needle),
            "{e}"
        );
    }
    assert!(configmaps
        .get_opt("app-config")
        .await
        .expect("get")
        .is_some());

    // The workspace's deletion takes the component's objects and inventory with it.
    eventually(60, "the workspace to be terminated", || async {
        let p = runtime.delete(&a).await.expect("delete");
        (p == TerminationProgress::Terminated).then_some(p)
    })
    .await;
    let left: Vec<String> = configmaps
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|c| c.name_any())
        .filter(|n| n == "app-config" || n.contains(&a.name))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The attacks of issue 37 on a devfile's `kubernetes` component: each object would give a
/// workspace user the node (a privileged pod, the node's namespaces or file system), traffic
/// past the proxy (NodePort, LoadBalancer, Ingress, external IPs), or the label every
/// workspace's NetworkPolicy admits. The agent applies components with cluster-wide rights;
/// each is refused naming the field, and nothing of it reaches the cluster.
#[tokio::test]
async fn a_components_objects_never_escape_the_workspace() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let a = key(&unique("attack"));
    runtime
        .apply(&a, &workspace_objects(&a, agent, 37, 0, false))
        .await
        .expect("apply the workspace");
    let container = json!({"name": "x", "image": "busybox", "command": ["sleep", "1d"]});
    let pod = |spec: serde_json::Value| {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "evil"},
            "spec": {"containers": [container.clone()]}});
        for (k, v) in spec.as_object().unwrap() {
            p["spec"][k] = v.clone();
        }
        p
    };
    let privileged = {
        let mut c = container.clone();
        c["securityContext"] = json!({"privileged": true});
        pod(json!({"containers": [c]}))
    };
    let svc = |spec: serde_json::Value| {
        json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "evil"}, "spec": spec})
    };
    let restricted = json!({"runAsNonRoot": true, "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}});
    let mut forged = {
        let mut c = container.clone();
        c["securityContext"] = restricted.clone();
        pod(json!({"containers": [c]}))
    };
    forged["metadata"]["labels"] = json!({"warren.dev/component": "agent"});
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &a.namespace);
    configmaps
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": "placed-by-an-admin"}})).unwrap(),
        )
        .await
        .expect("an object the component did not make");
    for (object, needles) in [
        (
            privileged,
            &[
                "spec.containers[x].securityContext.privileged",
                "restricted Pod Security Standard",
            ][..],
        ),
        (
            pod(json!({"hostPID": true, "hostNetwork": true})),
            &["spec.hostPID", "spec.hostNetwork"][..],
        ),
        (
            pod(json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]})),
            &["spec.volumes[root].hostPath"][..],
        ),
        // Runs as the image's user (root, often) with every default capability.
        (
            pod(json!({})),
            &[
                "allowPrivilegeEscalation",
                "runAsNonRoot",
                "capabilities.drop",
            ][..],
        ),
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "evil"},
                "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"hostIPC": true, "containers": [container.clone()]}}}}),
            &["spec.template.spec.hostIPC"][..],
        ),
        (
            svc(json!({"type": "NodePort", "ports": [{"port": 80}]})),
            &["Service type NodePort is not allowed"][..],
        ),
        (
            svc(json!({"type": "LoadBalancer", "ports": [{"port": 80}]})),
            &["Service type LoadBalancer"][..],
        ),
        (
            svc(json!({"ports": [{"port": 80}], "externalIPs": ["10.96.0.10"]})),
            &["spec.externalIPs"][..],
        ),
        (
            json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "evil"},
                "spec": {"defaultBackend": {"service": {"name": "x", "port": {"number": 80}}}}}),
            &["kind Ingress is not allowed on this agent"][..],
        ),
        (forged, &["metadata.labels[warren.dev/component]"][..]),
        // Any available PersistentVolume (a node's disk, a released volume) by name.
        (
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "evil"},
                "spec": {"volumeName": "someone-elses", "accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}}),
            &["spec.volumeName"][..],
        ),
        // Warren's own objects: the inventory that says what the workspace is made of, and
        // the Secret with the workspace's variables (and, beside it, its Git credentials and
        // the admin's registry credentials), which the kubelet would hand the pod.
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("warren-inventory-{}", a.name)}, "data": {}}),
            &["names starting with warren- are Warren's own"][..],
        ),
        (
            {
                let mut c = container.clone();
                c["securityContext"] = restricted.clone();
                c["envFrom"] = json!([{"secretRef": {"name": format!("{}-env", a.name)}}]);
                pod(json!({"containers": [c]}))
            },
            &[&format!("reads Secret {}-env", a.name)[..]][..],
        ),
        // An object of the namespace the component did not make.
        (
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "placed-by-an-admin"}, "data": {}}),
            &["already exists and is not this component's"][..],
        ),
    ] {
        let e = runtime
            .apply_component(&a, "evil", std::slice::from_ref(&object))
            .await
            .expect_err("refused");
        let text = e.to_string();
        assert!(matches!(e, RuntimeError::Apply { .. }), "{text}");
        for needle in needles {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }
    // Nothing was applied: no pod, Service or Ingress of the attacker's, and no inventory.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &a.namespace);
    assert!(pods.get_opt("evil").await.expect("get").is_none());
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), &a.namespace);
    assert!(services.get_opt("evil").await.expect("get").is_none());
    assert!(configmaps
        .get_opt(&format!("warren-component-{}-evil", a.name))
        .await
        .expect("get")
        .is_none());
    // A careful pod is applied: the rules are the restricted standard, not a ban.
    let mut careful = {
        let mut c = container.clone();
        c["securityContext"] = restricted;
        pod(json!({"containers": [c]}))
    };
    careful["metadata"]["name"] = json!("careful");
    // The workspace's own service account, tokenless: the test's control plane makes no
    // tokens, and the `default` account may not exist yet.
    careful["spec"]["serviceAccountName"] = json!(a.name);
    careful["spec"]["automountServiceAccountToken"] = json!(false);
    // ...under a component named `agent`, which does not make it the agent.
    runtime
        .apply_component(&a, "agent", &[careful])
        .await
        .expect("a restricted pod is applied");
    let applied = pods
        .get_opt("careful")
        .await
        .expect("get")
        .expect("the pod");
    assert_eq!(applied.labels().get("warren.dev/component"), None);
    assert_eq!(
        applied
            .labels()
            .get("warren.dev/devfile-component")
            .map(String::as_str),
        Some("agent")
    );

    // An admin who allows NodePorts and Ingresses gets them; external IPs never.
    let open = KubernetesRuntime::new(
        client.clone(),
        AgentId(agent),
        KubernetesOptions {
            components: ComponentPolicy::new(
                ["Service", "Ingress"].map(String::from).to_vec(),
                ["ClusterIP", "NodePort"].map(String::from).to_vec(),
            )
            .unwrap(),
            ..KubernetesOptions::default()
        },
    );
    open.apply_component(
        &a,
        "web",
        &[svc(json!({"type": "NodePort", "ports": [{"port": 80}]}))],
    )
    .await
    .expect("an allowed NodePort");
    let e = open
        .apply_component(
            &a,
            "web",
            &[svc(
                json!({"ports": [{"port": 80}], "externalIPs": ["10.96.0.10"]}),
            )],
        )
        .await
        .expect_err("external IPs");
    assert!(e.to_string().contains("spec.externalIPs"), "{e}");

    // A workspace in a shared namespace gets no components: its NetworkPolicy could not
    // cover them, and they would sit beside other users' workspaces.
    let shared = WorkspaceKey {
        name: unique("shared"),
        namespace: unique("team"),
    };
    runtime
        .apply(&shared, &workspace_objects(&shared, agent, 38, 0, false))
        .await
        .expect("apply the shared workspace");
    let e = runtime
        .apply_component(
            &shared,
            "deploy",
            &[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})],
        )
        .await
        .expect_err("refused in a shared namespace");
    assert!(e.to_string().contains("shared namespace"), "{e}");

    for k in [&a, &shared] {
        eventually(60, "the workspace to be terminated", || async {
            let p = runtime.delete(k).await.expect("delete");
            (p == TerminationProgress::Terminated).then_some(p)
        })
        .await;
    }
}

/// A workspace's own namespace carries the API server's PodSecurity labels at the level its
/// pod meets (`restricted` for Warren's pods; `baseline` when the agent's configuration allows
/// privilege escalation; `privileged` for an exception its admin allowed), added to a namespace made before them; a shared namespace is the
/// admin's and is left as it is.
#[tokio::test]
async fn a_workspaces_own_namespace_is_labelled_for_pod_security_admission() {
    let Some((client, agent, runtime)) = setup().await else {
        return;
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let level = |ns: Namespace| {
        let labels = ns.metadata.labels.unwrap_or_default();
        (
            labels.get("pod-security.kubernetes.io/enforce").cloned(),
            labels
                .get("pod-security.kubernetes.io/enforce-version")
                .cloned(),
        )
    };
    let a = key(&unique("pss"));
    runtime
        .apply(&a, &workspace_objects(&a, agent, 40, 0, false))
        .await
        .expect("apply");
    assert_eq!(
        level(namespaces.get(&a.namespace).await.unwrap()),
        (Some("restricted".into()), Some("latest".into()))
    );

    // Made before the labels existed: they are added at the next apply, at the level the
    // (looser) pod meets.
    let b = key(&unique("pss-old"));
    namespaces
        .create(
            &Default::default(),
            &serde_json::from_value(json!({"metadata": {"name": b.namespace}})).unwrap(),
        )
        .await
        .expect("an old namespace");
    let mut objects = workspace_objects(&b, agent, 41, 0, false);
    let deployment = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"]
        ["allowPrivilegeEscalation"] = json!(true);
    runtime.apply(&b, &objects).await.expect("apply");
    assert_eq!(
        level(namespaces.get(&b.namespace).await.unwrap())
            .0
            .as_deref(),
        Some("baseline")
    );

    // An exception the agent's admin allowed (the server renders no other): a capability
    // and no seccomp filter are beyond `baseline`, so the namespace enforces none.
    let c = key(&unique("pss-debug"));
    let mut objects = workspace_objects(&c, agent, 43, 0, false);
    let deployment = objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .unwrap();
    let sc = &mut deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"];
    sc["capabilities"]["add"] = json!(["SYS_PTRACE"]);
    sc["seccompProfile"] = json!({"type": "Unconfined"});
    runtime.apply(&c, &objects).await.expect("apply");
    assert_eq!(
        level(namespaces.get(&c.namespace).await.unwrap())
            .0
            .as_deref(),
        Some("privileged")
    );

    let shared = WorkspaceKey {
        name: unique("pss-shared"),
        namespace: unique("team"),
    };
    runtime
        .apply(&shared, &workspace_objects(&shared, agent, 42, 0, false))
        .await
        .expect("apply");
    assert_eq!(
        level(namespaces.get(&shared.namespace).await.unwrap()),
        (None, None)
    );
    for k in [&a, &b, &c, &shared] {
        eventually(60, "the workspace to be terminated", || async {
            let p = runtime.delete(k).await.expect("delete");
            (p == TerminationProgress::Terminated).then_some(p)
        })
        .await;
    }
}
