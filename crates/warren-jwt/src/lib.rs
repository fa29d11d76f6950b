//! Short-lived HS256 JWTs between Warren's own processes (server ⇄ relay, proxy → server and
//! relay, relay ⇄ relay): one implementation of minting and checking them, and of reading a
//! bearer token from `Authorization`, shared by every service.
//!
//! Times are wall-clock seconds passed in by the caller ([`now_secs`] in production): another
//! process checks them against its own clock, so a paused test clock must not leak into them.

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
pub use warren_types::internal::InternalClaims;

/// Clock skew tolerated on `nbf` and `exp`.
pub const LEEWAY_SECS: u64 = warren_types::internal::INTERNAL_JWT_LEEWAY_SECS;

#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    #[error("signing a token")]
    Sign(#[source] jsonwebtoken::errors::Error),
    #[error("invalid token")]
    Invalid(#[source] jsonwebtoken::errors::Error),
    #[error("token is valid for {secs} s, more than the allowed {max} s")]
    TooLong { secs: i64, max: i64 },
}

/// What a checked token must be.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// Accepted issuers (any one).
    pub issuers: &'a [&'a str],
    pub audience: &'a str,
    /// Longest validity accepted, counted from `iat` (or `nbf` when later) and from now.
    pub max_validity_secs: i64,
    /// `sub` must be present.
    pub subject: bool,
}

/// Signing and checking keys derived once from a shared secret.
#[derive(Clone)]
pub struct Keys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Keys(..)")
    }
}

/// Seconds since the Unix epoch, by the wall clock.
pub use warren_types::unix_secs as now_secs;

impl Keys {
    pub fn new(secret: &[u8]) -> Self {
        Keys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// A token from `iss` to `aud` about `sub`, valid from `now` for `validity_secs`.
    pub fn mint(
        &self,
        iss: &str,
        aud: &str,
        sub: Option<String>,
        now: i64,
        validity_secs: i64,
    ) -> Result<String, JwtError> {
        let claims = InternalClaims {
            iss: iss.to_owned(),
            aud: aud.to_owned(),
            sub,
            iat: now,
            nbf: now,
            exp: now + validity_secs,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(JwtError::Sign)
    }

    /// Checks signature, issuer, audience, `nbf`/`exp` (with [`LEEWAY_SECS`]) and that the
    /// token is short-lived: a long-lived token defeats the point of a shared secret.
    pub fn verify(
        &self,
        token: &str,
        expect: Expect<'_>,
        now: i64,
    ) -> Result<InternalClaims, JwtError> {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_issuer(expect.issuers);
        v.set_audience(&[expect.audience]);
        v.leeway = LEEWAY_SECS;
        v.validate_nbf = true;
        let mut required = vec!["exp", "nbf", "iss", "aud"];
        if expect.subject {
            required.push("sub");
        }
        v.set_required_spec_claims(&required);
        let claims = jsonwebtoken::decode::<InternalClaims>(token, &self.decoding, &v)
            .map_err(JwtError::Invalid)?
            .claims;
        let secs = claims.exp - claims.iat.max(claims.nbf);
        let max = expect.max_validity_secs;
        if secs > max || claims.exp - now > max + LEEWAY_SECS as i64 {
            return Err(JwtError::TooLong { secs, max });
        }
        Ok(claims)
    }
}

/// A named HS256 key (`kid`) for tokens of the caller's own claims: the proxy's session
/// cookies, which carry their audience and expiry and are checked against the key their
/// header names (the current one, or a previous one still accepted after a rotation).
#[derive(Clone)]
pub struct NamedKey {
    kid: String,
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for NamedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NamedKey({})", self.kid)
    }
}

impl NamedKey {
    pub fn new(kid: String, secret: &[u8]) -> NamedKey {
        NamedKey {
            kid,
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// `claims` signed, the header naming this key.
    pub fn sign<T: serde::Serialize>(&self, claims: &T) -> Result<String, JwtError> {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(JwtError::Sign)
    }

    /// The claims of `token` when this key signed it for `aud` and it has not expired (no
    /// leeway: the issuer checks it against the same clock).
    pub fn verify<T: serde::de::DeserializeOwned>(&self, token: &str, aud: &str) -> Option<T> {
        let mut v = Validation::new(Algorithm::HS256);
        v.set_audience(&[aud]);
        v.leeway = 0;
        v.set_required_spec_claims(&["exp", "aud"]);
        jsonwebtoken::decode::<T>(token, &self.decoding, &v)
            .ok()
            .map(|d| d.claims)
    }
}

/// The key a token's header names, unchecked: which key to verify it with.
pub fn kid_of(token: &str) -> Option<String> {
    jsonwebtoken::decode_header(token).ok()?.kid
}

/// The token of an `Authorization: Bearer <token>` header (scheme in any case), if any.
pub fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn expect(issuers: &'static [&'static str]) -> Expect<'static> {
        Expect {
            issuers,
            audience: "warren-server",
            max_validity_secs: 30,
            subject: false,
        }
    }

    fn sign(claims: &InternalClaims) -> String {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(S),
        )
        .unwrap()
    }

    #[test]
    fn accepts_valid_tokens_and_refuses_the_rest() {
        let keys = Keys::new(S);
        let now = now_secs();
        let ok = keys
            .mint("warren-relay", "warren-server", Some("7".into()), now, 20)
            .unwrap();
        let c = keys.verify(&ok, expect(&["warren-relay"]), now).unwrap();
        assert_eq!(c.sub.as_deref(), Some("7"));
        assert!(keys
            .verify(&ok, expect(&["warren-proxy", "warren-relay"]), now)
            .is_ok());
        let other = Keys::new(b"another-secret-another-secret-xx");
        assert!(other.verify(&ok, expect(&["warren-relay"]), now).is_err());
        assert!(
            keys.verify(&ok, expect(&["warren-server"]), now).is_err(),
            "issuer"
        );
        let wrong_aud = Expect {
            audience: "warren-relay",
            ..expect(&["warren-relay"])
        };
        assert!(keys.verify(&ok, wrong_aud, now).is_err(), "audience");
        let no_sub = keys
            .mint("warren-relay", "warren-server", None, now, 20)
            .unwrap();
        let with_sub = Expect {
            subject: true,
            ..expect(&["warren-relay"])
        };
        assert!(keys.verify(&no_sub, with_sub, now).is_err(), "subject");
        let old = keys
            .mint("warren-relay", "warren-server", None, now - 100, 20)
            .unwrap();
        assert!(
            keys.verify(&old, expect(&["warren-relay"]), now).is_err(),
            "expired"
        );
        let future = keys
            .mint("warren-relay", "warren-server", None, now + 60, 20)
            .unwrap();
        assert!(
            keys.verify(&future, expect(&["warren-relay"]), now)
                .is_err(),
            "nbf"
        );
        let long = sign(&InternalClaims {
            iss: "warren-relay".into(),
            aud: "warren-server".into(),
            sub: None,
            iat: now,
            nbf: now,
            exp: now + 3600,
        });
        assert!(matches!(
            keys.verify(&long, expect(&["warren-relay"]), now),
            Err(JwtError::TooLong {
                secs: 3600,
                max: 30
            })
        ));
        assert!(keys
            .verify("not a jwt", expect(&["warren-relay"]), now)
            .is_err());
    }

    #[test]
    fn bearer_reads_the_token_in_any_case_of_the_scheme() {
        let h = |v: &str| {
            let mut m = http::HeaderMap::new();
            m.insert(http::header::AUTHORIZATION, v.parse().unwrap());
            m
        };
        assert_eq!(bearer(&h("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&h("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(&h("BEARER abc")), Some("abc"));
        assert_eq!(bearer(&h("Basic abc")), None);
        assert_eq!(bearer(&h("Bearer ")), None);
        assert_eq!(bearer(&http::HeaderMap::new()), None);
    }
}
