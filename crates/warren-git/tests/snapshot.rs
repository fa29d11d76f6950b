//! Snapshots through gix against real Git servers: Git's `http-backend` behind basic auth
//! (port 0), `git daemon`, OpenSSH's `sshd` with a key, and `file://`. The ref is resolved without fetching, a new commit is seen and
//! fetched, annotated tags and commit ids are followed, symbolic links are followed inside
//! the tree and refused outside it, and wrong credentials and missing refs are named.

use std::path::Path;
use warren_git::snapshot::{SnapshotError, Snapshots, Want};
use warren_testkit::git_http::{bare_repo, git, have_git, GitHttpServer};
use warren_testkit::process::output_ok;
use warren_types::git::GitCredential;

const PASSWORD: &str = "gitops-pass";

/// Clones the bare repository, lets `change` edit the work tree, commits and pushes `main`;
/// returns the new commit.
fn push(bare: &Path, message: &str, change: impl FnOnce(&Path)) -> String {
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &["clone", "--quiet", bare.to_str().unwrap(), "."],
    )
    .unwrap();
    change(work.path());
    git(work.path(), &["add", "--all"]).unwrap();
    git(work.path(), &["commit", "--quiet", "-m", message]).unwrap();
    git(work.path(), &["push", "--quiet", "origin", "main"]).unwrap();
    git(work.path(), &["rev-parse", "HEAD"])
        .unwrap()
        .trim()
        .to_owned()
}

fn yaml(path: &str) -> bool {
    path.ends_with(".yaml")
}

fn names(files: &warren_git::snapshot::Files) -> Vec<&str> {
    files.files.iter().map(|(p, _)| p.as_str()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_over_http_with_basic_auth() {
    if !have_git() {
        return;
    }
    let server = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    let first = server
        .create_repo(
            "platform",
            &[
                ("deploy/app.yaml", "kind: ConfigMap\n"),
                ("deploy/sub/more.yaml", "kind: Service\n"),
                ("README.md", "# docs\n"),
            ],
        )
        .unwrap();
    let server = std::sync::Arc::new(server);
    let keep = server.clone();
    // Blocking calls, as the relay makes them, while the runtime serves the Git server.
    tokio::task::spawn_blocking(move || {
        let url = server.url("platform");
        let cache = tempfile::tempdir().unwrap();
        let snapshots = Snapshots::new(cache.path());
        let credential = GitCredential::Basic {
            username: "ann".into(),
            password: PASSWORD.into(),
        };
        let want = Want {
            url: &url,
            credential: Some(&credential),
            git_ref: "main",
        };

        let resolved = snapshots.resolve(&want).unwrap();
        let fetched = snapshots.fetch(&want).unwrap();
        let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
        assert_eq!(resolved.remote_id, first);
        assert_eq!(fetched.commit, first);
        assert_eq!(names(&files), ["deploy/app.yaml", "deploy/sub/more.yaml"]);
        assert_eq!(files.files[0].1, b"kind: ConfigMap\n");

        // A new commit with symbolic links: one inside the tree is followed, one out of it is not.
        let second = push(&server.path("platform"), "links", |w| {
            std::fs::write(w.join("deploy/app.yaml"), "kind: Deployment\n").unwrap();
            std::fs::remove_file(w.join("deploy/sub/more.yaml")).unwrap();
            std::os::unix::fs::symlink("app.yaml", w.join("deploy/alias.yaml")).unwrap();
            std::os::unix::fs::symlink("../../../etc/passwd", w.join("deploy/escape.yaml"))
                .unwrap();
        });
        assert_eq!(snapshots.resolve(&want).unwrap().remote_id, second);
        let fetched = snapshots.fetch(&want).unwrap();
        assert_eq!(fetched.commit, second);
        let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
        assert_eq!(names(&files), ["deploy/alias.yaml", "deploy/app.yaml"]);
        assert_eq!(
            files.files[0].1, b"kind: Deployment\n",
            "the link's target is read"
        );
        assert_eq!(files.errors.len(), 1, "{:?}", files.errors);
        assert_eq!(files.errors[0].file.as_deref(), Some("deploy/escape.yaml"));
        assert!(
            files.errors[0].message.contains("outside the repository"),
            "{:?}",
            files.errors
        );

        // A file over the cap is reported, not read.
        let small = snapshots.read(&url, &fetched, &yaml, 4).unwrap();
        assert!(small.files.is_empty());
        assert!(
            small
                .errors
                .iter()
                .any(|e| e.message.contains("more than the 4 accepted")),
            "{:?}",
            small.errors
        );

        // An annotated tag leads to its commit; a commit id is fetched as it is.
        let work = tempfile::tempdir().unwrap();
        git(
            work.path(),
            &[
                "clone",
                "--quiet",
                server.path("platform").to_str().unwrap(),
                ".",
            ],
        )
        .unwrap();
        git(work.path(), &["tag", "-a", "v1", "-m", "release", &first]).unwrap();
        git(work.path(), &["push", "--quiet", "origin", "v1"]).unwrap();
        let tag = Want {
            git_ref: "v1",
            ..want
        };
        let fetched = snapshots.fetch(&tag).unwrap();
        assert_eq!(fetched.commit, first, "the tag's commit");
        let pinned = Want {
            git_ref: &second,
            ..want
        };
        assert_eq!(snapshots.fetch(&pinned).unwrap().commit, second);

        // A ref that does not exist, and a wrong password, are named.
        let missing = Want {
            git_ref: "no-such-branch",
            ..want
        };
        let e = snapshots.resolve(&missing).unwrap_err();
        assert!(matches!(e, SnapshotError::RefNotFound { .. }), "{e}");
        assert!(
            e.to_string().contains("\"no-such-branch\" not found"),
            "{e}"
        );
        let wrong = GitCredential::Basic {
            username: "ann".into(),
            password: "wrong-pass-7f3a".into(),
        };
        let e = snapshots
            .resolve(&Want {
                credential: Some(&wrong),
                ..want
            })
            .unwrap_err();
        assert!(matches!(e, SnapshotError::Connect { .. }), "{e}");
        let chain = warren_types::error_chain(&e);
        assert!(
            !chain.contains("wrong") || !chain.contains(PASSWORD),
            "{chain}"
        );
        assert!(server.refused() > 0);

        // A repository that vanished.
        std::fs::remove_dir_all(server.path("platform")).unwrap();
        let e = snapshots.resolve(&want).unwrap_err();
        assert!(e.to_string().contains(&url), "{e}");
    })
    .await
    .unwrap();
    drop(keep);
}

#[test]
fn a_local_repository_by_file_url_is_read_in_place() {
    if !have_git() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "local").unwrap();
    let commit = push(&bare, "first", |w| {
        std::fs::write(w.join("cm.yaml"), "kind: ConfigMap\n").unwrap();
    });
    let url = format!("file://{}", bare.display());
    let cache = tempfile::tempdir().unwrap();
    let snapshots = Snapshots::new(cache.path());
    let want = Want {
        url: &url,
        credential: None,
        git_ref: "main",
    };
    assert_eq!(snapshots.resolve(&want).unwrap().remote_id, commit);
    let fetched = snapshots.fetch(&want).unwrap();
    let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
    assert_eq!(names(&files), ["cm.yaml"]);
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "nothing is copied for a local repository"
    );
    let e = snapshots
        .resolve(&Want {
            url: "file:///nonexistent/repo.git",
            ..want
        })
        .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/repo.git"), "{e}");
}

/// `git://` (Git's daemon): resolving an unchanged ref is one connection and fetches
/// nothing; a push is seen by the next resolve.
#[test]
fn a_repository_over_the_git_protocol() {
    if !have_git() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "ops").unwrap();
    let first = push(&bare, "first", |w| {
        std::fs::write(w.join("a.yaml"), "kind: ConfigMap\n").unwrap();
    });
    let daemon = warren_testkit::git_daemon::GitDaemon::start(root.path()).unwrap();
    let url = daemon.url("ops");
    let cache = tempfile::tempdir().unwrap();
    let snapshots = Snapshots::new(cache.path());
    let want = Want {
        url: &url,
        credential: None,
        git_ref: "main",
    };
    let fetched = snapshots.fetch(&want).unwrap();
    assert_eq!(fetched.commit, first);
    let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
    assert_eq!(names(&files), ["a.yaml"]);
    let before = daemon.connections();
    assert_eq!(snapshots.resolve(&want).unwrap().remote_id, first);
    assert_eq!(
        daemon.connections(),
        before + 1,
        "one connection to list refs"
    );
    let second = push(&bare, "second", |w| {
        std::fs::write(w.join("b.yaml"), "kind: Service\n").unwrap();
    });
    assert_eq!(snapshots.resolve(&want).unwrap().remote_id, second);
    let fetched = snapshots.fetch(&want).unwrap();
    let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
    assert_eq!(names(&files), ["a.yaml", "b.yaml"]);
}

/// OpenSSH's `sshd` on a free loopback port, for this machine's user with one key; killed
/// on drop.
struct Sshd {
    child: std::process::Child,
    port: u16,
    host_key_line: String,
    _dir: tempfile::TempDir,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    output_ok(
        std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", "test", "-f"])
            .arg(path),
    );
}

impl Sshd {
    /// `None` (after a notice) where no `sshd` or `ssh` exists.
    fn start(authorized_key: &str) -> Option<Sshd> {
        let sshd = Path::new("/usr/sbin/sshd");
        let ssh_ok = std::process::Command::new("ssh")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !sshd.is_file() || !ssh_ok {
            eprintln!(
                "skipping: OpenSSH's sshd or ssh is not installed (apt-get install openssh-server)"
            );
            return None;
        }
        // sshd refuses to start without its privilege separation directory (root may make it).
        if std::fs::create_dir_all("/run/sshd").is_err() {
            eprintln!("skipping: /run/sshd is missing and cannot be made (sshd needs it)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host_key");
        keygen(&host);
        let authorized = dir.path().join("authorized_keys");
        std::fs::write(&authorized, authorized_key).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let config = dir.path().join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                 PubkeyAuthentication yes\nPermitRootLogin prohibit-password\nStrictModes no\n\
                 UsePAM no\nPidFile {}\n",
                host.display(),
                authorized.display(),
                dir.path().join("sshd.pid").display()
            ),
        )
        .unwrap();
        let child = std::process::Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting sshd");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "sshd did not listen");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let public = std::fs::read_to_string(dir.path().join("host_key.pub")).unwrap();
        let mut parts = public.split_whitespace();
        let host_key_line = format!(
            "[127.0.0.1]:{port} {} {}",
            parts.next().unwrap(),
            parts.next().unwrap()
        );
        Some(Sshd {
            child,
            port,
            host_key_line,
            _dir: dir,
        })
    }
}

/// `ssh://` with a private key: OpenSSH under gix, the key and known_hosts in a private
/// temporary directory. A wrong key and an unknown host key are refused, naming neither.
#[test]
fn a_repository_over_ssh_with_a_key() {
    if !have_git() {
        return;
    }
    let keys = tempfile::tempdir().unwrap();
    let (client, stranger) = (keys.path().join("client"), keys.path().join("stranger"));
    keygen(&client);
    keygen(&stranger);
    let Some(sshd) = Sshd::start(&std::fs::read_to_string(client.with_extension("pub")).unwrap())
    else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let bare = bare_repo(root.path(), "ops").unwrap();
    let first = push(&bare, "first", |w| {
        std::fs::write(w.join("app.yaml"), "kind: ConfigMap\n").unwrap();
    });
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            std::process::Command::new("id")
                .arg("-un")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        })
        .unwrap();
    let url = format!("ssh://{user}@127.0.0.1:{}{}", sshd.port, bare.display());
    let cache = tempfile::tempdir().unwrap();
    let snapshots = Snapshots::new(cache.path());
    let key = std::fs::read_to_string(&client).unwrap();
    let credential = GitCredential::SshKey {
        private_key: key.clone(),
        known_hosts: Some(sshd.host_key_line.clone()),
    };
    let want = Want {
        url: &url,
        credential: Some(&credential),
        git_ref: "main",
    };
    assert_eq!(snapshots.resolve(&want).unwrap().remote_id, first);
    let fetched = snapshots.fetch(&want).unwrap();
    assert_eq!(fetched.commit, first);
    let files = snapshots.read(&url, &fetched, &yaml, 1 << 20).unwrap();
    assert_eq!(names(&files), ["app.yaml"]);

    // A key the server does not know.
    let stranger_key = std::fs::read_to_string(&stranger).unwrap();
    let wrong = GitCredential::SshKey {
        private_key: stranger_key.clone(),
        known_hosts: Some(sshd.host_key_line.clone()),
    };
    let e = snapshots
        .resolve(&Want {
            credential: Some(&wrong),
            ..want
        })
        .unwrap_err();
    let chain = warren_types::error_chain(&e);
    assert!(!chain.contains("PRIVATE KEY"), "{chain}");
    // A server whose host key is not the one given.
    let other_host = sshd.host_key_line.replace(
        &format!("{}", sshd.port),
        &format!("{}", sshd.port.wrapping_add(1)),
    );
    let unknown = GitCredential::SshKey {
        private_key: key,
        known_hosts: Some(other_host),
    };
    let e = snapshots
        .resolve(&Want {
            credential: Some(&unknown),
            ..want
        })
        .unwrap_err();
    assert!(!warren_types::error_chain(&e).contains("PRIVATE KEY"));
}
