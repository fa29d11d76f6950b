//! The `warren` container image as `deploy/container/build.sh` builds it (from the Debian image
//! CI makes without a registry): it runs as the unprivileged user of the manifests, on a
//! read-only root, and `warren server` in it serves `/readyz`.
//!
//! Skips with a notice without Podman or the Debian base image, unless `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use std::process::Command;
use std::time::Duration;
use support::*;
use warren_testkit::process::{output_ok, stdout_ok};

/// Removes the test's container and image, whatever happens.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", &self.container])
            .output();
        let _ = Command::new("podman")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

#[test]
fn the_image_serves_as_an_unprivileged_user_on_a_read_only_root() {
    if !podman_available() {
        return;
    }
    if !image_exists(DEBIAN_IMAGE) {
        let notice = format!("no {DEBIAN_IMAGE} (run .ci/setup-podman.sh image-debian)");
        if std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1") {
            panic!("WARREN_REQUIRE_ENGINE=1 but {notice}");
        }
        eprintln!("skipping: {notice}");
        return;
    }
    let id = std::process::id();
    let guard = Cleanup {
        container: format!("warren-image-test-{id}"),
        image: format!("localhost/warren-image-test:{id}"),
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/container/build.sh"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let debug_file = dir.path().join("warren.debug");
    let out = Command::new("bash")
        .args([script, &guard.image, DEBIAN_IMAGE])
        .env("WARREN_BINARY", warren_bin())
        .env("WARREN_DEBUG_OUT", &debug_file)
        .output()
        .expect("run build.sh");
    assert!(
        out.status.success(),
        "build.sh failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The shipped binary has no debug information, but names the file that keeps it; that
    // file has the line tables a crash's addresses are symbolised with.
    let shipped = dir.path().join("shipped");
    let holder = format!("{}-copy", guard.container);
    podman(&["create", "--name", &holder, &guard.image]);
    podman(&[
        "cp",
        &format!("{holder}:/usr/local/bin/warren"),
        &shipped.display().to_string(),
    ]);
    podman(&["rm", "-f", &holder]);
    let sections = |path: &std::path::Path| {
        stdout_ok(Command::new("readelf").args(["-S", "--wide"]).arg(path))
    };
    let in_image = sections(&shipped);
    assert!(
        !in_image.contains(".debug_line") && !in_image.contains(".debug_info"),
        "the image's binary carries debug information:\n{in_image}"
    );
    assert!(in_image.contains(".gnu_debuglink"), "{in_image}");
    assert!(
        sections(&debug_file).contains(".debug_line"),
        "the kept debug file has no line tables"
    );
    let full = std::fs::metadata(warren_bin()).expect("the binary").len();
    let stripped = std::fs::metadata(&shipped)
        .expect("the shipped binary")
        .len();
    eprintln!("binary: {full} bytes as built, {stripped} bytes in the image");
    assert!(stripped < full, "{stripped} bytes shipped of {full}");
    let user = podman(&[
        "image",
        "inspect",
        "--format",
        "{{.Config.User}}",
        &guard.image,
    ]);
    assert_eq!(user.trim(), "65532:65532");

    let port = free_port();
    output_ok(Command::new("podman").args([
        "run",
        "-d",
        "--name",
        &guard.container,
        "--network",
        "host",
        "--read-only",
        "--tmpfs",
        "/tmp",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        &guard.image,
        "server",
        "--home",
        "/tmp/home",
        "--listen",
        &format!("127.0.0.1:{port}"),
    ]));
    let logs = || podman(&["logs", &guard.container]);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_for(
        "the server in the image to be ready",
        Duration::from_secs(60),
        || {
            Command::new("curl")
                .args(["-sf", "-o", "/dev/null", "--max-time", "2", &ready])
                .status()
                .ok()
                .filter(|s| s.success())
        },
        || {
            format!(
                "container log:\n{}\n{}",
                logs(),
                podman(&["ps", "-a", "--filter", &format!("name={}", guard.container)])
            )
        },
    );
    let uid = podman(&["exec", &guard.container, "id", "-u"]);
    assert_eq!(uid.trim(), "65532", "{}", logs());
    // The root is read-only, even for root (the image's user could not write there anyway).
    let out = Command::new("podman")
        .args(["exec", "--user", "0", &guard.container, "touch", "/x"])
        .output()
        .expect("podman exec");
    assert!(!out.status.success(), "the root file system is writable");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The system CA store is there for HTTPS to git hosts and identity providers.
    let out = Command::new("podman")
        .args([
            "exec",
            &guard.container,
            "test",
            "-s",
            "/etc/ssl/certs/ca-certificates.crt",
        ])
        .status()
        .expect("podman exec");
    assert!(out.success(), "no CA certificates in the image");
    assert!(
        logs().contains("Created the first admin account"),
        "{}",
        logs()
    );
}
