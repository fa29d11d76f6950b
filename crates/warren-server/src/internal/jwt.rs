//! Short-lived HS256 JWTs between relay and server (relay.md, reconcile.md).

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use warren_types::internal::{
    InternalClaims, INTERNAL_JWT_LEEWAY_SECS, INTERNAL_JWT_MAX_VALIDITY_SECS,
};

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("missing `Authorization: Bearer` JWT")]
    Missing,
    #[error("invalid JWT: {0}")]
    Invalid(String),
    #[error("JWT validity exceeds {INTERNAL_JWT_MAX_VALIDITY_SECS} seconds")]
    TooLong,
    #[error("JWT lacks a valid agent id in `sub`")]
    Subject,
}

/// Signs claims for `iss` → `aud`, valid from now for `validity_secs` (≤ 30).
pub fn mint(
    secret: &[u8],
    iss: &str,
    aud: &str,
    sub: Option<String>,
    now_secs: i64,
    validity_secs: i64,
) -> String {
    let claims = InternalClaims {
        iss: iss.to_owned(),
        aud: aud.to_owned(),
        sub,
        iat: now_secs,
        nbf: now_secs,
        exp: now_secs + validity_secs.min(INTERNAL_JWT_MAX_VALIDITY_SECS),
    };
    // HS256 signing of a plain struct cannot fail.
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .unwrap_or_default()
}

/// Verifies signature, issuer, audience, `nbf`/`exp` with a small leeway, and the 30 s cap.
pub fn verify(
    secret: &[u8],
    token: &str,
    iss: &str,
    aud: &str,
    now_secs: i64,
) -> Result<InternalClaims, JwtError> {
    let mut v = Validation::new(Algorithm::HS256);
    v.set_issuer(&[iss]);
    v.set_audience(&[aud]);
    v.leeway = INTERNAL_JWT_LEEWAY_SECS;
    v.validate_nbf = true;
    v.set_required_spec_claims(&["exp", "nbf", "iss", "aud"]);
    let data = jsonwebtoken::decode::<InternalClaims>(token, &DecodingKey::from_secret(secret), &v)
        .map_err(|e| JwtError::Invalid(e.to_string()))?;
    let c = data.claims;
    let leeway = INTERNAL_JWT_LEEWAY_SECS as i64;
    if c.exp - c.iat > INTERNAL_JWT_MAX_VALIDITY_SECS
        || c.exp - now_secs > INTERNAL_JWT_MAX_VALIDITY_SECS + leeway
    {
        return Err(JwtError::TooLong);
    }
    Ok(c)
}

/// The bearer token of an `Authorization` header.
pub fn bearer(headers: &http::HeaderMap) -> Result<&str, JwtError> {
    headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(JwtError::Missing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};

    const S: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn accepts_valid_and_rejects_the_rest() {
        let now = chrono::Utc::now().timestamp();
        let t = mint(
            S,
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            Some("7".into()),
            now,
            30,
        );
        let c = verify(S, &t, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now).unwrap();
        assert_eq!(c.sub.as_deref(), Some("7"));
        assert!(verify(
            b"another-secret-another-secret-xx",
            &t,
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            now
        )
        .is_err());
        assert!(
            verify(S, &t, "warren-server", SERVER_JWT_AUDIENCE, now).is_err(),
            "issuer"
        );
        assert!(
            verify(S, &t, RELAY_JWT_ISSUER, "warren-relay", now).is_err(),
            "audience"
        );
        let old = mint(
            S,
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            None,
            now - 100,
            30,
        );
        assert!(
            verify(S, &old, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now).is_err(),
            "expired"
        );
        let future = mint(S, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, None, now + 60, 30);
        assert!(
            verify(S, &future, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now).is_err(),
            "nbf"
        );
        // A hand-made token valid for an hour is refused.
        let long = InternalClaims {
            iss: RELAY_JWT_ISSUER.into(),
            aud: SERVER_JWT_AUDIENCE.into(),
            sub: None,
            iat: now,
            nbf: now,
            exp: now + 3600,
        };
        let long =
            jsonwebtoken::encode(&Header::default(), &long, &EncodingKey::from_secret(S)).unwrap();
        assert!(matches!(
            verify(S, &long, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now),
            Err(JwtError::TooLong)
        ));
    }
}
