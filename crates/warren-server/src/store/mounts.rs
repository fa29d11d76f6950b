//! Mounts (spec/mounts.md): entries of the tree Warren does not run as containers. Rules (who
//! may make what, where a redirect leads) live in `app::mounts`; this module only reads and
//! writes.

use super::agents::to_json as config_json;
use super::error::unique;
use super::{get_i64, get_opt_i64, get_opt_str, get_str, Store, StoreError};
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::{Condition, WorkspaceGrant};
use warren_types::config::AgentConfig;
use warren_types::{AgentId, MountId, SpaceId, UserId, WorkspaceId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRow {
    pub id: MountId,
    pub name: String,
    pub space_id: SpaceId,
    pub space_path: String,
    pub owner_id: UserId,
    pub owner_username: String,
    /// As stored: `redirect` or `workspace` (the kinds the server makes today).
    pub kind: String,
    pub target: Option<String>,
    pub url: Option<String>,
    /// A `proxy` mount's agent: the connector's own agent row, or the agent that reaches
    /// `url`.
    pub agent_id: Option<AgentId>,
    /// What backs it last reported (spec/mounts.md): the ports served, the conditions, and
    /// when (its heartbeat).
    pub ports: Vec<u16>,
    pub conditions: Vec<Condition>,
    pub reported_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl MountRow {
    /// A `proxy` mount backed by `warren connect` (no URL of its own).
    pub fn is_connector(&self) -> bool {
        self.kind == "proxy" && self.url.is_none()
    }

    /// A `proxy` mount to a URL an agent reaches.
    pub fn is_url_proxy(&self) -> bool {
        self.kind == "proxy" && self.url.is_some()
    }
}

/// The agent row made for a connector mount, inserted with it.
#[derive(Debug, Clone)]
pub struct NewConnector<'a> {
    pub agent_name: &'a str,
    pub config: &'a AgentConfig,
    pub token_digest: &'a str,
}

/// A mount to insert.
#[derive(Debug, Clone)]
pub struct NewMount<'a> {
    pub name: &'a str,
    /// A `proxy` mount's agent, when it reaches a URL.
    pub via: Option<AgentId>,
    pub space_id: SpaceId,
    pub owner_id: UserId,
    pub kind: &'a str,
    pub target: Option<&'a str>,
    pub url: Option<&'a str>,
    pub connector: Option<NewConnector<'a>>,
    pub now: i64,
}

impl<'a> NewMount<'a> {
    /// A mount with neither target, URL, agent nor connector: each kind sets its own.
    pub fn new(
        name: &'a str,
        kind: &'a str,
        space_id: SpaceId,
        owner_id: UserId,
        now: i64,
    ) -> Self {
        NewMount {
            name,
            via: None,
            space_id,
            owner_id,
            kind,
            target: None,
            url: None,
            connector: None,
            now,
        }
    }
}

const COLS: &str = "m.id, m.name, m.space_id, sp.path AS space_path, m.owner_id, \
    u.username AS owner_username, m.kind, m.target, m.url, m.agent_id, m.ports, m.report, \
    m.reported_at, m.created_at, m.updated_at";
const FROM: &str =
    "mounts m JOIN spaces sp ON sp.id = m.space_id JOIN users u ON u.id = m.owner_id";

impl sqlx::FromRow<'_, AnyRow> for MountRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(MountRow {
            id: MountId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            space_id: SpaceId(get_i64(r, "space_id")?),
            space_path: get_str(r, "space_path")?,
            owner_id: UserId(get_i64(r, "owner_id")?),
            owner_username: get_str(r, "owner_username")?,
            kind: get_str(r, "kind")?,
            target: get_opt_str(r, "target")?,
            url: get_opt_str(r, "url")?,
            agent_id: get_opt_i64(r, "agent_id")?.map(AgentId),
            // Written only by this module from typed values; unreadable JSON reads as nothing
            // reported rather than failing every listing.
            ports: get_opt_str(r, "ports")?
                .and_then(|j| serde_json::from_str(&j).ok())
                .unwrap_or_default(),
            conditions: get_opt_str(r, "report")?
                .and_then(|j| serde_json::from_str(&j).ok())
                .unwrap_or_default(),
            reported_at: get_opt_i64(r, "reported_at")?,
            created_at: get_i64(r, "created_at")?,
            updated_at: get_i64(r, "updated_at")?,
        })
    }
}

fn report_json(v: &impl serde::Serialize) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt {
        what: "mount report",
        source: Box::new(e),
    })
}

impl Store {
    pub async fn mount_by_name(&self, name: &str) -> Result<Option<MountRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM {FROM} WHERE m.name = $1")).bind(name),
        )
        .await
    }

    /// Every mount, by name (the caller filters what a user may see).
    pub async fn list_mounts(&self) -> Result<Vec<MountRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM {FROM} ORDER BY m.name"
        )))
        .await
    }

    /// Mounts in the space at `path` or (with `recursive`) below it, by space then name.
    pub async fn mounts_under(
        &self,
        path: Option<&str>,
        recursive: bool,
    ) -> Result<Vec<MountRow>, StoreError> {
        let q = match (path, recursive) {
            (None, _) => format!("SELECT {COLS} FROM {FROM} ORDER BY sp.path, m.name"),
            (Some(_), false) => {
                format!("SELECT {COLS} FROM {FROM} WHERE sp.path = $1 ORDER BY m.name")
            }
            // Not LIKE: `_` in a path would be a wildcard.
            (Some(_), true) => format!(
                "SELECT {COLS} FROM {FROM} WHERE sp.path = $1 \
                 OR substr(sp.path, 1, length($1) + 1) = $1 || '/' ORDER BY sp.path, m.name"
            ),
        };
        let mut query = sqlx::query(&q);
        if let Some(p) = path {
            query = query.bind(p.to_owned());
        }
        let rows = query.fetch_all(&self.db.pool).await?;
        Ok(rows
            .iter()
            .map(MountRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// Inserts a mount; `Conflict("mount name")` when the name is taken by a mount, or by a
    /// workspace (checked in the same transaction, so a workspace made meanwhile under the
    /// same name is seen unless both commit at once — the name's unique index on each table
    /// is the last word for its own kind).
    pub async fn insert_mount(&self, m: &NewMount<'_>) -> Result<MountRow, StoreError> {
        // Read then write: SQLite's write lock taken at once (`Db::begin`).
        let mut tx = self.db.begin().await?;
        let taken = sqlx::query("SELECT 1 FROM workspaces WHERE name = $1")
            .bind(m.name)
            .fetch_optional(&mut *tx)
            .await?;
        if taken.is_some() {
            return Err(StoreError::Conflict("mount name"));
        }
        let agent_id = match &m.connector {
            None => m.via.map(AgentId::get),
            Some(c) => {
                let r = sqlx::query(
                    "INSERT INTO agents (name, kind, token_hash, config, created_at, updated_at) \
                     VALUES ($1, 'connector', $2, $3, $4, $4) RETURNING id",
                )
                .bind(c.agent_name)
                .bind(c.token_digest)
                .bind(config_json(c.config)?)
                .bind(m.now)
                .fetch_one(&mut *tx)
                .await
                .map_err(unique("connector agent name"))?;
                Some(get_i64(&r, "id")?)
            }
        };
        let r = sqlx::query(
            "INSERT INTO mounts (name, space_id, owner_id, kind, target, url, created_at, \
             updated_at, agent_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8) RETURNING id",
        )
        .bind(m.name)
        .bind(m.space_id.get())
        .bind(m.owner_id.get())
        .bind(m.kind)
        .bind(m.target)
        .bind(m.url)
        .bind(m.now)
        .bind(agent_id)
        .fetch_one(&mut *tx)
        .await
        .map_err(unique("mount name"))?;
        let id = get_i64(&r, "id")?;
        let r = sqlx::query(&format!("SELECT {COLS} FROM {FROM} WHERE m.id = $1"))
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
        let mount = MountRow::from_row(&r)?;
        tx.commit().await?;
        Ok(mount)
    }

    /// Deletes a mount, and a connector's agent row with it (its token stops working);
    /// false when it did not exist.
    pub async fn delete_mount(&self, id: MountId) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        let connector = sqlx::query(
            "SELECT agent_id FROM mounts WHERE id = $1 AND kind = 'proxy' AND url IS NULL",
        )
        .bind(id.get())
        .fetch_optional(&mut *tx)
        .await?;
        let r = sqlx::query("DELETE FROM mounts WHERE id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        if let Some(agent) = connector
            .as_ref()
            .map(|r| get_opt_i64(r, "agent_id"))
            .transpose()?
            .flatten()
        {
            sqlx::query("DELETE FROM agents WHERE id = $1")
                .bind(agent)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    /// The connector mount whose agent row is `agent`, if it is one.
    pub async fn connector_mount(&self, agent: AgentId) -> Result<Option<MountRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
            "SELECT {COLS} FROM {FROM} WHERE m.agent_id = $1 AND m.kind = 'proxy' AND m.url IS NULL"
        ))
            .bind(agent.get()),
        )
        .await
    }

    /// The `proxy` mounts agent `agent` reaches (name, URL), by name.
    pub async fn url_mounts_of(&self, agent: AgentId) -> Result<Vec<(String, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, url FROM mounts WHERE agent_id = $1 AND kind = 'proxy' \
             AND url IS NOT NULL ORDER BY name",
        )
        .bind(agent.get())
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((get_str(r, "name")?, get_str(r, "url")?)))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Records a heartbeat (or probe) of what backs mount `id`.
    pub async fn record_mount_report(
        &self,
        id: MountId,
        ports: &[u16],
        conditions: &[Condition],
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE mounts SET ports = $1, report = $2, reported_at = $3 WHERE id = $4")
            .bind(report_json(&ports)?)
            .bind(report_json(&conditions)?)
            .bind(now)
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }
}

/// Grants: who may make softlinks to a workspace.
impl Store {
    /// Allows `user` to softlink to workspace `ws` (again: no change).
    pub async fn set_grant(
        &self,
        ws: WorkspaceId,
        user: UserId,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO workspace_grants (workspace_id, user_id, created_at) VALUES ($1, $2, $3) \
             ON CONFLICT (workspace_id, user_id) DO NOTHING",
        )
        .bind(ws.get())
        .bind(user.get())
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Takes a grant back; false when there was none.
    pub async fn remove_grant(&self, ws: WorkspaceId, user: UserId) -> Result<bool, StoreError> {
        let r =
            sqlx::query("DELETE FROM workspace_grants WHERE workspace_id = $1 AND user_id = $2")
                .bind(ws.get())
                .bind(user.get())
                .execute(&self.db.pool)
                .await?;
        Ok(r.rows_affected() == 1)
    }

    pub async fn has_grant(&self, ws: WorkspaceId, user: UserId) -> Result<bool, StoreError> {
        let r =
            sqlx::query("SELECT 1 FROM workspace_grants WHERE workspace_id = $1 AND user_id = $2")
                .bind(ws.get())
                .bind(user.get())
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(r.is_some())
    }

    /// The grants on a workspace, by username.
    pub async fn grants(&self, ws: WorkspaceId) -> Result<Vec<WorkspaceGrant>, StoreError> {
        let rows = sqlx::query(
            "SELECT g.user_id, u.username, g.created_at FROM workspace_grants g \
             JOIN users u ON u.id = g.user_id WHERE g.workspace_id = $1 ORDER BY u.username",
        )
        .bind(ws.get())
        .fetch_all(&self.db.pool)
        .await?;
        let grant = |r: &AnyRow| -> Result<WorkspaceGrant, sqlx::Error> {
            Ok(WorkspaceGrant {
                user_id: UserId(get_i64(r, "user_id")?),
                username: get_str(r, "username")?,
                created_at: crate::db::from_millis(get_i64(r, "created_at")?),
            })
        };
        Ok(rows.iter().map(grant).collect::<Result<_, _>>()?)
    }
}
