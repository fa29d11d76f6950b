//! Image pull secrets used, end to end on Podman: a private registry (Debian's
//! `docker-registry` over TLS with htpasswd auth, on a free port) holds the workspace's image;
//! `warren up`'s agent pulls it with the pull secret its configuration names (a registry auth
//! file, as `podman login --authfile` writes), and a wrong secret ends in `Failed` naming the
//! image and the registry's refusal.
//!
//! Skips with a notice without Podman, docker-registry, htpasswd or openssl; fails instead
//! under `WARREN_REQUIRE_ENGINE=1` and `WARREN_REQUIRE_TOOLS=1`.

use crate::support;

use base64::Engine;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{ensure_image, free_port, podman, podman_available, unique_name, wait_for, Up};
use warren_testkit::process::{output_ok, stdout_ok};

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn tools_present() -> bool {
    let missing: Vec<&str> = ["docker-registry", "htpasswd", "openssl"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_TOOLS=1 but {missing:?} missing (.ci/setup-tools.sh)");
    }
    eprintln!("skipping: {missing:?} missing (.ci/setup-tools.sh installs them)");
    false
}

/// A private registry: TLS with a throwaway certificate the engine trusts (certs.d), basic
/// auth for one user. Stopped, and its trust removed, on drop.
struct Registry {
    child: Child,
    addr: String,
    certs_d: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.certs_d);
    }
}

impl Registry {
    fn start(user: &str, password: &str) -> Registry {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        output_ok(
            Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-days",
                    "1",
                    "-subj",
                    "/CN=127.0.0.1",
                    "-addext",
                    "subjectAltName=IP:127.0.0.1",
                ])
                .arg("-keyout")
                .arg(d.join("key.pem"))
                .arg("-out")
                .arg(d.join("cert.pem")),
        );
        let htpasswd = stdout_ok(Command::new("htpasswd").args(["-Bbn", user, password]));
        std::fs::write(d.join("htpasswd"), htpasswd).unwrap();
        std::fs::create_dir_all(d.join("storage")).unwrap();
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root}\n\
             http:\n  addr: {addr}\n  tls:\n    certificate: {cert}\n    key: {key}\n\
             auth:\n  htpasswd:\n    realm: warren-test\n    path: {ht}\n",
            root = d.join("storage").display(),
            cert = d.join("cert.pem").display(),
            key = d.join("key.pem").display(),
            ht = d.join("htpasswd").display(),
        );
        std::fs::write(d.join("config.yml"), config).unwrap();
        // The engine trusts the registry's certificate for this address only.
        let certs_d = PathBuf::from(format!("/etc/containers/certs.d/{addr}"));
        std::fs::create_dir_all(&certs_d).expect("/etc/containers/certs.d (run as root)");
        std::fs::copy(d.join("cert.pem"), certs_d.join("ca.crt")).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("registry.log")).unwrap())
            .spawn()
            .expect("start docker-registry");
        let r = Registry {
            child,
            addr: addr.clone(),
            certs_d,
            _dir: dir,
        };
        wait_for(
            "the registry to listen",
            Duration::from_secs(30),
            || std::net::TcpStream::connect(&addr).ok().map(|_| ()),
            || std::fs::read_to_string(r._dir.path().join("registry.log")).unwrap_or_default(),
        );
        r
    }

    /// Pushes the local test image as `repo:tag` and removes the local copy, so a workspace
    /// must pull it.
    fn push(&self, local: &str, repo: &str, user: &str, password: &str) -> String {
        let image = format!("{}/{repo}", self.addr);
        output_ok(Command::new("podman").args(["tag", local, &image]));
        output_ok(Command::new("podman").args([
            "push",
            "--quiet",
            "--creds",
            &format!("{user}:{password}"),
            &image,
        ]));
        output_ok(Command::new("podman").args(["rmi", &image]));
        image
    }
}

/// A registry auth file as `podman login --authfile` writes it.
fn auth_file(path: &Path, registry: &str, user: &str, password: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::write(
        path,
        format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#),
    )
    .unwrap();
}

fn devfile(image: &str) -> String {
    format!(
        "schemaVersion: 2.2.0\nmetadata:\n  name: private-image\ncomponents:\n  - name: dev\n    \
         container:\n      image: {image}\n      memoryLimit: 128Mi\n      mountSources: true\n"
    )
}

#[test]
fn a_pull_secret_pulls_from_a_private_registry_and_a_wrong_one_fails_naming_it() {
    if !podman_available() || !tools_present() {
        return;
    }
    ensure_image();
    let registry = Registry::start("ann", "registry-pass-1");
    let image = registry.push(
        "localhost/warren-test:latest",
        "team/app:1",
        "ann",
        "registry-pass-1",
    );
    let image2 = registry.push(
        "localhost/warren-test:latest",
        "team/app:2",
        "ann",
        "registry-pass-1",
    );

    let mut up = Up::start();
    // The agent's configuration names the secret; the engine agent reads it from its directory.
    up.update_agent_config(|config| {
        config["image_pull_secrets"] =
            serde_json::json!([{"name": "regcred", "namespace": "default"}]);
    });
    let secret = up.home.path().join("agent/pull-secrets/regcred.json");
    auth_file(&secret, &registry.addr, "ann", "registry-pass-1");

    let (ws, created) = up.create_workspace("pull", &devfile(&image));
    assert_eq!(created["actual_state"], "Running", "{created}");
    assert!(
        !podman(&["images", "-q", &image]).trim().is_empty(),
        "pulled"
    );
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);

    // A wrong password: Failed, naming the image and what the registry said.
    auth_file(&secret, &registry.addr, "ann", "not-the-password");
    let name = unique_name("pull-bad");
    up.workspace = Some(name.clone());
    let file = up.home.path().join("bad.devfile.yaml");
    std::fs::write(&file, devfile(&image2)).unwrap();
    let out = up.cli(&[
        "ws",
        "create",
        "--name",
        &name,
        "--devfile",
        file.to_str().unwrap(),
        "--wait",
        "--timeout",
        "2m",
    ]);
    assert!(
        !out.status.success(),
        "a wrong secret must not start the workspace"
    );
    let shown: Value =
        serde_json::from_str(&up.cli_ok(&["ws", "show", &name, "-o", "json"])).unwrap();
    assert_eq!(shown["actual_state"], "Failed", "{shown}");
    let reason = shown["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&image2), "names the image: {reason}");
    assert!(
        reason.to_ascii_lowercase().contains("unauthorized")
            || reason.to_ascii_lowercase().contains("authentication"),
        "says what the registry refused: {reason}"
    );
    assert!(!reason.contains("not-the-password"), "{reason}");
    up.cli_ok(&["ws", "rm", &name, "--wait", "--timeout", "2m"]);
    assert!(up.stop().success(), "{}", up.log());
}
