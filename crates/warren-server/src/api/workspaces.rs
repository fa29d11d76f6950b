//! Workspaces: create, list, get, change desired state, resize, terminate.
//!
//! A user sees only their own workspaces (others' are 404, never 403, so existence does not
//! leak); admins see all. Writes use the row's `version` and retry on a lost race, so two
//! concurrent requests never overwrite each other.

use super::Auth;
use crate::error::{HttpError, Json, Path, Query};
use crate::lifecycle::check_desired_state_request;
use crate::names;
use crate::render::{self, ProjectInput, RenderInput};
use crate::state::AppState;
use crate::store::agents::AgentRow;
use crate::store::workspaces::{NewWorkspace, StoredVariable, WorkspaceFilter, WorkspaceRow};
use axum::extract::State;
use http::StatusCode;
use serde::Deserialize;
use warren_devfile::{MAX_ENV_BYTES, MAX_ENV_VAR_BYTES};
use warren_types::api::{
    ApiError, CreateWorkspaceRequest, Page, ResizeWorkspaceRequest, UpdateDesiredStateRequest,
    VariableInput, VariableKind, Workspace, WorkspaceResources,
};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};
use warren_types::{ActualState, DesiredState};

/// Attempts of an optimistic write before giving up with 409.
const WRITE_ATTEMPTS: usize = 20;
const DEFAULT_LIMIT: i64 = 50;
const MAX_LIMIT: i64 = 500;

/// Query of `GET /api/v1/workspaces`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Actual state to match; without it, workspaces both desired and actual Terminated are left out.
    pub state: Option<String>,
    /// Agent name or id.
    pub agent: Option<String>,
    /// Project name or id.
    pub project: Option<String>,
    /// Username or id of the owner (admins only; others always see their own).
    pub owner: Option<String>,
    /// Page size, 1–500 (default 50).
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Loads a workspace the caller may see, by name or id.
pub async fn visible(state: &AppState, auth: &Auth, key: &str) -> Result<WorkspaceRow, HttpError> {
    match state.store.workspace_by_key(key).await? {
        Some(w) if auth.user.is_admin || w.owner_id == auth.user.id => Ok(w),
        _ => Err(HttpError::not_found(format!("workspace {key:?}"))),
    }
}

#[utoipa::path(get, path = "/api/v1/workspaces", params(ListQuery),
    responses((status = 200, body = Page<Workspace>), (status = 400, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    auth: Auth,
    Query(q): Query<ListQuery>,
) -> Result<Json<Page<Workspace>>, HttpError> {
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(HttpError::invalid_field(
            "limit",
            format!("must be between 1 and {MAX_LIMIT}"),
        ));
    }
    let mut f = WorkspaceFilter {
        limit: limit + 1,
        ..Default::default()
    };
    if let Some(s) = &q.state {
        f.state = Some(
            s.parse::<ActualState>()
                .map_err(|e| HttpError::invalid_field("state", e))?,
        );
    }
    if let Some(c) = &q.cursor {
        f.after = Some(c.parse().map_err(|_| {
            HttpError::invalid_field("cursor", "is not a cursor this server issued")
        })?);
    }
    if let Some(a) = &q.agent {
        f.agent = Some(
            state
                .store
                .agent_by_key(a)
                .await?
                .ok_or_else(|| HttpError::invalid_field("agent", format!("no agent {a:?}")))?
                .id,
        );
    }
    if let Some(p) = &q.project {
        f.project = Some(
            state
                .store
                .project_by_key(p)
                .await?
                .ok_or_else(|| HttpError::invalid_field("project", format!("no project {p:?}")))?
                .id,
        );
    }
    f.owner = match &q.owner {
        Some(o) => {
            let user = match o.parse::<i64>() {
                Ok(id) => state.store.user_by_id(warren_types::UserId(id)).await?,
                Err(_) => state.store.user_by_name(o).await?,
            };
            let user =
                user.ok_or_else(|| HttpError::invalid_field("owner", format!("no user {o:?}")))?;
            if !auth.user.is_admin && user.id != auth.user.id {
                return Err(HttpError::forbidden(
                    "owner: only admins may list other users' workspaces",
                ));
            }
            Some(user.id)
        }
        None if auth.user.is_admin => None,
        None => Some(auth.user.id),
    };
    let mut rows = state.store.list_workspaces(&f).await?;
    let next_cursor = if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(|w| w.id.to_string())
    } else {
        None
    };
    let items = rows
        .iter()
        .map(|w| w.to_api(&state.store))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Json(Page { items, next_cursor }))
}

#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Workspace), (status = 404, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
) -> Result<Json<Workspace>, HttpError> {
    Ok(Json(
        visible(&state, &auth, &key).await?.to_api(&state.store)?,
    ))
}

/// Moves a workspace to a new desired state (lifecycle.md rules), signalling its agent.
pub async fn change_desired_state(
    state: &AppState,
    auth: &Auth,
    key: &str,
    requested: DesiredState,
    idempotent_terminate: bool,
) -> Result<Workspace, HttpError> {
    for _ in 0..WRITE_ATTEMPTS {
        let w = visible(state, auth, key).await?;
        if idempotent_terminate
            && requested == DesiredState::Terminated
            && w.desired_state == DesiredState::Terminated
        {
            return w.to_api(&state.store);
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
            return w.to_api(&state.store);
        }
        if state
            .store
            .set_desired_state(w.id, w.version, requested, state.clock.now_ms())
            .await?
            .is_some()
        {
            state.signals.notify(w.agent_id);
            let w = visible(state, auth, key).await?;
            return w.to_api(&state.store);
        }
    }
    Err(HttpError::conflict(
        "conflict",
        "the workspace changed too often while updating it; try again",
    ))
}

#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/desired_state",
    params(("workspace" = String, Path, description = "workspace name or id")),
    request_body = UpdateDesiredStateRequest,
    responses((status = 200, body = Workspace), (status = 400, body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn set_desired_state(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateDesiredStateRequest>,
) -> Result<Json<Workspace>, HttpError> {
    Ok(Json(
        change_desired_state(&state, &auth, &key, req.desired_state, false).await?,
    ))
}

/// Asks for `Terminated`: the agent deletes everything, volume included. Repeating it is harmless.
#[utoipa::path(delete, path = "/api/v1/workspaces/{workspace}",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Workspace), (status = 404, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn terminate(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
) -> Result<(StatusCode, Json<Workspace>), HttpError> {
    let w = change_desired_state(&state, &auth, &key, DesiredState::Terminated, true).await?;
    Ok((StatusCode::OK, Json(w)))
}

/// Most variables one workspace may carry, and the largest value.
const MAX_VARIABLES: usize = 200;
const MAX_VARIABLE_BYTES: usize = 256 * 1024;

fn check_variables(vars: &[VariableInput]) -> Result<Vec<StoredVariable>, HttpError> {
    if vars.len() > MAX_VARIABLES {
        return Err(HttpError::invalid_field(
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
            return Err(HttpError::invalid_field(
                &field,
                format!("{:?} is not {rule}", v.key),
            ));
        }
        if !seen.insert((v.kind == VariableKind::File, v.key.clone())) {
            return Err(HttpError::invalid_field(
                &field,
                format!("{:?} is given twice", v.key),
            ));
        }
        if v.value.len() > MAX_VARIABLE_BYTES {
            return Err(HttpError::invalid_field(
                &format!("variables[{i}].value"),
                format!("longer than {MAX_VARIABLE_BYTES} bytes"),
            ));
        }
        if v.kind == VariableKind::Env && v.key.len() + v.value.len() + 1 > MAX_ENV_VAR_BYTES {
            return Err(HttpError::invalid_field(
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
        return Err(HttpError::invalid_field(
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
fn check_resources(r: &WorkspaceResources, agent: &AgentRow) -> Result<(), HttpError> {
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
        let n = (size.parse)(asked).map_err(|e| HttpError::invalid_field(size.field, e))?;
        if n < size.floor {
            return Err(HttpError::invalid_field(
                size.field,
                format!(
                    "{asked} is below the smallest workspace size, {}",
                    size.floor_words
                ),
            ));
        }
        if let Some((_, words)) = size.host.filter(|(most, _)| n > *most) {
            return Err(HttpError::invalid_field(
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

async fn choose_agent(state: &AppState, key: Option<&str>) -> Result<AgentRow, HttpError> {
    match key {
        Some(k) => state
            .store
            .agent_by_key(k)
            .await?
            .ok_or_else(|| HttpError::invalid_field("agent", format!("no agent named {k:?}"))),
        None => {
            let mut agents = state.store.list_agents().await?;
            match agents.len() {
                0 => Err(HttpError::invalid_field(
                    "agent",
                    "no agent exists yet; an admin must create one",
                )),
                1 => Ok(agents.remove(0)),
                _ => Err(HttpError::invalid_field(
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

/// Creates a workspace from the request's devfile, else the project's, else the server's
/// default; renders its objects and asks for `Running`.
#[utoipa::path(post, path = "/api/v1/workspaces", request_body = CreateWorkspaceRequest,
    responses((status = 201, body = Workspace), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 409, body = ApiError), (status = 422, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateWorkspaceRequest>,
) -> Result<(StatusCode, Json<Workspace>), HttpError> {
    if let Some(n) = &req.name {
        names::validate(n).map_err(|e| HttpError::invalid_field("name", e))?;
    }
    let resources = req.resources.clone().unwrap_or_default();
    let variables = check_variables(&req.variables)?;
    let agent = choose_agent(&state, req.agent.as_deref()).await?;
    check_resources(&resources, &agent)?;
    let project = match &req.project {
        Some(p) => Some(state.store.project_by_key(p).await?.ok_or_else(|| {
            HttpError::invalid_field("project", format!("no project named {p:?}"))
        })?),
        None => None,
    };
    let (devfile_text, field) = match (
        &req.devfile,
        project.as_ref().and_then(|p| p.devfile.as_ref()),
    ) {
        (Some(d), _) => (d.clone(), "devfile"),
        (None, Some(d)) => (d.clone(), "project devfile"),
        (None, None) => (state.default_devfile.as_str().to_owned(), "default devfile"),
    };
    let devfile = render::parse(&devfile_text, field)?;
    let git_ref = req
        .git_ref
        .clone()
        .or_else(|| project.as_ref().map(|p| p.default_ref.clone()));
    let now = state.clock.now_ms();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let name = req.name.clone().unwrap_or_else(names::generate);
        let new = NewWorkspace {
            name: name.clone(),
            owner_id: auth.user.id,
            agent_id: agent.id,
            project_id: project.as_ref().map(|p| p.id),
            git_ref: git_ref.clone(),
            devfile: devfile_text.clone(),
            resources: resources.clone(),
            variables: variables.clone(),
        };
        let project_input = project.as_ref().map(|p| ProjectInput {
            name: &p.name,
            git_url: &p.git_url,
            git_ref: git_ref.as_deref().unwrap_or(""),
        });
        let quotas = (
            agent.config.workspaces_quota,
            agent.config.workspaces_per_user_quota,
        );
        let result = state
            .store
            .insert_workspace(&new, quotas, now, |id| {
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
                    },
                )
            })
            .await;
        match result {
            Ok(w) => {
                state.signals.notify(agent.id);
                return Ok((StatusCode::CREATED, Json(w.to_api(&state.store)?)));
            }
            // A generated name collided: draw another.
            Err(e) if e.code == "already_exists" && req.name.is_none() && attempts < 5 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Resizes a workspace: re-renders its objects with the new size and restarts it (desired
/// `RestartRequested` when it was `Running`), keeping its volume. A field left out keeps
/// the size asked for earlier. A stopped workspace keeps
/// `Stopped` and starts with the new size next time.
#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/resources",
    params(("workspace" = String, Path, description = "workspace name or id")),
    request_body = ResizeWorkspaceRequest,
    responses((status = 200, body = Workspace), (status = 400, body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError), (status = 422, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn resize(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
    Json(req): Json<ResizeWorkspaceRequest>,
) -> Result<Json<Workspace>, HttpError> {
    for _ in 0..WRITE_ATTEMPTS {
        let w = visible(&state, &auth, &key).await?;
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
            .ok_or_else(|| HttpError::not_found(format!("agent {}", w.agent_id)))?;
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
        if rerender(&state, &w, &agent, &resources, true)
            .await?
            .is_some()
        {
            return Ok(Json(
                visible(&state, &auth, &key).await?.to_api(&state.store)?,
            ));
        }
    }
    Err(HttpError::conflict(
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
) -> Result<Option<bool>, HttpError> {
    let project = match w.project_id {
        Some(p) => state.store.project_by_key(&p.to_string()).await?,
        None => None,
    };
    let devfile = render::parse(&w.devfile, "stored devfile")?;
    let variables = w.stored_variables(&state.store)?;
    let desired = match w.desired_state {
        DesiredState::Running | DesiredState::RestartRequested => DesiredState::RestartRequested,
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
            }),
            resources,
            variables: &variables,
            desired,
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
            &rendered.objects,
            resources,
            desired,
            state.clock.now_ms(),
        )
        .await?;
    if stored.is_some() {
        state.signals.notify(w.agent_id);
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
) -> Result<usize, HttpError> {
    let mut changed = 0;
    let mut after = None;
    loop {
        let f = WorkspaceFilter {
            agent: Some(agent.id),
            after,
            limit: 200,
            ..Default::default()
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
                let resources = w.resources.clone();
                match rerender(state, &w, agent, &resources, false).await {
                    Ok(Some(wrote)) => {
                        changed += usize::from(wrote);
                        break;
                    }
                    Ok(None) => match state.store.workspace_by_id(w.id).await? {
                        Some(fresh) => w = fresh,
                        None => break,
                    },
                    Err(e) => {
                        tracing::warn!(workspace = %w.name, error = %e.message, "cannot re-render after an agent configuration change");
                        state
                            .store
                            .set_failure_reason(
                                w.id,
                                &format!(
                                    "the agent's new configuration cannot be applied: {}",
                                    e.message
                                ),
                            )
                            .await?;
                        break;
                    }
                }
            }
        }
    }
    Ok(changed)
}

/// Lines of output `GET …/logs` returns when the query does not say.
const DEFAULT_LOG_TAIL: u32 = 200;

/// Query of `GET /api/v1/workspaces/{workspace}/logs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// The last this many lines, 1–10000 (default 200).
    pub tail: Option<u32>,
    /// The container, by its devfile component name (default: the main one).
    pub container: Option<String>,
    /// Keep the answer open and send what the container writes next, until it stops.
    pub follow: Option<bool>,
}

/// The recent output (stdout and stderr) of a container of the workspace, as text; also
/// when it stopped or keeps failing to start. Fetched from the runtime through the relay.
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/logs",
    params(("workspace" = String, Path, description = "workspace name or id"), LogsQuery),
    responses((status = 200, description = "the output, text/plain", content_type = "text/plain"),
    (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 502, body = ApiError),
    (status = 503, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn logs(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<axum::response::Response, HttpError> {
    use axum::response::IntoResponse;
    use warren_types::relay::{LogsTarget, MAX_LOG_TAIL};
    let tail = q.tail.unwrap_or(DEFAULT_LOG_TAIL);
    if !(1..=MAX_LOG_TAIL).contains(&tail) {
        return Err(HttpError::invalid_field(
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
            return Err(HttpError::invalid_field(
                "container",
                "must be a container name (lowercase letters, digits and `-`)",
            ));
        }
    }
    let w = visible(&state, &auth, &key).await?;
    if w.actual_state == ActualState::Terminated {
        return Err(HttpError::conflict(
            "invalid_state",
            format!("workspace {} is terminated: nothing of it is left", w.name),
        ));
    }
    let target = LogsTarget {
        workspace: w.name.clone(),
        namespace: w.namespace.clone(),
        container: q.container.clone(),
        tail,
        follow: q.follow.unwrap_or(false),
    };
    use crate::internal::relay_logs::{fetch, open, RelayLogsError};
    let text_plain = [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    let result = if target.follow {
        // Streamed as it comes; dropping the answer (the client left) closes the relay stream.
        open(&state.relay_urls, &state.relay_secret, w.agent_id, &target)
            .await
            .map(|(io, _)| {
                let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(io));
                (text_plain, body).into_response()
            })
    } else {
        fetch(&state.relay_urls, &state.relay_secret, w.agent_id, &target)
            .await
            .map(|text| (text_plain, text).into_response())
    };
    match result {
        Ok(resp) => Ok(resp),
        Err(RelayLogsError::Refused {
            status: 404,
            code,
            message,
        }) if code != "agent_not_connected" => {
            Err(HttpError::new(StatusCode::NOT_FOUND, "not_found", message))
        }
        Err(RelayLogsError::Refused { code, .. }) if code == "agent_not_connected" => {
            Err(HttpError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "agent_unavailable",
                format!(
                    "agent {} is not connected, so the output of {} cannot be read now",
                    w.agent_id, w.name
                ),
            ))
        }
        Err(e) => {
            tracing::warn!(workspace = %w.name, error = %crate::render::error_chain(&e), "reading workspace logs failed");
            Err(HttpError::new(
                StatusCode::BAD_GATEWAY,
                "logs_unavailable",
                format!("the output of {} could not be read: {e}", w.name),
            ))
        }
    }
}
