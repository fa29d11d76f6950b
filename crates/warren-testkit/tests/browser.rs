//! The Chromium driver itself: a page on a `*.localhost` name loads, scripts run, a form
//! posts and the answer is read back.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_testkit::browser::Chromium;

/// Answers every request with a page that shows the request line.
async fn page_server() -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let line = req.lines().next().unwrap_or_default().to_owned();
                let host = req
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("Host: ")
                            .or_else(|| l.strip_prefix("host: "))
                    })
                    .unwrap_or_default()
                    .to_owned();
                let body = format!(
                    "<html><body><p id=line>{line}</p><p id=host>{host}</p>\
                     <form method=post action=/posted><input name=x value=1></form></body></html>"
                );
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

#[tokio::test]
async fn chromium_loads_a_localhost_subdomain_runs_scripts_and_posts_forms() -> anyhow::Result<()> {
    let Some(browser) = Chromium::start().await? else {
        if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
            panic!(
                "WARREN_REQUIRE_TOOLS is set but Chromium is not installed (.ci/setup-tools.sh)"
            );
        }
        eprintln!("skipping: Chromium is not installed (.ci/setup-tools.sh installs it)");
        return Ok(());
    };
    let addr = page_server().await?;
    let mut tab = browser.tab().await?;
    tab.goto(&format!(
        "http://8080-some-ws.ws.localhost:{}/hello",
        addr.port()
    ))
    .await?;
    tab.wait_until("document.getElementById('line') !== null", 30)
        .await?;
    assert_eq!(
        tab.eval("document.getElementById('line').innerText")
            .await?,
        "GET /hello HTTP/1.1"
    );
    assert_eq!(
        tab.eval("document.getElementById('host').innerText")
            .await?,
        format!("8080-some-ws.ws.localhost:{}", addr.port()).as_str()
    );
    tab.eval("document.forms[0].submit()").await?;
    tab.wait_until("location.pathname === '/posted'", 30)
        .await?;
    assert!(tab.text().await?.contains("POST /posted HTTP/1.1"));
    Ok(())
}
