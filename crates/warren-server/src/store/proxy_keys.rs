//! The keys every proxy replica shares (cookie-signing generations, the SSH host key), sealed
//! with the server's key, and the sign-in hand-offs already used.

use super::{get_i64, get_opt_str, get_str, Store, StoreError};

const COOKIE: &str = "cookie";
const SSH_HOST: &str = "ssh_host";
/// Cookie-key generations kept: the pending one, the signing one and the one before.
const COOKIE_GENERATIONS_KEPT: i64 = 3;

/// A cookie-signing key, unsealed.
#[derive(Clone)]
pub struct CookieKeyRow {
    pub generation: i64,
    pub secret: String,
    pub signing_from_ms: i64,
}

impl std::fmt::Debug for CookieKeyRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieKeyRow")
            .field("generation", &self.generation)
            .field("signing_from_ms", &self.signing_from_ms)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Stores `secret` (with `public_key`) as generation 1 of `kind` unless one is there.
    async fn adopt_proxy_key(
        &self,
        kind: &str,
        secret: &str,
        public_key: Option<&str>,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO proxy_keys (kind, generation, secret, public_key, signing_from, created_at) \
             VALUES ($1, 1, $2, $3, $4, $4) ON CONFLICT (kind, generation) DO NOTHING",
        )
        .bind(kind)
        .bind(self.sbox.seal(secret.as_bytes()))
        .bind(public_key)
        .bind(now_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Adopts an offered cookie key when no proxy offered one before (or an admin rotated).
    pub async fn adopt_proxy_cookie_key(
        &self,
        secret: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        let any = sqlx::query("SELECT generation FROM proxy_keys WHERE kind = $1 LIMIT 1")
            .bind(COOKIE)
            .fetch_optional(&self.db.pool)
            .await?;
        if any.is_some() {
            return Ok(());
        }
        self.adopt_proxy_key(COOKIE, secret, None, now_ms).await
    }

    /// Adopts an offered SSH host key when none is stored.
    pub async fn adopt_proxy_ssh_host_key(
        &self,
        private_key: &str,
        public_key: &str,
        now_ms: i64,
    ) -> Result<(), StoreError> {
        self.adopt_proxy_key(SSH_HOST, private_key, Some(public_key), now_ms)
            .await
    }

    /// The cookie keys, oldest generation first.
    pub async fn proxy_cookie_keys(&self) -> Result<Vec<CookieKeyRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT generation, secret, signing_from FROM proxy_keys WHERE kind = $1 \
             ORDER BY generation",
        )
        .bind(COOKIE)
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(CookieKeyRow {
                    generation: get_i64(r, "generation")?,
                    secret: self.sbox.open_string(&get_str(r, "secret")?)?,
                    signing_from_ms: get_i64(r, "signing_from")?,
                })
            })
            .collect()
    }

    /// The shared SSH host key: its private key (OpenSSH format) and public key.
    pub async fn proxy_ssh_host_key(&self) -> Result<Option<(String, String)>, StoreError> {
        let row = sqlx::query(
            "SELECT secret, public_key FROM proxy_keys WHERE kind = $1 AND generation = 1",
        )
        .bind(SSH_HOST)
        .fetch_optional(&self.db.pool)
        .await?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some((
            self.sbox.open_string(&get_str(&r, "secret")?)?,
            get_opt_str(&r, "public_key")?.unwrap_or_default(),
        )))
    }

    /// The shared SSH host key's public key, if a proxy offered one.
    pub async fn proxy_ssh_public_key(&self) -> Result<Option<String>, StoreError> {
        let row =
            sqlx::query("SELECT public_key FROM proxy_keys WHERE kind = $1 AND generation = 1")
                .bind(SSH_HOST)
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(match row {
            Some(r) => get_opt_str(&r, "public_key")?,
            None => None,
        })
    }

    /// Adds cookie key `secret` as the next generation, signing from `signing_from_ms`, and
    /// forgets generations older than the kept few; the new generation. Two rotations at once
    /// both land, one after the other.
    pub async fn rotate_proxy_cookie_key(
        &self,
        secret: &str,
        signing_from_ms: i64,
        now_ms: i64,
    ) -> Result<i64, StoreError> {
        let sealed = self.sbox.seal(secret.as_bytes());
        for _ in 0..5 {
            let mut tx = self.db.begin().await?;
            let row = sqlx::query(
                "SELECT COALESCE(MAX(generation), 0) AS g FROM proxy_keys WHERE kind = $1",
            )
            .bind(COOKIE)
            .fetch_one(&mut *tx)
            .await?;
            let next = get_i64(&row, "g")? + 1;
            let inserted = sqlx::query(
                "INSERT INTO proxy_keys (kind, generation, secret, public_key, signing_from, created_at) \
                 VALUES ($1, $2, $3, NULL, $4, $5) ON CONFLICT (kind, generation) DO NOTHING",
            )
            .bind(COOKIE)
            .bind(next)
            .bind(&sealed)
            .bind(signing_from_ms)
            .bind(now_ms)
            .execute(&mut *tx)
            .await?;
            if inserted.rows_affected() == 0 {
                // Another replica rotated between the read and the write: go again on top.
                continue;
            }
            sqlx::query("DELETE FROM proxy_keys WHERE kind = $1 AND generation <= $2")
                .bind(COOKIE)
                .bind(next - COOKIE_GENERATIONS_KEPT)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            return Ok(next);
        }
        Err(StoreError::Conflict("proxy cookie key generation"))
    }

    /// Records the use of a sign-in hand-off (by its id's digest); true the first time.
    /// Expired records are dropped on the way: a hand-off past `expires_ms` is refused by
    /// its signature's expiry anyway.
    pub async fn use_proxy_handoff(
        &self,
        jti_digest: &str,
        expires_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        sqlx::query("DELETE FROM proxy_handoffs WHERE expires_at < $1")
            .bind(now_ms)
            .execute(&self.db.pool)
            .await?;
        let r = sqlx::query(
            "INSERT INTO proxy_handoffs (jti_digest, expires_at) VALUES ($1, $2) \
             ON CONFLICT (jti_digest) DO NOTHING",
        )
        .bind(jti_digest)
        .bind(expires_ms)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }
}
