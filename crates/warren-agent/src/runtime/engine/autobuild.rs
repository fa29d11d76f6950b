//! Images a workspace builds before its containers start: the builds its pod template lists
//! under [`IMAGE_BUILDS_ANNOTATION`] (devfile `image` components with `autoBuild`, a dev
//! container's `build`). An apply that finds one of them not built yet leaves the
//! workspace starting and hands the builds to a task of its own, so the reconcile loop
//! never waits minutes for a build; the task fetches each context from the server (the
//! project's repository at the workspace's ref, through the relay), builds it in the
//! workspace's scope as a build on demand is, and then applies the same objects again.
//! The next apply or delete cancels it, as it cancels a start.
//!
//! The whole output goes to `build.log` in the workspace's state directory, and its last
//! lines into the failure shown on the workspace when a build fails.
//!
//! A build the installation has made before — the server's key for it, a digest of the
//! context's contents, Dockerfile, arguments and target, equal to an image's
//! `warren.dev/build-key` — is not run again: the image is taken over under the workspace's
//! own name by a build of `FROM <that image>` alone, which runs no step. The layer cache
//! already shares steps between workspaces of one engine; this only skips re-running them.

use super::scope::BuildScope;
use super::*;
use crate::runtime::BuildContexts;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::io::Write;
use warren_types::relay::{BuildImageTask, IMAGE_BUILDS_ANNOTATION};

/// Lines of a failed build's output kept in the workspace's failure.
const FAILURE_LINES: usize = 15;
/// The `reason` of a workspace whose image could not be built.
pub const BUILD_FAILED_REASON: &str = "ImageBuildFailed";
/// How often a followed build log is looked at for more.
const FOLLOW_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);
/// The name `warren ws logs --container` gives the output of the workspace's last build at
/// start (no devfile component may be called `warren-…`).
pub const BUILD_LOG: &str = "warren-build";

/// The runtime's state of builds at start.
#[derive(Default)]
pub(super) struct Builds {
    /// Where contexts come from; set once the agent's relay connection exists.
    contexts: std::sync::OnceLock<Arc<dyn BuildContexts>>,
    /// Workspaces building now → the digest of the objects the build is for.
    running: Mutex<HashMap<String, String>>,
}

impl std::fmt::Debug for Builds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builds")
            .field("contexts", &self.contexts.get().is_some())
            .field("running", &self.running)
            .finish()
    }
}

/// What identifies an apply's objects: the same digest, the same apply.
pub fn objects_digest(objects: &[serde_json::Value]) -> String {
    let mut hasher = Sha256::new();
    for o in objects {
        hasher.update(serde_json::to_vec(o).unwrap_or_default());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// The builds the pod template asks for before its containers start.
pub(super) fn requested_builds(
    deployment: &serde_json::Value,
) -> Result<Vec<BuildImageTask>, String> {
    let Some(text) = deployment
        .pointer("/spec/template/metadata/annotations")
        .and_then(|a| a.get(IMAGE_BUILDS_ANNOTATION))
        .and_then(serde_json::Value::as_str)
    else {
        return Ok(vec![]);
    };
    serde_json::from_str(text).map_err(|e| {
        format!("annotation {IMAGE_BUILDS_ANNOTATION} is not a list of image builds: {e}")
    })
}

pub(super) fn failure(task: &BuildImageTask, why: impl std::fmt::Display) -> PodFailure {
    PodFailure {
        reason: BUILD_FAILED_REASON.into(),
        message: format!("building image {}: {why}", task.image),
    }
}

impl EngineRuntime {
    /// Where builds at start get their contexts; set once, when the agent's relay
    /// connection exists.
    pub(super) fn set_build_contexts(&self, contexts: Arc<dyn BuildContexts>) {
        let _ = self.inner.builds.contexts.set(contexts);
    }

    /// Whether workspace `name` is building for exactly these objects: an apply of them
    /// again (a full reconcile) leaves the build alone instead of starting it over.
    pub(super) fn building_for(&self, name: &str, digest: &str) -> bool {
        lock(&self.inner.builds.running)
            .get(name)
            .map(String::as_str)
            == Some(digest)
    }

    /// Marks workspace `name` building for `digest` (`Some`) or done building for it.
    pub(super) fn mark_building(&self, name: &str, digest: &str, building: bool) {
        let mut running = lock(&self.inner.builds.running);
        if building {
            running.insert(name.to_owned(), digest.to_owned());
        } else if running.get(name).map(String::as_str) == Some(digest) {
            running.remove(name);
        }
    }

    /// An image of this installation built with `key`, when there is one: the same build,
    /// whichever workspace it was made for. Only the agent writes the owner and key labels
    /// (`build` sets both on every build), so a Dockerfile's `LABEL` cannot pass for one.
    async fn reusable_build(&self, key: &str) -> Result<Option<String>, String> {
        // One label filter: Podman 4's compatible API answers none for two.
        let options = bollard::query_parameters::ListImagesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{}={key}", super::scope::BUILD_KEY_LABEL)],
            )])),
            ..Default::default()
        };
        let docker = &self.inner.docker;
        let images = super::retry_transient(|| docker.list_images(Some(options.clone())))
            .await
            .map_err(|e| format!("looking for an image built from the same sources: {e}"))?;
        // The owner checked here, the key again: an engine that ignored the filter must not
        // make a stranger's image ours.
        Ok(images
            .into_iter()
            .find(|i| {
                i.labels.get(OWNER_LABEL) == Some(&self.inner.owner)
                    && i.labels
                        .get(super::scope::BUILD_KEY_LABEL)
                        .map(String::as_str)
                        == Some(key)
            })
            .map(|i| i.id.trim_start_matches("sha256:").to_owned()))
    }

    /// The last `tail` lines of the workspace's last build at start, and its length then.
    fn build_log(
        &self,
        workspace: &WorkspaceKey,
        tail: u32,
    ) -> Result<(Vec<u8>, u64), RuntimeError> {
        let path = self.workspace_dir(&workspace.name).join("build.log");
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RuntimeError::NotFound(format!(
                    "a build of workspace {workspace}: none has run at its start on this agent"
                )))
            }
            Err(e) => return Err(runtime_err(format!("reading {}", path.display()), e)),
        };
        let len = text.len() as u64;
        let lines: Vec<&[u8]> = text.split_inclusive(|b| *b == b'\n').collect();
        let from = lines.len().saturating_sub(tail as usize);
        Ok((crate::runtime::log_tail(lines[from..].concat()), len))
    }

    /// The last `tail` lines of the workspace's last build at start; following, what the
    /// build writes next, until it ends (a build that is not running ends the stream at once).
    pub(super) fn build_log_stream(
        &self,
        workspace: &WorkspaceKey,
        tail: u32,
        follow: bool,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        let (first, offset) = self.build_log(workspace, tail)?;
        let first = futures::stream::once(async move { Ok(bytes::Bytes::from(first)) });
        if !follow {
            return Ok(first.boxed());
        }
        let this = self.clone();
        let name = workspace.name.clone();
        let path = self.workspace_dir(&name).join("build.log");
        let rest = futures::stream::unfold(Some(offset), move |state| {
            let (this, name, path) = (this.clone(), name.clone(), path.clone());
            async move {
                let mut offset = state?;
                loop {
                    let building = lock(&this.inner.builds.running).contains_key(&name);
                    let text = std::fs::read(&path).unwrap_or_default();
                    // A new build starts its log afresh.
                    if (text.len() as u64) < offset {
                        offset = 0;
                    }
                    let new = text[offset as usize..].to_vec();
                    offset = text.len() as u64;
                    if !new.is_empty() {
                        let next = building.then_some(offset);
                        return Some((Ok(bytes::Bytes::from(new)), next));
                    }
                    if !building {
                        return None;
                    }
                    // A file has no change events the engine would send: look again soon.
                    tokio::time::sleep(FOLLOW_INTERVAL).await;
                }
            }
        });
        Ok(first.chain(rest).boxed())
    }

    /// The builds the pod template of `deployment` asks for whose image this workspace
    /// has not built yet; `None` when there are none.
    pub(super) async fn missing_builds(
        &self,
        workspace: &WorkspaceKey,
        deployment: &serde_json::Value,
        scope: &BuildScope,
    ) -> Result<Option<Vec<BuildImageTask>>, RuntimeError> {
        let tasks = requested_builds(deployment).map_err(|message| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        })?;
        let mut missing = vec![];
        for task in tasks {
            if self.own_build(scope, &task.image).await?.is_none() {
                missing.push(task);
            }
        }
        Ok((!missing.is_empty()).then_some(missing))
    }

    /// Builds `tasks` for `workspace`, one after the other; the failure to show on the
    /// workspace when one cannot be built.
    pub(super) async fn build_at_start(
        &self,
        workspace: &WorkspaceKey,
        tasks: &[BuildImageTask],
    ) -> Result<(), PodFailure> {
        let path = self.workspace_dir(&workspace.name).join("build.log");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| PodFailure {
                reason: BUILD_FAILED_REASON.into(),
                message: format!("opening the build log {}: {e}", path.display()),
            })?;
        for task in tasks {
            match &task.features {
                None => {
                    self.build_from_dockerfile(workspace, task, &task.image, &mut log)
                        .await?;
                }
                Some(features) => {
                    self.build_with_features(workspace, task, features, &mut log)
                        .await?
                }
            }
        }
        Ok(())
    }

    /// Where builds at start fetch from, or the failure saying there is nowhere.
    pub(super) fn contexts(
        &self,
        task: &BuildImageTask,
    ) -> Result<Arc<dyn BuildContexts>, PodFailure> {
        self.inner.builds.contexts.get().cloned().ok_or_else(|| {
            failure(
                task,
                "this agent has no relay connection to fetch the build context through",
            )
        })
    }

    /// Builds `task` from its Dockerfile and the context the server archives, as image
    /// `name` (the task's own, or a name of its own for the base of Features), or takes over
    /// an image built with the same key; the key it built with.
    pub(super) async fn build_from_dockerfile(
        &self,
        workspace: &WorkspaceKey,
        task: &BuildImageTask,
        name: &str,
        log: &mut std::fs::File,
    ) -> Result<Option<String>, PodFailure> {
        let contexts = self.contexts(task)?;
        tracing::info!(workspace = %workspace, image = %task.image, "fetching a build context");
        let fetched = contexts
            .fetch(&workspace.name, &task.image, None)
            .await
            .map_err(|why| failure(task, why))?;
        let _ = writeln!(
            log,
            "warren: building image {} from commit {} of the workspace's project",
            task.image, fetched.commit
        );
        let plain = BuildImageTask {
            image: name.to_owned(),
            features: None,
            ..task.clone()
        };
        self.build_or_reuse(
            workspace,
            &plain,
            fetched.archive,
            fetched.key.as_deref(),
            log,
        )
        .await?;
        tracing::info!(workspace = %workspace, image = %task.image, commit = %fetched.commit, "image built");
        Ok(fetched.key)
    }

    /// Builds `task` from `context` with `key` — or, when an image of this installation was
    /// built with that key, takes it over under the workspace's name — writing the output
    /// to `log`.
    pub(super) async fn build_or_reuse(
        &self,
        workspace: &WorkspaceKey,
        task: &BuildImageTask,
        context: crate::runtime::BuildContext,
        key: Option<&str>,
        log: &mut std::fs::File,
    ) -> Result<(), PodFailure> {
        let reuse = match key {
            Some(key) => self
                .reusable_build(key)
                .await
                .map_err(|e| failure(task, e))?,
            None => None,
        };
        let progress = match reuse {
            // Dropping the context ends its transfer: nothing of it is needed.
            Some(id) => {
                let _ = writeln!(
                    log,
                    "warren: reusing image {id}, built from the same sources: no step runs again"
                );
                let relabel = BuildImageTask {
                    image: task.image.clone(),
                    dockerfile: "Dockerfile".into(),
                    args: vec![],
                    target: None,
                    features: None,
                };
                let context = single_file_context("Dockerfile", &format!("FROM {id}\n"))
                    .map_err(|e| failure(task, e))?;
                self.build(workspace, &relabel, context, key).await
            }
            None => self.build(workspace, task, context, key).await,
        }
        .map_err(|e| failure(task, warren_types::error_chain(&e)))?;
        follow(task, progress, log).await
    }
}

/// Writes a build's output to `log` until it ends; a failed build's last lines go into the
/// failure.
async fn follow(
    task: &BuildImageTask,
    mut progress: crate::runtime::BuildProgress,
    log: &mut std::fs::File,
) -> Result<(), PodFailure> {
    let mut tail: VecDeque<String> = VecDeque::new();
    while let Some(item) = progress.next().await {
        match item {
            Ok(line) => {
                let _ = log.write_all(line.as_bytes());
                if tail.len() == FAILURE_LINES {
                    tail.pop_front();
                }
                tail.push_back(line.trim_end().to_owned());
            }
            Err(e) => {
                let why = warren_types::error_chain(&e);
                let _ = writeln!(log, "warren: {why}");
                let lines: Vec<String> = tail.into_iter().collect();
                return Err(failure(
                    task,
                    format!("{why}\nthe build's last lines:\n{}", lines.join("\n")),
                ));
            }
        }
    }
    Ok(())
}

/// A build context of one file.
pub(super) fn single_file_context(
    name: &str,
    text: &str,
) -> std::io::Result<crate::runtime::BuildContext> {
    let mut archive = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_ustar();
    header.set_size(text.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    archive.append_data(&mut header, name, text.as_bytes())?;
    let bytes = bytes::Bytes::from(archive.into_inner()?);
    Ok(futures::stream::once(async move { Ok(bytes) }).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_are_read_from_the_pod_template() {
        let none = serde_json::json!({"spec": {"template": {"metadata": {}}}});
        assert!(requested_builds(&none).unwrap().is_empty());
        let one = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
            IMAGE_BUILDS_ANNOTATION: r#"[{"image":"app:dev","dockerfile":"Dockerfile"}]"#
        }}}}});
        let tasks = requested_builds(&one).unwrap();
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].image, "app:dev");
        let bad = serde_json::json!({"spec": {"template": {"metadata": {"annotations": {
            IMAGE_BUILDS_ANNOTATION: "[{\"image\": 3}]"
        }}}}});
        assert!(requested_builds(&bad)
            .unwrap_err()
            .contains(IMAGE_BUILDS_ANNOTATION));
    }
}
