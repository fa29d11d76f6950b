//! Local user accounts: the insert of the first admin on an empty database, and the admin's
//! changes (disable, admin grant, password, deletion) that never leave the server without an
//! active admin.

use super::error::unique;
use super::{get_i64, get_opt_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::User;
use warren_types::{TokenId, UserId};

#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: UserId,
    pub username: String,
    pub password_hash: String,
    pub is_admin: bool,
    pub created_at: i64,
    /// When an admin disabled the account (`None` while it may be used).
    pub disabled_at: Option<i64>,
    /// When an admin asked for the account's deletion; it goes once its workspaces have.
    pub delete_requested_at: Option<i64>,
    /// Browser sessions issued before this instant (ms) are no longer valid.
    pub sessions_valid_from: i64,
    /// The user's dotfiles repository.
    pub dotfiles_url: Option<String>,
    /// The user's working hours (a stored value this release cannot read is none).
    pub working_hours: Option<Box<warren_types::schedule::WorkingHours>>,
    /// The name and email address the user's commits are made with.
    pub full_name: Option<String>,
    pub email: Option<String>,
}

impl UserRow {
    pub fn to_api(&self) -> User {
        User {
            id: self.id,
            username: self.username.clone(),
            is_admin: self.is_admin,
            created_at: from_millis(self.created_at),
            disabled_at: self.disabled_at.map(from_millis),
            deletion_requested_at: self.delete_requested_at.map(from_millis),
            dotfiles_url: self.dotfiles_url.clone(),
            working_hours: self.working_hours.as_deref().cloned(),
            full_name: self.full_name.clone(),
            email: self.email.clone(),
        }
    }

    /// May the account sign in, use its tokens and reach its workspaces?
    pub fn is_active(&self) -> bool {
        self.disabled_at.is_none() && self.delete_requested_at.is_none()
    }
}

impl sqlx::FromRow<'_, AnyRow> for UserRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(UserRow {
            id: UserId(get_i64(r, "id")?),
            username: get_str(r, "username")?,
            password_hash: get_str(r, "password_hash")?,
            is_admin: get_i64(r, "is_admin")? != 0,
            created_at: get_i64(r, "created_at")?,
            disabled_at: get_opt_i64(r, "disabled_at")?,
            delete_requested_at: get_opt_i64(r, "delete_requested_at")?,
            sessions_valid_from: get_i64(r, "sessions_valid_from")?,
            dotfiles_url: super::get_opt_str(r, "dotfiles_url")?,
            working_hours: super::get_opt_str(r, "working_hours")?
                .and_then(|j| serde_json::from_str(&j).ok()),
            full_name: super::get_opt_str(r, "full_name")?,
            email: super::get_opt_str(r, "email")?,
        })
    }
}

const COLS: &str = "id, username, password_hash, is_admin, created_at, disabled_at, \
                    delete_requested_at, sessions_valid_from, dotfiles_url, working_hours, \
                    full_name, email";

/// True when some account other than `$1` is an active admin: the guard of every change
/// that could take the last one away.
const ANOTHER_ACTIVE_ADMIN: &str = "EXISTS (SELECT 1 FROM users o WHERE o.id <> $1 \
     AND o.is_admin = 1 AND o.disabled_at IS NULL AND o.delete_requested_at IS NULL)";

/// The outcome of a guarded change to an account.
#[derive(Debug)]
pub enum Guarded {
    Done(UserRow),
    NotFound,
    /// Refused: it would leave no active admin.
    LastAdmin,
}

/// How a password change treats what was signed in before it.
#[derive(Debug, Clone, Copy)]
pub enum Sessions {
    Keep,
    /// Revoke every token and browser session except the token `keep`.
    Revoke {
        keep: Option<TokenId>,
    },
}

impl Store {
    /// Ends every browser session of the account issued before `now` (sign-out).
    pub async fn end_browser_sessions(&self, id: UserId, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET sessions_valid_from = $2 WHERE id = $1")
            .bind(id.get())
            .bind(now + 1)
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

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
        Ok(UserRow::from_row(&r)?)
    }

    /// The account linked to an OpenID provider's subject (`{issuer} {sub}`).
    pub async fn user_by_sso_subject(&self, subject: &str) -> Result<Option<UserRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM users WHERE sso_subject = $1"))
                .bind(subject),
        )
        .await
    }

    /// Inserts an account made by its first single sign-on, linked to `subject`.
    pub async fn insert_sso_user(
        &self,
        username: &str,
        password_hash: &str,
        is_admin: bool,
        subject: &str,
        now: i64,
    ) -> Result<UserRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO users (username, password_hash, is_admin, created_at, sso_subject) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {COLS}"
        ))
        .bind(username)
        .bind(password_hash)
        .bind(is_admin as i64)
        .bind(now)
        .bind(subject)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("users.username"))?;
        Ok(UserRow::from_row(&r)?)
    }

    /// Links an account no subject is linked to yet; false when one is (or it is gone).
    pub async fn link_sso_subject(&self, id: UserId, subject: &str) -> Result<bool, StoreError> {
        let r =
            sqlx::query("UPDATE users SET sso_subject = $2 WHERE id = $1 AND sso_subject IS NULL")
                .bind(id.get())
                .bind(subject)
                .execute(&self.db.pool)
                .await
                .map_err(unique("users.sso_subject"))?;
        Ok(r.rows_affected() == 1)
    }

    /// Records the state of a finished single sign-on until it expires; false when it was
    /// recorded before (the callback is replayed). Forgets expired states on the way.
    pub async fn consume_sso_state(
        &self,
        state_hash: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<bool, StoreError> {
        sqlx::query("DELETE FROM sso_states WHERE expires_at < $1")
            .bind(now)
            .execute(&self.db.pool)
            .await?;
        let r = sqlx::query(
            "INSERT INTO sso_states (state_hash, expires_at) VALUES ($1, $2) \
             ON CONFLICT (state_hash) DO NOTHING",
        )
        .bind(state_hash)
        .bind(expires_at)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
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
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM users WHERE id = $1")).bind(id.get()),
        )
        .await
    }

    pub async fn user_by_name(&self, username: &str) -> Result<Option<UserRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM users WHERE username = $1")).bind(username),
        )
        .await
    }

    pub async fn list_users(&self) -> Result<Vec<UserRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM users ORDER BY id"
        )))
        .await
    }

    /// Sets the admin flag and whether the account is disabled (`disabled_at` as given),
    /// unless that would leave no active admin.
    pub async fn update_user_access(
        &self,
        id: UserId,
        is_admin: bool,
        disabled_at: Option<i64>,
    ) -> Result<Guarded, StoreError> {
        let stays_active_admin = is_admin && disabled_at.is_none();
        let r = sqlx::query(&format!(
            "UPDATE users SET is_admin = $2, disabled_at = $3 WHERE id = $1 \
             AND ($4 = 1 OR {ANOTHER_ACTIVE_ADMIN}) RETURNING {COLS}"
        ))
        .bind(id.get())
        .bind(is_admin as i64)
        .bind(disabled_at)
        .bind(stays_active_admin as i64)
        .fetch_optional(&self.db.pool)
        .await?;
        self.guarded(id, r).await
    }

    /// Marks the account for deletion and disables it, unless that would leave no active
    /// admin.
    pub async fn request_user_deletion(&self, id: UserId, now: i64) -> Result<Guarded, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE users SET delete_requested_at = COALESCE(delete_requested_at, $2), \
             disabled_at = COALESCE(disabled_at, $2) WHERE id = $1 \
             AND {ANOTHER_ACTIVE_ADMIN} RETURNING {COLS}"
        ))
        .bind(id.get())
        .bind(now)
        .fetch_optional(&self.db.pool)
        .await?;
        self.guarded(id, r).await
    }

    async fn guarded(&self, id: UserId, r: Option<AnyRow>) -> Result<Guarded, StoreError> {
        Ok(match r {
            Some(r) => Guarded::Done(UserRow::from_row(&r)?),
            None if self.user_by_id(id).await?.is_some() => Guarded::LastAdmin,
            None => Guarded::NotFound,
        })
    }

    /// Deletes an account marked for deletion once none of its workspaces is left but
    /// terminated ones (which go with it); whether it was deleted.
    pub async fn delete_user_if_done(&self, id: UserId) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        let live = sqlx::query(&format!(
            "SELECT 1 FROM workspaces WHERE owner_id = $1 AND {} LIMIT 1",
            super::workspaces::NOT_GONE
        ))
        .bind(id.get())
        .fetch_optional(&mut *tx)
        .await?;
        if live.is_some() {
            return Ok(false);
        }
        sqlx::query("DELETE FROM workspaces WHERE owner_id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        // Its mounts go with it (before its personal space, which holds some of them), and
        // its connectors' agent rows with them: their tokens stop working.
        sqlx::query(
            "DELETE FROM agents WHERE id IN (SELECT agent_id FROM mounts WHERE owner_id = $1 \
             AND kind = 'proxy' AND url IS NULL AND agent_id IS NOT NULL)",
        )
        .bind(id.get())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM mounts WHERE owner_id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        // The personal space goes with its user (a later account of the same name starts
        // afresh); only its user's workspaces and mounts can have been in it.
        sqlx::query(
            "DELETE FROM spaces WHERE path = (SELECT 'users/' || username FROM users              WHERE id = $1 AND delete_requested_at IS NOT NULL)              AND NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.space_id = spaces.id) AND NOT EXISTS (SELECT 1 FROM mounts m WHERE m.space_id = spaces.id)",
        )
        .bind(id.get())
        .execute(&mut *tx)
        .await?;
        let r = sqlx::query("DELETE FROM users WHERE id = $1 AND delete_requested_at IS NOT NULL")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    /// Accounts waiting for their workspaces to go before they are deleted.
    pub async fn users_pending_deletion(&self) -> Result<Vec<UserId>, StoreError> {
        let rows = sqlx::query("SELECT id FROM users WHERE delete_requested_at IS NOT NULL")
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| get_i64(r, "id").map(UserId))
            .collect::<Result<_, _>>()?)
    }

    /// Replaces the password hash; with [`Sessions::Revoke`] also ends every token, OAuth
    /// token and browser session issued before `now` (but the token `keep`).
    pub async fn set_password(
        &self,
        id: UserId,
        password_hash: &str,
        sessions: Sessions,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        let r = sqlx::query("UPDATE users SET password_hash = $2 WHERE id = $1")
            .bind(id.get())
            .bind(password_hash)
            .execute(&mut *tx)
            .await?;
        if r.rows_affected() != 1 {
            return Ok(false);
        }
        if let Sessions::Revoke { keep } = sessions {
            sqlx::query("UPDATE users SET sessions_valid_from = $2 WHERE id = $1")
                .bind(id.get())
                .bind(now)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL \
                 AND id <> $3",
            )
            .bind(id.get())
            .bind(now)
            .bind(keep.map_or(-1, |t| t.get()))
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE oauth_tokens SET revoked_at = $2 WHERE user_id = $1 AND revoked_at IS NULL",
            )
            .bind(id.get())
            .bind(now)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Sets or (with `None`) clears the user's working hours.
    pub async fn set_working_hours(
        &self,
        id: UserId,
        hours: Option<&warren_types::schedule::WorkingHours>,
    ) -> Result<bool, StoreError> {
        let json = hours.map(|h| serde_json::to_string(h).unwrap_or_default());
        let r = sqlx::query("UPDATE users SET working_hours = $2 WHERE id = $1")
            .bind(id.get())
            .bind(json)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Sets or (with `None`) clears the user's dotfiles repository.
    pub async fn set_dotfiles(&self, id: UserId, url: Option<&str>) -> Result<bool, StoreError> {
        let r = sqlx::query("UPDATE users SET dotfiles_url = $2 WHERE id = $1")
            .bind(id.get())
            .bind(url)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }
}
