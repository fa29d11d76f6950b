//! The credential of one git call, as files in a private directory: a one-shot credential
//! helper or an SSH key file, never argv, the environment or a repository's config.

use super::*;

/// The credential of one call, as files in a private directory removed on drop.
pub(crate) struct Auth {
    pub(crate) _dir: Option<tempfile::TempDir>,
    /// `credential.helper` value printing the username and password.
    pub(crate) helper: Option<String>,
    pub(crate) ssh_command: Option<String>,
    /// Configuration holding git to the addresses the guard checked.
    pub(crate) pins: Vec<(&'static str, String)>,
}

impl Auth {
    pub(crate) fn prepare(
        credential: Option<&GitCredential>,
        base: &Path,
    ) -> std::io::Result<Auth> {
        let Some(c) = credential else {
            return Ok(Auth {
                _dir: None,
                helper: None,
                ssh_command: None,
                pins: vec![],
            });
        };
        std::fs::create_dir_all(base)?;
        let dir = tempfile::Builder::new().prefix("cred-").tempdir_in(base)?;
        let mut auth = Auth {
            helper: None,
            ssh_command: None,
            _dir: None,
            pins: vec![],
        };
        match c {
            GitCredential::SshKey {
                private_key,
                known_hosts,
            } => {
                let key = dir.path().join("key");
                let mut text = private_key.trim_end().to_owned();
                text.push('\n');
                write_private(&key, text.as_bytes())?;
                let kh = dir.path().join("known_hosts");
                write_private(&kh, known_hosts.as_deref().unwrap_or("").as_bytes())?;
                let strict = if known_hosts.as_deref().is_some_and(|k| !k.trim().is_empty()) {
                    "yes"
                } else {
                    "accept-new"
                };
                auth.ssh_command = Some(format!(
                    "ssh -F /dev/null -i '{}' -o IdentitiesOnly=yes -o BatchMode=yes \
                     -o UserKnownHostsFile='{}' -o StrictHostKeyChecking={strict}",
                    key.display(),
                    kh.display()
                ));
            }
            other => {
                if let Some((user, password)) = other.username_password() {
                    let file = dir.path().join("credential");
                    write_private(
                        &file,
                        format!("username={user}\npassword={password}\n").as_bytes(),
                    )?;
                    // Answers `get` only; `store`/`erase` are ignored.
                    auth.helper = Some(format!(
                        "!f() {{ test \"$1\" = get && cat '{}'; }}; f",
                        file.display()
                    ));
                }
            }
        }
        auth._dir = Some(dir);
        Ok(auth)
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}
