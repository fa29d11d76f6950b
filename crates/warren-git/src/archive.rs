//! A directory of a repository at a ref as a tar archive: the build context of an image a
//! workspace builds before it starts. git's own `archive` writes it, into an unnamed
//! temporary file in the cache directory (gone when the file is dropped), counting bytes as
//! they come so a huge directory is cut off at the limit instead of filling the disk.

use super::{display_url, spawned, validate_remote_url, Auth, GitError, GitReader, Remote};
use std::io::Seek;
use std::process::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A directory archived at a commit.
#[derive(Debug)]
pub struct Archive {
    /// The commit the ref resolved to.
    pub commit: String,
    /// The id of the directory's tree at that commit: equal ids, equal contents.
    pub tree: String,
    /// The tar archive, positioned at its start.
    pub file: std::fs::File,
    /// Its size in bytes.
    pub len: u64,
}

impl GitReader {
    /// Directory `dir` (relative to the repository's root; `.` is the root) at
    /// `reference`, as a tar archive whose paths are relative to `dir`; at most `max_bytes`.
    pub async fn archive(
        &self,
        remote: Remote<'_>,
        reference: &str,
        dir: &str,
        max_bytes: u64,
    ) -> Result<Archive, GitError> {
        validate_remote_url(remote.url).map_err(GitError::InvalidUrl)?;
        let mut auth = Auth::prepare(remote.credential, &self.inner.dir).map_err(GitError::Io)?;
        auth.pins = self.pins(remote.url).await?;
        let commit = self.resolve_with(&auth, remote.url, reference).await?;
        let repo_dir = self.repo_dir(remote.url);
        let lock = self.lock_for(&repo_dir);
        let _guard = lock.lock().await;
        self.ensure_fetched(&repo_dir, &auth, remote.url, reference, &commit)
            .await?;
        let dir = dir.trim_matches('/');
        let tree = if dir.is_empty() || dir == "." {
            commit.clone()
        } else {
            format!("{commit}:{dir}")
        };
        let not_found = || GitError::PathNotFound {
            repo: display_url(remote.url),
            reference: reference.to_owned(),
            commit: commit.clone(),
            paths: vec![format!("{dir}/")],
        };
        let kind = self
            .git(
                Some(&repo_dir),
                &auth,
                remote.url,
                &["cat-file", "-t", &tree],
            )
            .await
            .map_err(|_| not_found())?;
        if !matches!(kind.trim(), "tree" | "commit") {
            return Err(not_found());
        }
        let tree_id = self
            .git(
                Some(&repo_dir),
                &auth,
                remote.url,
                // `<commit>:<dir>` names a tree already (a suffix would be part of the path).
                &[
                    "rev-parse",
                    "--verify",
                    &if tree == commit {
                        format!("{commit}^{{tree}}")
                    } else {
                        tree.clone()
                    },
                ],
            )
            .await?
            .trim()
            .to_owned();
        let file = tempfile::tempfile_in(&self.inner.dir).map_err(GitError::Io)?;
        let mut cmd = self.command(Some(&repo_dir), &auth, &["archive", "--format=tar", &tree]);
        let mut child = spawned(cmd.stdout(Stdio::piped()))?;
        let too_large = || GitError::ArchiveTooLarge {
            repo: display_url(remote.url),
            reference: reference.to_owned(),
            path: dir.to_owned(),
            max: max_bytes,
        };
        let copy = async {
            let mut out = child
                .stdout
                .take()
                .ok_or_else(|| GitError::Io(std::io::Error::other("git archive has no output")))?;
            let mut sink = tokio::fs::File::from_std(file.try_clone().map_err(GitError::Io)?);
            let mut buf = vec![0u8; 64 * 1024];
            let mut len = 0u64;
            loop {
                let n = out.read(&mut buf).await.map_err(GitError::Io)?;
                if n == 0 {
                    break;
                }
                len += n as u64;
                if len > max_bytes {
                    return Err(too_large());
                }
                sink.write_all(&buf[..n]).await.map_err(GitError::Io)?;
            }
            sink.flush().await.map_err(GitError::Io)?;
            let status = child.wait().await.map_err(GitError::Io)?;
            if !status.success() {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err).await;
                }
                return Err(super::classify(remote.url, &err));
            }
            Ok(len)
        };
        let secs = self.inner.options.timeout.as_secs();
        // The child is killed when dropped, on every early return.
        let len = tokio::time::timeout(self.inner.options.timeout, copy)
            .await
            .map_err(|_| GitError::Timeout {
                repo: display_url(remote.url),
                secs,
            })??;
        let mut file = file;
        file.rewind().map_err(GitError::Io)?;
        Ok(Archive {
            commit,
            tree: tree_id,
            file,
            len,
        })
    }
}
