//! Agents: their configuration, what they last reported, and their token's digest.

use super::error::unique;
use super::{corrupt, get_i64, get_opt_i64, get_opt_str, get_str, Store, StoreError};
use crate::db::{from_millis, DbKind};
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::Agent;
use warren_types::config::AgentConfig;
use warren_types::reconcile::HostCapacity;
use warren_types::AgentId;

/// What [`Store::delete_agent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentDeletion {
    Deleted,
    /// Nothing: this many of its workspaces are not gone.
    HasWorkspaces(i64),
}

/// What an agent row is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentKind {
    /// It runs workspaces.
    Runtime,
    /// It was made for one connector mount (`warren connect` dials in with its token).
    Connector,
}

impl AgentKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Runtime => "runtime",
            AgentKind::Connector => "connector",
        }
    }

    fn parse(s: &str) -> Result<Self, sqlx::Error> {
        match s {
            "runtime" => Ok(AgentKind::Runtime),
            "connector" => Ok(AgentKind::Connector),
            other => Err(corrupt("agent kind", format!("unknown kind {other:?}"))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub id: AgentId,
    pub name: String,
    pub kind: AgentKind,
    pub config: AgentConfig,
    pub created_at: i64,
    pub last_seen_at: Option<i64>,
    /// What one workspace can get at most, as the agent last reported it.
    pub capacity: Option<HostCapacity>,
    /// Why the agent cannot see its runtime, since when.
    pub runtime_fault: Option<(String, i64)>,
    /// Why its runtime does not isolate workspaces, as the last full reconcile said.
    pub isolation_warning: Option<String>,
}

impl AgentRow {
    /// A connector mount's row, not an agent that runs workspaces.
    pub fn is_connector(&self) -> bool {
        self.kind == AgentKind::Connector
    }

    pub fn to_api(&self) -> Agent {
        Agent {
            id: self.id,
            name: self.name.clone(),
            config: self.config.clone(),
            created_at: from_millis(self.created_at),
            last_seen_at: self.last_seen_at.map(from_millis),
            runtime_fault: self.runtime_fault.as_ref().map(|(f, _)| f.clone()),
            runtime_fault_since: self.runtime_fault.as_ref().map(|(_, t)| from_millis(*t)),
            isolation_warning: self.isolation_warning.clone(),
        }
    }
}

const COLS: &str =
    "id, name, kind, config, created_at, last_seen_at, capacity, runtime_fault, runtime_fault_since, \
     isolation_warning";

impl sqlx::FromRow<'_, AnyRow> for AgentRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(AgentRow {
            id: AgentId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            kind: AgentKind::parse(&get_str(r, "kind")?)?,
            config: serde_json::from_str(&get_str(r, "config")?)
                .map_err(|e| corrupt("agent config", e))?,
            created_at: get_i64(r, "created_at")?,
            last_seen_at: get_opt_i64(r, "last_seen_at")?,
            capacity: get_opt_str(r, "capacity")?
                .map(|c| serde_json::from_str(&c).map_err(|e| corrupt("agent capacity", e)))
                .transpose()?,
            runtime_fault: match (
                get_opt_str(r, "runtime_fault")?,
                get_opt_i64(r, "runtime_fault_since")?,
            ) {
                (Some(f), Some(t)) => Some((f, t)),
                _ => None,
            },
            isolation_warning: get_opt_str(r, "isolation_warning")?,
        })
    }
}

impl Store {
    /// Inserts an agent with its token's digest.
    pub async fn insert_agent(
        &self,
        name: &str,
        config: &AgentConfig,
        token_digest: &str,
        now: i64,
    ) -> Result<AgentRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO agents (name, token_hash, config, created_at, updated_at) VALUES ($1, $2, $3, $4, $4) RETURNING {COLS}"
        ))
        .bind(name)
        .bind(token_digest)
        .bind(to_json(config)?)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("agents.name"))?;
        Ok(AgentRow::from_row(&r)?)
    }

    /// Every agent that runs workspaces: not the rows made for connector mounts.
    pub async fn list_agents(&self) -> Result<Vec<AgentRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM agents WHERE kind = 'runtime' ORDER BY id"
        )))
        .await
    }

    pub async fn agent_by_id(&self, id: AgentId) -> Result<Option<AgentRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM agents WHERE id = $1")).bind(id.get()),
        )
        .await
    }

    /// An agent by name, or by id when `key` is all digits.
    /// The digest of the agent's current token.
    pub async fn agent_token_digest(&self, id: AgentId) -> Result<Option<String>, StoreError> {
        let r = sqlx::query("SELECT token_hash FROM agents WHERE id = $1")
            .bind(id.get())
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(r.as_ref().map(|r| get_str(r, "token_hash")).transpose()?)
    }

    pub async fn agent_by_key(&self, key: &str) -> Result<Option<AgentRow>, StoreError> {
        if let Ok(id) = key.parse::<i64>() {
            if let Some(a) = self.agent_by_id(AgentId(id)).await? {
                return Ok(Some(a));
            }
        }
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM agents WHERE name = $1")).bind(key),
        )
        .await
    }

    pub async fn update_agent_config(
        &self,
        id: AgentId,
        config: &AgentConfig,
        now: i64,
    ) -> Result<Option<AgentRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "UPDATE agents SET config = $1, updated_at = $2 WHERE id = $3 RETURNING {COLS}"
            ))
            .bind(to_json(config)?)
            .bind(now)
            .bind(id.get()),
        )
        .await
    }

    /// Replaces an agent's token digest; false when no such agent exists.
    pub async fn set_agent_token(
        &self,
        id: AgentId,
        token_digest: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE agents SET token_hash = $1, updated_at = $2 WHERE id = $3")
            .bind(token_digest)
            .bind(now)
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Deletes an agent none of whose workspaces is left but gone ones (which go with it;
    /// their history stays in the audit log and usage), with its GitOps sources and
    /// prebuilds. The workspaces still there are counted instead; `None`: no such agent.
    pub async fn delete_agent(&self, id: AgentId) -> Result<Option<AgentDeletion>, StoreError> {
        let mut tx = self.db.begin().await?;
        // A workspace created meanwhile locks the agent's row first (insert_workspace);
        // SQLite's write transactions are exclusive.
        let lock = match self.db.kind {
            DbKind::Postgres => " FOR UPDATE",
            DbKind::Sqlite => "",
        };
        let found = sqlx::query(&format!("SELECT id FROM agents WHERE id = $1{lock}"))
            .bind(id.get())
            .fetch_optional(&mut *tx)
            .await?;
        if found.is_none() {
            return Ok(None);
        }
        let live = sqlx::query(&format!(
            "SELECT COUNT(*) AS n FROM workspaces WHERE agent_id = $1 AND {}",
            super::workspaces::NOT_GONE
        ))
        .bind(id.get())
        .fetch_one(&mut *tx)
        .await?;
        let live = get_i64(&live, "n")?;
        if live > 0 {
            return Ok(Some(AgentDeletion::HasWorkspaces(live)));
        }
        sqlx::query("DELETE FROM workspaces WHERE agent_id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        sqlx::query("DELETE FROM agents WHERE id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(Some(AgentDeletion::Deleted))
    }

    /// The agent stored under a token digest, with the digest as stored.
    pub async fn agent_by_token_digest(
        &self,
        digest: &str,
    ) -> Result<Option<(AgentRow, String)>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLS}, token_hash FROM agents WHERE token_hash = $1"
        ))
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        Ok(Some((AgentRow::from_row(&r)?, get_str(&r, "token_hash")?)))
    }
}

pub(super) fn to_json(config: &AgentConfig) -> Result<String, StoreError> {
    serde_json::to_string(config).map_err(|e| StoreError::Corrupt {
        what: "agent config",
        source: Box::new(e),
    })
}
