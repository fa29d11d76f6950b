//! Mounts: entries of the tree Warren does not run as containers (spec/mounts.md).

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{ApiError, CreateMountRequest, Mount, WorkspaceGrant};

/// The mounts the caller may see (their own, their spaces'; every one for an admin).
#[utoipa::path(get, path = "/api/v1/mounts", responses((status = 200, body = Vec<Mount>)),
    tag = "mounts", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Mount>>, HttpError> {
    Ok(Json(app::mounts::list(&state, &who).await?))
}

/// Creates a mount in a space where the caller is a developer or owner (default: their
/// personal space). Redirect and workspace (softlink) mounts are served; `proxy` is
/// refused naming the type.
#[utoipa::path(post, path = "/api/v1/mounts", request_body = CreateMountRequest,
    responses((status = 201, body = Mount), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 404, description = "the `ref` names no entry the caller may see", body = ApiError),
    (status = 409, body = ApiError)), tag = "mounts", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateMountRequest>,
) -> Result<(StatusCode, Json<Mount>), HttpError> {
    let m = app::mounts::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(m)))
}

/// One mount, with its status computed from what it points to now.
#[utoipa::path(get, path = "/api/v1/mounts/{mount}", params(("mount" = String, Path, description = "the mount's name")),
    responses((status = 200, body = Mount), (status = 404, body = ApiError)), tag = "mounts", security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<Json<Mount>, HttpError> {
    Ok(Json(app::mounts::get(&state, &who, &name).await?))
}

/// Removes a mount (its owner, an owner of its space, or an admin).
#[utoipa::path(delete, path = "/api/v1/mounts/{mount}", params(("mount" = String, Path, description = "the mount's name")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "mounts", security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::mounts::remove(&state, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who may make softlinks (`workspace` mounts) to the workspace (its managers ask).
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/grants",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Vec<WorkspaceGrant>), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "mounts", security(("bearer" = [])))]
pub async fn grants(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Vec<WorkspaceGrant>>, HttpError> {
    Ok(Json(app::mounts::grants(&state, &who, &key).await?))
}

/// Allows a user to make softlinks to the workspace (its owner, an owner of its space, or an
/// admin); answers every grant on it.
#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/grants/{user}",
    params(("workspace" = String, Path, description = "workspace name or id"), ("user" = String, Path, description = "username")),
    responses((status = 200, body = Vec<WorkspaceGrant>), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "mounts", security(("bearer" = [])))]
pub async fn grant(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, user)): Path<(String, String)>,
) -> Result<Json<Vec<WorkspaceGrant>>, HttpError> {
    Ok(Json(app::mounts::grant(&state, &who, &key, &user).await?))
}

/// Takes a grant back: that user's softlinks to the workspace stop serving.
#[utoipa::path(delete, path = "/api/v1/workspaces/{workspace}/grants/{user}",
    params(("workspace" = String, Path, description = "workspace name or id"), ("user" = String, Path, description = "username")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "mounts", security(("bearer" = [])))]
pub async fn revoke(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, user)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    app::mounts::revoke(&state, &who, &key, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
