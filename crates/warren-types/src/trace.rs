//! Trace ids: one id per API request, carried with the desired-state change it causes to the
//! relays and the agent, so one `grep` of the logs follows a change from the request to the
//! reconcile that applied it.
//!
//! On HTTP it is the `X-Request-Id` header (a caller may choose it; the server makes one
//! otherwise); on the agent tunnel it is a [`SignalDetail`] frame after the signal's header,
//! which agents from before trace ids never read, and which relays from before never send.

use serde::{Deserialize, Serialize};

/// The header carrying a trace id on every HTTP hop.
pub const TRACE_HEADER: &str = "x-request-id";

/// Longest trace id accepted: a W3C trace id is 32 hex digits, a UUID 36 characters.
pub const MAX_TRACE_LEN: usize = 64;

/// A trace id: 1 to 64 characters of `[A-Za-z0-9._:-]`, so it is safe in a log line and a
/// header whatever the caller sent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct TraceId(String);

impl TraceId {
    /// `raw` as a trace id, or `None` when it is empty, too long or has other characters.
    pub fn parse(raw: &str) -> Option<TraceId> {
        let ok = !raw.is_empty()
            && raw.len() <= MAX_TRACE_LEN
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
        ok.then(|| TraceId(raw.to_owned()))
    }

    /// A fresh id: 16 random bytes (the caller's randomness) as 32 hex digits.
    pub fn from_random(bytes: [u8; 16]) -> TraceId {
        TraceId(bytes.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for TraceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string that is not a trace id (see [`TraceId`]).
#[derive(Debug, thiserror::Error)]
#[error("not a trace id: 1 to {MAX_TRACE_LEN} characters of letters, digits and . _ : -")]
pub struct InvalidTraceId;

impl TryFrom<String> for TraceId {
    type Error = InvalidTraceId;
    fn try_from(raw: String) -> Result<Self, Self::Error> {
        TraceId::parse(&raw).ok_or(InvalidTraceId)
    }
}

impl From<TraceId> for String {
    fn from(t: TraceId) -> String {
        t.0
    }
}

/// Relay → agent, after a `StreamOpen::Signal` header: what caused the signal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalDetail {
    /// The API request whose change this signal announces (the latest, when several were
    /// coalesced into one signal).
    #[serde(default)]
    pub trace: Option<TraceId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_bounded_ids_are_taken() {
        assert!(TraceId::parse("4bf92f3577b34da6a3ce929d0e0e4736").is_some());
        assert!(TraceId::parse("req-1.2:3_x").is_some());
        for bad in ["", "a b", "x\ny", "é", &"a".repeat(65), "a\"b"] {
            assert!(TraceId::parse(bad).is_none(), "{bad:?}");
        }
        assert_eq!(TraceId::from_random([0xab; 16]).as_str().len(), 32);
        let detail: SignalDetail = serde_json::from_str(r#"{"trace":"abc"}"#).unwrap();
        assert_eq!(detail.trace.unwrap().as_str(), "abc");
        assert!(serde_json::from_str::<SignalDetail>(r#"{"trace":"a b"}"#).is_err());
    }
}
