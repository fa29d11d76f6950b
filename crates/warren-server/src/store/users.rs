//! Local user accounts and the one-time bootstrap of the first admin.

use super::{get_i64, get_str, is_unique_violation, Store};
use crate::crypto;
use crate::db::from_millis;
use crate::error::HttpError;
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

/// Usernames: 1–64 of `a-z 0-9 . _ -`, starting with a letter or digit.
pub fn validate_username(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c))
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid username (1-64 characters of a-z, 0-9, '.', '_', '-', starting with a letter or digit)"
        ))
    }
}

pub fn validate_password(password: &str) -> Result<(), String> {
    if password.chars().count() < 8 {
        return Err("must be at least 8 characters".into());
    }
    if password.len() > 1024 {
        return Err("must be at most 1024 bytes".into());
    }
    Ok(())
}

/// Credentials of the admin created on an empty database; shown once.
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapAdmin {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for BootstrapAdmin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapAdmin")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

impl Store {
    pub async fn create_user(
        &self,
        username: &str,
        password: &str,
        is_admin: bool,
        now: i64,
    ) -> Result<UserRow, HttpError> {
        validate_username(username).map_err(|e| HttpError::invalid_field("username", e))?;
        validate_password(password).map_err(|e| HttpError::invalid_field("password", e))?;
        let hash = crypto::hash_password(password)
            .map_err(|e| HttpError::internal("hashing the password", &e))?;
        let r = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, created_at) VALUES ($1, $2, $3, $4) RETURNING {COLS}"
        ))
        .bind(username)
        .bind(hash)
        .bind(is_admin as i64)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HttpError::conflict("already_exists", format!("username {username:?} is already taken"))
            } else {
                e.into()
            }
        })?;
        Ok(row(&r)?)
    }

    /// Creates the first admin when (and only when) no user exists yet. Returns its
    /// generated password exactly once, to the one server that created it.
    pub async fn bootstrap_admin(
        &self,
        username: &str,
        now: i64,
    ) -> Result<Option<BootstrapAdmin>, HttpError> {
        let password = crypto::random_secret(18);
        let hash = crypto::hash_password(&password)
            .map_err(|e| HttpError::internal("hashing the password", &e))?;
        let inserted = sqlx::query(
            "INSERT INTO users (username, password_hash, is_admin, created_at) \
             SELECT $1, $2, 1, $3 WHERE NOT EXISTS (SELECT 1 FROM users) \
             ON CONFLICT (username) DO NOTHING RETURNING id",
        )
        .bind(username)
        .bind(hash)
        .bind(now)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(inserted.map(|_| BootstrapAdmin {
            username: username.to_owned(),
            password,
        }))
    }

    pub async fn user_by_id(&self, id: UserId) -> Result<Option<UserRow>, sqlx::Error> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM users WHERE id = $1"))
            .bind(id.get())
            .fetch_optional(&self.db.pool)
            .await?;
        r.as_ref().map(row).transpose()
    }

    pub async fn user_by_name(&self, username: &str) -> Result<Option<UserRow>, sqlx::Error> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM users WHERE username = $1"))
            .bind(username)
            .fetch_optional(&self.db.pool)
            .await?;
        r.as_ref().map(row).transpose()
    }

    pub async fn list_users(&self) -> Result<Vec<UserRow>, sqlx::Error> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM users ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    /// Checks a username and password; the same work is done for unknown users.
    pub async fn check_password(
        &self,
        username: &str,
        password: &str,
    ) -> Result<Option<UserRow>, sqlx::Error> {
        let user = self.user_by_name(username).await?;
        let hash = user.as_ref().map(|u| u.password_hash.clone());
        let password = password.to_owned();
        let ok = tokio::task::spawn_blocking(move || {
            crypto::verify_password(
                &password,
                hash.as_deref().unwrap_or(crypto::dummy_password_hash()),
            )
        })
        .await
        .unwrap_or(false);
        Ok(user.filter(|_| ok))
    }
}
