//! Scale (issue 45): what one installation carries, measured with `warren scaletest` against
//! `warren up` (server, relay and proxy in one process, as a small installation runs them),
//! its simulated agents dialling the relay.
//!
//! - **Terminals**: web terminals at `WARREN_BENCH_SCALE_RATE` bytes a second each (default
//!   40 KiB/s, Coder's figure) through the proxy and relay, for each count of
//!   `WARREN_BENCH_SCALE_TERMINALS` (default 100,250,500,1000,2000): keystroke echo p50/p95/p99
//!   as a ratio to one terminal alone (the baseline, same run); the goal is p95 < 50 ms at
//!   2,000. Sizes stop growing at the first that fails the goal or has errors: the limit.
//! - **API**: the mixed workload over `WARREN_BENCH_SCALE_WORKSPACES` workspaces (default
//!   1,000) of `WARREN_BENCH_SCALE_USERS` users (default 200), at each rate of
//!   `WARREN_BENCH_SCALE_API` (default 50,100,250,500 requests a second): per-operation p95 as a
//!   ratio to the same at 5 requests a second (the baseline); goal p95 < 100 ms, no errors.
//!   The full size is `WARREN_BENCH_SCALE_WORKSPACES=10000 WARREN_BENCH_SCALE_USERS=2000`.
//!   As in production when `WARREN_TEST_DATABASE_URL` and `WARREN_TEST_REDIS_URL` are set:
//!   `warren server` on a PostgreSQL schema of its own and `warren relay` on Redis, each its
//!   own process; otherwise against `warren up` (SQLite).
//! - **Soak**: `WARREN_BENCH_SCALE_SOAK` seconds (default 300) of the mixed workload at 20
//!   requests a second with 50 terminals open, sampling `warren up`'s resident memory and
//!   open file descriptors every 10 s: first and last samples and their ratio (flat is 1.0).
//!
//! Run it on a release build: `cargo bench -p warren --bench scale` (`WARREN_BENCH_SCALE_ONLY=
//! terminals|api|soak` runs one part). The parts on `warren up` skip with a message when Podman
//! is absent (it runs its own agent on it); everything the scale tests make is removed by them.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::*;

fn list(var: &str, default: &[u64]) -> Vec<u64> {
    std::env::var(var)
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn number(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Where a scale test runs: an installation's relay for its agents, and the CLI's
/// environment reaching its API as the admin.
struct Target {
    relay_url: String,
    env: Vec<(&'static str, String)>,
}

impl Target {
    fn up(up: &Up) -> Target {
        Target {
            relay_url: up.relay_url(),
            env: vec![
                ("WARREN_URL", up.api_base()),
                ("WARREN_TOKEN", up.admin_token()),
                (
                    "WARREN_HOME",
                    up.home.path().join("scaletest-cli").display().to_string(),
                ),
            ],
        }
    }

    /// A server and relay as separate processes, the admin signed in with the CLI.
    fn stack(stack: &Stack) -> Target {
        Target {
            relay_url: stack.agent_url(),
            env: vec![("WARREN_HOME", stack.cli_home().display().to_string())],
        }
    }
}

/// One `warren scaletest` run against `target`; its JSON report.
fn scaletest(target: &Target, args: &[String]) -> Value {
    let out = Command::new(warren_bin())
        .arg("scaletest")
        .args(["--relay-url", &target.relay_url, "-o", "json"])
        .args(args)
        .env_remove("WARREN_URL")
        .env_remove("WARREN_TOKEN")
        .envs(target.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .expect("run warren scaletest");
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("no report ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    if !out.status.success() {
        eprintln!("the scale test reported a failure: {}", report["error"]);
    }
    report
}

fn args(pairs: &[(&str, u64)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.to_string()])
        .collect()
}

fn op<'a>(report: &'a Value, name: &str) -> Option<&'a Value> {
    report["load"].as_array()?.iter().find(|o| o["op"] == name)
}

fn f(o: Option<&Value>, key: &str) -> f64 {
    o.and_then(|o| o[key].as_f64()).unwrap_or(f64::NAN)
}

fn errors(report: &Value) -> u64 {
    report["load"]
        .as_array()
        .map(|ops| ops.iter().filter_map(|o| o["errors"].as_u64()).sum())
        .unwrap_or(0)
}

/// Kinds of error of every operation, for the record of what broke first.
fn error_kinds(report: &Value) -> String {
    let mut kinds = vec![];
    for o in report["load"].as_array().into_iter().flatten() {
        if o["errors"].as_u64().unwrap_or(0) > 0 {
            kinds.push(format!("{}: {}", o["op"], o["error_kinds"]));
        }
    }
    if let Some(e) = report["error"].as_str() {
        kinds.push(format!("run: {e}"));
    }
    kinds.join("; ")
}

fn terminals(up: &Target) {
    let rate = number("WARREN_BENCH_SCALE_RATE", 40 * 1024);
    let sizes = list("WARREN_BENCH_SCALE_TERMINALS", &[100, 250, 500, 1000, 2000]);
    let run = |n: u64, seconds: u64| {
        scaletest(
            up,
            &args(&[
                ("users", (n / 20).max(1)),
                ("workspaces", (n / 2).max(2)),
                ("agents", (n / 250).max(1)),
                ("api-rate", 0),
                ("terminals", n),
                ("session-rate", rate),
                ("duration", seconds),
                ("concurrency", 32),
            ]),
        )
    };
    let base = run(1, 10);
    let b = op(&base, "terminal.echo");
    let base_p95 = f(b, "p95_ms");
    println!(
        "== web terminals at {} KiB/s each, through the proxy and relay ==",
        rate / 1024
    );
    println!(
        "  baseline: 1 terminal, echo p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms",
        f(b, "p50_ms"),
        base_p95,
        f(b, "p99_ms")
    );
    for n in sizes {
        let r = run(n, 20);
        let e = op(&r, "terminal.echo");
        let open = op(&r, "terminal.open");
        let kib_s = r["session_bytes"].as_f64().unwrap_or(0.0)
            / 1024.0
            / r["load_seconds"].as_f64().unwrap_or(1.0).max(0.001);
        let p95 = f(e, "p95_ms");
        println!(
            "  {n:>5} terminals: echo p50 {:.2} ms, p95 {:.2} ms ({:.1}x baseline), p99 {:.2} ms, max {:.0} ms; open p95 {:.0} ms; {:.0} KiB/s echoed of {:.0} offered; {} errors   goal: p95 < 50 ms at 2,000",
            f(e, "p50_ms"),
            p95,
            p95 / base_p95,
            f(e, "p99_ms"),
            f(e, "max_ms"),
            f(open, "p95_ms"),
            kib_s,
            (n * rate) as f64 / 1024.0,
            errors(&r)
        );
        if errors(&r) > 0 || p95.is_nan() || p95 >= 50.0 {
            println!("    the limit: {n} terminals ({})", error_kinds(&r));
            break;
        }
    }
}

fn api(up: &Target, on: &str) {
    let users = number("WARREN_BENCH_SCALE_USERS", 200);
    let workspaces = number("WARREN_BENCH_SCALE_WORKSPACES", 1000);
    let rates = list("WARREN_BENCH_SCALE_API", &[50, 100, 250, 500]);
    let run = |rate: u64| {
        scaletest(
            up,
            &args(&[
                ("users", users),
                ("workspaces", workspaces),
                ("agents", (workspaces / 1000).max(1)),
                ("api-rate", rate),
                ("duration", 30),
                ("concurrency", 32),
                ("ready-timeout", 1800),
            ]),
        )
    };
    let base = run(5);
    println!("== the mixed API workload over {workspaces} workspaces of {users} users, {on} ==");
    println!(
        "  set-up: {} users, {} workspaces; all running after {:.1} s",
        users, workspaces, base["ready_seconds"]
    );
    let ops: Vec<String> = base["load"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o["op"].as_str().map(str::to_owned))
        .collect();
    let line = |label: String, r: &Value, baseline: Option<&Value>| {
        let mut worst: f64 = 0.0;
        let mut parts = vec![];
        for name in &ops {
            let p95 = f(op(r, name), "p95_ms");
            worst = worst.max(p95);
            match baseline {
                Some(b) => parts.push(format!(
                    "{name} {p95:.0} ms ({:.1}x)",
                    p95 / f(op(b, name), "p95_ms")
                )),
                None => parts.push(format!("{name} {p95:.0} ms")),
            }
        }
        let calls: f64 = r["load"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["count"].as_f64())
            .sum();
        println!(
            "  {label}: {:.0} calls/s, {} errors, p95 {}; worst p95 {worst:.0} ms   goal: p95 < 100 ms, no errors at 500/s",
            calls / r["load_seconds"].as_f64().unwrap_or(1.0).max(0.001),
            errors(r),
            parts.join(", ")
        );
        worst
    };
    line("baseline at 5/s".to_owned(), &base, None);
    for rate in rates {
        let r = run(rate);
        let worst = line(format!("{rate:>4}/s"), &r, Some(&base));
        if errors(&r) > 0 || worst >= 100.0 {
            println!(
                "    the limit: {rate} requests a second ({})",
                error_kinds(&r)
            );
            break;
        }
    }
}

/// Resident memory (KiB) and open file descriptors of process `pid`.
fn footprint(pid: u32) -> (u64, usize) {
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    (rss, fds)
}

fn soak(up: &Up) {
    let seconds = number("WARREN_BENCH_SCALE_SOAK", 300);
    let pid = up.pid().expect("warren up runs");
    let target = Target::up(up);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let samples = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    let sampler = {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || {
            let mut next = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if Instant::now() >= next {
                    samples.lock().unwrap().push(footprint(pid));
                    next += Duration::from_secs(10);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let r = scaletest(
        &target,
        &args(&[
            ("users", 50),
            ("workspaces", 200),
            ("agents", 2),
            ("api-rate", 20),
            ("terminals", 50),
            ("session-rate", 4096),
            ("duration", seconds),
        ]),
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.join();
    let samples = samples.lock().unwrap().clone();
    // The first samples are the set-up's growth; the load's steady state starts once
    // everything runs: compare the second sample with the last.
    let (Some(first), Some(last)) = (samples.get(1.min(samples.len() - 1)), samples.last()) else {
        println!("  soak: no samples");
        return;
    };
    println!("== soak: {seconds} s of the mixed workload (20/s) with 50 terminals ==");
    println!(
        "  warren up: RSS {} → {} MiB ({:.2}x), open fds {} → {} ({:.2}x); {} errors; {} samples",
        first.0 >> 10,
        last.0 >> 10,
        last.0 as f64 / first.0.max(1) as f64,
        first.1,
        last.1,
        last.1 as f64 / first.1.max(1) as f64,
        errors(&r),
        samples.len()
    );
}

fn main() {
    let only = std::env::var("WARREN_BENCH_SCALE_ONLY").ok();
    let want = |part: &str| only.as_deref().is_none_or(|o| o == part);
    let t = Instant::now();
    // The API as in production: the server on PostgreSQL, the relay on Redis, each its own
    // process; `warren up` (SQLite) where those are not given.
    let production = match (
        std::env::var("WARREN_TEST_DATABASE_URL"),
        std::env::var("WARREN_TEST_REDIS_URL"),
    ) {
        (Ok(db), Ok(redis)) if !db.is_empty() && !redis.is_empty() => Some((db, redis)),
        _ => None,
    };
    if want("api") {
        if let Some((db, redis)) = &production {
            // A schema of its own on the test database, dropped at the end.
            let schema = tokio::runtime::Runtime::new()
                .expect("a runtime")
                .block_on(PgSchema::create(db));
            let peer = free_port();
            let stack = Stack::control_plane_with(
                true,
                vec![("WARREN_DATABASE_URL", schema.url())],
                vec![
                    ("WARREN_REDIS_URL", redis.clone()),
                    ("WARREN_RELAY_PEER_LISTEN", format!("127.0.0.1:{peer}")),
                    (
                        "WARREN_RELAY_PEER_SECRET",
                        "scale-bench-peer-secret-0123456789".into(),
                    ),
                ],
            );
            api(
                &Target::stack(&stack),
                "server on PostgreSQL, relay on Redis",
            );
            drop(stack);
        }
    }
    if !want("terminals") && !want("soak") && (!want("api") || production.is_some()) {
        eprintln!("scale benchmark: {:.0} s", t.elapsed().as_secs_f64());
        return;
    }
    if !podman_available() {
        eprintln!(
            "scale benchmark: `warren up` runs its agent on Podman, which is not available; its parts are skipped"
        );
        return;
    }
    let up = Up::start();
    let target = Target::up(&up);
    if want("terminals") {
        terminals(&target);
    }
    if want("api") && production.is_none() {
        api(&target, "warren up on SQLite");
    }
    if want("soak") {
        soak(&up);
    }
    eprintln!("scale benchmark: {:.0} s", t.elapsed().as_secs_f64());
}
