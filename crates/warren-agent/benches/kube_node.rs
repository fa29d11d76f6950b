//! Workspaces on a real one-node cluster (kubelet on containerd, `tests/kube_common/node.rs`):
//! the agent's Kubernetes runtime against `kubectl apply` of the same rendered objects.
//!
//! - create → Running: Warren applies the workspace and waits until its own `list` derives
//!   `Running`; kubectl applies the same objects (with their namespace) and the bench waits
//!   until the pod is Ready. Goal (issue 23): ≤ 1.2×.
//! - desired change → pod terminated: Warren applies the stopped workspace (replicas 0);
//!   kubectl applies the same change; both until the kubelet has stopped the pod and its
//!   object is gone from the API.
//!
//! Each figure is the median of `KUBE_NODE_BENCH_ROUNDS` rounds (default 3), printed as a
//! ratio to kubectl's measured in the same run; who goes first alternates between rounds.
//! `cargo bench -p warren-agent --bench kube_node`; needs `.ci/setup-kubernetes.sh` and
//! `.ci/setup-podman.sh`, else it says so and stops.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/kube_common/mod.rs"]
mod kube_common;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{WorkspaceKey, WorkspaceRuntime};
use warren_types::state::ActualState;
use warren_types::AgentId;

const AGENT: i64 = 23;
const LIMIT: Duration = Duration::from_secs(300);

/// The engine tests' rendered workspace, for `name`, on the node's image.
fn objects(name: &str, replicas: i64) -> Vec<Value> {
    let text = include_str!("../tests/fixtures/workspace.yaml")
        .replace("fixture-ws", name)
        .replace("\"AGENT\"", &format!("\"{AGENT}\""))
        .replace(
            "localhost/warren-test:latest",
            kube_common::node::WORKSPACE_IMAGE,
        );
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let v: serde_yaml::Value = serde::Deserialize::deserialize(doc).expect("fixture");
            let mut v = serde_json::to_value(v).expect("fixture as JSON");
            if v["kind"] == "Deployment" {
                v["spec"]["replicas"] = replicas.into();
            }
            v
        })
        .collect()
}

fn key(name: &str) -> WorkspaceKey {
    WorkspaceKey {
        name: name.into(),
        namespace: format!("warren-ws-{name}"),
    }
}

/// `kubectl apply` of the namespace and the objects, as one file.
fn kubectl_apply(kubectl: &Path, kubeconfig: &Path, dir: &Path, objects: &[Value]) -> Result<()> {
    let mut text = String::new();
    for o in objects {
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(o)?);
    }
    let file = dir.join("objects.yaml");
    std::fs::write(&file, text)?;
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["apply", "-f"])
        .arg(&file)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// Whether `namespace` holds no pod at all: the kubelet stopped its containers and the pod
/// object is gone (not merely marked for deletion).
async fn no_pods(client: &Client, namespace: &str) -> Result<bool> {
    Ok(Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .items
        .is_empty())
}

/// Polls `check` every 20 ms until it holds (at most [`LIMIT`]).
async fn until<F, Fut>(what: &str, mut check: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + LIMIT;
    while !check().await? {
        if Instant::now() > deadline {
            bail!("{what} did not happen within {LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn warren_state(
    runtime: &KubernetesRuntime,
    key: &WorkspaceKey,
) -> Result<Option<ActualState>> {
    let observed = runtime
        .list()
        .await
        .map_err(|e| anyhow::anyhow!("list: {e}"))?
        .into_iter()
        .find(|o| &o.key == key);
    Ok(observed.as_ref().map(kube_common::derived_state))
}

struct Round {
    create_warren: Duration,
    create_kubectl: Duration,
    stop_warren: Duration,
    stop_kubectl: Duration,
}

async fn warren_round(
    runtime: &KubernetesRuntime,
    client: &Client,
    name: &str,
) -> Result<(Duration, Duration)> {
    let k = key(name);
    let started = Instant::now();
    runtime
        .apply(&k, &objects(name, 1))
        .await
        .map_err(|e| anyhow::anyhow!("apply: {e}"))?;
    until("warren: Running", || async {
        Ok(warren_state(runtime, &k).await? == Some(ActualState::Running))
    })
    .await?;
    let create = started.elapsed();
    let started = Instant::now();
    runtime
        .apply(&k, &objects(name, 0))
        .await
        .map_err(|e| anyhow::anyhow!("apply: {e}"))?;
    until("warren: pod terminated", || async {
        no_pods(client, &k.namespace).await
    })
    .await?;
    Ok((create, started.elapsed()))
}

async fn kubectl_round(
    kubectl: &Path,
    kubeconfig: &Path,
    dir: &Path,
    client: &Client,
    name: &str,
) -> Result<(Duration, Duration)> {
    let k = key(name);
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": k.namespace}});
    let with_ns = |replicas| {
        let mut all = vec![namespace.clone()];
        all.extend(objects(name, replicas));
        all
    };
    let started = Instant::now();
    kubectl_apply(kubectl, kubeconfig, dir, &with_ns(1))?;
    until("kubectl: pod Ready", || async {
        Ok(kube_common::live_pods(client, &k.namespace)
            .await
            .iter()
            .any(pod_ready))
    })
    .await?;
    let create = started.elapsed();
    let started = Instant::now();
    kubectl_apply(kubectl, kubeconfig, dir, &with_ns(0))?;
    until("kubectl: pod terminated", || async {
        no_pods(client, &k.namespace).await
    })
    .await?;
    Ok((create, started.elapsed()))
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let rounds: usize = std::env::var("KUBE_NODE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let kubectl = kube_common::binaries_dir().join("kubectl");
    if !kubectl.is_file() {
        println!("kube_node: no kubectl (run .ci/setup-kubernetes.sh); nothing measured");
        return Ok(());
    }
    let Some(node) = kube_common::node::node() else {
        println!("kube_node: no one-node cluster; nothing measured");
        return Ok(());
    };
    let kubeconfig = node.kubeconfig();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let client = node.client().await;
        let runtime =
            KubernetesRuntime::new(client.clone(), AgentId(AGENT), KubernetesOptions::default());
        let work = tempfile::tempdir()?;
        let mut all = Vec::new();
        for round in 0..rounds {
            let (w_name, k_name) = (format!("bench-w{round}"), format!("bench-k{round}"));
            let (w, k) = if round % 2 == 0 {
                let w = warren_round(&runtime, &client, &w_name).await?;
                (
                    w,
                    kubectl_round(&kubectl, &kubeconfig, work.path(), &client, &k_name).await?,
                )
            } else {
                let k = kubectl_round(&kubectl, &kubeconfig, work.path(), &client, &k_name).await?;
                (warren_round(&runtime, &client, &w_name).await?, k)
            };
            all.push(Round {
                create_warren: w.0,
                stop_warren: w.1,
                create_kubectl: k.0,
                stop_kubectl: k.1,
            });
            for ns in [key(&w_name).namespace, key(&k_name).namespace] {
                let _ = Api::<Namespace>::all(client.clone())
                    .delete(&ns, &DeleteParams::background())
                    .await;
            }
        }
        println!(
            "Workspaces on a one-node cluster (kubelet + containerd), median of {rounds} \
             rounds (ratio = Warren / kubectl apply)"
        );
        for (label, w, k, goal) in [
            (
                "create → Running",
                median(all.iter().map(|r| r.create_warren).collect()),
                median(all.iter().map(|r| r.create_kubectl).collect()),
                "goal ≤ 1.2x",
            ),
            (
                "stop → pod ended",
                median(all.iter().map(|r| r.stop_warren).collect()),
                median(all.iter().map(|r| r.stop_kubectl).collect()),
                "",
            ),
        ] {
            println!(
                "  {label:<17} kubectl {:>6.2} s   warren {:>6.2} s   ratio {:.2}x   {goal}",
                k.as_secs_f64(),
                w.as_secs_f64(),
                w.as_secs_f64() / k.as_secs_f64()
            );
        }
        anyhow::Ok(())
    });
    if let Err(e) = &result {
        eprintln!("{}", node.diagnostics());
        eprintln!("kube_node bench failed: {e:#}");
    }
    result
}
