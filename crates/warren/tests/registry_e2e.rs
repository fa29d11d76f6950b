//! Image pull secrets used, end to end on Podman: a private registry (Debian's
//! `docker-registry` over TLS with htpasswd auth, on a free port; `warren_testkit::registry`)
//! holds the workspace's image;
//! `warren up`'s agent pulls it with the pull secret its configuration names (a registry auth
//! file, as `podman login --authfile` writes), and a wrong secret ends in `Failed` naming the
//! image and the registry's refusal.
//!
//! Skips with a notice without Podman, docker-registry or htpasswd; fails instead
//! under `WARREN_REQUIRE_ENGINE=1` and `WARREN_REQUIRE_TOOLS=1`.

use crate::support;

use serde_json::Value;
use std::process::Command;
use support::{ensure_image, podman, podman_available, unique_name, Up};
use warren_testkit::process::output_ok;
use warren_testkit::registry::{self, Registry, RegistryOptions};

/// Where Podman looks for the certificates it trusts per registry.
const CERTS_D: &str = "/etc/containers/certs.d";

/// The local test image pushed to `registry` as `repo:tag`, the local copy removed so a
/// workspace must pull it.
fn push(registry: &Registry, local: &str, repo: &str, user: &str, password: &str) -> String {
    let image = format!("{}/{repo}", registry.addr);
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

fn devfile(image: &str) -> String {
    format!(
        "schemaVersion: 2.2.0\nmetadata:\n  name: private-image\ncomponents:\n  - name: dev\n    \
         container:\n      image: {image}\n      memoryLimit: 128Mi\n      mountSources: true\n"
    )
}

#[test]
fn a_pull_secret_pulls_from_a_private_registry_and_a_wrong_one_fails_naming_it() {
    if !podman_available() || !registry::available() {
        return;
    }
    ensure_image();
    // TLS the engine trusts (Podman's certs.d for this address), basic auth for one user.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let registry = rt
        .block_on(Registry::start(&RegistryOptions {
            trust_in: Some(CERTS_D.into()),
            user: Some(("ann".into(), "registry-pass-1".into())),
        }))
        .expect("registry");
    let push = |tag: &str| {
        push(
            &registry,
            "localhost/warren-test:latest",
            &format!("team/app:{tag}"),
            "ann",
            "registry-pass-1",
        )
    };
    let image = push("1");
    let image2 = push("2");

    let mut up = Up::start();
    // The agent's configuration names the secret; the engine agent reads it from its directory.
    up.update_agent_config(|config| {
        config["image_pull_secrets"] =
            serde_json::json!([{"name": "regcred", "namespace": "default"}]);
    });
    let secret = up.home.path().join("agent/pull-secrets/regcred.json");
    registry::auth_file(&secret, &registry.addr, "ann", "registry-pass-1");

    let (ws, created) = up.create_workspace("pull", &devfile(&image));
    assert_eq!(created["actual_state"], "Running", "{created}");
    assert!(
        !podman(&["images", "-q", &image]).trim().is_empty(),
        "pulled"
    );
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);

    // A wrong password: Failed, naming the image and what the registry said.
    registry::auth_file(&secret, &registry.addr, "ann", "not-the-password");
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
