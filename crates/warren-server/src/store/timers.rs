//! What the lifecycle timers read of an agent's workspaces.

use super::{corrupt, get_i64, get_opt_i64, get_opt_str, get_str, Store, StoreError};
use warren_types::{AgentId, DesiredState, WorkspaceId};

/// What the lifecycle timers need of a workspace.
#[derive(Debug, Clone)]
pub struct TimerRow {
    pub id: WorkspaceId,
    pub version: i64,
    pub desired: DesiredState,
    pub desired_state_updated_at: i64,
    pub created_at: i64,
    pub last_activity_at: Option<i64>,
    /// The owner's working hours stopped it (and nothing since).
    pub schedule_stopped: bool,
    /// Its owner's working hours.
    pub working_hours: Option<warren_types::schedule::WorkingHours>,
    /// Its space's path, and whether its owner is an admin: for budgets.
    pub space_path: String,
    pub owner_is_admin: bool,
}

impl Store {
    /// The workspaces of `agent` not desired `Terminated`, as the lifecycle timers see them
    /// (not prebuilds' own nor those waiting in a warm pool: the prebuild driver alone stops and
    /// removes those).
    pub async fn timer_rows(&self, agent: AgentId) -> Result<Vec<TimerRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT w.id, w.version, w.desired_state, w.desired_state_updated_at, w.created_at, \
             x.last_activity_at, w.schedule_stopped, u.working_hours, u.is_admin, \
             sp.path AS space_path FROM workspaces w \
             JOIN users u ON u.id = w.owner_id \
             LEFT JOIN workspace_activity x ON x.workspace_id = w.id \
             LEFT JOIN spaces sp ON sp.id = w.space_id \
             WHERE w.agent_id = $1 AND w.desired_state <> 'Terminated' AND w.prebuild_id IS NULL AND w.pool_of IS NULL ORDER BY w.id",
        )
        .bind(agent.get())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok(TimerRow {
                    id: WorkspaceId(get_i64(r, "id")?),
                    version: get_i64(r, "version")?,
                    desired: get_str(r, "desired_state")?
                        .parse()
                        .map_err(|e| corrupt("desired state", e))?,
                    desired_state_updated_at: get_i64(r, "desired_state_updated_at")?,
                    created_at: get_i64(r, "created_at")?,
                    last_activity_at: get_opt_i64(r, "last_activity_at")?,
                    schedule_stopped: get_i64(r, "schedule_stopped")? != 0,
                    working_hours: get_opt_str(r, "working_hours")?
                        .and_then(|j| serde_json::from_str(&j).ok()),
                    space_path: get_opt_str(r, "space_path")?.unwrap_or_default(),
                    owner_is_admin: get_i64(r, "is_admin")? != 0,
                })
            })
            .collect::<Result<_, sqlx::Error>>()?)
    }
}
