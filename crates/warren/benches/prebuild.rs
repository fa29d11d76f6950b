//! Prebuilds (issue 43): "create → ready to code" for a project whose setup installs a few
//! hundred packages from a local package registry, with a prebuild and cold, each printed as
//! a ratio to (and the difference from) an empty workspace's create → Running, measured in
//! the same run, interleaved:
//!
//! - empty: `warren ws create --devfile <one container> --wait`
//! - cold: `warren ws create --project <prebuilds off> --wait`, which returns once the startup
//!   (clone, setup) is through; the setup's marker (`/projects/.ready-to-code`) is then checked
//! - prebuilt: the same on a project whose prebuild is ready (goal: ≤ empty + 1 s)
//! - pooled: `warren ws create --project <a warm pool of one> --wait` (no name, so it takes
//!   the pool's stopped workspace); the pool is refilled before the next run
//!
//! The registry is an HTTP server on the host serving `WARREN_BENCH_PACKAGES` (1,500) packages
//! of `WARREN_BENCH_PACKAGE_FILES` (40) files each as tar archives; the setup downloads and
//! unpacks each one (busybox `wget` and `tar`) into `/projects/node_modules` and checks every
//! file's digest, as a package manager does. `WARREN_BENCH_BACKGROUND` (8) running workspaces
//! are present throughout. Runs `warren up`; skips with a message when Podman is absent;
//! removes all it creates. `cargo bench -p warren --bench prebuild`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::*;
use warren_testkit::bench::{env_or, median};

const PASSWORD: &str = "pw-bench-prebuild";

const RUNS: usize = 3;

/// The project's definition: `install` is the slow setup a prebuild runs; `hello` runs at
/// every start.
const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: bench-prebuilt
attributes:
  warren.dev/prebuild: [install]
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 512Mi
      mountSources: true
commands:
  - id: install
    exec:
      component: dev
      commandLine: sh "$PROJECT_SOURCE/install.sh"
  - id: hello
    exec:
      component: dev
      commandLine: echo start >> /projects/.starts
events:
  postStart: [install, hello]
"#;

/// An empty workspace: one container of the same image.
const EMPTY: &str = r#"schemaVersion: 2.2.0
metadata:
  name: bench-empty
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 512Mi
"#;

/// The setup: every package of `packages.txt` from the registry, unpacked, each file's
/// digest recorded, then the marker. Idempotent as a package manager's install is.
fn install_script(registry: &str) -> String {
    format!(
        "set -e\n\
         mkdir -p /projects/node_modules\n\
         while read -r p; do\n\
         \x20 wget -q -O - \"{registry}/packages/$p.tar\" | tar -x -C /projects/node_modules\n\
         done < \"$PROJECT_SOURCE/packages.txt\"\n\
         find /projects/node_modules -type f | sort | xargs sha256sum > /projects/.integrity\n\
         touch /projects/.ready-to-code\n"
    )
}

/// Package `name` as an uncompressed tar archive of `files` text files (text only, so the
/// registry serves it as a string), made by the host's `tar`.
fn package(dir: &std::path::Path, name: &str, files: usize) -> String {
    let root = dir.join(name);
    std::fs::create_dir_all(root.join("lib")).expect("package dir");
    for f in 0..files {
        let body: String = (0..40)
            .map(|l| format!("module.exports.{name}_{f}_{l} = function () {{ return {l}; }};\n"))
            .collect();
        std::fs::write(root.join("lib").join(format!("f{f}.js")), body).expect("file");
    }
    std::fs::write(
        root.join("package.json"),
        format!("{{\"name\": \"{name}\", \"version\": \"1.0.0\"}}\n"),
    )
    .expect("package.json");
    let out = Command::new("tar")
        .args(["-c", "--format=ustar", "-C"])
        .arg(dir)
        .arg(name)
        .output()
        .expect("tar");
    assert!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("a text-only archive")
}

/// Whether `/projects/.ready-to-code` is in the container of workspace `ws`.
fn is_ready(ws: &str) -> bool {
    running(ws)
        .first()
        .and_then(|c| c["Id"].as_str().map(str::to_owned))
        .is_some_and(|id| {
            podman_sh(&id, "test -f /projects/.ready-to-code")
                .status
                .success()
        })
}

/// `warren ws create` of `args` with `--wait`: how long until it returned, which is once the
/// workspace runs and its startup (the clone, the setup) is through. When `ready`, the setup's
/// marker must then be there: a wait that returned early fails the benchmark rather than
/// flattering it. The check is after the time is taken, as the empty baseline pays none.
fn create_timed(up: &Up, ws: &str, args: &[&str], ready: bool) -> Duration {
    let t0 = Instant::now();
    let mut all = vec!["ws", "create", "--name", ws, "--wait", "--timeout", "10m"];
    all.extend_from_slice(args);
    up.cli_ok(&all);
    let took = t0.elapsed();
    if ready {
        assert!(
            is_ready(ws),
            "`ws create --wait` returned before {ws}'s setup left its marker"
        );
    }
    eprintln!("  {ws}: {:.1} s", took.as_secs_f64());
    took
}

/// `warren ws create` of a workspace of `project` with no name and `--wait`, which takes the
/// project's warm pool's workspace: its name and how long until it returned (then the setup's
/// marker must be there, and the workspace must be the pool's).
fn create_pooled(up: &Up, project: &str) -> (String, Duration) {
    let t0 = Instant::now();
    let out = up.cli_ok(&[
        "ws",
        "create",
        "--project",
        project,
        "--wait",
        "--timeout",
        "10m",
        "-o",
        "json",
    ]);
    let took = t0.elapsed();
    assert!(
        out.contains("taken from the project's warm pool"),
        "not taken from the pool: {out}"
    );
    let created: serde_json::Value = serde_json::from_str(&out).expect("workspace as JSON");
    let ws = created["name"].as_str().expect("its name").to_owned();
    assert!(
        is_ready(&ws),
        "`ws create --wait` returned before {ws}'s setup left its marker"
    );
    eprintln!("  {ws} (pooled): {:.1} s", took.as_secs_f64());
    (ws, took)
}

/// Waits until `project`'s warm pool has a workspace waiting, stopped, to be taken.
fn wait_pool(up: &Up, project: &str) {
    wait_for(
        "the warm pool to be filled",
        Duration::from_secs(900),
        || {
            let out = up.cli_ok(&["project", "prebuild", "list", project, "-o", "json"]);
            let all: serde_json::Value = serde_json::from_str(&out).ok()?;
            let waiting: u64 = all
                .as_array()?
                .iter()
                .filter_map(|b| b["pool_ready"].as_u64())
                .sum();
            (waiting > 0).then_some(())
        },
        || up.log(),
    );
}

/// How many workspaces started from `project`'s prebuilds.
fn used(up: &Up, project: &str) -> u64 {
    let out = up.cli_ok(&["project", "prebuild", "list", project, "-o", "json"]);
    let all: serde_json::Value = serde_json::from_str(&out).expect("prebuilds as JSON");
    let all = all.as_array().cloned().unwrap_or_default();
    all.iter().filter_map(|b| b["used"].as_u64()).sum()
}

fn main() {
    if !podman_bench_runs("prebuild") {
        return;
    }
    let packages: usize = env_or("WARREN_BENCH_PACKAGES", 1500);
    let files: usize = env_or("WARREN_BENCH_PACKAGE_FILES", 40);
    let background: usize = env_or("WARREN_BENCH_BACKGROUND", 8);
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    // The registry, on the host, reachable from workspaces.
    let registry = rt
        .block_on(warren_testkit::files_http::FilesHttpServer::start_on(
            "0.0.0.0:0".parse().expect("address"),
        ))
        .expect("registry");
    let made = tempfile::tempdir().expect("packages dir");
    let names: Vec<String> = (0..packages).map(|i| format!("pkg-{i:04}")).collect();
    for name in &names {
        registry.put(
            &format!("/packages/{name}.tar"),
            &package(made.path(), name, files),
        );
    }
    let registry_url = format!("http://{}:{}", host_address(), registry.addr.port());

    let git = git_server_for_workspaces(&rt, "ann", PASSWORD);
    git.create_repo(
        "app",
        &[
            (".devfile.yaml", DEVFILE),
            ("install.sh", &install_script(&registry_url)),
            ("packages.txt", &(names.join("\n") + "\n")),
        ],
    )
    .expect("repository");

    let home = tempfile::tempdir().expect("home");
    let mut up = Up::start_with(home, &[("WARREN_PREBUILD_POLL_SECONDS", "1")]);
    let owner = std::fs::read_to_string(up.home.path().join("agent").join("owner-id"))
        .expect("the agent's owner id")
        .trim()
        .to_owned();
    let _prebuilds = PrebuildObjects(owner.clone());
    // The warm pool's workspaces have names the benchmark does not know.
    let _pool = InstallationObjects(owner);
    up.allow_egress_to(&host_address());
    let cold = up.project_of(&git, "app", PASSWORD);
    let warm = up.project_of(&git, "app", PASSWORD);
    let pooled = up.project_of(&git, "app", PASSWORD);
    let empty = write_file(up.home.path(), "empty.yaml", EMPTY)
        .display()
        .to_string();

    let mut all: Vec<String> = (0..background)
        .map(|i| format!("bench-pb-bg-{i}"))
        .collect();
    for i in 0..RUNS {
        all.extend(["e", "c", "p"].map(|k| format!("bench-pb-{k}-{i}")));
    }
    let _cleanup = Workspaces(all);
    for i in 0..background {
        let ws = format!("bench-pb-bg-{i}");
        up.cli_ok(&["ws", "create", "--devfile", &empty, "--name", &ws, "--wait"]);
    }

    // The prebuilds, made without anyone asking once turned on; one project keeps a warm
    // pool of one.
    let t0 = Instant::now();
    up.cli_ok(&["project", "prebuild", "on", &warm]);
    up.cli_ok(&["project", "prebuild", "on", &pooled, "--pool", "1"]);
    for project in [&warm, &pooled] {
        wait_for(
            "the prebuild to be ready",
            Duration::from_secs(900),
            || {
                let out = up.cli_ok(&["project", "prebuild", "list", project, "-o", "json"]);
                let all: serde_json::Value = serde_json::from_str(&out).ok()?;
                match all[0]["state"].as_str() {
                    Some("ready") => Some(()),
                    Some("failed") => panic!("the prebuild failed: {:#}", all[0]),
                    _ => None,
                }
            },
            || up.log(),
        );
    }
    let prebuild_took = t0.elapsed();

    let (mut e, mut c, mut p, mut w) = (vec![], vec![], vec![], vec![]);
    for i in 0..RUNS {
        let (we, wc, wp) = (
            format!("bench-pb-e-{i}"),
            format!("bench-pb-c-{i}"),
            format!("bench-pb-p-{i}"),
        );
        e.push(create_timed(&up, &we, &["--devfile", &empty], false));
        c.push(create_timed(&up, &wc, &["--project", &cold], true));
        p.push(create_timed(&up, &wp, &["--project", &warm], true));
        assert_eq!(
            used(&up, &warm),
            i as u64 + 1,
            "{wp} did not start from the prebuild"
        );
        wait_pool(&up, &pooled);
        let (ww, took) = create_pooled(&up, &pooled);
        w.push(took);
        for ws in [&we, &wc, &wp, &ww] {
            up.cli_ok(&["ws", "rm", ws, "--wait", "--timeout", "5m"]);
        }
    }
    up.cli_ok(&["project", "prebuild", "off", &warm]);
    up.cli_ok(&["project", "prebuild", "off", &pooled]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());

    let (e, c, p, w) = (median(e), median(c), median(p), median(w));
    let s = |d: Duration| d.as_secs_f64();
    println!(
        "prebuilds ({} build; {packages} packages of {files} files; {background} workspaces \
         running beside; {RUNS} runs each, interleaved; medians)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!(
        "  the prebuild itself (on → ready): {:.1} s",
        s(prebuild_took)
    );
    println!(
        "  empty workspace create -> Running (baseline): {:.1} s",
        s(e)
    );
    println!(
        "  cold create -> ready to code: {:.1} s  ratio {:.2}x  (+{:.1} s)",
        s(c),
        s(c) / s(e),
        s(c) - s(e)
    );
    println!(
        "  prebuilt create -> ready to code: {:.1} s  ratio {:.2}x  ({:+.1} s; goal <= +1.0 s)",
        s(p),
        s(p) / s(e),
        s(p) - s(e)
    );
    println!(
        "  pooled create -> ready to code: {:.1} s  ratio {:.2}x  ({:+.1} s)",
        s(w),
        s(w) / s(e),
        s(w) - s(e)
    );
}
