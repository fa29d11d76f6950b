//! Density (issue 38): what one more workspace costs on an agent that already holds many.
//!
//! For 0, 10, 50 and 200 workspaces already on the agent (every other one stopped), whole
//! `warren` CLI processes against `podman` CLI processes on the same engine, interleaved so
//! load drifts hit both, each printed as a ratio to its podman baseline. Each Warren
//! operation is paired with the engine doing the same work by hand (the goal's ratio), and,
//! as the issue listed them, with the single-container command alone:
//!
//! - `warren ws create --wait`: a workspace is a network (isolated), a volume and a
//!   container on them with a published port, so `podman network create`, `podman volume
//!   create` and `podman run -d` of such a container; alone, `podman run -d`;
//! - `warren ws stop --wait` against `podman stop` (the same work);
//! - `warren ws rm --wait`: `podman rm`, `podman network rm` and `podman volume rm`; alone,
//!   `podman rm`.
//!
//! Goal: ≤ 1.25× the same work at every size. Then the agent's CPU while idle with the
//! largest number of workspaces present, as a share of one core (goal < 2 %).
//!
//! Runs `warren server`, `warren relay` and `warren agent` as separate processes (the test
//! support's `Stack`). Sizes can be narrowed with `WARREN_BENCH_DENSITY_SIZES=0,10`. Skips
//! with a message when Podman is absent; removes all it creates, also when it fails. Run it on
//! a release build: `cargo bench -p warren --bench density`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

const RUNS: usize = 5;
const DEFAULT_SIZES: [usize; 4] = [0, 10, 50, 200];
/// How long the idle agent's CPU time is sampled.
const IDLE_WINDOW: Duration = Duration::from_secs(30);
/// Every name this benchmark gives starts with it (the clean-up finds them by it).
const PREFIX: &str = "density-";

/// A keep-alive workspace with no command, as a user's first one.
const BUSYBOX: &str = r#"
schemaVersion: 2.2.0
metadata:
  name: density
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 64Mi
"#;

/// Removes every container, volume and network whose name carries [`PREFIX`], in a few
/// engine calls (one workspace at a time would take minutes with hundreds).
struct Cleanup;

impl Drop for Cleanup {
    fn drop(&mut self) {
        let names = |args: &[&str]| -> Vec<String> {
            podman(args)
                .lines()
                .filter(|n| n.contains(PREFIX))
                .map(str::to_owned)
                .collect()
        };
        let containers = names(&["ps", "-a", "--format", "{{.Names}}"]);
        if !containers.is_empty() {
            let mut args = vec!["rm", "-f", "-t", "0"];
            args.extend(containers.iter().map(String::as_str));
            podman(&args);
        }
        let volumes = names(&["volume", "ls", "--format", "{{.Name}}"]);
        if !volumes.is_empty() {
            let mut args = vec!["volume", "rm", "-f"];
            args.extend(volumes.iter().map(String::as_str));
            podman(&args);
        }
        let networks = names(&["network", "ls", "--format", "{{.Name}}"]);
        if !networks.is_empty() {
            let mut args = vec!["network", "rm", "-f"];
            args.extend(networks.iter().map(String::as_str));
            podman(&args);
        }
    }
}

/// CPU time (user + system) of a process and its threads, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the agent's stat");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name and state.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

fn clock_ticks_per_second() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output();
    out.ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Brings the agent to `size` workspaces (every other one stopped) and waits until each
/// shows the state it should.
fn fill(stack: &Stack, devfile: &str, present: &mut usize, size: usize) {
    let home = stack.cli_home();
    let t0 = Instant::now();
    for i in *present..size {
        let name = format!("{PREFIX}fill-{i}");
        warren_timed(
            &home,
            &["ws", "create", "--devfile", devfile, "--name", &name],
        );
    }
    for i in *present..size {
        let name = format!("{PREFIX}fill-{i}");
        // Running ones are waited for by `start --wait` (already started: it returns once
        // Running); every other one is stopped.
        let verb = if i % 2 == 1 { "stop" } else { "start" };
        warren_timed(&home, &["ws", verb, &name, "--wait"]);
    }
    if size > *present {
        println!(
            "  (filled {} -> {size} workspaces in {:.1} s)",
            *present,
            t0.elapsed().as_secs_f64()
        );
    }
    *present = size.max(*present);
}

/// `podman run -d` of a keep-alive container called `name` as Warren's (an init, so `sleep`
/// stops at once on SIGTERM, and its memory limit), with `extra` options.
fn run_args<'a>(name: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "-d", "--init", "--memory", "64m", "--name", name];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--entrypoint", "sh", IMAGE, "-c", "exec sleep 86400"]);
    args
}

struct Row {
    size: usize,
    what: &'static str,
    warren: f64,
    podman: f64,
}

fn main() {
    if !podman_bench_runs("density") {
        return;
    }
    let sizes: Vec<usize> = std::env::var("WARREN_BENCH_DENSITY_SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .map(|n| {
                    n.trim()
                        .parse()
                        .expect("WARREN_BENCH_DENSITY_SIZES: numbers")
                })
                .collect()
        })
        .unwrap_or_else(|| DEFAULT_SIZES.to_vec());
    let _cleanup = Cleanup;
    let stack = Stack::start(true);
    let home = stack.cli_home();
    let devfile = write_file(stack.dir.path(), "devfile.yaml", BUSYBOX);
    let devfile = devfile.display().to_string();
    // One unmeasured round warms the stack's connections and the engine.
    let warm = format!("{PREFIX}warm");
    warm_up(&home, &devfile, &warm);

    let mut rows = vec![];
    let mut present = 0;
    for &size in &sizes {
        fill(&stack, &devfile, &mut present, size);
        let (mut w_create, mut w_stop, mut w_rm) = (vec![], vec![], vec![]);
        let (mut p_create, mut p_stop, mut p_rm) = (vec![], vec![], vec![]);
        let (mut p_run, mut p_rm_ctr) = (vec![], vec![]);
        for i in 0..RUNS {
            let name = format!("{PREFIX}m{size}-{i}");
            w_create.push(create_timed(&home, &devfile, &name));
            // The same work by hand: a network, a volume and the container on them.
            let base = format!("warren-bench-{PREFIX}{size}-{i}");
            let (net, vol, ctr) = (
                format!("{base}-net"),
                format!("{base}-vol"),
                format!("{base}-ctr"),
            );
            let mount = format!("{vol}:/projects");
            let by_hand = podman_timed(&["network", "create", "-o", "isolate=true", &net])
                + podman_timed(&["volume", "create", &vol])
                + podman_timed(&run_args(
                    &ctr,
                    &["--network", &net, "-v", &mount, "-p", "127.0.0.1::8080"],
                ));
            p_create.push(by_hand);
            // The single-container command the issue names, on the default network.
            let alone = format!("{base}-alone");
            p_run.push(podman_timed(&run_args(&alone, &[])));
            w_stop.push(warren_timed(&home, &["ws", "stop", &name, "--wait"]));
            p_stop.push(podman_timed(&["stop", "-t", "10", &ctr]));
            podman_timed(&["stop", "-t", "10", &alone]);
            w_rm.push(warren_timed(&home, &["ws", "rm", &name, "--wait"]));
            p_rm.push(
                podman_timed(&["rm", &ctr])
                    + podman_timed(&["network", "rm", &net])
                    + podman_timed(&["volume", "rm", &vol]),
            );
            p_rm_ctr.push(podman_timed(&["rm", &alone]));
        }
        let rows_of = [
            ("create --wait / same by hand ", w_create.clone(), p_create),
            ("create --wait / podman run -d", w_create, p_run),
            ("stop --wait   / podman stop  ", w_stop, p_stop),
            ("rm --wait     / same by hand ", w_rm.clone(), p_rm),
            ("rm --wait     / podman rm    ", w_rm, p_rm_ctr),
        ];
        for (what, w, p) in rows_of {
            let row = Row {
                size,
                what,
                warren: median(w),
                podman: median(p),
            };
            println!(
                "  {:>4} present  {}: warren {:8.1} ms  podman {:8.1} ms  ratio {:.2}x",
                row.size,
                row.what,
                row.warren,
                row.podman,
                row.warren / row.podman
            );
            rows.push(row);
        }
    }

    // The agent idle among everything present: nothing changes, only its timers run.
    let pid = stack
        .agent
        .as_ref()
        .and_then(|a| a.pid())
        .expect("the agent's pid");
    let settle = Instant::now();
    // Whatever the last commands set in motion (reports, probes) ends well within this.
    while settle.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let (t0, c0) = (Instant::now(), cpu_ticks(pid));
    std::thread::sleep(IDLE_WINDOW);
    let (elapsed, c1) = (t0.elapsed(), cpu_ticks(pid));
    let idle = (c1 - c0) as f64 / clock_ticks_per_second() / elapsed.as_secs_f64() * 100.0;

    println!(
        "\ndensity ({} build; whole CLI processes, median of {RUNS} runs each, interleaved)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!("  present  operation                          warren ms  podman ms  ratio  (goal <= 1.25x against the same work by hand)");
    for r in &rows {
        println!(
            "  {:>7}  {}  {:9.1}  {:9.1}  {:.2}x",
            r.size,
            r.what,
            r.warren,
            r.podman,
            r.warren / r.podman
        );
    }
    println!(
        "  agent CPU idle with {present} workspaces present: {idle:.2} % of one core over {:.0} s (goal < 2 %)",
        elapsed.as_secs_f64()
    );
}
