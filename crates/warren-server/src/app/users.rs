//! Users and sign-in: password sessions (throttled), accounts (admins create them), the
//! first admin of an empty database, and what every user may read of their own account.

use super::throttle::Throttled;
use super::{AppError, AppState, ErrorKind, Principal};
use crate::crypto;
use crate::store::users::UserRow;
use std::net::IpAddr;
use warren_types::api::{CreateUserRequest, CreatedToken, PasswordLoginRequest, TokenScope, User};

const DAY_MS: i64 = 86_400_000;
/// Tokens made by a password session live this long.
const SESSION_TOKEN_DAYS: i64 = 30;

/// Usernames: 1–64 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_username(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid username (1-64 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit)"
        ))
    }
}

pub fn validate_password(password: &str) -> Result<(), String> {
    if password.chars().count() < 8 {
        return Err("must be at least 8 characters".into());
    }
    if password.len() > 1024 {
        return Err("must be at most 1024 bytes".into());
    }
    Ok(())
}

/// Credentials of the admin created on an empty database; shown once.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapAdmin {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for BootstrapAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapAdmin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The answer while the password throttle holds a caller back.
pub fn throttled(t: Throttled) -> AppError {
    AppError::new(ErrorKind::TooManyRequests, "too_many_attempts", t.message())
        .retry_after(t.retry_after_secs)
}

/// Checks a username and password; the same work is done for unknown users, so timing
/// does not tell which usernames exist.
pub async fn check_password(
    state: &AppState,
    username: &str,
    password: &str,
) -> Result<Option<UserRow>, AppError> {
    let user = state.store.user_by_name(username).await?;
    let hash = user.as_ref().map(|u| u.password_hash.clone());
    let password = password.to_owned();
    let ok = tokio::task::spawn_blocking(move || {
        crypto::verify_password(
            &password,
            hash.as_deref().unwrap_or(crypto::dummy_password_hash()),
        )
    })
    .await
    .unwrap_or(false);
    Ok(user.filter(|_| ok))
}

/// Exchanges a username and password for a new personal access token (`warren login`),
/// throttled per username and per client address.
pub async fn password_session(
    state: &AppState,
    req: PasswordLoginRequest,
    client: Option<IpAddr>,
) -> Result<CreatedToken, AppError> {
    let now = state.clock.now_ms();
    state
        .login_throttle
        .check(&req.username, client, now)
        .map_err(throttled)?;
    let Some(user) = check_password(state, &req.username, &req.password).await? else {
        state.login_throttle.failed(&req.username, client, now);
        return Err(AppError::unauthenticated("wrong username or password"));
    };
    state.login_throttle.succeeded(&req.username);
    let name = req.token_name.unwrap_or_else(|| "warren login".into());
    super::tokens::issue(
        state,
        &user,
        &name,
        &[TokenScope::Api, TokenScope::Workspace],
        now + SESSION_TOKEN_DAYS * DAY_MS,
    )
    .await
}

/// The caller's own account.
pub fn me(who: &Principal) -> User {
    who.user.to_api()
}

/// Every account (admins only).
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<User>, AppError> {
    who.require_admin()?;
    Ok(state
        .store
        .list_users()
        .await?
        .iter()
        .map(|u| u.to_api())
        .collect())
}

/// Creates an account (admins only).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateUserRequest,
) -> Result<User, AppError> {
    who.require_admin()?;
    let u = insert(state, &req.username, &req.password, req.is_admin).await?;
    Ok(u.to_api())
}

async fn insert(
    state: &AppState,
    username: &str,
    password: &str,
    is_admin: bool,
) -> Result<UserRow, AppError> {
    validate_username(username).map_err(|e| AppError::invalid_field("username", e))?;
    validate_password(password).map_err(|e| AppError::invalid_field("password", e))?;
    let hash = crypto::hash_password(password)
        .map_err(|e| AppError::internal("hashing the password", &e))?;
    state
        .store
        .insert_user(username, &hash, is_admin, state.clock.now_ms())
        .await
        .map_err(super::error::already_exists(|| {
            format!("username {username:?} is already taken")
        }))
}

/// Creates the first admin when (and only when) no user exists yet. Returns its generated
/// password exactly once, to the one server that created it.
pub async fn bootstrap_admin(
    state: &AppState,
    username: &str,
) -> Result<Option<BootstrapAdmin>, AppError> {
    let password = crypto::random_secret(18);
    let hash = crypto::hash_password(&password)
        .map_err(|e| AppError::internal("hashing the password", &e))?;
    let created = state
        .store
        .insert_first_admin(username, &hash, state.clock.now_ms())
        .await?;
    Ok(created.then(|| BootstrapAdmin {
        username: username.to_owned(),
        password,
    }))
}
