//! Warm pools (issue 43, Coder's prebuilt workspaces): a project may keep N workspaces made
//! from the newest prebuild of its default ref, started once (their volumes copied from the
//! prebuild, the steps of every start run) and stopped, owned by and counted against the
//! quotas of the maintainer who turned prebuilds on, and shown to no one. A user's new
//! workspace of that ref, with the project's own definition and the default size, takes one
//! (`workspaces::pool::claim`): it becomes theirs, rendered with their identity, secrets and
//! dotfiles, and starts — catching up from the prebuild's commit, as any workspace made from a prebuild.
//!
//! [`refill`] runs in the prebuild driver's pass: it is told nothing about what changed, and
//! from the pools' rows alone stops members whose startup is done, replaces those of an older
//! prebuild or that failed, removes the ones no pool wants, and makes what is missing.
//!
//! A pooled workspace runs nobody's secrets or dotfiles and the project's credential only
//! (`sources::of_workspace`, `rerender::render_row`): whoever takes it is not known when it
//! starts, and the first start of a taken one brings in its new owner's.

use super::prebuild_progress::{progress, Progress, TIMEOUT_MS};
use super::render::{self, RenderInput};
use super::sources::Source;
use super::workspaces::checks::check_quotas;
use super::{AppError, AppState};
use crate::store::agents::AgentRow;
use crate::store::prebuilds::PrebuildRow;
use crate::store::projects::ProjectRow;
use crate::store::workspaces::{ChangedBy, NewWorkspace, StoredSeed, WorkspaceRow};
use std::collections::BTreeMap;
use warren_types::prebuild::Seed;
use warren_types::{ActualState, DesiredState, WorkspaceId};

/// Keeps every project's warm pool full of usable members and nothing else (see the module's
/// comment). A project whose pool cannot be filled (a quota, a gone maintainer) is logged and
/// tried again on the next pass; it does not keep the others from theirs.
pub async fn refill(state: &AppState) -> Result<(), AppError> {
    let mut members: BTreeMap<Option<i64>, Vec<WorkspaceRow>> = BTreeMap::new();
    for w in state.store.pool_members().await? {
        members
            .entry(w.project_id.map(|p| p.get()))
            .or_default()
            .push(w);
    }
    for (project, _, _) in state.store.projects_with_prebuilds().await? {
        let Some(p) = state.store.project_by_key(&project.to_string()).await? else {
            continue;
        };
        let Some(size) = p.prebuild_pool.filter(|n| *n > 0) else {
            continue;
        };
        let mine = members.remove(&Some(project)).unwrap_or_default();
        if let Err(e) = refill_project(state, &p, size, mine).await {
            tracing::warn!(project = %p.name, error = %e.message, "warm pool: could not refill it");
        }
    }
    // What is left belongs to no pool: turned off, its project gone, its prebuilds off.
    for w in members.into_values().flatten() {
        terminate(state, &w, "the project keeps no warm pool any more").await?;
    }
    Ok(())
}

/// Why a pooled workspace is no longer wanted (`None`: it stays), moving on one whose
/// startup is done (stopped, to wait).
async fn verdict(
    state: &AppState,
    w: &WorkspaceRow,
    p: &ProjectRow,
    newest: Option<&PrebuildRow>,
) -> Result<Option<String>, AppError> {
    if p.prebuild_agent_id != Some(w.agent_id) {
        return Ok(Some(
            "the project's prebuilds moved to another agent".into(),
        ));
    }
    if let Some(n) = newest.filter(|n| w.pool_of != Some(n.id)) {
        return Ok(Some(format!(
            "the prebuild of commit {} replaced the one it was made from",
            n.commit_sha.get(..12).unwrap_or(&n.commit_sha)
        )));
    }
    if matches!(w.actual_state, ActualState::Failed | ActualState::Error) {
        let why = w.failure_reason.as_deref().unwrap_or("no reason given");
        return Ok(Some(format!("it failed: {why}")));
    }
    match w.desired_state {
        DesiredState::Running => match progress(state, w.created_at, w).await? {
            Progress::Waiting => Ok(None),
            // Its steps of every start ran: it waits stopped, costing no CPU or memory.
            Progress::Done(_) | Progress::Stopped => {
                stop(state, w).await?;
                Ok(None)
            }
            Progress::Failed(why, _) => Ok(Some(format!("its startup failed: {why}"))),
        },
        _ if w.actual_state != ActualState::Stopped
            && state.clock.now_ms() - w.desired_state_updated_at > TIMEOUT_MS =>
        {
            Ok(Some("it did not stop".into()))
        }
        _ => Ok(None),
    }
}

async fn refill_project(
    state: &AppState,
    p: &ProjectRow,
    size: i64,
    members: Vec<WorkspaceRow>,
) -> Result<(), AppError> {
    let Some(agent_id) = p.prebuild_agent_id else {
        return Ok(());
    };
    let newest = (state.store)
        .usable_prebuild(p.id, agent_id, &p.default_ref)
        .await?;
    let mut kept = 0;
    for w in &members {
        let why = match verdict(state, w, p, newest.as_ref()).await? {
            Some(why) => Some(why),
            None if kept >= size => Some("the project's warm pool was made smaller".into()),
            None => None,
        };
        match why {
            Some(why) => terminate(state, w, &why).await?,
            None => kept += 1,
        }
    }
    let Some(prebuild) = newest else {
        return Ok(());
    };
    let agent = (state.store.agent_by_id(agent_id).await?)
        .ok_or_else(|| AppError::not_found(format!("agent {agent_id}")))?;
    for _ in kept..size {
        make_member(state, p, &agent, &prebuild).await?;
    }
    Ok(())
}

/// A new member of `p`'s pool, made from `prebuild` as a workspace created from it would be,
/// its definition and size those of the prebuild's own workspace.
async fn make_member(
    state: &AppState,
    p: &ProjectRow,
    agent: &AgentRow,
    prebuild: &PrebuildRow,
) -> Result<WorkspaceId, AppError> {
    let store = &state.store;
    let gone = || AppError::not_found(format!("the workspace of prebuild {}", prebuild.id));
    let built = match prebuild.workspace() {
        Some(id) => store.workspace_by_id(id).await?.ok_or_else(gone)?,
        None => return Err(gone()),
    };
    let owner = (p.prebuild_by.map(|by| store.user_by_id(by)))
        .ok_or_else(|| AppError::not_found("the maintainer who turned prebuilds on"))?
        .await?
        .filter(|u| u.is_active())
        .ok_or_else(|| {
            AppError::conflict(
                "prebuilds_owner_gone",
                "the maintainer who turned prebuilds on is disabled or gone: turn them on again",
            )
        })?;
    let now = state.clock.now_ms();
    let space = store.personal_space(owner.id, &owner.username, now).await?;
    let devfile = render::parse(&built.devfile, "prebuild devfile")?;
    let seed = StoredSeed {
        prebuild: prebuild.id,
        workspace_id: built.id,
        workspace: built.name.clone(),
        commit: prebuild.commit_sha.clone(),
    };
    let source = Source::of_project(state, p)?;
    // Before the insert: the collector keeps a prebuild chosen this recently.
    store.prebuild_used(prebuild.id, now).await?;
    let name = super::names::generate();
    let new = NewWorkspace {
        name: name.clone(),
        owner_id: owner.id,
        agent_id: agent.id,
        project_id: Some(p.id),
        git_ref: Some(p.default_ref.clone()),
        repository: None,
        definition_path: None,
        devfile: built.devfile.clone(),
        resources: built.resources.clone(),
        variables: vec![],
        starter: None,
        space_id: space.id,
        prebuild_id: None,
        seed: Some(seed.clone()),
        pool_of: Some(prebuild.id),
    };
    let w = store
        .insert_workspace(
            &new,
            now,
            |counts| {
                check_quotas(agent, counts, &built.resources).map_err(|mut e| {
                    e.message = format!(
                        "it counts against {}'s quotas: {}",
                        owner.username, e.message
                    );
                    e
                })
            },
            |id| {
                render::render_workspace(
                    &devfile,
                    RenderInput {
                        name: &name,
                        id,
                        agent,
                        project: Some(source.project_input(Some(&p.default_ref))),
                        resources: &built.resources,
                        variables: &[],
                        desired: DesiredState::Running,
                        dotfiles_url: None,
                        starter: None,
                        prebuild: false,
                        seed: Some(Seed {
                            pooled: true,
                            ..seed.as_seed()
                        }),
                    },
                )
            },
        )
        .await?;
    state.signals.notify(agent.id);
    state.changed();
    tracing::info!(project = %p.name, prebuild = prebuild.id, workspace = %w.name, "warm pool: workspace made");
    Ok(w.id)
}

/// Asks a pooled workspace to stop.
async fn stop(state: &AppState, w: &WorkspaceRow) -> Result<(), AppError> {
    let now = state.clock.now_ms();
    let set = (state.store)
        .set_desired_state(
            w.id,
            w.version,
            DesiredState::Stopped,
            now,
            ChangedBy::Other,
        )
        .await?;
    if set.is_some() {
        state.signals.notify(w.agent_id);
        state.changed();
    }
    Ok(())
}

/// Removes a pooled workspace, saying why in the server's log.
async fn terminate(state: &AppState, w: &WorkspaceRow, why: &str) -> Result<(), AppError> {
    let now = state.clock.now_ms();
    let set = (state.store)
        .set_desired_state(
            w.id,
            w.version,
            DesiredState::Terminated,
            now,
            ChangedBy::Other,
        )
        .await?;
    // A lost race: a user took it meanwhile (the next pass sees it gone from the pool).
    if set.is_some() {
        tracing::info!(workspace = %w.name, project = ?w.project_name, reason = why, "warm pool: workspace removed");
        state.signals.notify(w.agent_id);
        state.changed();
    }
    Ok(())
}
