//! The server's internal JWTs (relay.md, reconcile.md) on `warren-jwt`: what it mints for
//! relays and what it accepts from relays and proxies.

pub use warren_jwt::{bearer, JwtError};
use warren_jwt::{Expect, Keys};
use warren_types::internal::{
    InternalClaims, INTERNAL_JWT_MAX_VALIDITY_SECS, RELAY_JWT_AUDIENCE, SERVER_JWT_ISSUER,
};
use warren_types::AgentId;

/// What a request without a bearer token is told.
pub const MISSING_BEARER: &str = "missing `Authorization: Bearer` JWT";

/// A token for a call to the relays about `agent`, valid from `now`.
pub fn mint_for_relay(secret: &[u8], agent: AgentId, now: i64) -> Result<String, JwtError> {
    Keys::new(secret).mint(
        SERVER_JWT_ISSUER,
        RELAY_JWT_AUDIENCE,
        Some(agent.to_string()),
        now,
        INTERNAL_JWT_MAX_VALIDITY_SECS,
    )
}

/// Signs claims for `iss` → `aud`, valid from `now_secs` for `validity_secs` (at most the
/// 30 s every peer accepts); for callers that choose both ends (tests, tools).
pub fn mint(
    secret: &[u8],
    iss: &str,
    aud: &str,
    sub: Option<String>,
    now_secs: i64,
    validity_secs: i64,
) -> String {
    // HS256 signing of plain claims does not fail; an empty token would be refused anyway.
    Keys::new(secret)
        .mint(
            iss,
            aud,
            sub,
            now_secs,
            validity_secs.min(INTERNAL_JWT_MAX_VALIDITY_SECS),
        )
        .unwrap_or_default()
}

/// Checks a token for `aud` presented by `iss` (a relay or a proxy): signature, issuer,
/// audience, `nbf`/`exp` with a small leeway, and the 30 s cap.
pub fn verify(
    secret: &[u8],
    token: &str,
    iss: &str,
    aud: &str,
    now_secs: i64,
) -> Result<InternalClaims, JwtError> {
    let expect = Expect {
        issuers: &[iss],
        audience: aud,
        max_validity_secs: INTERNAL_JWT_MAX_VALIDITY_SECS,
        subject: false,
    };
    Keys::new(secret).verify(token, expect, now_secs)
}
