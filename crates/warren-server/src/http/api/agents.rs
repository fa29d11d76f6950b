//! Agents: admins create and configure them; every signed-in user may list them (to pick one).

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{Agent, ApiError, CreateAgentRequest, CreatedAgent, UpdateAgentRequest};

#[utoipa::path(get, path = "/api/v1/agents", responses((status = 200, body = Vec<Agent>)), tag = "agents",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Agent>>, HttpError> {
    Ok(Json(app::agents::list(&state, &who).await?))
}

#[utoipa::path(post, path = "/api/v1/agents", request_body = CreateAgentRequest,
    responses((status = 201, body = CreatedAgent), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 409, body = ApiError)), tag = "agents", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateAgentRequest>,
) -> Result<(StatusCode, Json<CreatedAgent>), HttpError> {
    let created = app::agents::create(&state, &who, req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/v1/agents/{agent}", params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = Agent), (status = 404, body = ApiError)), tag = "agents", security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Agent>, HttpError> {
    Ok(Json(app::agents::get(&state, &who, &key).await?))
}

/// Gives the agent a new token, shown once; the old token stops working at once (a lost or
/// leaked token is revoked this way).
#[utoipa::path(post, path = "/api/v1/agents/{agent}/token", params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = CreatedAgent), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "agents", security(("bearer" = [])))]
pub async fn reset_token(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<CreatedAgent>, HttpError> {
    Ok(Json(app::agents::rotate_token(&state, &who, &key).await?))
}

/// Replaces the agent's configuration. Workspaces keep the objects they were rendered with
/// until they are resized or re-created.
#[utoipa::path(put, path = "/api/v1/agents/{agent}", params(("agent" = String, Path, description = "agent name or id")),
    request_body = UpdateAgentRequest,
    responses((status = 200, body = Agent), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "agents", security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateAgentRequest>,
) -> Result<Json<Agent>, HttpError> {
    Ok(Json(app::agents::update(&state, &who, &key, &req).await?))
}

/// Deletes the agent once it has no workspaces left but gone ones; its token stops working.
#[utoipa::path(delete, path = "/api/v1/agents/{agent}", params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "agents", security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::agents::delete(&state, &who, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}
