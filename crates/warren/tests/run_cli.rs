//! `POST /api/v1/workspaces/{ws}/commands/{id}/run` and `warren ws run` against the
//! in-process stack (server → relay → agent connection → simulated runtime, whose exec runs
//! local processes): exec commands with their output and exit code, composites in order and
//! in parallel, apply commands, who may run what, and a run stopped by leaving.

use anyhow::{Context, Result};
use serde_json::Value;
use std::process::Stdio;
use tokio::process::Command;
use warren_testkit::{wait_for, Stack};

fn devfile(dir: &str) -> String {
    format!(
        r#"schemaVersion: 2.2.0
metadata:
  name: runs
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
  - name: build
    image:
      imageName: app:1
      dockerfile: {{uri: Dockerfile}}
  - name: deploy
    kubernetes:
      inlined: |
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: app}}
        data: {{greeting: "it's here"}}
commands:
  - id: hello
    exec:
      component: dev
      commandLine: echo "hello from $(pwd) $GREETING"; echo oops >&2
      workingDir: {dir}
      env: [{{name: GREETING, value: "it's me"}}]
      group: {{kind: test}}
  - id: fail
    exec: {{component: dev, commandLine: exit 3, workingDir: {dir}}}
  - id: never
    exec: {{component: dev, commandLine: touch never-ran, workingDir: {dir}}}
  - id: sequence
    composite: {{commands: [hello, fail, never]}}
  - id: left
    exec: {{component: dev, commandLine: 'echo left; i=0; while [ ! -e right-ran ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; test -e right-ran && echo left-done', workingDir: {dir}}}
  - id: right
    exec: {{component: dev, commandLine: 'touch right-ran; echo right', workingDir: {dir}}}
  - id: both
    composite: {{commands: [left, right], parallel: true}}
  - id: build-image
    apply: {{component: build}}
  - id: deploy-k8s
    apply: {{component: deploy}}
  - id: long
    exec: {{component: dev, commandLine: 'echo $$ > long.pid.tmp && mv long.pid.tmp long.pid; exec sleep 300', workingDir: {dir}}}
"#
    )
}

async fn events(resp: reqwest::Response) -> Result<Vec<Value>> {
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await?;
    text.lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("event line {l:?}")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devfile_commands_run_on_demand_through_api_and_cli() -> Result<()> {
    let stack = Stack::start().await?;
    let dir = tempfile::tempdir()?;
    let dir_s = dir.path().to_str().context("utf-8 temp dir")?.to_owned();
    stack.runtime.enable_exec(dir.path());
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    stack
        .workspace_from(&alice, "runs", &devfile(&dir_s))
        .await?;

    // The workspace lists its commands.
    let w = stack
        .api(
            reqwest::Method::GET,
            "/api/v1/workspaces/runs",
            &alice.token,
            None,
        )
        .await?;
    let ids: Vec<&str> = w["commands"]
        .as_array()
        .context("commands")?
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "hello",
            "fail",
            "never",
            "sequence",
            "left",
            "right",
            "both",
            "build-image",
            "deploy-k8s",
            "long"
        ]
    );
    assert_eq!(w["commands"][3]["summary"], "hello + fail + never");
    assert_eq!(w["commands"][7]["summary"], "build image app:1 (build)");

    let http = reqwest::Client::new();
    let run = |token: &str, id: &str| {
        http.post(format!(
            "{}/api/v1/workspaces/runs/commands/{id}/run",
            stack.api_url
        ))
        .bearer_auth(token.to_owned())
        .send()
    };

    // One exec: its output by stream, in its working directory with its environment.
    let ev = events(run(&alice.token, "hello").await?).await?;
    assert_eq!(ev.first().context("events")?["event"], "started");
    assert_eq!(ev[0]["component"], "dev");
    let out: String = ev
        .iter()
        .filter(|e| e["event"] == "output" && e["stream"] == "stdout")
        .filter_map(|e| e["data"].as_str())
        .collect();
    assert_eq!(out, format!("hello from {dir_s} it's me\n"));
    assert!(ev
        .iter()
        .any(|e| e["event"] == "output" && e["stream"] == "stderr" && e["data"] == "oops\n"));
    let last = ev.last().context("done")?;
    assert_eq!(
        (&last["event"], &last["exit_code"]),
        (&"done".into(), &0.into())
    );

    // A sequence stops at the first failure, with its code.
    let ev = events(run(&alice.token, "sequence").await?).await?;
    let started: Vec<&str> = ev
        .iter()
        .filter(|e| e["event"] == "started")
        .filter_map(|e| e["command"].as_str())
        .collect();
    assert_eq!(started, ["hello", "fail"]);
    let last = ev.last().context("done")?;
    assert_eq!(last["exit_code"], 3);
    assert_eq!(last["failed"], "fail");
    assert!(!dir.path().join("never-ran").exists());

    // Parallel steps run at the same time: `left` succeeds only when `right` runs while it
    // waits (one after the other, it would give up after 20 s and fail).
    let ev = events(run(&alice.token, "both").await?).await?;
    assert_eq!(ev.last().context("done")?["exit_code"], 0, "{ev:?}");
    let mut finished: Vec<&str> = ev
        .iter()
        .filter(|e| e["event"] == "finished")
        .filter_map(|e| e["command"].as_str())
        .collect();
    finished.sort_unstable();
    assert_eq!(finished, ["left", "right"]);

    // An image build this runtime cannot do fails by name.
    let ev = events(run(&alice.token, "build-image").await?).await?;
    let fin = ev
        .iter()
        .find(|e| e["event"] == "finished")
        .context("finished")?;
    assert!(
        fin["message"]
            .as_str()
            .unwrap_or_default()
            .contains("image app:1"),
        "{fin}"
    );
    assert_eq!(ev.last().context("done")?["exit_code"], 1);

    // A kubernetes component's objects reach the runtime through the agent.
    let ev = events(run(&alice.token, "deploy-k8s").await?).await?;
    assert_eq!(ev.last().context("done")?["exit_code"], 0, "{ev:?}");
    assert!(
        ev.iter()
            .any(|e| e["event"] == "output" && e["data"] == "applied ConfigMap app\n"),
        "{ev:?}"
    );
    let key = warren_agent::runtime::WorkspaceKey {
        name: "runs".into(),
        namespace: w["namespace"].as_str().context("namespace")?.into(),
    };
    let objects = stack
        .runtime
        .component_objects(&key, "deploy")
        .context("applied objects")?;
    assert_eq!(objects.len(), 1);
    assert_eq!(objects[0]["data"]["greeting"], "it's here");

    // Who may run what: others learn nothing, an admin may look but not run, unknown ids
    // name the ones there are.
    let resp = run(&bob.token, "hello").await?;
    assert_eq!(resp.status(), 404);
    let resp = run(&stack.admin.token, "hello").await?;
    assert_eq!(resp.status(), 403);
    let resp = run(&alice.token, "nope").await?;
    assert_eq!(resp.status(), 404);
    let body = resp.text().await?;
    assert!(
        body.contains("no command \\\"nope\\\"") && body.contains("hello, fail"),
        "{body}"
    );

    // Leaving stops the command in the workspace.
    let mut resp = run(&alice.token, "long").await?;
    assert_eq!(resp.status(), 200);
    let pid_file = dir.path().join("long.pid");
    // The pid file appears whole (written aside, then renamed): `echo $$ > long.pid` creates it
    // empty before writing, and CI run 8 read it in between.
    wait_for("the long command to start", 20, || async {
        pid_file.exists()
    })
    .await?;
    let _ = resp.chunk().await?;
    drop(resp);
    let pid: u32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
    wait_for("the long command to be stopped", 20, || async {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    })
    .await?;

    // The CLI: output as written, steps on stderr, the command's exit code.
    let home = tempfile::tempdir()?;
    let warren = |args: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(args)
            .env("HOME", home.path())
            .env("WARREN_HOME", home.path().join("warren"))
            .env("WARREN_URL", &stack.api_url)
            .env("WARREN_TOKEN", &alice.token)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd.output()
    };
    let out = warren(&["ws", "run", "runs", "hello"]).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8(out.stdout)?,
        format!("hello from {dir_s} it's me\n")
    );
    assert!(
        stderr.contains("==> hello (exec in dev)") && stderr.contains("oops"),
        "{stderr}"
    );
    let out = warren(&["ws", "run", "runs", "sequence"]).await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("==> fail failed (exit code 3)") && stderr.contains("failed at fail"),
        "{stderr}"
    );
    let out = warren(&["ws", "run", "runs", "both"]).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0));
    assert!(
        stdout.contains("[right] right\n") && stdout.contains("[left] left-done\n"),
        "{stdout}"
    );
    let out = warren(&["ws", "run", "runs", "nope"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no command \"nope\""));
    let out = warren(&["ws", "show", "runs"]).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(
            "hello (exec): echo \"hello from $(pwd) $GREETING\"; echo oops >&2 (in dev) [test]"
        ),
        "{stdout}"
    );

    // A stopped workspace runs nothing, and says what to do.
    stack.set_desired(&alice, "runs", "Stopped").await?;
    stack.wait_state(&alice, "runs", "Stopped").await?;
    let resp = run(&alice.token, "hello").await?;
    assert_eq!(resp.status(), 409);
    assert!(resp.text().await?.contains("warren ws start runs"));
    Ok(())
}
