//! End to end on a real engine: workspaces that cannot run end `Failed`, with a reason the
//! user sees in `warren ws show` and in the error of `warren ws create --wait`.
//!
//! Runs `warren up` and the CLI against Podman. Skips with a notice when no Podman exists;
//! fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use serde_json::Value;
use std::path::Path;
use std::time::{Duration, Instant};
use support::*;

/// `warren up` in a temp home, killed on drop (the `Workspaces` guard removes what it made).
struct Up {
    proc: Proc,
    home: tempfile::TempDir,
}

impl Up {
    fn start() -> Up {
        let home = tempfile::tempdir().expect("temp home");
        let ready = home.path().join("ready");
        let args: Vec<String> = vec![
            "up".into(),
            "--home".into(),
            home.path().display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--proxy-listen".into(),
            "127.0.0.1:0".into(),
            "--ssh-listen".into(),
            "127.0.0.1:0".into(),
            "--ready-file".into(),
            ready.display().to_string(),
        ];
        let mut proc = Proc::spawn("up", &args, &[], &home.path().join("up.log"));
        let deadline = Instant::now() + Duration::from_secs(180);
        while !std::fs::read_to_string(&ready).is_ok_and(|s| !s.trim().is_empty()) {
            if let Some(status) = proc.exited() {
                panic!("warren up exited early ({status}):\n{}", proc.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "warren up not ready:\n{}",
                proc.log_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Up { proc, home }
    }

    fn home(&self) -> &Path {
        self.home.path()
    }
}

/// Creates a workspace named `name` from `devfile` with `--wait` and returns the CLI's
/// outcome (success, stdout+stderr).
fn create_and_wait(up: &Up, name: &str, devfile: &str) -> (bool, String) {
    let path = write_file(up.home(), &format!("{name}.yaml"), devfile);
    let out = cli(
        up.home(),
        &[
            "ws",
            "create",
            "--devfile",
            path.to_str().expect("utf-8 path"),
            "--name",
            name,
            "--wait",
            "--timeout",
            "4m",
        ],
        None,
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Waits until the workspace is `Failed` and returns its `failure_reason`.
fn failed_reason(up: &Up, ws: &str) -> String {
    let v: Value = wait_for(
        &format!("workspace {ws} to be Failed"),
        Duration::from_secs(240),
        || show(up.home(), ws).filter(|v| v["actual_state"] == "Failed"),
        || format!("{:#?}\n{}", show(up.home(), ws), up.proc.log_text()),
    );
    assert_eq!(v["desired_state"], "Running", "{v:#}");
    v["failure_reason"]
        .as_str()
        .unwrap_or_else(|| panic!("a Failed workspace has a failure_reason: {v:#}"))
        .to_owned()
}

/// Terminates the workspace and checks that nothing of it is left on the engine.
fn terminate_and_check(up: &Up, ws: &str) {
    let out = cli(
        up.home(),
        &["ws", "rm", ws, "--wait", "--timeout", "3m"],
        None,
    );
    assert!(
        out.status.success(),
        "warren ws rm {ws}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.proc.log_text()
    );
    assert!(containers(ws).is_empty(), "containers of {ws} removed");
    assert!(volumes(ws).is_empty(), "volumes of {ws} removed");
    assert!(networks(ws).is_empty(), "network of {ws} removed");
}

#[test]
fn a_container_that_exits_at_once_ends_failed_with_its_exit_code() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let ws = "exits-at-once";
    let _cleanup = Workspaces(vec![ws.into()]);
    let up = Up::start();
    let devfile = r#"
schemaVersion: 2.2.0
metadata:
  name: exits
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      command: ["sh", "-c", "exit 3"]
"#;
    let (ok, text) = create_and_wait(&up, ws, devfile);
    let reason = failed_reason(&up, ws);
    assert!(
        reason.contains("exited with code 3") && reason.contains("dev"),
        "the reason names the container and its exit code: {reason}"
    );
    assert!(
        !ok,
        "ws create --wait must fail for a container that exits at once:\n{text}"
    );
    assert!(
        text.contains("Failed") && text.contains("exited with code 3"),
        "ws create --wait names the failure:\n{text}"
    );
    // The container exists (exited) and is not restarted behind the user's back.
    assert_eq!(containers(ws).len(), 1, "one container");
    let runs = running(ws);
    assert!(
        runs.is_empty(),
        "nothing runs: {:#?}\n{}",
        runs.iter().map(|c| &c["State"]).collect::<Vec<_>>(),
        up.proc.log_text()
    );
    terminate_and_check(&up, ws);

    // One that runs a moment first: `--wait` says Failed (the workspace is not reported
    // Running before its command has run for the rendered `minReadySeconds`, 1 s; no settle
    // in the CLI hides it). Only a machine so loaded that the shell starts its `sleep` late
    // can make the command outlive that second — then Running was true, the engine's own
    // record shows it, and the workspace ends Failed all the same.
    let ws = "exits-soon";
    let _cleanup = Workspaces(vec![ws.into()]);
    let devfile = devfile.replace("exit 3", "sleep 0.2; exit 5");
    let (ok, text) = create_and_wait(&up, ws, &devfile);
    let reason = failed_reason(&up, ws);
    assert!(reason.contains("exited with code 5"), "{reason}");
    if ok {
        let id = containers(ws).pop().expect("the container");
        let state = &inspect(&id)["State"];
        let time = |k: &str| {
            chrono::DateTime::parse_from_rfc3339(state[k].as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{k} of {state}: {e}"))
        };
        let ran = time("FinishedAt") - time("StartedAt");
        assert!(
            ran >= chrono::Duration::seconds(1),
            "ws create --wait said Running for a command that ran {ran}:\n{text}"
        );
    } else {
        assert!(
            text.contains("Failed") && text.contains("exited with code 5"),
            "ws create --wait names the failure:\n{text}"
        );
    }
    terminate_and_check(&up, ws);
}

/// Then the image appears (built, say) and `ws start --wait` is a new attempt that waits
/// for its outcome: it used to answer at once with the old failure.
#[test]
fn an_image_that_does_not_exist_ends_failed_naming_the_image() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let ws = "no-such-image";
    let _cleanup = Workspaces(vec![ws.into()]);
    // A name of this run's own: the test makes it exist later.
    let image = format!("localhost/warren-no-such-image-{}:1", std::process::id());
    struct Untag(String);
    impl Drop for Untag {
        fn drop(&mut self) {
            let _ = podman(&["rmi", "-f", &self.0]);
        }
    }
    let _untag = Untag(image.clone());
    let up = Up::start();
    let devfile = format!(
        "schemaVersion: 2.2.0\nmetadata:\n  name: noimage\ncomponents:\n  - name: dev\n    container:\n      image: {image}\n"
    );
    let (ok, text) = create_and_wait(&up, ws, &devfile);
    assert!(
        !ok,
        "ws create --wait must fail for a missing image:\n{text}"
    );
    assert!(
        text.contains("Failed") && text.contains(&image),
        "ws create --wait names the image:\n{text}"
    );
    let reason = failed_reason(&up, ws);
    assert!(
        reason.contains(&image),
        "the reason names the image: {reason}"
    );
    assert!(running(ws).is_empty(), "nothing runs");

    podman(&["tag", IMAGE, &image]);
    let out = cli(
        up.home(),
        &["ws", "start", ws, "--wait", "--timeout", "3m"],
        None,
    );
    assert!(
        out.status.success(),
        "ws start --wait waits for the new attempt, which runs: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.proc.log_text()
    );
    let v = show(up.home(), ws).expect("ws show");
    assert_eq!(
        (v["desired_state"].as_str(), v["actual_state"].as_str()),
        (Some("Running"), Some("Running")),
        "{v:#}"
    );
    assert_eq!(running(ws).len(), 1, "it runs now");
    terminate_and_check(&up, ws);
}
