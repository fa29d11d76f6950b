//! A dev container's Features installed at the workspace's start: on top of its `image`
//! (pulled with the workspace's pull secrets when the engine lacks it) or of what its
//! Dockerfile builds, by a second build whose context `warren_features` writes.
//!
//! The key of that build is a digest of the base (the server's key of the Dockerfile build,
//! or the base image's id) and of the whole context (every Feature's files, options, users
//! and the Dockerfile), so a second workspace of the same configuration takes the image
//! over instead of installing again, while a changed option or a republished tag builds anew.

use super::autobuild::failure;
use super::*;
use crate::runtime::BuildContexts;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::io::Write;
use warren_features::oci::Registries;
use warren_types::features::FeatureBuild;
use warren_types::relay::BuildImageTask;

/// Most bytes of a local Feature's folder fetched from the server.
const MAX_LOCAL_FEATURE_BYTES: usize = warren_features::oci::MAX_ARCHIVE_BYTES;

/// Local Features of one image of one workspace, fetched from the server.
struct FromServer {
    contexts: Arc<dyn BuildContexts>,
    workspace: String,
    image: String,
}

#[async_trait::async_trait]
impl warren_features::LocalFeatures for FromServer {
    async fn fetch(&self, dir: &str) -> Result<(Vec<u8>, Option<String>), String> {
        let fetched = self
            .contexts
            .fetch(&self.workspace, &self.image, Some(dir))
            .await?;
        let mut archive = fetched.archive;
        let mut out = Vec::new();
        while let Some(chunk) = archive.next().await {
            let chunk = chunk.map_err(|e| e.to_string())?;
            if out.len() + chunk.len() > MAX_LOCAL_FEATURE_BYTES {
                return Err(format!(
                    "the folder {dir} is larger than {MAX_LOCAL_FEATURE_BYTES} bytes"
                ));
            }
            out.extend_from_slice(&chunk);
        }
        Ok((out, fetched.key))
    }
}

impl EngineRuntime {
    /// How this agent reaches registries for Features, with the credentials of
    /// `pull_secrets`, held to its outbound guard.
    fn feature_registries(&self, pull_secrets: Vec<String>) -> Registries {
        let dir = self.inner.config.pull_secrets_dir();
        Registries {
            certs_dir: self.inner.config.registry_certs_dir(),
            plain_http: self.inner.config.plain_http_registries.clone(),
            cache_dir: self.inner.config.state_dir.join("features"),
            credentials: Arc::new(move |registry: &str| {
                let found = super::registry_auth::lookup(
                    &dir,
                    &pull_secrets,
                    &format!("{registry}/feature"),
                );
                let c = found.credentials?;
                Some((c.username?, c.password?))
            }),
            guard: Some(warren_netguard::Guard::new(
                self.inner.config.outbound_allow.clone(),
            )),
        }
    }

    /// The base image's id and user, pulling it when the engine lacks it.
    async fn base_image(
        &self,
        task: &BuildImageTask,
        image: &str,
        pull_secrets: &[String],
        log: &mut std::fs::File,
    ) -> Result<(String, String), PodFailure> {
        let inspected = match self.inner.docker.inspect_image(image).await {
            Ok(i) => i,
            Err(e) if status_of(&e) == Some(404) => {
                let _ = writeln!(log, "warren: pulling {image}");
                self.pull(image, pull_secrets)
                    .await
                    .map_err(|e| failure(task, format!("pulling the base image {image}: {e}")))?;
                self.inner
                    .docker
                    .inspect_image(image)
                    .await
                    .map_err(|e| failure(task, error_message(&e)))?
            }
            Err(e) => return Err(failure(task, error_message(&e))),
        };
        // Bare: a `FROM sha256:…` would be read as an image named `sha256`.
        let id = inspected
            .id
            .unwrap_or_default()
            .trim_start_matches("sha256:")
            .to_owned();
        if id.is_empty() {
            return Err(failure(task, format!("the engine gave no id for {image}")));
        }
        let user = inspected.config.and_then(|c| c.user).unwrap_or_default();
        Ok((id, user))
    }

    /// Builds the image of `task`: its base, then its Features on top.
    pub(super) async fn build_with_features(
        &self,
        workspace: &WorkspaceKey,
        task: &BuildImageTask,
        features: &FeatureBuild,
        log: &mut std::fs::File,
    ) -> Result<(), PodFailure> {
        let contexts = self.contexts(task)?;
        let pull_secrets = self
            .read_record(&workspace.name)
            .map(|r| r.pull_secrets)
            .unwrap_or_default();
        let (base, identity, user) = match &features.base_image {
            Some(image) => {
                let (id, user) = self.base_image(task, image, &pull_secrets, log).await?;
                (id.clone(), id, user)
            }
            None => {
                // Under a name of its own: the image's name holds only a finished build
                // (one with its Features), which is what tells a start it is ready.
                let base = base_name(&task.image);
                let key = self
                    .build_from_dockerfile(workspace, task, &base, log)
                    .await?;
                let record = self.read_record(&workspace.name);
                let scope = self.build_scope(
                    &workspace.name,
                    &record.map(|r| r.deployment).unwrap_or_default(),
                );
                let Some(built) = self
                    .own_build(&scope, &base)
                    .await
                    .map_err(|e| failure(task, warren_types::error_chain(&e)))?
                else {
                    return Err(failure(task, "the image built from the Dockerfile is gone"));
                };
                let (id, user) = self.base_image(task, &built, &[], log).await?;
                (id.clone(), key.unwrap_or(id), user)
            }
        };
        let registries = self.feature_registries(pull_secrets);
        let local = FromServer {
            contexts,
            workspace: workspace.name.clone(),
            image: task.image.clone(),
        };
        let mut write = |line: String| {
            let _ = writeln!(log, "{line}");
        };
        let resolved = warren_features::resolve(features, &registries, &local, &mut write)
            .await
            .map_err(|e| failure(task, warren_types::error_chain(&e)))?;
        for r in &resolved {
            for note in &r.metadata.not_applied {
                let _ = writeln!(log, "warren: Feature {}: {note}", r.source);
            }
        }
        let order: Vec<String> = resolved.iter().map(|r| r.source.to_string()).collect();
        let _ = writeln!(
            log,
            "warren: installing in this order: {}",
            order.join(", ")
        );
        let context = warren_features::context::build_context(&resolved, &base, &user, features)
            .map_err(|e| failure(task, warren_types::error_chain(&e)))?;
        let mut hasher = Sha256::new();
        hasher.update(b"warren-features-1\n");
        hasher.update(identity.as_bytes());
        hasher.update(b"\n");
        hasher.update(&context);
        let key = hex::encode(hasher.finalize());
        let install = BuildImageTask {
            image: task.image.clone(),
            dockerfile: "Dockerfile".into(),
            args: vec![],
            target: None,
            features: None,
        };
        let bytes = bytes::Bytes::from(context);
        let stream = futures::stream::once(async move { Ok(bytes) }).boxed();
        self.build_or_reuse(workspace, &install, stream, Some(&key), log)
            .await?;
        tracing::info!(workspace = %workspace, image = %task.image, features = resolved.len(), "Features installed");
        Ok(())
    }
}

/// The name the Dockerfile's own build gets when Features go on top of it.
fn base_name(image: &str) -> String {
    let last = image.rsplit('/').next().unwrap_or(image);
    if last.contains(':') {
        format!("{image}-warren-base")
    } else {
        format!("{image}:warren-base")
    }
}
