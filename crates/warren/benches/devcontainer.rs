//! Dev container benchmark (issue 40): create → usable for a dev container with one Feature
//! from a registry, Warren against the reference Dev Containers CLI (`devcontainer up` of
//! `@devcontainers/cli`) on the same Podman, the same image and the same Feature, in the same
//! run. Each figure is printed as Warren's time and the ratio to the CLI's.
//!
//! - cold: nothing built yet (Warren: the first workspace of the configuration, the Feature not
//!   in the agent's cache; the CLI: its image and Podman's layers of it removed);
//! - warm: the same configuration again (Warren: another workspace, which takes the built
//!   image over; the CLI: `up` again once its container is removed, the layers cached).
//!   The goal is warm ≤ 1.2× the CLI.
//!
//! "Usable" is `warren ws create --wait` returning (the workspace Running) and `devcontainer up`
//! returning (its container started). The agent injects no editor here, as the CLI starts none.
//! The Feature's registry is Debian's docker-registry over TLS (trusted through
//! `/etc/containers/certs.d` by Warren's agent and through `NODE_EXTRA_CA_CERTS` by the CLI).
//!
//! Needs Podman, docker-registry and the CLI (`bash .ci/setup-bench.sh`); skips with a message
//! without them.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;
use warren_testkit::registry::{self, borrowed, simple_feature, Registry, RegistryOptions};

const COLD_RUNS: usize = 2;
const WARM_RUNS: usize = 3;
const GIT_PASSWORD: &str = "bench-dc-pass";

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn have_cli() -> bool {
    Command::new("devcontainer")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn config(feature: &str) -> String {
    format!(
        r#"{{ "image": "localhost/warren-test:latest", "features": {{ "{feature}": {{ "greeting": "hi" }} }} }}"#
    )
}

/// The reference CLI's side: one folder, `up` timed; its containers removed after each run,
/// and for a cold run its image and Podman's dangling layers too.
struct Cli {
    folder: tempfile::TempDir,
    ca_file: std::path::PathBuf,
    label: String,
}

impl Cli {
    fn new(feature: &str, ca_pem: &[u8]) -> Cli {
        let folder = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(folder.path().join(".devcontainer")).expect("folder");
        std::fs::write(
            folder.path().join(".devcontainer/devcontainer.json"),
            config(feature),
        )
        .expect("config");
        let ca_file = folder.path().join("registry-ca.pem");
        std::fs::write(&ca_file, ca_pem).expect("ca");
        Cli {
            folder,
            ca_file,
            label: format!("warren-bench={}", unique_name("dc")),
        }
    }

    fn up(&self) -> Duration {
        let t0 = Instant::now();
        let out = Command::new("devcontainer")
            .args(["up", "--docker-path", "podman", "--id-label", &self.label])
            .arg("--workspace-folder")
            .arg(self.folder.path())
            .env("NODE_EXTRA_CA_CERTS", &self.ca_file)
            .output()
            .expect("devcontainer up");
        let took = t0.elapsed();
        assert!(
            out.status.success(),
            "devcontainer up failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        took
    }

    fn remove_containers(&self) {
        for id in podman(&["ps", "-aq", "--filter", &format!("label={}", self.label)]).lines() {
            let _ = Command::new("podman").args(["rm", "-f", id]).output();
        }
    }

    /// Its images (named `vsc-<folder>-…`) and the layers only they held.
    fn remove_images(&self) {
        let folder = self
            .folder
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_ascii_lowercase();
        for line in podman(&["images", "--format", "{{.Repository}}:{{.Tag}}"]).lines() {
            if line.contains(&format!("vsc-{folder}")) {
                let _ = Command::new("podman").args(["rmi", "-f", line]).output();
            }
        }
        let _ = Command::new("podman")
            .args(["image", "prune", "-f"])
            .output();
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        self.remove_containers();
        self.remove_images();
    }
}

/// Creates workspace `name` of `project`, timed until it is Running.
fn warren_create(up: &Up, project: &str, name: &str) -> Duration {
    let t0 = Instant::now();
    up.cli_ok(&[
        "ws",
        "create",
        "--project",
        project,
        "--name",
        name,
        "--wait",
        "--timeout",
        "5m",
    ]);
    t0.elapsed()
}

fn set_no_editor(up: &Up) {
    up.update_agent_config(|config| {
        config["editor"]["name"] = Value::from("none");
    });
}

fn main() {
    if !podman_available() || !registry::available() {
        println!("devcontainer bench: skipped (needs Podman and docker-registry)");
        return;
    }
    if !have_cli() {
        println!("devcontainer bench: skipped (no `devcontainer` CLI: bash .ci/setup-bench.sh)");
        return;
    }
    let _serial = one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let registry = rt
        .block_on(Registry::start(&RegistryOptions {
            trust_in: Some("/etc/containers/certs.d".into()),
            user: None,
        }))
        .expect("registry");
    let greet = simple_feature(
        "greet",
        r#", "options": { "greeting": { "type": "string", "default": "hello" } }"#,
        "$GREETING",
    );
    let (feature, _) = rt
        .block_on(registry.push_feature("features/greet:1", &borrowed(&greet), None))
        .expect("publishing the Feature");

    // The reference CLI.
    let cli = Cli::new(&feature, registry.ca_pem.as_deref().expect("TLS"));
    let mut cli_cold = vec![];
    for _ in 0..COLD_RUNS {
        cli.remove_images();
        cli_cold.push(cli.up());
        cli.remove_containers();
    }
    let mut cli_warm = vec![];
    for _ in 0..WARM_RUNS {
        cli_warm.push(cli.up());
        cli.remove_containers();
    }
    drop(cli);

    // Warren: `warren up`, a project holding only the configuration.
    let git = git_server_for_workspaces(&rt, "ann", GIT_PASSWORD);
    git.create_repo(
        "bench",
        &[(".devcontainer/devcontainer.json", config(&feature).as_str())],
    )
    .expect("repository");
    let mut warren_cold = vec![];
    let mut warren_warm = vec![];
    for _ in 0..COLD_RUNS {
        // A fresh agent each time: its Feature cache empty; the images of the run before
        // went with their workspaces.
        let mut up = Up::start();
        up.allow_egress_to(&host_address());
        set_no_editor(&up);
        let project = up.project_of(&git, "bench", GIT_PASSWORD);
        let first = unique_name("dccold");
        // Warm runs once, after the first cold one.
        let warm: Vec<String> = if warren_warm.is_empty() {
            (0..WARM_RUNS).map(|_| unique_name("dcwarm")).collect()
        } else {
            vec![]
        };
        let names: Vec<String> = std::iter::once(first.clone()).chain(warm.clone()).collect();
        let _cleanup = Workspaces(names.clone());
        warren_cold.push(warren_create(&up, &project, &first));
        for again in &warm {
            warren_warm.push(warren_create(&up, &project, again));
            let log = up.cli_ok(&["ws", "logs", again, "--container", "warren-build"]);
            assert!(log.contains("reusing image"), "not a warm start: {log}");
        }
        for n in names.iter().rev() {
            up.cli_ok(&["ws", "rm", n, "--wait", "--timeout", "2m"]);
        }
        assert!(up.stop().success(), "{}", up.log());
    }

    let report = |what: &str, warren: &[Duration], cli: &[Duration]| {
        let (w, c) = (median(warren.to_vec()), median(cli.to_vec()));
        println!(
            "devcontainer {what}: warren {:.2} s, devcontainer up {:.2} s, ratio {:.2} (median of {} and {})",
            secs(w),
            secs(c),
            secs(w) / secs(c),
            warren.len(),
            cli.len()
        );
    };
    report(
        "cold (Feature fetched and installed)",
        &warren_cold,
        &cli_cold,
    );
    report(
        "warm (the same configuration again)",
        &warren_warm,
        &cli_warm,
    );
}
