//! A user's own secrets, Git credentials and the identity their commits are made with (issue
//! 41, item 5).

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    ApiError, SetGitCredentialRequest, SetProfileRequest, SetSecretRequest, User,
    UserGitCredential, UserSecret,
};

/// The caller's secrets: names, kinds and where they go, never their values.
#[utoipa::path(get, path = "/api/v1/users/me/secrets",
    responses((status = 200, body = Vec<UserSecret>)), tag = "users", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<UserSecret>>, HttpError> {
    Ok(Json(app::secrets::list(&state, &who).await?))
}

/// Set one of the caller's secrets (an environment variable, or a file under
/// `/warren/variables/`), given to their workspaces: sealed at rest, never shown again.
#[utoipa::path(put, path = "/api/v1/users/me/secrets/{name}", request_body = SetSecretRequest,
    params(("name" = String, Path, description = "the variable's or file's name")),
    responses((status = 200, body = UserSecret), (status = 201, body = UserSecret),
        (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn set(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
    Json(req): Json<SetSecretRequest>,
) -> Result<(StatusCode, Json<UserSecret>), HttpError> {
    let (created, s) = app::secrets::set(&state, &who, &name, &req).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(s)))
}

/// Remove one of the caller's secrets, from the server and from their workspaces.
#[utoipa::path(delete, path = "/api/v1/users/me/secrets/{name}",
    params(("name" = String, Path, description = "the secret's name")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::secrets::delete(&state, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Set the name and email address the caller's commits are made with in their workspaces
/// (`GIT_AUTHOR_*` and `GIT_COMMITTER_*`); an absent field is cleared.
#[utoipa::path(put, path = "/api/v1/users/me/profile", request_body = SetProfileRequest,
    responses((status = 200, body = User), (status = 400, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn set_profile(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<SetProfileRequest>,
) -> Result<Json<User>, HttpError> {
    Ok(Json(app::secrets::set_profile(&state, &who, &req).await?))
}

/// The caller's own Git credentials: hosts and kinds, never the secrets.
#[utoipa::path(get, path = "/api/v1/users/me/git-credentials",
    responses((status = 200, body = Vec<UserGitCredential>)), tag = "users",
    security(("bearer" = [])))]
pub async fn list_git_credentials(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<UserGitCredential>>, HttpError> {
    Ok(Json(
        app::secrets::list_git_credentials(&state, &who).await?,
    ))
}

/// Set (or replace) the caller's credential for a forge's host: their workspaces' credential
/// helper uses it instead of the project's, and a repository opened by URL is read with it.
#[utoipa::path(post, path = "/api/v1/users/me/git-credentials",
    request_body = SetGitCredentialRequest,
    responses((status = 200, body = UserGitCredential), (status = 201, body = UserGitCredential),
        (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn set_git_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<SetGitCredentialRequest>,
) -> Result<(StatusCode, Json<UserGitCredential>), HttpError> {
    let (created, c) = app::secrets::set_git_credential(&state, &who, &req).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(c)))
}

/// Remove one of the caller's Git credentials, from the server and from their workspaces.
#[utoipa::path(delete, path = "/api/v1/users/me/git-credentials/{id}",
    params(("id" = i64, Path, description = "the credential's id")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "users",
    security(("bearer" = [])))]
pub async fn delete_git_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(id): Path<i64>,
) -> Result<StatusCode, HttpError> {
    app::secrets::delete_git_credential(&state, &who, id).await?;
    Ok(StatusCode::NO_CONTENT)
}
