//! Leases held by one server replica at a time, for the jobs that must run once.

use super::{Store, StoreError};

impl Store {
    /// Takes or renews the lease `name` for `holder` until `expires_at`: true when `holder`
    /// holds it now. Another holder's lease is taken only once it has expired at `now`; one
    /// statement, so two servers racing for it cannot both win.
    pub async fn hold_lease(
        &self,
        name: &str,
        holder: &str,
        now: i64,
        expires_at: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "INSERT INTO leases (name, holder, acquired_at, expires_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             expires_at = excluded.expires_at, \
             acquired_at = CASE WHEN leases.holder = excluded.holder \
             THEN leases.acquired_at ELSE excluded.acquired_at END \
             WHERE leases.holder = excluded.holder OR leases.expires_at <= excluded.acquired_at",
        )
        .bind(name)
        .bind(holder)
        .bind(now)
        .bind(expires_at)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Gives the lease up (on shutdown), so another server takes it without waiting for it
    /// to expire; a lease another holder has taken meanwhile is left alone.
    pub async fn release_lease(&self, name: &str, holder: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2")
            .bind(name)
            .bind(holder)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    /// Who holds the lease `name` and until when (unix ms), expired or not.
    pub async fn lease_holder(&self, name: &str) -> Result<Option<(String, i64)>, StoreError> {
        let r = sqlx::query("SELECT holder, expires_at FROM leases WHERE name = $1")
            .bind(name)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(match r {
            Some(r) => Some((
                super::get_str(&r, "holder")?,
                super::get_i64(&r, "expires_at")?,
            )),
            None => None,
        })
    }
}
