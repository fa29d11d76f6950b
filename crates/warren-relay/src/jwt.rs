//! The relay's internal JWTs on `warren-jwt`: minted for calls to the server, checked on the
//! internal listener (from the server or a proxy), and relay ↔ relay tokens signed with a
//! secret only relays share.

use warren_jwt::{now_secs, Expect, Keys};
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};
use warren_types::relay::{
    InternalClaims, INTERNAL_JWT_MAX_VALIDITY_SECS, PEER_JWT_ISSUER, PEER_JWT_MAX_VALIDITY_SECS,
    PROXY_JWT_ISSUER, RELAY_JWT_AUDIENCE, SERVER_JWT_ISSUER,
};
use warren_types::AgentId;

pub use warren_jwt::JwtError;

/// Validity of the JWTs the relay mints; the server accepts at most 30 s.
const MINTED_VALIDITY_SECS: i64 = 20;
/// Validity of relay↔relay JWTs: a forwarded request is sent at once.
const PEER_VALIDITY_SECS: i64 = 10;

/// Keys derived once from the relay ↔ server shared secret.
#[derive(Clone, Debug)]
pub struct JwtKeys(Keys);

impl JwtKeys {
    pub fn new(secret: &[u8]) -> Self {
        JwtKeys(Keys::new(secret))
    }

    /// A token for a call to the server; `agent` becomes `sub` on reconcile calls.
    pub fn mint_for_server(&self, agent: Option<AgentId>) -> Result<String, JwtError> {
        self.0.mint(
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            agent.map(|a| a.to_string()),
            now_secs(),
            MINTED_VALIDITY_SECS,
        )
    }

    /// Checks a token presented on the internal listener (by the server or a proxy).
    pub fn verify_internal(&self, token: &str) -> Result<InternalClaims, JwtError> {
        let expect = Expect {
            issuers: &[SERVER_JWT_ISSUER, PROXY_JWT_ISSUER],
            audience: RELAY_JWT_AUDIENCE,
            max_validity_secs: INTERNAL_JWT_MAX_VALIDITY_SECS,
            subject: false,
        };
        self.0.verify(token, expect, now_secs())
    }
}

/// Why a relay ↔ relay token is refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerJwtError {
    #[error(transparent)]
    Jwt(#[from] JwtError),
    #[error("token was issued for another agent")]
    WrongAgent,
}

/// Keys for the relay↔relay endpoint, from a secret only relays share (not the relay↔server
/// one: a server or proxy must not be able to make a relay act as a gateway).
#[derive(Clone, Debug)]
pub struct PeerKeys(Keys);

impl PeerKeys {
    pub fn new(secret: &[u8]) -> Self {
        PeerKeys(Keys::new(secret))
    }

    /// A token for one forwarded request about `agent`.
    pub fn mint(&self, agent: AgentId) -> Result<String, JwtError> {
        self.0.mint(
            PEER_JWT_ISSUER,
            PEER_JWT_ISSUER,
            Some(agent.to_string()),
            now_secs(),
            PEER_VALIDITY_SECS,
        )
    }

    /// Checks a token on the relay↔relay endpoint; it must name `agent`.
    pub fn verify(&self, token: &str, agent: AgentId) -> Result<(), PeerJwtError> {
        let expect = Expect {
            issuers: &[PEER_JWT_ISSUER],
            audience: PEER_JWT_ISSUER,
            max_validity_secs: PEER_JWT_MAX_VALIDITY_SECS,
            subject: true,
        };
        let claims = self.0.verify(token, expect, now_secs())?;
        if claims.sub.as_deref() != Some(agent.to_string().as_str()) {
            return Err(PeerJwtError::WrongAgent);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARED: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn token(iss: &str, aud: &str, validity: i64) -> String {
        Keys::new(SHARED)
            .mint(iss, aud, None, now_secs(), validity)
            .unwrap()
    }

    #[test]
    fn internal_tokens_are_checked() {
        let keys = JwtKeys::new(SHARED);
        keys.verify_internal(&token("warren-server", "warren-relay", 30))
            .unwrap();
        keys.verify_internal(&token("warren-proxy", "warren-relay", 10))
            .unwrap();
        let wrong_secret = Keys::new(b"another-secret-another-secret-xx")
            .mint("warren-server", "warren-relay", None, now_secs(), 30)
            .unwrap();
        assert!(keys.verify_internal(&wrong_secret).is_err());
        assert!(keys
            .verify_internal(&token("warren-server", "warren-server", 30))
            .is_err());
        assert!(keys
            .verify_internal(&token("someone", "warren-relay", 30))
            .is_err());
        assert!(matches!(
            keys.verify_internal(&token("warren-server", "warren-relay", 3600)),
            Err(JwtError::TooLong { .. })
        ));
        let expired = Keys::new(SHARED)
            .mint("warren-server", "warren-relay", None, now_secs() - 80, 20)
            .unwrap();
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
            Err(PeerJwtError::WrongAgent)
        ));
        let other = PeerKeys::new(SHARED);
        assert!(other.verify(&t, AgentId(3)).is_err());
        // A server token (right secret, wrong issuer/audience) is refused.
        let server = Keys::new(b"peer-secret-peer-secret-peer-secret!")
            .mint(
                "warren-server",
                "warren-relay",
                Some("3".into()),
                now_secs(),
                10,
            )
            .unwrap();
        assert!(keys.verify(&server, AgentId(3)).is_err());
    }

    #[test]
    fn minted_tokens_name_the_agent() {
        let keys = JwtKeys::new(SHARED);
        let token = keys.mint_for_server(Some(AgentId(42))).unwrap();
        let expect = Expect {
            issuers: &[RELAY_JWT_ISSUER],
            audience: SERVER_JWT_AUDIENCE,
            max_validity_secs: 30,
            subject: true,
        };
        let claims = Keys::new(SHARED)
            .verify(&token, expect, now_secs())
            .unwrap();
        assert_eq!(claims.sub.as_deref(), Some("42"));
        assert!(claims.exp - claims.iat <= 30);
    }
}
