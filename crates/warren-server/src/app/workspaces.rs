//! Workspaces: create, list, read, change desired state, resize, re-render, read output.
//!
//! A user sees their own workspaces and those of the spaces where they hold a role, and may do
//! with each what [`Right`] says; the rest are "not found", never "forbidden", so existence
//! does not leak. Admins see and manage all. Writes use the row's `version` and retry on a
//! lost race, so two concurrent requests never overwrite each other. Every desired-state
//! change a user asks for — through the API or the proxy's stopped page — goes through
//! [`change_desired_state`].

use super::lifecycle::check_desired_state_request;
use super::render::{self, ProjectInput, RenderInput};
use super::{names, AppError, AppState, ErrorKind, Principal};
use crate::relay::logs::RelayLogsError;
use crate::store::agents::AgentRow;
use crate::store::workspaces::{
    NewWorkspace, QuotaCounts, StoredVariable, WorkspaceFilter, WorkspaceRow,
};
use std::future::Future;
use warren_devfile::{MAX_ENV_BYTES, MAX_ENV_VAR_BYTES};
use warren_types::api::{
    CreateWorkspaceRequest, Page, ResizeWorkspaceRequest, SpaceRole, VariableInput, VariableKind,
    Workspace, WorkspaceListQuery, WorkspaceResources,
};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};
use warren_types::relay::{LogsTarget, MAX_LOG_TAIL};
use warren_types::{ActualState, DesiredState, UserId};

/// Attempts of an optimistic write before giving up with a conflict.
const WRITE_ATTEMPTS: usize = 20;
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// What a user may do with a workspace (spec/mounts.md): see it (API, web UI), use it (start
/// and stop it, reach its ports, terminal and SSH, read its logs, run its commands), or
/// manage it (also resize and terminate it). The API shows it as `your_right`.
pub use warren_types::api::WorkspaceRight as Right;

/// Why `need` was refused on workspace `name` to someone who may see it.
fn refusal(need: Right, name: &str) -> String {
    match need {
        Right::See => format!("workspace {name}: seeing it needs a role on its space"),
        Right::Use => format!(
            "workspace {name}: starting, stopping, reaching it and reading its logs need its \
                 ownership or the developer or owner role on its space"
        ),
        Right::Manage => format!(
            "workspace {name}: resizing and terminating it need its ownership, the owner \
                 role on its space, or an admin"
        ),
    }
}

/// The right the roles give `user` on `w`, admins aside: its own owner manages it; a role on
/// its space (held there or on a space above) gives the rest — owner: manage, developer: use,
/// viewer: see. The one place this rule lives; the proxy's questions ask it too.
pub async fn member_right(
    state: &AppState,
    user: UserId,
    w: &WorkspaceRow,
) -> Result<Option<Right>, AppError> {
    if w.owner_id == user {
        return Ok(Some(Right::Manage));
    }
    let memberships = state.store.memberships(user).await?;
    Ok(entry_right(&memberships, user, w.owner_id, &w.space_path))
}

/// The rule itself, for any entry of the tree (workspace or mount) owned by `owner` in the
/// space at `space_path`, with the user's memberships already read (a list reads them once).
pub fn entry_right(
    memberships: &[(String, SpaceRole)],
    user: UserId,
    owner: UserId,
    space_path: &str,
) -> Option<Right> {
    if owner == user {
        return Some(Right::Manage);
    }
    super::spaces::role_in(memberships, space_path).map(|role| match role {
        SpaceRole::Owner => Right::Manage,
        SpaceRole::Developer => Right::Use,
        SpaceRole::Viewer => Right::See,
    })
}

/// What the caller may do with an entry as the API and the web UI show it: admins manage
/// every one (through the API; the proxy asks [`member_right`]).
pub fn shown_entry_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    owner: UserId,
    space_path: &str,
) -> Option<Right> {
    if who.user.is_admin {
        Some(Right::Manage)
    } else {
        entry_right(memberships, who.user.id, owner, space_path)
    }
}

fn shown_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    w: &WorkspaceRow,
) -> Option<Right> {
    shown_entry_right(memberships, who, w.owner_id, &w.space_path)
}

/// The API form of `w` for the caller, with `your_right`.
async fn for_caller(
    state: &AppState,
    who: &Principal,
    w: &WorkspaceRow,
) -> Result<Workspace, AppError> {
    let mut a = w.to_api(&state.store)?;
    let memberships = state.store.memberships(who.user.id).await?;
    a.your_right = shown_right(&memberships, who, w);
    Ok(a)
}

/// Loads the workspace `key` (name or id) if the caller holds `need` on it. Admins manage
/// every workspace through the API. Without any right the answer is "not found", so
/// existence does not leak; with too small a right, "forbidden" naming what is needed.
pub async fn authorized(
    state: &AppState,
    who: &Principal,
    key: &str,
    need: Right,
) -> Result<WorkspaceRow, AppError> {
    let not_found = || AppError::not_found(format!("workspace {key:?}"));
    let w = state
        .store
        .workspace_by_key(key)
        .await?
        .ok_or_else(not_found)?;
    let right = if who.user.is_admin {
        Some(Right::Manage)
    } else {
        member_right(state, who.user.id, &w).await?
    };
    match right {
        None => Err(not_found()),
        Some(r) if r >= need => Ok(w),
        Some(_) => Err(AppError::forbidden(refusal(need, &w.name))),
    }
}

/// Loads a workspace the caller may see, by name or id.
pub async fn visible(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<WorkspaceRow, AppError> {
    authorized(state, who, key, Right::See).await
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
    let mut rows = state.store.list_workspaces(&f).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|w| w.id.to_string())
    } else {
        None
    };
    let memberships = state.store.memberships(who.user.id).await?;
    let items = rows
        .iter()
        .map(|w| {
            let mut a = w.to_api(&state.store)?;
            a.your_right = shown_right(&memberships, who, w);
            Ok(a)
        })
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
    let row = visible(state, who, key).await?;
    with_notices(&row, for_caller(state, who, &row).await?)
}

/// The answer about one workspace: its API form and what Warren did with its devfile.
fn with_notices(row: &WorkspaceRow, mut w: Workspace) -> Result<Workspace, AppError> {
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
        let w = visible(state, who, key).await?;
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
    for _ in 0..WRITE_ATTEMPTS {
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
        if state
            .store
            .set_desired_state(w.id, w.version, requested, state.clock.now_ms(), false)
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

/// A user's desired-state request through the API.
pub async fn set_desired_state(
    state: &AppState,
    who: &Principal,
    key: &str,
    requested: DesiredState,
) -> Result<Workspace, AppError> {
    let w = change_desired_state(
        state,
        || authorized(state, who, key, Right::Use),
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
    let w = change_desired_state(
        state,
        || authorized(state, who, key, Right::Manage),
        DesiredState::Terminated,
        true,
    )
    .await?;
    for_caller(state, who, &w).await
}

/// Most variables one workspace may carry, and the largest value.
const MAX_VARIABLES: usize = 200;
const MAX_VARIABLE_BYTES: usize = 256 * 1024;

fn check_variables(vars: &[VariableInput]) -> Result<Vec<StoredVariable>, AppError> {
    if vars.len() > MAX_VARIABLES {
        return Err(AppError::invalid_field(
            "variables",
            format!("at most {MAX_VARIABLES} variables"),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut out = vec![];
    for (i, v) in vars.iter().enumerate() {
        let field = format!("variables[{i}].key");
        let key_ok = match v.kind {
            VariableKind::Env => {
                v.key
                    .starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && v.key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            }
            VariableKind::File => {
                !v.key.is_empty()
                    && v.key != "."
                    && v.key != ".."
                    && v.key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            }
        };
        if !key_ok || v.key.len() > 253 {
            let rule = match v.kind {
                VariableKind::Env => "an environment variable name ([A-Za-z_][A-Za-z0-9_]*)",
                VariableKind::File => "a file name (letters, digits, '.', '_', '-')",
            };
            return Err(AppError::invalid_field(
                &field,
                format!("{:?} is not {rule}", v.key),
            ));
        }
        if !seen.insert((v.kind == VariableKind::File, v.key.clone())) {
            return Err(AppError::invalid_field(
                &field,
                format!("{:?} is given twice", v.key),
            ));
        }
        if v.value.len() > MAX_VARIABLE_BYTES {
            return Err(AppError::invalid_field(
                &format!("variables[{i}].value"),
                format!("longer than {MAX_VARIABLE_BYTES} bytes"),
            ));
        }
        if v.kind == VariableKind::Env && v.key.len() + v.value.len() + 1 > MAX_ENV_VAR_BYTES {
            return Err(AppError::invalid_field(
                &format!("variables[{i}].value"),
                format!(
                    "{}: longer than {MAX_ENV_VAR_BYTES} bytes with its name, which Linux refuses in an environment; use a file variable",
                    v.key
                ),
            ));
        }
        out.push(StoredVariable {
            key: v.key.clone(),
            kind: v.kind,
            secret: v.secret,
            value: v.value.clone(),
        });
    }
    let env_bytes: usize = out
        .iter()
        .filter(|v| v.kind == VariableKind::Env)
        .map(|v| v.key.len() + v.value.len() + 2)
        .sum();
    if env_bytes > MAX_ENV_BYTES {
        return Err(AppError::invalid_field(
            "variables",
            format!(
                "the environment variables take {env_bytes} bytes together; at most {MAX_ENV_BYTES} fit in a process's environment (use file variables for large values)"
            ),
        ));
    }
    Ok(out)
}

/// The smallest workspace size a user may ask for: below it no editor or shell starts, and
/// the container runtime refuses memory limits under a few MiB with an opaque error.
const MIN_WORKSPACE_CPU_MILLIS: u64 = 100;
const MIN_WORKSPACE_MEMORY_BYTES: u64 = 64 << 20;

/// Checks a requested workspace size: valid quantities, not below the floors, and within
/// what `agent` reported it can give one workspace (its host's CPUs and memory). The agent's
/// `max_resources_per_workspace` is checked by rendering.
fn check_resources(r: &WorkspaceResources, agent: &AgentRow) -> Result<(), AppError> {
    /// One requested quantity and its bounds.
    struct Size<'a> {
        field: &'static str,
        asked: &'a Option<String>,
        parse: fn(&str) -> Result<u64, warren_types::quantity::QuantityError>,
        floor: u64,
        floor_words: &'static str,
        /// The host's amount, and how it is said.
        host: Option<(u64, String)>,
    }
    let cap = agent.capacity;
    let sizes = [
        Size {
            field: "resources.cpu",
            asked: &r.cpu,
            parse: parse_cpu_millis,
            floor: MIN_WORKSPACE_CPU_MILLIS,
            floor_words: "100m (0.1 CPU)",
            host: cap.map(|c| {
                (
                    c.cpu_millis,
                    format!("{} CPUs", c.cpu_millis as f64 / 1000.0),
                )
            }),
        },
        Size {
            field: "resources.memory",
            asked: &r.memory,
            parse: parse_memory_bytes,
            floor: MIN_WORKSPACE_MEMORY_BYTES,
            floor_words: "64Mi",
            host: cap.map(|c| (c.memory_bytes, format!("{}Mi", c.memory_bytes >> 20))),
        },
    ];
    for size in sizes {
        let Some(asked) = size.asked else { continue };
        let n = (size.parse)(asked).map_err(|e| AppError::invalid_field(size.field, e))?;
        if n < size.floor {
            return Err(AppError::invalid_field(
                size.field,
                format!(
                    "{asked} is below the smallest workspace size, {}",
                    size.floor_words
                ),
            ));
        }
        if let Some((_, words)) = size.host.filter(|(most, _)| n > *most) {
            return Err(AppError::invalid_field(
                size.field,
                format!(
                    "{asked} is more than agent {} can give one workspace ({words})",
                    agent.name
                ),
            ));
        }
    }
    Ok(())
}

async fn choose_agent(state: &AppState, key: Option<&str>) -> Result<AgentRow, AppError> {
    match key {
        Some(k) => state
            .store
            .agent_by_key(k)
            .await?
            .filter(|a| !a.is_connector())
            .ok_or_else(|| AppError::invalid_field("agent", format!("no agent named {k:?}"))),
        None => {
            let mut agents = state.store.list_agents().await?;
            match agents.len() {
                0 => Err(AppError::invalid_field(
                    "agent",
                    "no agent exists yet; an admin must create one",
                )),
                1 => Ok(agents.remove(0)),
                _ => Err(AppError::invalid_field(
                    "agent",
                    format!(
                        "required when several agents exist ({})",
                        agents
                            .iter()
                            .map(|a| a.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )),
            }
        }
    }
}

/// A quota refusal names the quota and the count.
fn check_quotas(agent: &AgentRow, counts: QuotaCounts) -> Result<(), AppError> {
    let quota = agent.config.workspaces_quota;
    let per_user_quota = agent.config.workspaces_per_user_quota;
    if quota >= 0 && counts.agent_total >= quota {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "workspaces_quota of this agent is {quota} and it already has {} workspaces that are not terminated",
                counts.agent_total
            ),
        ));
    }
    if per_user_quota >= 0 && counts.user_total >= per_user_quota {
        return Err(AppError::new(
            ErrorKind::Forbidden,
            "quota_exceeded",
            format!(
                "workspaces_per_user_quota of this agent is {per_user_quota} and you already have {} workspaces on it that are not terminated",
                counts.user_total
            ),
        ));
    }
    Ok(())
}

/// Creates a workspace from the request's devfile, else the project's, else the server's
/// default; renders its objects and asks for `Running`.
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateWorkspaceRequest,
) -> Result<Workspace, AppError> {
    if let Some(n) = &req.name {
        names::validate(n).map_err(|e| AppError::invalid_field("name", e))?;
    }
    let resources = req.resources.clone().unwrap_or_default();
    let variables = check_variables(&req.variables)?;
    let space = super::spaces::for_new_entry(state, who, req.space.as_deref())
        .await
        .map_err(|e| match (e.kind, &req.space) {
            (ErrorKind::NotFound, Some(p)) => AppError::invalid_field(
                "space",
                format!("no space {p:?} (or none you hold a role on)"),
            ),
            _ => e,
        })?;
    let agent = choose_agent(state, req.agent.as_deref()).await?;
    check_resources(&resources, &agent)?;
    let project = match &req.project {
        Some(p) => Some(super::projects::usable(state, who, p).await.map_err(|e| {
            if e.kind == ErrorKind::NotFound {
                AppError::invalid_field("project", format!("no project named {p:?}"))
            } else {
                e
            }
        })?),
        None => None,
    };
    let credential = match &project {
        Some(p) => state.store.project_credential(p)?,
        None => None,
    };
    let git_ref = req
        .git_ref
        .clone()
        .or_else(|| project.as_ref().map(|p| p.default_ref.clone()));
    // The request's devfile, else the project's stored one, else the one in its repository
    // at the workspace's ref; the server default only without a project.
    let (devfile_text, field) = match (&req.devfile, &project) {
        (Some(d), _) => (d.clone(), "devfile"),
        (None, Some(p)) => match &p.devfile {
            Some(d) => (d.clone(), "project devfile"),
            None => (
                super::projects::devfile_from_repository(
                    state,
                    p,
                    git_ref.as_deref().unwrap_or(&p.default_ref),
                )
                .await?,
                "repository devfile",
            ),
        },
        (None, None) => (state.default_devfile.as_str().to_owned(), "default devfile"),
    };
    let devfile_text = render::resolve_parent(&state.parents, &devfile_text, field).await?;
    let devfile = render::parse(&devfile_text, field)?;
    if let Some(s) = &req.starter {
        if project.is_some() {
            return Err(AppError::invalid_field(
                "starter",
                "a starter project is for a workspace without a project repository",
            ));
        }
        if !devfile.starter_projects.iter().any(|p| &p.name == s) {
            let names: Vec<&str> = devfile
                .starter_projects
                .iter()
                .map(|p| p.name.as_str())
                .collect();
            return Err(AppError::invalid_field(
                "starter",
                if names.is_empty() {
                    format!("the devfile has no starter projects, so none named {s:?}")
                } else {
                    format!(
                        "the devfile has no starter project {s:?} (it has {})",
                        names.join(", ")
                    )
                },
            ));
        }
    }
    let now = state.clock.now_ms();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let name = req.name.clone().unwrap_or_else(names::generate);
        let new = NewWorkspace {
            name: name.clone(),
            owner_id: who.user.id,
            agent_id: agent.id,
            project_id: project.as_ref().map(|p| p.id),
            git_ref: git_ref.clone(),
            devfile: devfile_text.clone(),
            resources: resources.clone(),
            variables: variables.clone(),
            starter: req.starter.clone(),
            space_id: space.id,
        };
        let project_input = project.as_ref().map(|p| ProjectInput {
            name: &p.name,
            git_url: &p.git_url,
            git_ref: git_ref.as_deref().unwrap_or(""),
            credential: credential.as_ref(),
        });
        let result = state
            .store
            .insert_workspace(
                &new,
                now,
                |counts| check_quotas(&agent, counts),
                |id| {
                    render::render_workspace(
                        &devfile,
                        RenderInput {
                            name: &name,
                            id,
                            agent: &agent,
                            project: project_input,
                            resources: &resources,
                            variables: &variables,
                            desired: DesiredState::Running,
                            dotfiles_url: who.user.dotfiles_url.as_deref(),
                            starter: req.starter.as_deref(),
                        },
                    )
                },
            )
            .await;
        match result {
            Ok(w) => {
                state.signals.notify(agent.id);
                state.changed();
                return with_notices(&w, for_caller(state, who, &w).await?);
            }
            // A generated name collided: draw another.
            // The insert's only unique key is the name: a conflict is a name collision.
            Err(e) if e.kind == ErrorKind::Conflict && req.name.is_none() && attempts < 5 => {
                continue
            }
            Err(e) if e.kind == ErrorKind::Conflict => {
                return Err(AppError::conflict(
                    "already_exists",
                    format!("name: an entry (workspace or mount) named {name:?} already exists"),
                )
                .with_field("name"))
            }
            Err(e) => return Err(e),
        }
    }
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
    for _ in 0..WRITE_ATTEMPTS {
        let w = authorized(state, who, key, Right::Manage).await?;
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
        // A resize changes what it names and keeps the rest: `--cpu` after `--memory` keeps
        // the memory asked for earlier. Only what it names is checked here: a kept value was
        // accepted when it was asked for.
        check_resources(&req.resources, &agent)?;
        let resources = WorkspaceResources {
            cpu: req
                .resources
                .cpu
                .clone()
                .or_else(|| w.resources.cpu.clone()),
            memory: req
                .resources
                .memory
                .clone()
                .or_else(|| w.resources.memory.clone()),
        };
        if rerender(state, &w, &agent, &resources, true, true)
            .await?
            .is_some()
        {
            let w = visible(state, who, key).await?;
            return for_caller(state, who, &w).await;
        }
    }
    Err(AppError::conflict(
        "conflict",
        "the workspace changed too often while resizing it; try again",
    ))
}

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
    let project = match w.project_id {
        Some(p) => state.store.project_by_key(&p.to_string()).await?,
        None => None,
    };
    let credential = match &project {
        Some(p) => state.store.project_credential(p)?,
        None => None,
    };
    let devfile = render::parse(&w.devfile, "stored devfile")?;
    let variables = w.stored_variables(&state.store)?;
    let owner = state.store.user_by_id(w.owner_id).await?;
    let desired = match w.desired_state {
        DesiredState::Running | DesiredState::RestartRequested if restart => {
            DesiredState::RestartRequested
        }
        other => other,
    };
    let rendered = render::render_workspace(
        &devfile,
        RenderInput {
            name: &w.name,
            id: w.id,
            agent,
            project: project.as_ref().map(|p| ProjectInput {
                name: &p.name,
                git_url: &p.git_url,
                git_ref: w.git_ref.as_deref().unwrap_or(&p.default_ref),
                credential: credential.as_ref(),
            }),
            resources,
            variables: &variables,
            desired,
            dotfiles_url: owner.as_ref().and_then(|u| u.dotfiles_url.as_deref()),
            starter: w.starter.as_deref(),
        },
    )?;
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
        )
        .await?;
    if stored.is_some() {
        state.signals.notify(w.agent_id);
        state.changed();
    }
    Ok(stored.map(|()| true))
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
                        break;
                    }
                }
            }
        }
    }
    Ok(changed)
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
    let w = authorized(state, who, key, Right::Use).await?;
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
