//! Workspaces: create, list, get, change desired state, resize, terminate.
//!
//! A user sees only their own workspaces (others' are 404, never 403, so existence does not
//! leak); admins see all. Writes use the row's `version` and retry on a lost race, so two
//! concurrent requests never overwrite each other.

use super::Auth;
use crate::error::{HttpError, Json, Path, Query};
use crate::lifecycle::check_desired_state_request;
use crate::state::AppState;
use crate::store::workspaces::{WorkspaceFilter, WorkspaceRow};
use axum::extract::State;
use http::StatusCode;
use serde::Deserialize;
use warren_types::api::{ApiError, Page, UpdateDesiredStateRequest, Workspace};
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
