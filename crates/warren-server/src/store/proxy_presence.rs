//! Which proxies serve, and for which region (issue 42): each proxy process's latest word.

use super::{get_i64, get_opt_str, get_str, Store, StoreError};

/// How long a proxy that stopped saying it serves stays listed (for admins) before its row
/// is dropped.
const KEEP_GONE_MS: i64 = 24 * 3600 * 1000;

/// A proxy's latest presence.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        let rows = sqlx::query(
            "SELECT instance, region, workspace_domain, public_scheme, ssh_address, started_at, \
             last_seen FROM proxy_presence WHERE last_seen >= $1 \
             ORDER BY last_seen DESC, instance",
        )
        .bind(since_ms)
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PresenceRow {
                    instance: get_str(r, "instance")?,
                    region: get_str(r, "region")?,
                    workspace_domain: get_str(r, "workspace_domain")?,
                    public_scheme: get_str(r, "public_scheme")?,
                    ssh_address: get_opt_str(r, "ssh_address")?,
                    started_at: get_i64(r, "started_at")?,
                    last_seen: get_i64(r, "last_seen")?,
                })
            })
            .collect()
    }
}
