//! OAuth 2.0 clients, authorization codes, access tokens and the key that signs login
//! forms and session cookies. Secrets, codes and tokens are stored as SHA-256 digests.

use super::error::unique;
use super::{get_i64, get_opt_i64, get_opt_str, get_str, Store, StoreError};
use sqlx::any::AnyRow;
use warren_types::UserId;

/// A registered client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OAuthClientRow {
    pub client_id: String,
    /// SHA-256 of the secret; `None` for a public client (PKCE only).
    pub secret_hash: Option<String>,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    pub created_at: i64,
}

impl OAuthClientRow {
    pub fn confidential(&self) -> bool {
        self.secret_hash.is_some()
    }

    /// Constant-time check of a presented secret against the stored digest.
    pub fn check_secret(&self, secret: &str) -> bool {
        match &self.secret_hash {
            Some(h) => crate::crypto::ct_eq(h, &crate::crypto::token_digest(secret)),
            None => false,
        }
    }
}

/// A client to register or replace, with its secret already digested.
#[derive(Debug, Clone)]
pub struct OAuthClientRecord {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    /// SHA-256 of a confidential client's secret; `None` for a public client.
    pub secret_hash: Option<String>,
}

/// A code as stored, looked up by its digest.
#[derive(Debug, Clone)]
pub struct OAuthCodeRow {
    pub id: i64,
    pub client_id: String,
    pub user_id: UserId,
    pub redirect_uri: String,
    pub code_challenge: String,
    pub scope: String,
    pub expires_at: i64,
    pub used_at: Option<i64>,
}

/// An access token as stored.
#[derive(Debug, Clone)]
pub struct OAuthTokenRow {
    pub client_id: String,
    pub user_id: UserId,
    pub scope: String,
    pub expires_at: i64,
    pub revoked_at: Option<i64>,
    /// The digest as stored, for a constant-time comparison.
    pub token_hash: String,
}

const CLIENT_COLS: &str = "client_id, secret_hash, name, redirect_uris, first_party, created_at";
const CODE_COLS: &str =
    "id, client_id, user_id, redirect_uri, code_challenge, scope, expires_at, used_at";

fn client_row(r: &AnyRow) -> Result<OAuthClientRow, sqlx::Error> {
    let uris = get_str(r, "redirect_uris")?;
    Ok(OAuthClientRow {
        client_id: get_str(r, "client_id")?,
        secret_hash: get_opt_str(r, "secret_hash")?,
        name: get_str(r, "name")?,
        redirect_uris: serde_json::from_str(&uris)
            .map_err(|e| super::corrupt("oauth redirect uris", e))?,
        first_party: get_i64(r, "first_party")? != 0,
        created_at: get_i64(r, "created_at")?,
    })
}

fn code_row(r: &AnyRow) -> Result<OAuthCodeRow, sqlx::Error> {
    Ok(OAuthCodeRow {
        id: get_i64(r, "id")?,
        client_id: get_str(r, "client_id")?,
        user_id: UserId(get_i64(r, "user_id")?),
        redirect_uri: get_str(r, "redirect_uri")?,
        code_challenge: get_str(r, "code_challenge")?,
        scope: get_str(r, "scope")?,
        expires_at: get_i64(r, "expires_at")?,
        used_at: get_opt_i64(r, "used_at")?,
    })
}

impl Store {
    /// Inserts a client; with `replace`, a client with the same id is replaced (name,
    /// redirect URIs, flag and secret) instead of refused.
    pub async fn write_oauth_client(
        &self,
        c: &OAuthClientRecord,
        now: i64,
        replace: bool,
    ) -> Result<OAuthClientRow, StoreError> {
        let uris = serde_json::to_string(&c.redirect_uris).unwrap_or_default();
        let conflict = if replace {
            "ON CONFLICT (client_id) DO UPDATE SET secret_hash = excluded.secret_hash, \
             name = excluded.name, redirect_uris = excluded.redirect_uris, \
             first_party = excluded.first_party, updated_at = excluded.updated_at"
        } else {
            ""
        };
        let r = sqlx::query(&format!(
            "INSERT INTO oauth_clients (client_id, secret_hash, name, redirect_uris, first_party, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6) {conflict} RETURNING {CLIENT_COLS}"
        ))
        .bind(&c.client_id)
        .bind(c.secret_hash.clone())
        .bind(&c.name)
        .bind(uris)
        .bind(c.first_party as i64)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("oauth_clients.client_id"))?;
        Ok(client_row(&r)?)
    }

    pub async fn oauth_client(
        &self,
        client_id: &str,
    ) -> Result<Option<OAuthClientRow>, StoreError> {
        let r = sqlx::query(&format!(
            "SELECT {CLIENT_COLS} FROM oauth_clients WHERE client_id = $1"
        ))
        .bind(client_id)
        .fetch_optional(&self.db.pool)
        .await?;
        Ok(r.as_ref().map(client_row).transpose()?)
    }

    pub async fn list_oauth_clients(&self) -> Result<Vec<OAuthClientRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {CLIENT_COLS} FROM oauth_clients ORDER BY id"
        ))
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows.iter().map(client_row).collect::<Result<_, _>>()?)
    }

    /// Deletes a client with its codes and tokens (sessions through it end at once);
    /// whether it existed.
    pub async fn delete_oauth_client(&self, client_id: &str) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        for table in ["oauth_codes", "oauth_tokens"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE client_id = $1"))
                .bind(client_id)
                .execute(&mut *tx)
                .await?;
        }
        let r = sqlx::query("DELETE FROM oauth_clients WHERE client_id = $1")
            .bind(client_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() == 1)
    }

    /// Stores a new code by its digest.
    #[allow(clippy::too_many_arguments)]
    pub async fn insert_oauth_code(
        &self,
        code_digest: &str,
        client_id: &str,
        user: UserId,
        redirect_uri: &str,
        code_challenge: &str,
        scope: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        // Expired and long-used codes are of no use; prune them as new ones arrive.
        sqlx::query("DELETE FROM oauth_codes WHERE expires_at < $1")
            .bind(now - 86_400_000)
            .execute(&self.db.pool)
            .await?;
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, client_id, user_id, redirect_uri, code_challenge, scope, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(code_digest)
        .bind(client_id)
        .bind(user.get())
        .bind(redirect_uri)
        .bind(code_challenge)
        .bind(scope)
        .bind(now)
        .bind(now + ttl_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Marks a code used and returns it as it was before. A code that was already used
    /// comes back with `used_at` set, and every token issued from it is revoked: a replayed
    /// code means it leaked (RFC 6749 §4.1.2).
    pub async fn consume_oauth_code(
        &self,
        digest: &str,
        now: i64,
    ) -> Result<Option<OAuthCodeRow>, StoreError> {
        let claimed = sqlx::query(&format!(
            "UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL RETURNING {CODE_COLS}"
        ))
        .bind(now)
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?;
        if let Some(r) = claimed {
            let mut c = code_row(&r)?;
            c.used_at = None;
            return Ok(Some(c));
        }
        let Some(r) = sqlx::query(&format!(
            "SELECT {CODE_COLS} FROM oauth_codes WHERE code_hash = $1"
        ))
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?
        else {
            return Ok(None);
        };
        let c = code_row(&r)?;
        let revoked = sqlx::query(
            "UPDATE oauth_tokens SET revoked_at = $1 WHERE code_id = $2 AND revoked_at IS NULL",
        )
        .bind(now)
        .bind(c.id)
        .execute(&self.db.pool)
        .await?;
        tracing::warn!(client = %c.client_id, user = %c.user_id, revoked = revoked.rows_affected(),
            "an authorization code was presented twice; tokens issued from it are revoked");
        Ok(Some(c))
    }

    /// Stores an access token issued from `code`, by its digest.
    pub async fn insert_oauth_token(
        &self,
        token_digest: &str,
        code: &OAuthCodeRow,
        now: i64,
        ttl_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM oauth_tokens WHERE expires_at < $1")
            .bind(now - 86_400_000)
            .execute(&self.db.pool)
            .await?;
        sqlx::query(
            "INSERT INTO oauth_tokens (token_hash, client_id, user_id, code_id, scope, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(token_digest)
        .bind(&code.client_id)
        .bind(code.user_id.get())
        .bind(code.id)
        .bind(&code.scope)
        .bind(now)
        .bind(now + ttl_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// The access token stored under `digest`.
    pub async fn oauth_token_by_digest(
        &self,
        digest: &str,
    ) -> Result<Option<OAuthTokenRow>, StoreError> {
        let r = sqlx::query(
            "SELECT token_hash, client_id, user_id, scope, expires_at, revoked_at FROM oauth_tokens WHERE token_hash = $1",
        )
        .bind(digest)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        Ok(Some(OAuthTokenRow {
            client_id: get_str(&r, "client_id")?,
            user_id: UserId(get_i64(&r, "user_id")?),
            scope: get_str(&r, "scope")?,
            expires_at: get_i64(&r, "expires_at")?,
            revoked_at: get_opt_i64(&r, "revoked_at")?,
            token_hash: get_str(&r, "token_hash")?,
        }))
    }

    /// The HMAC key of login forms and session cookies: created once, sealed in the
    /// database so every server sharing it signs alike.
    /// `fresh` is stored when no key exists yet; the first server to store one wins.
    pub async fn oauth_signing_key(&self, now: i64, fresh: &[u8]) -> Result<Vec<u8>, StoreError> {
        let existing = sqlx::query("SELECT sealed_key FROM oauth_keys WHERE id = 1")
            .fetch_optional(&self.db.pool)
            .await?;
        let sealed = match existing {
            Some(r) => get_str(&r, "sealed_key")?,
            None => {
                let fresh = self.sbox.seal(fresh);
                sqlx::query(
                    "INSERT INTO oauth_keys (id, sealed_key, created_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING",
                )
                .bind(&fresh)
                .bind(now)
                .execute(&self.db.pool)
                .await?;
                let r = sqlx::query("SELECT sealed_key FROM oauth_keys WHERE id = 1")
                    .fetch_one(&self.db.pool)
                    .await?;
                get_str(&r, "sealed_key")?
            }
        };
        Ok(self.sbox.open(&sealed)?)
    }
}
