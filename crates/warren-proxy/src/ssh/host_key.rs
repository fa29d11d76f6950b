//! The SSH host key: ed25519, the same on every replica so clients' `known_hosts` stay valid
//! whichever answers — the server shares the first one offered, or the operator gives every
//! replica the same file (OpenSSH private key format, 0600, generated there on first use). An
//! existing key is never overwritten: a key that cannot be read is a startup error the
//! operator has to look at.

use russh::keys::ssh_key::LineEnding;
use russh::keys::PrivateKey;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HostKeyError {
    #[error("reading the SSH host key {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the SSH host key {path} is not a valid unencrypted OpenSSH private key; \
         fix it or move it away to have a new one generated (clients will then see a \
         changed host key)"
    )]
    Corrupt {
        path: PathBuf,
        #[source]
        source: russh::keys::ssh_key::Error,
    },
    #[error("generating the SSH host key")]
    Generate(#[source] russh::keys::ssh_key::Error),
    #[error("the server shares no SSH host key")]
    NotShared,
    #[error("writing the SSH host key {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Loads the host key at `path`, generating and saving one when there is none.
pub fn load_or_create(path: &Path) -> Result<PrivateKey, HostKeyError> {
    match std::fs::read(path) {
        Ok(bytes) => parse(path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(source) => Err(HostKeyError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The host key at `path`, or `None` when there is none.
pub(crate) fn load_existing(path: &Path) -> Result<Option<PrivateKey>, HostKeyError> {
    match std::fs::read(path) {
        Ok(bytes) => parse(path, &bytes).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(HostKeyError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<PrivateKey, HostKeyError> {
    let corrupt = |source| HostKeyError::Corrupt {
        path: path.to_owned(),
        source,
    };
    let key = PrivateKey::from_openssh(bytes).map_err(corrupt)?;
    if key.is_encrypted() {
        return Err(corrupt(russh::keys::ssh_key::Error::Encrypted));
    }
    Ok(key)
}

/// A new Ed25519 key from the operating system's random source. (russh's `random` wants
/// the `rand_core` of a newer `rand` than the one the workspace shares.)
pub(crate) fn generate_ed25519() -> PrivateKey {
    use rand::RngCore as _;
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    let pair = russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed);
    PrivateKey::from(pair)
}

fn create(path: &Path) -> Result<PrivateKey, HostKeyError> {
    let write_err = |source| HostKeyError::Write {
        path: path.to_owned(),
        source,
    };
    let mut key = generate_ed25519();
    key.set_comment("warren proxy host key");
    let pem = key
        .to_openssh(LineEnding::LF)
        .map_err(HostKeyError::Generate)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    // Written completely to a private temporary file first, then linked into place: a crash
    // never leaves a half-written key, and a key another instance created meanwhile wins.
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = open_private(&tmp)?;
        f.write_all(pem.as_bytes())?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, path)
    })();
    let _ = std::fs::remove_file(&tmp);
    match written {
        Ok(()) => {
            tracing::info!(path = %path.display(), "generated a new SSH host key");
            Ok(key)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => load_or_create(path),
        Err(e) => Err(write_err(e)),
    }
}

#[cfg(unix)]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

#[cfg(not(unix))]
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use russh::keys::Algorithm;

    #[test]
    fn generated_once_then_loaded_and_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ssh_host_ed25519_key");
        let a = load_or_create(&path).unwrap();
        let b = load_or_create(&path).unwrap();
        assert_eq!(a.public_key(), b.public_key());
        assert_eq!(a.algorithm(), Algorithm::Ed25519);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temporary file is left behind");
    }

    #[test]
    fn a_corrupt_key_is_an_error_and_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, b"not a key").unwrap();
        let err = load_or_create(&path).unwrap_err();
        assert!(matches!(err, HostKeyError::Corrupt { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()));
        assert_eq!(std::fs::read(&path).unwrap(), b"not a key");
    }
}
