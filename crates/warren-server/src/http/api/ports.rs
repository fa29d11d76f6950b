//! A workspace's ports and share links (issue 41, item 4): each handler one call into
//! `crate::app::ports`.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    ApiError, CreateShareLinkRequest, SetPortRequest, ShareLink, WorkspacePort,
};

/// The ports of a workspace the proxy serves, with who may reach each (for those who may use
/// the workspace).
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/ports",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Vec<WorkspacePort>), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "ports", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Vec<WorkspacePort>>, HttpError> {
    Ok(Json(app::ports::list(&state, &who, &key).await?))
}

/// Sets who may reach a port (`null`: back to its devfile's choice, else the agent's
/// default). Never wider than the agent's `ports.max_visibility` (422); the editor's port is
/// not changed (422).
#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/ports/{port}",
    params(("workspace" = String, Path, description = "workspace name or id"), ("port" = u16, Path, description = "a port the proxy serves")),
    request_body = SetPortRequest,
    responses((status = 200, body = WorkspacePort), (status = 403, body = ApiError), (status = 404, body = ApiError), (status = 422, body = ApiError)),
    tag = "ports", security(("bearer" = [])))]
pub async fn set(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, port)): Path<(String, u16)>,
    Json(req): Json<SetPortRequest>,
) -> Result<Json<WorkspacePort>, HttpError> {
    Ok(Json(app::ports::set(&state, &who, &key, port, &req).await?))
}

/// The share links of a workspace that still open a port, or ended within a day (without
/// their secrets).
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/share-links",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Vec<ShareLink>), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "ports", security(("bearer" = [])))]
pub async fn links(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Vec<ShareLink>>, HttpError> {
    Ok(Json(app::ports::share_links(&state, &who, &key).await?))
}

/// Makes a link that opens one port for whoever holds it, without signing in, until it
/// expires. Its `url` (with the secret) is in this answer only.
#[utoipa::path(post, path = "/api/v1/workspaces/{workspace}/ports/{port}/share-links",
    params(("workspace" = String, Path, description = "workspace name or id"), ("port" = u16, Path, description = "a port the proxy serves")),
    request_body = CreateShareLinkRequest,
    responses((status = 201, body = ShareLink), (status = 403, body = ApiError), (status = 404, body = ApiError), (status = 422, body = ApiError)),
    tag = "ports", security(("bearer" = [])))]
pub async fn create_link(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, port)): Path<(String, u16)>,
    Json(req): Json<CreateShareLinkRequest>,
) -> Result<(StatusCode, Json<ShareLink>), HttpError> {
    let link = app::ports::create_share_link(&state, &who, &key, port, &req).await?;
    Ok((StatusCode::CREATED, Json(link)))
}

/// Revokes a share link: the proxy stops honouring it within its authorisation cache's
/// bound (a minute at most).
#[utoipa::path(delete, path = "/api/v1/workspaces/{workspace}/share-links/{id}",
    params(("workspace" = String, Path, description = "workspace name or id"), ("id" = i64, Path, description = "the link's id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "ports", security(("bearer" = [])))]
pub async fn revoke_link(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, id)): Path<(String, i64)>,
) -> Result<StatusCode, HttpError> {
    app::ports::revoke_share_link(&state, &who, &key, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
