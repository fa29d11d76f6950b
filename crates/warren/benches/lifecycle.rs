//! Lifecycle benchmarks on a real engine (issue 4), each figure next to a baseline measured in
//! the same run:
//!
//! 1. desired-state change → runtime action: from `PUT desired_state` until Podman reports the
//!    container died (stop) or started (start), read from `podman events` timestamps so the
//!    probe adds no latency. Baselines: the 10 s partial-reconcile timer the signal replaces
//!    (computed, and measured with a server that signals no relay).
//! 2. create → Running for a one-container workspace (REST create until actual `Running`),
//!    against creating the same network, volume and container with the `podman` CLI.
//!
//! Runs `warren server`, `warren relay` and `warren agent` as separate processes (the test
//! support's `Stack`). Skips with a message when Podman is absent; removes all it creates.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::*;
use warren_testkit::process::output_ok;

const STOP_CYCLES: usize = 10;
const TIMER_CYCLES: usize = 4;
const CREATE_RUNS: usize = 5;
const PARTIAL_INTERVAL_S: f64 = 10.0;
/// The signal path does not depend on the phase; a short spread keeps requests off the
/// heels of the previous transition.
const SIGNAL_PHASE: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_secs(120);

/// A REST client for one stack.
struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    rt: tokio::runtime::Runtime,
}

impl Api {
    fn new(stack: &Stack) -> Api {
        Api {
            http: reqwest::Client::new(),
            base: format!("{}/api/v1", stack.url()),
            token: stack.token(),
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("tokio runtime"),
        }
    }

    fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        self.rt.block_on(async {
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", self.base))
                .bearer_auth(&self.token);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = req.send().await.expect("REST call");
            let status = resp.status();
            let text = resp.text().await.unwrap_or_default();
            assert!(status.is_success(), "{method} {path}: {status} {text}");
            serde_json::from_str(&text).unwrap_or(Value::Null)
        })
    }

    fn get(&self, ws: &str) -> Value {
        self.call(reqwest::Method::GET, &format!("/workspaces/{ws}"), None)
    }

    fn set_desired(&self, ws: &str, state: &str) {
        self.call(
            reqwest::Method::PUT,
            &format!("/workspaces/{ws}/desired_state"),
            Some(json!({ "desired_state": state })),
        );
    }

    fn create(&self, ws: &str) {
        self.call(
            reqwest::Method::POST,
            "/workspaces",
            Some(json!({ "devfile": DEVFILE, "name": ws })),
        );
    }

    /// Polls (every 10 ms) until the workspace's actual state is `state`.
    fn wait_actual(&self, ws: &str, state: &str) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let v = self.get(ws);
            if v["actual_state"] == state {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{ws} never became {state}: {v:#}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn terminate(&self, ws: &str) {
        self.call(reqwest::Method::DELETE, &format!("/workspaces/{ws}"), None);
        self.wait_actual(ws, "Terminated");
    }
}

/// `podman events` for container starts and deaths, with the engine's own timestamps.
struct Events {
    child: Child,
    rx: mpsc::Receiver<(String, String, u128)>,
}

impl Events {
    fn start() -> Events {
        let mut child = Command::new("podman")
            .args([
                "events",
                "--format",
                "json",
                "--filter",
                "event=died",
                "--filter",
                "event=start",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("podman events");
        let out = child.stdout.take().expect("events stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let (Some(name), Some(status), Some(time)) = (
                    v["Name"].as_str(),
                    v["Status"].as_str(),
                    v["Time"].as_str().and_then(rfc3339_nanos),
                ) else {
                    continue;
                };
                if tx.send((name.to_owned(), status.to_owned(), time)).is_err() {
                    break;
                }
            }
        });
        Events { child, rx }
    }

    /// The time from `since` (unix ns) to the first `status` event of `name` at or after it.
    fn latency(&self, name: &str, status: &str, since: u128, timeout: Duration) -> Duration {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok((n, s, t)) if n == name && s == status && t >= since => {
                    return Duration::from_nanos((t - since) as u64)
                }
                Ok(_) => {}
                Err(e) => panic!("no {status} event for {name} within {timeout:?}: {e}"),
            }
        }
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// `2026-11-22T07:37:15.700457303Z` (or with a `+00:00` offset) as unix nanoseconds.
fn rfc3339_nanos(s: &str) -> Option<u128> {
    let (date, rest) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let (time, offset_s) = if let Some(t) = rest.strip_suffix('Z') {
        (t, 0i64)
    } else {
        let idx = rest.rfind(['+', '-'])?;
        let (t, off) = rest.split_at(idx);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (oh, om) = off[1..].split_once(':')?;
        (
            t,
            sign * (oh.parse::<i64>().ok()? * 3600 + om.parse::<i64>().ok()? * 60),
        )
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>());
    let (hh, mm, ss) = (t.next()?.ok()?, t.next()?.ok()?, t.next()?.ok()?);
    let nanos: i64 = format!("{frac:0<9}")[..9].parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss - offset_s;
    u128::try_from(secs)
        .ok()
        .map(|s| s * 1_000_000_000 + nanos as u128)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Nearest-rank percentile.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn summary(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let mean = v.iter().map(|d| ms(*d)).sum::<f64>() / v.len() as f64;
    (ms(pct(&v, 50.0)), ms(pct(&v, 95.0)), mean)
}

/// A pseudo-random pause in `[0, max)`: requests then arrive at a random phase of the agent's
/// timers instead of right after its previous reconcile (which would flatter a timer-only
/// design). Workload shaping, not synchronisation.
fn random_phase(max: Duration) {
    let seed = now_nanos() as u64;
    let x = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .rotate_right(29)
        % 1_000_000;
    std::thread::sleep(max.mul_f64(x as f64 / 1_000_000.0));
}

/// Stop/start cycles of one running workspace, each request at a random phase in `[0, phase)`
/// after the previous transition: (stop latencies, start latencies).
fn cycles(
    api: &Api,
    events: &Events,
    ws: &str,
    n: usize,
    phase: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let name = format!("warren-{ws}.c.dev");
    let (mut stops, mut starts) = (Vec::new(), Vec::new());
    for _ in 0..n {
        random_phase(phase);
        let t0 = now_nanos();
        api.set_desired(ws, "Stopped");
        stops.push(events.latency(&name, "died", t0, DEADLINE));
        api.wait_actual(ws, "Stopped");
        random_phase(phase);
        let t0 = now_nanos();
        api.set_desired(ws, "Running");
        starts.push(events.latency(&name, "start", t0, DEADLINE));
        api.wait_actual(ws, "Running");
    }
    (stops, starts)
}

/// The container Warren ran, re-created with the `podman` CLI: same image, limits, user,
/// capabilities, init, network and volume. Returns the time until `podman run -d` has
/// started it.
fn podman_create(i: usize, reference: &Value) -> Duration {
    let net = format!("warren-bench-net-{i}");
    let vol = format!("warren-bench-vol-{i}");
    let name = format!("warren-bench-ctr-{i}");
    let mut args: Vec<String> = vec![
        "run".into(),
        "-d".into(),
        "--name".into(),
        name.clone(),
        "--hostname".into(),
        name.clone(),
        "--network".into(),
        net.clone(),
        "-v".into(),
        format!("{vol}:/projects"),
        "--init".into(),
        "--memory".into(),
        "256m".into(),
        "--cpus".into(),
        "0.5".into(),
        "--user".into(),
        "5001:0".into(),
        "--cap-drop".into(),
        "all".into(),
        "--security-opt".into(),
        "no-new-privileges".into(),
        "--restart".into(),
        "no".into(),
    ];
    // Warren's container runs its keep-alive start script (bind-mounted); the baseline keeps
    // its container alive with the image's shell.
    args.extend(
        ["--entrypoint", "sh", IMAGE, "-c", "exec sleep 86400"]
            .iter()
            .map(|a| (*a).to_owned()),
    );

    let run = |a: &[&str]| {
        output_ok(Command::new("podman").args(a));
    };
    let t0 = Instant::now();
    run(&["network", "create", &net]);
    run(&["volume", "create", &vol]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs);
    let dt = t0.elapsed();
    let state = inspect(&name)["State"].clone();
    assert_eq!(
        state["Running"],
        true,
        "{name} runs: {state:#}\nargs {args:?}\nlogs {}\nwarren's: {:#}",
        podman(&["logs", &name]),
        reference["Config"]
    );
    dt
}

fn podman_cleanup(i: usize) {
    let _ = podman(&["rm", "-f", "-t", "0", &format!("warren-bench-ctr-{i}")]);
    let _ = podman(&["volume", "rm", "-f", &format!("warren-bench-vol-{i}")]);
    let _ = podman(&["network", "rm", "-f", &format!("warren-bench-net-{i}")]);
}

/// Removes the CLI baseline's objects even when the bench panics.
struct PodmanObjects;
impl Drop for PodmanObjects {
    fn drop(&mut self) {
        for i in 0..CREATE_RUNS {
            podman_cleanup(i);
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let podman_ok = Command::new("podman")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !podman_ok {
        eprintln!("skipping the lifecycle benchmark: podman not found (install it with .ci/setup-podman.sh)");
        return;
    }
    ensure_image();
    let create_names: Vec<String> = (0..CREATE_RUNS)
        .map(|i| format!("bench-create-{i}"))
        .collect();
    let mut all = vec!["bench-signal".to_owned(), "bench-timer".to_owned()];
    all.extend(create_names.iter().cloned());
    let _cleanup = Workspaces(all);
    let _podman_objects = PodmanObjects;
    let events = Events::start();

    // 1a. The signal path: server → relay → agent.
    let stack = Stack::start(true);
    let api = Api::new(&stack);
    let ws = "bench-signal";
    api.create(ws);
    api.wait_actual(ws, "Running");
    // One unmeasured cycle warms the event stream and every connection.
    let _ = cycles(&api, &events, ws, 1, Duration::ZERO);
    let (stops, starts) = cycles(&api, &events, ws, STOP_CYCLES, SIGNAL_PHASE);
    let reference = running(ws)
        .into_iter()
        .next()
        .expect("the workspace container runs");
    api.terminate(ws);

    // 2. create → Running, against the podman CLI, interleaved so load drifts hit both.
    let (mut warren_create, mut podman_create_t) = (Vec::new(), Vec::new());
    for (i, name) in create_names.iter().enumerate() {
        let t0 = Instant::now();
        api.create(name);
        api.wait_actual(name, "Running");
        warren_create.push(t0.elapsed());
        api.terminate(name);
        podman_create_t.push(podman_create(i, &reference));
        podman_cleanup(i);
    }
    drop(api);
    drop(stack);

    // 1b. Timers only: the same stack but the server signals no relay.
    let stack = Stack::start(false);
    let api = Api::new(&stack);
    let ws = "bench-timer";
    api.create(ws);
    api.wait_actual(ws, "Running");
    let (timer_stops, timer_starts) = cycles(
        &api,
        &events,
        ws,
        TIMER_CYCLES,
        Duration::from_secs_f64(PARTIAL_INTERVAL_S),
    );
    api.terminate(ws);
    drop(api);
    drop(stack);

    let (s50, s95, smean) = summary(stops);
    let (st50, st95, stmean) = summary(starts);
    let (t50, t95, tmean) = summary(timer_stops);
    let (tt50, tt95, ttmean) = summary(timer_starts);
    // A timer of period T fires at a uniformly random phase: mean and median T/2, p95 0.95 T.
    let (c50, c95) = (PARTIAL_INTERVAL_S * 500.0, PARTIAL_INTERVAL_S * 950.0);
    let (w50, _, wmean) = summary(warren_create.clone());
    let (p50, _, pmean) = summary(podman_create_t.clone());

    println!(
        "lifecycle benchmark ({} build; warren server, relay and agent as separate processes)",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
    );
    println!();
    println!("desired-state change -> runtime action (PUT desired_state -> podman event)");
    println!(
        "  signal path, stop -> died   ({STOP_CYCLES} runs): p50 {s50:8.1} ms  p95 {s95:8.1} ms  mean {smean:8.1} ms  (target p95 <= 100 ms)"
    );
    println!(
        "  signal path, start -> start ({STOP_CYCLES} runs): p50 {st50:8.1} ms  p95 {st95:8.1} ms  mean {stmean:8.1} ms"
    );
    println!(
        "  timers only, stop -> died   ({TIMER_CYCLES} runs):  p50 {t50:8.1} ms  p95 {t95:8.1} ms  mean {tmean:8.1} ms  (measured: server without --relay-url, requests at a random phase)"
    );
    println!(
        "  timers only, start -> start ({TIMER_CYCLES} runs):  p50 {tt50:8.1} ms  p95 {tt95:8.1} ms  mean {ttmean:8.1} ms"
    );
    println!(
        "  {PARTIAL_INTERVAL_S} s partial timer (computed):      p50 {c50:8.1} ms  p95 {c95:8.1} ms  mean {c50:8.1} ms"
    );
    println!(
        "  ratio signal/computed timer: p50 {:.4}x  p95 {:.4}x;  signal/measured timers: p50 {:.4}x  p95 {:.4}x",
        s50 / c50,
        s95 / c95,
        s50 / t50,
        s95 / t95
    );
    println!();
    println!("create -> Running, one container ({CREATE_RUNS} runs each, interleaved)");
    println!(
        "  warren (REST create -> actual Running): median {w50:8.1} ms  mean {wmean:8.1} ms  runs {:?}",
        warren_create.iter().map(|d| ms(*d).round()).collect::<Vec<_>>()
    );
    println!(
        "  podman CLI (network + volume + run -d): median {p50:8.1} ms  mean {pmean:8.1} ms  runs {:?}",
        podman_create_t.iter().map(|d| ms(*d).round()).collect::<Vec<_>>()
    );
    println!(
        "  ratio warren/podman: median {:.2}x  (target <= 1.25x)",
        w50 / p50
    );
}
