//! The keys every proxy replica shares (issue 42): cookie-signing keys in generations, the SSH
//! host key, and the single use of sign-in hand-offs. Replicas adopt the first keys offered,
//! poll the cookie keys to learn rotations, and ask here whether a hand-off was used.
//!
//! A rotation publishes the new key [`PUBLISH_SECS`] before it signs anything, so every
//! replica (polling every few seconds) knows it before a browser brings a cookie signed with
//! it; nobody is sent to sign in again by a replica that has not heard of the rotation yet.

use super::{AppError, AppState, Principal};
use crate::app::audit;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use warren_types::api::{ProxyKeyRotation as Rotation, SshEndpoint};
use warren_types::internal::{HandoffUse, ProxyCookieKey, ProxyKeyOffer, ProxyKeys};

use warren_types::internal::PROXY_KEY_PUBLISH_SECS as PUBLISH_SECS;
/// The largest SSH private key accepted in an offer (an ed25519 key is about 400 bytes).
const MAX_PRIVATE_KEY: usize = 16 * 1024;
/// The longest hand-off life remembered (its own is a minute).
const MAX_HANDOFF_SECS: i64 = 600;

fn check_cookie_key(k: &str) -> Result<(), AppError> {
    match URL_SAFE_NO_PAD.decode(k) {
        Ok(b) if b.len() == 32 => Ok(()),
        _ => Err(AppError::invalid_field(
            "cookie_key",
            "must be 32 bytes, base64url without padding",
        )),
    }
}

async fn cookie_keys(state: &AppState) -> Result<Vec<ProxyCookieKey>, AppError> {
    Ok(state
        .store
        .proxy_cookie_keys()
        .await?
        .into_iter()
        .map(|r| ProxyCookieKey {
            generation: r.generation,
            secret: r.secret,
            signing_from: r.signing_from_ms.div_euclid(1000),
        })
        .collect())
}

/// A proxy starting: adopts what it offers where nothing is stored yet, then answers with
/// the shared keys (the SSH host key included).
pub async fn adopt(state: &AppState, offer: &ProxyKeyOffer) -> Result<ProxyKeys, AppError> {
    let now = state.clock.now_ms();
    if let Some(k) = &offer.cookie_key {
        check_cookie_key(k)?;
        state.store.adopt_proxy_cookie_key(k, now).await?;
    }
    if let Some(h) = &offer.ssh_host_key {
        if h.private_key.len() > MAX_PRIVATE_KEY
            || !h
                .private_key
                .trim_start()
                .starts_with("-----BEGIN OPENSSH PRIVATE KEY-----")
        {
            return Err(AppError::invalid_field(
                "ssh_host_key.private_key",
                "must be an OpenSSH private key",
            ));
        }
        let public = SshEndpoint::parse_host_key(&h.public_key)
            .map_err(|e| AppError::invalid_field("ssh_host_key.public_key", e))?;
        state
            .store
            .adopt_proxy_ssh_host_key(&h.private_key, &public, now)
            .await?;
    }
    Ok(ProxyKeys {
        cookie_keys: cookie_keys(state).await?,
        ssh_host_key: state.store.proxy_ssh_host_key().await?.map(|(k, _)| k),
    })
}

/// The cookie keys, which replicas poll.
pub async fn current(state: &AppState) -> Result<ProxyKeys, AppError> {
    Ok(ProxyKeys {
        cookie_keys: cookie_keys(state).await?,
        ssh_host_key: None,
    })
}

/// Rotates the proxies' cookie key (admins only): a new key, signing in [`PUBLISH_SECS`].
pub async fn rotate(state: &AppState, who: &Principal) -> Result<Rotation, AppError> {
    let r: Result<Rotation, AppError> = async {
        who.require_admin()?;
        let now = state.clock.now_ms();
        let signing_from = now + PUBLISH_SECS * 1000;
        let generation = state
            .store
            .rotate_proxy_cookie_key(&crate::crypto::random_secret(32), signing_from, now)
            .await?;
        tracing::info!(generation, by = %who.user.username, "proxy cookie key rotated");
        Ok(Rotation {
            generation,
            signing_from: signing_from.div_euclid(1000),
        })
    }
    .await;
    audit::audited(
        state,
        who,
        "proxy.rotate_cookie_key",
        audit::Target::named("proxy_keys", ""),
        r,
    )
    .await
}

/// Whether this is the first use of a sign-in hand-off (each is used once, on any replica).
pub async fn use_handoff(state: &AppState, h: &HandoffUse) -> Result<bool, AppError> {
    if h.jti.is_empty() || h.jti.len() > 128 {
        return Err(AppError::invalid_field(
            "jti",
            "must be 1 to 128 characters",
        ));
    }
    let now = state.clock.now_ms();
    // Remembered until it expires, and never longer than a hand-off can live.
    let expires = (h.expires_at.saturating_mul(1000)).clamp(now, now + MAX_HANDOFF_SECS * 1000);
    Ok(state
        .store
        .use_proxy_handoff(&crate::crypto::token_digest(&h.jti), expires, now)
        .await?)
}

/// The proxies' shared SSH host key's public key, for `known_hosts`.
pub async fn ssh_public_key(state: &AppState) -> Result<Option<String>, AppError> {
    Ok(state.store.proxy_ssh_public_key().await?)
}
