//! OAuth 2.0 clients, authorization codes, access tokens and the key that signs login
//! forms and session cookies. Secrets, codes and tokens are stored as SHA-256 digests.

use super::{get_i64, get_opt_i64, get_opt_str, get_str, is_unique_violation, Store};
use crate::crypto;
use crate::error::HttpError;
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

    /// Exact, byte-for-byte match against the registered URIs.
    pub fn allows_redirect(&self, uri: &str) -> bool {
        self.redirect_uris.iter().any(|r| r == uri)
    }

    /// Constant-time check of a presented secret.
    pub fn check_secret(&self, secret: &str) -> bool {
        match &self.secret_hash {
            Some(h) => crypto::ct_eq(h, &crypto::token_digest(secret)),
            None => false,
        }
    }
}

/// What registering a client takes.
#[derive(Debug, Clone)]
pub struct NewOAuthClient {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    /// The secret of a confidential client; `None` registers a public client.
    pub secret: Option<String>,
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

/// A valid access token.
#[derive(Debug, Clone)]
pub struct OAuthTokenRow {
    pub client_id: String,
    pub user_id: UserId,
    pub scope: String,
    pub expires_at: i64,
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

/// Client ids: 1–100 of `A-Z a-z 0-9 . _ -`.
pub fn validate_client_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 100
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{id:?} is not a valid client id (1-100 characters of A-Z, a-z, 0-9, '.', '_', '-')"
        ))
    }
}

/// Redirect URIs: absolute http(s) URLs without a fragment (RFC 6749 §3.1.2).
pub fn validate_redirect_uri(uri: &str) -> Result<(), String> {
    let u = url::Url::parse(uri).map_err(|e| format!("{uri:?} is not an absolute URL: {e}"))?;
    if u.scheme() != "http" && u.scheme() != "https" {
        return Err(format!("{uri:?} must use http or https"));
    }
    if u.fragment().is_some() {
        return Err(format!("{uri:?} must not contain a fragment"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(format!("{uri:?} lacks a host"));
    }
    Ok(())
}

impl Store {
    /// Registers a client, or replaces the one with the same `client_id` (name, redirect
    /// URIs, flag and secret), so `warren up` can register its proxy on every start.
    pub async fn upsert_oauth_client(
        &self,
        c: &NewOAuthClient,
        now: i64,
    ) -> Result<OAuthClientRow, HttpError> {
        self.write_oauth_client(c, now, true).await
    }

    /// Registers a new client; 409 when the client id is taken.
    pub async fn create_oauth_client(
        &self,
        c: &NewOAuthClient,
        now: i64,
    ) -> Result<OAuthClientRow, HttpError> {
        self.write_oauth_client(c, now, false).await
    }

    async fn write_oauth_client(
        &self,
        c: &NewOAuthClient,
        now: i64,
        replace: bool,
    ) -> Result<OAuthClientRow, HttpError> {
        validate_client_id(&c.client_id).map_err(|e| HttpError::invalid_field("client_id", e))?;
        if c.name.trim().is_empty() || c.name.len() > 100 {
            return Err(HttpError::invalid_field("name", "must be 1-100 characters"));
        }
        if c.redirect_uris.is_empty() || c.redirect_uris.len() > 20 {
            return Err(HttpError::invalid_field(
                "redirect_uris",
                "between 1 and 20 redirect URIs are required",
            ));
        }
        for u in &c.redirect_uris {
            validate_redirect_uri(u).map_err(|e| HttpError::invalid_field("redirect_uris", e))?;
        }
        if let Some(s) = &c.secret {
            if s.len() < 32 || s.len() > 200 {
                return Err(HttpError::invalid_field(
                    "client_secret",
                    "must be 32-200 characters",
                ));
            }
        }
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
        .bind(c.secret.as_deref().map(crypto::token_digest))
        .bind(&c.name)
        .bind(uris)
        .bind(c.first_party as i64)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HttpError::conflict(
                    "already_exists",
                    format!("oauth client {:?} already exists", c.client_id),
                )
            } else {
                e.into()
            }
        })?;
        Ok(client_row(&r)?)
    }

    pub async fn oauth_client(
        &self,
        client_id: &str,
    ) -> Result<Option<OAuthClientRow>, sqlx::Error> {
        let r = sqlx::query(&format!(
            "SELECT {CLIENT_COLS} FROM oauth_clients WHERE client_id = $1"
        ))
        .bind(client_id)
        .fetch_optional(&self.db.pool)
        .await?;
        r.as_ref().map(client_row).transpose()
    }

    pub async fn list_oauth_clients(&self) -> Result<Vec<OAuthClientRow>, sqlx::Error> {
        let rows = sqlx::query(&format!(
            "SELECT {CLIENT_COLS} FROM oauth_clients ORDER BY id"
        ))
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter().map(client_row).collect()
    }

    /// Stores a new code (by digest) and returns it; the plain code exists only here.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_oauth_code(
        &self,
        client_id: &str,
        user: UserId,
        redirect_uri: &str,
        code_challenge: &str,
        scope: &str,
        now: i64,
        ttl_ms: i64,
    ) -> Result<String, sqlx::Error> {
        let code = crypto::random_secret(32);
        // Expired and long-used codes are of no use; prune them as new ones arrive.
        sqlx::query("DELETE FROM oauth_codes WHERE expires_at < $1")
            .bind(now - 86_400_000)
            .execute(&self.db.pool)
            .await?;
        sqlx::query(
            "INSERT INTO oauth_codes (code_hash, client_id, user_id, redirect_uri, code_challenge, scope, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(crypto::token_digest(&code))
        .bind(client_id)
        .bind(user.get())
        .bind(redirect_uri)
        .bind(code_challenge)
        .bind(scope)
        .bind(now)
        .bind(now + ttl_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(code)
    }

    /// Marks a code used and returns it as it was before. A code that was already used
    /// comes back with `used_at` set, and every token issued from it is revoked: a replayed
    /// code means it leaked (RFC 6749 §4.1.2).
    pub async fn consume_oauth_code(
        &self,
        code: &str,
        now: i64,
    ) -> Result<Option<OAuthCodeRow>, sqlx::Error> {
        if code.is_empty() || code.len() > 200 {
            return Ok(None);
        }
        let digest = crypto::token_digest(code);
        let claimed = sqlx::query(&format!(
            "UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL RETURNING {CODE_COLS}"
        ))
        .bind(now)
        .bind(&digest)
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
        .bind(&digest)
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

    /// Issues an access token (returned once, stored as a digest).
    pub async fn create_oauth_token(
        &self,
        code: &OAuthCodeRow,
        now: i64,
        ttl_ms: i64,
    ) -> Result<String, sqlx::Error> {
        let token = format!("{}{}", OAUTH_TOKEN_PREFIX, crypto::random_secret(32));
        sqlx::query("DELETE FROM oauth_tokens WHERE expires_at < $1")
            .bind(now - 86_400_000)
            .execute(&self.db.pool)
            .await?;
        sqlx::query(
            "INSERT INTO oauth_tokens (token_hash, client_id, user_id, code_id, scope, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(crypto::token_digest(&token))
        .bind(&code.client_id)
        .bind(code.user_id.get())
        .bind(code.id)
        .bind(&code.scope)
        .bind(now)
        .bind(now + ttl_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(token)
    }

    /// The access token's grant, if the token is valid now.
    pub async fn authenticate_oauth_token(
        &self,
        token: &str,
        now: i64,
    ) -> Result<Option<OAuthTokenRow>, sqlx::Error> {
        if !token.starts_with(OAUTH_TOKEN_PREFIX) || token.len() > 200 {
            return Ok(None);
        }
        let digest = crypto::token_digest(token);
        let r = sqlx::query(
            "SELECT token_hash, client_id, user_id, scope, expires_at, revoked_at FROM oauth_tokens WHERE token_hash = $1",
        )
        .bind(&digest)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = r else { return Ok(None) };
        if !crypto::ct_eq(&get_str(&r, "token_hash")?, &digest)
            || get_opt_i64(&r, "revoked_at")?.is_some()
            || get_i64(&r, "expires_at")? <= now
        {
            return Ok(None);
        }
        Ok(Some(OAuthTokenRow {
            client_id: get_str(&r, "client_id")?,
            user_id: UserId(get_i64(&r, "user_id")?),
            scope: get_str(&r, "scope")?,
            expires_at: get_i64(&r, "expires_at")?,
        }))
    }

    /// The HMAC key of login forms and session cookies: created once, sealed in the
    /// database so every server sharing it signs alike.
    pub async fn oauth_signing_key(&self, now: i64) -> Result<Vec<u8>, HttpError> {
        let existing = sqlx::query("SELECT sealed_key FROM oauth_keys WHERE id = 1")
            .fetch_optional(&self.db.pool)
            .await?;
        let sealed = match existing {
            Some(r) => get_str(&r, "sealed_key")?,
            None => {
                let fresh = self.sbox.seal(crypto::random_secret(32).as_bytes());
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

/// Prefix of OAuth access tokens (opaque, 256 bits).
pub const OAUTH_TOKEN_PREFIX: &str = "wrn_oat_";
