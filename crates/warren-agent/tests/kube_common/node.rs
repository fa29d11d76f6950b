//! A whole one-node Kubernetes cluster for tests: the control plane of [`super::start_with`]
//! with kube-scheduler and the volume binder, and a kubelet on its own containerd (runc, a
//! bridge CNI network, images imported from Podman: no registry is reachable), plus a
//! local-path volume provisioner run by the kit. Everything is built or installed by
//! `.ci/setup-kubernetes.sh`.
//!
//! containerd and the kubelet run in a private mount namespace (`unshare --mount`), with a
//! private `/run/netns`, and in a cgroup tree of their own (`--cgroup-root`), so that
//! teardown is complete whatever state the test left: killing every process of that cgroup
//! tree ends the namespace, which takes every overlay, volume and network-namespace mount with
//! it; then the cgroups, the bridge and the directory go. The supervisor shell does this
//! when its stdin closes, so a test process that panics or aborts still cleans up.

use super::{free_port, run, start_with, Cluster, ControlPlaneOptions};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Node as KubeNode, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Client;
use serde_json::json;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The pause image the sandboxes run (`pause` compiled from the Kubernetes source package).
pub const PAUSE_IMAGE: &str = "localhost/warren-pause:3.4.1";
/// The workspace image of the tests (busybox, `setup-podman.sh image`) under a tag that is not
/// `latest`, so the kubelet's default pull policy is `IfNotPresent` and it never tries to pull.
pub const WORKSPACE_IMAGE: &str = "localhost/warren-test:node";
/// The storage class of the kit's provisioner, the cluster's default.
pub const STORAGE_CLASS: &str = "warren-local-path";
const PROVISIONER: &str = "warren.dev/test-local-path";

/// Kills the node when the supervisor's stdin closes (or it is signalled): the kubelet, then
/// every process of the cgroup tree (containerd, shims, containers), then the cgroups, the
/// bridge and the directory, and puts back the kernel settings the kubelet and the bridge
/// plugin change. It runs in a process group of its own, so a Ctrl-C meant for the tests
/// does not kill it before it has cleaned up.
const NODE_SUPERVISOR: &str = r#"
sysctls="vm.overcommit_memory kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward"
saved=""
for k in $sysctls; do
  v="$(sysctl -n "$k" 2>/dev/null)" && saved="$saved $k=$v"
done
unshare --mount --propagation private sh -c "$INNER" >"$DIR/node.log" 2>&1 &
inner=$!
trap '' INT HUP
trap 'kill $cat_pid 2>/dev/null' TERM
# In the background (so TERM is handled at once), reading the pipe through fd 3: a
# background job's own stdin is /dev/null.
exec 3<&0
cat <&3 >/dev/null &
cat_pid=$!
wait $cat_pid
kill -9 "$inner" 2>/dev/null
wait "$inner" 2>/dev/null
procs() { find "/sys/fs/cgroup/pids/$CG" -name cgroup.procs -exec cat {} + 2>/dev/null; }
i=0
while [ $i -lt 100 ]; do
  p="$(procs)"
  [ -z "$p" ] && break
  kill -9 $p 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done
for h in /sys/fs/cgroup/*/; do
  [ -d "$h$CG" ] && find "$h$CG" -depth -type d -exec rmdir {} + 2>/dev/null
done
ip link del "$BRIDGE" 2>/dev/null
for kv in $saved; do sysctl -q -w "$kv" >/dev/null 2>&1; done
rm -rf "$DIR"
"#;

/// Runs in the private mount namespace: joins the cgroup tree, starts containerd, imports
/// the images and runs the kubelet.
const NODE_INNER: &str = r#"
set -e
# Says why the node never started (the kubelet replaces this shell when all went well).
trap 'echo "$?" >"$DIR/inner.exit"' EXIT
for h in /sys/fs/cgroup/*/; do
  case "$h" in */unified/) continue ;; esac
  mkdir -p "$h$CG/system"
done
for d in "$CG" "$CG/system"; do
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$d/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$d/cpuset.mems"
done
for h in /sys/fs/cgroup/*/; do
  case "$h" in */unified/) continue ;; esac
  echo $$ >"$h$CG/system/cgroup.procs"
done
# What containerd, runc, the CNI plugins and the kubelet keep at fixed host paths stays in
# this namespace (and its directory).
for d in /run/netns /run/containerd; do
  mkdir -p "$d"
  mount -t tmpfs tmpfs "$d"
done
for d in /var/log/pods /var/log/containers /var/lib/cni; do
  mkdir -p "$d" "$DIR/host$d"
  mount --bind "$DIR/host$d" "$d"
done
containerd --config "$DIR/containerd.toml" >"$DIR/containerd.log" 2>&1 &
i=0
until ctr -a "$DIR/containerd.sock" version >/dev/null 2>&1; do
  i=$((i + 1))
  [ $i -gt 300 ] && { echo "containerd did not answer"; exit 1; }
  sleep 0.1
done
for image in "$DIR"/images/*.tar; do
  ctr -a "$DIR/containerd.sock" -n k8s.io images import "$image"
done
echo images imported
exec "$KUBELET" "$@" >"$DIR/kubelet.log" 2>&1
"#;

const CONTAINERD_CONFIG: &str = r#"version = 2
root = "@DIR@/containerd/root"
state = "@DIR@/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "@DIR@/containerd.sock"
[ttrpc]
  address = "@DIR@/containerd.ttrpc.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "@DIR@/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "@PAUSE@"
  # No CAP_SYS_RESOURCE here: scores below containerd's own cannot be set.
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "runc"
        Root = "@DIR@/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "@DIR@/cni"
  # Registries' CAs as Podman trusts them (`<registry>/*.crt`): tests' private registries
  # (the build registry) are trusted by both.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containers/certs.d"
"#;

/// A running one-node cluster.
pub struct Node {
    /// The control plane (dropped after the node).
    pub cluster: Cluster,
    /// The node's name.
    pub name: String,
    /// The bridge's address on the host: the node's IP, from which pod IPs are reachable.
    pub gateway: String,
    /// Where the node keeps its files (and its logs: `node.log`, `containerd.log`,
    /// `kubelet.log`).
    pub node_dir: PathBuf,
    supervisor: Mutex<Option<Child>>,
    stop_provisioner: Arc<AtomicBool>,
    provisioner: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_provisioner.store(true, Ordering::SeqCst);
        if let Some(handle) = self.provisioner.lock().ok().and_then(|mut h| h.take()) {
            let _ = handle.join();
        }
        if let Some(mut child) = self.supervisor.lock().ok().and_then(|mut c| c.take()) {
            drop(child.stdin.take());
            let _ = child.wait();
        }
    }
}

impl Node {
    /// A fresh client (see [`Cluster::client`]).
    pub async fn client(&self) -> Client {
        self.cluster.client().await
    }

    /// The tail of a node component's log (`kubelet`, `containerd`, `node`), for failures.
    pub fn log_tail(&self, component: &str) -> String {
        let text = std::fs::read_to_string(self.node_dir.join(format!("{component}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Every log's tail, for a failing test's message.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for c in ["kubelet", "containerd", "node"] {
            out.push_str(&format!("--- {c}.log ---\n{}\n", self.log_tail(c)));
        }
        for c in [
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
        ] {
            out.push_str(&format!("--- {c}.log ---\n{}\n", self.cluster.log_tail(c)));
        }
        out
    }

    /// The kubeconfig file of the cluster's admin.
    pub fn kubeconfig(&self) -> PathBuf {
        self.cluster.dir.join("kubeconfig")
    }
}

/// The node, none (skipped), or why it did not start: every test of the binary then fails
/// with that reason instead of starting a cluster again.
static NODE: OnceLock<Result<Option<Node>, String>> = OnceLock::new();

/// What a node needs that may be missing from this machine; `None` when all is there.
fn missing_parts(bin: &Path) -> Option<String> {
    let mut missing = Vec::new();
    for b in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubelet",
        "pause",
    ] {
        if !bin.join(b).is_file() {
            missing.push(bin.join(b).display().to_string());
        }
    }
    for program in [
        "containerd",
        "ctr",
        "runc",
        "unshare",
        "ip",
        "podman",
        "etcd",
    ] {
        if !on_path(program) {
            missing.push(format!("{program} on PATH"));
        }
    }
    let root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|l| l.split_whitespace().nth(1))
            == Some("0")
    });
    if !root {
        missing.push("root (the kubelet and containerd need it)".into());
    }
    if !Path::new("/sys/fs/cgroup/pids/cgroup.procs").is_file() {
        missing.push(
            "cgroup v1 hierarchies under /sys/fs/cgroup (the kit's teardown uses them)".into(),
        );
    }
    if !Path::new("/usr/lib/cni/bridge").is_file() {
        missing.push("/usr/lib/cni/bridge (containernetworking-plugins)".into());
    }
    if missing.is_empty() {
        None
    } else {
        Some(missing.join(", "))
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join(program).is_file()))
        || Path::new("/usr/sbin").join(program).is_file()
}

/// The shared one-node cluster of this test binary, started on first use; `None` (after a
/// notice) when a part is missing, unless `WARREN_REQUIRE_KUBERNETES=1`, which makes it fail.
pub fn node() -> Option<&'static Node> {
    node_with_images(&[])
}

/// [`node`], with more images from Podman imported into the node (those of the first call
/// in this test binary).
pub fn node_with_images(extra: &[&str]) -> Option<&'static Node> {
    let extra: Vec<String> = extra.iter().map(|s| (*s).to_owned()).collect();
    let started = NODE.get_or_init(move || {
        let bin = super::binaries_dir();
        if let Some(missing) = missing_parts(&bin) {
            let notice = format!(
                "no one-node Kubernetes cluster: missing {missing} (run .ci/setup-kubernetes.sh \
                 and .ci/setup-podman.sh)"
            );
            if std::env::var("WARREN_REQUIRE_KUBERNETES").as_deref() == Ok("1") {
                panic!("WARREN_REQUIRE_KUBERNETES=1 but {notice}");
            }
            eprintln!("skipping: {notice}");
            return Ok(None);
        }
        let started = Instant::now();
        let node = std::thread::spawn(move || start_node(&bin, &extra))
            .join()
            .map_err(|_| "the node start thread panicked".to_owned())?
            .map_err(|e| format!("{e:#}"))?;
        eprintln!(
            "one-node Kubernetes cluster {} ready in {:?} at {}",
            node.name,
            started.elapsed(),
            node.cluster.url
        );
        Ok(Some(node))
    });
    match started {
        Ok(node) => node.as_ref(),
        Err(e) => panic!("starting the one-node Kubernetes cluster: {e}"),
    }
}

/// A /24 of 10.200.0.0/13 and a bridge name, distinct per process and per call.
fn network() -> (String, String) {
    use std::sync::atomic::AtomicU32;
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id();
    let spread = (pid.wrapping_mul(31).wrapping_add(n)) % (8 * 256);
    let subnet = format!("10.{}.{}", 200 + spread / 256, spread % 256);
    let bridge = format!("wrn{:x}", (pid << 4 | (n & 0xf)) & 0xff_ffff);
    (subnet, bridge)
}

/// Starts the control plane, then the node, and waits until the node is Ready.
pub fn start_node(bin: &Path, extra_images: &[String]) -> Result<Node> {
    let etcd = super::etcd_binary(bin).context("etcd")?;
    let cluster = start_with(
        bin,
        &etcd,
        &ControlPlaneOptions {
            apiserver_args: vec!["--kubelet-preferred-address-types=InternalIP".into()],
            // nodelifecycle lifts the not-ready taint the kubelet registers its node with.
            more_controllers: vec![
                "persistentvolume-binder",
                "pv-protection",
                "endpoint",
                "nodelifecycle",
            ],
            scheduler: true,
        },
    )?;
    // Removed on an early error; once the supervisor runs, it removes the directory.
    let node_tmp = tempfile::Builder::new()
        .prefix("warren-k8s-node-")
        .tempdir()?;
    let node_dir = node_tmp.path().to_path_buf();
    let (subnet, bridge) = network();
    let gateway = format!("{subnet}.1");
    let cgroup_root = format!(
        "warren-k8s-{}",
        node_dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("node")
            .trim_start_matches("warren-k8s-node-")
    );
    let name = format!("warren-node-{}", std::process::id());
    let dir = node_dir.display().to_string();

    std::fs::write(
        node_dir.join("containerd.toml"),
        CONTAINERD_CONFIG
            .replace("@DIR@", &dir)
            .replace("@PAUSE@", PAUSE_IMAGE),
    )?;
    std::fs::create_dir_all(node_dir.join("cni"))?;
    std::fs::write(
        node_dir.join("cni/10-warren.conflist"),
        serde_json::to_string_pretty(&json!({
            "cniVersion": "0.4.0",
            "name": "warren-test",
            "plugins": [{
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                // The host reaches pods on the bridge; nothing needs NAT (and no rule is left
                // in the host's tables).
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": format!("{subnet}.0/24"), "gateway": gateway}]],
                    "dataDir": format!("{dir}/cni-ipam"),
                },
            }],
        }))?,
    )?;
    std::fs::write(
        node_dir.join("resolv.conf"),
        "nameserver 127.0.0.1\noptions ndots:1\n",
    )?;
    export_images(bin, &node_dir, extra_images)?;

    // The bridge exists before the kubelet starts: its address is the node's IP.
    run(Command::new("ip").args(["link", "add", &bridge, "type", "bridge"]))?;
    let mut bridge_guard = BridgeGuard(Some(bridge.clone()));
    run(Command::new("ip").args(["addr", "add", &format!("{gateway}/24"), "dev", &bridge]))?;
    run(Command::new("ip").args(["link", "set", &bridge, "up"]))?;

    let kubelet_args = vec![
        format!("--kubeconfig={}", cluster.dir.join("kubeconfig").display()),
        format!("--root-dir={dir}/kubelet"),
        format!("--cert-dir={dir}/kubelet-pki"),
        "--container-runtime=remote".into(),
        format!("--container-runtime-endpoint=unix://{dir}/containerd.sock"),
        "--runtime-request-timeout=2m".into(),
        format!("--hostname-override={name}"),
        format!("--node-ip={gateway}"),
        // The API server reaches the kubelet on the node's IP; nothing else should (it lets
        // anyone in: a test node).
        format!("--address={gateway}"),
        format!("--port={}", free_port()?),
        "--read-only-port=0".into(),
        format!("--healthz-port={}", free_port()?),
        "--healthz-bind-address=127.0.0.1".into(),
        "--cgroup-driver=cgroupfs".into(),
        format!("--cgroup-root=/{cgroup_root}"),
        "--fail-swap-on=false".into(),
        "--oom-score-adj=0".into(),
        "--anonymous-auth=true".into(),
        "--authorization-mode=AlwaysAllow".into(),
        format!("--pod-infra-container-image={PAUSE_IMAGE}"),
        // Never evict or collect the imported images: they cannot be pulled again.
        "--eviction-hard=".into(),
        "--image-gc-high-threshold=100".into(),
        "--image-gc-low-threshold=99".into(),
        // The host's iptables are not the kit's to change.
        "--make-iptables-util-chains=false".into(),
        format!("--resolv-conf={dir}/resolv.conf"),
        format!("--volume-plugin-dir={dir}/volume-plugins"),
        "--serialize-image-pulls=false".into(),
        "--node-status-update-frequency=2s".into(),
        "--v=1".into(),
    ];
    let kubelet = bin.join("kubelet");
    let mut supervisor = Command::new("sh");
    supervisor
        .arg("-c")
        .arg(NODE_SUPERVISOR)
        .env("DIR", &node_dir)
        .env("CG", &cgroup_root)
        .env("BRIDGE", &bridge)
        .env("KUBELET", &kubelet)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0);
    // The kubelet's arguments reach the inner script as its positional parameters.
    let inner = format!(
        "set -- {}\n{NODE_INNER}",
        kubelet_args
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ")
    );
    supervisor.env("INNER", inner);
    let child = supervisor.spawn().context("starting the node supervisor")?;
    // The supervisor owns the bridge and the directory from now on.
    bridge_guard.0 = None;
    let _ = node_tmp.keep();
    let stop_provisioner = Arc::new(AtomicBool::new(false));
    let node = Node {
        cluster,
        name,
        gateway,
        node_dir,
        supervisor: Mutex::new(Some(child)),
        stop_provisioner: stop_provisioner.clone(),
        provisioner: Mutex::new(None),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime
        .block_on(async {
            let client = node.client().await;
            storage_class(&client).await?;
            wait_node_ready(&node, &client).await
        })
        .with_context(|| format!("the node did not become Ready\n{}", node.diagnostics()))?;
    drop(runtime);
    let volumes = node.node_dir.join("volumes");
    std::fs::create_dir_all(&volumes)?;
    let kubeconfig = std::fs::read_to_string(node.kubeconfig())?;
    let handle = std::thread::spawn(move || provisioner(kubeconfig, volumes, stop_provisioner));
    *node.provisioner.lock().expect("fresh") = Some(handle);
    Ok(node)
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Deletes the bridge when node start fails before the supervisor owns it.
struct BridgeGuard(Option<String>);

impl Drop for BridgeGuard {
    fn drop(&mut self) {
        if let Some(bridge) = self.0.take() {
            let _ = Command::new("ip")
                .args(["link", "del", &bridge])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Writes the pause image (from the `pause` binary) and the workspace image (from Podman) as
/// archives that the node imports into containerd.
fn export_images(bin: &Path, dir: &Path, extra: &[String]) -> Result<()> {
    let images = dir.join("images");
    std::fs::create_dir_all(&images)?;
    let have_pause = Command::new("podman")
        .args(["image", "exists", PAUSE_IMAGE])
        .status()
        .is_ok_and(|s| s.success());
    if !have_pause {
        let rootfs = tempfile::tempdir()?;
        std::fs::copy(bin.join("pause"), rootfs.path().join("pause"))?;
        let layer = dir.join("pause-rootfs.tar");
        run(Command::new("tar")
            .arg("-C")
            .arg(rootfs.path())
            .arg("-cf")
            .arg(&layer)
            .arg("."))?;
        run(Command::new("podman")
            .args(["import", "--change", r#"ENTRYPOINT ["/pause"]"#])
            .arg(&layer)
            .arg(PAUSE_IMAGE)
            .stdout(Stdio::null()))?;
        std::fs::remove_file(&layer)?;
    }
    run(Command::new("podman").args(["tag", "localhost/warren-test:latest", WORKSPACE_IMAGE]))
        .context("tagging the workspace image (run .ci/setup-podman.sh image)")?;
    let all = [PAUSE_IMAGE, WORKSPACE_IMAGE]
        .into_iter()
        .chain(extra.iter().map(String::as_str));
    for (n, image) in all.enumerate() {
        run(Command::new("podman")
            .args(["save", "-q", "--format", "docker-archive", "-o"])
            .arg(images.join(format!("{n}.tar")))
            .arg(image))
        .with_context(|| format!("exporting {image} from Podman for the node"))?;
    }
    Ok(())
}

/// Makes the kit's provisioner the cluster's default storage class.
async fn storage_class(client: &Client) -> Result<()> {
    let class: StorageClass = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": STORAGE_CLASS,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
    }))?;
    Api::<StorageClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await
        .context("creating the storage class")?;
    Ok(())
}

/// Waits (up to 180 s) for the node to register and report Ready.
async fn wait_node_ready(node: &Node, client: &Client) -> Result<()> {
    let nodes: Api<KubeNode> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut last = String::from("not registered");
    while Instant::now() < deadline {
        if let Ok(Some(n)) = nodes.get_opt(&node.name).await {
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
            let tainted = n
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|t| !t.is_empty());
            match ready {
                Some(c) if c.status == "True" && !tainted => return Ok(()),
                Some(c) if c.status == "True" => last = "Ready but still tainted".into(),
                Some(c) => {
                    last = format!(
                        "Ready={} ({})",
                        c.status,
                        c.message.clone().unwrap_or_default()
                    )
                }
                None => last = "no Ready condition".into(),
            }
        }
        if let Ok(code) = std::fs::read_to_string(node.node_dir.join("inner.exit")) {
            bail!(
                "the node's start script failed (exit {}): {}",
                code.trim(),
                node.log_tail("node")
            );
        }
        if let Some(status) = node
            .supervisor
            .lock()
            .ok()
            .and_then(|mut c| c.as_mut().and_then(|c| c.try_wait().ok().flatten()))
        {
            bail!("the node's supervisor exited ({status})");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("node {} not Ready within 180 s (last: {last})", node.name)
}

/// The kit's local-path provisioner: every claim of [`STORAGE_CLASS`] without a volume gets a
/// hostPath volume on a fresh directory (mode 0777, as local-path-provisioner makes them, so
/// any user of the pod can write), and a released volume is deleted with its directory.
fn provisioner(kubeconfig: String, volumes: PathBuf, stop: Arc<AtomicBool>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    runtime.block_on(async move {
        let Ok(config) = kube::config::Kubeconfig::from_yaml(&kubeconfig) else {
            return;
        };
        let Ok(config) = kube::Config::from_custom_kubeconfig(
            config,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        else {
            return;
        };
        let Ok(client) = Client::try_from(config) else {
            return;
        };
        while !stop.load(Ordering::SeqCst) {
            if let Err(e) = provision_once(&client, &volumes).await {
                eprintln!("test provisioner: {e:#}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

async fn provision_once(client: &Client, volumes: &Path) -> Result<()> {
    let claims: Api<PersistentVolumeClaim> = Api::all(client.clone());
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    for claim in claims.list(&ListParams::default()).await?.items {
        let spec = claim.spec.clone().unwrap_or_default();
        let class = spec.storage_class_name.as_deref();
        if class != Some(STORAGE_CLASS) || spec.volume_name.is_some() {
            continue;
        }
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(uid), Some(namespace), Some(claim_name)) = (
            claim.metadata.uid.clone(),
            claim.metadata.namespace.clone(),
            claim.metadata.name.clone(),
        ) else {
            continue;
        };
        let pv_name = format!("pvc-{uid}");
        if pvs.get_opt(&pv_name).await?.is_some() {
            continue;
        }
        let path = volumes.join(&pv_name);
        std::fs::create_dir_all(&path)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
        let size = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned())
            .map(|q| q.0)
            .unwrap_or_else(|| "1Gi".into());
        let pv: PersistentVolume = serde_json::from_value(json!({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": pv_name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": size},
                "accessModes": spec.access_modes.unwrap_or_else(|| vec!["ReadWriteOnce".into()]),
                "persistentVolumeReclaimPolicy": "Delete",
                "storageClassName": STORAGE_CLASS,
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "namespace": namespace, "name": claim_name, "uid": uid},
                "hostPath": {"path": path.display().to_string(), "type": "Directory"},
            },
        }))?;
        match pvs.create(&PostParams::default(), &pv).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for pv in pvs.list(&ListParams::default()).await?.items {
        let ours = pv
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("pv.kubernetes.io/provisioned-by"))
            .is_some_and(|p| p == PROVISIONER);
        let released = pv
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Released" || p == "Failed");
        let Some(name) = pv.metadata.name.clone() else {
            continue;
        };
        if ours && released {
            let _ = std::fs::remove_dir_all(volumes.join(&name));
            match pvs.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}
