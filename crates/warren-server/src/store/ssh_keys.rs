//! SSH public keys per user: OpenSSH format validated, identified by their SHA256 fingerprint.

use super::{get_i64, get_str, is_unique_violation, Store};
use crate::db::from_millis;
use crate::error::HttpError;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};
use sqlx::any::AnyRow;
use warren_types::api::SshKey;
use warren_types::{SshKeyId, UserId};

const KEY_TYPES: [&str; 7] = [
    "ssh-ed25519",
    "ssh-rsa",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com",
];

/// A parsed `type base64 [comment]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedKey {
    pub key_type: String,
    pub blob_b64: String,
    pub comment: Option<String>,
    /// `SHA256:` + unpadded base64 of the blob's digest, as `ssh-keygen -l` prints it.
    pub fingerprint: String,
}

/// Parses and checks an OpenSSH public key line.
pub fn parse_public_key(line: &str) -> Result<ParsedKey, String> {
    let line = line.trim();
    if line.len() > 16 * 1024 {
        return Err("is longer than 16 KiB".into());
    }
    if line.contains('\n') {
        return Err("must be a single line".into());
    }
    let mut parts = line.split_whitespace();
    let key_type = parts.next().ok_or("is empty")?;
    if !KEY_TYPES.contains(&key_type) {
        return Err(format!(
            "key type {key_type:?} is not supported (expected one of {})",
            KEY_TYPES.join(", ")
        ));
    }
    let b64 = parts
        .next()
        .ok_or("lacks the base64 key data after the key type")?;
    let blob = STANDARD
        .decode(b64)
        .map_err(|_| "key data is not valid base64".to_string())?;
    // The blob starts with the key type as an SSH string (u32 length, bytes).
    let inner = blob
        .get(..4)
        .map(|l| u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize)
        .and_then(|n| blob.get(4..4 + n));
    if inner != Some(key_type.as_bytes()) {
        return Err(format!("key data does not hold a {key_type} key"));
    }
    if blob.len() < 4 + key_type.len() + 16 {
        return Err("key data is truncated".into());
    }
    let comment = parts.collect::<Vec<_>>().join(" ");
    Ok(ParsedKey {
        key_type: key_type.to_owned(),
        blob_b64: b64.to_owned(),
        comment: (!comment.is_empty()).then_some(comment),
        fingerprint: format!("SHA256:{}", STANDARD_NO_PAD.encode(Sha256::digest(&blob))),
    })
}

#[derive(Debug, Clone)]
pub struct SshKeyRow {
    pub id: SshKeyId,
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

fn row(r: &AnyRow) -> Result<SshKeyRow, sqlx::Error> {
    Ok(SshKeyRow {
        id: SshKeyId(get_i64(r, "id")?),
        user_id: UserId(get_i64(r, "user_id")?),
        name: get_str(r, "name")?,
        public_key: get_str(r, "public_key")?,
        fingerprint: get_str(r, "fingerprint")?,
        created_at: get_i64(r, "created_at")?,
    })
}

impl Store {
    pub async fn add_ssh_key(
        &self,
        user: UserId,
        public_key: &str,
        name: Option<&str>,
        now: i64,
    ) -> Result<SshKeyRow, HttpError> {
        let parsed =
            parse_public_key(public_key).map_err(|e| HttpError::invalid_field("public_key", e))?;
        let name = name
            .map(str::to_owned)
            .or_else(|| parsed.comment.clone())
            .unwrap_or_else(|| parsed.key_type.clone());
        if name.len() > 200 {
            return Err(HttpError::invalid_field(
                "name",
                "must be at most 200 characters",
            ));
        }
        let normalised = format!("{} {}", parsed.key_type, parsed.blob_b64);
        let r = sqlx::query(&format!(
            "INSERT INTO ssh_keys (user_id, name, public_key, fingerprint, created_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {COLS}"
        ))
        .bind(user.get())
        .bind(&name)
        .bind(normalised)
        .bind(&parsed.fingerprint)
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HttpError::conflict(
                    "already_exists",
                    format!(
                        "public_key: the key {} is already registered",
                        parsed.fingerprint
                    ),
                )
            } else {
                e.into()
            }
        })?;
        Ok(row(&r)?)
    }

    pub async fn list_ssh_keys(&self, user: UserId) -> Result<Vec<SshKeyRow>, sqlx::Error> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM ssh_keys WHERE user_id = $1 ORDER BY id"
        ))
        .bind(user.get())
        .fetch_all(&self.db.pool)
        .await?;
        rows.iter().map(row).collect()
    }

    /// The key with this fingerprint, for SSH authentication.
    pub async fn ssh_key_by_fingerprint(
        &self,
        fingerprint: &str,
    ) -> Result<Option<SshKeyRow>, sqlx::Error> {
        let r = sqlx::query(&format!(
            "SELECT {COLS} FROM ssh_keys WHERE fingerprint = $1"
        ))
        .bind(fingerprint)
        .fetch_optional(&self.db.pool)
        .await?;
        r.as_ref().map(row).transpose()
    }

    pub async fn delete_ssh_key(&self, user: UserId, id: SshKeyId) -> Result<bool, sqlx::Error> {
        let r = sqlx::query("DELETE FROM ssh_keys WHERE id = $1 AND user_id = $2")
            .bind(id.get())
            .bind(user.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A real ed25519 key generated with ssh-keygen for these tests.
    const ED: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIEmv+5QZ8fnzg9O8BUgrxNvCI4fmArD7xgQnXxlfb9xh test@warren";

    #[test]
    fn parses_and_fingerprints() {
        let k = parse_public_key(ED).unwrap();
        assert_eq!(k.key_type, "ssh-ed25519");
        assert_eq!(k.comment.as_deref(), Some("test@warren"));
        assert_eq!(
            k.fingerprint, "SHA256:3UeSlfl7JdmtYwloUUnOaHI4EYMxkz3LNHVRT0vbttQ",
            "as ssh-keygen -l prints it"
        );
    }

    #[test]
    fn refuses_bad_keys() {
        assert!(parse_public_key("").is_err());
        assert!(parse_public_key("ssh-dss AAAA")
            .unwrap_err()
            .contains("not supported"));
        assert!(parse_public_key("ssh-ed25519 !!!")
            .unwrap_err()
            .contains("base64"));
        let wrong_type = ED.replace("ssh-ed25519 ", "ssh-rsa ");
        assert!(parse_public_key(&wrong_type)
            .unwrap_err()
            .contains("does not hold"));
        assert!(parse_public_key("ssh-ed25519")
            .unwrap_err()
            .contains("lacks"));
    }
}
