//! What a workspace is counted against: the agent's workspaces and its owner's, with the
//! sizes of the owner's (a machine class's weight), read in the creating transaction or,
//! for a resize, as they are.

use super::{corrupt, get_i64, get_str, Store, StoreError};
use crate::db::Tx;
use sqlx::any::AnyRow;
use warren_types::api::WorkspaceResources;
use warren_types::{AgentId, UserId, WorkspaceId};

/// Quota counts at creation time: workspaces not desired `Terminated` on the agent (a
/// prebuild's own counts as a workspace of the maintainer who turned prebuilds on, so that
/// no one gets workspaces past their quota by making projects).
#[derive(Debug, Clone)]
pub struct QuotaCounts {
    pub agent_total: i64,
    pub user_total: i64,
    /// The sizes of the creator's workspaces counted in `user_total`.
    pub user_sizes: Vec<WorkspaceResources>,
}

/// The owner's workspaces not desired `Terminated` on the agent, and their sizes.
const SIZES: &str = "SELECT id, resources FROM workspaces \
     WHERE agent_id = $1 AND owner_id = $2 AND desired_state <> 'Terminated'";

fn sizes(rows: &[AnyRow]) -> Result<Vec<(WorkspaceId, WorkspaceResources)>, sqlx::Error> {
    rows.iter()
        .map(|r| {
            let size = serde_json::from_str(&get_str(r, "resources")?)
                .map_err(|e| corrupt("resources", e))?;
            Ok((WorkspaceId(get_i64(r, "id")?), size))
        })
        .collect()
}

pub(super) async fn quota_counts(
    tx: &mut Tx,
    agent: AgentId,
    owner: UserId,
) -> Result<QuotaCounts, StoreError> {
    let r = sqlx::query(
        "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN owner_id = $2 THEN 1 ELSE 0 END), 0) AS mine \
         FROM workspaces WHERE agent_id = $1 AND desired_state <> 'Terminated'",
    )
    .bind(agent.get())
    .bind(owner.get())
    .fetch_one(&mut **tx)
    .await?;
    let rows = sqlx::query(SIZES)
        .bind(agent.get())
        .bind(owner.get())
        .fetch_all(&mut **tx)
        .await?;
    Ok(QuotaCounts {
        agent_total: get_i64(&r, "total")?,
        user_total: get_i64(&r, "mine")?,
        user_sizes: sizes(&rows)?.into_iter().map(|(_, s)| s).collect(),
    })
}

impl Store {
    /// The sizes of `owner`'s workspaces on `agent` that are not desired `Terminated`.
    pub async fn user_sizes(
        &self,
        agent: AgentId,
        owner: UserId,
    ) -> Result<Vec<(WorkspaceId, WorkspaceResources)>, StoreError> {
        let rows = sqlx::query(SIZES)
            .bind(agent.get())
            .bind(owner.get())
            .fetch_all(&self.db.pool)
            .await?;
        Ok(sizes(&rows)?)
    }
}
