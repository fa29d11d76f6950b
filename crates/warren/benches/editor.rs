//! Editor benchmarks on Podman (issue 17), each figure next to a baseline measured in the same
//! run:
//!
//! 1. create → editor answering: from the create request until the first byte of VS Code's
//!    workbench page comes back through the proxy (a personal access token, as a script
//!    would), against create → Running of the same workspace on an agent that injects no
//!    editor.
//! 2. the shared tools volume's preparation: first (the volume removed beforehand), against
//!    `cp -a` of the same files on the host; cached (a restarted agent finding the volume
//!    filled), against a bare `podman run --rm` of the tools image.
//!
//! Runs `warren up` (the test support's `Up`). Needs the images `.ci/setup-editor.sh` and
//! `.ci/setup-podman.sh image-debian` build; skips with a message without them.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const RUNS: usize = 3;
const TOOLS_CACHE: &str = "/var/cache/warren-tools/code-server-4.100.3";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Creates workspace `name` and returns (create → Running, create → workbench page) times;
/// the second only when the agent injects the editor.
fn create_and_time(up: &Up, name: &str, editor: bool) -> (Duration, Option<Duration>) {
    let path = up.home.path().join("bench.devfile.yaml");
    std::fs::write(&path, DEBIAN_DEVFILE).expect("devfile");
    let token = up.admin_token();
    let (port, _) = up.proxy_ports();
    let host = format!("13337-{name}.ws.localhost");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = reqwest::Client::builder()
        .resolve(&host, ([127, 0, 0, 1], port).into())
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let t0 = Instant::now();
    up.cli_ok(&[
        "ws",
        "create",
        "--name",
        name,
        "--devfile",
        path.to_str().expect("path"),
    ]);
    let mut running = None;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if running.is_none() {
            let shown: Value =
                serde_json::from_str(&up.cli_ok(&["ws", "show", name, "-o", "json"]))
                    .expect("JSON");
            if shown["actual_state"] == "Running" {
                running = Some(t0.elapsed());
                if !editor {
                    return (running.unwrap_or_default(), None);
                }
            }
        }
        // The workbench: code-server redirects `/` to `?folder=…`, then serves the page.
        let page = rt.block_on(async {
            match http
                .get(format!("http://{host}:{port}/"))
                .bearer_auth(&token)
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => r
                    .text()
                    .await
                    .is_ok_and(|t| t.contains("code/didStartRenderer")),
                _ => false,
            }
        });
        if page {
            let answered = t0.elapsed();
            return (running.unwrap_or(answered), Some(answered));
        }
        assert!(
            Instant::now() < deadline,
            "{name} never answered:\n{}",
            up.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn remove(up: &Up, name: &str) {
    up.cli_ok(&["ws", "rm", name, "--wait", "--timeout", "2m"]);
}

fn set_editor(up: &Up, on: bool) {
    let agent: Value =
        serde_json::from_str(&up.cli_ok(&["agent", "show", "local", "-o", "json"])).expect("JSON");
    let mut config = agent["config"].clone();
    config["editor"]["name"] = Value::from(if on { "code-server" } else { "none" });
    let path = up.home.path().join("agent-config.json");
    std::fs::write(&path, config.to_string()).expect("config");
    up.cli_ok(&[
        "agent",
        "update",
        "local",
        "--config",
        path.to_str().expect("path"),
    ]);
}

/// The seconds of the last "tools volume ready" the agent logged after `skip` bytes.
fn fill_seconds(up: &Up, skip: usize) -> Option<f64> {
    let log = up.log();
    log.get(skip..)?
        .lines()
        .filter(|l| l.contains("tools volume ready"))
        .filter_map(|l| {
            // Without the terminal colours: `seconds=4.4`.
            let plain = strip_colours(l);
            let value = plain.split("seconds=").nth(1)?;
            value.split_whitespace().next()?.parse().ok()
        })
        .next_back()
}

fn strip_colours(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An SGR sequence: ESC [ … m.
            for d in chars.by_ref() {
                if d == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tools_volumes() -> Vec<String> {
    podman(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        "label=warren.dev/tools-image",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    if !podman_available() || !image_exists(TOOLS_IMAGE) || !image_exists(DEBIAN_IMAGE) {
        eprintln!("skipping the editor benchmark: needs Podman, {TOOLS_IMAGE} (.ci/setup-editor.sh) and localhost/warren-test-debian (.ci/setup-podman.sh image-debian)");
        return;
    }
    // The first fill needs the volume gone: no workspace may use it.
    for v in tools_volumes() {
        let _ = Command::new("podman")
            .args(["volume", "rm", "-f", &v])
            .output();
    }

    let mut up = Up::start();
    let (mut with_editor, mut without) = (Vec::new(), Vec::new());
    let mut first_fill = None;
    for i in 0..RUNS {
        let name = format!("bench-ide-{i}");
        up.workspace = Some(name.clone());
        let skip = up.log().len();
        let (_, answered) = create_and_time(&up, &name, true);
        if i == 0 {
            first_fill = fill_seconds(&up, skip);
        }
        with_editor.push(answered.expect("the editor answered"));
        remove(&up, &name);
    }
    set_editor(&up, false);
    for i in 0..RUNS {
        let name = format!("bench-plain-{i}");
        up.workspace = Some(name.clone());
        let (running, _) = create_and_time(&up, &name, false);
        without.push(running);
        remove(&up, &name);
    }
    set_editor(&up, true);
    // A restarted agent finds the volume filled: its fill is the install's no-op.
    let home = up.crash();
    let mut up = Up::start_in(home);
    let name = "bench-ide-cached".to_owned();
    up.workspace = Some(name.clone());
    let skip = up.log().len();
    let _ = create_and_time(&up, &name, true);
    let cached_fill = fill_seconds(&up, skip);
    remove(&up, &name);
    let _ = up.stop();

    // Baselines for the fill: the same bytes copied on the host; a bare container run.
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let copied = Command::new("cp")
        .args(["-a", TOOLS_CACHE])
        .arg(dir.path().join("copy"))
        .status()
        .is_ok_and(|s| s.success());
    let cp_time = t0.elapsed();
    let t0 = Instant::now();
    let ran = Command::new("podman")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            TOOLS_IMAGE,
            "/bin/sh",
            "-c",
            ":",
        ])
        .status()
        .is_ok_and(|s| s.success());
    let run_time = t0.elapsed();

    let editor = median(with_editor.clone());
    let plain = median(without.clone());
    println!("editor benchmark ({RUNS} runs each, medians)");
    println!(
        "  create → editor answering (workbench through the proxy): {:.0} ms; baseline create → Running without the editor: {:.0} ms; ratio {:.2}",
        ms(editor),
        ms(plain),
        editor.as_secs_f64() / plain.as_secs_f64()
    );
    match (first_fill, copied) {
        (Some(s), true) => println!(
            "  tools volume, first fill: {:.0} ms; baseline cp -a of the same files on the host: {:.0} ms; ratio {:.2}",
            s * 1000.0,
            ms(cp_time),
            s / cp_time.as_secs_f64()
        ),
        _ => println!("  tools volume, first fill: not measured (no fill logged or no {TOOLS_CACHE})"),
    }
    match (cached_fill, ran) {
        (Some(s), true) => println!(
            "  tools volume, cached (a restarted agent): {:.0} ms; baseline podman run --rm of the tools image: {:.0} ms; ratio {:.2}",
            s * 1000.0,
            ms(run_time),
            s / run_time.as_secs_f64()
        ),
        _ => println!("  tools volume, cached: not measured"),
    }
    println!(
        "  all runs (ms): editor {:?}; without {:?}",
        with_editor
            .iter()
            .map(|d| ms(*d).round())
            .collect::<Vec<_>>(),
        without.iter().map(|d| ms(*d).round()).collect::<Vec<_>>()
    );
}
