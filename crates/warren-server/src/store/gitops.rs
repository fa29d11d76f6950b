//! GitOps: registered repositories with their sealed credential and webhook secret, each
//! agent's sources in the operator's order, and the admin policy.

use super::error::unique;
use super::{corrupt, get_i64, get_opt_str, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::git::GitCredential;
use warren_types::gitops::{Policy, Repository, Source, SourceStatus};
use warren_types::{AgentId, RepositoryId, UserId};

#[derive(Debug, Clone)]
pub struct RepositoryRow {
    pub id: RepositoryId,
    pub name: String,
    pub url: String,
    /// Sealed JSON of the credential, opened only where it is used.
    pub credential_sealed: Option<String>,
    /// Sealed webhook secret.
    pub webhook_sealed: Option<String>,
    pub created_at: i64,
}

impl RepositoryRow {
    /// The API's view; `credential_kind` is the stored credential's kind, if any.
    pub fn to_api(&self, credential_kind: Option<&str>, used_by: Vec<String>) -> Repository {
        Repository {
            id: self.id,
            name: self.name.clone(),
            url: self.url.clone(),
            credential: credential_kind.map(str::to_owned),
            webhook: self.webhook_sealed.is_some(),
            used_by,
            created_at: from_millis(self.created_at),
        }
    }
}

const COLS: &str = "id, name, url, credential, webhook_secret, created_at";

impl sqlx::FromRow<'_, AnyRow> for RepositoryRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(RepositoryRow {
            id: RepositoryId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            url: get_str(r, "url")?,
            credential_sealed: get_opt_str(r, "credential")?,
            webhook_sealed: get_opt_str(r, "webhook_secret")?,
            created_at: get_i64(r, "created_at")?,
        })
    }
}

/// A repository to insert, validated by the caller.
#[derive(Debug, Clone)]
pub struct NewRepository<'a> {
    pub name: &'a str,
    pub url: &'a str,
    pub credential: Option<&'a GitCredential>,
    pub webhook_secret: Option<&'a str>,
    pub created_by: UserId,
}

/// Whether an error is a foreign-key violation (both databases).
fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            d.is_foreign_key_violation()
                || d.code().as_deref() == Some("23503")
                || d.message().contains("FOREIGN KEY constraint failed")
        }
        _ => false,
    }
}

impl Store {
    pub async fn insert_repository(
        &self,
        r: &NewRepository<'_>,
        now: i64,
    ) -> Result<RepositoryRow, StoreError> {
        let credential = r.credential.map(|c| super::workspaces::seal_json(self, c));
        let webhook = r.webhook_secret.map(|s| self.sbox.seal(s.as_bytes()));
        let got = sqlx::query(&format!(
            "INSERT INTO gitops_repositories (name, url, credential, webhook_secret, created_by, \
             created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $6) RETURNING {COLS}"
        ))
        .bind(r.name)
        .bind(r.url)
        .bind(credential)
        .bind(webhook)
        .bind(r.created_by.get())
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("gitops_repositories.name"))?;
        Ok(RepositoryRow::from_row(&got)?)
    }

    pub async fn list_repositories(&self) -> Result<Vec<RepositoryRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM gitops_repositories ORDER BY name"
        )))
        .await
    }

    pub async fn repository_by_name(
        &self,
        name: &str,
    ) -> Result<Option<RepositoryRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM gitops_repositories WHERE name = $1"
            ))
            .bind(name),
        )
        .await
    }

    /// Every source by repository: `(repository, "agent/source")`, ordered.
    pub async fn repository_users(&self) -> Result<Vec<(RepositoryId, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT s.repository_id, a.name AS agent, s.name AS source FROM gitops_sources s \
             JOIN agents a ON a.id = s.agent_id ORDER BY a.name, s.position",
        )
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    RepositoryId(get_i64(r, "repository_id")?),
                    format!("{}/{}", get_str(r, "agent")?, get_str(r, "source")?),
                ))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// Removes a repository; `Conflict` when a source still uses it (the foreign key
    /// refuses it even when a source was added since the caller looked).
    pub async fn delete_repository(&self, id: RepositoryId) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM gitops_repositories WHERE id = $1")
            .bind(id.get())
            .execute(&self.db.pool)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::Conflict("gitops_sources.repository_id")
                } else {
                    StoreError::Database(e)
                }
            })?;
        Ok(done.rows_affected() > 0)
    }

    /// Replaces (or with `None` removes) the repository's credential.
    pub async fn set_repository_credential(
        &self,
        id: RepositoryId,
        credential: Option<&GitCredential>,
        now: i64,
    ) -> Result<Option<RepositoryRow>, StoreError> {
        let sealed = credential.map(|c| super::workspaces::seal_json(self, c));
        self.set_sealed(id, "credential", sealed, now).await
    }

    /// Replaces (or with `None` removes) the repository's webhook secret.
    pub async fn set_webhook_secret(
        &self,
        id: RepositoryId,
        secret: Option<&str>,
        now: i64,
    ) -> Result<Option<RepositoryRow>, StoreError> {
        let sealed = secret.map(|s| self.sbox.seal(s.as_bytes()));
        self.set_sealed(id, "webhook_secret", sealed, now).await
    }

    /// Writes one sealed column (`column` is one of this file's, never input).
    async fn set_sealed(
        &self,
        id: RepositoryId,
        column: &'static str,
        sealed: Option<String>,
        now: i64,
    ) -> Result<Option<RepositoryRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "UPDATE gitops_repositories SET {column} = $1, updated_at = $2 WHERE id = $3 \
             RETURNING {COLS}"
            ))
            .bind(sealed)
            .bind(now)
            .bind(id.get()),
        )
        .await
    }

    /// The repository's credential, opened.
    pub fn repository_credential(
        &self,
        r: &RepositoryRow,
    ) -> Result<Option<GitCredential>, StoreError> {
        r.credential_sealed
            .as_deref()
            .map(|s| super::workspaces::open_json(self, s, "repository credential"))
            .transpose()
    }

    /// The repository's webhook secret, opened.
    pub fn webhook_secret(&self, r: &RepositoryRow) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(r.webhook_sealed
            .as_deref()
            .map(|s| self.sbox.open(s))
            .transpose()?)
    }

    /// An agent's sources, in the operator's order.
    pub async fn agent_sources(&self, agent: AgentId) -> Result<Vec<Source>, StoreError> {
        let rows =
            sqlx::query("SELECT spec FROM gitops_sources WHERE agent_id = $1 ORDER BY position")
                .bind(agent.get())
                .fetch_all(&self.db.pool)
                .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&get_str(r, "spec")?).map_err(|e| corrupt("gitops source", e))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// The names of an agent's sources, in order (sent with every reconcile answer).
    pub async fn agent_source_names(&self, agent: AgentId) -> Result<Vec<String>, StoreError> {
        let rows =
            sqlx::query("SELECT name FROM gitops_sources WHERE agent_id = $1 ORDER BY position")
                .bind(agent.get())
                .fetch_all(&self.db.pool)
                .await?;
        rows.iter()
            .map(|r| get_str(r, "name"))
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// One source of an agent with its repository, for a relay's poll.
    pub async fn agent_source(
        &self,
        agent: AgentId,
        name: &str,
    ) -> Result<Option<(Source, RepositoryRow)>, StoreError> {
        let r = sqlx::query(
            "SELECT s.spec, r.id, r.name, r.url, r.credential, r.webhook_secret, r.created_at \
             FROM gitops_sources s JOIN gitops_repositories r ON r.id = s.repository_id \
             WHERE s.agent_id = $1 AND s.name = $2",
        )
        .bind(agent.get())
        .bind(name)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        let source: Source =
            serde_json::from_str(&get_str(&r, "spec")?).map_err(|e| corrupt("gitops source", e))?;
        Ok(Some((source, RepositoryRow::from_row(&r)?)))
    }

    /// Records what the agent last reported for a source.
    pub async fn set_source_status(
        &self,
        agent: AgentId,
        status: &SourceStatus,
        now: i64,
    ) -> Result<(), StoreError> {
        let json = serde_json::to_string(status).unwrap_or_default();
        sqlx::query(
            "INSERT INTO gitops_status (agent_id, source, status, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent_id, source) DO UPDATE SET status = excluded.status, \
             updated_at = excluded.updated_at",
        )
        .bind(agent.get())
        .bind(&status.source)
        .bind(json)
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// The last status of each of an agent's current sources (none for a source that has
    /// not reported yet).
    pub async fn source_statuses(&self, agent: AgentId) -> Result<Vec<SourceStatus>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.status FROM gitops_status t JOIN gitops_sources s \
             ON s.agent_id = t.agent_id AND s.name = t.source WHERE t.agent_id = $1 \
             ORDER BY s.position",
        )
        .bind(agent.get())
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                serde_json::from_str(&get_str(r, "status")?)
                    .map_err(|e| corrupt("gitops status", e))
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(StoreError::from)
    }

    /// Replaces an agent's sources, each with its repository's id, in one transaction.
    pub async fn set_agent_sources(
        &self,
        agent: AgentId,
        sources: &[(Source, RepositoryId)],
        now: i64,
    ) -> Result<(), StoreError> {
        let mut tx = self.db.begin().await?;
        sqlx::query("DELETE FROM gitops_sources WHERE agent_id = $1")
            .bind(agent.get())
            .execute(&mut *tx)
            .await?;
        for (position, (s, repository)) in sources.iter().enumerate() {
            // Serialising plain data cannot fail.
            let spec = serde_json::to_string(s).unwrap_or_default();
            sqlx::query(
                "INSERT INTO gitops_sources (agent_id, name, repository_id, position, spec, \
                 updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(agent.get())
            .bind(&s.name)
            .bind(repository.get())
            .bind(position as i64)
            .bind(spec)
            .bind(now)
            .execute(&mut *tx)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StoreError::NotFound("gitops repository")
                } else {
                    StoreError::Database(e)
                }
            })?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The admin policy (the default until one is set).
    pub async fn gitops_policy(&self) -> Result<Policy, StoreError> {
        let r = sqlx::query("SELECT spec FROM gitops_policy WHERE id = 1")
            .fetch_optional(&self.db.pool)
            .await?;
        match r {
            Some(r) => Ok(serde_json::from_str(&get_str(&r, "spec")?)
                .map_err(|e| corrupt("gitops policy", e))?),
            None => Ok(Policy::default()),
        }
    }

    pub async fn set_gitops_policy(&self, policy: &Policy, now: i64) -> Result<(), StoreError> {
        let spec = serde_json::to_string(policy).unwrap_or_default();
        sqlx::query(
            "INSERT INTO gitops_policy (id, spec, updated_at) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at",
        )
        .bind(spec)
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }
}
