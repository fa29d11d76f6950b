//! GitOps on Kubernetes through the whole stack: the real server and relay, an agent on the
//! Kubernetes runtime against the real API server and controllers of the test control plane
//! (`.ci/setup-kubernetes.sh`), a repository on this machine. An operator's story: register
//! the repository, give the agent a source, and see the objects appear, change and go with
//! the commits, the status in the API. Skips with a notice without the control plane (fails
//! instead under `WARREN_REQUIRE_KUBERNETES=1`).

use crate::kube_common;

use anyhow::Result;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, Patch, PatchParams};
use reqwest::Method;
use serde_json::{json, Value};
use std::sync::Arc;
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_testkit::git_http::{bare_repo, commit_files};
use warren_testkit::{wait_for, Stack};
use warren_types::AgentId;

const DEPLOYMENT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  \
replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: \
{app: web}\n    spec:\n      containers:\n        - name: web\n          image: example.test/web:1\n";

fn cm(value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  value: \"{value}\"\n")
}

async fn status(stack: &Stack, agent: &str) -> Option<Value> {
    let all = stack
        .api(
            Method::GET,
            &format!("/api/v1/agents/{agent}/gitops/status"),
            &stack.admin.token,
            None,
        )
        .await
        .ok()?;
    all.as_array()?.first().cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_follows_git_on_a_real_api_server() -> Result<()> {
    let Some(cluster) = kube_common::cluster() else {
        return Ok(());
    };
    let client = cluster.client().await;
    let mut stack = Stack::start().await?;
    let ns = format!("gitops-e2e-{:06x}", rand::random::<u32>() & 0xff_ffff);
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::apply("test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await?;
    let id = stack
        .add_agent_with_runtime(
            "cluster",
            Arc::new(KubernetesRuntime::new(
                client.clone(),
                // The stack's second agent: "local" is the first.
                AgentId(2),
                KubernetesOptions::default(),
            )),
        )
        .await?;
    assert_eq!(id, 2);

    let root = tempfile::tempdir()?;
    let repo = bare_repo(root.path(), "platform")?;
    let first = commit_files(
        &repo,
        &[
            ("deploy/settings.yaml", &cm("1")),
            ("deploy/web.yaml", DEPLOYMENT),
        ],
    )?;
    stack
        .gitops_repository(json!({"name": "platform", "url": format!("file://{}", repo.display())}))
        .await?;
    stack
        .gitops_sources(
            "cluster",
            json!({"sources": [{"name": "web", "repository": "platform", "namespace": ns,
                                     "prune": true, "interval": "1s"}]}),
        )
        .await?;

    // The objects appear in the cluster, labelled, and the status says so.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    wait_for("the first commit applied", 60, || async {
        status(&stack, "cluster")
            .await
            .is_some_and(|s| s["commit"] == first.as_str() && s["applied"] == 2)
    })
    .await?;
    let settings = configmaps.get("settings").await?;
    assert_eq!(settings.data.unwrap_or_default()["value"], "1");
    assert_eq!(
        settings.metadata.labels.unwrap_or_default()["warren.dev/gitops-source"],
        "web"
    );
    assert!(deployments.get_opt("web").await?.is_some());
    let s = status(&stack, "cluster").await.unwrap();
    assert!(
        s["health"].to_string().contains("Deployment"),
        "the Deployment's health is reported: {s}"
    );

    // A commit changes the ConfigMap and deletes the Deployment: changed, and pruned.
    let second = commit_files(&repo, &[("deploy/settings.yaml", &cm("2"))])?;
    wait_for("the second commit applied", 60, || async {
        status(&stack, "cluster")
            .await
            .is_some_and(|s| s["commit"] == second.as_str())
    })
    .await?;
    let s = status(&stack, "cluster").await.unwrap();
    assert_eq!(
        (s["applied"].as_u64(), s["pruned"].as_u64()),
        (Some(1), Some(1)),
        "{s}"
    );
    assert_eq!(
        configmaps.get("settings").await?.data.unwrap_or_default()["value"],
        "2"
    );
    wait_for("the Deployment gone", 60, || async {
        deployments
            .get_opt("web")
            .await
            .is_ok_and(|d| d.is_none_or(|d| d.metadata.deletion_timestamp.is_some()))
    })
    .await?;

    // A commit with nothing: the ConfigMap goes too.
    let third = commit_files(&repo, &[("README.md", "nothing to apply")])?;
    wait_for("the third commit applied", 60, || async {
        status(&stack, "cluster")
            .await
            .is_some_and(|s| s["commit"] == third.as_str() && s["pruned"] == 1)
    })
    .await?;
    assert!(configmaps.get_opt("settings").await?.is_none());
    Ok(())
}
