//! SSH public keys per user, identified by their SHA256 fingerprint.

use super::error::unique;
use super::{Store, StoreError};
use crate::db::from_millis;
use sqlx::FromRow;
use warren_types::api::SshKey;
use warren_types::{SshKeyId, UserId};

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SshKeyRow {
    #[sqlx(try_from = "i64")]
    pub id: SshKeyId,
    #[sqlx(try_from = "i64")]
    pub user_id: UserId,
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    pub created_at: i64,
}

impl SshKeyRow {
    pub fn to_api(&self) -> SshKey {
        SshKey {
            id: self.id,
            name: self.name.clone(),
            fingerprint: self.fingerprint.clone(),
            public_key: self.public_key.clone(),
            created_at: from_millis(self.created_at),
        }
    }
}

const COLS: &str = "id, user_id, name, public_key, fingerprint, created_at";

impl Store {
    /// Inserts a key (normalised `type base64`) under its fingerprint, unique server-wide.
    pub async fn insert_ssh_key(
        &self,
        user: UserId,
        name: &str,
        public_key: &str,
        fingerprint: &str,
        now: i64,
    ) -> Result<SshKeyRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO ssh_keys (user_id, name, public_key, fingerprint, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {COLS}"
        ))
        .bind(user.get())
        .bind(name)
        .bind(public_key)
        .bind(fingerprint)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("ssh_keys.fingerprint"))?;
        Ok(SshKeyRow::from_row(&r)?)
    }

    pub async fn list_ssh_keys(&self, user: UserId) -> Result<Vec<SshKeyRow>, StoreError> {
        self.all(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM ssh_keys WHERE user_id = $1 ORDER BY id"
            ))
            .bind(user.get()),
        )
        .await
    }

    /// The key with this fingerprint, for SSH authentication.
    pub async fn ssh_key_by_fingerprint(
        &self,
        fingerprint: &str,
    ) -> Result<Option<SshKeyRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM ssh_keys WHERE fingerprint = $1"
            ))
            .bind(fingerprint),
        )
        .await
    }

    pub async fn delete_ssh_key(&self, user: UserId, id: SshKeyId) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM ssh_keys WHERE id = $1 AND user_id = $2")
            .bind(id.get())
            .bind(user.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }
}
