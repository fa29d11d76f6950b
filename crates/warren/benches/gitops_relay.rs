//! A relay's memory per GitOps source: `warren server`, `warren relay` and `warren agent` as
//! separate processes (the test support's `Stack`, the agent on Podman), the relay's resident
//! memory read from `/proc` with the agent connected and no source (the baseline, measured
//! in the same run), then with 100 sources (the most an agent may have) over 10 repositories
//! on this machine, once every source reported its commit applied.
//!
//! `cargo bench -p warren --bench gitops_relay`. Skips with a message when Podman is absent.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use serde_json::Value;
use std::time::Duration;
use support::*;

const SOURCES: usize = 100;
const REPOSITORIES: usize = 10;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn main() {
    if !podman_available() {
        return;
    }
    let stack = Stack::start(true);
    let relay = stack
        .relay
        .as_ref()
        .and_then(Proc::pid)
        .expect("the relay runs");
    for r in 0..REPOSITORIES {
        let bare = stack.dir.path().join(format!("r{r}.git"));
        std::fs::create_dir(&bare).unwrap();
        git(&bare, &["init", "-q", "--bare", "-b", "main"]);
        let work = stack.dir.path().join(format!("w{r}"));
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q", "-b", "main"]);
        for i in 0..20 {
            std::fs::write(
                work.join(format!("cm{i}.yaml")),
                format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  value: \"{}\"\n",
                    "x".repeat(500)
                ),
            )
            .unwrap();
        }
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "objects"]);
        git(&work, &["push", "-q", bare.to_str().unwrap(), "main"]);
        stack.cli_ok(&[
            "gitops",
            "repo",
            "add",
            &format!("r{r}"),
            "--url",
            &format!("file://{}", bare.display()),
        ]);
    }
    // Idle: the agent connected, no source.
    wait_for(
        "the agent connected",
        CONVERGE,
        || {
            let v: Value =
                serde_json::from_str(&stack.cli_ok(&["agent", "show", "faulty", "-o", "json"]))
                    .ok()?;
            v["last_seen_at"].is_string().then_some(())
        },
        || stack.logs(),
    );
    let idle = rss_kib(relay);

    let mut yaml = String::from("sources:\n");
    for s in 0..SOURCES {
        yaml.push_str(&format!(
            "  - name: s{s}\n    repository: r{}\n    namespace: ns{s}\n    interval: 60s\n",
            s % REPOSITORIES
        ));
    }
    let file = stack.dir.path().join("sources.yaml");
    std::fs::write(&file, yaml).unwrap();
    stack.cli_ok(&[
        "agent",
        "gitops",
        "set",
        "faulty",
        "-f",
        file.to_str().unwrap(),
    ]);
    wait_for(
        "every source applied",
        Duration::from_secs(600),
        || {
            let v: Value = serde_json::from_str(
                &stack.cli_ok(&["agent", "gitops", "status", "faulty", "-o", "json"]),
            )
            .ok()?;
            let done = v
                .as_array()?
                .iter()
                .filter(|s| s["commit"].is_string())
                .count();
            (done == SOURCES).then_some(())
        },
        || stack.logs(),
    );
    let busy = rss_kib(relay);
    let per_source = busy.saturating_sub(idle) as f64 / SOURCES as f64;
    println!("relay memory with GitOps sources (one agent, {SOURCES} sources over {REPOSITORIES} repositories of 20 objects)");
    println!(
        "  idle (agent connected, no source): {:>8} KiB  (baseline)",
        idle
    );
    println!(
        "  with {SOURCES} sources:               {:>8} KiB  ratio {:.2}x",
        busy,
        busy as f64 / idle.max(1) as f64
    );
    println!(
        "  per source:                      {:>8.1} KiB  ({:.3}x of the idle relay each)",
        per_source,
        per_source / idle.max(1) as f64
    );
}
