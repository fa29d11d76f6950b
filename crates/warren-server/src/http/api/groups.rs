//! Groups and the roles they hold on spaces. A group's name is one URL segment, encoded
//! (`%2Facme%2Fteam` for a provider's `/acme/team`).

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    ApiError, CreateGroupRequest, Group, GroupDetail, GroupMember, SetSpaceMemberRequest,
    SpaceGroupRole,
};

/// Every group, with how many members it has now.
#[utoipa::path(get, path = "/api/v1/groups", responses((status = 200, body = Vec<Group>)),
    tag = "groups", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Group>>, HttpError> {
    Ok(Json(app::groups::list(&state, &who).await?))
}

/// Makes a group (admins): `local` (members kept by hand) or `oidc` (members from the
/// identity provider's groups claim at each sign-in).
#[utoipa::path(post, path = "/api/v1/groups", request_body = CreateGroupRequest,
    responses((status = 201, body = Group), (status = 403, body = ApiError), (status = 409, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateGroupRequest>,
) -> Result<(StatusCode, Json<Group>), HttpError> {
    let g = app::groups::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(g)))
}

/// The group and its members (admins, and its members).
#[utoipa::path(get, path = "/api/v1/groups/{group}", params(("group" = String, Path, description = "the group's name, encoded")),
    responses((status = 200, body = GroupDetail), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<Json<GroupDetail>, HttpError> {
    let (group, members) = app::groups::show(&state, &who, &name).await?;
    Ok(Json(GroupDetail { group, members }))
}

/// Removes a group and every role it held (admins).
#[utoipa::path(delete, path = "/api/v1/groups/{group}", params(("group" = String, Path, description = "the group's name, encoded")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::groups::delete(&state, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Adds a user to a `local` group (admins).
#[utoipa::path(put, path = "/api/v1/groups/{group}/members/{user}",
    params(("group" = String, Path, description = "the group's name, encoded"),
           ("user" = String, Path, description = "username")),
    responses((status = 200, body = GroupMember), (status = 403, body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError)), tag = "groups", security(("bearer" = [])))]
pub async fn add_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((name, user)): Path<(String, String)>,
) -> Result<Json<GroupMember>, HttpError> {
    Ok(Json(
        app::groups::add_member(&state, &who, &name, &user).await?,
    ))
}

/// Takes a user out of a group (admins).
#[utoipa::path(delete, path = "/api/v1/groups/{group}/members/{user}",
    params(("group" = String, Path, description = "the group's name, encoded"),
           ("user" = String, Path, description = "username")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn remove_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((name, user)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    app::groups::remove_member(&state, &who, &name, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The roles groups hold on the space.
#[utoipa::path(get, path = "/api/v1/spaces/{space}/groups", params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 200, body = Vec<SpaceGroupRole>), (status = 404, body = ApiError)), tag = "groups", security(("bearer" = [])))]
pub async fn space_roles(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<Json<Vec<SpaceGroupRole>>, HttpError> {
    Ok(Json(app::groups::space_roles(&state, &who, &path).await?))
}

/// Gives a group a role on the space and everything below it (its owners, or an admin):
/// every member holds it as if given it directly.
#[utoipa::path(put, path = "/api/v1/spaces/{space}/groups/{group}", request_body = SetSpaceMemberRequest,
    params(("space" = String, Path, description = "the space's path, slashes encoded"),
           ("group" = String, Path, description = "the group's name, encoded")),
    responses((status = 200, body = SpaceGroupRole), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn set_space_role(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((path, name)): Path<(String, String)>,
    Json(req): Json<SetSpaceMemberRequest>,
) -> Result<Json<SpaceGroupRole>, HttpError> {
    Ok(Json(
        app::groups::set_space_role(&state, &who, &path, &name, &req).await?,
    ))
}

#[utoipa::path(delete, path = "/api/v1/spaces/{space}/groups/{group}",
    params(("space" = String, Path, description = "the space's path, slashes encoded"),
           ("group" = String, Path, description = "the group's name, encoded")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "groups", security(("bearer" = [])))]
pub async fn remove_space_role(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((path, name)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    app::groups::remove_space_role(&state, &who, &path, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
