//! Session (password → token), users, personal access tokens and SSH keys.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::client_addr::ClientAddr;
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    AddSshKeyRequest, ApiError, CreateTokenRequest, CreateUserRequest, CreatedToken,
    PasswordLoginRequest, SshKey, Token, User,
};
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
