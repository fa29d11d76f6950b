//! Personal access tokens: shown once, stored as SHA-256 digests, scoped, expiring,
//! revocable. A token can only mint tokens if it may write.

use super::audit;
use super::{AppError, AppState, Principal};
use crate::crypto;
use crate::store::users::UserRow;
use warren_types::api::{CreateTokenRequest, CreatedToken, Token, TokenScope};
use warren_types::TokenId;

const DAY_MS: i64 = 86_400_000;

/// Creates a token for `user` and returns it with its secret (the only time it exists).
pub async fn issue(
    state: &AppState,
    user: &UserRow,
    name: &str,
    scopes: &[TokenScope],
    expires_at: i64,
) -> Result<CreatedToken, AppError> {
    if name.trim().is_empty() || name.len() > 100 {
        return Err(AppError::invalid_field("name", "must be 1-100 characters"));
    }
    if scopes.is_empty() {
        return Err(AppError::invalid_field(
            "scopes",
            "at least one scope is required (api, read_api, workspace)",
        ));
    }
    let secret = crypto::new_pat();
    let token = state
        .store
        .insert_token(
            user.id,
            name,
            scopes,
            &crypto::token_digest(&secret),
            expires_at,
            state.clock.now_ms(),
        )
        .await?;
    Ok(CreatedToken {
        token: token.to_api(),
        secret,
    })
}

/// The caller's tokens.
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<Token>, AppError> {
    Ok(state
        .store
        .list_tokens(who.user.id)
        .await?
        .iter()
        .map(|t| t.to_api())
        .collect())
}

/// A new token for the caller, valid 1–365 days (30 by default).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateTokenRequest,
) -> Result<CreatedToken, AppError> {
    let r: Result<CreatedToken, AppError> = async {
        let days = req.expires_in_days.unwrap_or(30);
        if !(1..=365).contains(&days) {
            return Err(AppError::invalid_field(
                "expires_in_days",
                "must be between 1 and 365",
            ));
        }
        // A read-only token cannot mint a token that may write.
        if !who.has_scope(TokenScope::Api) {
            return Err(AppError::forbidden(
                "creating tokens needs a token with the `api` scope",
            ));
        }
        let expires = state.clock.now_ms() + i64::from(days) * DAY_MS;
        issue(state, &who.user, &req.name, &req.scopes, expires).await
    }
    .await;
    audit::audited(
        state,
        who,
        "token.create",
        match &r {
            Ok(c) => audit::Target::new("token", c.token.id, &c.token.name),
            Err(_) => audit::Target::named("token", &req.name),
        },
        r,
    )
    .await
}

/// Revokes one of the caller's tokens.
pub async fn revoke(state: &AppState, who: &Principal, id: TokenId) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        if state
            .store
            .revoke_token(who.user.id, id, state.clock.now_ms())
            .await?
        {
            Ok(())
        } else {
            Err(AppError::not_found(format!("token {id}")))
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "token.revoke",
        audit::Target::new("token", id, ""),
        r,
    )
    .await
}

/// Issues a token (scopes `api` and `workspace`, valid `days`) for an existing user, e.g.
/// so `warren up` can log its CLI in as the bootstrap admin.
pub async fn issue_for(
    state: &AppState,
    username: &str,
    name: &str,
    days: u32,
) -> Result<CreatedToken, AppError> {
    let user = super::lookup::user_named(state, username).await?;
    let expires = state.clock.now_ms() + i64::from(days.clamp(1, 365)) * DAY_MS;
    issue(
        state,
        &user,
        name,
        &[TokenScope::Api, TokenScope::Workspace],
        expires,
    )
    .await
}

/// The CLI token `warren up` keeps for `username`: `previous` (a secret saved earlier)
/// while it is still valid for that user and has more than a month left; otherwise a new
/// one (as [`issue_for`]), and `previous`, if it was a token of that user, revoked. So
/// restarts never pile up live admin tokens. `None`: `previous` is kept.
pub async fn renew_cli_token(
    state: &AppState,
    username: &str,
    name: &str,
    previous: Option<&str>,
) -> Result<Option<CreatedToken>, AppError> {
    const RENEW_BEFORE_MS: i64 = 30 * DAY_MS;
    let user = super::lookup::user_named(state, username).await?;
    let now = state.clock.now_ms();
    let old = match previous {
        Some(secret) => super::auth::token(state, secret)
            .await?
            .map(|(t, _)| t)
            .filter(|t| t.user_id == user.id),
        None => None,
    };
    if old
        .as_ref()
        .is_some_and(|t| t.expires_at - now > RENEW_BEFORE_MS)
    {
        return Ok(None);
    }
    let created = issue_for(state, username, name, 365).await?;
    if let Some(old) = old {
        state.store.revoke_token(user.id, old.id, now).await?;
    }
    Ok(Some(created))
}
