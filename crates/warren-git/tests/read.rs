//! Reading files from a real private repository: Git's `http-backend` behind HTTP basic
//! authentication on a port-0 listener. Skips with a notice where `git` is missing.

use std::sync::Arc;
use warren_git::{GitError, GitReader, Options, Remote};
use warren_testkit::git_http::{git, have_git, GitHttpServer};
use warren_types::git::GitCredential;

const DEVFILE: &str = "schemaVersion: 2.2.0\nmetadata:\n  name: from-git\n";

fn basic(password: &str) -> GitCredential {
    GitCredential::Basic {
        username: "ann".into(),
        password: password.into(),
    }
}

#[tokio::test]
async fn reads_a_file_at_a_ref_with_credentials_and_caches_by_commit() {
    if !have_git() {
        return;
    }
    let server = GitHttpServer::start("ann", "s3cret-pass").await.unwrap();
    let first = server
        .create_repo("app", &[(".devfile.yaml", DEVFILE), ("README", "hi\n")])
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let reader = GitReader::new(cache.path(), loopback());
    let url = server.url("app");
    let cred = basic("s3cret-pass");
    let remote = Remote {
        url: &url,
        credential: Some(&cred),
    };

    let f = reader
        .read_file(remote, "main", ".devfile.yaml")
        .await
        .unwrap();
    assert_eq!(f.commit, first);
    assert_eq!(f.contents.as_slice(), DEVFILE.as_bytes());
    let fetches = server.upload_packs();
    assert!(fetches >= 1);

    // The same commit again: from the cache, no fetch.
    let again = reader
        .read_file(remote, "main", "./.devfile.yaml")
        .await
        .unwrap();
    assert!(Arc::ptr_eq(&again.contents, &f.contents));
    assert_eq!(server.upload_packs(), fetches, "served from the cache");

    // A new commit on the branch is seen; a tag and a commit id work too.
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    git(
        w,
        &[
            "clone",
            "--quiet",
            server.path("app").to_str().unwrap(),
            ".",
        ],
    )
    .unwrap();
    std::fs::write(w.join(".devfile.yaml"), "schemaVersion: 2.2.0\n").unwrap();
    git(w, &["commit", "--quiet", "-am", "second"]).unwrap();
    git(w, &["tag", "-a", "v1", "-m", "v1", first.as_str()]).unwrap();
    git(w, &["push", "--quiet", "origin", "main", "v1"]).unwrap();
    let second = server.head("app", "main").unwrap();
    let f = reader
        .read_file(remote, "main", ".devfile.yaml")
        .await
        .unwrap();
    assert_eq!(
        (f.commit.as_str(), f.contents.as_slice()),
        (second.as_str(), &b"schemaVersion: 2.2.0\n"[..])
    );
    let f = reader
        .read_file(remote, "v1", ".devfile.yaml")
        .await
        .unwrap();
    assert_eq!(
        (f.commit.as_str(), f.contents.as_slice()),
        (first.as_str(), DEVFILE.as_bytes())
    );
    let f = reader.read_file(remote, "", "README").await.unwrap();
    assert_eq!(f.commit, second, "empty ref: the default branch");
}

#[tokio::test]
async fn every_failure_names_the_repository_and_what_is_missing() {
    if !have_git() {
        return;
    }
    let (server, cache, reader) = served_app(Options {
        max_file_bytes: 10,
        ..loopback()
    })
    .await;
    let url = server.url("app");
    let good = basic("s3cret-pass");
    let wrong = basic("not-the-password");

    for cred in [None, Some(&wrong)] {
        let e = reader
            .read_file(
                Remote {
                    url: &url,
                    credential: cred,
                },
                "main",
                ".devfile.yaml",
            )
            .await
            .unwrap_err();
        assert!(matches!(e, GitError::Auth { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(&url) && msg.contains("authentication failed"),
            "{msg}"
        );
        assert!(!msg.contains("not-the-password"), "{msg}");
    }
    assert!(server.refused() > 0);

    let remote = Remote {
        url: &url,
        credential: Some(&good),
    };
    let e = reader
        .read_file(remote, "nope", ".devfile.yaml")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("repository {url}: ref \"nope\" not found")
    );
    let e = reader
        .read_file(remote, "main", "devfile.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, GitError::PathNotFound { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&url) && msg.contains("\"devfile.yaml\"") && msg.contains("\"main\""),
        "{msg}"
    );
    let e = reader
        .read_file(remote, "main", ".devfile.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, GitError::TooLarge { .. }), "{e}");

    let missing = server.url("missing");
    let e = reader
        .read_file(
            Remote {
                url: &missing,
                credential: Some(&good),
            },
            "main",
            "x",
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("repository {missing}: ")),
        "{e}"
    );

    let e = reader
        .read_file(
            Remote {
                url: "file:///etc",
                credential: None,
            },
            "main",
            "passwd",
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("cannot be read by the server"),
        "{e}"
    );

    // Nothing secret is left behind in the cache directory.
    let mut leftovers = vec![];
    for e in std::fs::read_dir(cache.path()).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("cred-") {
            leftovers.push(name);
        }
    }
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// A fetch killed half-way (the server stopped, or its request cancelled) leaves git's lock
/// files in the cache repository; the next read must not fail on them forever.
#[tokio::test]
async fn locks_a_killed_fetch_left_do_not_stop_the_next_one() {
    if !have_git() {
        return;
    }
    let (server, cache, reader) = served_app(loopback()).await;
    let url = server.url("app");
    let cred = basic("s3cret-pass");
    let first = read_devfile(&reader, &url, Some(&cred)).await.unwrap();
    let repos: Vec<_> = std::fs::read_dir(cache.path().join("repos"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(repos.len(), 1, "{repos:?}");
    let repo = &repos[0];
    std::fs::create_dir_all(repo.join("refs/heads")).unwrap();
    for lock in [
        "shallow.lock",
        "packed-refs.lock",
        "config.lock",
        "refs/heads/main.lock",
    ] {
        std::fs::write(repo.join(lock), "").unwrap();
    }

    let moved = warren_testkit::git_http::commit_files(
        &server.path("app"),
        &[(
            ".devfile.yaml",
            "schemaVersion: 2.2.0\nmetadata:\n  name: moved\n",
        )],
    )
    .unwrap();
    let next = read_devfile(&reader, &url, Some(&cred)).await.unwrap();
    assert_ne!(next.commit, first.commit);
    assert_eq!(next.commit, moved);
    assert!(String::from_utf8_lossy(&next.contents).contains("moved"));
}

/// A Git server holding repository `app` with [`DEVFILE`], and a reader with `options` (the
/// cache directory lives as long as the reader is used).
async fn served_app(options: Options) -> (GitHttpServer, tempfile::TempDir, GitReader) {
    let server = GitHttpServer::start("ann", "s3cret-pass").await.unwrap();
    server
        .create_repo("app", &[(".devfile.yaml", DEVFILE)])
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let reader = GitReader::new(cache.path(), options);
    (server, cache, reader)
}

/// `.devfile.yaml` of `url` at `main`.
async fn read_devfile(
    reader: &GitReader,
    url: &str,
    credential: Option<&GitCredential>,
) -> Result<warren_git::FileAtRef, GitError> {
    reader
        .read_file(Remote { url, credential }, "main", ".devfile.yaml")
        .await
}

/// Options whose guard lets the reader reach the tests' Git server on 127.0.0.1 (and no
/// other special-purpose address).
pub(crate) fn loopback() -> Options {
    Options {
        guard: warren_netguard::Guard::new(vec!["127.0.0.1/32".parse().unwrap()]),
        ..Options::default()
    }
}

/// Attack: a user names a repository on an address only the server reaches. With the
/// default guard the reader refuses it before git runs, so the forge never sees a request.
#[tokio::test]
async fn a_remote_on_a_special_purpose_address_is_never_contacted() {
    if !have_git() {
        return;
    }
    let (server, _cache, reader) = served_app(Options::default()).await;
    let cred = basic("s3cret-pass");
    for url in [
        server.url("app"),
        server.url_via("localhost", "app"),
        format!("ssh://git@127.0.0.1:{}/app.git", server.addr.port()),
        "git@169.254.169.254:team/app.git".to_owned(),
    ] {
        let err = read_devfile(&reader, &url, Some(&cred)).await.unwrap_err();
        assert!(matches!(err, GitError::Refused { .. }), "{url}: {err}");
        assert!(
            err.to_string()
                .contains("does not resolve to a public address"),
            "{err}"
        );
    }
    assert_eq!((server.refused(), server.upload_packs()), (0, 0));
}

/// A name the guard resolved is handed to git with its checked addresses
/// (`http.curloptResolve`), and git reads through them.
#[tokio::test]
async fn a_name_is_read_through_the_addresses_the_guard_checked() {
    if !have_git() {
        return;
    }
    let (server, _cache, reader) = served_app(Options {
        guard: warren_netguard::Guard::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "::1/128".parse().unwrap(),
        ]),
        ..Options::default()
    })
    .await;
    let url = server.url_via("localhost", "app");
    let file = read_devfile(&reader, &url, Some(&basic("s3cret-pass")))
        .await
        .unwrap();
    assert_eq!(file.contents.as_slice(), DEVFILE.as_bytes());
}

/// Attack: a remote the guard's URL parser and git's curl read differently
/// (`http://public.example\@127.0.0.1:PORT/…`: host `public.example` to one, user
/// information and host `127.0.0.1` to the other) is refused before either looks it up.
#[tokio::test]
async fn a_remote_parsed_two_ways_is_refused() {
    if !have_git() {
        return;
    }
    // Refused as a URL, before any name is looked up.
    let (server, _cache, reader) = served_app(Options::default()).await;
    let url = format!(
        "http://example.com\\@127.0.0.1:{}/app.git",
        server.addr.port()
    );
    let err = read_devfile(&reader, &url, None).await.unwrap_err();
    assert!(matches!(err, GitError::InvalidUrl(_)), "{url}: {err}");
    assert_eq!((server.refused(), server.upload_packs()), (0, 0));
}
