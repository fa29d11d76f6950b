//! GitOps into the real API server: the agent's Kubernetes runtime syncing N objects
//! (default 1,000: ConfigMaps, Secrets and Services) against `kubectl apply --server-side` of
//! the same objects, as files, to the same server — created, re-applied unchanged, and all
//! changed. Each figure is printed as a ratio to kubectl's, measured in the same run (the
//! issue's goal: ≤ 1.0×). Who goes first alternates between rounds, so neither always meets
//! a warmer server.
//!
//! `cargo bench -p warren-agent --bench gitops_apply` (`GITOPS_BENCH_OBJECTS`); needs the
//! binaries of `.ci/setup-kubernetes.sh` (kubectl included), else it says so and stops.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/kube_common/mod.rs"]
mod kube_common;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::{GitopsSync, WorkspaceRuntime};
use warren_gitops::Manifest;
use warren_types::gitops::{Policy, Source};
use warren_types::AgentId;

fn objects(n: usize, generation: usize) -> Vec<Value> {
    (0..n)
        .map(|i| match i % 10 {
            0 => json!({"apiVersion": "v1", "kind": "Service",
                        "metadata": {"name": format!("svc-{i}")},
                        "spec": {"selector": {"app": format!("a{i}")},
                                 "ports": [{"port": 80 + (generation as i64 % 2), "targetPort": 8080, "protocol": "TCP"}]}}),
            1 | 2 => json!({"apiVersion": "v1", "kind": "Secret",
                            "metadata": {"name": format!("secret-{i}")},
                            "stringData": {"token": format!("t-{i}-{generation}")}}),
            _ => json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("cm-{i}")},
                        "data": {"value": format!("{i}-{generation}"), "note": "x".repeat(200)}}),
        })
        .collect()
}

/// `kubectl apply --server-side` of the objects in namespace `ns`, as 10 files.
fn kubectl_apply(
    kubectl: &Path,
    kubeconfig: &Path,
    dir: &Path,
    ns: &str,
    objects: &[Value],
) -> Result<Duration> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir)?;
    for (i, chunk) in objects
        .chunks(objects.len().div_ceil(10).max(1))
        .enumerate()
    {
        let mut text = String::new();
        for o in chunk {
            text.push_str("---\n");
            text.push_str(&serde_yaml::to_string(o)?);
        }
        std::fs::write(dir.join(format!("{i}.yaml")), text)?;
    }
    let started = Instant::now();
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "apply",
            "--server-side",
            "--field-manager=bench",
            "-n",
            ns,
            "-f",
        ])
        .arg(dir)
        .output()
        .context("running kubectl")?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!(
            "kubectl apply failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(took)
}

async fn warren_sync(
    runtime: &KubernetesRuntime,
    source: &Source,
    objects: &[Value],
) -> Result<Duration> {
    let manifests: Vec<Manifest> = objects
        .iter()
        .enumerate()
        .map(|(i, o)| Manifest {
            file: format!("deploy/{}.yaml", i / 100),
            document: i % 100 + 1,
            object: o.clone(),
        })
        .collect();
    let policy = Policy::default();
    let started = Instant::now();
    let out = runtime
        .sync_gitops(&GitopsSync {
            agent: "bench",
            source,
            policy: &policy,
            commit: "bench",
            objects: &manifests,
            prune: true,
        })
        .await
        .map_err(|e| anyhow::anyhow!("sync: {}", warren_types::error_chain(&e)))?;
    let took = started.elapsed();
    if !out.errors.is_empty() {
        bail!("sync errors: {:?}", &out.errors[..out.errors.len().min(3)]);
    }
    Ok(took)
}

fn main() -> Result<()> {
    let n: usize = std::env::var("GITOPS_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let kubectl = kube_common::binaries_dir().join("kubectl");
    if !kubectl.is_file() {
        println!(
            "gitops_apply: no kubectl in {} (run .ci/setup-kubernetes.sh); nothing measured",
            kubectl.display()
        );
        return Ok(());
    }
    let Some(cluster) = kube_common::cluster() else {
        println!("gitops_apply: no test control plane; nothing measured");
        return Ok(());
    };
    let kubeconfig = cluster.dir.join("kubeconfig");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = cluster.client().await;
        let runtime = KubernetesRuntime::new(client.clone(), AgentId(9), KubernetesOptions::default());
        let (ns_k, ns_w) = ("bench-kubectl", "bench-warren");
        for ns in [ns_k, ns_w] {
            let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client.clone());
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            api.patch(ns, &kube::api::PatchParams::apply("bench"), &kube::api::Patch::Apply(&body))
                .await?;
        }
        let source: Source = serde_json::from_value(json!({
            "name": "bench", "repository": "bench", "namespace": ns_w, "prune": true
        }))?;
        let work = tempfile::tempdir()?;
        println!("GitOps apply of {n} objects into the real API server (ratio = Warren / kubectl apply --server-side)");
        for (round, (label, generation)) in [("create", 0), ("unchanged", 0), ("all changed", 1)].into_iter().enumerate() {
            let objs = objects(n, generation);
            let (k, w) = if round % 2 == 0 {
                let k = kubectl_apply(&kubectl, &kubeconfig, work.path(), ns_k, &objs)?;
                (k, warren_sync(&runtime, &source, &objs).await?)
            } else {
                let w = warren_sync(&runtime, &source, &objs).await?;
                (kubectl_apply(&kubectl, &kubeconfig, work.path(), ns_k, &objs)?, w)
            };
            println!(
                "  {label:<12} kubectl {:>7.2} s   warren {:>7.2} s   ratio {:.2}x",
                k.as_secs_f64(),
                w.as_secs_f64(),
                w.as_secs_f64() / k.as_secs_f64()
            );
        }
        anyhow::Ok(())
    })
}
