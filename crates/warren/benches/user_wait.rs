//! What a user waits for (issue 15), as a newcomer measures it: whole `warren` CLI processes
//! with `--wait` against the `podman` CLI doing the same to a container of the same image,
//! interleaved so load drifts hit both, each printed as a ratio to its podman baseline:
//!
//! - `warren ws create --devfile f --wait` against `podman run -d` (goal ≤ 1.25×)
//! - `warren ws stop --wait` against `podman stop` (goal ≤ 1.1×)
//! - `warren ws start --wait` against `podman start` (goal ≤ 1.25×)
//! - a server devfile (httpd on a declared endpoint): `warren ws create --wait`, which ends
//!   once the port listens, against `podman run -d -p` until the published port accepts
//!
//! Runs `warren server`, `warren relay` and `warren agent` as separate processes (the test
//! support's `Stack`); the image is local before anything is timed. Skips with a message
//! when Podman is absent; removes all it creates. Run it on a release build:
//! `cargo bench -p warren --bench user_wait`.

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const RUNS: usize = 5;

/// One container serving HTTP on a declared endpoint: `Running` waits for it to listen.
const SERVER_DEVFILE: &str = r#"
schemaVersion: 2.2.0
metadata:
  name: bench-server
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      command: ["httpd", "-f", "-p", "8080"]
      endpoints:
        - name: web
          targetPort: 8080
"#;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    ms(v[v.len() / 2])
}

/// Runs the CLI and fails loudly when it does.
fn warren(home: &Path, args: &[&str]) -> Duration {
    let t0 = Instant::now();
    let out = cli(home, args, None);
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "warren {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn podman_timed(args: &[&str]) -> Duration {
    let t0 = Instant::now();
    let out = Command::new("podman").args(args).output().expect("podman");
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// Removes the baseline's containers, whatever happened.
struct Baseline(Vec<String>);

impl Drop for Baseline {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = Command::new("podman")
                .args(["rm", "-f", "-t", "0", name])
                .output();
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !podman_available() {
        eprintln!("skipping the user-wait benchmark: podman not found (install it with .ci/setup-podman.sh)");
        return;
    }
    ensure_image();
    let names: Vec<String> = (0..RUNS).map(|i| format!("bench-wait-{i}")).collect();
    let _cleanup = Workspaces(names.clone());
    let baseline_names: Vec<String> = (0..RUNS)
        .map(|i| format!("warren-bench-wait-{i}"))
        .collect();
    let _baseline = Baseline(baseline_names.clone());

    let stack = Stack::start(true);
    let home = stack.cli_home();
    let devfile = write_file(stack.dir.path(), "devfile.yaml", DEVFILE);
    let devfile = devfile.display().to_string();
    // One unmeasured round warms the stack's connections and the engine.
    warren(
        &home,
        &[
            "ws",
            "create",
            "--devfile",
            &devfile,
            "--name",
            "bench-wait-warm",
            "--wait",
        ],
    );
    warren(&home, &["ws", "rm", "bench-wait-warm", "--wait"]);

    let (mut w_create, mut w_stop, mut w_start) = (vec![], vec![], vec![]);
    let (mut p_create, mut p_stop, mut p_start) = (vec![], vec![], vec![]);
    for (name, ctr) in names.iter().zip(&baseline_names) {
        w_create.push(warren(
            &home,
            &[
                "ws",
                "create",
                "--devfile",
                &devfile,
                "--name",
                name,
                "--wait",
            ],
        ));
        p_create.push(podman_timed(&[
            "run",
            "-d",
            // As Warren's containers: without an init, `sleep` ignores SIGTERM and every
            // stop takes the whole grace period.
            "--init",
            "--name",
            ctr,
            "--entrypoint",
            "sh",
            IMAGE,
            "-c",
            "exec sleep 86400",
        ]));
        w_stop.push(warren(&home, &["ws", "stop", name, "--wait"]));
        p_stop.push(podman_timed(&["stop", "-t", "10", ctr]));
        w_start.push(warren(&home, &["ws", "start", name, "--wait"]));
        p_start.push(podman_timed(&["start", ctr]));
        warren(&home, &["ws", "rm", name, "--wait"]);
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", ctr])
            .output();
    }
    // A server: create until it listens, against `podman run -d` until its published port
    // accepts a connection.
    let server_devfile = write_file(stack.dir.path(), "server.yaml", SERVER_DEVFILE);
    let server_devfile = server_devfile.display().to_string();
    let _cleanup_servers = Workspaces((0..RUNS).map(|i| format!("bench-wait-srv-{i}")).collect());
    let (mut w_server, mut p_server) = (vec![], vec![]);
    for (i, ctr) in baseline_names.iter().enumerate() {
        let name = format!("bench-wait-srv-{i}");
        w_server.push(warren(
            &home,
            &[
                "ws",
                "create",
                "--devfile",
                &server_devfile,
                "--name",
                &name,
                "--wait",
            ],
        ));
        warren(&home, &["ws", "rm", &name, "--wait"]);
        let port = free_port();
        let t0 = Instant::now();
        podman_timed(&[
            "run",
            "-d",
            "--init",
            "--name",
            ctr,
            "-p",
            &format!("127.0.0.1:{port}:8080"),
            IMAGE,
            "httpd",
            "-f",
            "-p",
            "8080",
        ]);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the baseline never listened"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        p_server.push(t0.elapsed());
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", ctr])
            .output();
    }
    drop(stack);

    println!(
        "user-visible waits ({} build; whole CLI processes, {RUNS} runs each, interleaved)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    for (what, w, p, goal) in [
        ("create --wait / podman run -d", w_create, p_create, 1.25),
        ("stop --wait   / podman stop  ", w_stop, p_stop, 1.1),
        ("start --wait  / podman start ", w_start, p_start, 1.25),
        (
            "server create --wait / podman run -d until it listens",
            w_server,
            p_server,
            1.25,
        ),
    ] {
        let (wm, pm) = (median(w), median(p));
        println!(
            "  {what}: warren median {wm:8.1} ms  podman median {pm:8.1} ms  ratio {:.2}x  (goal <= {goal}x)",
            wm / pm
        );
    }
}
