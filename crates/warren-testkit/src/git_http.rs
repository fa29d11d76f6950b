//! A real Git server for tests: Git's own `git http-backend` (smart HTTP, fetch and push)
//! behind a port-0 HTTP listener that demands HTTP basic credentials, as a private
//! repository on a forge does. Repositories live under a temporary root; helpers create
//! them with a first commit.

use anyhow::{bail, Context, Result};
use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A running Git HTTP server; stops when dropped.
#[derive(Debug)]
pub struct GitHttpServer {
    pub addr: SocketAddr,
    root: tempfile::TempDir,
    /// Requests refused for missing or wrong credentials, so tests can tell they were asked.
    refused: Arc<AtomicU64>,
    upload_packs: Arc<AtomicU64>,
    shutdown: CancellationToken,
}

impl Drop for GitHttpServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Whether `git` can run here; where it cannot, says that the test skips.
pub fn have_git() -> bool {
    let ok = std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: git is not installed (the tests' Git servers need it)");
    }
    ok
}

/// Runs `git` with a clean configuration; fails with its stderr.
pub fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.invalid")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.invalid")
        .output()
        .with_context(|| format!("running git {args:?}"))?;
    if !out.status.success() {
        bail!(
            "git {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl GitHttpServer {
    /// Serves repositories under a fresh root, to clients presenting `username`/`password`
    /// (every request: fetch and push); an empty `username` serves everyone (a public host).
    pub async fn start(username: &str, password: &str) -> Result<GitHttpServer> {
        Self::start_on("127.0.0.1:0".parse()?, username, password).await
    }

    /// [`GitHttpServer::start`] on a chosen address (e.g. `0.0.0.0:0`, for containers to
    /// reach it through the host's address).
    pub async fn start_on(
        bind: SocketAddr,
        username: &str,
        password: &str,
    ) -> Result<GitHttpServer> {
        let root = tempfile::tempdir()?;
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"))
        );
        let shutdown = CancellationToken::new();
        let refused = Arc::new(AtomicU64::new(0));
        let upload_packs = Arc::new(AtomicU64::new(0));
        let state = Arc::new(Backend {
            root: root.path().to_owned(),
            expected,
            user: username.to_owned(),
            refused: refused.clone(),
            upload_packs: upload_packs.clone(),
        });
        let stop = shutdown.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    // Cancel-safe: cancellation only flips a flag.
                    _ = stop.cancelled() => return,
                    // Cancel-safe: an accept not taken stays in the backlog.
                    r = listener.accept() => match r {
                        Ok(s) => s,
                        Err(_) => continue,
                    },
                };
                let state = state.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let state = state.clone();
                        async move { Ok::<_, std::convert::Infallible>(state.handle(req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                    tokio::select! {
                        // Cancel-safe: dropping the connection is the point.
                        _ = stop.cancelled() => {}
                        // Cancel-safe: as above.
                        _ = conn => {}
                    }
                });
            }
        });
        Ok(GitHttpServer {
            addr,
            root,
            refused,
            upload_packs,
            shutdown,
        })
    }

    /// `http://127.0.0.1:PORT/<name>.git`.
    pub fn url(&self, name: &str) -> String {
        format!("http://{}/{name}.git", self.addr)
    }

    /// The repository's URL through another address of this host (`host` without a port).
    pub fn url_via(&self, host: &str, name: &str) -> String {
        format!("http://{host}:{}/{name}.git", self.addr.port())
    }

    /// The bare repository's directory on disk.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(format!("{name}.git"))
    }

    /// How many requests were refused for their credentials.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::SeqCst)
    }

    /// How many fetches (authorised `git-upload-pack` POSTs) were served.
    pub fn upload_packs(&self) -> u64 {
        self.upload_packs.load(Ordering::SeqCst)
    }

    /// Creates the bare repository `name` with one commit on `main` holding `files`
    /// (path → contents); returns the commit.
    pub fn create_repo(&self, name: &str, files: &[(&str, &str)]) -> Result<String> {
        let files: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (*p, c.as_bytes())).collect();
        self.create_repo_bytes(name, &files)
    }

    /// [`Self::create_repo`] with files of any bytes (an archive, an image).
    pub fn create_repo_bytes(&self, name: &str, files: &[(&str, &[u8])]) -> Result<String> {
        let bare = self.path(name);
        git(
            self.root.path(),
            &[
                "init",
                "--quiet",
                "--bare",
                "--initial-branch=main",
                bare.to_str().unwrap_or_default(),
            ],
        )?;
        git(&bare, &["config", "http.receivepack", "true"])?;
        let work = tempfile::tempdir()?;
        git(
            work.path(),
            &["init", "--quiet", "--initial-branch=main", "."],
        )?;
        commit_in(work.path(), files, "first")?;
        git(
            work.path(),
            &["push", "--quiet", bare.to_str().unwrap_or_default(), "main"],
        )?;
        Ok(git(work.path(), &["rev-parse", "HEAD"])?.trim().to_owned())
    }

    /// Pushes one commit onto `main` of `name` that writes `files` (path → contents) over
    /// its tree, as a developer's push would (a fast-forward); returns the commit.
    pub fn push_commit(&self, name: &str, files: &[(&str, &str)]) -> Result<String> {
        self.push_commit_to(name, "main", files)
    }

    /// As [`Self::push_commit`], onto `branch` (made from `main` when it does not exist).
    pub fn push_commit_to(
        &self,
        name: &str,
        branch: &str,
        files: &[(&str, &str)],
    ) -> Result<String> {
        let bare = self.path(name);
        let work = tempfile::tempdir()?;
        let from = bare.to_str().unwrap_or_default();
        git(work.path(), &["clone", "--quiet", from, "."])?;
        let remote = format!("origin/{branch}");
        let start = if git(work.path(), &["rev-parse", "--verify", "--quiet", &remote]).is_ok() {
            remote
        } else {
            "origin/main".to_owned()
        };
        git(work.path(), &["checkout", "--quiet", "-B", branch, &start])?;
        commit_in(work.path(), files, "next")?;
        git(work.path(), &["push", "--quiet", "origin", branch])?;
        Ok(git(work.path(), &["rev-parse", "HEAD"])?.trim().to_owned())
    }

    /// The commit a branch of `name` points at (e.g. after a push from a workspace).
    pub fn head(&self, name: &str, branch: &str) -> Result<String> {
        Ok(git(
            &self.path(name),
            &["rev-parse", &format!("refs/heads/{branch}")],
        )?
        .trim()
        .to_owned())
    }
}

#[derive(Debug)]
struct Backend {
    root: PathBuf,
    expected: String,
    user: String,
    refused: Arc<AtomicU64>,
    upload_packs: Arc<AtomicU64>,
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text.to_owned())));
    *r.status_mut() = status;
    r
}

impl Backend {
    async fn handle(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        let authorised = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v == self.expected)
            || self.user.is_empty();
        if !authorised {
            self.refused.fetch_add(1, Ordering::SeqCst);
            let mut r = plain(StatusCode::UNAUTHORIZED, "credentials required\n");
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                hyper::header::HeaderValue::from_static("Basic realm=\"git\""),
            );
            return r;
        }
        if req.method() == hyper::Method::POST && req.uri().path().ends_with("/git-upload-pack") {
            self.upload_packs.fetch_add(1, Ordering::SeqCst);
        }
        match self.cgi(req).await {
            Ok(r) => r,
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &format!("{e:#}\n")),
        }
    }

    /// Runs `git http-backend` as a CGI program for one request.
    async fn cgi(&self, req: Request<Incoming>) -> Result<Response<Full<Bytes>>> {
        let method = req.method().as_str().to_owned();
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        let content_type = req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let encoding = req
            .headers()
            .get(hyper::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = req.into_body().collect().await?.to_bytes();
        let mut cmd = tokio::process::Command::new("git");
        cmd.arg("http-backend")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_PROJECT_ROOT", &self.root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("REQUEST_METHOD", &method)
            .env("PATH_INFO", &path)
            .env("QUERY_STRING", &query)
            .env("CONTENT_TYPE", &content_type)
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("REMOTE_USER", &self.user)
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(e) = encoding {
            cmd.env("HTTP_CONTENT_ENCODING", e);
        }
        let mut child = cmd.spawn().context("starting git http-backend")?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let writer = tokio::spawn(async move {
            let _ = stdin.write_all(&body).await;
        });
        let out = child.wait_with_output().await?;
        let _ = writer.await;
        let split = out
            .stdout
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|i| (i, 4))
            .or_else(|| {
                out.stdout
                    .windows(2)
                    .position(|w| w == b"\n\n")
                    .map(|i| (i, 2))
            });
        let Some((end, sep)) = split else {
            bail!(
                "git http-backend answered no headers: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let head = String::from_utf8_lossy(&out.stdout[..end]).into_owned();
        let mut resp = Response::new(Full::new(Bytes::copy_from_slice(&out.stdout[end + sep..])));
        for line in head.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            if k.eq_ignore_ascii_case("status") {
                let code = v.split_whitespace().next().unwrap_or("500");
                *resp.status_mut() = code.parse().unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            } else if let (Ok(name), Ok(value)) = (
                hyper::header::HeaderName::from_bytes(k.trim().as_bytes()),
                hyper::header::HeaderValue::from_str(v),
            ) {
                resp.headers_mut().append(name, value);
            }
        }
        Ok(resp)
    }
}

/// A new bare repository `<root>/<name>.git` with `main` as its default branch.
pub fn bare_repo(root: &Path, name: &str) -> Result<std::path::PathBuf> {
    let path = root.join(format!("{name}.git"));
    let target = path
        .to_str()
        .with_context(|| format!("{} is not UTF-8", path.display()))?;
    git(
        root,
        &["init", "--quiet", "--bare", "--initial-branch=main", target],
    )?;
    Ok(path)
}

/// Replaces the files of `bare`'s `main` with `files` (path → text) in one commit, pushed
/// with force; the new commit id.
pub fn commit_files(bare: &Path, files: &[(&str, &str)]) -> Result<String> {
    let work = tempfile::tempdir()?;
    git(
        work.path(),
        &["init", "--quiet", "--initial-branch=main", "."],
    )?;
    for (path, text) in files {
        let p = work.path().join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(p, text)?;
    }
    git(work.path(), &["add", "--all"])?;
    git(
        work.path(),
        &["commit", "--quiet", "--allow-empty", "-m", "sync"],
    )?;
    let target = bare
        .to_str()
        .with_context(|| format!("{} is not UTF-8", bare.display()))?;
    git(work.path(), &["push", "--quiet", "--force", target, "main"])?;
    Ok(git(work.path(), &["rev-parse", "HEAD"])?.trim().to_owned())
}

/// Writes `files` (path → contents) into the checkout `work` and commits them all.
fn commit_in<C: AsRef<[u8]>>(work: &Path, files: &[(&str, C)], message: &str) -> Result<()> {
    for (path, contents) in files {
        let p = work.join(path);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(&p, contents)?;
    }
    git(work, &["add", "--all"])?;
    git(work, &["commit", "--quiet", "-m", message])?;
    Ok(())
}
