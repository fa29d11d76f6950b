//! Session (password → token), users, personal access tokens and SSH keys.

use super::Auth;
use crate::error::{HttpError, Json, Path};
use crate::state::{AppState, ClientAddr};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    AddSshKeyRequest, ApiError, CreateTokenRequest, CreateUserRequest, CreatedToken,
    PasswordLoginRequest, SshKey, Token, TokenScope, User,
};
use warren_types::{SshKeyId, TokenId};

const DAY_MS: i64 = 86_400_000;
/// Tokens made by `POST /session` live this long.
const SESSION_TOKEN_DAYS: i64 = 30;

/// The API's answer while the password throttle holds a caller back.
fn throttled(t: crate::throttle::Throttled) -> HttpError {
    HttpError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts",
        t.message(),
    )
    .retry_after(t.retry_after_secs)
}

/// Exchange a username and password for a new personal access token (`warren login`).
#[utoipa::path(post, path = "/api/v1/session", request_body = PasswordLoginRequest,
    responses((status = 201, body = CreatedToken), (status = 401, body = ApiError), (status = 429, body = ApiError)), tag = "users")]
pub async fn create_session(
    State(state): State<AppState>,
    ClientAddr(addr): ClientAddr,
    Json(req): Json<PasswordLoginRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    let now = state.clock.now_ms();
    state
        .login_throttle
        .check(&req.username, addr, now)
        .map_err(throttled)?;
    let Some(user) = state
        .store
        .check_password(&req.username, &req.password)
        .await?
    else {
        state.login_throttle.failed(&req.username, addr, now);
        return Err(HttpError::unauthorized("wrong username or password"));
    };
    state.login_throttle.succeeded(&req.username);
    let name = req.token_name.unwrap_or_else(|| "warren login".into());
    let (token, secret) = state
        .store
        .create_token(
            user.id,
            &name,
            &[TokenScope::Api, TokenScope::Workspace],
            now + SESSION_TOKEN_DAYS * DAY_MS,
            now,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token: token.to_api(),
            secret,
        }),
    ))
}

#[utoipa::path(get, path = "/api/v1/users/me", responses((status = 200, body = User)), tag = "users",
    security(("bearer" = [])))]
pub async fn me(auth: Auth) -> Json<User> {
    Json(auth.user.to_api())
}

#[utoipa::path(get, path = "/api/v1/users", responses((status = 200, body = Vec<User>), (status = 403, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn list_users(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Vec<User>>, HttpError> {
    auth.require_admin()?;
    Ok(Json(
        state
            .store
            .list_users()
            .await?
            .iter()
            .map(|u| u.to_api())
            .collect(),
    ))
}

#[utoipa::path(post, path = "/api/v1/users", request_body = CreateUserRequest,
    responses((status = 201, body = User), (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "users", security(("bearer" = [])))]
pub async fn create_user(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateUserRequest>,
) -> Result<(StatusCode, Json<User>), HttpError> {
    auth.require_admin()?;
    let u = state
        .store
        .create_user(
            &req.username,
            &req.password,
            req.is_admin,
            state.clock.now_ms(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(u.to_api())))
}

#[utoipa::path(get, path = "/api/v1/users/me/tokens", responses((status = 200, body = Vec<Token>)), tag = "tokens",
    security(("bearer" = [])))]
pub async fn list_tokens(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Vec<Token>>, HttpError> {
    Ok(Json(
        state
            .store
            .list_tokens(auth.user.id)
            .await?
            .iter()
            .map(|t| t.to_api())
            .collect(),
    ))
}

#[utoipa::path(post, path = "/api/v1/users/me/tokens", request_body = CreateTokenRequest,
    responses((status = 201, body = CreatedToken), (status = 400, body = ApiError)), tag = "tokens",
    security(("bearer" = [])))]
pub async fn create_token(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), HttpError> {
    let days = req.expires_in_days.unwrap_or(30);
    if !(1..=365).contains(&days) {
        return Err(HttpError::invalid_field(
            "expires_in_days",
            "must be between 1 and 365",
        ));
    }
    // A read-only token cannot mint a token that may write.
    if !auth.token.has_scope(TokenScope::Api) {
        return Err(HttpError::forbidden(
            "creating tokens needs a token with the `api` scope",
        ));
    }
    let now = state.clock.now_ms();
    let (token, secret) = state
        .store
        .create_token(
            auth.user.id,
            &req.name,
            &req.scopes,
            now + i64::from(days) * DAY_MS,
            now,
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedToken {
            token: token.to_api(),
            secret,
        }),
    ))
}

#[utoipa::path(delete, path = "/api/v1/users/me/tokens/{id}", params(("id" = i64, Path, description = "token id")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "tokens", security(("bearer" = [])))]
pub async fn revoke_token(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<i64>,
) -> Result<StatusCode, HttpError> {
    if state
        .store
        .revoke_token(auth.user.id, TokenId(id), state.clock.now_ms())
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(HttpError::not_found(format!("token {id}")))
    }
}

#[utoipa::path(get, path = "/api/v1/users/me/ssh-keys", responses((status = 200, body = Vec<SshKey>)), tag = "ssh-keys",
    security(("bearer" = [])))]
pub async fn list_ssh_keys(
    State(state): State<AppState>,
    auth: Auth,
) -> Result<Json<Vec<SshKey>>, HttpError> {
    Ok(Json(
        state
            .store
            .list_ssh_keys(auth.user.id)
            .await?
            .iter()
            .map(|k| k.to_api())
            .collect(),
    ))
}

#[utoipa::path(post, path = "/api/v1/users/me/ssh-keys", request_body = AddSshKeyRequest,
    responses((status = 201, body = SshKey), (status = 400, body = ApiError), (status = 409, body = ApiError)),
    tag = "ssh-keys", security(("bearer" = [])))]
pub async fn add_ssh_key(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<AddSshKeyRequest>,
) -> Result<(StatusCode, Json<SshKey>), HttpError> {
    let k = state
        .store
        .add_ssh_key(
            auth.user.id,
            &req.public_key,
            req.name.as_deref(),
            state.clock.now_ms(),
        )
        .await?;
    Ok((StatusCode::CREATED, Json(k.to_api())))
}

#[utoipa::path(delete, path = "/api/v1/users/me/ssh-keys/{id}", params(("id" = i64, Path, description = "key id")),
    responses((status = 204), (status = 404, body = ApiError)), tag = "ssh-keys", security(("bearer" = [])))]
pub async fn delete_ssh_key(
    State(state): State<AppState>,
    auth: Auth,
    Path(id): Path<i64>,
) -> Result<StatusCode, HttpError> {
    if state
        .store
        .delete_ssh_key(auth.user.id, SshKeyId(id))
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(HttpError::not_found(format!("SSH key {id}")))
    }
}
