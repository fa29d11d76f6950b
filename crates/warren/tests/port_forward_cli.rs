//! `warren ws port-forward` (the binary) against the in-process stack: local ports carried
//! to a workspace's ports through the proxy and the relay, no SSH involved — curl fetches a
//! declared endpoint through a chosen local port, and raw TCP reaches an undeclared port
//! through a free one. Another user's token gets nothing.

use anyhow::{Context, Result};
use std::process::Stdio;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use warren_testkit::{Stack, TestUser};

/// A web server answering every request with a page naming `name`.
async fn web_server(name: &'static str) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = sock.read(&mut buf).await;
                let body = format!("hello from {name}\n");
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            });
        }
    });
    Ok(addr)
}

/// A TCP echo server (a database's port, say).
async fn echo_server() -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = sock.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Ok(addr)
}

/// Starts `warren ws port-forward` as `user`; returns the child, the local addresses it
/// printed, in order, and its home (removed when dropped).
async fn forward(
    stack: &Stack,
    user: &TestUser,
    args: &[&str],
    count: usize,
) -> Result<(Child, Vec<String>, tempfile::TempDir)> {
    let home = tempfile::tempdir()?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["ws", "port-forward"])
        .args(args)
        .env("WARREN_HOME", home.path())
        .env("WARREN_URL", &stack.api_url)
        .env("WARREN_TOKEN", &user.token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting warren ws port-forward")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let mut addrs = vec![];
    while addrs.len() < count {
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .context("waiting for the Forwarding line")??;
        let Some(line) = line else {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err).await;
            }
            anyhow::bail!("port-forward exited early: {err}");
        };
        let addr = line
            .strip_prefix("Forwarding from ")
            .and_then(|r| r.split(" -> ").next())
            .with_context(|| format!("unexpected line {line:?}"))?;
        addrs.push(addr.to_owned());
    }
    Ok((child, addrs, home))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn port_forward_carries_http_and_raw_tcp_through_the_proxy() -> Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let mallory = stack.user("mallory").await?;
    let ws = stack.workspace(&alice, "alice-pf").await?;
    stack.set_endpoint(&ws, 8080, web_server("alice-pf").await?);
    // 5432 is not declared by the devfile: forwarded all the same, as kubectl does.
    stack.set_endpoint(&ws, 5432, echo_server().await?);

    let local_web = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let spec = format!("{local_web}:8080");
    let (mut child, addrs, _home) =
        forward(&stack, &alice, &["alice-pf", &spec, ":5432"], 2).await?;
    assert_eq!(addrs[0], format!("127.0.0.1:{local_web}"));

    // curl through the chosen local port.
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", &format!("http://{}/", addrs[0])])
        .output()
        .await
        .context("running curl")?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello from alice-pf\n"
    );

    // Raw TCP both ways through the free port, twice at once.
    let mut conns = vec![];
    for i in 0..2 {
        let mut s = tokio::net::TcpStream::connect(&addrs[1]).await?;
        let msg = format!("ping {i} {}\n", "x".repeat(100_000));
        s.write_all(msg.as_bytes()).await?;
        conns.push((s, msg));
    }
    for (mut s, msg) in conns {
        let mut back = vec![0u8; msg.len()];
        tokio::time::timeout(std::time::Duration::from_secs(20), s.read_exact(&mut back))
            .await
            .context("echo timed out")??;
        assert_eq!(back, msg.as_bytes());
    }
    child.kill().await?;

    // Another user: refused by the CLI (the API hides the workspace) and by the proxy itself.
    let home = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["ws", "port-forward", "alice-pf", ":8080"])
        .env("WARREN_HOME", home.path())
        .env("WARREN_URL", &stack.api_url)
        .env("WARREN_TOKEN", &mallory.token)
        .output()
        .await?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not found"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let terminal = format!(
        "http://terminal-alice-pf.{}:{}/",
        warren_testkit::DOMAIN,
        stack.proxy_addr.port()
    );
    let host = format!("terminal-alice-pf.{}", warren_testkit::DOMAIN);
    let http = reqwest::Client::builder()
        .resolve(&host, stack.proxy_addr)
        .build()?;
    let as_mallory =
        warren_client::Client::with_http(http, &stack.api_url, Some(mallory.token.clone()))?;
    match as_mallory.open_port_forward(&terminal, 8080).await {
        Err(e) => assert_eq!(e.status(), Some(404), "{e}"),
        Ok(_) => anyhow::bail!("mallory got a port-forward to alice's workspace"),
    }
    Ok(())
}
