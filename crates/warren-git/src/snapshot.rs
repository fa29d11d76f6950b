//! Snapshots of a repository at a ref, for GitOps: the relay resolves a ref to a commit
//! (listing the remote's refs, nothing fetched), fetches only when it changed (shallow, into
//! one bare cache repository per URL), and reads the files a source selects from the commit's
//! tree. In-process through gix: no `git` program runs, and a credential never leaves memory
//! except an SSH key, which OpenSSH reads from a 0600 file in a private temporary directory.
//!
//! `file://` repositories are opened where they are (read-only) instead of fetched.
//!
//! Blocking: callers run these on a blocking thread (`tokio::task::spawn_blocking`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use gix::bstr::ByteSlice;
use gix::remote::Direction;
use sha2::{Digest, Sha256};
use warren_types::git::GitCredential;
use warren_types::gitops::SyncError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why a snapshot could not be taken. Messages name the repository by its URL (which never
/// carries credentials: the server refuses such URLs).
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("repository {url}: cannot be reached or read")]
    Connect {
        url: String,
        #[source]
        source: BoxError,
    },
    #[error("repository {url}: ref {git_ref:?} not found")]
    RefNotFound { url: String, git_ref: String },
    #[error("repository {url}: fetching {git_ref:?}")]
    Fetch {
        url: String,
        git_ref: String,
        #[source]
        source: BoxError,
    },
    #[error("repository {url}: reading commit {commit}")]
    Read {
        url: String,
        commit: String,
        #[source]
        source: BoxError,
    },
    #[error("cache repository {path}")]
    Cache {
        path: PathBuf,
        #[source]
        source: BoxError,
    },
}

/// A repository, how to authenticate to it, and the ref wanted.
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    pub url: &'a str,
    pub credential: Option<&'a GitCredential>,
    /// A branch or tag name, a full ref (`refs/…`), or a full commit id.
    pub git_ref: &'a str,
}

/// Where the ref points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What the remote advertises for the ref (a commit, or an annotated tag's object):
    /// when it is unchanged, nothing needs fetching.
    pub remote_id: String,
}

/// A fetched commit, ready to be read.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub commit: String,
    repo: PathBuf,
}

/// Files read from a commit.
#[derive(Debug, Clone, Default)]
pub struct Files {
    /// (path, contents), in tree order.
    pub files: Vec<(String, Vec<u8>)>,
    /// Selected entries that were not read (symbolic links out of the tree, oversized files).
    pub errors: Vec<SyncError>,
}

/// The cache of fetched repositories.
#[derive(Debug, Clone)]
pub struct Snapshots {
    dir: PathBuf,
    /// One lock per cache repository: fetches into one repository never overlap.
    locks: Arc<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>>,
}

fn boxed(e: impl std::error::Error + Send + Sync + 'static) -> BoxError {
    Box::new(e)
}

fn is_commit_id(r: &str) -> bool {
    r.len() == 40 && r.chars().all(|c| c.is_ascii_hexdigit())
}

/// The refspecs that may match a ref name, each into a private local name.
fn refspecs(git_ref: &str) -> Vec<String> {
    if let Some(rest) = git_ref.strip_prefix("refs/") {
        vec![format!("+refs/{rest}:refs/warren/{rest}")]
    } else {
        vec![
            format!("+refs/heads/{git_ref}:refs/warren/heads/{git_ref}"),
            format!("+refs/tags/{git_ref}:refs/warren/tags/{git_ref}"),
        ]
    }
}

/// The local path of a `file://` URL.
fn local_path(url: &str) -> Option<PathBuf> {
    let u = url::Url::parse(url).ok()?;
    (u.scheme() == "file")
        .then(|| u.to_file_path().ok())
        .flatten()
}

/// A private directory holding an SSH key and known_hosts for one connection.
struct SshFiles {
    _dir: tempfile::TempDir,
    command: String,
}

fn ssh_files(key: &str, known_hosts: Option<&str>) -> std::io::Result<SshFiles> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::Builder::new().prefix("warren-ssh-").tempdir()?;
    let write = |name: &str, text: &str| -> std::io::Result<PathBuf> {
        let path = dir.path().join(name);
        let mut f = std::fs::OpenOptions::new()
            .create_new(true)
            .write(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            f.write_all(b"\n")?;
        }
        Ok(path)
    };
    let key_path = write("key", key)?;
    let hosts = match known_hosts {
        Some(h) => format!(
            "-o UserKnownHostsFile={} -o StrictHostKeyChecking=yes",
            write("known_hosts", h)?.display()
        ),
        None => format!(
            "-o UserKnownHostsFile={} -o StrictHostKeyChecking=accept-new",
            dir.path().join("known_hosts").display()
        ),
    };
    Ok(SshFiles {
        command: format!(
            "ssh -i {} -o IdentitiesOnly=yes -o BatchMode=yes {hosts}",
            key_path.display()
        ),
        _dir: dir,
    })
}

impl Snapshots {
    /// Caches fetched repositories under `dir` (created when missing).
    pub fn new(dir: impl Into<PathBuf>) -> Snapshots {
        // gix's HTTP client (reqwest) takes TLS from rustls' process-wide provider: ring, as
        // everywhere in Warren. Already installed (by an earlier call, or the binary) is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Snapshots {
            dir: dir.into(),
            locks: Arc::default(),
        }
    }

    fn cache_path(&self, url: &str) -> PathBuf {
        let digest = hex::encode(Sha256::digest(url.as_bytes()));
        self.dir.join(&digest[..24])
    }

    fn lock_for(&self, path: &Path) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        locks.entry(path.to_owned()).or_default().clone()
    }

    /// The cache repository of `url`, created bare when missing; with an SSH key's command
    /// when the credential is one.
    fn cache_repo(
        &self,
        url: &str,
        ssh: Option<&SshFiles>,
    ) -> Result<gix::Repository, SnapshotError> {
        let path = self.cache_path(url);
        let err = |e: BoxError| SnapshotError::Cache {
            path: path.clone(),
            source: e,
        };
        let mut open = gix::open::Options::isolated();
        if let Some(s) = ssh {
            open = open.config_overrides([format!("core.sshCommand={}", s.command)]);
        }
        if !path.join("HEAD").exists() {
            std::fs::create_dir_all(&path).map_err(|e| err(boxed(e)))?;
            gix::ThreadSafeRepository::init_opts(
                &path,
                gix::create::Kind::Bare,
                gix::create::Options::default(),
                open.clone(),
            )
            .map_err(|e| err(boxed(e)))?;
        }
        gix::open_opts(&path, open).map_err(|e| err(boxed(e)))
    }

    /// Where `want.git_ref` points on the remote, without fetching anything.
    pub fn resolve(&self, want: &Want<'_>) -> Result<Resolved, SnapshotError> {
        if let Some(path) = local_path(want.url) {
            let repo = open_local(want.url, &path)?;
            let id = local_ref(&repo, want)?;
            return Ok(Resolved { remote_id: id });
        }
        if is_commit_id(want.git_ref) {
            return Ok(Resolved {
                remote_id: want.git_ref.to_ascii_lowercase(),
            });
        }
        let lock = self.lock_for(&self.cache_path(want.url));
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let ssh = ssh_for(want)?;
        let repo = self.cache_repo(want.url, ssh.as_ref())?;
        let prepare = prepare(&repo, want)?;
        let id = mapped_remote_id(prepare.ref_map()).ok_or_else(|| SnapshotError::RefNotFound {
            url: want.url.to_owned(),
            git_ref: want.git_ref.to_owned(),
        })?;
        Ok(Resolved { remote_id: id })
    }

    /// Fetches the ref (shallow) and answers the commit it points to.
    pub fn fetch(&self, want: &Want<'_>) -> Result<Fetched, SnapshotError> {
        if let Some(path) = local_path(want.url) {
            let repo = open_local(want.url, &path)?;
            let id = local_ref(&repo, want)?;
            let commit = peel_to_commit(&repo, want, &id)?;
            return Ok(Fetched { commit, repo: path });
        }
        let path = self.cache_path(want.url);
        let lock = self.lock_for(&path);
        let _held = lock.lock().unwrap_or_else(|p| p.into_inner());
        let ssh = ssh_for(want)?;
        let repo = self.cache_repo(want.url, ssh.as_ref())?;
        let fetch_err = |e: BoxError| SnapshotError::Fetch {
            url: want.url.to_owned(),
            git_ref: want.git_ref.to_owned(),
            source: e,
        };
        if is_commit_id(want.git_ref) {
            if let Ok(commit) = peel_to_commit(&repo, want, want.git_ref) {
                return Ok(Fetched { commit, repo: path });
            }
        }
        let prepare = prepare(&repo, want)?;
        let Some(remote_id) = mapped_remote_id(prepare.ref_map()) else {
            return Err(SnapshotError::RefNotFound {
                url: want.url.to_owned(),
                git_ref: want.git_ref.to_owned(),
            });
        };
        let interrupt = AtomicBool::new(false);
        let depth = std::num::NonZeroU32::new(1).unwrap_or(std::num::NonZeroU32::MIN);
        prepare
            .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth))
            .receive(gix::progress::Discard, &interrupt)
            .map_err(|e| fetch_err(boxed(e)))?;
        let commit = peel_to_commit(&repo, want, &remote_id)?;
        Ok(Fetched { commit, repo: path })
    }

    /// The selected files of a fetched commit. A symbolic link is followed when it stays in
    /// the tree and reported otherwise; a file over `max_file_bytes` is reported, not read.
    pub fn read(
        &self,
        url: &str,
        fetched: &Fetched,
        select: &dyn Fn(&str) -> bool,
        max_file_bytes: u64,
    ) -> Result<Files, SnapshotError> {
        let err = |e: BoxError| SnapshotError::Read {
            url: url.to_owned(),
            commit: fetched.commit.clone(),
            source: e,
        };
        let repo = gix::open_opts(&fetched.repo, gix::open::Options::isolated())
            .map_err(|e| err(boxed(e)))?;
        let id = gix::ObjectId::from_hex(fetched.commit.as_bytes()).map_err(|e| err(boxed(e)))?;
        let commit = repo
            .find_object(id)
            .map_err(|e| err(boxed(e)))?
            .try_into_commit()
            .map_err(|e| err(boxed(e)))?;
        let tree = commit.tree().map_err(|e| err(boxed(e)))?;
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse()
            .breadthfirst(&mut recorder)
            .map_err(|e| err(boxed(e)))?;
        let mut out = Files::default();
        let mut entries: Vec<_> = recorder.records;
        entries.sort_by(|a, b| a.filepath.cmp(&b.filepath));
        for e in entries {
            let Ok(path) = e.filepath.to_str() else {
                continue;
            };
            if !(e.mode.is_blob() || e.mode.is_link()) || !select(path) {
                continue;
            }
            let file_error = |message: String| SyncError {
                file: Some(path.to_owned()),
                object: None,
                message,
            };
            let mut oid = e.oid;
            if e.mode.is_link() {
                match follow_link(&repo, &tree, path, e.oid) {
                    Ok(target) => oid = target,
                    Err(m) => {
                        out.errors.push(file_error(m));
                        continue;
                    }
                }
            }
            let header = repo.find_header(oid).map_err(|e| err(boxed(e)))?;
            if header.size() > max_file_bytes {
                out.errors.push(file_error(format!(
                    "{} bytes, more than the {max_file_bytes} accepted for one file",
                    header.size()
                )));
                continue;
            }
            let blob = repo.find_object(oid).map_err(|e| err(boxed(e)))?;
            out.files.push((path.to_owned(), blob.data.clone()));
        }
        Ok(out)
    }
}

fn ssh_for(want: &Want<'_>) -> Result<Option<SshFiles>, SnapshotError> {
    match want.credential {
        Some(GitCredential::SshKey {
            private_key,
            known_hosts,
        }) => ssh_files(private_key, known_hosts.as_deref())
            .map(Some)
            .map_err(|e| SnapshotError::Connect {
                url: want.url.to_owned(),
                source: boxed(e),
            }),
        _ => Ok(None),
    }
}

/// Connects and lists the remote's refs matching the wanted ref.
fn prepare<'r>(
    repo: &'r gix::Repository,
    want: &Want<'_>,
) -> Result<
    gix::remote::fetch::Prepare<
        'r,
        'r,
        Box<dyn gix::protocol::transport::client::blocking_io::Transport + Send>,
    >,
    SnapshotError,
> {
    let connect = |e: BoxError| SnapshotError::Connect {
        url: want.url.to_owned(),
        source: e,
    };
    let specs = if is_commit_id(want.git_ref) {
        vec![format!("{}:refs/warren/pinned", want.git_ref)]
    } else {
        refspecs(want.git_ref)
    };
    let remote = repo
        .remote_at(want.url)
        .map_err(|e| connect(boxed(e)))?
        .with_fetch_tags(gix::remote::fetch::Tags::None)
        .with_refspecs(specs.iter().map(String::as_str), Direction::Fetch)
        .map_err(|e| connect(boxed(e)))?;
    let mut connection = remote
        .connect(Direction::Fetch)
        .map_err(|e| connect(boxed(e)))?;
    if let Some((user, password)) = want.credential.and_then(GitCredential::username_password) {
        if !credentials_may_go_to(want.url) {
            return Err(connect(
                "a password or token would be sent in clear over http:// to another machine; \
                 use https://"
                    .into(),
            ));
        }
        let account = gix::sec::identity::Account {
            username: user.to_owned(),
            password: password.to_owned(),
            oauth_refresh_token: None,
        };
        connection = connection.with_credentials(move |action| match action {
            gix::credentials::helper::Action::Get(ctx) => {
                Ok(Some(gix::credentials::protocol::Outcome {
                    identity: account.clone(),
                    next: ctx.into(),
                }))
            }
            _ => Ok(None),
        });
    }
    connection
        .prepare_fetch(gix::progress::Discard, Default::default())
        .map_err(|e| connect(boxed(e)))
}

/// Whether a password may be sent to `url`: over https, or in clear to this machine only.
fn credentials_may_go_to(url: &str) -> bool {
    let Ok(u) = url::Url::parse(url) else {
        return false;
    };
    match u.scheme() {
        "https" => true,
        "http" => match u.host() {
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        },
        _ => false,
    }
}

/// The remote object of the first ref the refspecs matched.
fn mapped_remote_id(map: &gix::remote::fetch::RefMap) -> Option<String> {
    map.mappings
        .iter()
        .find_map(|m| m.remote.as_id().map(|id| id.to_hex().to_string()))
}

fn open_local(url: &str, path: &Path) -> Result<gix::Repository, SnapshotError> {
    gix::open_opts(path, gix::open::Options::isolated()).map_err(|e| SnapshotError::Connect {
        url: url.to_owned(),
        source: boxed(e),
    })
}

/// The object a ref names in a local repository.
fn local_ref(repo: &gix::Repository, want: &Want<'_>) -> Result<String, SnapshotError> {
    if is_commit_id(want.git_ref) {
        return Ok(want.git_ref.to_ascii_lowercase());
    }
    let names = if want.git_ref.starts_with("refs/") {
        vec![want.git_ref.to_owned()]
    } else {
        vec![
            format!("refs/heads/{}", want.git_ref),
            format!("refs/tags/{}", want.git_ref),
        ]
    };
    for name in names {
        if let Ok(Some(mut r)) = repo.try_find_reference(name.as_str()) {
            if let Ok(id) = r.peel_to_id() {
                return Ok(id.to_hex().to_string());
            }
        }
    }
    Err(SnapshotError::RefNotFound {
        url: want.url.to_owned(),
        git_ref: want.git_ref.to_owned(),
    })
}

/// The commit an object (a commit, or an annotated tag) leads to.
fn peel_to_commit(
    repo: &gix::Repository,
    want: &Want<'_>,
    id: &str,
) -> Result<String, SnapshotError> {
    let err = |e: BoxError| SnapshotError::Read {
        url: want.url.to_owned(),
        commit: id.to_owned(),
        source: e,
    };
    let oid = gix::ObjectId::from_hex(id.as_bytes()).map_err(|e| err(boxed(e)))?;
    let commit = repo
        .find_object(oid)
        .map_err(|e| err(boxed(e)))?
        .peel_to_commit()
        .map_err(|e| err(boxed(e)))?;
    Ok(commit.id.to_hex().to_string())
}

/// Follows a symbolic link inside the tree (at most a few hops); its target must stay in the
/// repository and be a file.
fn follow_link(
    repo: &gix::Repository,
    tree: &gix::Tree<'_>,
    path: &str,
    oid: gix::ObjectId,
) -> Result<gix::ObjectId, String> {
    let mut at = path.to_owned();
    let mut link = oid;
    for _ in 0..8 {
        let target = repo
            .find_object(link)
            .map_err(|e| format!("reading the link: {e}"))?
            .data
            .clone();
        let target = String::from_utf8_lossy(&target).into_owned();
        let resolved = resolve_link(&at, &target).ok_or_else(|| {
            format!("is a symbolic link to {target:?}, outside the repository; not read")
        })?;
        let entry = tree
            .lookup_entry_by_path(&resolved)
            .map_err(|e| format!("reading the link's target {resolved:?}: {e}"))?
            .ok_or_else(|| format!("is a symbolic link to {target:?}, which does not exist"))?;
        let mode = entry.mode();
        if mode.is_blob() {
            return Ok(entry.object_id());
        }
        if !mode.is_link() {
            return Err(format!(
                "is a symbolic link to {target:?}, which is not a file"
            ));
        }
        at = resolved;
        link = entry.object_id();
    }
    Err("is a chain of symbolic links too long to follow".into())
}

/// The repository path a link at `at` pointing to `target` names; `None` when it leaves the
/// repository (absolute, or more `..` than directories).
fn resolve_link(at: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = at.split('/').collect();
    parts.pop();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_inside_the_tree_only() {
        assert_eq!(
            resolve_link("deploy/a.yaml", "b.yaml").as_deref(),
            Some("deploy/b.yaml")
        );
        assert_eq!(
            resolve_link("deploy/a.yaml", "../base/b.yaml").as_deref(),
            Some("base/b.yaml")
        );
        assert_eq!(resolve_link("a.yaml", "../etc/passwd"), None);
        assert_eq!(resolve_link("deploy/a.yaml", "/etc/passwd"), None);
        assert_eq!(resolve_link("d/a.yaml", "../../x"), None);
    }

    #[test]
    fn ref_names_map_to_branches_then_tags() {
        assert_eq!(
            refspecs("main"),
            [
                "+refs/heads/main:refs/warren/heads/main",
                "+refs/tags/main:refs/warren/tags/main"
            ]
        );
        assert_eq!(
            refspecs("refs/pull/1/head"),
            ["+refs/pull/1/head:refs/warren/pull/1/head"]
        );
        assert!(is_commit_id("0123456789abcdef0123456789abcdef01234567"));
        assert!(!is_commit_id("main"));
    }
}
