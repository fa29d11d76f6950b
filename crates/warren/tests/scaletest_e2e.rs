//! `warren scaletest` against a real server and relay (processes): users and workspaces on
//! simulated agents dialling the relay, the mixed workload with its percentiles, and a
//! clean-up that leaves nothing — also when interrupted with Ctrl-C halfway.

use crate::support::{wait_for, warren_bin, Stack, Up};
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

fn scaletest(stack: &Stack, extra: &[&str]) -> Command {
    let mut cmd = Command::new(warren_bin());
    cmd.arg("scaletest")
        .args(["--relay-url", &stack.agent_url(), "-o", "json"])
        .args(extra)
        .env("WARREN_HOME", stack.cli_home())
        .env_remove("WARREN_URL")
        .env_remove("WARREN_TOKEN")
        .stdin(Stdio::null());
    cmd
}

/// Names of the run's agents and users still known to the server.
fn leftovers(stack: &Stack, run: &str) -> Vec<String> {
    let mut left = vec![];
    for what in ["agent", "user"] {
        let listed: Value =
            serde_json::from_str(&stack.cli_ok(&[what, "ls", "-o", "json"])).expect("list JSON");
        let key = if what == "agent" { "name" } else { "username" };
        left.extend(
            listed
                .as_array()
                .expect("a list")
                .iter()
                .filter_map(|o| o[key].as_str())
                .filter(|n| n.starts_with(run))
                .map(str::to_owned),
        );
    }
    left
}

fn op<'a>(ops: &'a Value, name: &str) -> Option<&'a Value> {
    ops.as_array()?.iter().find(|o| o["op"] == name)
}

#[test]
fn a_scale_test_loads_the_api_reports_percentiles_and_leaves_nothing_behind() {
    let stack = Stack::control_plane(true);
    let out = scaletest(
        &stack,
        &[
            "--users",
            "3",
            "--workspaces",
            "8",
            "--agents",
            "2",
            "--api-rate",
            "25",
            "--duration",
            "6",
            "--progress-every",
            "2",
        ],
    )
    .output()
    .expect("run warren scaletest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scaletest failed: {stderr}\n{}",
        stack.logs()
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    let run = report["run"].as_str().expect("the run's name").to_owned();
    assert_eq!(op(&report["setup"], "user.create").unwrap()["count"], 3);
    assert_eq!(op(&report["setup"], "user.login").unwrap()["count"], 3);
    assert_eq!(op(&report["setup"], "agent.create").unwrap()["count"], 2);
    assert_eq!(op(&report["setup"], "ws.create").unwrap()["count"], 8);
    assert!(report["ready_seconds"].as_f64().is_some(), "{report:#}");
    // About 25 a second for 6 seconds, spread over the mix; none failed.
    let load = report["load"].as_array().expect("load figures");
    let calls: u64 = load.iter().map(|o| o["count"].as_u64().unwrap()).sum();
    assert!((100..=200).contains(&calls), "{calls} calls: {report:#}");
    for o in load {
        assert_eq!(o["errors"], 0, "{o}: {report:#}");
        assert!(o["p95_ms"].as_f64().unwrap() <= o["max_ms"].as_f64().unwrap());
    }
    for name in ["ws.list", "ws.show"] {
        assert!(op(&report["load"], name).is_some(), "{name}: {report:#}");
    }
    assert!(
        stderr.contains(" calls ("),
        "progress is printed as it goes: {stderr}"
    );
    assert_eq!(report["cleanup"]["users_deleted"], 3, "{report:#}");
    assert_eq!(report["cleanup"]["agents_deleted"], 2, "{report:#}");
    assert_eq!(report["cleanup"]["leftovers"], Value::Array(vec![]));
    assert!(
        leftovers(&stack, &run).is_empty(),
        "{:?}",
        leftovers(&stack, &run)
    );
}

/// The scale test's process, killed if the test ends without it having ended.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ctrl_c_stops_a_scale_test_and_it_still_cleans_up() {
    let stack = Stack::control_plane(true);
    let err = stack.dir.path().join("scaletest.err");
    let report_file = stack.dir.path().join("scaletest.json");
    let mut child = Running(
        scaletest(
            &stack,
            &[
                "--users",
                "2",
                "--workspaces",
                "4",
                "--agents",
                "1",
                "--api-rate",
                "10",
                "--duration",
                "3600",
                "--progress-every",
                "1",
            ],
        )
        .stdout(std::fs::File::create(&report_file).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start warren scaletest"),
    );
    let text = || std::fs::read_to_string(&err).unwrap_or_default();
    wait_for(
        "the workload to run",
        Duration::from_secs(120),
        || text().contains(" calls (").then_some(()),
        || format!("{}\n{}", text(), stack.logs()),
    );
    let status = Command::new("kill")
        .args(["-INT", &child.0.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let status = child.0.wait().expect("the scale test ends");
    assert!(
        status.success(),
        "an interrupted run that cleaned up exits 0: {}",
        text()
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&report_file).expect("stdout"))
        .expect("the JSON report");
    assert_eq!(report["interrupted"], true, "{report:#}");
    assert_eq!(report["cleanup"]["users_deleted"], 2, "{report:#}");
    assert_eq!(report["cleanup"]["agents_deleted"], 1, "{report:#}");
    let run = report["run"].as_str().unwrap();
    assert!(leftovers(&stack, run).is_empty());
    assert!(text().contains("interrupted: cleaning up"), "{}", text());
}

/// Web terminals and SSH sessions through `warren up`'s proxy and relay to workspaces on the
/// scale test's simulated agents: every chunk written comes back intact and is timed, and
/// nothing is left behind.
#[test]
fn terminal_and_ssh_sessions_carry_their_rate_through_the_proxy_and_are_timed() {
    if !crate::support::podman_available() {
        return;
    }
    let up = Up::start();
    let out = Command::new(warren_bin())
        .arg("scaletest")
        .args(["--relay-url", &up.relay_url(), "-o", "json"])
        .args([
            "--users",
            "2",
            "--workspaces",
            "4",
            "--agents",
            "1",
            "--api-rate",
            "0",
            "--terminals",
            "3",
            "--ssh",
            "2",
            "--session-rate",
            "2000",
            "--duration",
            "3",
        ])
        .env("WARREN_URL", up.api_base())
        .env("WARREN_TOKEN", up.admin_token())
        .env("WARREN_HOME", up.home.path().join("scaletest-cli"))
        .stdin(Stdio::null())
        .output()
        .expect("run warren scaletest");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scaletest failed: {stderr}\n{}",
        up.log()
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("the JSON report");
    for (name, count) in [("terminal.open", 3), ("ssh.open", 2)] {
        let o = op(&report["load"], name).unwrap_or_else(|| panic!("{name}: {report:#}"));
        assert_eq!(o["count"], count, "{report:#}");
        assert_eq!(o["errors"], 0, "{report:#}");
    }
    // Ten chunks a second for 3 s per session, each echoed: about 30 per session.
    for (name, sessions) in [("terminal.echo", 3), ("ssh.echo", 2)] {
        let o = op(&report["load"], name).unwrap_or_else(|| panic!("{name}: {report:#}"));
        assert_eq!(o["errors"], 0, "{report:#}");
        let n = o["count"].as_u64().unwrap();
        assert!(
            (20 * sessions..=40 * sessions).contains(&n),
            "{name}: {n} echoes: {report:#}"
        );
    }
    // 200 bytes a chunk, every one back.
    let bytes = report["session_bytes"].as_u64().unwrap();
    assert!(bytes >= 5 * 20 * 200, "{bytes} bytes: {report:#}");
    assert_eq!(
        report["cleanup"]["leftovers"],
        Value::Array(vec![]),
        "{report:#}"
    );
}
