//! Devfiles with a `parent`, against the in-process stack and a devfile registry served on
//! port 0 by the test (the registry index format: `/index`, `/devfiles/{stack}/{version}`):
//! by id from the configured registry at a version, by `registryUrl`, by uri, with overrides;
//! fetched once for many workspaces; refusals that name the problem; and the CLI's
//! `devfile validate` doing the same.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::process::Stdio;
use tokio::process::Command;
use warren_testkit::files_http::FilesHttpServer;
use warren_testkit::{Stack, StackOptions};

fn parent(version: &str) -> String {
    format!(
        r#"schemaVersion: 2.2.0
metadata: {{name: nodejs, version: {version}}}
variables: {{greeting: hello}}
components:
  - name: runtime
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      env: [{{name: STACK_VERSION, value: "{version}"}}, {{name: MODE, value: parent}}]
      endpoints: [{{name: http, targetPort: 3000}}]
commands:
  - id: hello
    exec:
      component: runtime
      commandLine: 'echo "{{{{greeting}}}} from $STACK_VERSION $MODE"'
      workingDir: /tmp
      env: [{{name: STACK_VERSION, value: "{version}"}}, {{name: MODE, value: parent}}]
"#
    )
}

async fn registry() -> Result<FilesHttpServer> {
    let r = FilesHttpServer::start().await?;
    r.put(
        "/index",
        &json!([
            {"name": "nodejs", "versions": [
                {"version": "1.0.0", "schemaVersion": "2.2.0"},
                {"version": "2.1.0", "schemaVersion": "2.2.0", "default": true}
            ]}
        ])
        .to_string(),
    );
    for v in ["1.0.0", "2.1.0"] {
        r.put(&format!("/devfiles/nodejs/{v}"), &parent(v));
    }
    r.put("/files/parent.yaml", &parent("9.9.9"));
    Ok(r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parents_are_fetched_merged_and_cached() -> Result<()> {
    let reg = registry().await?;
    let stack = Stack::start_with(StackOptions {
        devfile_registries: vec![reg.url("")],
        ..Default::default()
    })
    .await?;
    let dir = tempfile::tempdir()?;
    stack.runtime.enable_exec(dir.path());
    let alice = stack.user("alice").await?;
    let http = reqwest::Client::new();
    let create = |name: &str, devfile: String| {
        http.post(format!("{}/api/v1/workspaces", stack.api_url))
            .bearer_auth(&alice.token)
            .json(&json!({"name": name, "devfile": devfile}))
            .send()
    };

    // By id from the configured registry, at a version, with overrides.
    let child = "schemaVersion: 2.2.0
metadata: {name: app}
parent:
  id: nodejs
  version: 1.0.0
  variables: {greeting: hi}
  components:
    - name: runtime
      container:
        env: [{name: MODE, value: child}]
  commands:
    - id: hello
      exec:
        env: [{name: MODE, value: child}]
commands:
  - id: both
    composite: {commands: [hello]}
";
    let resp = create("by-id", child.into()).await?;
    assert_eq!(resp.status(), 201, "{}", resp.text().await?);
    let w: Value = resp.json().await?;
    let notices = w["notices"].to_string();
    assert!(
        notices.contains(&format!(
            "parent: merged in from id nodejs 1.0.0 from {}",
            reg.url("")
        )),
        "{notices}"
    );
    let ids: Vec<&str> = w["commands"]
        .as_array()
        .context("commands")?
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, ["hello", "both"]);
    stack.wait_state(&alice, "by-id", "Running").await?;
    let out = http
        .post(format!(
            "{}/api/v1/workspaces/by-id/commands/hello/run",
            stack.api_url
        ))
        .bearer_auth(&alice.token)
        .send()
        .await?
        .text()
        .await?;
    assert!(
        out.contains("hi from 1.0.0 child"),
        "the parent's command with the overrides: {out}"
    );

    // By registryUrl (the default version), and by uri; the registry is read once for both
    // workspaces of the same parent.
    let by_url = format!(
        "schemaVersion: 2.2.0\nparent: {{id: nodejs, registryUrl: '{}'}}\n",
        reg.url("")
    );
    for name in ["default-1", "default-2"] {
        let resp = create(name, by_url.clone()).await?;
        assert_eq!(resp.status(), 201, "{}", resp.text().await?);
        let w: Value = resp.json().await?;
        assert!(w["notices"].to_string().contains("id nodejs 2.1.0"), "{w}");
    }
    assert_eq!(reg.hits("/devfiles/nodejs/2.1.0"), 1, "cached");
    let resp = create(
        "by-uri",
        format!(
            "schemaVersion: 2.2.0\nparent: {{uri: '{}'}}\n",
            reg.url("/files/parent.yaml")
        ),
    )
    .await?;
    assert_eq!(resp.status(), 201, "{}", resp.text().await?);

    // Refusals name the problem and the field.
    for (devfile, needle) in [
        (
            "schemaVersion: 2.2.0\nparent:\n  id: nodejs\n  components:\n    - name: db\n      container: {image: x}\n".to_owned(),
            "parent.components[0].name: the parent has no component \\\"db\\\"",
        ),
        (
            "schemaVersion: 2.2.0\nparent: {id: nodejs, version: 3.0.0}\n".to_owned(),
            "has no version 3.0.0 (it has 1.0.0, 2.1.0)",
        ),
        (
            format!("schemaVersion: 2.2.0\nparent: {{uri: '{}'}}\n", reg.url("/files/missing.yaml")),
            "HTTP 404",
        ),
        (
            "schemaVersion: 2.2.0\nparent: {id: nodejs}\ncomponents:\n  - name: runtime\n    container: {image: x}\n".to_owned(),
            "the parent already has a component \\\"runtime\\\"",
        ),
    ] {
        let resp = create("refused", devfile).await?;
        assert_eq!(resp.status(), 422);
        let body = resp.text().await?;
        assert!(body.contains(needle), "{needle}: {body}");
    }

    // The CLI resolves the same way, offline from the server.
    let file = dir.path().join("devfile.yaml");
    std::fs::write(&file, child)?;
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["devfile", "validate"])
        .arg(&file)
        .args(["--devfile-registry", &reg.url("")])
        .stdin(Stdio::null())
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("notice: parent: merged in from id nodejs 1.0.0"),
        "{stdout}"
    );
    assert!(
        stdout.contains("hello (exec in runtime), both (composite: hello)"),
        "{stdout}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["devfile", "validate"])
        .arg(&file)
        .env_remove("WARREN_DEVFILE_REGISTRIES")
        .stdin(Stdio::null())
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no devfile registry is configured"));
    Ok(())
}
