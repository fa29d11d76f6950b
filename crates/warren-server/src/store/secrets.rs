//! Users' own secrets (their values sealed with the server's key) and the name and email
//! address their commits are made with.

use super::{get_i64, get_opt_str, get_str, Store, StoreError};
use sqlx::any::AnyRow;
use warren_types::api::VariableKind;
use warren_types::UserId;

/// A user's secret as stored; the value stays sealed until [`Store::open_secret`].
#[derive(Clone)]
pub struct UserSecretRow {
    pub user_id: UserId,
    pub name: String,
    pub kind: VariableKind,
    sealed: String,
    pub projects: Option<String>,
    pub shared_workspaces: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl std::fmt::Debug for UserSecretRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSecretRow")
            .field("user_id", &self.user_id)
            .field("name", &self.name)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// What a secret is written with.
#[derive(Clone, Copy)]
pub struct NewSecret<'a> {
    pub name: &'a str,
    pub kind: VariableKind,
    pub value: &'a str,
    pub projects: Option<&'a str>,
    pub shared_workspaces: bool,
}

fn secret(r: &AnyRow) -> Result<UserSecretRow, sqlx::Error> {
    let kind = match get_str(r, "kind")?.as_str() {
        "file" => VariableKind::File,
        "env" => VariableKind::Env,
        other => return Err(super::corrupt("user secret kind", other)),
    };
    Ok(UserSecretRow {
        user_id: UserId(get_i64(r, "user_id")?),
        name: get_str(r, "name")?,
        kind,
        sealed: get_str(r, "value")?,
        projects: get_opt_str(r, "projects")?,
        shared_workspaces: get_i64(r, "shared_workspaces")? != 0,
        created_at: get_i64(r, "created_at")?,
        updated_at: get_i64(r, "updated_at")?,
    })
}

fn kind_str(kind: VariableKind) -> &'static str {
    match kind {
        VariableKind::Env => "env",
        VariableKind::File => "file",
    }
}

impl Store {
    /// User `user`'s secrets, by name.
    pub async fn user_secrets(&self, user: UserId) -> Result<Vec<UserSecretRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT user_id, name, kind, value, projects, shared_workspaces, created_at, updated_at \
             FROM user_secrets WHERE user_id = $1 ORDER BY name",
        )
        .bind(user.get())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(secret).collect::<Result<_, _>>()?)
    }

    /// The plain value of `s`.
    pub fn open_secret(&self, s: &UserSecretRow) -> Result<String, StoreError> {
        Ok(self.sbox.open_string(&s.sealed)?)
    }

    /// Writes secret `s` of `user` (sealing its value), replacing one of the same name, unless
    /// that would make the user's `max + 1`th; whether it was new, or `None` at the limit.
    pub async fn put_user_secret(
        &self,
        user: UserId,
        s: NewSecret<'_>,
        now: i64,
        max: usize,
    ) -> Result<Option<bool>, StoreError> {
        let mut tx = self.db.begin().await?;
        let existing = sqlx::query("SELECT name FROM user_secrets WHERE user_id = $1")
            .bind(user.get())
            .fetch_all(&mut *tx)
            .await?;
        let names: Vec<String> = existing
            .iter()
            .map(|r| get_str(r, "name"))
            .collect::<Result<_, _>>()?;
        let new = !names.iter().any(|n| n == s.name);
        if new && names.len() >= max {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO user_secrets (user_id, name, kind, value, projects, shared_workspaces, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7) ON CONFLICT (user_id, name) DO UPDATE SET \
             kind = excluded.kind, value = excluded.value, projects = excluded.projects, \
             shared_workspaces = excluded.shared_workspaces, updated_at = excluded.updated_at",
        )
        .bind(user.get())
        .bind(s.name)
        .bind(kind_str(s.kind))
        .bind(self.sbox.seal(s.value.as_bytes()))
        .bind(s.projects)
        .bind(i64::from(s.shared_workspaces))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(new))
    }

    /// Deletes `user`'s secret `name`; whether there was one.
    pub async fn delete_user_secret(&self, user: UserId, name: &str) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM user_secrets WHERE user_id = $1 AND name = $2")
            .bind(user.get())
            .bind(name)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    /// Sets the name and email address `user`'s commits are made with (`None` clears).
    pub async fn set_profile(
        &self,
        user: UserId,
        full_name: Option<&str>,
        email: Option<&str>,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query("UPDATE users SET full_name = $2, email = $3 WHERE id = $1")
            .bind(user.get())
            .bind(full_name)
            .bind(email)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }
}

/// One of a user's own Git credentials as stored; the credential stays sealed until
/// [`Store::open_git_credential`].
#[derive(Clone)]
pub struct UserGitCredentialRow {
    pub id: i64,
    pub user_id: UserId,
    pub host: String,
    pub kind: String,
    sealed: String,
    pub shared_workspaces: bool,
    pub created_at: i64,
    pub updated_at: i64,
}

impl std::fmt::Debug for UserGitCredentialRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserGitCredentialRow")
            .field("id", &self.id)
            .field("host", &self.host)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

fn git_credential(r: &AnyRow) -> Result<UserGitCredentialRow, sqlx::Error> {
    Ok(UserGitCredentialRow {
        id: get_i64(r, "id")?,
        user_id: UserId(get_i64(r, "user_id")?),
        host: get_str(r, "host")?,
        kind: get_str(r, "kind")?,
        sealed: get_str(r, "credential")?,
        shared_workspaces: get_i64(r, "shared_workspaces")? != 0,
        created_at: get_i64(r, "created_at")?,
        updated_at: get_i64(r, "updated_at")?,
    })
}

impl Store {
    /// User `user`'s Git credentials, by host.
    pub async fn user_git_credentials(
        &self,
        user: UserId,
    ) -> Result<Vec<UserGitCredentialRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, user_id, host, kind, credential, shared_workspaces, created_at, updated_at \
             FROM user_git_credentials WHERE user_id = $1 ORDER BY host",
        )
        .bind(user.get())
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(git_credential).collect::<Result<_, _>>()?)
    }

    /// The credential of `c`.
    pub fn open_git_credential(
        &self,
        c: &UserGitCredentialRow,
    ) -> Result<warren_types::git::GitCredential, StoreError> {
        super::workspaces::open_json(self, &c.sealed, "user git credential")
    }

    /// Writes `user`'s credential for `host` (sealed), replacing one for the same host;
    /// whether it is new, or `None` when the user already has `max`.
    pub async fn put_user_git_credential(
        &self,
        user: UserId,
        host: &str,
        credential: &warren_types::git::GitCredential,
        shared_workspaces: bool,
        now: i64,
        max: usize,
    ) -> Result<Option<bool>, StoreError> {
        let mut tx = self.db.begin().await?;
        let existing = sqlx::query("SELECT host FROM user_git_credentials WHERE user_id = $1")
            .bind(user.get())
            .fetch_all(&mut *tx)
            .await?;
        let hosts: Vec<String> = existing
            .iter()
            .map(|r| get_str(r, "host"))
            .collect::<Result<_, _>>()?;
        let new = !hosts.iter().any(|h| h == host);
        if new && hosts.len() >= max {
            return Ok(None);
        }
        sqlx::query(
            "INSERT INTO user_git_credentials (user_id, host, kind, credential, shared_workspaces, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (user_id, host) DO UPDATE SET \
             kind = excluded.kind, credential = excluded.credential, \
             shared_workspaces = excluded.shared_workspaces, updated_at = excluded.updated_at",
        )
        .bind(user.get())
        .bind(host)
        .bind(credential.kind())
        .bind(super::workspaces::seal_json(self, credential))
        .bind(i64::from(shared_workspaces))
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(new))
    }

    /// Deletes `user`'s credential `id`; whether there was one.
    pub async fn delete_user_git_credential(
        &self,
        user: UserId,
        id: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM user_git_credentials WHERE user_id = $1 AND id = $2")
            .bind(user.get())
            .bind(id)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }
}
