//! Wake on request: a workspace the idle timeout stopped starts again when a request reaches
//! it through the proxy — curl gets 503 with `Retry-After` and then the workspace, Chromium
//! a "starting" page that turns into the workspace by itself. A workspace its user stopped
//! stays stopped and shows its start button; an agent whose policy says no never wakes one.

use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::process::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_testkit::browser::Chromium;
use warren_testkit::{Stack, StackOptions, TestUser};

async fn web_server(name: &'static str) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let _ = sock.read(&mut buf).await;
                let body = format!("<html><body><h1 id=hello>Hello from {name}</h1></body></html>");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok(addr)
}

/// `curl -sS -i` of `url` with the user's token, resolving the workspace host (`name:port`)
/// to the proxy.
/// Runs as a child process the runtime waits on: the stack serves in this same runtime.
async fn curl(url: &str, host: &str, token: &str) -> Result<(u16, String)> {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "-i", "--max-time", "20"])
        .arg("--resolve")
        .arg(format!("{host}:127.0.0.1"))
        .arg("-H")
        .arg(format!("Authorization: Bearer {token}"))
        .arg(url)
        .output()
        .await
        .context("running curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| {
            format!(
                "no status line: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    Ok((status, text))
}

fn have_curl() -> bool {
    let ok = Command::new("curl").arg("--version").output().is_ok();
    if !ok {
        if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
            panic!("WARREN_REQUIRE_TOOLS is set but curl is missing");
        }
        eprintln!("skipping: curl is not installed");
    }
    ok
}

/// Sets the agent's idle timeout (and whether requests wake) through the admin API.
async fn set_policy(stack: &Stack, wake: bool) -> Result<()> {
    let agent = stack
        .api(
            reqwest::Method::GET,
            "/api/v1/agents/local",
            &stack.admin.token,
            None,
        )
        .await?;
    let mut config = agent["config"].clone();
    config["lifecycle"]["idle_timeout_minutes"] = json!(1);
    config["lifecycle"]["wake_on_request"] = json!(wake);
    stack
        .api(
            reqwest::Method::PUT,
            "/api/v1/agents/local",
            &stack.admin.token,
            Some(json!({"config": config})),
        )
        .await?;
    Ok(())
}

/// Moves the server's clock past the idle timeout and waits for the stop.
async fn go_idle(stack: &Stack, owner: &TestUser, name: &str) -> Result<()> {
    stack
        .clock
        .as_ref()
        .context("a manual clock")?
        .advance_ms(2 * 60_000);
    stack.wait_state(owner, name, "Stopped").await?;
    let w = workspace(stack, owner, name).await?;
    assert_eq!(w["desired_state"], "Stopped", "{w}");
    Ok(())
}

async fn workspace(stack: &Stack, owner: &TestUser, name: &str) -> Result<Value> {
    stack
        .api(
            reqwest::Method::GET,
            &format!("/api/v1/workspaces/{name}"),
            &owner.token,
            None,
        )
        .await
}

#[tokio::test]
async fn an_idle_stopped_workspace_wakes_on_request() -> Result<()> {
    if !have_curl() {
        return Ok(());
    }
    let stack = Stack::start_with(StackOptions {
        manual_clock: true,
        authorization_cache_secs: 0,
        ..StackOptions::default()
    })
    .await?;
    set_policy(&stack, true).await?;
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    stack.set_endpoint(&ws, 8080, web_server("alice-web").await?);
    let host = stack.host(8080, "alice-web");
    let url = stack.url(8080, "alice-web", "/");
    let (st, _) = curl(&url, &host, &alice.token).await?;
    assert_eq!(st, 200);

    // curl: 503 with Retry-After while it starts, then the workspace.
    go_idle(&stack, &alice, "alice-web").await?;
    let (st, text) = curl(&url, &host, &alice.token).await?;
    assert_eq!(st, 503, "{text}");
    assert!(
        text.to_ascii_lowercase().contains("retry-after: 3"),
        "{text}"
    );
    assert!(text.contains("workspace_starting"), "{text}");
    stack.wait_state(&alice, "alice-web", "Running").await?;
    let (st, text) = curl(&url, &host, &alice.token).await?;
    assert_eq!(st, 200, "{text}");
    assert!(text.contains("Hello from alice-web"), "{text}");

    // A workspace its user stopped stays stopped: the start button, not a wake-up.
    stack.set_desired(&alice, "alice-web", "Stopped").await?;
    stack.wait_state(&alice, "alice-web", "Stopped").await?;
    let (st, text) = curl(&url, &host, &alice.token).await?;
    assert_eq!(st, 503, "{text}");
    assert!(text.contains("workspace_not_running"), "{text}");
    let w = workspace(&stack, &alice, "alice-web").await?;
    assert_eq!(w["desired_state"], "Stopped", "not woken: {w}");

    // An agent whose policy says no: idle-stopped stays stopped too.
    stack.set_desired(&alice, "alice-web", "Running").await?;
    stack.wait_state(&alice, "alice-web", "Running").await?;
    set_policy(&stack, false).await?;
    stack.wait_state(&alice, "alice-web", "Running").await?;
    go_idle(&stack, &alice, "alice-web").await?;
    let (st, text) = curl(&url, &host, &alice.token).await?;
    assert_eq!(st, 503, "{text}");
    assert!(text.contains("workspace_not_running"), "{text}");
    let w = workspace(&stack, &alice, "alice-web").await?;
    assert_eq!(w["desired_state"], "Stopped", "not woken: {w}");
    Ok(())
}

#[tokio::test]
async fn a_browser_sees_a_starting_page_that_turns_into_the_workspace() -> Result<()> {
    let Some(chromium) = Chromium::start().await? else {
        if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
            panic!("WARREN_REQUIRE_TOOLS is set but Chromium is not installed");
        }
        eprintln!("skipping: Chromium is not installed (.ci/setup-tools.sh installs it)");
        return Ok(());
    };
    let stack = Stack::start_with(StackOptions {
        manual_clock: true,
        authorization_cache_secs: 0,
        ..StackOptions::default()
    })
    .await?;
    set_policy(&stack, true).await?;
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    stack.set_endpoint(&ws, 8080, web_server("alice-web").await?);
    go_idle(&stack, &alice, "alice-web").await?;

    let mut tab = chromium.tab().await?;
    let page = stack.url(8080, "alice-web", "/");
    tab.goto(&page).await?;
    tab.sign_in(&alice).await?;
    // Either the "starting" page shows first or the workspace is up already; both end on it.
    tab.wait_until(
        "document.title.indexOf('is starting') >= 0 || document.getElementById('hello') !== null",
        30,
    )
    .await?;
    tab.wait_until(
        "document.getElementById('hello') !== null && \
         document.getElementById('hello').innerText === 'Hello from alice-web'",
        30,
    )
    .await
    .context("the starting page should turn into the workspace")?;
    assert_eq!(tab.url().await?, page);
    let w = workspace(&stack, &alice, "alice-web").await?;
    assert_eq!(w["actual_state"], "Running", "{w}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ssh_session_wakes_an_idle_stopped_workspace_and_waits_for_it() -> Result<()> {
    let have = ["ssh", "sshpass"].iter().all(|t| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !have {
        if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
            panic!("WARREN_REQUIRE_TOOLS is set but ssh or sshpass is missing");
        }
        eprintln!("skipping: ssh or sshpass is not installed");
        return Ok(());
    }
    let stack = Stack::start_with(StackOptions {
        manual_clock: true,
        authorization_cache_secs: 0,
        ..StackOptions::default()
    })
    .await?;
    set_policy(&stack, true).await?;
    let alice = stack.user("alice").await?;
    stack.workspace(&alice, "alice-ssh").await?;
    go_idle(&stack, &alice, "alice-ssh").await?;

    let port = stack.ssh_addr.context("the stack's SSH listener")?.port();
    let out = tokio::process::Command::new("sshpass")
        .args([
            "-p",
            &alice.token,
            "ssh",
            "-F",
            "/dev/null",
            "-p",
            &port.to_string(),
        ])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password",
            "alice-ssh@127.0.0.1",
            "echo",
            "hello-after-waking",
        ])
        .output()
        .await
        .context("running ssh")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("starting workspace alice-ssh"), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello-after-waking"
    );
    let w = workspace(&stack, &alice, "alice-ssh").await?;
    assert_eq!(w["actual_state"], "Running", "{w}");
    Ok(())
}
