//! Prebuilds (issue 43): each run of a project's ref on an agent, with its own workspace (whose
//! stopped volumes new workspaces start as copies of) and what became of it.

use super::{get_opt_str, Store, StoreError};
use warren_types::prebuild::{PrebuildState, PrebuildTrigger};
use warren_types::{AgentId, ProjectId, WorkspaceId};

/// One prebuild.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PrebuildRow {
    pub id: i64,
    pub project_id: i64,
    pub project_name: String,
    pub agent_id: i64,
    pub agent_name: String,
    pub git_ref: String,
    pub commit_sha: String,
    pub workspace_id: Option<i64>,
    /// Its workspace's name, while that workspace exists.
    pub workspace_name: Option<String>,
    pub state: String,
    pub cause: String,
    pub reason: Option<String>,
    pub log: Option<String>,
    pub used: i64,
    /// What its workspace's agent last said its volumes and snapshots take.
    pub stored_bytes: Option<i64>,
    /// Its warm pool's workspaces that wait, stopped, to be taken.
    pub pool_ready: i64,
    /// The project's default ref, its other prebuilt refs (JSON) and its prebuilds' agent
    /// now (a prebuild of another ref or agent is collected).
    pub project_ref: String,
    pub project_refs: Option<String>,
    pub project_agent: Option<i64>,
    pub last_used_at: Option<i64>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

impl PrebuildRow {
    pub fn state(&self) -> PrebuildState {
        PrebuildState::parse(&self.state).unwrap_or(PrebuildState::Failed)
    }

    pub fn trigger(&self) -> PrebuildTrigger {
        PrebuildTrigger::parse(&self.cause).unwrap_or(PrebuildTrigger::Manual)
    }

    pub fn workspace(&self) -> Option<WorkspaceId> {
        self.workspace_id.map(WorkspaceId)
    }

    /// Whether its project still prebuilds its ref on its agent.
    pub fn still_wanted(&self) -> bool {
        // An unreadable list counts as the default ref alone: no prebuild is kept by mistake.
        let others = super::projects::refs_column(self.project_refs.as_deref()).unwrap_or_default();
        self.project_agent == Some(self.agent_id)
            && (self.git_ref == self.project_ref || others.contains(&self.git_ref))
    }
}

/// How a project's prebuilds run while they are on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrebuildSettings {
    pub agent: AgentId,
    /// The maintainer they run as.
    pub by: warren_types::UserId,
    /// The refs prebuilt besides the default ref.
    pub refs: Vec<String>,
    pub every_hours: Option<u32>,
    /// The size of the warm pool (`None`: no pool).
    pub pool: Option<u32>,
}

const COLS: &str = "b.id, b.project_id, p.name AS project_name, b.agent_id, a.name AS agent_name, \
    b.git_ref, b.commit_sha, b.workspace_id, w.name AS workspace_name, b.state, b.cause, \
    b.reason, b.log, b.used, w.stored_bytes, \
    (SELECT COUNT(*) FROM workspaces m WHERE m.pool_of = b.id AND m.desired_state = 'Stopped' \
     AND m.actual_state = 'Stopped') AS pool_ready, p.default_ref AS project_ref, p.prebuild_refs AS project_refs, \
    p.prebuild_agent_id AS project_agent, \
    b.last_used_at, b.created_at, b.finished_at";

const FROM: &str = "prebuilds b JOIN projects p ON p.id = b.project_id \
    JOIN agents a ON a.id = b.agent_id LEFT JOIN workspaces w ON w.id = b.workspace_id";

/// How a finished prebuild ends.
#[derive(Debug, Clone)]
pub struct Finish<'a> {
    pub state: PrebuildState,
    pub reason: Option<&'a str>,
    pub log: Option<&'a str>,
}

impl Store {
    /// Records a new running prebuild of `commit`; its workspace is set once made.
    pub async fn insert_prebuild(
        &self,
        project: ProjectId,
        agent: AgentId,
        git_ref: &str,
        commit: &str,
        trigger: PrebuildTrigger,
        now: i64,
    ) -> Result<i64, StoreError> {
        let r: (i64,) = sqlx::query_as(
            "INSERT INTO prebuilds (project_id, agent_id, git_ref, commit_sha, state, cause, used, created_at) \
             VALUES ($1, $2, $3, $4, 'running', $5, 0, $6) RETURNING id",
        )
        .bind(project.get())
        .bind(agent.get())
        .bind(git_ref)
        .bind(commit)
        .bind(trigger.as_str())
        .bind(now)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(r.0)
    }

    pub async fn set_prebuild_workspace(
        &self,
        id: i64,
        workspace: WorkspaceId,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE prebuilds SET workspace_id = $1 WHERE id = $2")
            .bind(workspace.get())
            .bind(id)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Keeps a running prebuild's output: its steps are done, its workspace stopping.
    pub async fn set_prebuild_log(&self, id: i64, log: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE prebuilds SET log = $1 WHERE id = $2 AND state = 'running'")
            .bind(log)
            .bind(id)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Ends prebuild `id` as `f` says, once: `false` when it was no longer in `from`.
    pub async fn finish_prebuild(
        &self,
        id: i64,
        from: PrebuildState,
        f: &Finish<'_>,
        now: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "UPDATE prebuilds SET state = $1, reason = COALESCE($2, reason), log = COALESCE($3, log), \
             finished_at = COALESCE(finished_at, $4) WHERE id = $5 AND state = $6",
        )
        .bind(f.state.as_str())
        .bind(f.reason)
        .bind(f.log)
        .bind(now)
        .bind(id)
        .bind(from.as_str())
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// A workspace was created from prebuild `id`.
    pub async fn prebuild_used(&self, id: i64, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE prebuilds SET used = used + 1, last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// The project's prebuilds, the newest first.
    pub async fn project_prebuilds(
        &self,
        project: ProjectId,
        limit: i64,
    ) -> Result<Vec<PrebuildRow>, StoreError> {
        self.all(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM {FROM} WHERE b.project_id = $1 ORDER BY b.id DESC LIMIT $2"
            ))
            .bind(project.get())
            .bind(limit),
        )
        .await
    }

    /// Prebuilds in `state`, the oldest first.
    pub async fn prebuilds_in(&self, state: PrebuildState) -> Result<Vec<PrebuildRow>, StoreError> {
        self.all(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM {FROM} WHERE b.state = $1 ORDER BY b.id"
            ))
            .bind(state.as_str()),
        )
        .await
    }

    /// The newest prebuild of the ref on the agent in any state but `removed`.
    pub async fn newest_prebuild(
        &self,
        project: ProjectId,
        agent: AgentId,
        git_ref: &str,
        state: Option<PrebuildState>,
    ) -> Result<Option<PrebuildRow>, StoreError> {
        let (cond, s) = match state {
            Some(s) => ("b.state = $4", s.as_str()),
            None => ("b.state <> $4", PrebuildState::Removed.as_str()),
        };
        self.optional(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM {FROM} WHERE b.project_id = $1 AND b.agent_id = $2 \
                 AND b.git_ref = $3 AND {cond} ORDER BY b.id DESC LIMIT 1"
            ))
            .bind(project.get())
            .bind(agent.get())
            .bind(git_ref)
            .bind(s),
        )
        .await
    }

    /// The newest ready prebuild of the ref on the agent whose workspace has stopped (its
    /// volumes written no more): the one new workspaces start from.
    pub async fn usable_prebuild(
        &self,
        project: ProjectId,
        agent: AgentId,
        git_ref: &str,
    ) -> Result<Option<PrebuildRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM {FROM} WHERE b.project_id = $1 AND b.agent_id = $2 \
                 AND b.git_ref = $3 AND b.state = 'ready' AND w.desired_state = 'Stopped' \
                 AND w.actual_state = 'Stopped' ORDER BY b.id DESC LIMIT 1"
            ))
            .bind(project.get())
            .bind(agent.get())
            .bind(git_ref),
        )
        .await
    }

    /// The projects that have prebuilds, with their agent and the user they run as (not while
    /// that account is disabled or being deleted).
    pub async fn projects_with_prebuilds(&self) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        self.all(sqlx::query_as(
            "SELECT p.id, p.prebuild_agent_id, p.prebuild_by FROM projects p \
             JOIN users u ON u.id = p.prebuild_by WHERE p.prebuild_agent_id IS NOT NULL \
             AND u.disabled_at IS NULL AND u.delete_requested_at IS NULL ORDER BY p.id",
        ))
        .await
    }

    /// Turns the project's prebuilds on (as `on` says) or off (`None`).
    pub async fn set_project_prebuilds(
        &self,
        project: ProjectId,
        on: Option<&PrebuildSettings>,
    ) -> Result<(), StoreError> {
        let refs = on
            .filter(|o| !o.refs.is_empty())
            .map(|o| serde_json::json!(o.refs).to_string());
        sqlx::query(
            "UPDATE projects SET prebuild_agent_id = $1, prebuild_by = $2, prebuild_refs = $3, \
             prebuild_every_hours = $4, prebuild_pool = $6 WHERE id = $5",
        )
        .bind(on.map(|o| o.agent.get()))
        .bind(on.map(|o| o.by.get()))
        .bind(refs)
        .bind(on.and_then(|o| o.every_hours).map(i64::from))
        .bind(project.get())
        .bind(on.and_then(|o| o.pool).filter(|n| *n > 0).map(i64::from))
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Seals and sets (or with `None` removes) the secret the project's prebuild webhooks
    /// are checked with.
    pub async fn set_prebuild_webhook_secret(
        &self,
        project: ProjectId,
        secret: Option<&str>,
    ) -> Result<(), StoreError> {
        let sealed = secret.map(|s| self.sbox.seal(s.as_bytes()));
        sqlx::query("UPDATE projects SET prebuild_webhook_secret = $1 WHERE id = $2")
            .bind(sealed)
            .bind(project.get())
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// The project's prebuild webhook secret, opened; `None` when it has none.
    pub async fn prebuild_webhook_secret(
        &self,
        project: ProjectId,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let r = sqlx::query("SELECT prebuild_webhook_secret FROM projects WHERE id = $1")
            .bind(project.get())
            .fetch_optional(&self.db.pool)
            .await?;
        let sealed = r
            .as_ref()
            .map(|r| get_opt_str(r, "prebuild_webhook_secret"))
            .transpose()?
            .flatten();
        Ok(sealed.as_deref().map(|s| self.sbox.open(s)).transpose()?)
    }

    /// Forgets finished prebuilds beyond each project's newest `keep` (their workspaces are
    /// the collector's already).
    pub async fn prune_prebuilds(&self, keep: i64) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM prebuilds WHERE state IN ('failed', 'removed') AND id NOT IN \
             (SELECT n.id FROM prebuilds n WHERE n.project_id = prebuilds.project_id \
             ORDER BY n.id DESC LIMIT $1)",
        )
        .bind(keep)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Prebuilds' workspaces that no prebuild keeps any more (removed, failed, or whose
    /// prebuild went with its project) and are not yet asked to go.
    pub async fn loose_prebuild_workspaces(&self) -> Result<Vec<(i64, i64, i64)>, StoreError> {
        self.all(sqlx::query_as(
            "SELECT w.id, w.version, w.agent_id FROM workspaces w WHERE w.prebuild_id IS NOT NULL \
             AND w.desired_state <> 'Terminated' AND NOT EXISTS (SELECT 1 FROM prebuilds b \
             WHERE b.id = w.prebuild_id AND b.state IN ('running', 'ready'))",
        ))
        .await
    }
}

/// The prebuild a workspace's volumes started from, as its row keeps it (rendered on its
/// claims for as long as it lives: the agent copies only into volumes it creates).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredSeed {
    pub prebuild: i64,
    pub workspace: String,
    pub workspace_id: WorkspaceId,
    pub commit: String,
}

impl StoredSeed {
    pub fn as_seed(&self) -> warren_types::prebuild::Seed<'_> {
        warren_types::prebuild::Seed {
            workspace: &self.workspace,
            workspace_id: self.workspace_id,
            commit: &self.commit,
            pooled: false,
        }
    }
}
