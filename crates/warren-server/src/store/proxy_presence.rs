//! Which proxies serve, and for which region (issue 42): each proxy process's latest word, and
//! the regions administrators registered (the one door each may be shown with).

use super::{Store, StoreError};

/// How long a proxy that stopped saying it serves stays listed (for admins) before its row
/// is dropped.
const KEEP_GONE_MS: i64 = 24 * 3600 * 1000;

/// A proxy's latest presence.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PresenceRow {
    pub instance: String,
    /// Empty: a central proxy.
    pub region: String,
    /// `host[:port]` of its workspace hosts.
    pub workspace_domain: String,
    pub public_scheme: String,
    pub ssh_address: Option<String>,
    pub started_at: i64,
    pub last_seen: i64,
}

impl Store {
    /// Records that `p.instance` serves as `p` says, now; drops rows of proxies long gone.
    pub async fn record_proxy_presence(&self, p: &PresenceRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO proxy_presence \
             (instance, region, workspace_domain, public_scheme, ssh_address, started_at, last_seen) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) \
             ON CONFLICT (instance) DO UPDATE SET region = $2, workspace_domain = $3, \
             public_scheme = $4, ssh_address = $5, last_seen = $6",
        )
        .bind(&p.instance)
        .bind(&p.region)
        .bind(&p.workspace_domain)
        .bind(&p.public_scheme)
        .bind(&p.ssh_address)
        .bind(p.last_seen)
        .execute(&self.db.pool)
        .await?;
        sqlx::query("DELETE FROM proxy_presence WHERE last_seen < $1")
            .bind(p.last_seen - KEEP_GONE_MS)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Forgets `instance` (it stopped).
    pub async fn forget_proxy_presence(&self, instance: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM proxy_presence WHERE instance = $1")
            .bind(instance)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Every proxy seen since `since_ms` (all kept rows with 0), the most recently seen first.
    pub async fn proxy_presences(&self, since_ms: i64) -> Result<Vec<PresenceRow>, StoreError> {
        self.all(
            sqlx::query_as(
                "SELECT instance, region, workspace_domain, public_scheme, ssh_address, \
                 started_at, last_seen FROM proxy_presence WHERE last_seen >= $1 \
                 ORDER BY last_seen DESC, instance",
            )
            .bind(since_ms),
        )
        .await
    }
}

/// A region an administrator registered: the only door its workspaces are shown with.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct RegionRow {
    pub name: String,
    /// `host[:port]` of its workspace hosts.
    pub workspace_domain: String,
    pub public_scheme: String,
    pub ssh_address: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

impl Store {
    /// Registers region `r.name` or changes its door (`r.created_at` is kept on a change).
    pub async fn put_region(&self, r: &RegionRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO regions \
             (name, workspace_domain, public_scheme, ssh_address, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (name) DO UPDATE SET workspace_domain = $2, public_scheme = $3, \
             ssh_address = $4, updated_at = $6",
        )
        .bind(&r.name)
        .bind(&r.workspace_domain)
        .bind(&r.public_scheme)
        .bind(&r.ssh_address)
        .bind(r.created_at)
        .bind(r.updated_at)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Removes region `name`; whether it was registered.
    pub async fn remove_region(&self, name: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM regions WHERE name = $1")
            .bind(name)
            .execute(&self.db.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Every registered region, by name.
    pub async fn regions(&self) -> Result<Vec<RegionRow>, StoreError> {
        self.all(sqlx::query_as(
            "SELECT name, workspace_domain, public_scheme, ssh_address, created_at, updated_at \
             FROM regions ORDER BY name",
        ))
        .await
    }

    /// Region `name`, when registered.
    pub async fn region(&self, name: &str) -> Result<Option<RegionRow>, StoreError> {
        self.optional(
            sqlx::query_as(
                "SELECT name, workspace_domain, public_scheme, ssh_address, created_at, \
                 updated_at FROM regions WHERE name = $1",
            )
            .bind(name),
        )
        .await
    }
}
