//! The proxy's cookie-signing keys, the same on every replica: the server holds them (sealed),
//! adopting the first proxy's offer, and replicas poll them every few seconds. A rotation (an
//! admin's `warren proxy rotate-key`) adds a generation that is published before it signs, so
//! every replica knows a key before any browser brings a cookie signed with it; the previous
//! generation still verifies for one session lifetime after its successor took over, so nobody
//! is signed out by a rotation.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Digest;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use std::time::Duration;
use warren_jwt::NamedKey;
use warren_types::internal::ProxyCookieKey;

/// The key file a proxy kept before keys were shared; offered to the server once, so an
/// upgraded proxy's sessions stay valid.
pub const KEY_FILE: &str = "cookie_keys.json";

/// How often a running proxy asks the server for the cookie keys (a rotation is published
/// several of these before it signs).
pub(crate) const POLL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading {path}")]
    Read {
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
    #[error("{what}: a key is not 32 base64url bytes")]
    BadKey { what: String },
    #[error("the server holds no cookie key")]
    NoKeys,
}

/// The key file as proxies kept it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    current: String,
    #[serde(default)]
    previous: Option<String>,
    #[serde(default)]
    rotated_at: Option<i64>,
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

fn decode(what: &str, b64: &str) -> Result<Vec<u8>, KeyError> {
    match URL_SAFE_NO_PAD.decode(b64) {
        Ok(b) if b.len() == 32 => Ok(b),
        _ => Err(KeyError::BadKey {
            what: what.to_owned(),
        }),
    }
}

/// The cookie key this proxy offers the server: the one it kept in `state_dir` before keys
/// were shared, else a new random one (the server keeps the first offer it gets).
pub(crate) fn offer(state_dir: &Path) -> Result<String, KeyError> {
    let path = key_path(state_dir);
    let p = path.display().to_string();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(random_key()),
        Err(source) => return Err(KeyError::Read { path: p, source }),
    };
    let f: KeyFile = serde_json::from_slice(&bytes).map_err(|source| KeyError::Parse {
        path: p.clone(),
        source,
    })?;
    decode(&p, &f.current)?;
    Ok(f.current)
}

/// A short id of a key for the JWT header, so verification picks the right key at once.
fn kid(key: &[u8]) -> String {
    let d = sha2::Sha256::digest(key);
    URL_SAFE_NO_PAD.encode(&d[..9])
}

struct Generation {
    key: NamedKey,
    generation: i64,
    signing_from: i64,
}

/// Signs and verifies the proxy's cookies and hand-offs with the shared keys.
pub(crate) struct CookieKeys {
    session_lifetime: i64,
    /// Oldest generation first; never empty.
    loaded: RwLock<Vec<Generation>>,
}

impl std::fmt::Debug for CookieKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = self.loaded.read().expect("key lock poisoned");
        f.debug_struct("CookieKeys")
            .field(
                "generations",
                &l.iter().map(|g| g.generation).collect::<Vec<_>>(),
            )
            .finish()
    }
}

fn build(keys: &[ProxyCookieKey]) -> Result<Vec<Generation>, KeyError> {
    let mut out = keys
        .iter()
        .map(|k| {
            let raw = decode(
                &format!("cookie key generation {}", k.generation),
                &k.secret,
            )?;
            Ok(Generation {
                key: NamedKey::new(kid(&raw), &raw),
                generation: k.generation,
                signing_from: k.signing_from,
            })
        })
        .collect::<Result<Vec<_>, KeyError>>()?;
    if out.is_empty() {
        return Err(KeyError::NoKeys);
    }
    out.sort_by_key(|g| g.generation);
    Ok(out)
}

impl CookieKeys {
    /// Keys as the server gave them.
    pub(crate) fn new(
        keys: &[ProxyCookieKey],
        session_lifetime_secs: u64,
    ) -> Result<Self, KeyError> {
        Ok(CookieKeys {
            session_lifetime: session_lifetime_secs as i64,
            loaded: RwLock::new(build(keys)?),
        })
    }

    /// Takes the server's newer answer; an unusable one is refused and the keys kept.
    pub(crate) fn replace(&self, keys: &[ProxyCookieKey]) -> Result<(), KeyError> {
        let fresh = build(keys)?;
        let mut l = self.loaded.write().expect("key lock poisoned");
        let before: Vec<i64> = l.iter().map(|g| g.generation).collect();
        let after: Vec<i64> = fresh.iter().map(|g| g.generation).collect();
        if before != after {
            tracing::info!(generations = ?after, "cookie keys changed");
        }
        *l = fresh;
        Ok(())
    }

    /// Signs `claims` (which carry their own `aud` and `exp`) with the newest generation
    /// whose time to sign has come (the oldest, if none has yet).
    pub(crate) fn sign<T: Serialize>(&self, claims: &T) -> String {
        let now = now_secs();
        let l = self.loaded.read().expect("key lock poisoned");
        let g = l
            .iter()
            .rev()
            .find(|g| g.signing_from <= now)
            .unwrap_or(&l[0]);
        g.key
            .sign(claims)
            .expect("HS256 signing of plain claims cannot fail")
    }

    /// The claims of `token` if a known generation signed it for `aud` and it has not
    /// expired: a generation verifies from when it is published until one session lifetime
    /// after its successor started signing.
    pub(crate) fn verify<T: DeserializeOwned>(&self, token: &str, aud: &str) -> Option<T> {
        let kid = warren_jwt::kid_of(token)?;
        let now = now_secs();
        let l = self.loaded.read().expect("key lock poisoned");
        let i = l.iter().position(|g| g.key.kid() == kid)?;
        if let Some(next) = l.get(i + 1) {
            if now >= next.signing_from + self.session_lifetime {
                return None;
            }
        }
        l[i].key.verify(token, aud)
    }
}

/// Polls the server for the cookie keys until `shutdown`; a failed poll keeps the keys.
pub(crate) async fn poll_loop(
    shared: std::sync::Arc<crate::Shared>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            // Cancel-safe: a tick lost to shutdown is not needed.
            _ = tick.tick() => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => return,
        }
        match shared.server.cookie_keys().await {
            Ok(k) => {
                if let Err(e) = shared.front.keys.replace(&k.cookie_keys) {
                    tracing::warn!(error = %crate::error_chain(&e), "keeping the loaded cookie keys");
                }
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "polling the cookie keys; keeping the loaded ones")
            }
        }
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

    fn key(generation: i64, signing_from: i64) -> ProxyCookieKey {
        ProxyCookieKey {
            generation,
            secret: random_key(),
            signing_from,
        }
    }

    fn claims(v: u32) -> C {
        C {
            aud: "session".into(),
            exp: now_secs() + 100,
            v,
        }
    }

    #[test]
    fn signs_with_the_current_generation_and_verifies_until_one_lifetime_after_its_successor() {
        let now = now_secs();
        let first = key(1, now - 10_000);
        let k = CookieKeys::new(std::slice::from_ref(&first), 3600).unwrap();
        let t1 = k.sign(&claims(1));
        assert_eq!(k.verify::<C>(&t1, "session"), Some(claims(1)));
        assert_eq!(k.verify::<C>(&t1, "handoff"), None, "another audience");
        let expired = k.sign(&C {
            aud: "session".into(),
            exp: now - 1,
            v: 1,
        });
        assert_eq!(k.verify::<C>(&expired, "session"), None);
        // A tampered body fails its signature.
        let mut parts: Vec<String> = t1.split('.').map(str::to_owned).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(8)).unwrap());
        assert_eq!(k.verify::<C>(&parts.join("."), "session"), None);

        // A published generation verifies before it signs; the current one still signs.
        let second = key(2, now + 20);
        k.replace(&[first.clone(), second.clone()]).unwrap();
        assert_eq!(
            warren_jwt::kid_of(&k.sign(&claims(2))),
            warren_jwt::kid_of(&t1)
        );
        let by_second = {
            let o = CookieKeys::new(
                &[ProxyCookieKey {
                    signing_from: now - 1,
                    ..second.clone()
                }],
                3600,
            )
            .unwrap();
            o.sign(&claims(3))
        };
        assert_eq!(
            k.verify::<C>(&by_second, "session"),
            Some(claims(3)),
            "a published key verifies"
        );

        // Once it signs, the previous generation verifies for one session lifetime more.
        let second_now = ProxyCookieKey {
            signing_from: now - 10,
            ..second.clone()
        };
        k.replace(&[first.clone(), second_now.clone()]).unwrap();
        assert_ne!(
            warren_jwt::kid_of(&k.sign(&claims(4))),
            warren_jwt::kid_of(&t1)
        );
        assert!(
            k.verify::<C>(&t1, "session").is_some(),
            "previous key accepted"
        );
        let second_old = ProxyCookieKey {
            signing_from: now - 3601,
            ..second
        };
        k.replace(&[first, second_old]).unwrap();
        assert_eq!(
            k.verify::<C>(&t1, "session"),
            None,
            "lapsed after one lifetime"
        );

        // A generation the server no longer lists verifies nothing; an empty answer is refused.
        k.replace(&[key(5, now - 1)]).unwrap();
        assert_eq!(k.verify::<C>(&by_second, "session"), None);
        assert!(matches!(k.replace(&[]), Err(KeyError::NoKeys)));
        let bad = ProxyCookieKey {
            secret: "short".into(),
            ..key(6, now)
        };
        assert!(matches!(k.replace(&[bad]), Err(KeyError::BadKey { .. })));
    }

    #[test]
    fn an_upgraded_proxy_offers_the_key_it_kept() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = offer(dir.path()).unwrap();
        assert_eq!(URL_SAFE_NO_PAD.decode(&fresh).unwrap().len(), 32);
        assert_ne!(offer(dir.path()).unwrap(), fresh, "nothing is written");
        let kept = random_key();
        std::fs::write(
            key_path(dir.path()),
            serde_json::json!({"current": kept, "previous": null, "rotated_at": null}).to_string(),
        )
        .unwrap();
        assert_eq!(offer(dir.path()).unwrap(), kept);
        std::fs::write(key_path(dir.path()), "{").unwrap();
        assert!(matches!(offer(dir.path()), Err(KeyError::Parse { .. })));
    }
}
