//! Last user activity per workspace, reported by the proxy; the idle policy reads it.

use super::{get_i64, Store, StoreError};
use warren_types::WorkspaceId;

impl Store {
    /// Records activity; the newer time wins, times after `now` are clamped to `now`, and
    /// unknown workspaces are ignored. Returns how many workspaces were recorded.
    pub async fn record_activity(
        &self,
        items: &[(WorkspaceId, i64)],
        now: i64,
    ) -> Result<u64, StoreError> {
        let mut n = 0;
        for (id, at) in items {
            let at = (*at).min(now);
            let r = sqlx::query(
                "INSERT INTO workspace_activity (workspace_id, last_activity_at) \
                 SELECT $1, $2 WHERE EXISTS (SELECT 1 FROM workspaces WHERE id = $1) \
                 ON CONFLICT (workspace_id) DO UPDATE SET last_activity_at = \
                 CASE WHEN excluded.last_activity_at > workspace_activity.last_activity_at \
                 THEN excluded.last_activity_at ELSE workspace_activity.last_activity_at END",
            )
            .bind(id.get())
            .bind(at)
            .execute(&self.db.pool)
            .await?;
            n += r.rows_affected();
        }
        Ok(n)
    }

    pub async fn last_activity(&self, id: WorkspaceId) -> Result<Option<i64>, StoreError> {
        let r =
            sqlx::query("SELECT last_activity_at FROM workspace_activity WHERE workspace_id = $1")
                .bind(id.get())
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(r.as_ref()
            .map(|r| get_i64(r, "last_activity_at"))
            .transpose()?)
    }
}
