//! Images a workspace builds before it starts, on a real engine: the pod waits for its
//! build (run out of the reconcile loop's way), runs the workspace's own scoped build, and
//! a stop and start or a repeated apply never builds again; a failed build or a context that
//! cannot be had fails the workspace with the reason and the build's last lines.
//!
//! The contexts come from a stand-in for the relay ([`BuildContexts`] is the seam): the
//! server's side is tested in warren-server's `builds`, the whole path in warren's
//! `devcontainer_e2e`. Skips with a notice when no engine exists; fails instead under
//! `WARREN_REQUIRE_ENGINE=1`.

use crate::common;

use anyhow::{Context, Result};
use async_trait::async_trait;
use common::*;
use futures::StreamExt;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use warren_agent::runtime::{BuildContexts, FetchedContext, WorkspaceRuntime};
use warren_types::state::ActualState;

/// Serves one Dockerfile as every context, after `gate` lets it (`None`: at once), or
/// refuses with `refusal`.
struct Contexts {
    dockerfile: String,
    /// The build key the "server" gives.
    key: std::sync::Mutex<Option<String>>,
    refusal: Option<String>,
    gate: tokio::sync::Semaphore,
    fetches: AtomicUsize,
}

impl Contexts {
    fn new(dockerfile: &str, open: bool) -> Arc<Contexts> {
        Arc::new(Contexts {
            dockerfile: dockerfile.to_owned(),
            key: Default::default(),
            refusal: None,
            gate: tokio::sync::Semaphore::new(if open { 1_000 } else { 0 }),
            fetches: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl BuildContexts for Contexts {
    async fn fetch(
        &self,
        _workspace: &str,
        _image: &str,
        _feature: Option<&str>,
    ) -> Result<FetchedContext, String> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let _permit = self.gate.acquire().await.map_err(|e| e.to_string())?;
        if let Some(r) = &self.refusal {
            return Err(r.clone());
        }
        let archive =
            tar_context(&[("Dockerfile", &self.dockerfile)]).map_err(|e| e.to_string())?;
        Ok(FetchedContext {
            commit: "c0ffee".into(),
            key: self.key.lock().unwrap().clone(),
            archive,
        })
    }
}

/// `ws`'s objects with its main container running `image`, built at start from a Dockerfile.
fn building(ws: &Workspace, image: &str) -> Vec<Value> {
    let task = warren_types::relay::BuildImageTask {
        image: image.to_owned(),
        dockerfile: "Dockerfile".into(),
        args: vec![],
        target: None,
        features: None,
    };
    with_builds(ws, image, &[task])
}

#[tokio::test]
async fn an_image_built_at_start_runs_and_is_built_once() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    // Before the workspace, so dropped after it: an image a container runs stays.
    let mut images = Images::default();
    let ws = Workspace::new("autobuild", h.agent_id);
    images.built_for.push(ws.name().to_owned());
    let image = format!("localhost/warren-autobuild-{}:1", ws.name());
    let contexts = Contexts::new(
        &format!("FROM {IMAGE}\nRUN echo built-at-start > /tmp/built\n"),
        false,
    );
    h.runtime.use_build_contexts(contexts.clone());
    let objects = building(&ws, &image);

    // The apply returns while the build waits for its context.
    h.runtime.apply(&ws.key, &objects).await?;
    wait_for(&h.runtime, &ws, "asking for its context", |_| {
        contexts.fetches.load(Ordering::SeqCst) == 1
    })
    .await?;
    let o = observe(&h.runtime, &ws).await?.context("listed")?;
    assert!(o.pod_failure.is_none(), "{o:?}");
    assert_ne!(derive(&o), ActualState::Running);
    // Followed from now, the build's output comes as it is written and ends with it.
    let mut follow = h
        .runtime
        .follow_logs(&ws.key, Some("warren-build"), 100)
        .await?;
    let followed = tokio::spawn(async move {
        let mut text = Vec::new();
        while let Some(chunk) = follow.next().await {
            text.extend_from_slice(&chunk?);
        }
        anyhow::Ok(String::from_utf8_lossy(&text).into_owned())
    });
    // A full reconcile applies the same objects again: the build goes on, not over.
    h.runtime.apply(&ws.key, &objects).await?;
    contexts.gate.add_permits(1_000);
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let followed = tokio::time::timeout(std::time::Duration::from_secs(120), followed)
        .await
        .context("the followed build log ends with the build")???;
    assert!(followed.contains("/tmp/built"), "{followed}");
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);
    assert_eq!(exec(&ws, "dev", "cat /tmp/built")?.trim(), "built-at-start");
    let log = h.runtime.logs(&ws.key, Some("warren-build"), 100).await?;
    let log = String::from_utf8_lossy(&log);
    assert!(
        log.contains("from commit c0ffee") && log.contains("/tmp/built"),
        "{log}"
    );

    // Stopped and started again: the build is there, nothing is fetched or built.
    h.runtime
        .apply(&ws.key, &with_replicas(objects.clone(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);
    Ok(())
}

#[tokio::test]
async fn a_failed_build_or_a_missing_context_fails_the_workspace_saying_why() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    // Before the workspace, so dropped after it: an image a container runs stays.
    let mut images = Images::default();
    let ws = Workspace::new("badbuild", h.agent_id);
    images.built_for.push(ws.name().to_owned());
    let image = format!("localhost/warren-badbuild-{}:1", ws.name());
    let contexts = Contexts::new(
        &format!("FROM {IMAGE}\nRUN echo the-last-words && exit 4\n"),
        true,
    );
    h.runtime.use_build_contexts(contexts.clone());
    h.runtime.apply(&ws.key, &building(&ws, &image)).await?;
    let o = wait_for(&h.runtime, &ws, "failed", |o| o.pod_failure.is_some()).await?;
    let failure = o.pod_failure.context("failure")?;
    assert_eq!(failure.reason, "ImageBuildFailed");
    assert!(
        failure
            .message
            .starts_with(&format!("building image {image}:"))
            && failure.message.contains("the-last-words"),
        "{failure:?}"
    );
    assert!(
        cli_lines(&[
            "ps",
            "-a",
            "-q",
            "--filter",
            &format!("label=warren.dev/workspace-name={}", ws.name())
        ])
        .is_empty(),
        "no container without its image"
    );

    // A context the server would not give: its reason is the workspace's.
    let h2 = Harness::new().await?;
    let ws2 = Workspace::new("noctx", h2.agent_id);
    let refusing = Arc::new(Contexts {
        refusal: Some("project \"shop\": repository unreachable".into()),
        ..Arc::into_inner(Contexts::new("", true)).context("fresh")?
    });
    h2.runtime.use_build_contexts(refusing);
    let image2 = format!("localhost/warren-noctx-{}:1", ws2.name());
    h2.runtime.apply(&ws2.key, &building(&ws2, &image2)).await?;
    let o = wait_for(&h2.runtime, &ws2, "failed", |o| o.pod_failure.is_some()).await?;
    let failure = o.pod_failure.context("failure")?;
    assert_eq!(
        failure.message,
        format!("building image {image2}: project \"shop\": repository unreachable")
    );
    Ok(())
}

/// The output of the workspace's last build at start.
async fn build_log(h: &Harness, ws: &Workspace) -> Result<String> {
    let log = h.runtime.logs(&ws.key, Some("warren-build"), 1000).await?;
    Ok(String::from_utf8_lossy(&log).into_owned())
}

#[tokio::test]
async fn a_second_workspace_with_the_same_build_key_reuses_the_image_and_a_label_cannot_fake_one(
) -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let mut images = Images::default();
    let (first, second, forger, victim) = (
        Workspace::new("keyone", h.agent_id),
        Workspace::new("keytwo", h.agent_id),
        Workspace::new("forger", h.agent_id),
        Workspace::new("victim", h.agent_id),
    );
    for ws in [&first, &second, &forger, &victim] {
        images.built_for.push(ws.name().to_owned());
    }
    // What the step writes differs at every run: equal output means it ran once.
    let dockerfile =
        format!("FROM {IMAGE}\nRUN head -c 16 /dev/urandom | od -An -tx1 > /tmp/once\n");
    let key = format!("{:064x}", rand::random::<u128>());
    let contexts = Contexts::new(&dockerfile, true);
    *contexts.key.lock().unwrap() = Some(key.clone());
    h.runtime.use_build_contexts(contexts.clone());
    let image = "localhost/warren/devcontainer:latest";
    for ws in [&first, &second] {
        h.runtime.apply(&ws.key, &building(ws, image)).await?;
        wait_state(&h.runtime, ws, ActualState::Running).await?;
    }
    assert!(!build_log(&h, &first).await?.contains("reusing image"));
    let log = build_log(&h, &second).await?;
    assert!(log.contains("reusing image"), "{log}");
    assert_eq!(
        exec(&first, "dev", "cat /tmp/once")?,
        exec(&second, "dev", "cat /tmp/once")?,
        "the step ran once"
    );
    // Each runs its own name for it: deleting the first leaves the second's.
    assert_ne!(
        container_image_name(&first)?,
        container_image_name(&second)?
    );

    // A build that labels itself with a key (on demand, no key of its own) is never taken
    // for a build with that key.
    let forged = format!("{:064x}", rand::random::<u128>());
    h.runtime.apply(&forger.key, &forger.objects()).await?;
    wait_state(&h.runtime, &forger, ActualState::Running).await?;
    let task = warren_types::relay::BuildImageTask {
        image: "localhost/forged:1".into(),
        dockerfile: "Dockerfile".into(),
        args: vec![],
        target: None,
        features: None,
    };
    let context = tar_context(&[(
        "Dockerfile",
        &format!(
            "FROM {IMAGE}\nLABEL warren.dev/build-key={forged}\nRUN echo forged > /tmp/once\n"
        ),
    )])?;
    let mut progress = h.runtime.build_image(&forger.key, &task, context).await?;
    while let Some(line) = progress.next().await {
        line?;
    }
    // The next build's key is the one the forger claimed.
    *contexts.key.lock().unwrap() = Some(forged);
    h.runtime
        .apply(&victim.key, &building(&victim, image))
        .await?;
    wait_state(&h.runtime, &victim, ActualState::Running).await?;
    let log = build_log(&h, &victim).await?;
    assert!(!log.contains("reusing image"), "{log}");
    assert_ne!(exec(&victim, "dev", "cat /tmp/once")?.trim(), "forged");
    Ok(())
}

/// The image name a workspace's main container was created with.
fn container_image_name(ws: &Workspace) -> Result<String> {
    let name = format!("warren-{}.c.dev", ws.name());
    Ok(cli_run(&["inspect", "--format", "{{.ImageName}}", &name])?
        .trim()
        .to_owned())
}

/// The builder of a Kubernetes agent: a workspace's build pushed to a private registry over
/// TLS with the push credentials (refused without them), under the workspace's scoped name
/// tagged with the image's id; a second call builds nothing and pushes the same reference;
/// forgetting the workspace drops its images, so the next call builds again.
#[tokio::test]
async fn a_builder_pushes_a_workspaces_build_and_builds_it_once() -> Result<()> {
    use bollard::auth::DockerCredentials;
    use warren_agent::runtime::engine::push::PushTarget;
    use warren_testkit::registry::{self, Registry, RegistryOptions};
    if !engine_available() || !registry::available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let registry = Registry::start(&RegistryOptions {
        trust_in: Some("/etc/containers/certs.d".into()),
        user: Some(("ann".into(), "push-pass-3".into())),
    })
    .await?;
    let state = tempfile::tempdir()?;
    let mut config =
        warren_agent::runtime::engine::EngineConfig::new(h.agent_id, state.path().to_path_buf());
    config.host = Some(h.runtime.host().to_owned());
    let builder = warren_agent::runtime::engine::EngineRuntime::connect_builder(config).await?;
    let mut images = Images::default();
    let ws = Workspace::new("pushed", h.agent_id);
    images.built_for.push(ws.name().to_owned());
    let image = format!("localhost/warren-pushed-{}:1", ws.name());
    let contexts = Contexts::new(
        &format!("FROM {IMAGE}\nRUN echo pushed > /tmp/pushed\n"),
        true,
    );
    builder.use_build_contexts(contexts.clone());
    let objects = building(&ws, &image);
    let deployment = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .context("a Deployment")?;
    let builds = format!("{}/builds", registry.addr);
    let anonymous = PushTarget {
        registry: builds.clone(),
        credentials: None,
    };
    let refused = builder
        .build_and_push(&ws.key, deployment, vec![], &anonymous)
        .await
        .expect_err("an anonymous push to a registry with users");
    assert!(
        refused
            .message
            .contains(&format!("pushing it to the build registry {builds}")),
        "{refused:?}"
    );
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);

    let target = PushTarget {
        registry: builds.clone(),
        credentials: Some(DockerCredentials {
            username: Some("ann".into()),
            password: Some("push-pass-3".into()),
            serveraddress: Some(registry.addr.clone()),
            ..Default::default()
        }),
    };
    let pushed = builder
        .build_and_push(&ws.key, deployment, vec![], &target)
        .await
        .map_err(|f| anyhow::anyhow!("{f:?}"))?;
    // Built once: the anonymous attempt's build is the one pushed now.
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);
    let reference = pushed.get(&image).context("the image's reference")?.clone();
    let prefix = format!(
        "{builds}/warren-ws/localhost/warren-pushed-{}/{}.",
        ws.name(),
        ws.name()
    );
    assert!(reference.starts_with(&prefix), "{reference} vs {prefix}");
    let tag = reference
        .rsplit_once(':')
        .map(|(_, t)| t)
        .unwrap_or_default();
    assert!(tag.starts_with("sha-") && tag.len() == 68, "{reference}");
    // The registry has it: the engine pulls it under that name alone.
    let pulled = cli_run(&["pull", "--creds", "ann:push-pass-3", "-q", &reference]);
    images.names.push(reference.clone());
    assert!(pulled.is_ok(), "{pulled:?}");
    let log = builder
        .builds_log(&ws.key, 1000, false)?
        .map(|c| c.map(|b| String::from_utf8_lossy(&b).into_owned()))
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<String, _>>()?;
    assert!(
        log.contains(&format!("pushing {image} as {reference}")),
        "{log}"
    );

    // Again (an agent restart, a new start): nothing built, the same reference.
    let again = builder
        .build_and_push(&ws.key, deployment, vec![], &target)
        .await
        .map_err(|f| anyhow::anyhow!("{f:?}"))?;
    assert_eq!(again.get(&image), Some(&reference));
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 1);
    builder.forget_builds(&ws.key).await?;
    builder
        .build_and_push(&ws.key, deployment, vec![], &target)
        .await
        .map_err(|f| anyhow::anyhow!("{f:?}"))?;
    assert_eq!(contexts.fetches.load(Ordering::SeqCst), 2);
    builder.forget_builds(&ws.key).await?;
    Ok(())
}
