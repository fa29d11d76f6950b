//! The CLI's own SSH key, so `warren ws ssh` (and the blocks `ws ssh-config` writes for VS Code
//! Remote-SSH and JetBrains Gateway) work on first use, with no key set up beforehand — as
//! `coder ssh` needs none.
//!
//! The key is made once per signed-in user in Warren's home (`ssh/id_ed25519_<user>`, owner
//! only, by `ssh-keygen`, which comes with the `ssh` the CLI runs) and registered with the
//! server as that user's key the first time it is needed, saying so. It is offered alone
//! (`IdentitiesOnly`): a key agent holding many keys would otherwise use up the proxy's
//! attempts before it. The user's own keys and `~/.ssh` are never touched.

use crate::ssh_cmd::quoted;
use crate::CliError;
use std::path::{Path, PathBuf};
use warren_client::Client;
use warren_types::api::AddSshKeyRequest;

/// The `ssh-keygen` program; `WARREN_SSH_KEYGEN` overrides it (tests, another client).
pub const SSH_KEYGEN_ENV: &str = "WARREN_SSH_KEYGEN";

/// The key's file for `username` in Warren's home `home`.
pub fn key_path(home: &Path, username: &str) -> PathBuf {
    let safe: String = username
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    home.join("ssh").join(format!("id_ed25519_{safe}"))
}

/// The `ssh` options that offer the key alone.
pub fn options(key: &Path) -> Vec<String> {
    vec![
        format!("IdentityFile={}", quoted(key)),
        "IdentitiesOnly=yes".into(),
    ]
}

/// The lines a `Host` block gets for the key.
pub fn block_lines(key: &Path) -> String {
    format!("    IdentityFile {}\n    IdentitiesOnly yes\n", quoted(key))
}

/// The key of the signed-in user, made and registered when it is not yet; returns its
/// private file.
pub async fn ensure(c: &Client) -> Result<PathBuf, CliError> {
    let home = crate::credentials::default_path()
        .map_err(|e| CliError::Failed(format!("finding Warren's home: {e}")))?
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| CliError::Failed("Warren's home has no folder".into()))?;
    let me = c.me().await?;
    let key = key_path(&home, &me.username);
    let public = make(&key, &me.username)?;
    let ours = key_words(&public);
    let registered = c.list_ssh_keys().await?;
    if !registered.iter().any(|k| key_words(&k.public_key) == ours) {
        let added = c
            .add_ssh_key(&AddSshKeyRequest {
                public_key: public.trim().to_owned(),
                name: Some(format!("warren CLI ({})", key.display())),
            })
            .await
            .map_err(|e| {
                CliError::Failed(format!(
                    "registering the CLI's SSH key {}: {e}",
                    key.display()
                ))
            })?;
        eprintln!(
            "registered the CLI's SSH key {} as yours ({}); `warren ssh-key list` shows it",
            key.display(),
            added.fingerprint
        );
    }
    Ok(key)
}

/// `algorithm base64` of a public key line, without its comment.
fn key_words(line: &str) -> Option<(String, String)> {
    let mut w = line.split_whitespace();
    Some((w.next()?.to_owned(), w.next()?.to_owned()))
}

/// Makes the key pair at `key` unless it exists; returns the public line.
fn make(key: &Path, username: &str) -> Result<String, CliError> {
    let public_file = key.with_extension("pub");
    let failed = |what: &str, e: &dyn std::fmt::Display| {
        CliError::Failed(format!("{what} {}: {e}", key.display()))
    };
    if key.exists() {
        return std::fs::read_to_string(&public_file)
            .map_err(|e| failed("reading the public half of", &e));
    }
    let dir = key.parent().unwrap_or(Path::new("."));
    crate::ssh_cmd::create_private_dir(dir).map_err(|e| failed("making the folder of", &e))?;
    let program = std::env::var(SSH_KEYGEN_ENV)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "ssh-keygen".into());
    let out = std::process::Command::new(&program)
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-C")
        .arg(format!("warren-cli {username}"))
        .arg("-f")
        .arg(key)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                CliError::Failed(format!(
                    "`{program}` was not found to make the CLI's SSH key; install an OpenSSH client (Debian/Ubuntu: openssh-client), point {SSH_KEYGEN_ENV} at one, or register a key of yours with `warren ssh-key add`"
                ))
            } else {
                failed(&format!("running `{program}` for"), &e)
            }
        })?;
    if !out.status.success() {
        let _ = std::fs::remove_file(key);
        return Err(failed(
            &format!("`{program}` could not make"),
            &String::from_utf8_lossy(&out.stderr).trim(),
        ));
    }
    std::fs::read_to_string(&public_file).map_err(|e| failed("reading the public half of", &e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_per_user_and_its_name_stays_a_file_name() {
        let home = Path::new("/h/warren");
        assert_eq!(
            key_path(home, "alice"),
            Path::new("/h/warren/ssh/id_ed25519_alice")
        );
        assert_eq!(
            key_path(home, "../x y@corp"),
            Path::new("/h/warren/ssh/id_ed25519_.._x_y_corp")
        );
        assert_eq!(
            options(Path::new("/a b/k")),
            ["IdentityFile=\"/a b/k\"", "IdentitiesOnly=yes"]
        );
        assert_eq!(
            key_words("ssh-ed25519 AAAA comment here"),
            Some(("ssh-ed25519".into(), "AAAA".into()))
        );
        assert_eq!(key_words("garbage"), None);
    }
}
