//! SSH public keys per user: OpenSSH format validated, identified by their SHA256
//! fingerprint (unique server-wide, so a key names one user).

use super::audit;
use super::{AppError, AppState, Principal};
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use sha2::{Digest, Sha256};
use warren_types::api::{AddSshKeyRequest, SshKey};
use warren_types::SshKeyId;

/// The caller's keys.
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<SshKey>, AppError> {
    Ok(state
        .store
        .list_ssh_keys(who.user.id)
        .await?
        .iter()
        .map(|k| k.to_api())
        .collect())
}

/// Adds a key for the caller, named by the request, else the key's comment, else its type.
pub async fn add(
    state: &AppState,
    who: &Principal,
    req: &AddSshKeyRequest,
) -> Result<SshKey, AppError> {
    let r: Result<SshKey, AppError> = async {
        let parsed = parse_public_key(&req.public_key)
            .map_err(|e| AppError::invalid_field("public_key", e))?;
        let name = req
            .name
            .clone()
            .or_else(|| parsed.comment.clone())
            .unwrap_or_else(|| parsed.key_type.clone());
        if name.len() > 200 {
            return Err(AppError::invalid_field(
                "name",
                "must be at most 200 characters",
            ));
        }
        let normalised = format!("{} {}", parsed.key_type, parsed.blob_b64);
        let k = state
            .store
            .insert_ssh_key(
                who.user.id,
                &name,
                &normalised,
                &parsed.fingerprint,
                state.clock.now_ms(),
            )
            .await
            .map_err(super::error::already_exists(|| {
                format!(
                    "public_key: the key {} is already registered",
                    parsed.fingerprint
                )
            }))?;
        Ok(k.to_api())
    }
    .await;
    audit::audited(
        state,
        who,
        "ssh_key.add",
        match &r {
            Ok(k) => audit::Target::new("ssh_key", k.id, &k.fingerprint),
            Err(_) => audit::Target::named("ssh_key", req.name.as_deref().unwrap_or("")),
        },
        r,
    )
    .await
}

/// Deletes one of the caller's keys.
pub async fn delete(state: &AppState, who: &Principal, id: SshKeyId) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        if state.store.delete_ssh_key(who.user.id, id).await? {
            Ok(())
        } else {
            Err(AppError::not_found(format!("SSH key {id}")))
        }
    }
    .await;
    audit::audited(
        state,
        who,
        "ssh_key.remove",
        audit::Target::new("ssh_key", id, ""),
        r,
    )
    .await
}

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
