//! Fault injection end to end: `warren server`, `warren relay` and `warren agent` run as
//! separate processes on Podman; each is SIGKILLed and restarted in the middle of a workspace's
//! lifecycle, and the workspace must converge with nothing duplicated or lost: one container,
//! one volume, the data written before the faults still there, and nothing left after terminate.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

mod support;

use serde_json::Value;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::*;

/// Generous: the machine running the tests may be loaded.
const CONVERGE: Duration = Duration::from_secs(240);
const RELAY_SECRET: &str = "faults-e2e-relay-secret-0123456789abcdef";

/// The three services on fixed loopback ports chosen at start, so a restarted process comes
/// back where the others expect it. Every process is SIGKILLed on drop.
struct Stack {
    dir: tempfile::TempDir,
    server_port: u16,
    agent_port: u16,
    internal_port: u16,
    agent_token: String,
    server: Option<Proc>,
    relay: Option<Proc>,
    agent: Option<Proc>,
}

impl Stack {
    fn server_home(&self) -> PathBuf {
        self.dir.path().join("server")
    }
    /// Where the CLI keeps its credentials.
    fn cli_home(&self) -> PathBuf {
        self.dir.path().join("cli")
    }
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server_port)
    }

    fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!(
            "--- server ---\n{}\n--- relay ---\n{}\n--- agent ---\n{}",
            read("server.log"),
            read("relay.log"),
            read("agent.log")
        )
    }

    /// Starts the server and waits for its ready file; retried while the port is still
    /// held by the process just killed.
    fn start_server(&mut self) {
        let ready = self.dir.path().join("server.ready");
        let _ = std::fs::remove_file(&ready);
        let args: Vec<String> = vec![
            "server".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.server_port),
            "--home".into(),
            self.server_home().display().to_string(),
            "--ready-file".into(),
            ready.display().to_string(),
            "--relay-secret".into(),
            RELAY_SECRET.into(),
            "--relay-url".into(),
            format!("http://127.0.0.1:{}", self.internal_port),
        ];
        let log = self.dir.path().join("server.log");
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut proc = Proc::spawn("server", &args, &[], &log);
        while !std::fs::read_to_string(&ready).is_ok_and(|s| !s.trim().is_empty()) {
            if proc.exited().is_some() {
                assert!(Instant::now() < deadline, "server exits:\n{}", self.logs());
                proc = Proc::spawn("server", &args, &[], &log);
            }
            assert!(
                Instant::now() < deadline,
                "server not ready:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.server = Some(proc);
    }

    /// Starts the relay and waits until both its listeners accept connections.
    fn start_relay(&mut self) {
        let args: Vec<String> = vec![
            "relay".into(),
            "--agent-listen".into(),
            format!("127.0.0.1:{}", self.agent_port),
            "--internal-listen".into(),
            format!("127.0.0.1:{}", self.internal_port),
            "--server-url".into(),
            self.url(),
        ];
        let envs = [("WARREN_RELAY_SHARED_SECRET", RELAY_SECRET.to_owned())];
        let log = self.dir.path().join("relay.log");
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut proc = Proc::spawn("relay", &args, &envs, &log);
        let accepts = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
        loop {
            if proc.exited().is_some() {
                assert!(Instant::now() < deadline, "relay exits:\n{}", self.logs());
                proc = Proc::spawn("relay", &args, &envs, &log);
            } else if accepts(self.agent_port) && accepts(self.internal_port) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "relay not listening:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.relay = Some(proc);
    }

    /// Starts the agent; it reconnects to the relay by itself, so there is nothing to wait for.
    fn start_agent(&mut self) {
        let args: Vec<String> = vec![
            "agent".into(),
            "--relay-url".into(),
            format!("http://127.0.0.1:{}", self.agent_port),
            "--runtime".into(),
            "engine".into(),
            "--state-dir".into(),
            self.dir.path().join("agent-state").display().to_string(),
        ];
        let envs = [("WARREN_AGENT_TOKEN", self.agent_token.clone())];
        self.agent = Some(Proc::spawn(
            "agent",
            &args,
            &envs,
            &self.dir.path().join("agent.log"),
        ));
    }

    /// Starts the server, signs the CLI in as the bootstrap admin, registers an agent, then
    /// starts the relay and the agent.
    fn start() -> Stack {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut stack = Stack {
            dir,
            server_port: free_port(),
            agent_port: free_port(),
            internal_port: free_port(),
            agent_token: String::new(),
            server: None,
            relay: None,
            agent: None,
        };
        stack.start_server();
        let log = stack.logs();
        let password = log
            .lines()
            .find_map(|l| l.trim().strip_prefix("password: "))
            .unwrap_or_else(|| panic!("the bootstrap admin's password is printed:\n{log}"))
            .to_owned();
        let cli_home = stack.cli_home();
        let out = cli(
            &cli_home,
            &[
                "login",
                "--url",
                &stack.url(),
                "-u",
                "admin",
                "--password-stdin",
            ],
            Some(&format!("{password}\n")),
        );
        assert!(
            out.status.success(),
            "warren login: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let created: Value =
            serde_json::from_str(&stack.cli_ok(&["agent", "create", "faulty", "-o", "json"]))
                .expect("agent create JSON");
        stack.agent_token = created["token"]
            .as_str()
            .expect("the new agent's token")
            .to_owned();
        stack.start_relay();
        stack.start_agent();
        stack
    }

    fn cli_ok(&self, args: &[&str]) -> String {
        let out = cli(&self.cli_home(), args, None);
        assert!(
            out.status.success(),
            "warren {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the server reports `actual` for the workspace and `check` holds on the engine.
    fn converge(&self, ws: &str, actual: &str, check: impl Fn() -> bool) -> Value {
        wait_for(
            &format!("workspace {ws} to be {actual}"),
            CONVERGE,
            || show(&self.cli_home(), ws).filter(|v| v["actual_state"] == actual && check()),
            || format!("{:#?}\n{}", show(&self.cli_home(), ws), self.logs()),
        )
    }

    fn kill(slot: &mut Option<Proc>) {
        if let Some(mut p) = slot.take() {
            p.kill();
        }
    }
}

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
    let out = Command::new("podman")
        .args(["exec", id, "sh", "-c", script])
        .output()
        .expect("podman exec");
    assert!(
        out.status.success(),
        "podman exec {script:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
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
    let mut stack = Stack::start();
    let devfile = write_file(stack.dir.path(), "devfile.yaml", DEVFILE);

    // 1. The agent dies right after the create: the restarted agent creates the workspace
    //    once (it rebuilds its view from the engine's labels, not from memory).
    create(&stack, ws, &devfile);
    Stack::kill(&mut stack.agent);
    stack.start_agent();
    stack.converge(ws, "Running", || running(ws).len() == 1);
    assert_one_of_each(ws, &stack);
    exec(ws, "echo before-faults > /projects/keep.txt");

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

    // 6. Terminate removes everything.
    stack.cli_ok(&["ws", "rm", ws, "--wait", "--timeout", "4m"]);
    let v = show(&stack.cli_home(), ws).expect("ws show");
    assert_eq!(v["actual_state"], "Terminated", "{v:#}");
    assert!(containers(ws).is_empty(), "containers removed");
    assert!(volumes(ws).is_empty(), "volumes removed");
    assert!(networks(ws).is_empty(), "network removed");
}
