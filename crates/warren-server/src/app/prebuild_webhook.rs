//! A project's push webhook for prebuilds (issue 43): its secret, set by the maintainers and
//! sealed at rest, and the webhook itself, which only makes the server read the project's
//! prebuilt refs now (the forges' signature rule is `webhooks`').

use super::{AppError, AppState, Principal};
use warren_types::prebuild::Prebuild;

/// Sets (or with `None` removes) the secret the project's push webhooks are checked with
/// (its maintainers); stored sealed, never shown.
pub async fn set_webhook_secret(
    state: &AppState,
    who: &Principal,
    key: &str,
    secret: Option<&str>,
) -> Result<(), AppError> {
    let p = super::projects::maintained(state, who, key).await?;
    if let Some(s) = secret {
        super::webhooks::check_secret("secret", s)?;
    }
    state
        .store
        .set_prebuild_webhook_secret(p.id, secret)
        .await?;
    tracing::info!(project = %p.name, by = %who.user.username, set = secret.is_some(), "prebuild webhook secret changed");
    Ok(())
}

/// A forge's push webhook for the project (no caller: the proof is the signature): checked
/// against the project's webhook secret in constant time, then its ref is looked at now as
/// a poll does. The body is not read for a commit: only the ref's own answer is trusted.
/// The prebuilds started (none when each ref's newest commit has one or one runs).
pub async fn webhook(
    state: &AppState,
    key: &str,
    proof: &super::webhooks::WebhookProof,
    body: &[u8],
) -> Result<Vec<Prebuild>, AppError> {
    // One answer whether the project is missing or has no secret: a webhook tells nobody
    // which projects exist.
    let no_hook = || AppError::not_found(format!("a prebuild webhook for project {key:?}"));
    let p = state.store.project_by_key(key).await?.ok_or_else(no_hook)?;
    let secret = state
        .store
        .prebuild_webhook_secret(p.id)
        .await?
        .ok_or_else(no_hook)?;
    if let Err(e) = super::webhooks::verify(&secret, proof, body, "the project's") {
        tracing::warn!(project = %p.name, "prebuild webhook refused: {}", e.message);
        return Err(e);
    }
    // As the poll: not for a project whose prebuilds' maintainer was disabled.
    let on = state.store.projects_with_prebuilds().await?;
    if !on.iter().any(|(id, _, _)| *id == p.id.get()) {
        return Err(AppError::conflict(
            "prebuilds_off",
            format!(
                "project {:?} has no prebuilds (or the maintainer who turned them on can no \
                 longer sign in)",
                p.name
            ),
        ));
    }
    let started = super::prebuilds::poll_project(state, &p).await?;
    tracing::info!(project = %p.name, started = ?started.iter().map(|r| r.id).collect::<Vec<_>>(), "prebuild webhook accepted");
    Ok(started.iter().map(super::prebuilds::view).collect())
}
