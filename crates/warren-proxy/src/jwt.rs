//! Short-lived HS256 JWTs the proxy presents to the server and to relays, on `warren-jwt`.

use warren_types::internal::PROXY_JWT_ISSUER;

/// Validity of every internal JWT the proxy mints: well under the 30 s both peers accept,
/// long enough for a slow request to arrive.
const VALIDITY_SECS: i64 = 20;

#[derive(Clone, Debug)]
pub(crate) struct InternalKeys(warren_jwt::Keys);

impl InternalKeys {
    pub(crate) fn new(secret: &[u8]) -> Self {
        Self(warren_jwt::Keys::new(secret))
    }

    /// A token for `aud` (`warren-server` or `warren-relay`).
    pub(crate) fn mint(&self, aud: &str) -> Result<String, warren_jwt::JwtError> {
        self.0.mint(
            PROXY_JWT_ISSUER,
            aud,
            None,
            warren_jwt::now_secs(),
            VALIDITY_SECS,
        )
    }
}
