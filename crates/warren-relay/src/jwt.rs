//! Short-lived HS256 JWTs with the relay↔server shared secret: minted for calls to the server,
//! checked on the internal listener.
//!
//! JWT times are wall-clock by definition (another process checks them), so this module reads
//! `SystemTime` rather than tokio's clock.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use std::time::{SystemTime, UNIX_EPOCH};
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};
use warren_types::relay::{
    InternalClaims, INTERNAL_JWT_MAX_VALIDITY_SECS, PEER_JWT_ISSUER, PEER_JWT_MAX_VALIDITY_SECS,
    PROXY_JWT_ISSUER, RELAY_JWT_AUDIENCE, SERVER_JWT_ISSUER,
};
use warren_types::AgentId;

/// Validity of the JWTs the relay mints; the server accepts at most 30 s.
const MINTED_VALIDITY_SECS: i64 = 20;
/// Clock skew tolerated on tokens the relay checks.
const LEEWAY_SECS: u64 = 5;

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("signing a token")]
    Sign(#[source] jsonwebtoken::errors::Error),
    #[error("invalid token")]
    Invalid(#[source] jsonwebtoken::errors::Error),
    #[error(
        "token is valid for {secs} s, more than the allowed {INTERNAL_JWT_MAX_VALIDITY_SECS} s"
    )]
    TooLong { secs: i64 },
    #[error("token was issued for another agent")]
    WrongAgent,
}

/// Keys derived once from the shared secret.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtKeys(..)")
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

impl JwtKeys {
    pub fn new(secret: &[u8]) -> Self {
        JwtKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// A token for a call to the server; `agent` becomes `sub` on reconcile calls.
    pub fn mint_for_server(&self, agent: Option<AgentId>) -> Result<String, JwtError> {
        let iat = now();
        let claims = InternalClaims {
            iss: RELAY_JWT_ISSUER.into(),
            aud: SERVER_JWT_AUDIENCE.into(),
            sub: agent.map(|a| a.to_string()),
            iat,
            nbf: iat,
            exp: iat + MINTED_VALIDITY_SECS,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(JwtError::Sign)
    }

    /// Checks a token presented on the internal listener (by the server or a proxy).
    pub fn verify_internal(&self, token: &str) -> Result<InternalClaims, JwtError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[RELAY_JWT_AUDIENCE]);
        validation.set_issuer(&[SERVER_JWT_ISSUER, PROXY_JWT_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let data = jsonwebtoken::decode::<InternalClaims>(token, &self.decoding, &validation)
            .map_err(JwtError::Invalid)?;
        let claims = data.claims;
        // A long-lived token defeats the point of a shared secret with short validity.
        let secs = claims.exp - claims.iat.max(claims.nbf);
        if secs > INTERNAL_JWT_MAX_VALIDITY_SECS
            || claims.exp - now() > INTERNAL_JWT_MAX_VALIDITY_SECS + LEEWAY_SECS as i64
        {
            return Err(JwtError::TooLong { secs });
        }
        Ok(claims)
    }
}

/// Validity of relay↔relay JWTs: a forwarded request is sent at once.
const PEER_VALIDITY_SECS: i64 = 10;

/// Keys for the relay↔relay endpoint, from a secret only relays share (not the relay↔server
/// one: a server or proxy must not be able to make a relay act as a gateway).
#[derive(Clone)]
pub struct PeerKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for PeerKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerKeys(..)")
    }
}

impl PeerKeys {
    pub fn new(secret: &[u8]) -> Self {
        PeerKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// A token for one forwarded request about `agent`.
    pub fn mint(&self, agent: AgentId) -> Result<String, JwtError> {
        let iat = now();
        let claims = InternalClaims {
            iss: PEER_JWT_ISSUER.into(),
            aud: PEER_JWT_ISSUER.into(),
            sub: Some(agent.to_string()),
            iat,
            nbf: iat,
            exp: iat + PEER_VALIDITY_SECS,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(JwtError::Sign)
    }

    /// Checks a token on the relay↔relay endpoint; it must name `agent`.
    pub fn verify(&self, token: &str, agent: AgentId) -> Result<(), JwtError> {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[PEER_JWT_ISSUER]);
        validation.set_issuer(&[PEER_JWT_ISSUER]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECS;
        let claims = jsonwebtoken::decode::<InternalClaims>(token, &self.decoding, &validation)
            .map_err(JwtError::Invalid)?
            .claims;
        let secs = claims.exp - claims.iat.max(claims.nbf);
        if secs > PEER_JWT_MAX_VALIDITY_SECS
            || claims.exp - now() > PEER_JWT_MAX_VALIDITY_SECS + LEEWAY_SECS as i64
        {
            return Err(JwtError::TooLong { secs });
        }
        if claims.sub.as_deref() != Some(agent.to_string().as_str()) {
            return Err(JwtError::WrongAgent);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &[u8], claims: &InternalClaims) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret),
        )
        .unwrap()
    }

    fn claims(iss: &str, aud: &str, validity: i64) -> InternalClaims {
        let iat = now();
        InternalClaims {
            iss: iss.into(),
            aud: aud.into(),
            sub: None,
            iat,
            nbf: iat,
            exp: iat + validity,
        }
    }

    #[test]
    fn internal_tokens_are_checked() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let ok = sign(
            b"0123456789abcdef0123456789abcdef",
            &claims("warren-server", "warren-relay", 30),
        );
        keys.verify_internal(&ok).unwrap();
        let proxy = sign(
            b"0123456789abcdef0123456789abcdef",
            &claims("warren-proxy", "warren-relay", 10),
        );
        keys.verify_internal(&proxy).unwrap();
        let wrong_secret = sign(
            b"another-secret-another-secret-xx",
            &claims("warren-server", "warren-relay", 30),
        );
        assert!(keys.verify_internal(&wrong_secret).is_err());
        let wrong_aud = sign(
            b"0123456789abcdef0123456789abcdef",
            &claims("warren-server", "warren-server", 30),
        );
        assert!(keys.verify_internal(&wrong_aud).is_err());
        let wrong_iss = sign(
            b"0123456789abcdef0123456789abcdef",
            &claims("someone", "warren-relay", 30),
        );
        assert!(keys.verify_internal(&wrong_iss).is_err());
        let too_long = sign(
            b"0123456789abcdef0123456789abcdef",
            &claims("warren-server", "warren-relay", 3600),
        );
        assert!(matches!(
            keys.verify_internal(&too_long),
            Err(JwtError::TooLong { .. })
        ));
        let expired = sign(
            b"0123456789abcdef0123456789abcdef",
            &InternalClaims {
                exp: now() - 60,
                iat: now() - 80,
                nbf: now() - 80,
                ..claims("warren-server", "warren-relay", 0)
            },
        );
        assert!(keys.verify_internal(&expired).is_err());
        assert!(keys.verify_internal("not a jwt").is_err());
    }

    #[test]
    fn peer_tokens_are_checked() {
        let keys = PeerKeys::new(b"peer-secret-peer-secret-peer-secret!");
        let t = keys.mint(AgentId(3)).unwrap();
        keys.verify(&t, AgentId(3)).unwrap();
        assert!(matches!(
            keys.verify(&t, AgentId(4)),
            Err(JwtError::WrongAgent)
        ));
        let other = PeerKeys::new(b"0123456789abcdef0123456789abcdef");
        assert!(other.verify(&t, AgentId(3)).is_err());
        // A server token (right secret, wrong issuer/audience) is refused.
        let server = sign(
            b"peer-secret-peer-secret-peer-secret!",
            &claims("warren-server", "warren-relay", 10),
        );
        assert!(keys.verify(&server, AgentId(3)).is_err());
    }

    #[test]
    fn minted_tokens_name_the_agent() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let token = keys.mint_for_server(Some(AgentId(42))).unwrap();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_audience(&[SERVER_JWT_AUDIENCE]);
        validation.set_issuer(&[RELAY_JWT_ISSUER]);
        let data = jsonwebtoken::decode::<InternalClaims>(
            &token,
            &DecodingKey::from_secret(b"0123456789abcdef0123456789abcdef"),
            &validation,
        )
        .unwrap();
        assert_eq!(data.claims.sub.as_deref(), Some("42"));
        assert!(data.claims.exp - data.claims.iat <= 30);
    }
}
