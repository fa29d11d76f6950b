//! The audit log's entries and filters, and the hash chain that links each entry to the one
//! before it: one definition for the server that writes and verifies the chain, and for
//! whoever checks an exported copy (`warren audit list -o json`, the JSON-lines stream).

use crate::ids::UserId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;

/// The hash the first entry of a log chains to.
pub const AUDIT_GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Who acted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditActorKind {
    /// A signed-in user (by password, single sign-on or a token).
    User,
    /// Someone who did not prove who they are: a failed sign-in names the account tried.
    Anonymous,
    /// Warren itself, acting on a policy (idle and working-hours timers, account deletion).
    System,
}

/// How it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuditOutcome {
    Success,
    /// The request was refused for what it asked (bad input, a conflict, not found).
    Failure,
    /// The actor was not allowed, or could not prove who they are.
    Denied,
}

impl AuditOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOutcome::Success => "success",
            AuditOutcome::Failure => "failure",
            AuditOutcome::Denied => "denied",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "success" => Some(AuditOutcome::Success),
            "failure" => Some(AuditOutcome::Failure),
            "denied" => Some(AuditOutcome::Denied),
            _ => None,
        }
    }
}

/// One recorded action. Entries are only ever appended; `hash` chains each to the one
/// before ([`AuditEntry::chain_hash`]), so an entry changed or removed in the database breaks
/// the chain from there on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Position in the log, from 1, without gaps (retention removes the oldest).
    pub seq: i64,
    pub at: DateTime<Utc>,
    pub actor_kind: AuditActorKind,
    /// The acting user's id (`None` for Warren itself and for an unknown account).
    pub actor_id: Option<UserId>,
    /// The acting user's name when it acted, or the account a failed sign-in tried.
    pub actor: Option<String>,
    /// How the actor proved who they are: `session`, `token <id>`, `password`, `sso`, `ssh key`.
    pub credential: Option<String>,
    /// What was done, `noun.verb`: `workspace.create`, `session.sign_in`, `token.revoke`, …
    pub action: String,
    /// The kind of thing acted on: `workspace`, `user`, `token`, `space`, `agent`, …
    pub target_kind: Option<String>,
    /// Its id.
    pub target_id: Option<String>,
    /// Its name when the action happened.
    pub target: Option<String>,
    /// The path of the space the target lives in, when it lives in one.
    pub space: Option<String>,
    /// The client's address (behind trusted proxies: the address they name).
    pub source: Option<String>,
    /// The request's id (`X-Request-Id`), also in the server's logs.
    pub request_id: Option<String>,
    /// Where the action came through: `api`, `web`, `proxy`, `ssh`, `system`.
    pub channel: String,
    pub outcome: AuditOutcome,
    /// What else is worth knowing: the error of a failure, a new size, a session's length.
    pub detail: Option<String>,
    /// SHA-256 (hex) of the previous entry's hash and this entry's canonical form.
    pub hash: String,
}

/// The fields the hash covers, in a fixed order, with the time as integer milliseconds so
/// that a copy read back from JSON hashes the same.
#[derive(Serialize)]
struct Canonical<'a> {
    seq: i64,
    at_ms: i64,
    actor_kind: AuditActorKind,
    actor_id: Option<i64>,
    actor: &'a Option<String>,
    credential: &'a Option<String>,
    action: &'a str,
    target_kind: &'a Option<String>,
    target_id: &'a Option<String>,
    target: &'a Option<String>,
    space: &'a Option<String>,
    source: &'a Option<String>,
    request_id: &'a Option<String>,
    channel: &'a str,
    outcome: AuditOutcome,
    detail: &'a Option<String>,
}

impl AuditEntry {
    /// The hash this entry must carry when `prev` is the previous entry's hash (or
    /// [`AUDIT_GENESIS`] for the first).
    pub fn chain_hash(&self, prev: &str) -> String {
        let canonical = Canonical {
            seq: self.seq,
            at_ms: self.at.timestamp_millis(),
            actor_kind: self.actor_kind,
            actor_id: self.actor_id.map(|u| u.get()),
            actor: &self.actor,
            credential: &self.credential,
            action: &self.action,
            target_kind: &self.target_kind,
            target_id: &self.target_id,
            target: &self.target,
            space: &self.space,
            source: &self.source,
            request_id: &self.request_id,
            channel: &self.channel,
            outcome: self.outcome,
            detail: &self.detail,
        };
        let mut h = Sha256::new();
        h.update(prev.as_bytes());
        h.update(b"\n");
        // Serialising plain strings and integers cannot fail.
        h.update(serde_json::to_vec(&canonical).unwrap_or_default());
        hex::encode(h.finalize())
    }
}

/// Where a chain of entries first fails to hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditBreak {
    /// The first entry that does not chain to the one before it.
    pub seq: i64,
    pub reason: String,
}

/// Checks that `entries` (ascending by `seq`) chain from `prev` without gaps; `prev` is the
/// hash of the entry before the first (the genesis, or the anchor retention left).
pub fn verify_chain<'a>(
    prev: &str,
    prev_seq: i64,
    entries: impl IntoIterator<Item = &'a AuditEntry>,
) -> Result<(i64, String), AuditBreak> {
    let mut prev = prev.to_owned();
    let mut prev_seq = prev_seq;
    for e in entries {
        if e.seq != prev_seq + 1 {
            return Err(AuditBreak {
                seq: e.seq,
                reason: format!(
                    "entry {} follows entry {prev_seq}: entries were removed",
                    e.seq
                ),
            });
        }
        let want = e.chain_hash(&prev);
        if want != e.hash {
            return Err(AuditBreak {
                seq: e.seq,
                reason: format!(
                    "entry {} does not match its hash: it or the entry before it was changed",
                    e.seq
                ),
            });
        }
        prev = want;
        prev_seq = e.seq;
    }
    Ok((prev_seq, prev))
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditVerification {
    /// Entries checked.
    pub entries: i64,
    /// The first and last entry's `seq` (none when the log is empty).
    pub first_seq: Option<i64>,
    pub last_seq: Option<i64>,
    /// The last entry's hash: kept elsewhere, it lets a later check prove that nothing
    /// before it was rewritten since.
    pub head_hash: String,
    /// Where the chain breaks, if it does.
    pub broken: Option<AuditBreak>,
}

/// Filters of `GET /api/v1/audit`, newest first; `None` leaves a filter out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Username or id of the actor (also the account a failed sign-in tried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The target's name or id (`target_kind` narrows it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `workspace`, `user`, `token`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_kind: Option<String>,
    /// An action (`workspace.create`), or every action of a noun (`workspace.*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// `success`, `failure` or `denied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    /// Path of a space: entries about what lives in it or below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// Entries at or after this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Entries before this time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Page size, 1–1000 (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: i64, prev: &str) -> AuditEntry {
        let mut e = AuditEntry {
            seq,
            at: DateTime::from_timestamp_millis(1_700_000_000_000 + seq).unwrap(),
            actor_kind: AuditActorKind::User,
            actor_id: Some(UserId(1)),
            actor: Some("alice".into()),
            credential: Some("session".into()),
            action: "workspace.create".into(),
            target_kind: Some("workspace".into()),
            target_id: Some(seq.to_string()),
            target: Some(format!("ws{seq}")),
            space: Some("users/alice".into()),
            source: Some("10.0.0.1".into()),
            request_id: Some("abc".into()),
            channel: "api".into(),
            outcome: AuditOutcome::Success,
            detail: None,
            hash: String::new(),
        };
        e.hash = e.chain_hash(prev);
        e
    }

    fn chain(n: i64) -> Vec<AuditEntry> {
        let mut prev = AUDIT_GENESIS.to_owned();
        (1..=n)
            .map(|s| {
                let e = entry(s, &prev);
                prev = e.hash.clone();
                e
            })
            .collect()
    }

    #[test]
    fn an_intact_chain_verifies_and_survives_a_json_round_trip() {
        let c = chain(3);
        let copy: Vec<AuditEntry> =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        let (last, head) = verify_chain(AUDIT_GENESIS, 0, &copy).unwrap();
        assert_eq!((last, head), (3, c[2].hash.clone()));
    }

    #[test]
    fn a_changed_removed_or_reordered_entry_breaks_the_chain_where_it_happened() {
        let mut c = chain(4);
        c[1].actor = Some("mallory".into());
        assert_eq!(verify_chain(AUDIT_GENESIS, 0, &c).unwrap_err().seq, 2);

        let mut c = chain(4);
        c.remove(2);
        let b = verify_chain(AUDIT_GENESIS, 0, &c).unwrap_err();
        assert_eq!(b.seq, 4);
        assert!(b.reason.contains("removed"), "{}", b.reason);

        // Rewriting one entry's hash to match its new content still breaks the next one.
        let mut c = chain(4);
        c[1].outcome = AuditOutcome::Denied;
        c[1].hash = c[1].chain_hash(&c[0].hash);
        assert_eq!(verify_chain(AUDIT_GENESIS, 0, &c).unwrap_err().seq, 3);
    }
}
