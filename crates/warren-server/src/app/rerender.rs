//! Re-rendering: a workspace's objects made again from its stored devfile when what they were
//! made from changed (its size, its agent's configuration, its project's credential).

use super::render::{self, RenderInput};
use super::{AppError, AppState};
use crate::store::agents::AgentRow;
use crate::store::workspaces::{ChangedBy, RenderedObjects, WorkspaceFilter, WorkspaceRow};
use warren_types::api::WorkspaceResources;
use warren_types::DesiredState;

/// Attempts of an optimistic write before giving up with a conflict.
pub const WRITE_ATTEMPTS: usize = 20;

/// Re-renders a workspace with `resources` under `agent`'s current configuration and stores
/// the objects, forcing a full send. A `Running` workspace is restarted (desired
/// `RestartRequested`); a stopped one starts with the new objects next time. Unless `always`,
/// nothing is written when the objects did not change. `Ok(Some(wrote))`, or `Ok(None)` when
/// it lost a race (reload and retry).
pub async fn rerender(
    state: &AppState,
    w: &WorkspaceRow,
    agent: &AgentRow,
    resources: &WorkspaceResources,
    always: bool,
    restart: bool,
) -> Result<Option<bool>, AppError> {
    let devfile = render::parse(&w.devfile, "stored devfile")?;
    let desired = match w.desired_state {
        DesiredState::Running | DesiredState::RestartRequested if restart => {
            DesiredState::RestartRequested
        }
        other => other,
    };
    let rendered = render_row(state, w, agent, &devfile, resources, desired).await?;
    if !always {
        let mut old = w.objects(&state.store)?;
        let mut new = rendered.objects.clone();
        // Replicas follow the desired state and are not part of the comparison.
        render::normalise_replicas(&mut old);
        render::normalise_replicas(&mut new);
        if old == new {
            return Ok(Some(false));
        }
    }
    let stored = state
        .store
        .set_rendered(
            w.id,
            w.version,
            &rendered,
            resources,
            desired,
            state.clock.now_ms(),
            None,
        )
        .await?;
    if stored.is_some() {
        state.signals.notify(w.agent_id);
        state.changed();
    }
    Ok(stored.map(|()| true))
}

/// The objects of workspace `w` made from `devfile` (its own, or a rebuild's) under
/// `agent`'s configuration, with its sources (project or repository), variables, owner and
/// the owner's secrets as they are now.
pub async fn render_row(
    state: &AppState,
    w: &WorkspaceRow,
    agent: &AgentRow,
    devfile: &warren_devfile::Devfile,
    resources: &WorkspaceResources,
    desired: DesiredState,
) -> Result<RenderedObjects, AppError> {
    let source = super::sources::of_workspace(state, w).await?;
    let owner = state.store.user_by_id(w.owner_id).await?;
    // A prebuild's own workspace, and one waiting in a warm pool, belong to no one yet:
    // nobody's secrets, variables or dotfiles.
    let owner = owner.filter(|_| !w.is_hidden());
    let variables = match &owner {
        Some(o) => {
            let folder = w
                .repository
                .as_deref()
                .map(warren_types::git::repository_folder);
            let at = super::personal::Placement {
                space: &w.space_path,
                project: w.project_name.as_deref().or(folder.as_deref()),
                granted: !state.store.grants(w.id).await?.is_empty(),
            };
            let personal = super::personal::personal(state, o, at).await?;
            super::personal::merged(personal.variables, &w.stored_variables(&state.store)?)
        }
        None => w.stored_variables(&state.store)?,
    };
    render::render_workspace(
        devfile,
        RenderInput {
            name: &w.name,
            id: w.id,
            agent,
            project: source
                .as_ref()
                .map(|s| s.project_input(w.git_ref.as_deref())),
            resources,
            variables: &variables,
            desired,
            dotfiles_url: owner.as_ref().and_then(|u| u.dotfiles_url.as_deref()),
            starter: w.starter.as_deref(),
            prebuild: w.prebuild_id.is_some(),
            seed: w.seed.as_ref().map(|s| warren_types::prebuild::Seed {
                pooled: w.pool_of.is_some(),
                ..s.as_seed()
            }),
        },
    )
}

/// After an agent's configuration changed: re-render its workspaces, restarting those whose
/// objects changed (lifecycle.md: changing the cap re-renders and restarts). A workspace the
/// new configuration cannot render (e.g. over a lowered cap) keeps its objects; the reason is
/// recorded as its failure reason.
pub async fn rerender_agent_workspaces(
    state: &AppState,
    agent: &AgentRow,
) -> Result<usize, AppError> {
    let filter = WorkspaceFilter {
        agent: Some(agent.id),
        include_prebuilds: true,
        ..Default::default()
    };
    rerender_all(
        state,
        filter,
        true,
        "the agent's new configuration cannot be applied",
    )
    .await
}

/// After a project's credential changed: re-render its workspaces so their credential
/// Secret follows, without restarting them (Secret files are rewritten in place).
pub async fn rerender_project_workspaces(
    state: &AppState,
    project: warren_types::ProjectId,
) -> Result<usize, AppError> {
    let filter = WorkspaceFilter {
        project: Some(project),
        include_prebuilds: true,
        ..Default::default()
    };
    rerender_all(
        state,
        filter,
        false,
        "the project's new credential cannot be applied",
    )
    .await
}

/// After a user's secrets or identity changed: re-render their workspaces so they follow,
/// without restarting them (files are rewritten in place; the environment is the next
/// start's).
pub async fn rerender_owner_workspaces(
    state: &AppState,
    owner: warren_types::UserId,
) -> Result<usize, AppError> {
    let filter = WorkspaceFilter {
        owner: Some(owner),
        ..Default::default()
    };
    rerender_all(
        state,
        filter,
        false,
        "its owner's secrets cannot be applied",
    )
    .await
}

/// After who may use workspace `id` changed (a softlink grant given or taken back):
/// re-render it. With `restart` (it widened), a running one whose objects changed — its
/// owner's secrets withdrawn — restarts, so none stays in its processes' environment.
pub async fn rerender_workspace(
    state: &AppState,
    id: warren_types::WorkspaceId,
    restart: bool,
) -> Result<(), AppError> {
    for _ in 0..WRITE_ATTEMPTS {
        let Some(w) = state.store.workspace_by_id(id).await? else {
            return Ok(());
        };
        if w.desired_state == DesiredState::Terminated {
            return Ok(());
        }
        let Some(agent) = state.store.agent_by_id(w.agent_id).await? else {
            return Ok(());
        };
        if rerender(state, &w, &agent, &w.resources, false, restart)
            .await?
            .is_some()
        {
            return Ok(());
        }
    }
    Err(AppError::conflict(
        "conflict",
        "the workspace changed too often while re-rendering it; try again",
    ))
}

async fn rerender_all(
    state: &AppState,
    filter: WorkspaceFilter,
    restart: bool,
    failure: &str,
) -> Result<usize, AppError> {
    let mut changed = 0;
    let mut after = None;
    loop {
        let f = WorkspaceFilter {
            after,
            limit: 200,
            ..filter.clone()
        };
        let page = state.store.list_workspaces(&f).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.get());
        for w in page {
            if w.desired_state == DesiredState::Terminated {
                continue;
            }
            let mut w = w;
            for _ in 0..WRITE_ATTEMPTS {
                let Some(agent) = state.store.agent_by_id(w.agent_id).await? else {
                    break;
                };
                let resources = w.resources.clone();
                match rerender(state, &w, &agent, &resources, false, restart).await {
                    Ok(Some(wrote)) => {
                        changed += usize::from(wrote);
                        break;
                    }
                    Ok(None) => match state.store.workspace_by_id(w.id).await? {
                        Some(fresh) => w = fresh,
                        None => break,
                    },
                    Err(e) => {
                        tracing::warn!(workspace = %w.name, error = %e.message, "{failure}");
                        state
                            .store
                            .set_failure_reason(w.id, &format!("{failure}: {}", e.message))
                            .await?;
                        // An exception the admin took back: the workspace does not keep
                        // running with it (and cannot start again with it).
                        // So is a machine class the agent no longer offers.
                        let withdrawn = e.code == super::render::NOT_ALLOWED_BY_AGENT
                            || e.code == super::render::NO_SUCH_CLASS;
                        if withdrawn && w.desired_state != DesiredState::Stopped {
                            stop(state, &w).await?;
                        }
                        break;
                    }
                }
            }
        }
    }
    Ok(changed)
}

/// Stops `w` (reloading it after a lost race) and signals its agent.
async fn stop(state: &AppState, w: &WorkspaceRow) -> Result<(), AppError> {
    let mut w = w.clone();
    for _ in 0..WRITE_ATTEMPTS {
        if matches!(
            w.desired_state,
            DesiredState::Stopped | DesiredState::Terminated
        ) {
            return Ok(());
        }
        let now = state.clock.now_ms();
        if state
            .store
            .set_desired_state(
                w.id,
                w.version,
                DesiredState::Stopped,
                now,
                ChangedBy::Other,
            )
            .await?
            .is_some()
        {
            state.signals.notify(w.agent_id);
            state.changed();
            return Ok(());
        }
        match state.store.workspace_by_id(w.id).await? {
            Some(fresh) => w = fresh,
            None => return Ok(()),
        }
    }
    Ok(())
}
