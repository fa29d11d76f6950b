//! Agents: admins create and configure them; every signed-in user may list them (to pick one).

use super::Auth;
use crate::error::{HttpError, Json, Path};
use crate::state::AppState;
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{Agent, ApiError, CreateAgentRequest, CreatedAgent, UpdateAgentRequest};

#[utoipa::path(get, path = "/api/v1/agents", responses((status = 200, body = Vec<Agent>)), tag = "agents",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _auth: Auth,
) -> Result<Json<Vec<Agent>>, HttpError> {
    Ok(Json(
        state
            .store
            .list_agents()
            .await?
            .iter()
            .map(|a| a.to_api())
            .collect(),
    ))
}

#[utoipa::path(post, path = "/api/v1/agents", request_body = CreateAgentRequest,
    responses((status = 201, body = CreatedAgent), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 409, body = ApiError)), tag = "agents", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateAgentRequest>,
) -> Result<(StatusCode, Json<CreatedAgent>), HttpError> {
    auth.require_admin()?;
    let config = req.config.unwrap_or_default();
    let (agent, token) = state
        .store
        .create_agent(&req.name, &config, state.clock.now_ms())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedAgent {
            agent: agent.to_api(),
            token,
        }),
    ))
}

#[utoipa::path(get, path = "/api/v1/agents/{agent}", params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = Agent), (status = 404, body = ApiError)), tag = "agents", security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    _auth: Auth,
    Path(key): Path<String>,
) -> Result<Json<Agent>, HttpError> {
    let a = state
        .store
        .agent_by_key(&key)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("agent {key:?}")))?;
    Ok(Json(a.to_api()))
}

/// Replaces the agent's configuration. Workspaces keep the objects they were rendered with
/// until they are resized or re-created.
#[utoipa::path(put, path = "/api/v1/agents/{agent}", params(("agent" = String, Path, description = "agent name or id")),
    request_body = UpdateAgentRequest,
    responses((status = 200, body = Agent), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "agents", security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateAgentRequest>,
) -> Result<Json<Agent>, HttpError> {
    auth.require_admin()?;
    let a = state
        .store
        .agent_by_key(&key)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("agent {key:?}")))?;
    let a = state
        .store
        .update_agent_config(a.id, &req.config, state.clock.now_ms())
        .await?
        .ok_or_else(|| HttpError::not_found(format!("agent {key:?}")))?;
    let changed = super::workspaces::rerender_agent_workspaces(&state, &a).await?;
    if changed > 0 {
        tracing::info!(agent = %a.name, workspaces = changed, "re-rendered workspaces after a configuration change");
    }
    state.signals.notify(a.id);
    Ok(Json(a.to_api()))
}
