//! The cache repositories: one bare repository per remote URL under the cache directory,
//! into which the commits read are fetched shallow (so later fetches are incremental).

use super::{display_url, is_commit_id, Auth, GitError, GitReader};
use std::path::Path;

impl GitReader {
    /// Makes sure the cache repository `repo_dir` (whose lock the caller holds) has
    /// `commit`, which `reference` resolved to: created on first use, fetched shallow.
    pub(crate) async fn ensure_fetched(
        &self,
        repo_dir: &Path,
        auth: &Auth,
        url: &str,
        reference: &str,
        commit: &str,
    ) -> Result<(), GitError> {
        if !repo_dir.join("HEAD").exists() {
            tokio::fs::create_dir_all(repo_dir)
                .await
                .map_err(GitError::Io)?;
            self.git(Some(repo_dir), auth, url, &["init", "--quiet", "--bare"])
                .await?;
        }
        if !self.has_commit(repo_dir, auth, url, commit).await {
            remove_stale_locks(repo_dir).await;
            // A branch or tag by name (resolved above, so it exists), else the commit itself.
            let what = if reference.is_empty() {
                "HEAD".to_owned()
            } else if is_commit_id(reference) {
                commit.to_owned()
            } else {
                reference.to_owned()
            };
            self.git(
                Some(repo_dir),
                auth,
                url,
                &[
                    "fetch",
                    "--quiet",
                    "--no-tags",
                    "--depth",
                    "1",
                    "--",
                    url,
                    &what,
                ],
            )
            .await?;
            if !self.has_commit(repo_dir, auth, url, commit).await {
                return Err(GitError::Remote {
                    repo: display_url(url),
                    detail: format!("commit {commit} of ref {reference:?} could not be fetched"),
                });
            }
        }
        Ok(())
    }

    /// Whether the local clone at `repo_dir` holds `commit` (fetched before, or just now).
    async fn has_commit(&self, repo_dir: &Path, auth: &Auth, url: &str, commit: &str) -> bool {
        let object = format!("{commit}^{{commit}}");
        self.git(Some(repo_dir), auth, url, &["cat-file", "-e", &object])
            .await
            .is_ok()
    }
}

/// The lock files git leaves behind when it is killed in a fetch (the server stopped, or a
/// fetch cancelled with its request): each would fail every later fetch of the repository
/// ("Unable to create '…/shallow.lock': File exists") until removed by hand. Only this
/// process writes the cache directory and the caller holds its per-directory lock, so
/// any lock found here is stale.
async fn remove_stale_locks(repo_dir: &Path) {
    for name in [
        "shallow.lock",
        "packed-refs.lock",
        "config.lock",
        "HEAD.lock",
        "FETCH_HEAD.lock",
        "index.lock",
    ] {
        let _ = tokio::fs::remove_file(repo_dir.join(name)).await;
    }
    let mut dirs = vec![repo_dir.join("refs")];
    while let Some(dir) = dirs.pop() {
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        while let Ok(Some(entry)) = entries.next_entry().await {
            let path = entry.path();
            match entry.file_type().await {
                Ok(kind) if kind.is_dir() => dirs.push(path),
                Ok(_) if path.extension().is_some_and(|e| e == "lock") => {
                    let _ = tokio::fs::remove_file(&path).await;
                }
                _ => {}
            }
        }
    }
}
