//! The proxy's cookie-signing keys: random 32 bytes in `state_dir/cookie_keys.json` (0600),
//! created once. `rotate` makes a new current key and keeps the previous one, which is
//! still accepted for one session lifetime so nobody is signed out by a rotation. A running
//! proxy notices a rotation within a few seconds (it re-reads the file when it changes).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;
use warren_jwt::NamedKey;

/// The key file's name inside `state_dir`.
pub const KEY_FILE: &str = "cookie_keys.json";

/// How often a running proxy looks at the key file for a rotation.
const RELOAD_CHECK: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {path}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a cookie key file")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: a key is not 32 base64url bytes")]
    BadKey { path: String },
}

/// The key file as stored.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// Base64url (no padding) of 32 random bytes; signs everything new.
    pub current: String,
    /// The key before the last rotation; verifies until `rotated_at + session lifetime`.
    #[serde(default)]
    pub previous: Option<String>,
    /// Unix seconds of the last rotation.
    #[serde(default)]
    pub rotated_at: Option<i64>,
}

fn random_key() -> String {
    let mut k = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut k);
    URL_SAFE_NO_PAD.encode(k)
}

pub(crate) use warren_jwt::now_secs;

pub fn key_path(state_dir: &Path) -> PathBuf {
    state_dir.join(KEY_FILE)
}

fn read(path: &Path) -> Result<Option<KeyFile>, KeyError> {
    let p = path.display().to_string();
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(KeyError::Read { path: p, source }),
    };
    let f: KeyFile = serde_json::from_slice(&bytes).map_err(|source| KeyError::Parse {
        path: p.clone(),
        source,
    })?;
    for k in std::iter::once(&f.current).chain(f.previous.iter()) {
        if URL_SAFE_NO_PAD.decode(k).map(|b| b.len()) != Ok(32) {
            return Err(KeyError::BadKey { path: p });
        }
    }
    Ok(Some(f))
}

/// Writes the file atomically (temporary file with mode 0600, then rename).
fn write(path: &Path, f: &KeyFile) -> Result<(), KeyError> {
    let p = path.display().to_string();
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let body = serde_json::to_vec_pretty(f).expect("key file serialises");
    let result = (|| {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o600);
        }
        let mut file = o.open(&tmp)?;
        file.write_all(&body)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        KeyError::Write { path: p, source }
    })
}

/// The key file in `state_dir`, created on first use.
pub fn load_or_create(state_dir: &Path) -> Result<KeyFile, KeyError> {
    let path = key_path(state_dir);
    if let Some(f) = read(&path)? {
        return Ok(f);
    }
    let f = KeyFile {
        current: random_key(),
        previous: None,
        rotated_at: None,
    };
    write(&path, &f)?;
    Ok(f)
}

/// Rotates the cookie key in `state_dir`: a new current key; the old one is accepted for
/// one more session lifetime. Works while a proxy runs (it picks the change up).
pub fn rotate(state_dir: &Path) -> Result<KeyFile, KeyError> {
    let old = load_or_create(state_dir)?;
    let f = KeyFile {
        current: random_key(),
        previous: Some(old.current),
        rotated_at: Some(now_secs()),
    };
    write(&key_path(state_dir), &f)?;
    Ok(f)
}

/// A short id of a key for the JWT header, so verification picks the right key at once.
fn kid(key: &[u8]) -> String {
    let d = sha2::Sha256::digest(key);
    URL_SAFE_NO_PAD.encode(&d[..9])
}

/// A key of the file: its secret, named by its digest (`kid`).
fn named(b64: &str) -> NamedKey {
    let raw = URL_SAFE_NO_PAD.decode(b64).unwrap_or_default();
    NamedKey::new(kid(&raw), &raw)
}

struct Loaded {
    current: NamedKey,
    /// The previous key and until when (unix seconds) it is accepted.
    previous: Option<(NamedKey, i64)>,
    mtime: Option<SystemTime>,
    checked: Instant,
}

/// Signs and verifies the proxy's cookies and hand-offs.
pub(crate) struct CookieKeys {
    path: PathBuf,
    session_lifetime: i64,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for CookieKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CookieKeys")
            .field("path", &self.path)
            .finish()
    }
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl CookieKeys {
    pub(crate) fn open(state_dir: &Path, session_lifetime_secs: u64) -> Result<Self, KeyError> {
        let path = key_path(state_dir);
        let f = load_or_create(state_dir)?;
        let session_lifetime = session_lifetime_secs as i64;
        Ok(CookieKeys {
            loaded: RwLock::new(Self::build(&f, session_lifetime, mtime(&path))),
            path,
            session_lifetime,
        })
    }

    fn build(f: &KeyFile, lifetime: i64, mtime: Option<SystemTime>) -> Loaded {
        Loaded {
            current: named(&f.current),
            previous: f
                .previous
                .as_deref()
                .map(|p| (named(p), f.rotated_at.unwrap_or(0) + lifetime)),
            mtime,
            checked: Instant::now(),
        }
    }

    /// Re-reads the file when it changed (a rotation by `warren proxy rotate-key`).
    fn refresh(&self) {
        {
            let l = self.loaded.read().expect("key lock poisoned");
            if l.checked.elapsed() < RELOAD_CHECK {
                return;
            }
        }
        let m = mtime(&self.path);
        let mut l = self.loaded.write().expect("key lock poisoned");
        l.checked = Instant::now();
        if m == l.mtime {
            return;
        }
        match read(&self.path) {
            Ok(Some(f)) => *l = Self::build(&f, self.session_lifetime, m),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "keeping the loaded cookie keys")
            }
        }
    }

    /// Signs `claims` (which carry their own `aud` and `exp`) with the current key.
    pub(crate) fn sign<T: Serialize>(&self, claims: &T) -> String {
        self.refresh();
        let l = self.loaded.read().expect("key lock poisoned");
        l.current
            .sign(claims)
            .expect("HS256 signing of plain claims cannot fail")
    }

    /// The claims of `token` if a current (or still accepted previous) key signed it for
    /// `aud` and it has not expired.
    pub(crate) fn verify<T: DeserializeOwned>(&self, token: &str, aud: &str) -> Option<T> {
        self.refresh();
        let kid = warren_jwt::kid_of(token)?;
        let l = self.loaded.read().expect("key lock poisoned");
        let key = if kid == l.current.kid() {
            &l.current
        } else {
            match &l.previous {
                Some((k, until)) if k.kid() == kid && now_secs() < *until => k,
                _ => return None,
            }
        };
        key.verify(token, aud)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct C {
        aud: String,
        exp: i64,
        v: u32,
    }

    fn force_reload(k: &CookieKeys) {
        let mut l = k.loaded.write().unwrap();
        l.checked = Instant::now() - RELOAD_CHECK * 2;
        l.mtime = None;
    }

    #[test]
    fn created_once_private_and_rotation_keeps_previous() {
        let dir = tempfile::tempdir().unwrap();
        let k = CookieKeys::open(dir.path(), 3600).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(key_path(dir.path()))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let first = load_or_create(dir.path()).unwrap();
        assert_eq!(load_or_create(dir.path()).unwrap().current, first.current);

        let c = C {
            aud: "session".into(),
            exp: now_secs() + 100,
            v: 7,
        };
        let t = k.sign(&c);
        assert_eq!(k.verify::<C>(&t, "session"), Some(c));
        assert_eq!(k.verify::<C>(&t, "handoff"), None, "another audience");
        let expired = k.sign(&C {
            aud: "session".into(),
            exp: now_secs() - 1,
            v: 1,
        });
        assert_eq!(k.verify::<C>(&expired, "session"), None);
        let mut parts: Vec<String> = t.split('.').map(str::to_owned).collect();
        let fake = serde_json::to_vec(&C {
            aud: "session".into(),
            exp: now_secs() + 100,
            v: 8,
        })
        .unwrap();
        parts[1] = URL_SAFE_NO_PAD.encode(fake);
        let tampered = parts.join(".");
        assert_eq!(k.verify::<C>(&tampered, "session"), None);

        // Rotate: old tokens still verify, new ones use the new key.
        let rotated = rotate(dir.path()).unwrap();
        assert_eq!(rotated.previous.as_deref(), Some(first.current.as_str()));
        force_reload(&k);
        assert!(
            k.verify::<C>(&t, "session").is_some(),
            "previous key accepted"
        );
        let t2 = k.sign(&C {
            aud: "session".into(),
            exp: now_secs() + 100,
            v: 2,
        });
        assert_ne!(warren_jwt::kid_of(&t2), warren_jwt::kid_of(&t));

        // One session lifetime after the rotation the previous key is refused.
        let mut f = load_or_create(dir.path()).unwrap();
        f.rotated_at = Some(now_secs() - 3601);
        write(&key_path(dir.path()), &f).unwrap();
        force_reload(&k);
        assert_eq!(k.verify::<C>(&t, "session"), None);
        assert!(k.verify::<C>(&t2, "session").is_some());

        // A second rotation forgets the first key.
        rotate(dir.path()).unwrap();
        force_reload(&k);
        assert!(k.verify::<C>(&t2, "session").is_some());
    }
}
