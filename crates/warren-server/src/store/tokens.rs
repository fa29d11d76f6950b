//! Personal access tokens, stored by the SHA-256 digest of their secret.

use super::{get_i64, get_opt_i64, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::{Token, TokenScope};
use warren_types::{TokenId, UserId};

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: TokenId,
    pub user_id: UserId,
    pub name: String,
    pub scopes: Vec<TokenScope>,
    pub created_at: i64,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    pub last_used_at: Option<i64>,
}

impl TokenRow {
    pub fn to_api(&self) -> Token {
        Token {
            id: self.id,
            name: self.name.clone(),
            scopes: self.scopes.clone(),
            created_at: from_millis(self.created_at),
            expires_at: from_millis(self.expires_at),
            revoked: self.revoked_at.is_some(),
            last_used_at: self.last_used_at.map(from_millis),
        }
    }
    pub fn has_scope(&self, s: TokenScope) -> bool {
        self.scopes.contains(&s)
    }
}

pub fn scope_name(s: TokenScope) -> &'static str {
    match s {
        TokenScope::Api => "api",
        TokenScope::ReadApi => "read_api",
        TokenScope::Workspace => "workspace",
    }
}

fn parse_scopes(s: &str) -> Result<Vec<TokenScope>, sqlx::Error> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| match p {
            "api" => Ok(TokenScope::Api),
            "read_api" => Ok(TokenScope::ReadApi),
            "workspace" => Ok(TokenScope::Workspace),
            other => Err(super::corrupt("token scope", other)),
        })
        .collect()
}

const COLS: &str = "id, user_id, name, scopes, created_at, expires_at, revoked_at, last_used_at";

impl sqlx::FromRow<'_, AnyRow> for TokenRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(TokenRow {
            id: TokenId(get_i64(r, "id")?),
            user_id: UserId(get_i64(r, "user_id")?),
            name: get_str(r, "name")?,
            scopes: parse_scopes(&get_str(r, "scopes")?)?,
            created_at: get_i64(r, "created_at")?,
            expires_at: get_i64(r, "expires_at")?,
            revoked_at: get_opt_i64(r, "revoked_at")?,
            last_used_at: get_opt_i64(r, "last_used_at")?,
        })
    }
}

impl Store {
    /// Inserts a token by its secret's digest; `scopes` are stored sorted and deduplicated.
    pub async fn insert_token(
        &self,
        user: UserId,
        name: &str,
        scopes: &[TokenScope],
        secret_digest: &str,
        expires_at: i64,
        now: i64,
    ) -> Result<TokenRow, StoreError> {
        let mut names: Vec<&str> = scopes.iter().map(|s| scope_name(*s)).collect();
        names.sort_unstable();
        names.dedup();
        let r = sqlx::query(&format!(
            "INSERT INTO tokens (user_id, name, secret_hash, scopes, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {COLS}"
        ))
        .bind(user.get())
        .bind(name)
        .bind(secret_digest)
        .bind(names.join(","))
        .bind(now)
        .bind(expires_at)
        .fetch_one(&self.db.pool)
        .await?;
        Ok(TokenRow::from_row(&r)?)
    }

    /// The token stored under `digest`, with the digest as stored (for a constant-time check).
    pub async fn token_by_digest(
        &self,
        digest: &str,
    ) -> Result<Option<(TokenRow, String)>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {COLS}, secret_hash FROM tokens WHERE secret_hash = $1"
        ))
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        Ok(Some((TokenRow::from_row(&r)?, get_str(&r, "secret_hash")?)))
    }

    /// Records a use of the token.
    pub async fn touch_token(&self, id: TokenId, now: i64) -> Result<(), StoreError> {
        sqlx::query("UPDATE tokens SET last_used_at = $1 WHERE id = $2")
            .bind(now)
            .bind(id.get())
            .execute(&self.db.pool)
            .await?;
        Ok(())
    }

    pub async fn list_tokens(&self, user: UserId) -> Result<Vec<TokenRow>, StoreError> {
        self.all(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM tokens WHERE user_id = $1 ORDER BY id"
            ))
            .bind(user.get()),
        )
        .await
    }

    /// Revokes one of the user's tokens; false when the user has no such token.
    pub async fn revoke_token(
        &self,
        user: UserId,
        id: TokenId,
        now: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "UPDATE tokens SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2 AND user_id = $3",
        )
        .bind(now)
        .bind(id.get())
        .bind(user.get())
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() > 0)
    }
}
