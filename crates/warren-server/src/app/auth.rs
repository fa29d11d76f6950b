//! Who is asking: personal access tokens (with their scopes) for the API, agent tokens for
//! the relays' agent check, and the internal JWTs of relays and proxies.

use super::{AppError, AppState, ErrorKind, Principal};
use crate::crypto;
use crate::relay::jwt;
use crate::store::agents::AgentRow;
use crate::store::tokens::TokenRow;
use crate::store::users::UserRow;
use warren_types::api::TokenScope;
use warren_types::internal::{InternalClaims, PROXY_JWT_ISSUER};
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};

/// `last_used_at` is written at most this often per token, so reads stay reads.
const LAST_USED_GRANULARITY_MS: i64 = 60_000;

/// What an API request wants to do, for the scope check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The token a presented secret stands for, and its user, if it is valid now and the account
/// is active (a disabled account's tokens stop working, and work again once it is enabled);
/// records its use.
pub async fn token(
    state: &AppState,
    secret: &str,
) -> Result<Option<(TokenRow, UserRow)>, AppError> {
    if !secret.starts_with(crypto::PAT_PREFIX) || secret.len() > 200 {
        return Ok(None);
    }
    let now = state.clock.now_ms();
    let digest = crypto::token_digest(secret);
    let Some((t, stored)) = state.store.token_by_digest(&digest).await? else {
        return Ok(None);
    };
    if !crypto::ct_eq(&stored, &digest) || t.revoked_at.is_some() || t.expires_at <= now {
        return Ok(None);
    }
    let Some(user) = state
        .store
        .user_by_id(t.user_id)
        .await?
        .filter(UserRow::is_active)
    else {
        return Ok(None);
    };
    if t.last_used_at
        .is_none_or(|l| now - l >= LAST_USED_GRANULARITY_MS)
    {
        state.store.touch_token(t.id, now).await?;
    }
    Ok(Some((t, user)))
}

/// Why a token was refused, for its caller and the audit log alike.
pub const REFUSED_TOKEN: &str =
    "the token is not valid, has expired or was revoked, or its account is disabled";

/// The principal of an API request: a valid token whose scopes allow `access`.
pub async fn api_principal(
    state: &AppState,
    bearer: Option<&str>,
    access: Access,
) -> Result<Principal, AppError> {
    let secret = bearer.ok_or_else(|| {
        AppError::unauthenticated("missing `Authorization: Bearer <personal access token>` header")
    })?;
    let Some((token, user)) = token(state, secret).await? else {
        super::audit::refused_credential(state, "token.use", "token", REFUSED_TOKEN).await;
        return Err(AppError::unauthenticated(REFUSED_TOKEN));
    };
    let allowed = token.has_scope(TokenScope::Api)
        || (access == Access::Read && token.has_scope(TokenScope::ReadApi));
    if !allowed {
        let needed = match access {
            Access::Read => "`api` or `read_api`",
            Access::Write => "`api`",
        };
        return Err(AppError::forbidden(format!(
            "this token lacks the {needed} scope this request needs"
        )));
    }
    Ok(Principal {
        user,
        token: Some(token),
    })
}

/// The user a personal access token stands for on workspace URLs and SSH: valid and with
/// the `workspace` scope. A valid token without that scope is told so (before any workspace
/// is looked at, so the answer says nothing about one): the usual mistake is an `api`
/// token, `warren token create`'s default.
pub async fn workspace_token_user(
    state: &AppState,
    secret: &str,
) -> Result<Option<warren_types::UserId>, AppError> {
    match token(state, secret).await? {
        Some((t, _)) if t.has_scope(TokenScope::Workspace) => Ok(Some(t.user_id)),
        Some(_) => Err(AppError::new(
            ErrorKind::Forbidden,
            "insufficient_scope",
            "this token lacks the `workspace` scope that workspace URLs need; create one with \
             `warren token create NAME --scope workspace`",
        )),
        None => Ok(None),
    }
}

/// The agent owning a presented agent token.
pub async fn agent(state: &AppState, token: &str) -> Result<AgentRow, AppError> {
    let refused = || AppError::unauthenticated("agent token is not valid");
    if !token.starts_with(crypto::AGENT_TOKEN_PREFIX) || token.len() > 200 {
        return Err(refused());
    }
    let digest = crypto::token_digest(token);
    match state.store.agent_by_token_digest(&digest).await? {
        Some((a, stored)) if crypto::ct_eq(&stored, &digest) => Ok(a),
        _ => Err(refused()),
    }
}

/// Checks an internal JWT from `issuer` (a relay or a proxy) for the server.
fn internal(
    state: &AppState,
    bearer: Option<&str>,
    issuer: &str,
) -> Result<InternalClaims, AppError> {
    let token = bearer.ok_or_else(|| AppError::unauthenticated(jwt::MISSING_BEARER))?;
    // Internal JWTs are about wall-clock time between processes, not the server's clock seam.
    jwt::verify(
        &state.relay_secret,
        token,
        issuer,
        SERVER_JWT_AUDIENCE,
        warren_jwt::now_secs(),
    )
    .map_err(|e| AppError::unauthenticated(warren_types::error_chain(&e)))
}

/// A relay's JWT (issuer `warren-relay`, audience `warren-server`, ≤ 30 s).
pub fn relay(state: &AppState, bearer: Option<&str>) -> Result<InternalClaims, AppError> {
    internal(state, bearer, RELAY_JWT_ISSUER)
}

/// A proxy's JWT (issuer `warren-proxy`, audience `warren-server`, ≤ 30 s).
pub fn proxy(state: &AppState, bearer: Option<&str>) -> Result<InternalClaims, AppError> {
    internal(state, bearer, PROXY_JWT_ISSUER)
}
