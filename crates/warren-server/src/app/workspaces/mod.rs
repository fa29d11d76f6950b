//! Workspaces: create, list, read, change desired state, resize, re-render, read output.
//!
//! A user sees their own workspaces and those of the spaces where they hold a role, and may do
//! with each what [`Right`] says; the rest are "not found", never "forbidden", so existence
//! does not leak. Admins see and manage all. Writes use the row's `version` and retry on a
//! lost race, so two concurrent requests never overwrite each other. Every desired-state
//! change a user asks for — through the API or the proxy's stopped page — goes through
//! [`change_desired_state`].

pub(crate) mod checks;
mod create;
pub mod pool;
mod rebuild;
pub(crate) mod startup;

pub(crate) use checks::check_variables;
use create::check_for_creation;
pub use create::create;
pub use rebuild::rebuild;
pub use startup::startup;

use super::audit;
use super::budgets::Spent;
use super::lifecycle::check_desired_state_request;
use super::render;
use super::rerender;
use super::rights::{self, Right};
use super::{AppError, AppState, ErrorKind, Principal};
use crate::relay::logs::RelayLogsError;
use crate::store::workspaces::{ChangedBy, WorkspaceFilter, WorkspaceRow};
use std::future::Future;
use warren_types::api::{
    Page, PlannedChange, ResizeWorkspaceRequest, SpaceRole, Workspace, WorkspaceListQuery,
};
use warren_types::relay::{LogsTarget, MAX_LOG_TAIL};
use warren_types::{ActualState, DesiredState, UserId};

const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

fn shown_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    w: &WorkspaceRow,
) -> Option<Right> {
    rights::shown_entry_right(memberships, who, w.owner_id, &w.space_path)
}

/// The API form of `w` for the caller, with `your_right`.
pub(super) async fn for_caller(
    state: &AppState,
    who: &Principal,
    w: &WorkspaceRow,
) -> Result<Workspace, AppError> {
    let memberships = crate::app::rights::memberships(state, who.user.id).await?;
    let doors = super::regions::FrontDoors::load(state).await?;
    let spent = Spent::load_for(state, w).await?;
    shown(state, &memberships, &doors, &spent, who, w)
}

/// The API form of `w` for a caller with `memberships`: with `your_right`, what a timer will
/// do to it next, and its URLs on its region's proxy when that serves.
fn shown(
    state: &AppState,
    memberships: &[(String, SpaceRole)],
    doors: &super::regions::FrontDoors,
    spent: &Spent,
    who: &Principal,
    w: &WorkspaceRow,
) -> Result<Workspace, AppError> {
    let mut a = w.to_api(&state.store)?;
    if let Some(front) = &w.agent_front {
        doors.apply(&mut a, front);
    }
    a.your_right = shown_right(memberships, who, w);
    a.planned = super::lifecycle::planned_for(w, spent).map(|p| PlannedChange {
        desired_state: p.to,
        at: crate::db::from_millis(p.at),
        reason: p.reason,
        postponed_by_use: p.postponed_by_use,
    });
    Ok(a)
}

/// One page of the workspaces the caller may see.
pub async fn list(
    state: &AppState,
    who: &Principal,
    q: &WorkspaceListQuery,
) -> Result<Page<Workspace>, AppError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(AppError::invalid_field(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let recursive = q.recursive.unwrap_or(false);
    if recursive && q.space.is_none() {
        return Err(AppError::invalid_field(
            "recursive",
            "needs `space`: the space whose tree to list",
        ));
    }
    let mut f = WorkspaceFilter {
        limit: limit + 1,
        space: q.space.clone(),
        recursive,
        ..Default::default()
    };
    if let Some(s) = &q.state {
        f.state = Some(
            s.parse::<ActualState>()
                .map_err(|e| AppError::invalid_field("state", e))?,
        );
    }
    if let Some(c) = &q.cursor {
        f.after = Some(c.parse().map_err(|_| {
            AppError::invalid_field("cursor", "is not a cursor this server issued")
        })?);
    }
    if let Some(a) = &q.agent {
        f.agent = Some(
            state
                .store
                .agent_by_key(a)
                .await?
                .ok_or_else(|| AppError::invalid_field("agent", format!("no agent {a:?}")))?
                .id,
        );
    }
    if let Some(p) = &q.project {
        f.project = Some(
            state
                .store
                .project_by_key(p)
                .await?
                .ok_or_else(|| AppError::invalid_field("project", format!("no project {p:?}")))?
                .id,
        );
    }
    f.owner = match &q.owner {
        Some(o) => {
            let user = match o.parse::<i64>() {
                Ok(id) => state.store.user_by_id(UserId(id)).await?,
                Err(_) => state.store.user_by_name(o).await?,
            };
            let user =
                user.ok_or_else(|| AppError::invalid_field("owner", format!("no user {o:?}")))?;
            Some(user.id)
        }
        None => None,
    };
    // The same rule as [`member_right`], in SQL: owned, or in a space at or below one of the
    // caller's memberships.
    f.visible_to = (!who.user.is_admin).then_some(who.user.id);
    f.now = state.clock.now_ms();
    let mut rows = state.store.list_workspaces(&f).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|w| w.id.to_string())
    } else {
        None
    };
    let memberships = crate::app::rights::memberships(state, who.user.id).await?;
    let doors = super::regions::FrontDoors::load(state).await?;
    let spent = Spent::load(state).await?;
    let items = rows
        .iter()
        .map(|w| shown(state, &memberships, &doors, &spent, who, w))
        .collect::<Result<Vec<_>, AppError>>()?;
    Ok(Page { items, next_cursor })
}

/// Every workspace the caller may see (all pages), for the web UI's list, which shows them
/// at once; terminated ones are left out as by [`list`].
pub async fn list_all(state: &AppState, who: &Principal) -> Result<Vec<Workspace>, AppError> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = list(
            state,
            who,
            &WorkspaceListQuery {
                limit: Some(MAX_LIMIT),
                cursor,
                ..WorkspaceListQuery::default()
            },
        )
        .await?;
        out.extend(page.items);
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => return Ok(out),
        }
    }
}

/// One workspace the caller may see, with its devfile's notices.
pub async fn get(state: &AppState, who: &Principal, key: &str) -> Result<Workspace, AppError> {
    let row = rights::visible(state, who, key).await?;
    with_notices(&row, for_caller(state, who, &row).await?)
}

/// The answer about one workspace: its API form and what Warren did with its devfile.
pub(super) fn with_notices(row: &WorkspaceRow, mut w: Workspace) -> Result<Workspace, AppError> {
    w.notices = render::notices(
        &row.devfile,
        row.project_id.is_some(),
        row.starter.as_deref(),
    );
    w.commands = render::commands(&row.devfile);
    Ok(w)
}

/// Longest a [`watch`] may wait, in seconds.
pub const MAX_WATCH_SECS: u64 = 60;
/// How often a watch reads the workspace even without a change of this server's: another
/// server sharing the database may have made one.
const WATCH_RECHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// The workspace as soon as its `version` differs from `version` (at once if it already
/// does), or as it is after `timeout_secs` (1–60): a push for waiting clients (`warren ws …
/// --wait`, the web UI) instead of polling.
pub async fn watch(
    state: &AppState,
    who: &Principal,
    key: &str,
    version: i64,
    timeout_secs: u64,
) -> Result<Workspace, AppError> {
    if !(1..=MAX_WATCH_SECS).contains(&timeout_secs) {
        return Err(AppError::invalid_field(
            "timeout_seconds",
            format!("must be between 1 and {MAX_WATCH_SECS}"),
        ));
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(timeout_secs);
    let mut changes = state.changes.subscribe();
    loop {
        // Marked seen before the read: a change committed after it wakes the wait below.
        changes.borrow_and_update();
        let w = rights::visible(state, who, key).await?;
        if w.version != version || tokio::time::Instant::now() >= deadline {
            // The answer about one workspace: with its notices and commands, as `get`.
            return with_notices(&w, for_caller(state, who, &w).await?);
        }
        let recheck = (tokio::time::Instant::now() + WATCH_RECHECK).min(deadline);
        tokio::select! {
            // Cancel-safe: `changed` only marks the value seen; a missed bump is caught by
            // the read at the top of the loop.
            r = changes.changed() => {
                if r.is_err() {
                    // No sender (the server is going away): fall back to the timer.
                    tokio::time::sleep_until(recheck).await;
                }
            }
            // Cancel-safe: a sleep holds nothing.
            _ = tokio::time::sleep_until(recheck) => {}
        }
    }
}

/// Moves the workspace `load` finds to `requested` (lifecycle.md rules), signalling its
/// agent: the one place a user's desired-state request is decided and written. `load` is
/// called again after a lost race and after the write, and decides who may see what.
pub(crate) async fn change_desired_state<F, Fut>(
    state: &AppState,
    load: F,
    requested: DesiredState,
    idempotent_terminate: bool,
) -> Result<WorkspaceRow, AppError>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<WorkspaceRow, AppError>>,
{
    for _ in 0..rerender::WRITE_ATTEMPTS {
        let w = load().await?;
        if idempotent_terminate
            && requested == DesiredState::Terminated
            && w.desired_state == DesiredState::Terminated
        {
            return Ok(w);
        }
        check_desired_state_request(&w.name, w.desired_state, w.actual_state, requested)?;
        // Starting a workspace that failed while meant to run is a new attempt: the agent
        // stops what is left and starts it again (a restart), instead of a no-op.
        let requested = match (requested, w.desired_state, w.actual_state) {
            (
                DesiredState::Running,
                DesiredState::Running,
                ActualState::Failed | ActualState::Error,
            ) => DesiredState::RestartRequested,
            _ => requested,
        };
        if w.desired_state == requested {
            return Ok(w);
        }
        if matches!(
            requested,
            DesiredState::Running | DesiredState::RestartRequested
        ) {
            still_allowed(state, &w).await?;
            // A start (not a restart of what runs) spends from the space's budgets.
            if w.desired_state != DesiredState::Running {
                super::budgets::check_start(state, w.owner_id, &w.space_path).await?;
            }
        }
        if state
            .store
            .set_desired_state(
                w.id,
                w.version,
                requested,
                state.clock.now_ms(),
                ChangedBy::Other,
            )
            .await?
            .is_some()
        {
            state.signals.notify(w.agent_id);
            state.changed();
            return load().await;
        }
    }
    Err(AppError::conflict(
        "conflict",
        "the workspace changed too often while updating it; try again",
    ))
}

/// Refuses to start a workspace whose stored objects have a capability or a security option
/// its agent's admin has taken back since they were rendered, or of a machine class it no
/// longer offers.
async fn still_allowed(state: &AppState, w: &WorkspaceRow) -> Result<(), AppError> {
    let Some(agent) = state.store.agent_by_id(w.agent_id).await? else {
        return Ok(());
    };
    super::render::machine_class(&agent, &w.resources)?;
    warren_devfile::check_rendered_isolation(&w.objects(&state.store)?, &agent.config)
        .map_err(super::render::render_error)
}

/// A user's desired-state request through the API.
pub async fn set_desired_state(
    state: &AppState,
    who: &Principal,
    key: &str,
    requested: DesiredState,
) -> Result<Workspace, AppError> {
    let r = desired_state_unaudited(state, who, key, requested).await;
    let target = audit::Target::workspace_or_key(&r, key);
    audit::audited(state, who, audit::desired_action(requested), target, r).await
}

async fn desired_state_unaudited(
    state: &AppState,
    who: &Principal,
    key: &str,
    requested: DesiredState,
) -> Result<Workspace, AppError> {
    let w = change_desired_state(
        state,
        || rights::authorized(state, who, key, Right::Use),
        requested,
        false,
    )
    .await?;
    for_caller(state, who, &w).await
}

/// Asks for `Terminated`: the agent deletes everything, volume included. Repeating it is
/// harmless.
pub async fn terminate(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Workspace, AppError> {
    let r = terminate_unaudited(state, who, key).await;
    let target = audit::Target::workspace_or_key(&r, key);
    audit::audited(state, who, "workspace.delete", target, r).await
}

async fn terminate_unaudited(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Workspace, AppError> {
    let w = change_desired_state(
        state,
        || rights::authorized(state, who, key, Right::Manage),
        DesiredState::Terminated,
        true,
    )
    .await?;
    for_caller(state, who, &w).await
}

/// A workspace the caller is about to make again (resize, rebuild), and its agent: the
/// caller must be allowed to manage it, and it must be one that may be restarted.
pub(super) async fn to_remake(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<(WorkspaceRow, crate::store::agents::AgentRow), AppError> {
    let w = rights::authorized(state, who, key, Right::Manage).await?;
    check_desired_state_request(
        &w.name,
        w.desired_state,
        w.actual_state,
        DesiredState::RestartRequested,
    )?;
    let agent = state
        .store
        .agent_by_id(w.agent_id)
        .await?
        .ok_or_else(|| AppError::not_found(format!("agent {}", w.agent_id)))?;
    Ok((w, agent))
}

/// Resizes a workspace: re-renders its objects with the new size and restarts it (desired
/// `RestartRequested` when it was `Running`), keeping its volume. A field left out keeps
/// the size asked for earlier. A stopped workspace keeps `Stopped` and starts with the new
/// size next time.
pub async fn resize(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &ResizeWorkspaceRequest,
) -> Result<Workspace, AppError> {
    let r = resize_unaudited(state, who, key, req).await;
    let target = audit::Target::workspace_or_key(&r, key);
    let asked = serde_json::to_string(&req.resources).unwrap_or_default();
    audit::audited_with(state, who, "workspace.resize", target, asked, r).await
}

async fn resize_unaudited(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &ResizeWorkspaceRequest,
) -> Result<Workspace, AppError> {
    for _ in 0..rerender::WRITE_ATTEMPTS {
        let (w, agent) = to_remake(state, who, key).await?;
        // A resize changes what it names and keeps the rest: `--cpu` after `--memory` keeps
        // the memory asked for earlier. Only what it names is checked here: a kept value was
        // accepted when it was asked for.
        let resources = checks::size_after_resize(&w.resources, &req.resources, &agent)?;
        checks::check_weight_after_resize(state, &w, &agent, &resources).await?;
        if rerender::rerender(state, &w, &agent, &resources, true, true)
            .await?
            .is_some()
        {
            let w = rights::visible(state, who, key).await?;
            return for_caller(state, who, &w).await;
        }
    }
    Err(AppError::conflict(
        "conflict",
        "the workspace changed too often while resizing it; try again",
    ))
}

/// Lines of output [`logs`] returns when the request does not say.
const DEFAULT_LOG_TAIL: u32 = 200;

/// Which output of a workspace to read.
#[derive(Debug, Clone, Default)]
pub struct LogsRequest {
    /// The last this many lines, 1–10000 (default 200).
    pub tail: Option<u32>,
    /// The container, by its devfile component name (default: the main one).
    pub container: Option<String>,
    /// Keep the answer open and send what the container writes next, until it stops.
    pub follow: bool,
}

/// A workspace container's output: all of it at once, or a stream that ends when the
/// container stops (dropping it closes the relay stream).
#[derive(Debug)]
pub enum Logs {
    Text(Vec<u8>),
    Stream(reqwest::Upgraded),
}

/// The recent output (stdout and stderr) of a container of the workspace; also when it
/// stopped or keeps failing to start. Fetched from the runtime through the relay.
pub async fn logs(
    state: &AppState,
    who: &Principal,
    key: &str,
    q: &LogsRequest,
) -> Result<Logs, AppError> {
    use crate::relay::logs::{fetch, open};
    let tail = q.tail.unwrap_or(DEFAULT_LOG_TAIL);
    if !(1..=MAX_LOG_TAIL).contains(&tail) {
        return Err(AppError::invalid_field(
            "tail",
            format!("must be between 1 and {MAX_LOG_TAIL}"),
        ));
    }
    if let Some(c) = &q.container {
        let ok = !c.is_empty()
            && c.len() <= 63
            && c.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !ok {
            return Err(AppError::invalid_field(
                "container",
                "must be a container name (lowercase letters, digits and `-`)",
            ));
        }
    }
    let w = rights::authorized(state, who, key, Right::Use).await?;
    if w.actual_state == ActualState::Terminated {
        return Err(AppError::conflict(
            "invalid_state",
            format!("workspace {} is terminated: nothing of it is left", w.name),
        ));
    }
    let target = LogsTarget {
        workspace: w.name.clone(),
        namespace: w.namespace.clone(),
        container: q.container.clone(),
        tail,
        follow: q.follow,
    };
    let result = if target.follow {
        open(&state.relay_urls, &state.relay_secret, w.agent_id, &target)
            .await
            .map(|(io, _)| Logs::Stream(io))
    } else {
        fetch(&state.relay_urls, &state.relay_secret, w.agent_id, &target)
            .await
            .map(Logs::Text)
    };
    result.map_err(|e| match e {
        RelayLogsError::Refused {
            status: 404,
            code,
            message,
        } if code != "agent_not_connected" => {
            AppError::new(ErrorKind::NotFound, "not_found", message)
        }
        RelayLogsError::Refused { code, .. } if code == "agent_not_connected" => AppError::new(
            ErrorKind::Unavailable,
            "agent_unavailable",
            format!(
                "agent {} is not connected, so the output of {} cannot be read now",
                w.agent_id, w.name
            ),
        ),
        e => {
            tracing::warn!(workspace = %w.name, error = %warren_types::error_chain(&e), "reading workspace logs failed");
            AppError::new(
                ErrorKind::Upstream,
                "logs_unavailable",
                format!("the output of {} could not be read: {e}", w.name),
            )
        }
    })
}
