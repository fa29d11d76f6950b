//! Session (password → token), users, personal access tokens and SSH keys.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::client_addr::ClientAddr;
use crate::http::error::{HttpError, Json, Path, Query};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Deserialize;
use warren_types::api::{
    AddSshKeyRequest, ApiError, ChangePasswordRequest, CreateTokenRequest, CreateUserRequest,
    CreatedToken, PasswordLoginRequest, SetDotfilesRequest, SshKey, Token, UpdateUserRequest, User,
};
use warren_types::schedule::WorkingHours;
use warren_types::{SshKeyId, TokenId};

/// Exchange a username and password for a new personal access token (`warren login`).
#[utoipa::path(post, path = "/api/v1/session", request_body = PasswordLoginRequest,
    responses((status = 201, body = CreatedToken), (status = 401, body = ApiError), (status = 429, body = ApiError)), tag = "users")]
pub async fn create_session(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    Json(req): Json<PasswordLoginRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    let created = app::users::password_session(&state, req, addr).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(get, path = "/api/v1/users/me", responses((status = 200, body = User)), tag = "users",
    security(("bearer" = [])))]
pub async fn me(Auth(who): Auth) -> Json<User> {
    Json(app::users::me(&who))
}

#[utoipa::path(get, path = "/api/v1/users", responses((status = 200, body = Vec<User>), (status = 403, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn list_users(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<User>>, HttpError> {
    Ok(Json(app::users::list(&state, &who).await?))
}

#[utoipa::path(post, path = "/api/v1/users", request_body = CreateUserRequest,
    responses((status = 201, body = User), (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn create_user(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateUserRequest>,
) -> Result<(StatusCode, Json<User>), HttpError> {
    let u = app::users::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(u)))
}

/// Change the caller's own password; the current one is required.
#[utoipa::path(post, path = "/api/v1/users/me/password", request_body = ChangePasswordRequest,
    responses((status = 204), (status = 400, body = ApiError), (status = 429, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn change_password(
    State(state): State<AppState>,
    Auth(who): Auth,
    ClientAddr(addr): ClientAddr,
    Json(req): Json<ChangePasswordRequest>,
) -> Result<StatusCode, HttpError> {
    app::users::change_password(&state, &who, &req, addr).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Set the caller's dotfiles repository (cloned into new workspaces' homes at first start).
#[utoipa::path(put, path = "/api/v1/users/me/dotfiles", request_body = SetDotfilesRequest,
    responses((status = 200, body = User), (status = 400, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn set_dotfiles(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<SetDotfilesRequest>,
) -> Result<Json<User>, HttpError> {
    Ok(Json(
        app::users::set_dotfiles(&state, &who, Some(&req.url)).await?,
    ))
}

/// Set the caller's working hours: their running workspaces stop at `stop` on the days
/// named (in their time zone), and those that stopped start again at `start`.
#[utoipa::path(put, path = "/api/v1/users/me/working-hours", request_body = WorkingHours,
    responses((status = 200, body = User), (status = 400, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn set_working_hours(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<WorkingHours>,
) -> Result<Json<User>, HttpError> {
    Ok(Json(
        app::users::set_working_hours(&state, &who, Some(&req)).await?,
    ))
}

/// Forget the caller's working hours.
#[utoipa::path(delete, path = "/api/v1/users/me/working-hours",
    responses((status = 200, body = User)), tag = "users", security(("bearer" = [])))]
pub async fn delete_working_hours(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<User>, HttpError> {
    Ok(Json(
        app::users::set_working_hours(&state, &who, None).await?,
    ))
}

/// Forget the caller's dotfiles repository.
#[utoipa::path(delete, path = "/api/v1/users/me/dotfiles",
    responses((status = 200, body = User)), tag = "users", security(("bearer" = [])))]
pub async fn delete_dotfiles(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<User>, HttpError> {
    Ok(Json(app::users::set_dotfiles(&state, &who, None).await?))
}

#[utoipa::path(get, path = "/api/v1/users/{user}",
    params(("user" = String, Path, description = "username or id")),
    responses((status = 200, body = User), (status = 404, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn get_user(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<User>, HttpError> {
    Ok(Json(app::users::get(&state, &who, &key).await?))
}

/// Grant or revoke admin rights, disable or enable, reset the password (admins only).
#[utoipa::path(patch, path = "/api/v1/users/{user}", request_body = UpdateUserRequest,
    params(("user" = String, Path, description = "username or id")),
    responses((status = 200, body = User), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn update_user(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateUserRequest>,
) -> Result<Json<User>, HttpError> {
    Ok(Json(app::users::update(&state, &who, &key, &req).await?))
}

/// Query of `DELETE /api/v1/users/{user}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteUserQuery {
    /// Terminate the account's workspaces (volumes included) first; without it an account
    /// with workspaces left is refused.
    #[serde(default)]
    pub terminate_workspaces: bool,
}

/// Delete an account (admins only): 204 once it is gone, 202 with the account while its
/// workspaces are terminating (it is disabled meanwhile).
#[utoipa::path(delete, path = "/api/v1/users/{user}",
    params(("user" = String, Path, description = "username or id"), DeleteUserQuery),
    responses((status = 204), (status = 202, body = User), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn delete_user(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Query(q): Query<DeleteUserQuery>,
) -> Result<Response, HttpError> {
    Ok(
        match app::users::delete(&state, &who, &key, q.terminate_workspaces).await? {
            app::users::Deletion::Deleted => StatusCode::NO_CONTENT.into_response(),
            app::users::Deletion::Pending(u) => (StatusCode::ACCEPTED, Json(u)).into_response(),
        },
    )
}

#[utoipa::path(get, path = "/api/v1/users/me/tokens", responses((status = 200, body = Vec<Token>)), tag = "tokens",
    security(("bearer" = [])))]
pub async fn list_tokens(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Token>>, HttpError> {
    Ok(Json(app::tokens::list(&state, &who).await?))
}

#[utoipa::path(post, path = "/api/v1/users/me/tokens", request_body = CreateTokenRequest,
    responses((status = 201, body = CreatedToken), (status = 400, body = ApiError)), tag = "tokens",
    security(("bearer" = [])))]
pub async fn create_token(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    let created = app::tokens::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(created)))
}

#[utoipa::path(delete, path = "/api/v1/users/me/tokens/{id}", params(("id" = i64, Path, description = "token id")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "tokens", security(("bearer" = [])))]
pub async fn revoke_token(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<i64>,
) -> Result<StatusCode, HttpError> {
    app::tokens::revoke(&state, &who, TokenId(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/api/v1/users/me/ssh-keys", responses((status = 200, body = Vec<SshKey>)), tag = "ssh-keys",
    security(("bearer" = [])))]
pub async fn list_ssh_keys(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<SshKey>>, HttpError> {
    Ok(Json(app::ssh_keys::list(&state, &who).await?))
}

#[utoipa::path(post, path = "/api/v1/users/me/ssh-keys", request_body = AddSshKeyRequest,
    responses((status = 201, body = SshKey), (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "ssh-keys", security(("bearer" = [])))]
pub async fn add_ssh_key(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<AddSshKeyRequest>,
) -> Result<(StatusCode, Json<SshKey>), HttpError> {
    let k = app::ssh_keys::add(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(k)))
}

#[utoipa::path(delete, path = "/api/v1/users/me/ssh-keys/{id}", params(("id" = i64, Path, description = "key id")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "ssh-keys", security(("bearer" = [])))]
pub async fn delete_ssh_key(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<i64>,
) -> Result<StatusCode, HttpError> {
    app::ssh_keys::delete(&state, &who, SshKeyId(id)).await?;
    Ok(StatusCode::NO_CONTENT)
}
