//! A directory of a private repository at a ref as a tar archive (a build context): only
//! that directory, paths relative to it, at most the size given; a missing directory, a
//! wrong password and an oversized context each get their own error.

use std::io::Read;
use warren_git::{GitError, GitReader, Remote};
use warren_testkit::git_http::{have_git, GitHttpServer};
use warren_types::git::GitCredential;

/// The names in the archive, read from its start.
fn listing(archive: &mut std::fs::File) -> Vec<String> {
    let mut bytes = Vec::new();
    archive.read_to_end(&mut bytes).unwrap();
    warren_testkit::process::tar_names(&bytes)
}

#[tokio::test]
async fn a_directory_at_a_ref_is_archived_alone_within_its_limit() {
    if !have_git() {
        return;
    }
    let server = GitHttpServer::start("ann", "archive-pass").await.unwrap();
    let first = server
        .create_repo(
            "app",
            &[
                (".devcontainer/devcontainer.json", "{}"),
                (".devcontainer/Dockerfile", "FROM scratch\n"),
                ("src/main.rs", "fn main() {}\n"),
                ("README", "hi\n"),
            ],
        )
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let reader = GitReader::new(cache.path(), super::read::loopback());
    let url = server.url("app");
    let cred = GitCredential::Basic {
        username: "ann".into(),
        password: "archive-pass".into(),
    };
    let remote = Remote {
        url: &url,
        credential: Some(&cred),
    };

    let mut sub = reader
        .archive(remote, "main", ".devcontainer", 1 << 20)
        .await
        .unwrap();
    assert_eq!(sub.commit, first);
    assert_eq!(
        listing(&mut sub.file),
        ["Dockerfile", "devcontainer.json"],
        "only the directory, relative to it"
    );
    let mut root = reader.archive(remote, "main", ".", 1 << 20).await.unwrap();
    assert_eq!(
        listing(&mut root.file),
        [
            ".devcontainer/Dockerfile",
            ".devcontainer/devcontainer.json",
            "README",
            "src/main.rs"
        ]
    );
    // The trees, the contents' identity: one per directory, 40 hex digits.
    for t in [&sub.tree, &root.tree] {
        assert!(
            t.len() == 40 && t.bytes().all(|b| b.is_ascii_hexdigit()),
            "{t}"
        );
    }
    assert_ne!(sub.tree, root.tree);
    // tar pads to whole records; the length given is the file's.
    assert_eq!(root.len, root.file.metadata().unwrap().len());
    assert_eq!(sub.len, sub.file.metadata().unwrap().len());

    match reader.archive(remote, "main", ".", 100).await {
        Err(e @ GitError::ArchiveTooLarge { .. }) => {
            assert!(e.to_string().contains("more than the 100 bytes"), "{e}")
        }
        other => panic!("an oversized context: {other:?}"),
    }
    match reader.archive(remote, "main", "docs", 1 << 20).await {
        Err(e @ GitError::PathNotFound { .. }) => assert!(e.to_string().contains("docs/"), "{e}"),
        other => panic!("a missing directory: {other:?}"),
    }
    match reader.archive(remote, "main", "README", 1 << 20).await {
        Err(GitError::PathNotFound { .. }) => {}
        other => panic!("a file is no directory: {other:?}"),
    }
    let wrong = GitCredential::Basic {
        username: "ann".into(),
        password: "not-it".into(),
    };
    let err = reader
        .archive(
            Remote {
                url: &url,
                credential: Some(&wrong),
            },
            "main",
            ".",
            1 << 20,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, GitError::Auth { .. }), "{err:?}");
    // The cut-off archive left nothing behind in the cache directory but the repositories.
    let leftovers: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "repos")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
