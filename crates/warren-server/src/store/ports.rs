//! Ports' visibilities as users set them, and share links (kept as their token's SHA-256).

use super::{get_i64, get_opt_i64, get_str, Store, StoreError};
use sqlx::any::AnyRow;
use std::collections::BTreeMap;
use warren_types::sharing::PortVisibility;
use warren_types::{UserId, WorkspaceId};

/// A share link as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareLinkRow {
    pub id: i64,
    pub workspace_id: WorkspaceId,
    pub port: u16,
    pub created_by: UserId,
    pub created_by_username: String,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
}

impl ShareLinkRow {
    /// Whether it opens its port at `now`.
    pub fn valid_at(&self, now: i64) -> bool {
        self.revoked_at.is_none() && now < self.expires_at
    }
}

const LINK_COLS: &str =
    "l.id, l.workspace_id, l.port, l.created_by, u.username AS created_by_username, \
    l.created_at, l.expires_at, l.revoked_at";

fn link(r: &AnyRow) -> Result<ShareLinkRow, sqlx::Error> {
    Ok(ShareLinkRow {
        id: get_i64(r, "id")?,
        workspace_id: WorkspaceId(get_i64(r, "workspace_id")?),
        port: u16::try_from(get_i64(r, "port")?).unwrap_or_default(),
        created_by: UserId(get_i64(r, "created_by")?),
        created_by_username: get_str(r, "created_by_username")?,
        created_at: get_i64(r, "created_at")?,
        expires_at: get_i64(r, "expires_at")?,
        revoked_at: get_opt_i64(r, "revoked_at")?,
    })
}

impl Store {
    /// The visibilities users set on workspace `ws`'s ports.
    pub async fn port_visibilities(
        &self,
        ws: WorkspaceId,
    ) -> Result<BTreeMap<u16, PortVisibility>, StoreError> {
        let rows = sqlx::query(
            "SELECT port, visibility FROM workspace_ports WHERE workspace_id = $1 ORDER BY port",
        )
        .bind(ws.get())
        .fetch_all(&self.db.pool)
        .await?;
        let mut out = BTreeMap::new();
        for r in &rows {
            let port = u16::try_from(get_i64(r, "port")?).unwrap_or_default();
            let v = get_str(r, "visibility")?;
            // A value this release does not know is the narrowest, never a wider one.
            out.insert(port, v.parse().unwrap_or(PortVisibility::Private));
        }
        Ok(out)
    }

    /// Sets (or with `None` forgets) the visibility of port `port` of workspace `ws`.
    pub async fn set_port_visibility(
        &self,
        ws: WorkspaceId,
        port: u16,
        visibility: Option<PortVisibility>,
        now: i64,
    ) -> Result<(), StoreError> {
        match visibility {
            Some(v) => {
                sqlx::query(
                    "INSERT INTO workspace_ports (workspace_id, port, visibility, updated_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT (workspace_id, port) \
                     DO UPDATE SET visibility = excluded.visibility, updated_at = excluded.updated_at",
                )
                .bind(ws.get())
                .bind(i64::from(port))
                .bind(v.as_str())
                .bind(now)
                .execute(&self.db.pool)
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM workspace_ports WHERE workspace_id = $1 AND port = $2")
                    .bind(ws.get())
                    .bind(i64::from(port))
                    .execute(&self.db.pool)
                    .await?;
            }
        }
        Ok(())
    }

    /// Stores a new share link; its id.
    pub async fn insert_share_link(
        &self,
        ws: WorkspaceId,
        port: u16,
        token_digest: &str,
        created_by: UserId,
        now: i64,
        expires_at: i64,
    ) -> Result<i64, StoreError> {
        let r = sqlx::query(
            "INSERT INTO share_links (workspace_id, port, token_digest, created_by, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(ws.get())
        .bind(i64::from(port))
        .bind(token_digest)
        .bind(created_by.get())
        .bind(now)
        .bind(expires_at)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(get_i64(&r, "id")?)
    }

    /// The share links of workspace `ws` not expired or revoked before `since` (newest first).
    pub async fn share_links(
        &self,
        ws: WorkspaceId,
        since: i64,
    ) -> Result<Vec<ShareLinkRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {LINK_COLS} FROM share_links l JOIN users u ON u.id = l.created_by \
             WHERE l.workspace_id = $1 AND l.expires_at > $2 \
             AND (l.revoked_at IS NULL OR l.revoked_at > $2) ORDER BY l.id DESC"
        ))
        .bind(ws.get())
        .bind(since)
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(link).collect::<Result<_, _>>()?)
    }

    pub async fn share_link_by_id(&self, id: i64) -> Result<Option<ShareLinkRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {LINK_COLS} FROM share_links l JOIN users u ON u.id = l.created_by WHERE l.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(r.as_ref().map(link).transpose()?)
    }

    pub async fn share_link_by_digest(
        &self,
        digest: &str,
    ) -> Result<Option<ShareLinkRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {LINK_COLS} FROM share_links l JOIN users u ON u.id = l.created_by \
             WHERE l.token_digest = $1"
        ))
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(r.as_ref().map(link).transpose()?)
    }

    /// Revokes share link `id` of workspace `ws` (again: no change); false when there is none.
    pub async fn revoke_share_link(
        &self,
        ws: WorkspaceId,
        id: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "UPDATE share_links SET revoked_at = COALESCE(revoked_at, $3) \
             WHERE id = $1 AND workspace_id = $2",
        )
        .bind(id)
        .bind(ws.get())
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Drops links that ended before `before` (expired or revoked), so the table holds what
    /// may still be shown.
    pub async fn purge_share_links(&self, before: i64) -> Result<u64, StoreError> {
        let r = sqlx::query(
            "DELETE FROM share_links WHERE expires_at < $1 OR (revoked_at IS NOT NULL AND revoked_at < $1)",
        )
        .bind(before)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected())
    }
}
