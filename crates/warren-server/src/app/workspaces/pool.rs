//! Taking a workspace from a project's warm pool for a new workspace (`create`): one made from
//! the newest prebuild, stopped and hidden, becomes the creator's (see `prebuild_pools`, which
//! fills the pools).

use super::checks::check_quotas;
use crate::app::render::{self, RenderInput};
use crate::app::sources::Source;
use crate::app::{AppError, AppState};
use crate::store::agents::AgentRow;
use crate::store::pools::PoolClaim;
use crate::store::projects::ProjectRow;
use crate::store::workspaces::{StoredSeed, WorkspaceRow};
use warren_types::DesiredState;

/// What `workspaces::create` asks of a pool: the new workspace's project, where it goes and
/// what it must match.
pub struct Claim<'a> {
    pub project: &'a ProjectRow,
    pub agent: &'a AgentRow,
    pub git_ref: &'a str,
    pub devfile_text: &'a str,
    pub devfile: &'a warren_devfile::Devfile,
    pub resources: &'a warren_types::api::WorkspaceResources,
    pub owner: &'a crate::store::users::UserRow,
    pub space: warren_types::SpaceId,
    pub variables: &'a [crate::store::workspaces::StoredVariable],
    /// Its owner's and its own variables merged, as rendered.
    pub all_variables: &'a [crate::store::workspaces::StoredVariable],
    pub source: Option<&'a Source>,
}

/// A workspace taken from the project's warm pool for `c`, re-rendered as its new owner's
/// and asked to run, with the notice that says so; `None` when the project keeps no pool on
/// that agent for that ref or none of its members matches.
pub async fn claim(
    state: &AppState,
    c: &Claim<'_>,
) -> Result<Option<(WorkspaceRow, String)>, AppError> {
    let p = c.project;
    if p.prebuild_pool.is_none_or(|n| n < 1)
        || p.prebuild_agent_id != Some(c.agent.id)
        || c.git_ref != p.default_ref
    {
        return Ok(None);
    }
    let wanted = PoolClaim {
        project: p.id,
        agent: c.agent.id,
        git_ref: c.git_ref,
        devfile: c.devfile_text,
        resources: c.resources,
        owner: c.owner.id,
        space: c.space,
        variables: c.variables,
    };
    let now = state.clock.now_ms();
    let taken = state
        .store
        .claim_pool_workspace(
            &wanted,
            now,
            |counts| check_quotas(c.agent, counts, c.resources),
            |t| {
                render::render_workspace(
                    c.devfile,
                    RenderInput {
                        name: &t.name,
                        id: t.id,
                        agent: c.agent,
                        project: c.source.map(|s| s.project_input(Some(c.git_ref))),
                        resources: c.resources,
                        variables: c.all_variables,
                        desired: DesiredState::Running,
                        dotfiles_url: c.owner.dotfiles_url.as_deref(),
                        starter: None,
                        prebuild: false,
                        seed: t.seed.as_ref().map(StoredSeed::as_seed),
                    },
                )
            },
        )
        .await?;
    let Some(w) = taken else {
        return Ok(None);
    };
    state.signals.notify(c.agent.id);
    state.changed();
    tracing::info!(project = %p.name, workspace = %w.name, owner = %c.owner.username, "warm pool: workspace taken");
    let commit = w.seed.as_ref().map(|s| s.commit.as_str()).unwrap_or("");
    let notice = format!(
        "taken from the project's warm pool: made from the prebuild of commit {}, it fetches the commits since and runs only the steps of every start",
        commit.get(..12).unwrap_or(commit)
    );
    Ok(Some((w, notice)))
}
