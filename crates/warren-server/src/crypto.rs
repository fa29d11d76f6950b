//! Secrets: password hashing, random tokens, token digests, and encryption at rest.

use argon2::password_hash::{rand_core::OsRng as ArgonRng, SaltString};
use argon2::{Argon2, PasswordHash, PasswordHasher, PasswordVerifier};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Prefix of personal access tokens, so a leaked one is recognisable (secret scanners).
pub const PAT_PREFIX: &str = "wrn_pat_";
/// Prefix of agent tokens.
pub const AGENT_TOKEN_PREFIX: &str = "wrn_agent_";
/// Prefix that marks an encrypted value in the database.
const SEALED_PREFIX: &str = "v1:";

#[derive(Debug, thiserror::Error)]
pub enum CryptoError {
    #[error("reading key file {path}")]
    ReadKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing key file {path}")]
    WriteKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("key file {path} must hold 64 hex characters (32 bytes)")]
    BadKey { path: PathBuf },
    #[error("hashing a password: {0}")]
    Hash(String),
    #[error("decrypting a stored secret failed (wrong server key or corrupted data)")]
    Decrypt,
}

/// Random, URL-safe secret of `bytes` random bytes.
pub fn random_secret(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

/// A fresh personal access token secret (256 bits of entropy).
pub fn new_pat() -> String {
    format!("{PAT_PREFIX}{}", random_secret(32))
}

/// A fresh agent token secret.
pub fn new_agent_token() -> String {
    format!("{AGENT_TOKEN_PREFIX}{}", random_secret(32))
}

/// What the database stores of a high-entropy token and looks up by.
pub use warren_types::token_digest;

/// Constant-time comparison of two digests or secrets.
pub fn ct_eq(a: &str, b: &str) -> bool {
    a.as_bytes().ct_eq(b.as_bytes()).into()
}

pub fn hash_password(password: &str) -> Result<String, CryptoError> {
    let salt = SaltString::generate(&mut ArgonRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| CryptoError::Hash(e.to_string()))
}

/// Checks a password against a stored argon2 hash (constant-time inside argon2).
pub fn verify_password(password: &str, hash: &str) -> bool {
    match PasswordHash::new(hash) {
        Ok(parsed) => Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok(),
        // No password (an account made by single sign-on): as slow as a wrong one, so timing
        // does not tell such accounts apart.
        Err(_) => {
            if let Ok(parsed) = PasswordHash::new(dummy_password_hash()) {
                let _ = Argon2::default().verify_password(password.as_bytes(), &parsed);
            }
            false
        }
    }
}

/// A hash to verify against when a username does not exist, so the response time does
/// not tell whether it does.
pub fn dummy_password_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| hash_password("warren-dummy-password").unwrap_or_default())
}

/// Encrypts values at rest (ChaCha20-Poly1305, random 96-bit nonce per value).
#[derive(Clone)]
pub struct SecretBox {
    cipher: ChaCha20Poly1305,
}

impl std::fmt::Debug for SecretBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretBox(..)")
    }
}

impl SecretBox {
    pub fn new(key: [u8; 32]) -> SecretBox {
        SecretBox {
            cipher: ChaCha20Poly1305::new(Key::from_slice(&key)),
        }
    }

    /// `v1:` + base64(nonce ‖ ciphertext).
    pub fn seal(&self, plain: &[u8]) -> String {
        let mut nonce = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        // Encryption with a valid key and in-memory buffer cannot fail.
        let ct = self
            .cipher
            .encrypt(Nonce::from_slice(&nonce), plain)
            .unwrap_or_default();
        let mut out = nonce.to_vec();
        out.extend_from_slice(&ct);
        format!("{SEALED_PREFIX}{}", STANDARD.encode(out))
    }

    pub fn open(&self, sealed: &str) -> Result<Vec<u8>, CryptoError> {
        let raw = sealed
            .strip_prefix(SEALED_PREFIX)
            .and_then(|b| STANDARD.decode(b).ok())
            .ok_or(CryptoError::Decrypt)?;
        if raw.len() < 12 {
            return Err(CryptoError::Decrypt);
        }
        let (nonce, ct) = raw.split_at(12);
        self.cipher
            .decrypt(Nonce::from_slice(nonce), ct)
            .map_err(|_| CryptoError::Decrypt)
    }

    pub fn open_string(&self, sealed: &str) -> Result<String, CryptoError> {
        String::from_utf8(self.open(sealed)?).map_err(|_| CryptoError::Decrypt)
    }
}

/// Reads a 32-byte hex key from `path`, creating it (mode 0600, directory 0700) when absent.
/// Creation is exclusive, so two servers starting at once end up with the same key.
pub fn load_or_create_key(path: &Path) -> Result<[u8; 32], CryptoError> {
    if !path.exists() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| CryptoError::WriteKey {
                path: dir.to_owned(),
                source,
            })?;
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                f.write_all(hex::encode(key).as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(|source| CryptoError::WriteKey {
                        path: path.to_owned(),
                        source,
                    })?;
                return Ok(key);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(source) => {
                return Err(CryptoError::WriteKey {
                    path: path.to_owned(),
                    source,
                })
            }
        }
    }
    read_key(path)
}

/// Reads a 32-byte hex key that must already exist.
pub fn read_key(path: &Path) -> Result<[u8; 32], CryptoError> {
    let text = std::fs::read_to_string(path).map_err(|source| CryptoError::ReadKey {
        path: path.to_owned(),
        source,
    })?;
    let bytes = hex::decode(text.trim()).map_err(|_| CryptoError::BadKey {
        path: path.to_owned(),
    })?;
    bytes.try_into().map_err(|_| CryptoError::BadKey {
        path: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_round_trip_and_tamper() {
        let b = SecretBox::new([7; 32]);
        let s = b.seal(b"hello");
        assert!(!s.contains("hello"));
        assert_eq!(b.open(&s).unwrap(), b"hello");
        assert_ne!(b.seal(b"hello"), s, "fresh nonce each time");
        let other = SecretBox::new([8; 32]);
        assert!(other.open(&s).is_err());
        assert!(b.open("v1:AAAA").is_err());
        assert!(b.open("garbage").is_err());
    }

    #[test]
    fn passwords_and_tokens() {
        let h = hash_password("s3cret").unwrap();
        assert!(verify_password("s3cret", &h));
        assert!(!verify_password("wrong", &h));
        assert!(!verify_password("s3cret", "not a hash"));
        let t = new_pat();
        assert!(t.starts_with(PAT_PREFIX) && t.len() > 40);
        assert_eq!(token_digest(&t).len(), 64);
        assert!(ct_eq("abc", "abc") && !ct_eq("abc", "abd"));
    }

    #[test]
    fn key_file_created_once_with_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("keys/secret.key");
        let k1 = load_or_create_key(&p).unwrap();
        let k2 = load_or_create_key(&p).unwrap();
        assert_eq!(k1, k2);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&p, "short").unwrap();
        assert!(matches!(read_key(&p), Err(CryptoError::BadKey { .. })));
    }
}
