//! What a user waits for (issue 15), as a newcomer measures it: whole `warren` CLI processes
//! with `--wait` against the `podman` CLI doing the same to a container of the same image,
//! interleaved so load drifts hit both, each printed as a ratio to its podman baseline:
//!
//! - `warren ws create --devfile f --wait` against `podman run -d` (goal ≤ 1.25×)
//! - `warren ws stop --wait` against `podman stop` (goal ≤ 1.1×)
//! - `warren ws start --wait` against `podman start` (goal ≤ 1.25×)
//! - a server devfile (httpd on a declared endpoint): `warren ws create --wait`, which ends
//!   once the port listens, against `podman run -d -p` until the published port accepts
//! - on `warren up` (proxy included): from `warren ws create` until the first HTTP 200
//!   through the proxy (with the CLI's token), against `podman run -d -p` until the first
//!   200 on the published port (goal ≤ 1.5×)
//!
//! Runs `warren server`, `warren relay` and `warren agent` as separate processes (the test
//! support's `Stack`); the image is local before anything is timed. Skips with a message
//! when Podman is absent; removes all it creates. Run it on a release build:
//! `cargo bench -p warren --bench user_wait`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const RUNS: usize = 9;

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

/// The status code of `GET /` at `addr` with `host` and an optional bearer token, if any
/// answer came.
fn http_status(addr: (&str, u16), host: &str, token: Option<&str>) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    s.write_all(
        format!("GET / HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// Polls until `GET /` answers 200; the time since `t0`.
fn until_200(t0: Instant, addr: (&str, u16), host: &str, token: Option<&str>) -> Duration {
    while http_status(addr, host, token) != Some(200) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no 200 from {host}");
        std::thread::sleep(Duration::from_millis(5));
    }
    t0.elapsed()
}

/// Create → first 200 through `warren up`'s proxy, against podman run → first 200.
fn through_the_proxy(baseline_names: &[String]) -> (Vec<Duration>, Vec<Duration>) {
    let up = Up::start();
    let token =
        warren_cli::credentials::load(&up.home.path().join(warren_cli::credentials::FILE_NAME))
            .expect("CLI credentials")
            .expect("credentials written by warren up")
            .token;
    let devfile = write_file(up.home.path(), "web.yaml", WEB_DEVFILE);
    let devfile = devfile.display().to_string();
    let names: Vec<String> = (0..RUNS).map(|i| format!("bench-wait-web-{i}")).collect();
    let _cleanup = Workspaces(names.clone());
    let (mut w, mut p) = (vec![], vec![]);
    for (name, ctr) in names.iter().zip(baseline_names) {
        let t0 = Instant::now();
        let out = up.cli_ok(&[
            "ws",
            "create",
            "--devfile",
            &devfile,
            "--name",
            name,
            "-o",
            "json",
        ]);
        let created: serde_json::Value = serde_json::from_str(&out).expect("ws create JSON");
        let url = created["endpoints"]["web"]
            .as_str()
            .expect("an endpoint URL")
            .to_owned();
        // http://8080-{name}.ws.localhost:{port}/
        let host = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let port: u16 = host
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("port");
        w.push(until_200(t0, ("127.0.0.1", port), &host, Some(&token)));
        up.cli_ok(&["ws", "rm", name, "--wait"]);

        let port = free_port();
        let t0 = Instant::now();
        podman_timed(&[
            "run", "-d", "--init", "--name", ctr, "-p", &format!("127.0.0.1:{port}:8080"),
            IMAGE, "sh", "-c",
            "mkdir -p /tmp/www && echo served > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www",
        ]);
        p.push(until_200(t0, ("127.0.0.1", port), "localhost", None));
        let _ = Command::new("podman")
            .args(["rm", "-f", "-t", "0", ctr])
            .output();
    }
    (w, p)
}

fn main() {
    if !podman_bench_runs("user-wait") {
        return;
    }
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
    warm_up(&home, &devfile, "bench-wait-warm");

    let (mut w_create, mut w_stop, mut w_start) = (vec![], vec![], vec![]);
    let (mut p_create, mut p_stop, mut p_start) = (vec![], vec![], vec![]);
    for (name, ctr) in names.iter().zip(&baseline_names) {
        w_create.push(create_timed(&home, &devfile, name));
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
        w_stop.push(warren_timed(&home, &["ws", "stop", name, "--wait"]));
        p_stop.push(podman_timed(&["stop", "-t", "10", ctr]));
        w_start.push(warren_timed(&home, &["ws", "start", name, "--wait"]));
        p_start.push(podman_timed(&["start", ctr]));
        warren_timed(&home, &["ws", "rm", name, "--wait"]);
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
        w_server.push(create_timed(&home, &server_devfile, &name));
        warren_timed(&home, &["ws", "rm", &name, "--wait"]);
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
    let (w_proxy, p_proxy) = through_the_proxy(&baseline_names);

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
        (
            "create -> first 200 via the proxy / podman run -> first 200",
            w_proxy,
            p_proxy,
            1.5,
        ),
    ] {
        let (wm, pm) = (median(w), median(p));
        println!(
            "  {what}: warren median {wm:8.1} ms  podman median {pm:8.1} ms  ratio {:.2}x  (goal <= {goal}x)",
            wm / pm
        );
    }
}
