//! Credentials for a project's Git repository: what the API accepts (write-only), what the
//! server keeps sealed, and what a workspace's credential helper and the server's reads use.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Username sent with a bare token when none is given: forges accept any username with a
/// token (GitLab documents `oauth2`, GitHub and Gitea ignore it).
pub const DEFAULT_TOKEN_USERNAME: &str = "oauth2";

/// How Warren authenticates to a project's repository. Never returned by the API, never
/// logged (`Debug` shows the kind only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GitCredential {
    /// An access token over HTTPS (sent as the password).
    Token {
        token: String,
        /// Sent as the username; `oauth2` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
    },
    /// A username and password over HTTPS.
    Basic { username: String, password: String },
    /// A private key for `ssh://` and `user@host:path` URLs (OpenSSH format).
    SshKey {
        private_key: String,
        /// `known_hosts` lines for the server; without them the first key seen is trusted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        known_hosts: Option<String>,
    },
}

impl std::fmt::Debug for GitCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GitCredential::{}", self.kind())
    }
}

impl GitCredential {
    /// `token`, `basic` or `ssh_key`: what the API shows of a stored credential.
    pub fn kind(&self) -> &'static str {
        match self {
            GitCredential::Token { .. } => "token",
            GitCredential::Basic { .. } => "basic",
            GitCredential::SshKey { .. } => "ssh_key",
        }
    }

    /// The HTTPS username and password, for credential helpers; `None` for SSH keys.
    pub fn username_password(&self) -> Option<(&str, &str)> {
        match self {
            GitCredential::Token { token, username } => Some((
                username.as_deref().unwrap_or(DEFAULT_TOKEN_USERNAME),
                token.as_str(),
            )),
            GitCredential::Basic { username, password } => Some((username, password)),
            GitCredential::SshKey { .. } => None,
        }
    }

    /// Checks the fields; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let line = |field: &str, v: &str, max: usize| -> Result<(), String> {
            if v.is_empty() {
                return Err(format!("{field}: must not be empty"));
            }
            if v.len() > max {
                return Err(format!("{field}: at most {max} bytes"));
            }
            if v.chars().any(|c| c.is_control()) {
                return Err(format!(
                    "{field}: must be one line without control characters"
                ));
            }
            Ok(())
        };
        match self {
            GitCredential::Token { token, username } => {
                line("token", token, 4096)?;
                if let Some(u) = username {
                    line("username", u, 256)?;
                }
            }
            GitCredential::Basic { username, password } => {
                line("username", username, 256)?;
                line("password", password, 4096)?;
            }
            GitCredential::SshKey {
                private_key,
                known_hosts,
            } => {
                let key = private_key.trim();
                if !(key.starts_with("-----BEGIN ") && key.contains("PRIVATE KEY-----")) {
                    return Err(
                        "private_key: must be a private key in OpenSSH or PEM format \
                         (-----BEGIN … PRIVATE KEY-----)"
                            .into(),
                    );
                }
                if private_key.len() > 64 * 1024 {
                    return Err("private_key: at most 64 KiB".into());
                }
                if known_hosts.as_ref().is_some_and(|k| k.len() > 64 * 1024) {
                    return Err("known_hosts: at most 64 KiB".into());
                }
            }
        }
        Ok(())
    }
}

/// Checks a branch, tag or commit id as Warren accepts them (no option-like, ranged or
/// wildcard forms); the message quotes the ref.
pub fn validate_ref(r: &str) -> Result<(), String> {
    let ok = !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.contains("..")
        && r.chars()
            .all(|c| c.is_ascii_graphic() && !"~^:?*[\\".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{r:?} is not a valid git ref"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let c = GitCredential::Basic {
            username: "ann".into(),
            password: "hunter2-secret".into(),
        };
        assert_eq!(format!("{c:?}"), "GitCredential::basic");
    }

    #[test]
    fn wire_form_and_validation() {
        let c: GitCredential =
            serde_json::from_str(r#"{"kind": "token", "token": "glpat-abc"}"#).unwrap();
        assert_eq!(c.username_password(), Some(("oauth2", "glpat-abc")));
        assert!(serde_json::from_str::<GitCredential>(r#"{"kind": "token"}"#).is_err());
        assert!(serde_json::from_str::<GitCredential>(
            r#"{"kind": "token", "token": "a", "x": 1}"#
        )
        .is_err());
        let bad = GitCredential::Token {
            token: "a\nb".into(),
            username: None,
        };
        assert!(bad.validate().unwrap_err().starts_with("token:"));
        let key = GitCredential::SshKey {
            private_key: "not a key".into(),
            known_hosts: None,
        };
        assert!(key.validate().unwrap_err().starts_with("private_key:"));
    }
}
