//! A dev container's Features installed at the workspace's start, on a real engine with a
//! real registry (Debian's docker-registry): the base image, then each Feature's install with
//! its options and the users' variables, its `containerEnv` in the image and its lifecycle
//! commands where the workspace runs them; a second workspace of the same configuration takes
//! the image over instead of installing again, and a Feature Warren cannot honour fails the
//! workspace naming it.
//!
//! Skips with a notice without an engine or the registry; fails instead under
//! `WARREN_REQUIRE_ENGINE=1` / `WARREN_REQUIRE_TOOLS=1`.

use crate::common;

use anyhow::{Context, Result};
use async_trait::async_trait;
use common::*;
use serde_json::Value;
use std::sync::Arc;
use warren_agent::runtime::{BuildContexts, FetchedContext, WorkspaceRuntime};
use warren_testkit::registry::{self, borrowed, simple_feature, Registry, RegistryOptions};
use warren_types::features::{
    FeatureBuild, FeatureRequest, FeatureSource, FeatureValue, HOOKS_DIR,
};
use warren_types::relay::BuildImageTask;
use warren_types::state::ActualState;

/// No project: published Features on an image need none, and asking is a failure.
struct NoContexts;

#[async_trait]
impl BuildContexts for NoContexts {
    async fn fetch(
        &self,
        _workspace: &str,
        _image: &str,
        _feature: Option<&str>,
    ) -> Result<FetchedContext, String> {
        Err("this test serves no context".into())
    }
}

/// `ws`'s objects with its main container running `image`, built at start from `features`.
fn with_features(ws: &Workspace, image: &str, features: &FeatureBuild) -> Vec<Value> {
    let task = BuildImageTask {
        image: image.to_owned(),
        dockerfile: String::new(),
        args: vec![],
        target: None,
        features: Some(Box::new(features.clone())),
    };
    with_builds(ws, image, &[task])
}

async fn build_log(h: &Harness, ws: &Workspace) -> Result<String> {
    let log = h.runtime.logs(&ws.key, Some("warren-build"), 1_000).await?;
    Ok(String::from_utf8_lossy(&log).into_owned())
}

#[tokio::test]
async fn features_are_installed_on_the_image_and_a_second_workspace_reuses_the_build() -> Result<()>
{
    if !engine_available() || !registry::available() {
        return Ok(());
    }
    let r = Registry::start(&RegistryOptions::default()).await?;
    let base = simple_feature("base", "", "base first");
    let (base_ref, _) = r
        .push_feature("features/base:1", &borrowed(&base), None)
        .await?;
    // greet installs after base, whatever the configuration's order.
    let greet = simple_feature(
        "greet",
        &format!(
            r#", "options": {{ "greeting": {{ "type": "string", "default": "hello" }} }},
                "containerEnv": {{ "GREET_HOME": "/opt/greet" }},
                "installsAfter": ["{}"],
                "postCreateCommand": "echo created-by-greet" "#,
            warren_types::features::oci_name(&base_ref)
        ),
        "$GREETING for $_REMOTE_USER at $_REMOTE_USER_HOME",
    );
    let (greet_ref2, _) = r
        .push_feature("features/greet:2", &borrowed(&greet), None)
        .await?;

    let addr = r.addr.clone();
    let h = Harness::configured(|c| c.plain_http_registries = vec![addr]).await?;
    h.runtime.use_build_contexts(Arc::new(NoContexts));
    let mut images = Images::default();
    let features = FeatureBuild {
        base_image: Some(IMAGE.into()),
        features: vec![
            FeatureRequest {
                source: FeatureSource::Oci(greet_ref2.clone()),
                options: [(
                    "greeting".to_owned(),
                    FeatureValue::String("hi 'there'".into()),
                )]
                .into(),
            },
            FeatureRequest {
                source: FeatureSource::Oci(base_ref.clone()),
                options: Default::default(),
            },
        ],
        remote_user: Some("root".into()),
        ..Default::default()
    };
    let ws = Workspace::new("features", h.agent_id);
    images.built_for.push(ws.name().to_owned());
    let image = "localhost/warren/devcontainer:latest";
    h.runtime
        .apply(&ws.key, &with_features(&ws, image, &features))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let log = build_log(&h, &ws).await?;
    assert!(
        log.contains(&format!(
            "installing in this order: {base_ref}, {greet_ref2}"
        )),
        "{log}"
    );
    // The option with its quotes, the users' variables, in install order.
    assert_eq!(
        exec(&ws, "dev", "cat /usr/local/share/greet.txt")?.trim(),
        "hi 'there' for root at /root"
    );
    assert_eq!(
        exec(&ws, "dev", "cat /usr/local/share/base.txt")?.trim(),
        "base first"
    );
    assert_eq!(exec(&ws, "dev", "echo $GREET_HOME")?.trim(), "/opt/greet");
    assert_eq!(
        exec(&ws, "dev", &format!("cat {HOOKS_DIR}/post-create/*"))?.trim(),
        "echo created-by-greet"
    );

    // The same configuration in a second workspace: taken over, nothing installs again.
    let ws2 = Workspace::new("features2", h.agent_id);
    images.built_for.push(ws2.name().to_owned());
    h.runtime
        .apply(&ws2.key, &with_features(&ws2, image, &features))
        .await?;
    wait_state(&h.runtime, &ws2, ActualState::Running).await?;
    let log2 = build_log(&h, &ws2).await?;
    assert!(
        log2.contains("reusing image") && !log2.contains("installing the Feature"),
        "{log2}"
    );
    assert!(log2.contains("from the agent's cache"), "{log2}");
    assert_eq!(
        exec(&ws2, "dev", "cat /usr/local/share/greet.txt")?.trim(),
        "hi 'there' for root at /root"
    );

    // Another option is another build.
    let mut other = features.clone();
    other.features[0]
        .options
        .insert("greeting".into(), FeatureValue::String("hey".into()));
    let ws3 = Workspace::new("features3", h.agent_id);
    images.built_for.push(ws3.name().to_owned());
    h.runtime
        .apply(&ws3.key, &with_features(&ws3, image, &other))
        .await?;
    wait_state(&h.runtime, &ws3, ActualState::Running).await?;
    assert!(!build_log(&h, &ws3).await?.contains("reusing image"));
    assert_eq!(
        exec(&ws3, "dev", "cat /usr/local/share/greet.txt")?.trim(),
        "hey for root at /root"
    );
    Ok(())
}

#[tokio::test]
async fn a_feature_warren_cannot_honour_fails_the_workspace_naming_it() -> Result<()> {
    if !engine_available() || !registry::available() {
        return Ok(());
    }
    let r = Registry::start(&RegistryOptions::default()).await?;
    let dind = simple_feature("dind", r#", "privileged": true"#, "dind");
    let (dind_ref, _) = r
        .push_feature("features/dind:1", &borrowed(&dind), None)
        .await?;
    let addr = r.addr.clone();
    let h = Harness::configured(|c| c.plain_http_registries = vec![addr]).await?;
    h.runtime.use_build_contexts(Arc::new(NoContexts));
    let ws = Workspace::new("dind", h.agent_id);
    let features = FeatureBuild {
        base_image: Some(IMAGE.into()),
        features: vec![FeatureRequest {
            source: FeatureSource::Oci(dind_ref.clone()),
            options: Default::default(),
        }],
        ..Default::default()
    };
    h.runtime
        .apply(
            &ws.key,
            &with_features(&ws, "localhost/warren/devcontainer:latest", &features),
        )
        .await?;
    let o = wait_for(&h.runtime, &ws, "failed", |o| o.pod_failure.is_some()).await?;
    let failure = o.pod_failure.context("failure")?;
    assert_eq!(failure.reason, "ImageBuildFailed");
    assert!(
        failure.message.contains(&dind_ref) && failure.message.contains("not supported by Warren"),
        "{failure:?}"
    );
    Ok(())
}
