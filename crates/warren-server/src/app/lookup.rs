//! Rows the domain looks up by the name or id a caller gave, answering "not found" with that
//! key when there is none: one wording for every operation that names a user.

use super::{AppError, AppState};
use crate::store::users::UserRow;
use warren_types::UserId;

/// The account named `username`.
pub async fn user_named(state: &AppState, username: &str) -> Result<UserRow, AppError> {
    state
        .store
        .user_by_name(username)
        .await?
        .ok_or_else(|| AppError::not_found(format!("user {username:?}")))
}

/// The account `key` names: its id when all digits, else its username.
pub async fn user_by_key(state: &AppState, key: &str) -> Result<UserRow, AppError> {
    let found = match key.parse::<i64>() {
        Ok(id) => state.store.user_by_id(UserId(id)).await?,
        Err(_) => state.store.user_by_name(key).await?,
    };
    found.ok_or_else(|| AppError::not_found(format!("user {key:?}")))
}
