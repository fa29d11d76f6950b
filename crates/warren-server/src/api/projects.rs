//! Projects: any signed-in user creates and reads them; deleting one needs an admin.

use super::Auth;
use crate::error::{HttpError, Json, Path};
use crate::render;
use crate::state::AppState;
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{ApiError, CreateProjectRequest, Project};

#[utoipa::path(get, path = "/api/v1/projects", responses((status = 200, body = Vec<Project>)), tag = "projects",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    _auth: Auth,
) -> Result<Json<Vec<Project>>, HttpError> {
    Ok(Json(
        state
            .store
            .list_projects()
            .await?
            .iter()
            .map(|p| p.to_api())
            .collect(),
    ))
}

/// A stored devfile is validated now, so a broken one is refused (422) before anyone uses it.
#[utoipa::path(post, path = "/api/v1/projects", request_body = CreateProjectRequest,
    responses((status = 201, body = Project), (status = 400, body = ApiError), (status = 409, body = ApiError),
    (status = 422, body = ApiError)), tag = "projects", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateProjectRequest>,
) -> Result<(StatusCode, Json<Project>), HttpError> {
    if let Some(text) = &req.devfile {
        render::parse(text, "devfile")?;
    }
    let p = state
        .store
        .create_project(&req, auth.user.id, state.clock.now_ms())
        .await?;
    Ok((StatusCode::CREATED, Json(p.to_api())))
}

#[utoipa::path(get, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    _auth: Auth,
    Path(key): Path<String>,
) -> Result<Json<Project>, HttpError> {
    let p = state
        .store
        .project_by_key(&key)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("project {key:?}")))?;
    Ok(Json(p.to_api()))
}

/// Deletes a project; its workspaces keep running and only lose the link.
#[utoipa::path(delete, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    auth: Auth,
    Path(key): Path<String>,
) -> Result<StatusCode, HttpError> {
    auth.require_admin()?;
    let p = state
        .store
        .project_by_key(&key)
        .await?
        .ok_or_else(|| HttpError::not_found(format!("project {key:?}")))?;
    state.store.delete_project(p.id).await?;
    Ok(StatusCode::NO_CONTENT)
}
