//! Rebuilding a workspace: made again from its definition as it is now — a devfile the user
//! gives, else its project's (or its repository's) at the workspace's ref, else the one it
//! was made from — keeping
//! its volume and home. What changes is told before (a dry run) and with the answer; a
//! definition that no longer validates or renders is refused with its reasons and the
//! workspace runs on as it was.

use super::{check_for_creation, for_caller, with_notices};
use crate::app::rerender::{self, WRITE_ATTEMPTS};
use crate::app::rights;
use crate::app::sources::{self, Source};
use crate::app::{render, AppError, AppState, Principal};
use crate::store::workspaces::WorkspaceRow;
use warren_types::api::{RebuildOutcome, RebuildWorkspaceRequest};
use warren_types::DesiredState;

/// Where a rebuild's definition comes from, and its text.
struct Definition {
    text: String,
    /// Names it in errors (`devfile`, `project devfile`, …).
    field: &'static str,
    /// Names it for the user.
    source: String,
}

/// Rebuilds workspace `key` (the caller must be allowed to manage it), or with `dry_run` tells what a
/// rebuild would change. A running workspace is restarted with the new objects; a stopped
/// one starts with them next time.
pub async fn rebuild(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &RebuildWorkspaceRequest,
) -> Result<RebuildOutcome, AppError> {
    let r = rebuild_unaudited(state, who, key, req).await;
    if req.dry_run {
        // A dry run changes nothing.
        return r;
    }
    let target = match &r {
        Ok(o) => crate::app::audit::Target::shown_workspace(&o.workspace),
        Err(_) => crate::app::audit::Target::named("workspace", key),
    };
    crate::app::audit::audited(state, who, "workspace.rebuild", target, r).await
}

async fn rebuild_unaudited(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &RebuildWorkspaceRequest,
) -> Result<RebuildOutcome, AppError> {
    for _ in 0..WRITE_ATTEMPTS {
        let (w, agent) = super::to_remake(state, who, key).await?;
        let definition = definition(state, who, &w, req).await?;
        let text =
            render::resolve_parent(&state.parents, &definition.text, definition.field).await?;
        let new = render::parse(&text, definition.field)?;
        check_for_creation(
            &new,
            definition.field,
            w.project_id.is_some() || w.repository.is_some(),
            w.starter.as_deref(),
        )?;
        let old = render::parse(&w.devfile, "stored devfile")?;
        let changes = warren_devfile::diff::changes(&old, &new);
        let desired = match w.desired_state {
            DesiredState::Running | DesiredState::RestartRequested => {
                DesiredState::RestartRequested
            }
            other => other,
        };
        // Rendered before anything is stored: a definition the agent's configuration
        // refuses (a capability it does not allow, a size over its cap) is refused here.
        let rendered = rerender::render_row(state, &w, &agent, &new, &w.resources, desired).await?;
        if req.dry_run {
            return Ok(RebuildOutcome {
                source: definition.source,
                changes,
                applied: false,
                workspace: with_notices(&w, for_caller(state, who, &w).await?)?,
            });
        }
        let stored = state
            .store
            .set_rendered(
                w.id,
                w.version,
                &rendered,
                &w.resources,
                desired,
                state.clock.now_ms(),
                Some(&text),
            )
            .await?;
        if stored.is_none() {
            // Changed meanwhile: read again and decide again.
            continue;
        }
        state.signals.notify(w.agent_id);
        state.changed();
        tracing::info!(workspace = %w.name, source = %definition.source, changes = changes.len(), "workspace rebuilt");
        let w = rights::visible(state, who, key).await?;
        return Ok(RebuildOutcome {
            source: definition.source,
            changes,
            applied: true,
            workspace: with_notices(&w, for_caller(state, who, &w).await?)?,
        });
    }
    Err(AppError::conflict(
        "conflict",
        "the workspace changed too often while rebuilding it; try again",
    ))
}

/// The request's devfile, else the project's stored one, else its repository's at the
/// workspace's ref (the file chosen at creation, when one was), else the definition the
/// workspace was made from.
async fn definition(
    state: &AppState,
    who: &Principal,
    w: &WorkspaceRow,
    req: &RebuildWorkspaceRequest,
) -> Result<Definition, AppError> {
    if let Some(d) = &req.devfile {
        return Ok(Definition {
            text: d.clone(),
            field: "devfile",
            source: "the devfile given".into(),
        });
    }
    if w.repository.is_some() {
        // With the owner's credential, as the workspace clones it.
        if let Some(source) = crate::app::sources::of_workspace(state, w).await? {
            return from_source(state, w, &source).await;
        }
    }
    let project = match w.project_id {
        Some(p) => state.store.project_by_key(&p.to_string()).await?,
        None => None,
    };
    let Some(p) = project else {
        return Ok(Definition {
            text: w.devfile.clone(),
            field: "stored devfile",
            source: "the definition it was made from".into(),
        });
    };
    // The project's definition as it is now is the project's to show: only to who may use
    // the project (as at creation), not to whoever manages the workspace (a space's owner
    // need not be a member of a private project).
    let p = crate::app::projects::usable(state, who, &p.id.to_string())
        .await
        .map_err(|e| {
            if e.kind == crate::app::ErrorKind::NotFound {
                AppError::new(
                    crate::app::ErrorKind::Forbidden,
                    "forbidden",
                    format!(
                        "rebuilding from project {:?} needs access to it; give a devfile instead",
                        p.name
                    ),
                )
            } else {
                e
            }
        })?;
    if let (Some(d), None) = (&p.devfile, &w.definition_path) {
        return Ok(Definition {
            text: d.clone(),
            field: "project devfile",
            source: format!("project {}'s devfile", p.name),
        });
    }
    from_source(state, w, &Source::of_project(state, &p)?).await
}

/// The definition in the workspace's project's repository or the repository it was opened
/// from, at its ref.
async fn from_source(
    state: &AppState,
    w: &WorkspaceRow,
    source: &Source,
) -> Result<Definition, AppError> {
    let git_ref = w
        .git_ref
        .clone()
        .unwrap_or_else(|| source.default_ref.clone());
    let variables = w.stored_variables(&state.store)?;
    let chosen = w.definition_path.as_deref();
    let read = sources::definition(state, source, &git_ref, &variables, chosen).await?;
    let at = if git_ref.is_empty() {
        "its default branch"
    } else {
        git_ref.as_str()
    };
    Ok(Definition {
        text: read.devfile,
        field: "repository devfile",
        source: format!("{source} at {at}"),
    })
}
