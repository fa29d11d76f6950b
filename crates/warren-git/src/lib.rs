//! Reading files from Git repositories for the control plane: a project's devfile through
//! Git's own client (below), and GitOps snapshots in-process through gix ([`snapshot`]),
//! which the relays take often and concurrently and where no program should be spawned.
//!
//! # Why the `git` program
//!
//! Warren talks to repositories through Git's own client, as Argo CD does, rather than a
//! library: it speaks every transport and authentication a forge offers (smart HTTP with
//! tokens or passwords, SSH keys through OpenSSH), behaves exactly as the clone inside the
//! workspace does (same credential-helper protocol), and is what operators already debug
//! with. Each call runs with a clean configuration (no system or user config, no prompts,
//! English messages) and a deadline.
//!
//! # Secrets
//!
//! A credential never appears on a command line, in the environment or in a repository's
//! config: HTTPS credentials reach git through a one-shot credential helper that prints a
//! 0600 file, SSH keys through a 0600 key file named in `GIT_SSH_COMMAND`; both live in a
//! private temporary directory removed when the call ends. Error messages carry git's own
//! `fatal:`/`error:` lines, which never contain the credential (it is not in the URL).
//!
//! # Where the server may connect
//!
//! A project's URL is a user's choice, so before git runs the remote's host is resolved
//! through the server's outbound guard (`warren_netguard`): a loopback, private, link-local
//! or other special-purpose address is refused unless the operator allows it. Over HTTP(S)
//! git then connects to exactly the checked addresses (`http.curloptResolve`), so a name
//! cannot resolve elsewhere a moment later, and follows no redirect (a redirect would be
//! resolved by curl alone). SSH and `git://` are checked the same way, but the connection is
//! resolved again by ssh and git themselves.
//!
//! # Cache
//!
//! Every read first resolves the ref on the remote (`ls-remote`, authenticated, so access is
//! checked each time), then looks the file up by commit: a commit's tree never changes, so
//! what was read once at a commit is served from memory afterwards. Fetched commits are kept
//! in one bare repository per URL under the cache directory, so later fetches are
//! incremental.

mod archive;
mod auth;
mod cache;
pub mod snapshot;

pub use archive::Archive;

use auth::Auth;

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warren_types::git::GitCredential;

/// Entries kept in the by-commit cache before the oldest are dropped.
const CACHE_ENTRIES: usize = 512;
/// Lines of git's stderr an error message keeps.
const ERROR_LINES: usize = 3;

/// Why a repository could not be read. Every message names the repository (its URL without
/// credentials), and the ref and path when they are the problem.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0}")]
    InvalidUrl(String),
    #[error("git is not installed where the server runs; reading repositories needs it")]
    NotInstalled,
    #[error("repository {repo}: ref {reference:?} not found")]
    RefNotFound { repo: String, reference: String },
    #[error(
        "repository {repo}: {} not found at ref {reference:?} (commit {commit})",
        one_of(paths)
    )]
    PathNotFound {
        repo: String,
        reference: String,
        commit: String,
        /// Every path looked for, none of which is a file there.
        paths: Vec<String>,
    },
    #[error("repository {repo}: {path:?} at ref {reference:?} is {size} bytes, more than the {max} bytes allowed")]
    TooLarge {
        repo: String,
        reference: String,
        path: String,
        size: u64,
        max: u64,
    },
    #[error("repository {repo}: directory {path:?} at ref {reference:?} archives to more than the {max} bytes a build context may have")]
    ArchiveTooLarge {
        repo: String,
        reference: String,
        path: String,
        max: u64,
    },
    #[error(
        "repository {repo}: authentication failed (set or fix the project's credentials): {detail}"
    )]
    Auth { repo: String, detail: String },
    #[error("repository {repo}: {detail}")]
    Remote { repo: String, detail: String },
    #[error("repository {repo}: git did not finish within {secs} s")]
    Timeout { repo: String, secs: u64 },
    #[error("repository {repo}: {source}")]
    Refused {
        repo: String,
        #[source]
        source: warren_netguard::GuardError,
    },
    #[error("running git")]
    Io(#[source] std::io::Error),
}

/// Limits of a [`GitReader`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Longest one git command may run.
    pub timeout: Duration,
    /// Largest file [`GitReader::read_file`] returns.
    pub max_file_bytes: u64,
    /// Which addresses remotes may resolve to.
    pub guard: warren_netguard::Guard,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(60),
            max_file_bytes: 1024 * 1024,
            guard: warren_netguard::Guard::default(),
        }
    }
}

/// A repository and how to authenticate to it.
#[derive(Debug, Clone, Copy)]
pub struct Remote<'a> {
    pub url: &'a str,
    pub credential: Option<&'a GitCredential>,
}

/// A file read at a ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAtRef {
    /// The commit the ref resolved to.
    pub commit: String,
    pub contents: Arc<Vec<u8>>,
}

/// `"a"`, `"a" or "b"`, `"a", "b" or "c"`.
fn one_of(paths: &[String]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("{p:?}")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => "no path".into(),
    }
}

/// A commit fetched into the repository's cache directory, and how to reach it.
struct At<'a> {
    repo_dir: &'a Path,
    auth: &'a Auth,
    url: &'a str,
    reference: &'a str,
    commit: &'a str,
}

type CacheKey = (String, String, String);

/// (url, commit, path) → contents, with insertion order for eviction.
#[derive(Debug, Default)]
struct ByCommit {
    map: HashMap<CacheKey, Arc<Vec<u8>>>,
    order: std::collections::VecDeque<CacheKey>,
}

/// Reads files from remote repositories; cheap to clone (shared cache).
#[derive(Debug, Clone)]
pub struct GitReader {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    options: Options,
    cache: Mutex<ByCommit>,
    /// One fetch at a time per repository directory.
    locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
}

/// Checks that the server may fetch `url`: http(s), ssh, git or scp-like `user@host:path`,
/// without credentials in it (they belong in the project's credentials), and never a local
/// path or `file://` (the server must not read its own disk on a user's behalf).
pub fn validate_remote_url(url: &str) -> Result<(), String> {
    // A backslash is a path separator to the URL parser the guard uses and user information
    // to git's curl: `http://a.example\@127.0.0.1/` would be checked as one host and
    // fetched from another.
    if url.starts_with('-')
        || url
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '\\')
    {
        return Err(format!("{url:?} is not a Git URL"));
    }
    if let Ok(u) = url::Url::parse(url) {
        if !["http", "https", "ssh", "git"].contains(&u.scheme()) {
            return Err(format!(
                "scheme {:?} cannot be read by the server (http, https, ssh, git)",
                u.scheme()
            ));
        }
        if carries_credentials(&u) {
            return Err(
                "the URL carries credentials; give them as the project's credentials instead, \
                 which are stored encrypted and never shown"
                    .into(),
            );
        }
        return Ok(());
    }
    match url.split_once(':') {
        Some((host, path)) if host.contains('@') && !path.is_empty() && !host.contains('/') => {
            Ok(())
        }
        _ => Err(format!("{url:?} is not a Git URL")),
    }
}

/// Whether a URL holds a secret: a password, or any user name over HTTP(S) (a bare token).
/// SSH user names (`git@`) are not secrets.
pub fn carries_credentials(u: &url::Url) -> bool {
    u.password().is_some() || (matches!(u.scheme(), "http" | "https") && !u.username().is_empty())
}

/// The URL as messages show it: without any user information.
pub fn display_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() || !u.username().is_empty() => {
            let _ = u.set_password(None);
            if matches!(u.scheme(), "http" | "https") {
                let _ = u.set_username("");
            }
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The scheme, host (IPv6 in brackets) and port a remote URL connects to; scp-like
/// `user@host:path` is SSH on port 22.
fn remote_host(url: &str) -> Option<(String, String, u16)> {
    if let Ok(u) = url::Url::parse(url) {
        let host = match u.host()? {
            url::Host::Ipv6(ip) => format!("[{ip}]"),
            other => other.to_string(),
        };
        let port = u.port().unwrap_or(match u.scheme() {
            "https" => 443,
            "http" => 80,
            "ssh" => 22,
            "git" => 9418,
            _ => return None,
        });
        return Some((u.scheme().to_owned(), host, port));
    }
    let (user_host, _) = url.split_once(':')?;
    let (_, host) = user_host.rsplit_once('@')?;
    (!host.is_empty()).then(|| ("ssh".to_owned(), host.to_owned(), 22))
}

fn is_commit_id(r: &str) -> bool {
    r.len() == 40 && r.bytes().all(|b| b.is_ascii_hexdigit())
}

impl GitReader {
    /// A reader keeping its repositories under `dir` (created when missing).
    pub fn new(dir: impl Into<PathBuf>, options: Options) -> GitReader {
        GitReader {
            inner: Arc::new(Inner {
                dir: dir.into(),
                options,
                cache: Mutex::new(ByCommit::default()),
                locks: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The commit `reference` (a branch, a tag, `HEAD` or empty for the default branch, or a
    /// full commit id) points at on the remote.
    pub async fn resolve(&self, remote: Remote<'_>, reference: &str) -> Result<String, GitError> {
        validate_remote_url(remote.url).map_err(GitError::InvalidUrl)?;
        let mut auth = Auth::prepare(remote.credential, &self.inner.dir).map_err(GitError::Io)?;
        auth.pins = self.pins(remote.url).await?;
        self.resolve_with(&auth, remote.url, reference).await
    }

    /// [`GitReader::resolve`] with the credential already prepared.
    async fn resolve_with(
        &self,
        auth: &Auth,
        url: &str,
        reference: &str,
    ) -> Result<String, GitError> {
        if is_commit_id(reference) {
            return Ok(reference.to_ascii_lowercase());
        }
        let pattern = if reference.is_empty() {
            "HEAD"
        } else {
            reference
        };
        let out = self
            .git(
                None,
                auth,
                url,
                &["ls-remote", "--", url, pattern, &format!("{pattern}^{{}}")],
            )
            .await?;
        let refs: Vec<(&str, &str)> = out
            .lines()
            .filter_map(|l| l.split_once('\t'))
            .map(|(sha, name)| (name, sha))
            .collect();
        let find = |name: &str| refs.iter().find(|(n, _)| *n == name).map(|(_, s)| *s);
        let found = if pattern == "HEAD" {
            find("HEAD")
        } else if pattern.starts_with("refs/") {
            find(&format!("{pattern}^{{}}")).or_else(|| find(pattern))
        } else {
            find(&format!("refs/heads/{pattern}"))
                .or_else(|| find(&format!("refs/tags/{pattern}^{{}}")))
                .or_else(|| find(&format!("refs/tags/{pattern}")))
        };
        found
            .map(str::to_owned)
            .ok_or_else(|| GitError::RefNotFound {
                repo: display_url(url),
                reference: reference.to_owned(),
            })
    }

    /// The file at `path` in the repository at `reference`, and the commit it was read at.
    pub async fn read_file(
        &self,
        remote: Remote<'_>,
        reference: &str,
        path: &str,
    ) -> Result<FileAtRef, GitError> {
        Ok(self.read_first(remote, reference, &[path]).await?.1)
    }

    /// The first of `paths` that is a file in the repository at `reference` (its index and
    /// the file): one resolve and at most one fetch for all of them, so looking for a devfile
    /// and then a dev container configuration costs the remote no more than one read. When
    /// none is there, the error names them all.
    pub async fn read_first(
        &self,
        remote: Remote<'_>,
        reference: &str,
        paths: &[&str],
    ) -> Result<(usize, FileAtRef), GitError> {
        validate_remote_url(remote.url).map_err(GitError::InvalidUrl)?;
        // One credential directory for the whole read: resolving, fetching, reading.
        let mut auth = Auth::prepare(remote.credential, &self.inner.dir).map_err(GitError::Io)?;
        auth.pins = self.pins(remote.url).await?;
        let commit = self.resolve_with(&auth, remote.url, reference).await?;
        let paths: Vec<String> = paths
            .iter()
            .map(|p| p.trim_start_matches("./").to_owned())
            .collect();
        // Only the first can be answered from memory: an earlier path's absence is not kept.
        if let Some(first) = paths.first() {
            let key = (remote.url.to_owned(), commit.clone(), first.clone());
            if let Some(hit) = self.cached(&key) {
                return Ok((
                    0,
                    FileAtRef {
                        commit,
                        contents: hit,
                    },
                ));
            }
        }
        let repo_dir = self.repo_dir(remote.url);
        let lock = self.lock_for(&repo_dir);
        let _guard = lock.lock().await;
        self.ensure_fetched(&repo_dir, &auth, remote.url, reference, &commit)
            .await?;
        for (i, path) in paths.iter().enumerate() {
            let at = At {
                repo_dir: &repo_dir,
                auth: &auth,
                url: remote.url,
                reference,
                commit: &commit,
            };
            match self.blob_at(&at, path).await {
                Ok(contents) => {
                    let key = (remote.url.to_owned(), commit.clone(), path.clone());
                    self.remember(key, contents.clone());
                    return Ok((i, FileAtRef { commit, contents }));
                }
                Err(GitError::PathNotFound { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(GitError::PathNotFound {
            repo: display_url(remote.url),
            reference: reference.to_owned(),
            commit: commit.clone(),
            paths,
        })
    }

    /// The blob at `path` of an already fetched commit, within the size limit.
    async fn blob_at(&self, at: &At<'_>, path: &str) -> Result<Arc<Vec<u8>>, GitError> {
        let (repo_dir, auth, url, reference, commit) =
            (at.repo_dir, at.auth, at.url, at.reference, at.commit);
        let path = path.to_owned();
        let object = format!("{commit}:{path}");
        let not_found = || GitError::PathNotFound {
            repo: display_url(url),
            reference: reference.to_owned(),
            commit: commit.to_owned(),
            paths: vec![path.clone()],
        };
        let kind = self
            .git(Some(repo_dir), auth, url, &["cat-file", "-t", &object])
            .await
            .map_err(|_| not_found())?;
        if kind.trim() != "blob" {
            return Err(not_found());
        }
        let size: u64 = self
            .git(Some(repo_dir), auth, url, &["cat-file", "-s", &object])
            .await?
            .trim()
            .parse()
            .unwrap_or(u64::MAX);
        let max = self.inner.options.max_file_bytes;
        if size > max {
            return Err(GitError::TooLarge {
                repo: display_url(url),
                reference: reference.to_owned(),
                path,
                size,
                max,
            });
        }
        let contents = Arc::new(
            self.git_bytes(Some(repo_dir), auth, url, &["cat-file", "blob", &object])
                .await?,
        );
        Ok(contents)
    }

    /// Checks where `url`'s host resolves and returns the git configuration that holds git
    /// to those addresses (HTTP(S)) and to no redirect.
    async fn pins(&self, url: &str) -> Result<Vec<(&'static str, String)>, GitError> {
        let Some((scheme, host, port)) = remote_host(url) else {
            return Err(GitError::InvalidUrl(format!("{url:?} is not a Git URL")));
        };
        let refused = |source| GitError::Refused {
            repo: display_url(url),
            source,
        };
        let addrs = self
            .inner
            .options
            .guard
            .resolve(&host, port)
            .await
            .map_err(refused)?;
        let mut pins = vec![("http.followRedirects", "false".to_owned())];
        let literal = host.starts_with('[') || host.parse::<std::net::IpAddr>().is_ok();
        if matches!(scheme.as_str(), "http" | "https") && !literal {
            let list: Vec<String> = addrs
                .iter()
                .map(|a| match a.ip() {
                    std::net::IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                })
                .collect();
            pins.push((
                "http.curloptResolve",
                format!("{host}:{port}:{}", list.join(",")),
            ));
        }
        Ok(pins)
    }

    fn cached(&self, key: &CacheKey) -> Option<Arc<Vec<u8>>> {
        let cache = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.map.get(key).cloned()
    }

    fn remember(&self, key: CacheKey, value: Arc<Vec<u8>>) {
        let mut cache = self.inner.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.map.insert(key.clone(), value).is_none() {
            cache.order.push_back(key);
        }
        while cache.order.len() > CACHE_ENTRIES {
            if let Some(old) = cache.order.pop_front() {
                cache.map.remove(&old);
            }
        }
    }

    fn repo_dir(&self, url: &str) -> PathBuf {
        let digest = hex::encode(Sha256::digest(url.as_bytes()));
        self.inner.dir.join("repos").join(&digest[..24])
    }

    fn lock_for(&self, dir: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(dir.to_owned()).or_default().clone()
    }

    async fn git(
        &self,
        cwd: Option<&Path>,
        auth: &Auth,
        url: &str,
        args: &[&str],
    ) -> Result<String, GitError> {
        let out = self.git_bytes(cwd, auth, url, args).await?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    async fn git_bytes(
        &self,
        cwd: Option<&Path>,
        auth: &Auth,
        url: &str,
        args: &[&str],
    ) -> Result<Vec<u8>, GitError> {
        let child = spawned(self.command(cwd, auth, args).stdout(Stdio::piped()))?;
        let secs = self.inner.options.timeout.as_secs();
        let out = match tokio::time::timeout(self.inner.options.timeout, child.wait_with_output())
            .await
        {
            Ok(r) => r.map_err(GitError::Io)?,
            // Dropping the child (kill_on_drop) ends it.
            Err(_) => {
                return Err(GitError::Timeout {
                    repo: display_url(url),
                    secs,
                })
            }
        };
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(classify(url, &String::from_utf8_lossy(&out.stderr)))
    }

    /// git with `args`, a clean configuration, no prompt and only `auth`'s credential;
    /// stderr piped, stdout for the caller to choose.
    fn command(&self, cwd: Option<&Path>, auth: &Auth, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new("git");
        cmd.args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_PROTOCOL_FROM_USER", "0")
            .env("GCM_INTERACTIVE", "never")
            .env("LC_ALL", "C")
            .env_remove("GIT_ASKPASS")
            .env_remove("SSH_ASKPASS")
            .env_remove("GIT_DIR")
            .env_remove("GIT_SSH")
            .env_remove("GIT_SSH_COMMAND");
        // A proxy resolves names itself, out of the guard's sight (and ignores the pins).
        for var in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
        ] {
            cmd.env_remove(var);
        }
        if let Some(d) = cwd {
            cmd.current_dir(d);
        } else {
            cmd.current_dir(std::env::temp_dir());
        }
        // Only network transports, and only the credential helper given here.
        let mut config: Vec<(&str, String)> = vec![
            ("protocol.allow", "never".into()),
            ("protocol.https.allow", "always".into()),
            ("protocol.http.allow", "always".into()),
            ("protocol.ssh.allow", "always".into()),
            ("protocol.git.allow", "always".into()),
            ("credential.helper", String::new()),
            ("core.askPass", String::new()),
            ("http.proxy", String::new()),
        ];
        if let Some(helper) = &auth.helper {
            config.push(("credential.helper", helper.clone()));
        }
        config.extend(auth.pins.iter().cloned());
        cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (k, v)) in config.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), k);
            cmd.env(format!("GIT_CONFIG_VALUE_{i}"), v);
        }
        if let Some(ssh) = &auth.ssh_command {
            cmd.env("GIT_SSH_COMMAND", ssh);
        } else {
            cmd.env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes -F /dev/null");
        }
        cmd
    }
}

/// Starts git; its absence is named as such.
fn spawned(cmd: &mut tokio::process::Command) -> Result<tokio::process::Child, GitError> {
    match cmd.spawn() {
        Ok(c) => Ok(c),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(GitError::NotInstalled),
        Err(e) => Err(GitError::Io(e)),
    }
}

/// Turns git's stderr into an error naming the repository.
fn classify(url: &str, stderr: &str) -> GitError {
    let lines: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let important: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("fatal:") || l.starts_with("error:") || l.contains("denied"))
        .collect();
    let chosen = if important.is_empty() {
        &lines
    } else {
        &important
    };
    let mut detail = chosen[chosen.len().saturating_sub(ERROR_LINES)..].join("; ");
    if detail.is_empty() {
        detail = "git failed without a message".into();
    }
    if detail.len() > 600 {
        let mut end = 600;
        while !detail.is_char_boundary(end) {
            end -= 1;
        }
        detail.truncate(end);
    }
    let lower = stderr.to_ascii_lowercase();
    let auth = [
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "permission denied (publickey",
        "invalid username or password",
        "http basic: access denied",
        "the requested url returned error: 401",
        "the requested url returned error: 403",
    ]
    .iter()
    .any(|m| lower.contains(m));
    let repo = display_url(url);
    if auth {
        GitError::Auth { repo, detail }
    } else {
        GitError::Remote { repo, detail }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_the_server_may_fetch() {
        for ok in [
            "https://git.example.com/a/b.git",
            "http://127.0.0.1:8080/r.git",
            "ssh://git@host:2222/r.git",
            "git@github.com:org/repo.git",
            "git://host/r",
        ] {
            assert_eq!(validate_remote_url(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("file:///etc", "cannot be read by the server"),
            ("/srv/repo.git", "not a Git URL"),
            ("ext::sh -c touch% /tmp/x", "not a Git URL"),
            ("-uhttps://x", "not a Git URL"),
            // Checked as host a.example by the guard, fetched from 127.0.0.1 by git's curl.
            ("http://a.example\\@127.0.0.1:1/x", "not a Git URL"),
            (
                "https://user:glpat-123@git.example.com/r.git",
                "carries credentials",
            ),
            (
                "https://glpat-123@git.example.com/r.git",
                "carries credentials",
            ),
        ] {
            let e = validate_remote_url(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn messages_never_show_user_information() {
        assert_eq!(
            display_url("https://ann:secret@git.example.com/r.git"),
            "https://git.example.com/r.git"
        );
        assert_eq!(display_url("ssh://git@host/r.git"), "ssh://git@host/r.git");
    }

    #[test]
    fn git_errors_are_classified() {
        let e = classify(
            "https://h/r.git",
            "remote: HTTP Basic: Access denied\nfatal: Authentication failed for 'https://h/r.git/'\n",
        );
        assert!(matches!(e, GitError::Auth { .. }), "{e}");
        let e = classify(
            "https://h/r.git",
            "fatal: repository 'https://h/r.git/' not found\n",
        );
        assert!(
            e.to_string()
                .ends_with("fatal: repository 'https://h/r.git/' not found"),
            "{e}"
        );
    }
}
