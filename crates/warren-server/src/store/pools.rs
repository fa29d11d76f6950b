//! Warm pools (issue 43): the workspaces a project keeps made from its newest prebuild,
//! hidden from every user until one creates a workspace of that ref and takes one.

use super::quota::QuotaCounts;
use super::workspaces::{seal_json, set_desired_sql, ChangedBy, RenderedObjects, COLS, FROM};
use super::workspaces::{StoredSeed, StoredVariable, WorkspaceRow};
use super::{get_i64, get_opt_str, get_str, Store, StoreError};
use crate::db::DbKind;
use warren_types::api::WorkspaceResources;
use warren_types::{AgentId, DesiredState, ProjectId, SpaceId, UserId, WorkspaceId};

/// What a user's new workspace must match to be taken from a pool: the same project, agent
/// and ref, the same definition text and size (anything else would hand over a workspace
/// other than the one asked for).
#[derive(Debug, Clone)]
pub struct PoolClaim<'a> {
    pub project: ProjectId,
    pub agent: AgentId,
    pub git_ref: &'a str,
    pub devfile: &'a str,
    pub resources: &'a WorkspaceResources,
    /// Who takes it, where it goes, and its own variables.
    pub owner: UserId,
    pub space: SpaceId,
    pub variables: &'a [StoredVariable],
}

/// The pooled workspace a claim takes, as the render of its new objects needs it.
#[derive(Debug, Clone)]
pub struct Taken {
    pub id: WorkspaceId,
    pub name: String,
    pub seed: Option<StoredSeed>,
}

impl Store {
    /// Every workspace waiting in a warm pool (not desired `Terminated`), the oldest first.
    pub async fn pool_members(&self) -> Result<Vec<WorkspaceRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM {FROM} WHERE w.pool_of IS NOT NULL \
             AND w.desired_state <> 'Terminated' ORDER BY w.id"
        )))
        .await
    }

    /// Takes a stopped pooled workspace matching `c` for `c.owner`, atomically with the
    /// caller's quota check (`check` gets the counts as they will be: the pooled workspace is
    /// already among the agent's, and the maintainer's until now), and stores what `render`
    /// makes of it: owned by the claimer, in their space, shown to them, asked to run.
    /// `Ok(None)` when no pooled workspace matches.
    pub async fn claim_pool_workspace<E, C, R>(
        &self,
        c: &PoolClaim<'_>,
        now: i64,
        check: C,
        render: R,
    ) -> Result<Option<WorkspaceRow>, E>
    where
        E: From<StoreError>,
        C: FnOnce(QuotaCounts) -> Result<(), E>,
        R: FnOnce(&Taken) -> Result<RenderedObjects, E>,
    {
        let mut tx = self.db.begin().await.map_err(StoreError::from)?;
        // Claims on one agent queue here (SQLite's write transaction is exclusive): two
        // users never take the same workspace, and the quota check sees the other's claim.
        if self.db.kind == DbKind::Postgres {
            sqlx::query("SELECT id FROM agents WHERE id = $1 FOR UPDATE")
                .bind(c.agent.get())
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::from)?;
        }
        let resources = serde_json::to_string(c.resources).unwrap_or_default();
        let row = sqlx::query(
            "SELECT id, name, owner_id, seed FROM workspaces WHERE pool_of IS NOT NULL \
             AND project_id = $1 AND agent_id = $2 AND git_ref = $3 AND devfile = $4 \
             AND resources = $5 AND desired_state = 'Stopped' AND actual_state = 'Stopped' \
             ORDER BY id LIMIT 1",
        )
        .bind(c.project.get())
        .bind(c.agent.get())
        .bind(c.git_ref)
        .bind(c.devfile)
        .bind(&resources)
        .fetch_optional(&mut *tx)
        .await
        .map_err(StoreError::from)?;
        let Some(row) = row else {
            return Ok(None);
        };
        let taken = Taken {
            id: WorkspaceId(get_i64(&row, "id").map_err(StoreError::from)?),
            name: get_str(&row, "name").map_err(StoreError::from)?,
            seed: get_opt_str(&row, "seed")
                .map_err(StoreError::from)?
                .and_then(|s| serde_json::from_str(&s).ok()),
        };
        let pooled_by = UserId(get_i64(&row, "owner_id").map_err(StoreError::from)?);
        let mut counts = super::quota::quota_counts(&mut tx, c.agent, c.owner).await?;
        counts.agent_total -= 1;
        if pooled_by == c.owner {
            counts.user_total -= 1;
            if let Some(i) = counts.user_sizes.iter().position(|s| s == c.resources) {
                counts.user_sizes.remove(i);
            }
        }
        check(counts)?;
        let r = render(&taken)?;
        let updated = sqlx::query(&format!(
            "UPDATE workspaces SET owner_id = $1, space_id = $2, variables = $3, namespace = $4, \
             rendered_objects = $5, endpoints = $6, url = $7, config_running = $8, \
             config_stopped = $9, {}, force_include_all_resources = 1, created_at = $11, \
             updated_at = $11, version = version + 1, pool_of = NULL, config_generation = $13 \
             WHERE id = $12 AND pool_of IS NOT NULL",
            set_desired_sql(10, 11, ChangedBy::Other)
        ))
        .bind(c.owner.get())
        .bind(c.space.get())
        .bind(seal_json(self, &c.variables))
        .bind(&r.namespace)
        .bind(seal_json(self, &r.objects))
        .bind(serde_json::to_string(&r.endpoints).unwrap_or_default())
        .bind(r.url)
        .bind(self.sbox.seal(r.config_running.as_bytes()))
        .bind(self.sbox.seal(r.config_stopped.as_bytes()))
        .bind(DesiredState::Running.as_str())
        .bind(now)
        .bind(taken.id.get())
        .bind(&r.config_generation)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::from)?;
        if updated.rows_affected() != 1 {
            return Ok(None);
        }
        tx.commit().await.map_err(StoreError::from)?;
        Ok(self.workspace_by_id(taken.id).await?)
    }
}
