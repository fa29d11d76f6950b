//! `GET /api/v1/workspaces/{ws}/logs` and `warren ws logs` against the in-process stack
//! (server → relay → agent connection → simulated runtime): the owner reads the tail asked
//! for, of the main or a named container; others get 404; bad queries name the field. The
//! startup status read from that output, through the API, `warren ws show` and the web UI.

use anyhow::Result;
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;
use warren_testkit::Stack;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workspace_logs_reach_the_owner_through_api_and_cli() -> Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    let ws = stack.workspace(&alice, "alice-logs").await?;
    let lines: String = (1..=300).map(|i| format!("line {i}\n")).collect();
    stack.runtime.set_logs(&ws.key(), None, &lines);
    stack.runtime.set_logs(&ws.key(), Some("db"), "db ready\n");

    let http = reqwest::Client::new();
    let get = |token: &str, query: &str| {
        http.get(format!(
            "{}/api/v1/workspaces/alice-logs/logs{query}",
            stack.api_url
        ))
        .bearer_auth(token.to_owned())
        .send()
    };
    let resp = get(&alice.token, "").await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    let text = resp.text().await?;
    assert_eq!(text.lines().count(), 200, "the default tail");
    assert!(text.ends_with("line 300\n") && text.starts_with("line 101\n"));
    let text = get(&alice.token, "?tail=3").await?.text().await?;
    assert_eq!(text, "line 298\nline 299\nline 300\n");
    let text = get(&alice.token, "?container=db").await?.text().await?;
    assert_eq!(text, "db ready\n");
    // The admin may read them too; another user learns nothing.
    assert_eq!(get(&stack.admin.token, "?tail=1").await?.status(), 200);
    let resp = get(&bob.token, "").await?;
    assert_eq!(resp.status(), 404);
    assert!(!resp.text().await?.contains("line"));
    for (query, field) in [
        ("?tail=0", "tail"),
        ("?tail=10001", "tail"),
        ("?container=Bad%2Fname", "container"),
    ] {
        let resp = get(&alice.token, query).await?;
        assert_eq!(resp.status(), 400, "{query}");
        let body = resp.text().await?;
        assert!(body.contains(field), "{query}: {body}");
    }
    let resp = get(&alice.token, "?container=cache").await?;
    assert_eq!(resp.status(), 404);
    assert!(resp.text().await?.contains("container cache"));

    // The CLI prints the text as it is.
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
    let out = warren(&["ws", "logs", "alice-logs", "--tail", "2"]).await?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout)?, "line 299\nline 300\n");
    let out = warren(&["ws", "logs", "alice-logs", "-c", "db"]).await?;
    assert_eq!(String::from_utf8(out.stdout)?, "db ready\n");
    let out = warren(&["ws", "logs", "nope"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));

    // Following over the API: the tail, then what is written later, as it happens.
    let mut resp = get(&alice.token, "?tail=1&follow=true").await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(chunk_until(&mut resp, "line 300\n").await?, "line 300\n");
    stack.runtime.append_logs(&ws.key(), None, "line 301\n");
    assert_eq!(chunk_until(&mut resp, "line 301\n").await?, "line 301\n");
    drop(resp);

    // And with the CLI: `-f` prints each write when it comes.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
    cmd.args(["ws", "logs", "alice-logs", "-f", "-n", "1"])
        .env("HOME", home.path())
        .env("WARREN_HOME", home.path().join("warren"))
        .env("WARREN_URL", &stack.api_url)
        .env("WARREN_TOKEN", &alice.token)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let mut out = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(next_line(&mut out).await?.as_deref(), Some("line 301"));
    stack.runtime.append_logs(&ws.key(), None, "line 302\n");
    assert_eq!(next_line(&mut out).await?.as_deref(), Some("line 302"));
    child.kill().await?;
    Ok(())
}

/// Reads chunks of a followed answer until `want` came; everything read.
async fn chunk_until(resp: &mut reqwest::Response, want: &str) -> Result<String> {
    let mut got = String::new();
    while !got.contains(want) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), resp.chunk())
            .await??
            .ok_or_else(|| anyhow::anyhow!("ended early: {got:?}"))?;
        got.push_str(std::str::from_utf8(&chunk)?);
    }
    Ok(got)
}

/// The next line the CLI printed, waiting at most 20 s.
async fn next_line(
    out: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
) -> Result<Option<String>> {
    Ok(tokio::time::timeout(std::time::Duration::from_secs(20), out.next_line()).await??)
}

/// The startup's status as the main container's output tells it, through the API
/// (`GET …/startup`), `warren ws show` and the web UI's workspace page: unknown while the
/// output says nothing, the step under way, then a failed command with its exit code. Its
/// output is the owner's: others get 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_status_is_read_from_the_main_containers_output() -> Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    let ws = stack.workspace(&alice, "alice-start").await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let startup = |token: &str| {
        http.get(format!(
            "{}/api/v1/workspaces/alice-start/startup",
            stack.api_url
        ))
        .bearer_auth(token.to_owned())
        .send()
    };
    let v: serde_json::Value = startup(&alice.token).await?.json().await?;
    assert_eq!(v, serde_json::json!({"state": "unknown"}));

    let starting = "the image's own line\n\
        2026-11-30T10:00:00Z warren: startup of container dev: starting\n\
        2026-11-30T10:00:00Z warren: startup of container dev: cloning project app\n";
    stack.runtime.set_logs(&ws.key(), Some("dev"), starting);
    let v: serde_json::Value = startup(&alice.token).await?.json().await?;
    assert_eq!(v["state"], "starting", "{v}");
    assert_eq!(v["step"], "cloning project app", "{v}");
    assert_eq!(v["container"], "dev", "{v}");

    let said = "postStart command post-create (postCreateCommand) exited with code 7";
    stack.runtime.append_logs(
        &ws.key(),
        Some("dev"),
        &format!("make: *** [all] Error 7\n2026-11-30T10:00:03Z warren: startup of container dev failed: {said}\n"),
    );
    let v: serde_json::Value = startup(&alice.token).await?.json().await?;
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(v["reason"], said, "{v}");
    let resp = startup(&bob.token).await?;
    assert_eq!(resp.status(), 404);
    assert!(!resp.text().await?.contains("post-create"));

    // `warren ws show` has a row for it.
    let home = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["ws", "show", "alice-start"])
        .env("HOME", home.path())
        .env("WARREN_HOME", home.path().join("warren"))
        .env("WARREN_URL", &stack.api_url)
        .env("WARREN_TOKEN", &alice.token)
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await?;
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.starts_with("Startup") && l.ends_with(&format!("failed: {said}"))),
        "{shown}"
    );

    // The web UI's page of the workspace, signed in through its form.
    let login = http.get(format!("{}/login", stack.api_url)).send().await?;
    let mut cookies = set_cookies(&login);
    let form = login.text().await?;
    let csrf = form
        .split("name=\"csrf_token\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the sign-in form's CSRF token")
        .to_owned();
    let signed = http
        .post(format!("{}/login", stack.api_url))
        .header(reqwest::header::COOKIE, cookies.join("; "))
        .form(&[
            ("username", alice.username.as_str()),
            ("password", alice.password.as_str()),
            ("csrf_token", csrf.as_str()),
            ("next", "/"),
        ])
        .send()
        .await?;
    assert_eq!(signed.status(), 303, "signed in");
    cookies.extend(set_cookies(&signed));
    let page = http
        .get(format!("{}/workspaces/alice-start", stack.api_url))
        .header(reqwest::header::COOKIE, cookies.join("; "))
        .send()
        .await?
        .text()
        .await?;
    assert!(page.contains(&format!("Startup failed: {said}")), "{page}");
    Ok(())
}

/// The `name=value` of each cookie an answer sets.
fn set_cookies(resp: &reqwest::Response) -> Vec<String> {
    resp.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|v| v.split(';').next())
        .map(str::to_owned)
        .collect()
}
