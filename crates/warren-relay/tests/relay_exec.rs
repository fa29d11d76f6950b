//! Exec sessions through a real relay and a real agent connection, with the simulated
//! runtime running the commands as local processes: output, stderr, stdin, exit codes,
//! resizes, errors, and a client that goes away.

use crate::common;

use common::*;
use warren_types::reconcile::ReconcileSettings;
use warren_types::relay::{ExecExit, ExecFrame, ExecQuery, ExecTarget, TerminalSize};
use warren_types::AgentId;

fn slow_timers() -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

fn target(workspace: &str, command: &[&str]) -> ExecTarget {
    ExecTarget {
        workspace: workspace.into(),
        namespace: common::model::NAMESPACE.into(),
        container: None,
        command: command.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        tty: false,
        size: None,
        task: None,
    }
}

/// Opens an exec session on `base` (an internal listener's `http://host:port`) with a raw
/// `request` query value; `Err((status, body))` when refused.
async fn open_raw(
    base: &str,
    agent: AgentId,
    request: &str,
    jwt: &str,
) -> Result<reqwest::Upgraded, (u16, String)> {
    let req = http1()
        .get(format!("{base}/internal/agents/{agent}/exec"))
        .query(&ExecQuery {
            request: request.into(),
        })
        .bearer_auth(jwt);
    upgrade(req).await
}

async fn open_exec(base: &str, target: &ExecTarget) -> Result<reqwest::Upgraded, (u16, String)> {
    let request = serde_json::to_string(target).unwrap();
    open_raw(base, AGENT, &request, &internal_jwt("warren-proxy")).await
}

async fn send(io: &mut reqwest::Upgraded, frame: ExecFrame) {
    warren_tunnel::write_exec_frame(io, &frame).await.unwrap();
}

/// Everything until the session closes: (stdout, stderr, exit). Fails on a missing `Exit`.
async fn collect(io: &mut reqwest::Upgraded) -> (String, String, ExecExit) {
    let (mut out, mut err, mut exit) = (vec![], vec![], None);
    while let Some(frame) = warren_tunnel::read_exec_frame(io).await.unwrap() {
        assert!(
            exit.is_none(),
            "nothing may follow the exit frame: {frame:?}"
        );
        match frame {
            ExecFrame::Stdout(b) => out.extend(b),
            ExecFrame::Stderr(b) => err.extend(b),
            ExecFrame::Exit(e) => exit = Some(e),
            other => panic!("a client-to-agent frame came back: {other:?}"),
        }
    }
    (
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
        exit.expect("an exit frame before the close"),
    )
}

/// A relay, an agent whose simulated runtime runs `ws-a` and allows exec in a temp dir.
async fn setup() -> (TestServer, TestRelay, TestAgent, tempfile::TempDir) {
    let server = TestServer::start(slow_timers()).await;
    server.with(|s| s.model.create("ws-a"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    agent.has_workspace("ws-a").await;
    let dir = tempfile::tempdir().unwrap();
    agent.runtime.enable_exec(dir.path());
    (server, relay, agent, dir)
}

fn base(relay: &TestRelay) -> String {
    relay.internal_url("").trim_end_matches('/').to_owned()
}

#[tokio::test]
async fn exec_carries_stdin_stdout_stderr_and_the_exit_code() {
    let (_server, relay, _agent, dir) = setup().await;
    let mut t = target(
        "ws-a",
        &[
            "/bin/sh",
            "-c",
            "cat; echo \"oops $GREETING\" >&2; pwd; exit 7",
        ],
    );
    t.env.push(warren_types::relay::EnvVar {
        name: "GREETING".into(),
        value: "hi there".into(),
    });
    let mut io = open_exec(&base(&relay), &t).await.unwrap();
    send(&mut io, ExecFrame::Stdin(b"hello ".to_vec())).await;
    send(&mut io, ExecFrame::Stdin(b"through the relay\n".to_vec())).await;
    send(&mut io, ExecFrame::StdinEof).await;
    let (out, err, exit) = collect(&mut io).await;
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(out, format!("hello through the relay\n{}\n", cwd.display()));
    assert_eq!(err, "oops hi there\n");
    assert_eq!(exit.code, Some(7));
}

#[tokio::test]
async fn tty_sessions_merge_output_and_take_sizes() {
    let (_server, relay, agent, _dir) = setup().await;
    let mut t = target(
        "ws-a",
        &[
            "/bin/sh",
            "-c",
            "echo size $COLUMNS $LINES; echo err >&2; read line; echo got $line",
        ],
    );
    t.tty = true;
    t.size = Some(TerminalSize { cols: 91, rows: 33 });
    let mut io = open_exec(&base(&relay), &t).await.unwrap();
    send(
        &mut io,
        ExecFrame::Resize(TerminalSize {
            cols: 120,
            rows: 40,
        }),
    )
    .await;
    // Enter on a terminal is CR; the (simulated) line discipline hands the shell LF.
    send(&mut io, ExecFrame::Stdin(b"line\r".to_vec())).await;
    let (out, err, exit) = collect(&mut io).await;
    assert!(out.contains("size 91 33\r\n"), "{out}");
    // Merged from two pipes by the simulated runtime: the order between them is not kept.
    assert!(
        out.contains("err\r\n"),
        "stderr is merged with a tty: {out}"
    );
    assert!(out.contains("got line\r\n"), "{out}");
    assert_eq!(err, "");
    assert_eq!(exit.code, Some(0));
    // The agent hands sizes to the runtime in order; the simulated runtime records them
    // asynchronously.
    let want = vec![
        TerminalSize { cols: 91, rows: 33 },
        TerminalSize {
            cols: 120,
            rows: 40,
        },
    ];
    wait_for("both sizes to reach the runtime", 20, || async {
        agent.runtime.exec_resizes() == want
    })
    .await;
}

#[tokio::test]
async fn exec_errors_name_the_problem() {
    let (_server, relay, _agent, _dir) = setup().await;
    let base = base(&relay);
    let jwt = internal_jwt("warren-proxy");

    let (status, body) = open_exec(&base, &target("nope", &["/bin/sh"]))
        .await
        .err()
        .unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("workspace_not_found"), "{body}");

    let (status, body) = open_exec(&base, &target("ws-a", &["/definitely/not/here"]))
        .await
        .err()
        .unwrap();
    assert_eq!(status, 502, "{body}");
    assert!(body.contains("exec_failed"), "{body}");
    assert!(body.contains("/definitely/not/here"), "{body}");

    let (status, body) = open_raw(&base, AGENT, "{not json", &jwt)
        .await
        .err()
        .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("invalid_exec_request"), "{body}");

    let empty = serde_json::to_string(&target("ws-a", &[])).unwrap();
    let (status, body) = open_raw(&base, AGENT, &empty, &jwt).await.err().unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("command is empty"), "{body}");

    let mut huge = target("ws-a", &["/bin/echo"]);
    huge.command.push("x".repeat(20_000));
    let huge = serde_json::to_string(&huge).unwrap();
    let (status, body) = open_raw(&base, AGENT, &huge, &jwt).await.err().unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("at most"), "{body}");

    let ok = serde_json::to_string(&target("ws-a", &["/bin/true"])).unwrap();
    let (status, _) = open_raw(&base, AGENT, &ok, "bad").await.err().unwrap();
    assert_eq!(status, 401);
    let (status, body) = open_raw(&base, AgentId(99), &ok, &jwt).await.err().unwrap();
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("agent_not_connected"), "{body}");
}

#[tokio::test]
async fn a_client_going_away_ends_the_process() {
    let (_server, relay, _agent, _dir) = setup().await;
    let t = target("ws-a", &["/bin/sh", "-c", "echo $$; exec sleep 1000"]);
    let mut io = open_exec(&base(&relay), &t).await.unwrap();
    let mut pid = String::new();
    while !pid.ends_with('\n') {
        match warren_tunnel::read_exec_frame(&mut io).await.unwrap() {
            Some(ExecFrame::Stdout(b)) => pid.push_str(std::str::from_utf8(&b).unwrap()),
            other => panic!("expected the pid, got {other:?}"),
        }
    }
    let proc_dir = format!("/proc/{}", pid.trim());
    assert!(std::path::Path::new(&proc_dir).exists());
    drop(io);
    wait_for("the process to end with its session", 20, || async {
        // Gone, or a zombie waiting to be reaped (state `Z` after the command name).
        match std::fs::read_to_string(format!("{proc_dir}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z')),
        }
    })
    .await;
}
