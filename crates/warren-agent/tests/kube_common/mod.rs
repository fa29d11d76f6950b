//! A real Kubernetes control plane for tests: etcd, kube-apiserver and kube-controller-manager
//! on loopback and free ports, built by `.ci/setup-kubernetes.sh`, shared by the tests of one
//! test binary.
//!
//! Every process runs under a small `sh` supervisor whose stdin is a pipe from the test
//! process: when the test process ends in any way (success, panic, abort), the pipe closes and
//! the supervisor kills its process and removes the data directory. That is what cleans up
//! the shared cluster, since statics are never dropped; a `Cluster` that is dropped (one
//! started for a single test) closes the pipes itself.

#![allow(dead_code)]

use anyhow::{bail, Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Kills the child when the supervisor's stdin closes (SIGTERM, then SIGKILL after 10 s: an
/// API server whose etcd went first may never finish its graceful shutdown), then removes
/// `$CLEANUP` if set.
const SUPERVISOR: &str = r#"
"$@" >"$LOG" 2>&1 &
pid=$!
cat >/dev/null
kill "$pid" 2>/dev/null
i=0
while kill -0 "$pid" 2>/dev/null && [ $i -lt 100 ]; do
  sleep 0.1
  i=$((i + 1))
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
if [ -n "$CLEANUP" ]; then rm -rf "$CLEANUP"; fi
"#;

const TOKEN: &str = "warren-test-admin-token";

/// A running control plane.
pub struct Cluster {
    pub url: String,
    pub dir: PathBuf,
    kubeconfig: String,
    supervisors: Mutex<Vec<Child>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Ok(mut children) = self.supervisors.lock() {
            // Closing stdin makes each supervisor stop its process; newest (controllers) first.
            for child in children.iter_mut().rev() {
                drop(child.stdin.take());
            }
            for child in children.iter_mut().rev() {
                let _ = child.wait();
            }
        }
    }
}

impl Cluster {
    /// A fresh client; one per test, because a client belongs to the tokio runtime it was
    /// first used on and every `#[tokio::test]` has its own.
    pub async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::from_yaml(&self.kubeconfig).expect("test kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .expect("test kube config");
        Client::try_from(config).expect("kube client")
    }

    /// The tail of a component's log, for failure messages.
    pub fn log_tail(&self, component: &str) -> String {
        let text =
            std::fs::read_to_string(self.dir.join(format!("{component}.log"))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

/// Where the binaries are: `$WARREN_K8S_BIN`, else `$WARREN_K8S_CACHE/bin`, else the default
/// cache `/var/cache/warren-k8s/bin`.
pub fn binaries_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WARREN_K8S_BIN") {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("WARREN_K8S_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/warren-k8s"));
    cache.join("bin")
}

fn etcd_binary(dir: &Path) -> Option<PathBuf> {
    let local = dir.join("etcd");
    if local.is_file() {
        return Some(local);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("etcd"))
            .find(|p| p.is_file())
    })
}

static CLUSTER: OnceLock<Option<Cluster>> = OnceLock::new();

/// The shared cluster of this test binary, started on first use; `None` (after a notice)
/// when the binaries are missing, unless `WARREN_REQUIRE_KUBERNETES=1`, which makes it fail.
pub fn cluster() -> Option<&'static Cluster> {
    CLUSTER
        .get_or_init(|| {
            let dir = binaries_dir();
            let apiserver = dir.join("kube-apiserver");
            let etcd = etcd_binary(&dir);
            let missing = !apiserver.is_file()
                || !dir.join("kube-controller-manager").is_file()
                || etcd.is_none();
            if missing {
                let notice = format!(
                    "no kube-apiserver/kube-controller-manager in {} or no etcd on PATH \
                     (run .ci/setup-kubernetes.sh or set WARREN_K8S_BIN)",
                    dir.display()
                );
                if std::env::var("WARREN_REQUIRE_KUBERNETES").as_deref() == Ok("1") {
                    panic!("WARREN_REQUIRE_KUBERNETES=1 but {notice}");
                }
                eprintln!("skipping: {notice}");
                return None;
            }
            let started = Instant::now();
            // Started on its own thread: the caller is inside a tokio runtime already.
            let cluster = std::thread::spawn(move || start(&dir, &etcd.expect("checked")))
                .join()
                .expect("cluster start thread")
                .unwrap_or_else(|e| panic!("starting the test Kubernetes control plane: {e:#}"));
            eprintln!(
                "test Kubernetes control plane ready in {:?} at {}",
                started.elapsed(),
                cluster.url
            );
            Some(cluster)
        })
        .as_ref()
}

/// A free loopback port, never one this helper handed out before: the kernel may give two
/// binds in a row the same free port, and two services told one port fail (CI once started
/// an API server on etcd's client port).
fn free_port() -> Result<u16> {
    static GIVEN: Mutex<std::collections::BTreeSet<u16>> =
        Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return Ok(port);
        }
    }
}

fn run(cmd: &mut Command) -> Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

fn supervise(
    dir: &Path,
    name: &str,
    cleanup: bool,
    program: &Path,
    args: &[String],
) -> Result<Child> {
    Command::new("sh")
        .arg("-c")
        .arg(SUPERVISOR)
        .arg("sh")
        .arg(program)
        .args(args)
        .env("LOG", dir.join(format!("{name}.log")))
        .env(
            "CLEANUP",
            if cleanup {
                dir.as_os_str()
            } else {
                "".as_ref()
            },
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C meant for the tests must not kill the supervisor
        // before it has stopped its process (the test process's end closes the pipe).
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting {name}"))
}

/// What a control plane runs beyond the API server and the workload controllers.
#[derive(Debug, Default, Clone)]
pub struct ControlPlaneOptions {
    /// More kube-apiserver flags.
    pub apiserver_args: Vec<String>,
    /// More controllers of kube-controller-manager (comma-separated names).
    pub more_controllers: Vec<&'static str>,
    /// Also run kube-scheduler (a cluster with a node).
    pub scheduler: bool,
}

/// Starts etcd, kube-apiserver and kube-controller-manager and waits until the API server is
/// ready; the returned cluster stops them all when dropped.
pub fn start(bin: &Path, etcd: &Path) -> Result<Cluster> {
    start_with(bin, etcd, &ControlPlaneOptions::default())
}

/// [`start`] with `options`.
pub fn start_with(bin: &Path, etcd: &Path, options: &ControlPlaneOptions) -> Result<Cluster> {
    let dir = tempfile::Builder::new()
        .prefix("warren-k8s-test-")
        .tempdir()?
        .keep();
    let mut cluster = Cluster {
        url: String::new(),
        dir: dir.clone(),
        kubeconfig: String::new(),
        supervisors: Mutex::new(Vec::new()),
    };
    let path = |p: &str| dir.join(p).display().to_string();

    // Service-account signing keys and the static admin token.
    run(Command::new("openssl")
        .args(["genrsa", "-out", &path("sa.key"), "2048"])
        .stderr(Stdio::null()))?;
    run(Command::new("openssl").args([
        "rsa",
        "-in",
        &path("sa.key"),
        "-pubout",
        "-out",
        &path("sa.pub"),
    ]))?;
    std::fs::write(
        dir.join("tokens.csv"),
        format!("{TOKEN},admin,admin,\"system:masters\"\n"),
    )?;

    let (etcd_client, etcd_peer) = (free_port()?, free_port()?);
    let etcd_url = format!("http://127.0.0.1:{etcd_client}");
    let peer_url = format!("http://127.0.0.1:{etcd_peer}");
    let etcd_args = vec![
        format!("--data-dir={}", path("etcd")),
        "--name=default".into(),
        format!("--listen-client-urls={etcd_url}"),
        format!("--advertise-client-urls={etcd_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=default={peer_url}"),
    ];
    // etcd's supervisor also removes the directory, after etcd stopped.
    let child = supervise(&dir, "etcd", true, etcd, &etcd_args)?;
    cluster.supervisors.lock().expect("fresh").push(child);

    let port = free_port()?;
    cluster.url = format!("https://127.0.0.1:{port}");
    let apiserver_args = vec![
        format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        "--insecure-port=0".into(),
        format!("--cert-dir={}", path("certs")),
        format!("--token-auth-file={}", path("tokens.csv")),
        format!("--service-account-key-file={}", path("sa.pub")),
        format!("--service-account-signing-key-file={}", path("sa.key")),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        "--service-cluster-ip-range=10.96.0.0/24".into(),
        "--authorization-mode=RBAC".into(),
        "--allow-privileged=false".into(),
    ];
    let apiserver_args: Vec<String> = apiserver_args
        .into_iter()
        .chain(options.apiserver_args.iter().cloned())
        .collect();
    let child = supervise(
        &dir,
        "kube-apiserver",
        false,
        &bin.join("kube-apiserver"),
        &apiserver_args,
    )?;
    cluster.supervisors.lock().expect("fresh").push(child);

    cluster.kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n    \
         insecure-skip-tls-verify: true\nusers:\n- name: admin\n  user:\n    token: {TOKEN}\n\
         contexts:\n- name: test\n  context:\n    cluster: test\n    user: admin\n    \
         namespace: default\ncurrent-context: test\n",
        cluster.url
    );
    std::fs::write(dir.join("kubeconfig"), &cluster.kubeconfig)?;

    wait_ready(&cluster).with_context(|| {
        format!(
            "kube-apiserver not ready; its log:\n{}\netcd log:\n{}",
            cluster.log_tail("kube-apiserver"),
            cluster.log_tail("etcd")
        )
    })?;

    let cm_args = vec![
        format!("--kubeconfig={}", path("kubeconfig")),
        "--leader-elect=false".into(),
        "--port=0".into(),
        format!("--secure-port={}", free_port()?),
        "--bind-address=127.0.0.1".into(),
        format!("--cert-dir={}", path("cm-certs")),
        // What turns Deployments into pods, cleans up deleted namespaces and owned objects,
        // and lets PVCs go once no pod uses them; node and cloud controllers are not wanted.
        format!(
            "--controllers=deployment,replicaset,namespace,garbagecollector,serviceaccount,\
             serviceaccount-token,pvc-protection,resourcequota{}",
            options
                .more_controllers
                .iter()
                .map(|c| format!(",{c}"))
                .collect::<String>()
        ),
        format!("--service-account-private-key-file={}", path("sa.key")),
        "--use-service-account-credentials=false".into(),
    ];
    let child = supervise(
        &dir,
        "kube-controller-manager",
        false,
        &bin.join("kube-controller-manager"),
        &cm_args,
    )?;
    cluster.supervisors.lock().expect("fresh").push(child);
    if options.scheduler {
        let scheduler_args = vec![
            format!("--kubeconfig={}", path("kubeconfig")),
            "--leader-elect=false".into(),
            "--port=0".into(),
            format!("--secure-port={}", free_port()?),
            "--bind-address=127.0.0.1".into(),
        ];
        let child = supervise(
            &dir,
            "kube-scheduler",
            false,
            &bin.join("kube-scheduler"),
            &scheduler_args,
        )?;
        cluster.supervisors.lock().expect("fresh").push(child);
    }
    Ok(cluster)
}

/// Polls `/readyz` with the admin token until it answers 200 (deadline 90 s: the machine may
/// be busy).
fn wait_ready(cluster: &Cluster) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()?;
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            match http
                .get(format!("{}/readyz", cluster.url))
                .bearer_auth(TOKEN)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = format!("status {}", r.status()),
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("/readyz did not answer 200 within 90 s (last: {last})")
    })
}

/// What the agent reports for an observed workspace (no termination, no error).
pub fn info_of(
    o: &warren_agent::runtime::ObservedWorkspace,
) -> warren_types::reconcile::WorkspaceAgentInfo {
    warren_types::reconcile::WorkspaceAgentInfo {
        name: o.key.name.clone(),
        namespace: o.key.namespace.clone(),
        latest_k8s_deployment_info: o.deployment.clone(),
        termination_progress: None,
        error_details: None,
        pod_failure: o.pod_failure.clone(),
        pod_waiting: o.pod_waiting.clone(),
    }
}

/// The state the server derives from what the runtime observed.
pub fn derived_state(
    o: &warren_agent::runtime::ObservedWorkspace,
) -> warren_types::state::ActualState {
    warren_types::lifecycle::derive_actual_state(&info_of(o))
}

/// The pods of `namespace` that are not being deleted (none when the API does not answer).
pub async fn live_pods(client: &Client, namespace: &str) -> Vec<k8s_openapi::api::core::v1::Pod> {
    kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), namespace)
        .list(&kube::api::ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// Polls `check` every 50 ms until it returns `Some`, failing after `secs` with `what`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
pub mod fixtures;
pub mod node;

/// What `runtime` lists for workspace `key`, if anything.
pub async fn observed(
    runtime: &warren_agent::runtime::kubernetes::KubernetesRuntime,
    key: &warren_agent::runtime::WorkspaceKey,
) -> Option<warren_agent::runtime::ObservedWorkspace> {
    use warren_agent::runtime::WorkspaceRuntime;
    runtime
        .list()
        .await
        .expect("list")
        .into_iter()
        .find(|o| &o.key == key)
}
