//! What `warren audit verify` and `warren admin audit verify` found, for people.

/// What `verify` found, for people.
pub fn audit_verification(v: &warren_types::api::AuditVerification) -> String {
    let range = match (v.first_seq, v.last_seq) {
        (Some(a), Some(b)) => format!(" (entries {a}–{b})"),
        _ => String::new(),
    };
    match &v.broken {
        None => format!(
            "The audit log is intact: {} entries checked{range}.\nHead hash: {}\n",
            v.entries, v.head_hash
        ),
        Some(b) => format!(
            "The audit log's chain is BROKEN at entry {}: {}\n{} entries before it check out{range}.\n",
            b.seq, b.reason, v.entries
        ),
    }
}
