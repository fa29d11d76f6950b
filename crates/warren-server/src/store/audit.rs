//! The audit log: appending a chained entry under the head's lock, reading pages of it with
//! filters, walking it in order for verification, and removing what retention lets go.

use super::{bind_all, Bind, Store, StoreError};
use crate::db::{from_millis, DbKind};
use sqlx::any::AnyRow;
use sqlx::Row;
use warren_types::api::{AuditActorKind, AuditEntry, AuditOutcome};
use warren_types::UserId;

/// An entry before it has a place in the chain.
#[derive(Debug, Clone)]
pub struct NewAuditEntry {
    pub at_ms: i64,
    pub actor_kind: AuditActorKind,
    pub actor_id: Option<UserId>,
    pub actor: Option<String>,
    pub credential: Option<String>,
    pub action: String,
    pub target_kind: Option<String>,
    pub target_id: Option<String>,
    pub target: Option<String>,
    pub space: Option<String>,
    pub source: Option<String>,
    pub request_id: Option<String>,
    pub channel: String,
    pub outcome: AuditOutcome,
    pub detail: Option<String>,
}

/// What the log is filtered by: ids already resolved by the domain layer.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor_id: Option<UserId>,
    /// The name an actor had, or a failed sign-in tried (with `actor_id`: only entries of
    /// nobody known, the failed sign-ins naming that account).
    pub actor_name: Option<String>,
    /// Matched against the target's id and its name.
    pub target: Option<String>,
    pub target_kind: Option<String>,
    pub action: Option<String>,
    /// `action` names a noun: every `noun.*` matches.
    pub action_prefix: bool,
    pub outcome: Option<AuditOutcome>,
    /// Space paths whose entries (and their subtrees') are wanted; `None` is every entry.
    pub spaces: Option<Vec<String>>,
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
    /// Entries before this `seq` (the page's cursor).
    pub before: Option<i64>,
    pub limit: i64,
}

/// The chain's end and the anchor its oldest kept entry chains to.
#[derive(Debug, Clone)]
pub struct AuditHead {
    pub seq: i64,
    pub hash: String,
    pub anchor_seq: i64,
    pub anchor_hash: String,
}

const COLS: &str = "seq, at, actor_kind, actor_id, actor, credential, action, target_kind, \
    target_id, target, space, source, request_id, channel, outcome, detail, hash";

fn entry(r: &AnyRow) -> Result<AuditEntry, sqlx::Error> {
    let kind: String = r.try_get("actor_kind")?;
    let outcome: String = r.try_get("outcome")?;
    Ok(AuditEntry {
        seq: r.try_get("seq")?,
        at: from_millis(r.try_get("at")?),
        actor_kind: match kind.as_str() {
            "user" => AuditActorKind::User,
            "anonymous" => AuditActorKind::Anonymous,
            "system" => AuditActorKind::System,
            other => return Err(super::corrupt("audit actor kind", other)),
        },
        actor_id: r.try_get::<Option<i64>, _>("actor_id")?.map(UserId),
        actor: r.try_get("actor")?,
        credential: r.try_get("credential")?,
        action: r.try_get("action")?,
        target_kind: r.try_get("target_kind")?,
        target_id: r.try_get("target_id")?,
        target: r.try_get("target")?,
        space: r.try_get("space")?,
        source: r.try_get("source")?,
        request_id: r.try_get("request_id")?,
        channel: r.try_get("channel")?,
        outcome: AuditOutcome::parse(&outcome)
            .ok_or_else(|| super::corrupt("audit outcome", &outcome))?,
        detail: r.try_get("detail")?,
        hash: r.try_get("hash")?,
    })
}

fn actor_kind(k: AuditActorKind) -> &'static str {
    match k {
        AuditActorKind::User => "user",
        AuditActorKind::Anonymous => "anonymous",
        AuditActorKind::System => "system",
    }
}

impl Store {
    /// Appends `entries`, in order, after the chain's end, each hashed onto the one before,
    /// in one transaction, and moves the end. Appends queue on the head row (SQLite: on its
    /// one writer), so numbers have no gaps and each entry's hash covers the one committed
    /// before it.
    pub async fn append_audit(
        &self,
        entries: Vec<NewAuditEntry>,
    ) -> Result<Vec<AuditEntry>, StoreError> {
        let mut tx = self.db.begin().await?;
        let lock = if self.db.kind == DbKind::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        let head = sqlx::query(&format!(
            "SELECT seq, hash FROM audit_head WHERE id = 1{lock}"
        ))
        .fetch_one(&mut *tx)
        .await?;
        let (mut prev_seq, mut prev_hash): (i64, String) =
            (head.try_get("seq")?, head.try_get("hash")?);
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let mut entry = AuditEntry {
                seq: prev_seq + 1,
                at: from_millis(e.at_ms),
                actor_kind: e.actor_kind,
                actor_id: e.actor_id,
                actor: e.actor,
                credential: e.credential,
                action: e.action,
                target_kind: e.target_kind,
                target_id: e.target_id,
                target: e.target,
                space: e.space,
                source: e.source,
                request_id: e.request_id,
                channel: e.channel,
                outcome: e.outcome,
                detail: e.detail,
                hash: String::new(),
            };
            entry.hash = entry.chain_hash(&prev_hash);
            sqlx::query(&format!(
                "INSERT INTO audit_log ({COLS}) VALUES \
                 ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
            ))
            .bind(entry.seq)
            .bind(e.at_ms)
            .bind(actor_kind(entry.actor_kind))
            .bind(entry.actor_id.map(|u| u.get()))
            .bind(&entry.actor)
            .bind(&entry.credential)
            .bind(&entry.action)
            .bind(&entry.target_kind)
            .bind(&entry.target_id)
            .bind(&entry.target)
            .bind(&entry.space)
            .bind(&entry.source)
            .bind(&entry.request_id)
            .bind(&entry.channel)
            .bind(entry.outcome.as_str())
            .bind(&entry.detail)
            .bind(&entry.hash)
            .execute(&mut *tx)
            .await?;
            (prev_seq, prev_hash) = (entry.seq, entry.hash.clone());
            out.push(entry);
        }
        sqlx::query("UPDATE audit_head SET seq = $1, hash = $2 WHERE id = 1")
            .bind(prev_seq)
            .bind(&prev_hash)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(out)
    }

    /// A page of entries, newest first.
    pub async fn list_audit(&self, f: &AuditFilter) -> Result<Vec<AuditEntry>, StoreError> {
        let mut sql = format!("SELECT {COLS} FROM audit_log WHERE 1 = 1");
        let mut binds = vec![];
        let mut push = |cond: &str, b: Bind, sql: &mut String| {
            binds.push(b);
            sql.push_str(&cond.replace('?', &format!("${}", binds.len())));
        };
        match (f.actor_id, &f.actor_name) {
            // The account's own entries, and the failed sign-ins that named it.
            (Some(id), Some(name)) => {
                push(" AND (actor_id = ?", Bind::I(id.get()), &mut sql);
                push(
                    " OR (actor_id IS NULL AND actor = ?))",
                    Bind::S(name.clone()),
                    &mut sql,
                );
            }
            (Some(id), None) => push(" AND actor_id = ?", Bind::I(id.get()), &mut sql),
            (None, Some(name)) => push(" AND actor = ?", Bind::S(name.clone()), &mut sql),
            (None, None) => {}
        }
        if let Some(t) = &f.target {
            // A name alone when it cannot be an id: one index answers it, where an OR would
            // have the planners walk the whole log newest first.
            if t.parse::<i64>().is_ok() {
                push(" AND (target_id = ?", Bind::S(t.clone()), &mut sql);
                push(" OR target = ?)", Bind::S(t.clone()), &mut sql);
            } else {
                push(" AND target = ?", Bind::S(t.clone()), &mut sql);
            }
        }
        if let Some(k) = &f.target_kind {
            push(" AND target_kind = ?", Bind::S(k.clone()), &mut sql);
        }
        if let Some(a) = &f.action {
            if f.action_prefix {
                // Not LIKE: `_` in an action would be a wildcard.
                push(
                    " AND substr(action, 1, length(?)) = ",
                    Bind::S(format!("{a}.")),
                    &mut sql,
                );
                push("?", Bind::S(format!("{a}.")), &mut sql);
            } else {
                push(" AND action = ?", Bind::S(a.clone()), &mut sql);
            }
        }
        if let Some(o) = f.outcome {
            push(" AND outcome = ?", Bind::S(o.as_str().into()), &mut sql);
        }
        if let Some(spaces) = &f.spaces {
            let mut alts = vec![];
            for s in spaces {
                binds.push(Bind::S(s.clone()));
                let n = binds.len();
                binds.push(Bind::S(format!("{s}/")));
                let m = binds.len();
                alts.push(format!(
                    "space = ${n} OR substr(space, 1, length(${m})) = ${m}"
                ));
            }
            if alts.is_empty() {
                sql.push_str(" AND 1 = 0");
            } else {
                sql.push_str(&format!(" AND ({})", alts.join(" OR ")));
            }
        }
        let mut push = |cond: &str, b: Bind, sql: &mut String| {
            binds.push(b);
            sql.push_str(&cond.replace('?', &format!("${}", binds.len())));
        };
        if let Some(s) = f.since_ms {
            push(" AND at >= ?", Bind::I(s), &mut sql);
        }
        if let Some(u) = f.until_ms {
            push(" AND at < ?", Bind::I(u), &mut sql);
        }
        if let Some(b) = f.before {
            push(" AND seq < ?", Bind::I(b), &mut sql);
        }
        sql.push_str(&format!(
            " ORDER BY seq DESC LIMIT {}",
            f.limit.clamp(1, 1001)
        ));
        let rows = bind_all(sqlx::query(&sql), &binds)
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows.iter().map(entry).collect::<Result<_, _>>()?)
    }

    /// Up to `limit` entries after `after`, oldest first: the walk of verification.
    pub async fn audit_after(&self, after: i64, limit: i64) -> Result<Vec<AuditEntry>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM audit_log WHERE seq > $1 ORDER BY seq LIMIT $2"
        ))
        .bind(after)
        .bind(limit)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(entry).collect::<Result<_, _>>()?)
    }

    pub async fn audit_head(&self) -> Result<AuditHead, StoreError> {
        let r =
            sqlx::query("SELECT seq, hash, anchor_seq, anchor_hash FROM audit_head WHERE id = 1")
                .fetch_one(&self.db.pool)
                .await?;
        Ok(AuditHead {
            seq: r.try_get("seq")?,
            hash: r.try_get("hash")?,
            anchor_seq: r.try_get("anchor_seq")?,
            anchor_hash: r.try_get("anchor_hash")?,
        })
    }

    /// Removes the entries older than `before_ms` (at most `batch` of them, oldest first),
    /// first moving the anchor to the last one removed so the rest still verifies. Returns
    /// how many went.
    pub async fn prune_audit(&self, before_ms: i64, batch: i64) -> Result<u64, StoreError> {
        let mut tx = self.db.begin().await?;
        let lock = if self.db.kind == DbKind::Postgres {
            " FOR UPDATE"
        } else {
            ""
        };
        sqlx::query(&format!("SELECT seq FROM audit_head WHERE id = 1{lock}"))
            .fetch_one(&mut *tx)
            .await?;
        let last = sqlx::query(
            "SELECT seq, hash FROM audit_log WHERE seq IN \
             (SELECT seq FROM audit_log WHERE at < $1 ORDER BY seq LIMIT $2) \
             ORDER BY seq DESC LIMIT 1",
        )
        .bind(before_ms)
        .bind(batch)
        .fetch_optional(&mut *tx)
        .await?;
        let Some(last) = last else {
            return Ok(0);
        };
        let (seq, hash): (i64, String) = (last.try_get("seq")?, last.try_get("hash")?);
        sqlx::query("UPDATE audit_head SET anchor_seq = $1, anchor_hash = $2 WHERE id = 1")
            .bind(seq)
            .bind(&hash)
            .execute(&mut *tx)
            .await?;
        let gone = sqlx::query("DELETE FROM audit_log WHERE seq <= $1")
            .bind(seq)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone)
    }
}
