//! Forges' push webhooks, one rule for all of them (GitOps repositories, project prebuilds):
//! what a webhook's secret may be, and whether a webhook proves it knows it — GitHub's
//! `X-Hub-Signature-256` and Gitea's `X-Gitea-Signature` (an HMAC-SHA256 of the body), or
//! GitLab's `X-Gitlab-Token` (the secret itself), each compared in constant time.

use super::AppError;

/// Bytes a webhook secret must have at least, and may have at most.
pub const WEBHOOK_SECRET_MIN: usize = 16;
pub const WEBHOOK_SECRET_MAX: usize = 256;

/// What a push webhook presented to prove it comes from the forge (each forge sends one).
#[derive(Debug, Clone, Default)]
pub struct WebhookProof {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    pub github: Option<String>,
    /// Gitea (and Gogs): `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`.
    pub gitea: Option<String>,
    /// GitLab: `X-Gitlab-Token: <the secret itself>`.
    pub gitlab: Option<String>,
}

/// Whether `s` may be a webhook secret (field `field` of a request).
pub fn check_secret(field: &str, s: &str) -> Result<(), AppError> {
    if s.len() < WEBHOOK_SECRET_MIN || s.len() > WEBHOOK_SECRET_MAX {
        return Err(AppError::invalid_field(
            field,
            format!("must be {WEBHOOK_SECRET_MIN} to {WEBHOOK_SECRET_MAX} bytes"),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(AppError::invalid_field(
            field,
            "must be one line without control characters",
        ));
    }
    Ok(())
}

fn hmac_hex(secret: &[u8], body: &[u8]) -> Result<String, AppError> {
    use hmac::Mac;
    // HMAC takes keys of any length, so this does not fail; if it ever did, the webhook is
    // refused rather than the server brought down.
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret)
        .map_err(|e| AppError::internal("keying the webhook HMAC", &e))?;
    mac.update(body);
    Ok(hex::encode(mac.finalize().into_bytes()))
}

/// Checks `proof` of `body` against `secret`: `Ok` when it matches, an unauthenticated error
/// naming what was wrong (`whose` says whose secret: "the repository's") otherwise.
pub fn verify(
    secret: &[u8],
    proof: &WebhookProof,
    body: &[u8],
    whose: &str,
) -> Result<(), AppError> {
    let expected = hmac_hex(secret, body)?;
    let valid = match (&proof.github, &proof.gitea, &proof.gitlab) {
        (Some(sig), _, _) => sig
            .strip_prefix("sha256=")
            .is_some_and(|hex| crate::crypto::ct_eq(&hex.to_ascii_lowercase(), &expected)),
        (None, Some(sig), _) => crate::crypto::ct_eq(&sig.to_ascii_lowercase(), &expected),
        (None, None, Some(token)) => crate::crypto::ct_eq(token, &String::from_utf8_lossy(secret)),
        (None, None, None) => {
            return Err(AppError::unauthenticated(
                "the webhook carries no signature (X-Hub-Signature-256, X-Gitea-Signature or \
                 X-Gitlab-Token)",
            ))
        }
    };
    if valid {
        Ok(())
    } else {
        Err(AppError::unauthenticated(format!(
            "the webhook's signature does not match {whose} webhook secret"
        )))
    }
}
