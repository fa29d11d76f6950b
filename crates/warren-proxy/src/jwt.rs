//! Short-lived HS256 JWTs the proxy presents to the server and to relays.

use jsonwebtoken::{encode, Algorithm, EncodingKey, Header};
use warren_types::internal::{InternalClaims, PROXY_JWT_ISSUER};

/// Validity of every internal JWT the proxy mints: well under the 30 s both peers accept,
/// long enough for a slow request to arrive.
const VALIDITY_SECS: i64 = 20;

#[derive(Clone)]
pub(crate) struct InternalKeys {
    key: EncodingKey,
}

impl std::fmt::Debug for InternalKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InternalKeys(..)")
    }
}

impl InternalKeys {
    pub(crate) fn new(secret: &[u8]) -> Self {
        Self {
            key: EncodingKey::from_secret(secret),
        }
    }

    /// A token for `aud` (`warren-server` or `warren-relay`).
    pub(crate) fn mint(&self, aud: &str) -> String {
        // Wall-clock time: the peers check it against their own clocks.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let claims = InternalClaims {
            iss: PROXY_JWT_ISSUER.into(),
            aud: aud.into(),
            sub: None,
            iat: now,
            nbf: now - 1,
            exp: now + VALIDITY_SECS,
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.key)
            .expect("HS256 signing of plain claims cannot fail")
    }
}
