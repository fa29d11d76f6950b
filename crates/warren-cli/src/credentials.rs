//! Where the CLI keeps the server URL and token: `$WARREN_HOME/credentials.toml`, mode 0600.
//!
//! `WARREN_URL` and `WARREN_TOKEN` override the file field by field, so scripts and CI can
//! run without ever writing a secret to disk.

use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use warren_types::TokenId;

/// Environment variable naming Warren's home directory (database, keys, CLI credentials).
pub const HOME_ENV: &str = "WARREN_HOME";
pub const URL_ENV: &str = "WARREN_URL";
pub const TOKEN_ENV: &str = "WARREN_TOKEN";
pub const FILE_NAME: &str = "credentials.toml";

/// The stored sign-in: one server per `WARREN_HOME`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Credentials {
    /// Base URL of the server, e.g. `https://warren.example.com`.
    pub url: String,
    /// A personal access token.
    pub token: String,
    /// Who the token belongs to, for messages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Set when `warren login` created the token, so `warren logout` can revoke it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<TokenId>,
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error("cannot find a data directory for WARREN_HOME; set WARREN_HOME")]
    NoHome,
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid credentials file; run `warren login` again")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("encoding credentials")]
    Encode(#[source] toml::ser::Error),
}

/// `WARREN_HOME` when set (and not empty), else `<data dir>/warren`.
pub fn warren_home(env_value: Option<OsString>) -> Result<PathBuf, CredentialsError> {
    match env_value {
        Some(v) if !v.is_empty() => Ok(PathBuf::from(v)),
        _ => dirs::data_dir()
            .map(|d| d.join("warren"))
            .ok_or(CredentialsError::NoHome),
    }
}

/// The credentials file of the current environment.
pub fn default_path() -> Result<PathBuf, CredentialsError> {
    Ok(warren_home(std::env::var_os(HOME_ENV))?.join(FILE_NAME))
}

/// Reads the file; `None` when there is none.
pub fn load(path: &Path) -> Result<Option<Credentials>, CredentialsError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(CredentialsError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|source| CredentialsError::Parse {
            path: path.to_owned(),
            source,
        })
}

/// Writes the file atomically (temporary file + rename), readable by its owner only; creates
/// the directory with mode 0700 when it does not exist.
pub fn save(path: &Path, creds: &Credentials) -> Result<(), CredentialsError> {
    let text = toml::to_string(creds).map_err(CredentialsError::Encode)?;
    let write_err = |p: &Path| {
        let p = p.to_owned();
        move |source| CredentialsError::Write { path: p, source }
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(write_err(dir))?;
    }
    let tmp = path.with_extension("toml.tmp");
    // A leftover from an interrupted run may have other permissions; start afresh.
    let _ = std::fs::remove_file(&tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&tmp).map_err(write_err(&tmp))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(write_err(&tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(write_err(path))
}

/// Deletes the file; `false` when there was none.
pub fn remove(path: &Path) -> Result<bool, CredentialsError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(CredentialsError::Write {
            path: path.to_owned(),
            source,
        }),
    }
}

/// A warning when others than the owner can read the file (someone copied it around).
pub fn permission_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode();
        if mode & 0o077 != 0 {
            return Some(format!(
                "{} is readable by others (mode {:o}); run `chmod 600` on it",
                path.display(),
                mode & 0o777
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    None
}

/// Applies the `WARREN_URL` / `WARREN_TOKEN` overrides to what the file holds; `None` when
/// either the URL or the token is missing from both.
pub fn resolve(
    file: Option<Credentials>,
    env_url: Option<String>,
    env_token: Option<String>,
) -> Option<Credentials> {
    let env_url = env_url.filter(|s| !s.is_empty());
    let env_token = env_token.filter(|s| !s.is_empty());
    let (url, token, username, token_id) = match file {
        Some(c) => {
            // A token from the environment may belong to someone else: drop the file's
            // username and token id rather than show or revoke the wrong ones.
            let same_token = env_token.is_none();
            (
                Some(c.url),
                Some(c.token),
                c.username.filter(|_| same_token),
                c.token_id.filter(|_| same_token),
            )
        }
        None => (None, None, None, None),
    };
    Some(Credentials {
        url: env_url.or(url)?,
        token: env_token.or(token)?,
        username,
        token_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds() -> Credentials {
        Credentials {
            url: "http://127.0.0.1:8080".into(),
            token: "wrn_secret".into(),
            username: Some("admin".into()),
            token_id: Some(TokenId(3)),
        }
    }

    #[test]
    fn saved_file_and_new_directory_are_private_and_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("home/warren").join(FILE_NAME);
        save(&path, &creds()).unwrap();
        assert_eq!(load(&path).unwrap(), Some(creds()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode(&path), 0o600);
            assert_eq!(mode(path.parent().unwrap()), 0o700);
            assert_eq!(permission_warning(&path), None);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            let warning = permission_warning(&path).unwrap();
            assert!(warning.contains("644"), "{warning}");
            // Saving again replaces the file with a private one.
            save(&path, &creds()).unwrap();
            assert_eq!(mode(&path), 0o600);
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("url = \"http://127.0.0.1:8080\""), "{text}");
        assert!(remove(&path).unwrap());
        assert!(!remove(&path).unwrap());
        assert_eq!(load(&path).unwrap(), None);
    }

    #[test]
    fn a_broken_file_is_an_error_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(FILE_NAME);
        std::fs::write(&path, "url = 3\n").unwrap();
        let err = load(&path).unwrap_err();
        assert!(err.to_string().contains(FILE_NAME), "{err}");
    }

    #[test]
    fn environment_overrides_the_file() {
        assert_eq!(resolve(None, None, None), None);
        assert_eq!(resolve(None, Some("http://x".into()), None), None);
        let only_env = resolve(None, Some("http://x".into()), Some("t".into())).unwrap();
        assert_eq!(
            (only_env.url.as_str(), only_env.token.as_str()),
            ("http://x", "t")
        );

        let file = resolve(Some(creds()), None, Some(String::new())).unwrap();
        assert_eq!(file, creds());

        let env_token = resolve(Some(creds()), None, Some("other".into())).unwrap();
        assert_eq!(env_token.token, "other");
        assert_eq!(env_token.url, "http://127.0.0.1:8080");
        assert_eq!(env_token.token_id, None);
        assert_eq!(env_token.username, None);

        let env_url = resolve(Some(creds()), Some("http://y".into()), None).unwrap();
        assert_eq!(env_url.url, "http://y");
        assert_eq!(env_url.token_id, Some(TokenId(3)));
    }

    #[test]
    fn warren_home_prefers_the_environment() {
        assert_eq!(
            warren_home(Some("/tmp/wh".into())).unwrap(),
            PathBuf::from("/tmp/wh")
        );
        if let Some(d) = dirs::data_dir() {
            assert_eq!(warren_home(Some("".into())).unwrap(), d.join("warren"));
            assert_eq!(warren_home(None).unwrap(), d.join("warren"));
        }
    }
}
