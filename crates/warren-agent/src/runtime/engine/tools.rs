//! The shared tools volume (the injected editor): filled once per tools image by running the
//! renderer's tools init container against a volume every workspace mounts read-only.
//!
//! Kubernetes copies the tools into each pod's `emptyDir` at every start; an engine has one
//! host, so one copy serves all. The fill runs the tools image's own `install`, which copies
//! each tool whole (a staging directory, then a rename) and is a no-op when the volume already
//! holds that build, so concurrent fills (two agents on one engine) and interrupted ones are
//! harmless. When the image is missing and cannot be pulled, or the copy fails, the workspace
//! starts all the same: its startup script finds the files missing and says so, and the fill
//! is tried again a minute later.
//!
//! The fill runs the image by the id it checked, and records that id: the volume holds what
//! that image held, whatever its name points at later (a changed id is filled again at the
//! next start). Only those with the engine itself can point the name elsewhere: a workspace's
//! build is tagged in its own namespace (`scope`). An image a workspace build put under the
//! name before builds were scoped carries that build's labels, and is refused.

use super::*;
use plan::{ToolsPlan, TOOLS_IMAGE_LABEL};

/// How long a failed fill is not retried (each try may wait for a pull).
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// What this agent knows of a tools volume.
#[derive(Debug, Clone)]
pub(super) enum ToolsState {
    /// Filled from this image id.
    Ready(String),
    /// The last fill failed (when, why).
    Failed(tokio::time::Instant, String),
}

impl EngineRuntime {
    /// Makes sure the pod's tools volume exists and holds its image's files; never fails the
    /// workspace. Serialised per agent; cheap once the volume was filled from this image.
    pub(super) async fn ensure_tools(&self, tools: &ToolsPlan, pull_secrets: &[String]) {
        let mut known = self.inner.tools.lock().await;
        let image_id = self.tools_image_id(&tools.image).await;
        match (known.get(&tools.image), &image_id) {
            (Some(ToolsState::Ready(id)), Some(now)) if id == now => return,
            (Some(ToolsState::Failed(at, why)), _) if at.elapsed() < RETRY_AFTER => {
                tracing::debug!(image = %tools.image, reason = %why, "tools fill failed lately; not retried yet");
                return;
            }
            _ => {}
        }
        let started = tokio::time::Instant::now();
        let outcome = self
            .fill_tools(tools, pull_secrets, image_id.is_none())
            .await;
        match outcome {
            Ok(id) => {
                tracing::info!(
                    image = %tools.image,
                    volume = %tools.volume,
                    seconds = started.elapsed().as_secs_f64(),
                    "tools volume ready"
                );
                known.insert(tools.image.clone(), ToolsState::Ready(id));
            }
            Err(message) => {
                tracing::warn!(
                    image = %tools.image,
                    error = %message,
                    "the editor's tools cannot be prepared; workspaces start without an editor"
                );
                known.insert(
                    tools.image.clone(),
                    ToolsState::Failed(tokio::time::Instant::now(), message),
                );
                // The volume must exist for the pod's mount; empty, it makes the startup
                // script say the editor's files are missing.
                let _ = self.create_tools_volume(tools).await;
            }
        }
    }

    /// Whether the engine holds `image` (for `warren up`, which builds the editor's tools
    /// image on first use).
    pub async fn image_present(&self, image: &str) -> bool {
        self.tools_image_id(image).await.is_some()
    }

    /// Forgets failed fills, so the next workspace start tries again at once (the tools image
    /// has just been built).
    pub async fn retry_tools_now(&self) {
        self.inner
            .tools
            .lock()
            .await
            .retain(|_, s| matches!(s, ToolsState::Ready(_)));
    }

    async fn tools_image_id(&self, image: &str) -> Option<String> {
        self.inner
            .docker
            .inspect_image(image)
            .await
            .ok()
            .and_then(|i| i.id)
    }

    async fn create_tools_volume(&self, tools: &ToolsPlan) -> Result<(), String> {
        let request = bollard::models::VolumeCreateRequest {
            name: Some(tools.volume.clone()),
            labels: Some(HashMap::from([(
                TOOLS_IMAGE_LABEL.to_owned(),
                tools.image.clone(),
            )])),
            // Podman gives a new volume to the user of the first container mounting it. When
            // a fill failed (no tools image yet), that is a workspace's uid 5001, and root
            // without capabilities could never fill it later; owning it explicitly keeps it
            // root's. (Docker's local driver neither chowns nor takes this option.)
            driver_opts: self
                .inner
                .is_podman
                .then(|| HashMap::from([("o".to_owned(), "uid=0,gid=0".to_owned())])),
            ..Default::default()
        };
        match self.inner.docker.create_volume(request).await {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(409) => Ok(()),
            Err(e) => Err(format!(
                "creating volume {}: {}",
                tools.volume,
                error_message(&e)
            )),
        }
    }

    /// Pulls the image when missing, then runs its `install` into the volume; the image id.
    async fn fill_tools(
        &self,
        tools: &ToolsPlan,
        pull_secrets: &[String],
        missing: bool,
    ) -> Result<String, String> {
        if missing {
            self.pull(&tools.image, pull_secrets)
                .await
                .map_err(|e| format!("not present locally and not pulled: {e}"))?;
        }
        // The fill runs (as root, into every workspace's editor) exactly the image checked
        // here and recorded, whatever the name points at a moment later.
        let image = self
            .inner
            .docker
            .inspect_image(&tools.image)
            .await
            .map_err(|e| format!("inspecting it: {}", error_message(&e)))?;
        let id = image
            .id
            .ok_or_else(|| format!("image {} has no id", tools.image))?;
        let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
        if let Some(why) = scope::built_by_workspace(|k| labels.get(k).map(String::as_str)) {
            return Err(format!(
                "image {} ({id}) is not a tools image: {why}. Remove that tag and make the tools \
                 image again (`warren tools build`)",
                tools.image
            ));
        }
        let mut body = tools.body.clone();
        body.image = Some(id.clone());
        self.create_tools_volume(tools).await?;
        let docker = &self.inner.docker;
        // One per agent (fills are serialised per agent): a left-over goes below.
        let name = format!("{}.fill-{}", tools.volume, self.inner.owner);
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        let _ = self.remove(&name).await;
        let run = async {
            docker
                .create_container(Some(options), body)
                .await
                .map_err(|e| format!("creating its container: {}", error_message(&e)))?;
            docker
                .start_container(&name, None)
                .await
                .map_err(|e| format!("starting its container: {}", error_message(&e)))?;
            // The exit code is read below.
            self.wait_stopped(&name).await;
            let state = self
                .inspect(&name)
                .await
                .map_err(|e| format!("inspecting its container: {}", error_message(&e)))?
                .state
                .unwrap_or_default();
            match state.exit_code {
                Some(0) => Ok(()),
                code => Err(format!(
                    "its install exited with status {}: {}",
                    code.unwrap_or(-1),
                    self.log_tail(&name).await
                )),
            }
        }
        .await;
        let _ = self.remove(&name).await;
        run?;
        Ok(id)
    }
}
