//! Local user accounts, and the insert of the first admin on an empty database.

use super::error::unique;
use super::{get_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use warren_types::api::User;
use warren_types::UserId;

#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: UserId,
    pub username: String,
    pub password_hash: String,
    pub is_admin: bool,
    pub created_at: i64,
}

impl UserRow {
    pub fn to_api(&self) -> User {
        User {
            id: self.id,
            username: self.username.clone(),
            is_admin: self.is_admin,
            created_at: from_millis(self.created_at),
        }
    }
}

fn row(r: &AnyRow) -> Result<UserRow, sqlx::Error> {
    Ok(UserRow {
        id: UserId(get_i64(r, "id")?),
        username: get_str(r, "username")?,
        password_hash: get_str(r, "password_hash")?,
        is_admin: get_i64(r, "is_admin")? != 0,
        created_at: get_i64(r, "created_at")?,
    })
}

const COLS: &str = "id, username, password_hash, is_admin, created_at";

impl Store {
    /// Inserts a user with an already hashed password.
    pub async fn insert_user(
        &self,
        username: &str,
        password_hash: &str,
        is_admin: bool,
        now: i64,
    ) -> Result<UserRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES ($1, $2, $3, $4) RETURNING {COLS}"
        ))
        .bind(username)
        .bind(password_hash)
        .bind(is_admin as i64)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("users.username"))?;
        Ok(row(&r)?)
    }

    /// Inserts an admin when (and only when) no user exists yet, atomically; whether it did.
    pub async fn insert_first_admin(
        &self,
        username: &str,
        password_hash: &str,
        now: i64,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO users (username, password_hash, is_admin, created_at) \
             SELECT $1, $2, 1, $3 WHERE NOT EXISTS (SELECT 1 FROM users) \
             ON CONFLICT (username) DO NOTHING RETURNING id",
        )
        .bind(username)
        .bind(password_hash)
        .bind(now)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(inserted.is_some())
    }

    pub async fn user_by_id(&self, id: UserId) -> Result<Option<UserRow>, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM users WHERE id = $1"))
            .bind(id.get())
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(r.as_ref().map(row).transpose()?)
    }

    pub async fn user_by_name(&self, username: &str) -> Result<Option<UserRow>, StoreError> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM users WHERE username = $1"))
            .bind(username)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(r.as_ref().map(row).transpose()?)
    }

    pub async fn list_users(&self) -> Result<Vec<UserRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM users ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
    }
}
