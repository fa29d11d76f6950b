//! Issue 23's "done when": `warren up --runtime kubernetes` on a real one-node cluster
//! (kubelet on containerd, `kube_common::node`), nothing patched by hand. A workspace created
//! through Warren runs there as a pod; its port is reached over HTTP through the proxy in
//! Chromium, the web terminal and OpenSSH run real execs through the agent, the relay and the
//! proxy (API server → kubelet → containerd), `warren ws logs` reads the kubelet's logs; then
//! it is stopped, started, restarted, resized and removed, and the cluster follows each step.
//!
//! Skips with a notice when the cluster's parts are missing (fails under
//! `WARREN_REQUIRE_KUBERNETES=1`) or without Chromium/OpenSSH (fails under
//! `WARREN_REQUIRE_TOOLS`).

use crate::kube_common;
use crate::support;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::Api;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::{api, Up, DEBIAN_DEVFILE, DEBIAN_IMAGE, TOOLS_IMAGE};
use warren_testkit::browser::Chromium;

/// The web devfile of the engine tests, on the node's image (a tag the kubelet never pulls),
/// saying hello on stdout first (for the logs).
fn devfile() -> String {
    let devfile = support::WEB_DEVFILE
        .replace(
            "localhost/warren-test:latest",
            kube_common::node::WORKSPACE_IMAGE,
        )
        .replace(
            "\"mkdir -p /tmp/www && ",
            "\"echo hello-from-the-pod $(id -u) && mkdir -p /tmp/www && ",
        );
    assert!(devfile.contains("hello-from-the-pod"), "{devfile}");
    devfile
}

/// The workspace's live pods in the cluster.
async fn pods(kube: &kube::Client, namespace: &str) -> Vec<Pod> {
    kube_common::live_pods(kube, namespace).await
}

/// The memory limit of the running pod's main container, as the kubelet was given it.
fn memory_limit(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "dev")?
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")
        .map(|q| q.0.clone())
}

fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[test]
fn with_warren_up_on_kubernetes_a_workspace_runs_on_the_node_and_is_reached_everywhere() {
    if !support::tools_available(&["ssh", "ssh-keygen"]) {
        return;
    }
    let Some(node) = kube_common::node::node_with_images(&[TOOLS_IMAGE, DEBIAN_IMAGE]) else {
        return;
    };
    let home = tempfile::tempdir().expect("temp home");
    let kubeconfig = node.kubeconfig().display().to_string();
    let mut up = Up::start_with(
        home,
        &[
            ("WARREN_UP_RUNTIME", "kubernetes"),
            ("KUBECONFIG", kubeconfig.as_str()),
        ],
    );
    let (http_port, ssh_port) = up.proxy_ports();
    let base = up.api_base();
    let admin = up.admin_token();
    let name = support::unique_name("kube");
    let crash = format!("{name}-crash");
    let editing = format!("{name}-ed");
    let namespace = format!("warren-ws-{name}");
    let dir = tempfile::tempdir().expect("temp dir");
    let known_hosts = dir.path().join("known_hosts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let diagnostics = |up: &Up| format!("{}\n{}", up.log(), node.diagnostics());

    let (password, token) = rt.block_on(async {
        let http = reqwest::Client::new();
        let (password, token) =
            support::user_with_key(&http, &base, &admin, "alice", dir.path()).await;
        // And one whose command fails at once: the kubelet restarts it and backs off.
        let crashing = devfile().replace(
            "\"echo hello-from-the-pod",
            "\"echo giving-up; exit 3; echo hello-from-the-pod",
        );
        // And one on a glibc image, where the injected editor runs.
        let with_editor = DEBIAN_DEVFILE.replace("1536Mi", "1Gi");
        for (workspace, devfile) in [
            (&name, devfile()),
            (&crash, crashing),
            (&editing, with_editor),
        ] {
            api(
                &http,
                &base,
                Some(&token),
                reqwest::Method::POST,
                "/workspaces",
                Some(json!({"name": workspace, "devfile": devfile})),
            )
            .await;
        }
        (password, token)
    });
    let workspace = |up: &Up, name: &str| -> Value {
        rt.block_on(api(
            &reqwest::Client::new(),
            &up.api_base(),
            Some(&token),
            reqwest::Method::GET,
            &format!("/workspaces/{name}"),
            None,
        ))
    };
    let wait_actual = |up: &Up, name: &str, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let w = workspace(up, name);
            if w["actual_state"] == want {
                return w;
            }
            assert!(
                Instant::now() < deadline,
                "workspace never {want}: {w}\n{}",
                diagnostics(up)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let kube = rt.block_on(node.client());

    // Created through Warren, scheduled onto the node, run by the kubelet.
    wait_actual(&up, &name, "Running");
    let running = rt.block_on(pods(&kube, &namespace));
    assert_eq!(running.len(), 1, "one pod");
    assert!(ready(&running[0]), "the pod is Ready");
    assert_eq!(
        running[0]
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref()),
        Some(node.name.as_str())
    );
    let first_pod = running[0].metadata.uid.clone();

    // HTTP through the proxy to the pod's port, and the web terminal, in Chromium.
    rt.block_on(async {
        let chromium = Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        support::page_shows(
            &mut tab,
            &format!("http://8080-{name}.ws.localhost:{http_port}/"),
            Some(("alice", &password)),
            "served-by-workspace",
            || diagnostics(&up),
        )
        .await;
        // The terminal is an exec with a PTY through the API server and the kubelet.
        support::terminal_shows(
            &mut tab,
            &format!("http://terminal-{name}.ws.localhost:{http_port}/"),
            "echo warren-$((6*7)) $(id -u):$(id -g) $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes); tty\r",
            "screen.includes('warren-42 5001:0 268435456') && screen.includes('/dev/pts/')",
        )
        .await;
        support::terminal_exits(&mut tab, 3).await;
    });

    // The injected editor listens on its pod's loopback: the owner reaches it through the
    // proxy (the agent forwards the port through the API server), while the pod's address —
    // which every pod and the node reach on this cluster, whose network enforces no
    // NetworkPolicy — has nothing on the editor's port (issue 37: a pod with a forged agent
    // label reached every user's editor, which has no password of its own).
    wait_actual(&up, &editing, "Running");
    rt.block_on(async {
        let chromium = Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        let editor_url = format!("http://13337-{editing}.ws.localhost:{http_port}/");
        tab.goto(&editor_url).await.expect("open the editor");
        support::sign_in(&mut tab, "alice", &password).await;
        let deadline = Instant::now() + Duration::from_secs(180);
        while tab
            .wait_until("document.querySelector('.monaco-workbench') !== null", 10)
            .await
            .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "no workbench through the proxy: {}\n{}",
                tab.text().await.unwrap_or_default(),
                diagnostics(&up)
            );
            // An empty answer while the editor starts is one more reason to reload.
            let _ = tab.goto(&editor_url).await;
        }
    });
    let ip_of = |namespace: &str| -> std::net::IpAddr {
        let pods = rt.block_on(pods(&kube, namespace));
        pods[0]
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .expect("a pod IP")
            .parse()
            .expect("an IP")
    };
    let editor_ip = ip_of(&format!("warren-ws-{editing}"));
    // The node reaches pods' addresses (the other workspace's web server answers there)...
    let web = std::net::TcpStream::connect_timeout(
        &(ip_of(&namespace), 8080).into(),
        Duration::from_secs(10),
    );
    assert!(web.is_ok(), "the node reaches a pod's port: {web:?}");
    // ...but the editor, running (its workbench just loaded), is not on its pod's address.
    let editor =
        std::net::TcpStream::connect_timeout(&(editor_ip, 13337).into(), Duration::from_secs(10));
    assert!(
        editor.is_err(),
        "the editor answered on the pod's address {editor_ip}:13337"
    );
    up.cli_ok(&["ws", "rm", &editing, "--wait", "--timeout", "4m"]);

    // SSH: a real exec in the pod, with stdin and the exit status.
    let key = dir.path().join("alice_ed25519");
    let mut ssh = support::ssh(&key, &known_hosts, ssh_port, &format!("{name}@127.0.0.1"));
    ssh.arg("read line; echo got-$line; hostname; echo kept > /projects/notes.txt; exit 7");
    let out = support::output_with_stdin(ssh, b"hello\n");
    assert_eq!(
        out.status.code(),
        Some(7),
        "ssh: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        diagnostics(&up)
    );
    let pod_name = running[0].metadata.name.clone().expect("pod name");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("got-hello\n{pod_name}\n"),
        "ran in the pod"
    );

    // The kubelet's logs of the main container, through `warren ws logs`.
    let logs = up.cli_ok(&["ws", "logs", &name]);
    assert!(logs.contains("hello-from-the-pod 5001"), "ws logs: {logs}");

    // Stop: the pod goes; start: a new pod, and the user's file is still on the volume.
    up.cli_ok(&["ws", "stop", &name, "--wait", "--timeout", "4m"]);
    assert!(
        rt.block_on(pods(&kube, &namespace)).is_empty(),
        "stopped means no pod"
    );
    up.cli_ok(&["ws", "start", &name, "--wait", "--timeout", "4m"]);
    let started = rt.block_on(pods(&kube, &namespace));
    assert_eq!(started.len(), 1);
    assert_ne!(started[0].metadata.uid, first_pod, "a new pod");
    let out = support::ssh(&key, &known_hosts, ssh_port, &format!("{name}@127.0.0.1"))
        .arg("cat /projects/notes.txt")
        .output()
        .expect("ssh");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "kept\n");

    // Restart: another pod; resize: the kubelet runs the new limit.
    let before = started[0].metadata.uid.clone();
    up.cli_ok(&["ws", "restart", &name, "--wait", "--timeout", "4m"]);
    let restarted = rt.block_on(pods(&kube, &namespace));
    assert_eq!(restarted.len(), 1);
    assert_ne!(restarted[0].metadata.uid, before, "restart made a new pod");
    up.cli_ok(&[
        "ws",
        "resize",
        &name,
        "--memory",
        "512Mi",
        "--wait",
        "--timeout",
        "4m",
    ]);
    let resized = rt.block_on(pods(&kube, &namespace));
    assert_eq!(resized.len(), 1, "one pod after the resize");
    assert_eq!(memory_limit(&resized[0]).as_deref(), Some("512Mi"));
    let out = support::ssh(&key, &known_hosts, ssh_port, &format!("{name}@127.0.0.1"))
        .arg("cat /sys/fs/cgroup/memory/memory.limit_in_bytes")
        .output()
        .expect("ssh");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (512u64 << 20).to_string(),
        "the new limit is the container's"
    );

    // The failing one is Failed, with the kubelet's reason and how the container ended.
    let failed = wait_actual(&up, &crash, "Failed");
    let reason = failed["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("CrashLoopBackOff: container dev exited with code 3"),
        "{failed}"
    );
    let logs = up.cli_ok(&["ws", "logs", &crash]);
    assert!(
        logs.contains("giving-up"),
        "the crashed container's output: {logs}"
    );
    up.cli_ok(&["ws", "rm", &crash, "--wait", "--timeout", "4m"]);

    // Remove: the namespace and everything in it are gone.
    up.cli_ok(&["ws", "rm", &name, "--wait", "--timeout", "4m"]);
    let gone = rt.block_on(Api::<Namespace>::all(kube.clone()).get_opt(&namespace));
    assert!(matches!(gone, Ok(None)), "namespace left: {gone:?}");
    let status = up.stop();
    assert!(status.success(), "warren up exit: {status}\n{}", up.log());
}
