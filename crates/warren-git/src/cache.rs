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
