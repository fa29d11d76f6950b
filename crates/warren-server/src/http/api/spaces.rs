//! Spaces: the tree entries live in (spec/mounts.md). A space's path is one URL segment with
//! its slashes encoded (`acme%2Fplatform`).

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path, Query};
use axum::extract::State;
use http::StatusCode;
use serde::Deserialize;
use warren_types::api::{
    ApiError, CreateSpaceRequest, SetSpaceMemberRequest, Space, SpaceMember, Tree,
};

/// Query of `GET /api/v1/tree`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TreeQuery {
    /// Path of the space whose tree to draw (`acme/platform`); without it, the whole tree
    /// the caller sees.
    pub space: Option<String>,
}

/// The tree of spaces the caller sees with the entries in them (`warren ws tree`).
#[utoipa::path(get, path = "/api/v1/tree", params(TreeQuery),
    responses((status = 200, body = Tree), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "spaces", security(("bearer" = [])))]
pub async fn tree(
    State(state): State<AppState>,
    Auth(who): Auth,
    Query(q): Query<TreeQuery>,
) -> Result<Json<Tree>, HttpError> {
    Ok(Json(
        app::spaces::tree(&state, &who, q.space.as_deref()).await?,
    ))
}

/// The spaces the caller holds a role on (every space for an admin).
#[utoipa::path(get, path = "/api/v1/spaces", responses((status = 200, body = Vec<Space>)),
    tag = "spaces", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Space>>, HttpError> {
    Ok(Json(app::spaces::list(&state, &who).await?))
}

/// Creates a space: top-level by admins, below a space by its owners.
#[utoipa::path(post, path = "/api/v1/spaces", request_body = CreateSpaceRequest,
    responses((status = 201, body = Space), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 404, body = ApiError), (status = 409, body = ApiError)), tag = "spaces", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateSpaceRequest>,
) -> Result<(StatusCode, Json<Space>), HttpError> {
    let s = app::spaces::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(s)))
}

#[utoipa::path(get, path = "/api/v1/spaces/{space}", params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 200, body = Space), (status = 404, body = ApiError)), tag = "spaces", security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<Json<Space>, HttpError> {
    Ok(Json(app::spaces::get(&state, &who, &path).await?))
}

/// Removes an empty space (its owners, or an admin).
#[utoipa::path(delete, path = "/api/v1/spaces/{space}", params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "spaces", security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::spaces::remove(&state, &who, &path).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/spaces/{space}/members", params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 200, body = Vec<SpaceMember>), (status = 404, body = ApiError)), tag = "spaces", security(("bearer" = [])))]
pub async fn members(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<Json<Vec<SpaceMember>>, HttpError> {
    Ok(Json(app::spaces::members(&state, &who, &path).await?))
}

/// Gives a user a role on the space and everything below it (its owners, or an admin).
#[utoipa::path(put, path = "/api/v1/spaces/{space}/members/{user}", request_body = SetSpaceMemberRequest,
    params(("space" = String, Path, description = "the space's path, slashes encoded"),
           ("user" = String, Path, description = "username")),
    responses((status = 200, body = SpaceMember), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "spaces", security(("bearer" = [])))]
pub async fn set_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((path, user)): Path<(String, String)>,
    Json(req): Json<SetSpaceMemberRequest>,
) -> Result<Json<SpaceMember>, HttpError> {
    Ok(Json(
        app::spaces::set_member(&state, &who, &path, &user, &req).await?,
    ))
}

#[utoipa::path(delete, path = "/api/v1/spaces/{space}/members/{user}",
    params(("space" = String, Path, description = "the space's path, slashes encoded"),
           ("user" = String, Path, description = "username")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "spaces", security(("bearer" = [])))]
pub async fn remove_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((path, user)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    app::spaces::remove_member(&state, &who, &path, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}
