//! Projects: any signed-in user creates and reads them; deleting one needs an admin.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{ApiError, CreateProjectRequest, Project};

#[utoipa::path(get, path = "/api/v1/projects", responses((status = 200, body = Vec<Project>)), tag = "projects",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Project>>, HttpError> {
    Ok(Json(app::projects::list(&state, &who).await?))
}

/// A stored devfile is validated now, so a broken one is refused (422) before anyone uses it.
#[utoipa::path(post, path = "/api/v1/projects", request_body = CreateProjectRequest,
    responses((status = 201, body = Project), (status = 400, body = ApiError), (status = 409, body = ApiError),
    (status = 422, body = ApiError)), tag = "projects", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateProjectRequest>,
) -> Result<(StatusCode, Json<Project>), HttpError> {
    let p = app::projects::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(p)))
}

#[utoipa::path(get, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(app::projects::get(&state, &who, &key).await?))
}

/// Deletes a project; its workspaces keep running and only lose the link.
#[utoipa::path(delete, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::projects::delete(&state, &who, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}
