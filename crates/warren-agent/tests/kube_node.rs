//! The Kubernetes runtime on a real one-node cluster (kubelet on containerd, `kube_common::node`):
//! nothing is patched by hand. A workspace's pod really runs, with its init container, its
//! volume on a provisioned claim, user 5001:0 and its limits; it is stopped, started, resized
//! and terminated; exec and logs go through the API server to the kubelet; a crash-looping
//! command and a missing image fail with the kubelet's own reasons.

use crate::common::public;
use crate::kube_common;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::Client;
use kube_common::eventually;
use kube_common::node::{node_with_images, Node, WORKSPACE_IMAGE};
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{
    ExecOutput, ExecSpec, ObservedWorkspace, WorkspaceKey, WorkspaceRuntime,
};
use warren_types::reconcile::TerminationProgress;
use warren_types::state::ActualState;
use warren_types::AgentId;

/// How long a pod may take on a busy CI machine (image already local).
const POD_SECS: u64 = 180;

fn agent_id() -> i64 {
    use std::sync::atomic::{AtomicI64, Ordering};
    static N: AtomicI64 = AtomicI64::new(1);
    i64::from(std::process::id()) * 1000 + N.fetch_add(1, Ordering::Relaxed)
}

pub(crate) struct Setup {
    pub(crate) node: &'static Node,
    pub(crate) client: Client,
    pub(crate) agent: i64,
    pub(crate) runtime: KubernetesRuntime,
}

pub(crate) async fn setup() -> Option<Setup> {
    // The public examples' images too: the node imports images only when it starts.
    if let Err(e) = public::build_images() {
        panic!("building the public examples' images: {e:#}");
    }
    let node = node_with_images(public::IMAGES)?;
    let client = node.client().await;
    let agent = agent_id();
    let runtime =
        KubernetesRuntime::new(client.clone(), AgentId(agent), KubernetesOptions::default());
    Some(Setup {
        node,
        client,
        agent,
        runtime,
    })
}

/// The engine tests' fixture objects (as the renderer writes them), renamed, for `agent`,
/// with the node's image; the start script also says hello on stdout, for the logs.
fn objects(key: &WorkspaceKey, agent: i64) -> Vec<Value> {
    let text = include_str!("fixtures/workspace.yaml")
        .replace("fixture-ws", &key.name)
        .replace("\"AGENT\"", &format!("\"{agent}\""))
        .replace("localhost/warren-test:latest", WORKSPACE_IMAGE)
        .replace(
            "    mkdir -p /tmp/www\n",
            "    echo \"started $WARREN_WORKSPACE as $(id -u):$(id -g)\"\n    mkdir -p /tmp/www\n",
        );
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).expect("fixture");
            serde_json::to_value(v).expect("fixture as JSON")
        })
        .collect()
}

fn deployment(objects: &mut [Value]) -> &mut Value {
    objects
        .iter_mut()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment")
}

fn container<'a>(objects: &'a mut [Value], name: &str) -> &'a mut Value {
    deployment(objects)["spec"]["template"]["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .iter_mut()
        .find(|c| c["name"] == name)
        .expect("the container")
}

fn key(prefix: &str) -> WorkspaceKey {
    let name = kube_common::fixtures::unique(prefix);
    WorkspaceKey {
        namespace: format!("warren-ws-{name}"),
        name,
    }
}

fn derived(o: &ObservedWorkspace) -> ActualState {
    kube_common::derived_state(o)
}

async fn observed(s: &Setup, key: &WorkspaceKey) -> Option<ObservedWorkspace> {
    s.runtime
        .list()
        .await
        .ok()?
        .into_iter()
        .find(|o| &o.key == key)
}

pub(crate) async fn wait_state(
    s: &Setup,
    key: &WorkspaceKey,
    state: ActualState,
) -> ObservedWorkspace {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(POD_SECS);
    loop {
        let o = observed(s, key).await;
        if let Some(o) = o.as_ref().filter(|o| derived(o) == state) {
            return o.clone();
        }
        if tokio::time::Instant::now() > deadline {
            panic!(
                "{key} did not become {state:?} within {POD_SECS}s (last: {:?})\npods: {}\n{}",
                o.as_ref().map(derived),
                pods_summary(&s.client, key).await,
                s.node.diagnostics()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The workspace's pods, their phases and container states, for failure messages.
async fn pods_summary(client: &Client, key: &WorkspaceKey) -> String {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &key.namespace);
    match pods.list(&ListParams::default()).await {
        Ok(list) => list
            .items
            .iter()
            .map(|p| serde_json::to_string(&p.status).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("listing pods: {e}"),
    }
}

/// The live (not deleted) pods of the workspace.
pub(crate) async fn live_pods(client: &Client, key: &WorkspaceKey) -> Vec<Pod> {
    kube_common::live_pods(client, &key.namespace).await
}

/// Runs `script` with `sh -c` in `container` through the runtime's exec (API server →
/// kubelet → containerd): its stdout, stderr and exit code.
pub(crate) async fn exec(
    s: &Setup,
    key: &WorkspaceKey,
    container: Option<&str>,
    script: &str,
) -> (String, String, Option<i32>) {
    try_exec(s, key, container, script)
        .await
        .unwrap_or_else(|e| panic!("exec {script:?} in {key}: {e}"))
}

/// [`exec`], with the runtime's refusal (no running pod) as the error.
async fn try_exec(
    s: &Setup,
    key: &WorkspaceKey,
    container: Option<&str>,
    script: &str,
) -> Result<(String, String, Option<i32>), String> {
    let session = s
        .runtime
        .exec(
            key,
            ExecSpec {
                container: container.map(str::to_owned),
                command: vec!["/bin/sh".into(), "-c".into(), script.into()],
                env: vec![],
                tty: false,
                size: None,
            },
        )
        .await
        .map_err(|e| warren_types::error_chain(&e))?;
    let mut stdin = session.stdin;
    let _ = stdin.shutdown().await;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut output = session.output;
    let collect = async {
        while let Some(chunk) = output.next().await {
            match chunk.expect("exec output") {
                ExecOutput::Stdout(b) => out.extend_from_slice(&b),
                ExecOutput::Stderr(b) => err.extend_from_slice(&b),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("exec output within 60 s");
    let exit = tokio::time::timeout(Duration::from_secs(60), session.exit)
        .await
        .expect("exec exit within 60 s")
        .expect("exec exit");
    if let Some(message) = &exit.message {
        err.extend_from_slice(format!("(exec: {message})").as_bytes());
    }
    Ok((
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
        exit.code,
    ))
}

pub(crate) async fn exec_ok(
    s: &Setup,
    key: &WorkspaceKey,
    container: Option<&str>,
    script: &str,
) -> String {
    let (out, err, code) = exec(s, key, container, script).await;
    assert_eq!(code, Some(0), "{script:?} failed: {out}{err}");
    out.trim().to_owned()
}

/// An HTTP GET of `/` on the workspace's port through the runtime's dial (the agent's path).
async fn http_get(s: &Setup, key: &WorkspaceKey, port: u16) -> String {
    let mut stream = s.runtime.dial(key, port).await.expect("dial");
    stream
        .write_all(b"GET / HTTP/1.0\r\nHost: ws\r\n\r\n")
        .await
        .expect("request");
    let mut response = String::new();
    tokio::time::timeout(
        Duration::from_secs(30),
        stream.read_to_string(&mut response),
    )
    .await
    .expect("response within 30 s")
    .expect("response");
    response
}

/// The persistent volume bound to the workspace's data claim.
async fn data_volume(s: &Setup, key: &WorkspaceKey) -> PersistentVolume {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &key.namespace);
    let claim_name = format!("{}-warren-data", key.name);
    let volume = eventually(60, "the data claim to be bound", || async {
        let claim = claims.get_opt(&claim_name).await.ok()??;
        let bound = claim.status.as_ref()?.phase.as_deref() == Some("Bound");
        bound.then(|| claim.spec?.volume_name).flatten()
    })
    .await;
    Api::<PersistentVolume>::all(s.client.clone())
        .get(&volume)
        .await
        .expect("the bound volume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workspace_lives_its_whole_life_on_the_node() {
    let Some(s) = setup().await else { return };
    let key = key("life");
    let mut objs = objects(&key, s.agent);
    s.runtime.apply(&key, &objs).await.expect("apply");

    // Created → Running, with nothing patched: the kubelet ran the init container, then both
    // containers, and the Deployment reports itself available.
    wait_state(&s, &key, ActualState::Running).await;
    let pods = live_pods(&s.client, &key).await;
    assert_eq!(pods.len(), 1, "one pod");
    let pod = &pods[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|p| p.node_name.as_deref()),
        Some(s.node.name.as_str()),
        "scheduled onto the node"
    );
    let init = &pod
        .status
        .as_ref()
        .unwrap()
        .init_container_statuses
        .as_ref()
        .unwrap()[0];
    let init_exit = init
        .state
        .as_ref()
        .and_then(|st| st.terminated.as_ref())
        .map(|t| t.exit_code);
    assert_eq!(init_exit, Some(0), "the init container ran and succeeded");

    // The init container wrote to /projects, which is the provisioned claim's directory.
    assert_eq!(
        exec_ok(&s, &key, Some("dev"), "cat /projects/.prestart").await,
        "prestart ran"
    );
    let volume = data_volume(&s, &key).await;
    let host_dir = volume
        .spec
        .as_ref()
        .and_then(|v| v.host_path.as_ref())
        .map(|h| std::path::PathBuf::from(&h.path))
        .expect("a hostPath volume");
    assert!(
        host_dir.starts_with(&s.node.node_dir),
        "{host_dir:?} is the provisioner's"
    );
    assert_eq!(
        std::fs::read_to_string(host_dir.join(".prestart")).expect("the file on the volume"),
        "prestart ran\n"
    );

    // The security context and the limits, as the kubelet applied them.
    assert_eq!(
        exec_ok(&s, &key, Some("dev"), "id -u; id -g").await,
        "5001\n0"
    );
    assert_eq!(
        exec_ok(
            &s,
            &key,
            Some("dev"),
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
        )
        .await,
        (256u64 << 20).to_string(),
        "the dev container's memory limit"
    );
    assert_eq!(
        exec_ok(
            &s,
            &key,
            Some("dev"),
            "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
        )
        .await,
        "50000",
        "the dev container's CPU limit (500m)"
    );
    let caps = exec_ok(&s, &key, Some("dev"), "grep CapEff /proc/self/status").await;
    assert!(
        caps.ends_with("0000000000000000"),
        "no capabilities: {caps}"
    );
    let (_, _, code) = exec(&s, &key, Some("dev"), "touch /etc/warren-test").await;
    assert_ne!(
        code,
        Some(0),
        "the image's files are not writable by user 5001"
    );

    // Exec reports exit codes and stderr; the main container is the default.
    let (out, err, code) = exec(&s, &key, None, "echo out; echo err >&2; exit 7").await;
    assert_eq!(
        (out.as_str(), err.as_str(), code),
        ("out\n", "err\n", Some(7))
    );

    // The workspace's port, dialled as the agent does, and its logs.
    let page = http_get(&s, &key, 8080).await;
    assert!(page.contains(&format!("hello from {}", key.name)), "{page}");
    let logs = s.runtime.logs(&key, Some("dev"), 100).await.expect("logs");
    let logs = String::from_utf8_lossy(&logs);
    assert!(
        logs.contains(&format!("started {} as 5001:0", key.name)),
        "logs: {logs}"
    );

    // A file written by the user survives stop and start.
    exec_ok(&s, &key, Some("dev"), "echo kept > /projects/notes.txt").await;
    let first_pod = pod.metadata.uid.clone();
    deployment(&mut objs)["spec"]["replicas"] = 0.into();
    s.runtime.apply(&key, &objs).await.expect("stop");
    wait_state(&s, &key, ActualState::Stopped).await;
    eventually(POD_SECS, "the kubelet to remove the pod", || async {
        live_pods(&s.client, &key).await.is_empty().then_some(())
    })
    .await;
    deployment(&mut objs)["spec"]["replicas"] = 1.into();
    s.runtime.apply(&key, &objs).await.expect("start");
    wait_state(&s, &key, ActualState::Running).await;
    let second = live_pods(&s.client, &key).await;
    assert_ne!(second[0].metadata.uid, first_pod, "a new pod");
    assert_eq!(
        exec_ok(&s, &key, Some("dev"), "cat /projects/notes.txt").await,
        "kept"
    );

    // Resize: new limits reach the running container's cgroup through a new pod.
    container(&mut objs, "dev")["resources"]["limits"]["memory"] = "128Mi".into();
    s.runtime.apply(&key, &objs).await.expect("resize");
    eventually(POD_SECS, "the resized pod to run with 128Mi", || async {
        let (out, _, code) = try_exec(
            &s,
            &key,
            Some("dev"),
            "cat /sys/fs/cgroup/memory/memory.limit_in_bytes",
        )
        .await
        .ok()?;
        (code == Some(0) && out.trim() == (128u64 << 20).to_string()).then_some(())
    })
    .await;
    wait_state(&s, &key, ActualState::Running).await;

    // Terminate: the namespace goes, the kubelet stops the pod, the volume and its directory
    // are deleted.
    let volume_name = volume.metadata.name.clone().expect("volume name");
    let mut progress = s.runtime.delete(&key).await.expect("delete");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(POD_SECS);
    while progress != TerminationProgress::Terminated {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still terminating after {POD_SECS}s\n{}",
            s.node.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        progress = s.runtime.delete(&key).await.expect("delete");
    }
    assert!(Api::<Namespace>::all(s.client.clone())
        .get_opt(&key.namespace)
        .await
        .expect("namespace lookup")
        .is_none());
    eventually(
        POD_SECS,
        "the volume and its directory to be deleted",
        || async {
            let gone = Api::<PersistentVolume>::all(s.client.clone())
                .get_opt(&volume_name)
                .await
                .ok()?
                .is_none();
            (gone && !host_dir.exists()).then_some(())
        },
    )
    .await;
    assert!(observed(&s, &key).await.is_none(), "nothing left to list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_command_fails_with_the_kubelets_reason() {
    let Some(s) = setup().await else { return };
    let key = key("crash");
    let mut objs = objects(&key, s.agent);
    container(&mut objs, "dev")["command"] =
        serde_json::json!(["/bin/sh", "-c", "echo giving up; exit 3"]);
    s.runtime.apply(&key, &objs).await.expect("apply");
    let failed = wait_state(&s, &key, ActualState::Failed).await;
    let failure = failed.pod_failure.expect("a pod failure");
    assert_eq!(failure.reason, "CrashLoopBackOff", "{failure:?}");
    assert!(
        failure
            .message
            .starts_with("container dev exited with code 3"),
        "the container and how it ended, as on the engine: {failure:?}"
    );
    let logs = s.runtime.logs(&key, Some("dev"), 10).await.expect("logs");
    assert!(String::from_utf8_lossy(&logs).contains("giving up"));
    terminate(&s, &key).await;
}

/// What a Compose dev container's pod asks of the node: its containers reach one another by
/// name (`hostAliases`), and a container's `postStart` hook holding the next one until its
/// service answers (a healthy dependency), as the engine runtime does too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_resolve_to_the_pod_and_a_held_start_waits_for_the_service() {
    let Some(s) = setup().await else { return };
    let key = key("held");
    let mut objs = objects(&key, s.agent);
    deployment(&mut objs)["spec"]["template"]["spec"]["hostAliases"] =
        serde_json::json!([{"ip": "127.0.0.1", "hostnames": ["db", "cache"]}]);
    // The "database" answers only after 2 s; its hook holds the next container until then.
    let dev = container(&mut objs, "dev");
    dev["command"] = serde_json::json!([
        "/bin/sh", "-c",
        "sleep 2; mkdir -p /tmp/www; echo db-is-up > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www"
    ]);
    dev["lifecycle"] = serde_json::json!({"postStart": {"exec": {"command": [
        "/bin/sh", "-c", "until wget -q -O /dev/null http://127.0.0.1:8080/; do sleep 1; done"
    ]}}});
    container(&mut objs, "tools")["command"] = serde_json::json!([
        "/bin/sh",
        "-c",
        "wget -qO- http://db:8080/ > /tmp/at-start 2>&1; exec sleep 2147483647"
    ]);
    // The main container is the one the Deployment names, not the first.
    deployment(&mut objs)["metadata"]["annotations"]["warren.dev/main-container"] = "tools".into();
    s.runtime.apply(&key, &objs).await.expect("apply");
    wait_state(&s, &key, ActualState::Running).await;
    assert_eq!(
        exec_ok(&s, &key, None, "cat /tmp/at-start").await,
        "db-is-up",
        "the second container started once the first one's service answered, reached by name"
    );
    terminate(&s, &key).await;
}

/// An exception the agent's admin allowed (the server renders no other) runs on the node:
/// its namespace admits the pod, the container has no seccomp filter and the capability in its
/// bounding set; Kubernetes gives the non-root process no effective capability (no ambient
/// set), as the README says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_exception_runs_on_the_node_as_kubernetes_gives_it() {
    let Some(s) = setup().await else { return };
    let key = key("except");
    let mut objs = objects(&key, s.agent);
    // The pod's default, as the renderer writes it.
    deployment(&mut objs)["spec"]["template"]["spec"]["securityContext"]["seccompProfile"] =
        serde_json::json!({"type": "RuntimeDefault"});
    let sc = &mut container(&mut objs, "dev")["securityContext"];
    sc["capabilities"]["add"] = serde_json::json!(["SYS_PTRACE"]);
    sc["seccompProfile"] = serde_json::json!({"type": "Unconfined"});
    s.runtime.apply(&key, &objs).await.expect("apply");
    wait_state(&s, &key, ActualState::Running).await;
    let status = exec_ok(
        &s,
        &key,
        Some("dev"),
        "grep -E '^(CapEff|CapBnd|Seccomp):' /proc/1/status",
    )
    .await;
    assert!(status.contains("Seccomp:\t0"), "{status}");
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:\t"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .expect("CapBnd");
    assert_ne!(bounding & (1 << 19), 0, "CAP_SYS_PTRACE bounded: {status}");
    assert!(status.contains("CapEff:\t0000000000000000"), "{status}");
    let tools = exec_ok(&s, &key, Some("tools"), "grep '^Seccomp:' /proc/1/status").await;
    assert!(
        tools.contains("Seccomp:\t2"),
        "the neighbour keeps its filter: {tools}"
    );
    terminate(&s, &key).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_fails_with_the_kubelets_reason() {
    let Some(s) = setup().await else { return };
    let key = key("noimg");
    let mut objs = objects(&key, s.agent);
    container(&mut objs, "dev")["image"] = "localhost/warren-missing:1".into();
    s.runtime.apply(&key, &objs).await.expect("apply");
    let failed = wait_state(&s, &key, ActualState::Failed).await;
    let failure = failed.pod_failure.expect("a pod failure");
    assert!(
        ["ErrImagePull", "ImagePullBackOff"].contains(&failure.reason.as_str()),
        "{failure:?}"
    );
    assert!(
        failure.message.contains("warren-missing"),
        "the kubelet's message names the image: {failure:?}"
    );
    terminate(&s, &key).await;
}

pub(crate) async fn terminate(s: &Setup, key: &WorkspaceKey) {
    eventually(POD_SECS, "the workspace to be terminated", || async {
        (s.runtime.delete(key).await.ok()? == TerminationProgress::Terminated).then_some(())
    })
    .await;
}

/// The GitOps health of Deployment `name` at a sync of `objects` from source `source`.
async fn gitops_health(
    runtime: &KubernetesRuntime,
    source: &warren_types::gitops::Source,
    objects: &[warren_gitops::Manifest],
) -> Vec<warren_types::gitops::ObjectHealth> {
    let policy = warren_types::gitops::Policy::default();
    let out = runtime
        .sync_gitops(&warren_agent::runtime::GitopsSync {
            agent: "node",
            source,
            policy: &policy,
            commit: "c0ffee",
            objects,
            prune: true,
        })
        .await
        .expect("sync");
    assert!(out.errors.is_empty(), "{out:?}");
    out.health
}

fn message_of(health: &[warren_types::gitops::ObjectHealth], name: &str) -> Option<(bool, String)> {
    health
        .iter()
        .find(|h| h.object.ends_with(&format!("/{name}")))
        .map(|h| (h.ready, h.message.clone()))
}

/// Issue 38: the public examples the engine test runs (`engine_gitops`) reach the same
/// outcome on Kubernetes: the guestbook serves on port 80 as root and is ready; the crash
/// loop is restarted with back-off and says why; probes decide readiness, and a failed
/// liveness probe restarts its container.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_examples_reach_the_outcome_they_reach_on_the_engine() {
    let Some(s) = setup().await else { return };
    let ns = format!("public-{}", s.agent);
    let namespaces: Api<Namespace> = Api::all(s.client.clone());
    let body: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).unwrap();
    namespaces
        .create(&Default::default(), &body)
        .await
        .expect("namespace");
    let source: warren_types::gitops::Source = serde_json::from_value(serde_json::json!({
        "name": format!("public-{}", s.agent), "repository": "examples", "prune": true,
        "mode": "namespaced", "namespace": ns,
    }))
    .unwrap();
    let objects = public::manifests(&[
        "guestbook-ui-deployment.yaml",
        "guestbook-ui-svc.yaml",
        "crashloop.yaml",
        "probes.yaml",
    ])
    .expect("the fixtures");

    let decided = eventually(POD_SECS, "the examples' outcomes", || async {
        let health = gitops_health(&s.runtime, &source, &objects).await;
        let guestbook = message_of(&health, "guestbook-ui")?;
        let crash = message_of(&health, "crashloop")?;
        let ready = message_of(&health, "web-ready")?;
        let unready = message_of(&health, "web-unready")?;
        (guestbook.0
            && ready.0
            && crash.1.contains("CrashLoopBackOff")
            && unready.1.contains("statuscode"))
        .then_some((guestbook, crash, ready, unready))
    })
    .await;
    let (guestbook, crash, ready, unready) = decided;
    eprintln!("guestbook: {guestbook:?}\ncrash loop: {crash:?}\nweb-ready: {ready:?}\nweb-unready: {unready:?}");
    assert!(
        guestbook.1.starts_with("1/1 replicas ready"),
        "{guestbook:?}"
    );
    assert!(!crash.0);
    assert!(crash.1.starts_with("0/1 replicas ready: "), "{crash:?}");
    assert!(
        crash.1.contains("container app exited with code 1"),
        "{crash:?}"
    );
    assert!(!unready.0);
    assert!(
        unready.1.contains("HTTP probe failed with statuscode: 404"),
        "{unready:?}"
    );

    // The guestbook answers on port 80 of its pod, as root (the image's user).
    let pods: Api<Pod> = Api::namespaced(s.client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels("app=guestbook-ui"))
        .await
        .expect("pods")
        .items
        .into_iter()
        .next()
        .expect("a guestbook pod");
    let ip = pod
        .status
        .and_then(|st| st.pod_ip)
        .expect("the pod's address");
    let page = reqwest::get(format!("http://{ip}:80/index.html"))
        .await
        .expect("the guestbook answers")
        .text()
        .await
        .unwrap();
    assert!(page.contains("Guestbook"), "{page}");

    // The liveness probe fails 30 s in: the container restarts, and the health says why.
    let restarted = eventually(POD_SECS, "a liveness restart", || async {
        let health = gitops_health(&s.runtime, &source, &objects).await;
        let (_, m) = message_of(&health, "liveness-exec")?;
        m.to_ascii_lowercase()
            .contains("liveness probe failed")
            .then_some(m)
    })
    .await;
    eprintln!("liveness-exec: {restarted}");
    assert!(restarted.contains("/tmp/healthy"), "{restarted}");
    assert!(!restarted.contains("restarted 0 times"), "{restarted}");
    let _ = namespaces.delete(&ns, &Default::default()).await;
}

/// The devfile of the machine-class test: one container on the node's image, doing nothing.
const CLASS_DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: classy
components:
  - name: dev
    container:
      image: localhost/warren-test:node
      command: ["/bin/sh", "-c", "exec sleep 2147483647"]
      memoryLimit: 256Mi
"#;

/// The extended resource the node is made to advertise, as a device plugin would.
const FAKE_GPU: &str = "example.com/gpu";
/// The label of the node a class's selector picks.
const ACCELERATOR_LABEL: &str = "warren.dev/test-accelerator";

/// What the server renders for a workspace of `class` on this agent (no editor: the node
/// has no tools image), and its key.
fn render_class(
    s: &Setup,
    prefix: &str,
    class: &warren_types::machine::MachineClass,
) -> (WorkspaceKey, Vec<Value>) {
    let name = kube_common::fixtures::unique(prefix);
    let mut cfg = warren_types::config::AgentConfig::default();
    cfg.editor.name = warren_types::config::EditorName::None;
    let devfile = warren_devfile::parse_devfile(CLASS_DEVFILE).expect("the test devfile");
    let resources = warren_types::api::WorkspaceResources {
        class: Some(class.name.clone()),
        cpu: class.cpu.clone(),
        memory: class.memory.clone(),
    };
    let rendered = warren_devfile::render(
        &devfile,
        &warren_devfile::RenderRequest {
            workspace_name: &name,
            workspace_id: warren_types::WorkspaceId(41),
            agent_id: AgentId(s.agent),
            agent_config: &cfg,
            project: None,
            resources: Some(&resources),
            machine: Some(class),
            variables: &[],
            desired_state: warren_types::DesiredState::Running,
            dotfiles_url: None,
            starter: None,
            prebuild: false,
            seed: None,
        },
    )
    .expect("render");
    let key = WorkspaceKey {
        name,
        namespace: rendered.namespace.clone(),
    };
    (key, rendered.objects)
}

/// Makes the node advertise `count` of the fake device (capacity and allocatable, as a device
/// plugin's registration ends up) and carry the accelerator label; `None` takes both away.
async fn advertise_fake_gpus(s: &Setup, count: Option<u32>) {
    use kube::api::{Patch, PatchParams};
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(s.client.clone());
    let quantity = count.map(|c| c.to_string());
    let status = serde_json::json!({"status": {
        "capacity": {FAKE_GPU: quantity},
        "allocatable": {FAKE_GPU: quantity},
    }});
    nodes
        .patch_status(
            &s.node.name,
            &PatchParams::default(),
            &Patch::Merge(&status),
        )
        .await
        .expect("patch the node's status");
    let label = serde_json::json!({"metadata": {"labels": {
        ACCELERATOR_LABEL: count.map(|_| "fake"),
    }}});
    nodes
        .patch(&s.node.name, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .expect("label the node");
    // The scheduler reads the node from its own cache: wait until the API server shows it
    // as the kubelet's next status update leaves it.
    let want = quantity.clone();
    eventually(60, "the node to advertise the fake device", || {
        let nodes = nodes.clone();
        let want = want.clone();
        async move {
            let node = nodes.get(&s.node.name).await.ok()?;
            let have = node
                .status?
                .allocatable
                .and_then(|a| a.get(FAKE_GPU).map(|q| q.0.clone()));
            (have == want).then_some(())
        }
    })
    .await;
}

/// The pod's main container's limit of `resource`.
fn limit_of(pod: &Pod, container: &str, resource: &str) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == container)?
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get(resource)
        .map(|q| q.0.clone())
}

/// Waits until the runtime reports that the workspace's pod waits for a node with a message
/// that says `words` (before its volume is bound the scheduler says that first); the message.
async fn wait_pod_waiting(s: &Setup, key: &WorkspaceKey, words: &str) -> String {
    let what = format!("the pod to wait for a node, saying {words:?}");
    eventually(POD_SECS, &what, || async {
        let o = observed(s, key).await?;
        assert!(o.pod_failure.is_none(), "waiting is not failing: {o:?}");
        let w = o.pod_waiting.clone()?;
        assert_eq!(w.reason, "Unschedulable");
        assert_eq!(derived(&o), ActualState::Starting, "still starting: {o:?}");
        w.message.contains(words).then_some(w.message)
    })
    .await
}

/// Issue 41, item 3 on the real node: a machine class's devices are an extended resource the
/// node advertises (`example.com/gpu`, patched into its status as a device plugin does), its
/// node selector and tolerations place the pod. A pod of the class runs there with its device
/// and its volume's size; one asking for more devices than are free waits, with the
/// scheduler's reason, and runs once the first is gone; one whose selector no node matches
/// waits saying so. Nothing is a failure: a node may be added.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_class_places_its_pod_on_a_node_with_its_devices() {
    use warren_types::machine::{MachineClass, Toleration};
    let Some(s) = setup().await else { return };
    advertise_fake_gpus(&s, Some(2)).await;
    let one = MachineClass {
        name: "fake-gpu".into(),
        cpu: Some("500m".into()),
        memory: Some("256Mi".into()),
        storage: Some("2Gi".into()),
        devices: [(FAKE_GPU.to_owned(), 1)].into(),
        node_selector: [(ACCELERATOR_LABEL.to_owned(), "fake".to_owned())].into(),
        tolerations: vec![Toleration {
            key: FAKE_GPU.into(),
            operator: Some("Exists".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    let (first, objs) = render_class(&s, "gpu1", &one);
    s.runtime.apply(&first, &objs).await.expect("apply");
    wait_state(&s, &first, ActualState::Running).await;
    let pods = live_pods(&s.client, &first).await;
    let pod = pods.first().expect("a pod");
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.node_name.as_deref(), Some(s.node.name.as_str()));
    assert_eq!(limit_of(pod, "dev", FAKE_GPU).as_deref(), Some("1"));
    assert_eq!(limit_of(pod, "dev", "cpu").as_deref(), Some("500m"));
    assert_eq!(
        spec.node_selector
            .as_ref()
            .and_then(|n| n.get(ACCELERATOR_LABEL))
            .map(String::as_str),
        Some("fake")
    );
    assert!(
        spec.tolerations
            .iter()
            .flatten()
            .any(|t| t.key.as_deref() == Some(FAKE_GPU)),
        "{:?}",
        spec.tolerations
    );
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(s.client.clone(), &first.namespace);
    let claim = claims
        .get(&format!("{}-warren-data", first.name))
        .await
        .expect("the data claim");
    let size = claim
        .spec
        .and_then(|c| c.resources)
        .and_then(|r| r.requests)
        .and_then(|r| r.get("storage").map(|q| q.0.clone()));
    assert_eq!(size.as_deref(), Some("2Gi"), "the class's storage");

    // Two more devices than are free: it waits, in the scheduler's words, and is not failed.
    let two = MachineClass {
        name: "fake-gpu-2".into(),
        devices: [(FAKE_GPU.to_owned(), 2)].into(),
        ..one.clone()
    };
    let (second, objs) = render_class(&s, "gpu2", &two);
    s.runtime.apply(&second, &objs).await.expect("apply");
    let why = wait_pod_waiting(&s, &second, &format!("Insufficient {FAKE_GPU}")).await;
    assert!(why.starts_with("0/1 nodes are available"), "{why}");
    // The first one gone, the scheduler places it by itself.
    terminate(&s, &first).await;
    let running = wait_state(&s, &second, ActualState::Running).await;
    assert!(running.pod_waiting.is_none(), "{running:?}");
    terminate(&s, &second).await;

    // A selector no node matches.
    let elsewhere = MachineClass {
        name: "elsewhere".into(),
        devices: Default::default(),
        node_selector: [("warren.dev/test-pool".to_owned(), "none-such".to_owned())].into(),
        ..one.clone()
    };
    let (third, objs) = render_class(&s, "nowhere", &elsewhere);
    s.runtime.apply(&third, &objs).await.expect("apply");
    // "node selector" (Kubernetes 1.20) or "Pod's node affinity/selector" (later ones).
    wait_pod_waiting(&s, &third, "didn't match").await;
    terminate(&s, &third).await;
    advertise_fake_gpus(&s, None).await;
}
