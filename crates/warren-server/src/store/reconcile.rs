//! The SQL of one reconcile (reconcile.md): the rows an agent reported, their updates, the
//! rows that go back to the agent and their "responded" mark, the agent's own columns — in
//! one transaction the domain layer drives (`crate::app::reconcile`) and commits.

use super::workspaces::set_desired_sql;
use super::{
    bind_all, corrupt, get_i64, get_opt_i64, get_opt_str, get_str, Bind, Store, StoreError,
};
use crate::db::{DbKind, Tx};
use std::collections::BTreeMap;
use warren_types::reconcile::HostCapacity;
use warren_types::{ActualState, AgentId, DesiredState, WorkspaceId};

/// A reported workspace's row, as far as processing the report needs it.
#[derive(Debug, Clone)]
pub struct ReportedRow {
    pub id: i64,
    pub agent_id: AgentId,
    pub desired: DesiredState,
    pub actual: ActualState,
    pub desired_state_updated_at: i64,
    pub created_at: i64,
    pub resource_version: Option<String>,
    pub failure_reason: Option<String>,
    pub waiting_reason: Option<String>,
    pub last_activity_at: Option<i64>,
}

/// What a report changes in a row.
#[derive(Debug, Clone)]
pub struct ReportUpdate {
    pub actual: ActualState,
    /// Whether `actual` differs from the stored one (its timestamp moves only then).
    pub actual_changed: bool,
    pub resource_version: Option<String>,
    pub failure_reason: Option<String>,
    pub waiting_reason: Option<String>,
    /// A new desired state, written the one way desired states are written.
    pub desired: Option<DesiredState>,
    /// The new desired state is the idle timeout's stop.
    pub idle_stop: bool,
}

/// A row that goes back to the agent. Its configuration, when the answer carries one, is read
/// apart ([`ReconcileTx::configs`]): which rows carry one also depends on what the agent
/// reported.
#[derive(Debug, Clone)]
pub struct ResponseRow {
    pub id: WorkspaceId,
    pub name: String,
    pub namespace: String,
    pub desired: DesiredState,
    pub actual: ActualState,
    pub resource_version: Option<String>,
    /// Which rendering the row's configurations are (`None` for rows rendered before
    /// generations were kept).
    pub config_generation: Option<String>,
    pub forced: bool,
    pub needs_response: bool,
}

/// Which of the agent's workspaces go back in the answer (reconcile.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selection<'a> {
    /// Every workspace not both desired and actual `Terminated`.
    Full,
    /// Those flagged since the last response, and those just reported.
    Partial { reported: &'a [String] },
}

impl Selection<'_> {
    /// The `WHERE` clause for the agent bound at `$1`, its other placeholders numbered from
    /// `$2`, and their binds.
    fn predicate(&self, kind: DbKind) -> (String, Vec<Bind>) {
        match self {
            Selection::Full => (
                format!("agent_id = $1 AND {}", super::workspaces::NOT_GONE),
                vec![],
            ),
            // `needs_response` is set by every write that sets desired_state_updated_at or
            // the force flag, and cleared with responded_to_agent_at: it is reconcile.md's
            // rule (desired_state_updated_at >= responded_to_agent_at, never responded, or
            // forced), kept in an indexed column.
            Selection::Partial { reported: [] } => {
                ("agent_id = $1 AND needs_response = 1".to_owned(), vec![])
            }
            // Each side of the OR on its own index (the pending flag's, the name's), so one
            // reported workspace among 10,000 costs two index lookups, not a scan of the
            // agent's rows; `+agent_id` keeps SQLite from choosing the agent's index for the
            // second side (PostgreSQL reads it as the plain column).
            Selection::Partial { reported } => (
                format!(
                    "(agent_id = $1 AND needs_response = 1) OR (name IN ({}) AND +agent_id = $1)",
                    json_texts(kind, 2)
                ),
                vec![Bind::S(json_list(reported))],
            ),
        }
    }
}

/// `FOR UPDATE` of one table of a join (PostgreSQL refuses to lock the nullable side of an
/// outer join).
fn for_update_of(kind: DbKind, table: &str) -> String {
    match kind {
        DbKind::Postgres => format!(" FOR UPDATE OF {table}"),
        DbKind::Sqlite => String::new(),
    }
}

fn for_update(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Postgres => " FOR UPDATE",
        DbKind::Sqlite => "",
    }
}

/// A subquery yielding the strings of the JSON array bound at `$n`: one bind however long the
/// list (a full reconcile of 10,000 workspaces named each in an `IN (…)` list cost more to
/// parse and plan than to run).
fn json_texts(kind: DbKind, n: usize) -> String {
    match kind {
        DbKind::Postgres => format!("SELECT json_array_elements_text(${n}::json)"),
        DbKind::Sqlite => format!("SELECT value FROM json_each(${n})"),
    }
}

/// As [`json_texts`], for a JSON array of integers.
fn json_ints(kind: DbKind, n: usize) -> String {
    match kind {
        DbKind::Postgres => format!("SELECT json_array_elements_text(${n}::json)::bigint"),
        DbKind::Sqlite => format!("SELECT value FROM json_each(${n})"),
    }
}

fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    // Strings and integers always serialise.
    serde_json::to_string(items).unwrap_or_else(|_| "[]".to_owned())
}

fn parse_state<T: std::str::FromStr>(s: &str) -> Result<T, sqlx::Error>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e| corrupt("state", e))
}

impl Store {
    /// Whether any workspace of `agent` waits to be sent (the no-op partial fast path).
    pub async fn has_pending_response(&self, agent: AgentId) -> Result<bool, StoreError> {
        let pending = sqlx::query(
            "SELECT id FROM workspaces WHERE agent_id = $1 AND needs_response = 1 LIMIT 1",
        )
        .bind(agent.get())
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(pending.is_some())
    }

    /// Records that `agent` cannot see its runtime (the first report's time is kept) and
    /// that it was seen.
    pub async fn set_runtime_fault(
        &self,
        agent: AgentId,
        fault: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE agents SET runtime_fault = $1, \
             runtime_fault_since = COALESCE(runtime_fault_since, $2), last_seen_at = $2 WHERE id = $3",
        )
        .bind(fault)
        .bind(now)
        .bind(agent.get())
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Opens the transaction of one reconcile.
    pub async fn begin_reconcile(&self) -> Result<ReconcileTx, StoreError> {
        Ok(ReconcileTx {
            tx: self.db.begin().await?,
            kind: self.db.kind,
        })
    }
}

/// One reconcile's transaction; dropped without [`ReconcileTx::commit`], it rolls back.
pub struct ReconcileTx {
    tx: Tx,
    kind: DbKind,
}

impl std::fmt::Debug for ReconcileTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReconcileTx").finish_non_exhaustive()
    }
}

impl ReconcileTx {
    /// The rows of the reported names (whatever their agent), locked on PostgreSQL.
    pub async fn load_reported(
        &mut self,
        names: &[&str],
    ) -> Result<BTreeMap<String, ReportedRow>, StoreError> {
        let mut out = BTreeMap::new();
        if names.is_empty() {
            return Ok(out);
        }
        let sql = format!(
            "SELECT w.id, w.name, w.agent_id, w.desired_state, w.actual_state, w.desired_state_updated_at, \
             w.created_at, w.deployment_resource_version, w.failure_reason, w.waiting_reason, \
             x.last_activity_at \
             FROM workspaces w LEFT JOIN workspace_activity x ON x.workspace_id = w.id \
             WHERE w.name IN ({}) ORDER BY w.id{}",
            json_texts(self.kind, 1),
            for_update_of(self.kind, "w")
        );
        for r in sqlx::query(&sql)
            .bind(json_list(names))
            .fetch_all(&mut *self.tx)
            .await?
        {
            out.insert(
                get_str(&r, "name")?,
                ReportedRow {
                    id: get_i64(&r, "id")?,
                    agent_id: AgentId(get_i64(&r, "agent_id")?),
                    desired: parse_state(&get_str(&r, "desired_state")?)?,
                    actual: parse_state(&get_str(&r, "actual_state")?)?,
                    desired_state_updated_at: get_i64(&r, "desired_state_updated_at")?,
                    created_at: get_i64(&r, "created_at")?,
                    resource_version: get_opt_str(&r, "deployment_resource_version")?,
                    failure_reason: get_opt_str(&r, "failure_reason")?,
                    waiting_reason: get_opt_str(&r, "waiting_reason")?,
                    last_activity_at: get_opt_i64(&r, "last_activity_at")?,
                },
            );
        }
        Ok(out)
    }

    /// Writes what a report changed in row `id`.
    pub async fn update_reported(
        &mut self,
        id: i64,
        u: &ReportUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        let actual_at = if u.actual_changed {
            "$4"
        } else {
            "actual_state_updated_at"
        };
        let desired = if u.desired.is_some() {
            let by = if u.idle_stop {
                super::workspaces::ChangedBy::IdleTimeout
            } else {
                super::workspaces::ChangedBy::Other
            };
            format!(", {}", set_desired_sql(7, 4, by))
        } else {
            String::new()
        };
        let sql = format!(
            "UPDATE workspaces SET actual_state = $1, deployment_resource_version = $2, failure_reason = $3, \
             waiting_reason = $6, actual_state_updated_at = {actual_at}, updated_at = $4, version = version + 1{desired} \
             WHERE id = $5"
        );
        let mut q = sqlx::query(&sql)
            .bind(u.actual.as_str())
            .bind(u.resource_version.clone())
            .bind(u.failure_reason.clone())
            .bind(now)
            .bind(id)
            .bind(u.waiting_reason.clone());
        // PostgreSQL refuses more binds than placeholders.
        if let Some(d) = u.desired {
            q = q.bind(d.as_str());
        }
        q.execute(&mut *self.tx).await?;
        Ok(())
    }

    /// Keeps what the agent measured of workspace `id`'s kept volumes and snapshots.
    pub async fn set_stored_bytes(&mut self, id: i64, bytes: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE workspaces SET stored_bytes = $1 WHERE id = $2")
            .bind(bytes)
            .bind(id)
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// The rows of `agent` that go back, by id, locked on PostgreSQL.
    pub async fn response_rows(
        &mut self,
        agent: AgentId,
        selection: Selection<'_>,
    ) -> Result<Vec<ResponseRow>, StoreError> {
        let (predicate, mut binds) = selection.predicate(self.kind);
        binds.insert(0, Bind::I(agent.get()));
        let sql = format!(
            "SELECT id, name, namespace, desired_state, actual_state, deployment_resource_version, \
             config_generation, force_include_all_resources, needs_response \
             FROM workspaces WHERE {predicate} ORDER BY id{}",
            for_update(self.kind)
        );
        let rows = bind_all(sqlx::query(&sql), &binds)
            .fetch_all(&mut *self.tx)
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            out.push(ResponseRow {
                id: WorkspaceId(get_i64(r, "id")?),
                name: get_str(r, "name")?,
                namespace: get_str(r, "namespace")?,
                desired: parse_state(&get_str(r, "desired_state")?)?,
                actual: parse_state(&get_str(r, "actual_state")?)?,
                resource_version: get_opt_str(r, "deployment_resource_version")?,
                config_generation: get_opt_str(r, "config_generation")?,
                forced: get_i64(r, "force_include_all_resources")? != 0,
                needs_response: get_i64(r, "needs_response")? != 0,
            });
        }
        Ok(out)
    }

    /// The sealed configuration for its desired state of each of `ids` (of `agent`, as
    /// [`ReconcileTx::response_rows`] read them in this transaction), by id; none for desired
    /// `Terminated`, whose answer carries no objects. Only these are read: each is several
    /// KiB, and a full reconcile of 10,000 workspaces read both of every row.
    pub async fn configs(
        &mut self,
        agent: AgentId,
        ids: &[WorkspaceId],
    ) -> Result<BTreeMap<WorkspaceId, String>, StoreError> {
        if ids.is_empty() {
            return Ok(BTreeMap::new());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let sql = format!(
            "SELECT id, CASE WHEN desired_state = 'Running' THEN config_running \
                  WHEN desired_state IN ('Stopped', 'RestartRequested') THEN config_stopped END AS config \
             FROM workspaces WHERE agent_id = $1 AND id IN ({})",
            json_ints(self.kind, 2)
        );
        let rows = sqlx::query(&sql)
            .bind(agent.get())
            .bind(json_list(&ids))
            .fetch_all(&mut *self.tx)
            .await?;
        let mut out = BTreeMap::new();
        for r in &rows {
            if let Some(config) = get_opt_str(r, "config")? {
                out.insert(WorkspaceId(get_i64(r, "id")?), config);
            }
        }
        Ok(out)
    }

    /// Marks the rows just sent that were flagged (`ids`: those of
    /// [`ReconcileTx::response_rows`] forced or needing a response) as answered. By id, not by
    /// the selection again: on PostgreSQL a row flagged by a write committed after the rows
    /// were read would match the selection now and be cleared unsent (the rows read are
    /// locked, so none of them can change in between). Rows sent without a flag keep their
    /// `responded_to_agent_at` (it only ever bounds a later desired-state time from below):
    /// a full reconcile of 10,000 unchanged workspaces then writes nothing.
    pub async fn mark_responded(
        &mut self,
        agent: AgentId,
        ids: &[WorkspaceId],
        now: i64,
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<i64> = ids.iter().map(|id| id.get()).collect();
        let sql = format!(
            "UPDATE workspaces SET responded_to_agent_at = $1, force_include_all_resources = 0, \
             needs_response = 0 WHERE agent_id = $2 AND id IN ({})",
            json_ints(self.kind, 3)
        );
        sqlx::query(&sql)
            .bind(now)
            .bind(agent.get())
            .bind(json_list(&ids))
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    /// The agent sees its runtime again.
    pub async fn clear_runtime_fault(&mut self, agent: AgentId) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE agents SET runtime_fault = NULL, runtime_fault_since = NULL WHERE id = $1",
        )
        .bind(agent.get())
        .execute(&mut *self.tx)
        .await?;
        Ok(())
    }

    /// Records (or with `None` clears) why the agent's runtime does not isolate workspaces.
    pub async fn set_isolation_warning(
        &mut self,
        agent: AgentId,
        warning: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE agents SET isolation_warning = $1 WHERE id = $2")
            .bind(warning)
            .bind(agent.get())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    pub async fn set_capacity(
        &mut self,
        agent: AgentId,
        capacity: &HostCapacity,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(capacity).map_err(|e| StoreError::Corrupt {
            what: "agent capacity",
            source: Box::new(e),
        })?;
        sqlx::query("UPDATE agents SET capacity = $1 WHERE id = $2")
            .bind(json)
            .bind(agent.get())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    pub async fn set_last_seen(&mut self, agent: AgentId, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE agents SET last_seen_at = $1 WHERE id = $2")
            .bind(now)
            .bind(agent.get())
            .execute(&mut *self.tx)
            .await?;
        Ok(())
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        self.tx.commit().await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections_bind_their_names_as_one_json_list() {
        let names = ["a".to_owned(), "b\"c".to_owned()];
        let (p, binds) = Selection::Partial { reported: &names }.predicate(DbKind::Sqlite);
        assert_eq!(
            p,
            "(agent_id = $1 AND needs_response = 1) OR \
             (name IN (SELECT value FROM json_each($2)) AND +agent_id = $1)"
        );
        assert!(matches!(&binds[..], [Bind::S(s)] if s == r#"["a","b\"c"]"#));
        let (p, _) = Selection::Partial { reported: &names }.predicate(DbKind::Postgres);
        assert!(p.contains("json_array_elements_text($2::json)"), "{p}");
        assert!(Selection::Full.predicate(DbKind::Sqlite).1.is_empty());
    }
}
