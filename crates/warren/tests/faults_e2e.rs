//! Fault injection end to end: `warren server`, `warren relay` and `warren agent` run as
//! separate processes on Podman; each is SIGKILLed and restarted in the middle of a workspace's
//! lifecycle, and the workspace must converge with nothing duplicated or lost: one container,
//! one volume, the data written before the faults still there, and nothing left after terminate.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::*;
use warren_testkit::process::stdout_ok;

/// Nothing duplicated or lost: exactly one container and one volume for the workspace.
fn assert_one_of_each(ws: &str, stack: &Stack) {
    let c = containers(ws);
    assert_eq!(c.len(), 1, "exactly one container: {c:?}\n{}", stack.logs());
    let v = volumes(ws);
    assert_eq!(v.len(), 1, "exactly one volume: {v:?}\n{}", stack.logs());
    assert_eq!(networks(ws).len(), 1, "exactly one network");
}

fn exec(ws: &str, script: &str) -> String {
    let live = running(ws);
    assert_eq!(live.len(), 1, "one running container");
    let id = live[0]["Id"].as_str().expect("container id");
    stdout_ok(Command::new("podman").args(["exec", id, "sh", "-c", script]))
        .trim()
        .to_owned()
}

fn create(stack: &Stack, ws: &str, devfile: &Path) {
    stack.cli_ok(&[
        "ws",
        "create",
        "--devfile",
        devfile.to_str().expect("utf-8 path"),
        "--name",
        ws,
    ]);
}

#[test]
fn killing_agent_relay_and_server_mid_lifecycle_loses_and_duplicates_nothing() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let ws = "faults-e2e";
    let _cleanup = Workspaces(vec![ws.into()]);
    let mut stack = Stack::start(true);
    let devfile = write_file(stack.dir.path(), "devfile.yaml", DEVFILE);

    // 1. The agent dies right after the create: the restarted agent creates the workspace
    //    once (it rebuilds its view from the engine's labels, not from memory).
    create(&stack, ws, &devfile);
    Stack::kill(&mut stack.agent);
    stack.start_agent();
    stack.converge(ws, "Running", || running(ws).len() == 1);
    assert_one_of_each(ws, &stack);
    exec(ws, "echo before-faults > /projects/keep.txt");
    // The restarted agent's metrics: connected, and the running workspace's memory (read
    // from the engine at the scrape).
    let port = stack.metrics_port;
    let metrics = wait_for(
        "the agent's metrics to show the workspace",
        Duration::from_secs(60),
        || {
            support::http_get(port, "/metrics").filter(|t| {
                t.contains("warren_agent_relay_connected 1")
                    && t.contains(&format!("workspace=\"{ws}\",container="))
            })
        },
        || stack.logs(),
    );
    assert!(
        metrics.contains("# TYPE warren_workspace_memory_bytes gauge"),
        "{metrics}"
    );
    assert!(support::http_get(port, "/healthz").is_some_and(|b| b == "ok"));

    // 2. The relay is down when the user stops the workspace: nothing can reach the agent,
    //    so the container keeps running; once the relay is back the stop happens.
    Stack::kill(&mut stack.relay);
    stack.cli_ok(&["ws", "stop", ws]);
    let v = show(&stack.cli_home(), ws).expect("ws show");
    assert_eq!(v["desired_state"], "Stopped");
    assert_eq!(running(ws).len(), 1, "no path to the agent: still running");
    stack.start_relay();
    stack.converge(ws, "Stopped", || running(ws).is_empty());
    assert_one_of_each(ws, &stack);

    // 3. The server dies right after the start request (committed before the answer): the
    //    restarted server on the same database carries it through.
    stack.cli_ok(&["ws", "start", ws]);
    Stack::kill(&mut stack.server);
    stack.start_server();
    stack.converge(ws, "Running", || running(ws).len() == 1);
    assert_one_of_each(ws, &stack);
    assert_eq!(exec(ws, "cat /projects/keep.txt"), "before-faults");

    // 4. Everything dies while a stop is in flight and comes back in the reverse order
    //    (agent first, server last): the stop still happens, once.
    stack.cli_ok(&["ws", "stop", ws]);
    Stack::kill(&mut stack.server);
    Stack::kill(&mut stack.relay);
    Stack::kill(&mut stack.agent);
    stack.start_agent();
    stack.start_relay();
    stack.start_server();
    stack.converge(ws, "Stopped", || running(ws).is_empty());
    assert_one_of_each(ws, &stack);

    // 5. The agent is down while the user restarts the workspace; the new agent starts it.
    Stack::kill(&mut stack.agent);
    stack.cli_ok(&["ws", "start", ws]);
    stack.start_agent();
    stack.converge(ws, "Running", || running(ws).len() == 1);
    assert_one_of_each(ws, &stack);
    assert_eq!(exec(ws, "cat /projects/keep.txt"), "before-faults");

    // One workspace on the server, whatever was retried.
    let list: serde_json::Value =
        serde_json::from_str(&stack.cli_ok(&["ws", "list", "-o", "json"])).expect("list JSON");
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "one workspace: {list:#}");

    // 6. Terminate removes everything.
    stack.cli_ok(&["ws", "rm", ws, "--wait", "--timeout", "4m"]);
    let v = show(&stack.cli_home(), ws).expect("ws show");
    assert_eq!(v["actual_state"], "Terminated", "{v:#}");
    assert!(containers(ws).is_empty(), "containers removed");
    assert!(volumes(ws).is_empty(), "volumes removed");
    assert!(networks(ws).is_empty(), "network removed");
}
