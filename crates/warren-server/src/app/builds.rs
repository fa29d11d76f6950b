//! The build context of an image a workspace builds before it starts (a devfile `image`
//! component with `autoBuild`, a dev container's `build`): its agent asks through its relay,
//! and gets the component's build context archived out of the workspace's project (or the
//! repository it was opened from) at the workspace's ref, read with the project's credential
//! — which never leaves the server.
//!
//! Only the agent that runs the workspace may ask, and only for an image its devfile builds
//! at start (or a local Feature its dev container names); the archive holds the context
//! directory (the Feature's folder) alone, at most [`MAX_BUILD_CONTEXT_BYTES`].

use super::{AppError, AppState, ErrorKind};
use sha2::{Digest, Sha256};
use warren_git::Archive;
use warren_types::relay::BuildContextRequest;
use warren_types::DesiredState;

/// Largest build context the server archives for an agent.
pub const MAX_BUILD_CONTEXT_BYTES: u64 = 1 << 30;

/// A build context and the build's key.
#[derive(Debug)]
pub struct BuildContext {
    pub archive: Archive,
    /// [`warren_types::relay::BUILD_KEY_HEADER`]: see [`build_key`].
    pub key: String,
}

/// The key of a build: a digest of the context's tree (its contents), the Dockerfile's path in
/// it, the arguments and the target — all a build is made of besides what its steps fetch.
pub fn build_key(tree: &str, dockerfile: &str, args: &[String], target: Option<&str>) -> String {
    let mut h = Sha256::new();
    for part in ["warren build key 1", tree, dockerfile] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    for a in args {
        h.update(a.as_bytes());
        h.update([0]);
    }
    h.update([1]);
    h.update(target.unwrap_or_default().as_bytes());
    hex::encode(h.finalize())
}

/// The context of `req.image` of `req.workspace`, for the agent the relay's JWT names.
pub async fn context(
    state: &AppState,
    bearer: Option<&str>,
    req: &BuildContextRequest,
) -> Result<BuildContext, AppError> {
    let agent = super::gitops::relay_agent(state, bearer).await?;
    // Another agent's workspace is as absent as a deleted one; a prebuild's builds too.
    let w = state
        .store
        .agent_workspace_by_name(&req.workspace)
        .await?
        .filter(|w| w.agent_id == agent.id && w.desired_state != DesiredState::Terminated)
        .ok_or_else(|| {
            AppError::not_found(format!(
                "workspace {:?} of agent {:?}",
                req.workspace, agent.name
            ))
        })?;
    let devfile = super::render::parse(&w.devfile, "devfile")?;
    let image = devfile
        .images
        .iter()
        .find(|i| i.auto_build && i.image_name == req.image)
        .ok_or_else(|| {
            AppError::not_found(format!(
                "image {:?} built at the start of workspace {:?} (no image component with \
                 `autoBuild` names it)",
                req.image, w.name
            ))
        })?;
    let unusable = |why: &str| {
        AppError::new(
            ErrorKind::Unprocessable,
            "no_build_context",
            format!("image {:?} of workspace {:?}: {why}", req.image, w.name),
        )
    };
    // A local Feature of the image's dev container: its folder, when the image names it.
    let (context, dockerfile) = match &req.feature {
        Some(dir) => {
            let named = image.features.iter().flat_map(|f| &f.features).any(|f| {
                matches!(&f.source, warren_types::features::FeatureSource::Local(d) if d == dir)
            });
            if !named {
                return Err(AppError::not_found(format!(
                    "local Feature {dir:?} of image {:?} of workspace {:?} (its dev container names no such Feature)",
                    req.image, w.name
                )));
            }
            (dir.clone(), String::new())
        }
        None if image.dockerfile.is_empty() => {
            return Err(unusable(
                "it is built on its dev container's image, from no context of the project",
            ))
        }
        None => image
            .build_paths()
            .map_err(|why| AppError::new(ErrorKind::Unprocessable, "invalid_devfile", why))?,
    };
    let source = super::sources::of_workspace(state, &w)
        .await?
        .ok_or_else(|| unusable("the workspace has no project or repository to take the build context from (its project may have been deleted)"))?;
    let git_ref = w.git_ref.as_deref().unwrap_or(&source.default_ref);
    let archive = state
        .git
        .archive(source.remote(), git_ref, &context, MAX_BUILD_CONTEXT_BYTES)
        .await
        .map_err(|e| source.git_error(&e))?;
    let key = build_key(
        &archive.tree,
        &dockerfile,
        &image.args,
        image.target.as_deref(),
    );
    tracing::info!(workspace = %w.name, image = %req.image, feature = ?req.feature, source = %source.label, git_ref, commit = %archive.commit, bytes = archive.len, "build context archived");
    Ok(BuildContext { archive, key })
}
