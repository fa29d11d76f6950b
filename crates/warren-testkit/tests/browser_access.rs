//! A real browser reaching workspaces: headless Chromium signs in through the proxy and the
//! server's login page, sees the workspace's web server, opens the web terminal and runs a
//! command in it; another user signing in gets the same 404 as for a workspace that does
//! not exist. A redirect mount to the workspace brings the browser to the new host.

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_testkit::browser::Chromium;
use warren_testkit::Stack;

/// A workspace web server: one HTML page naming the workspace and the request's path.
async fn web_server(name: &'static str) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = req.split(' ').nth(1).unwrap_or("?").to_owned();
                let cookies = req
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("cookie: ")
                            .map(str::to_owned)
                    })
                    .unwrap_or_default();
                let body = format!(
                    "<html><body><h1 id=hello>Hello from {name}</h1><p id=path>{path}</p>\
                     <p id=cookies>[{cookies}]</p></body></html>"
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

async fn browser() -> Result<Option<Chromium>> {
    let b = Chromium::start().await?;
    if b.is_none() {
        if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
            panic!(
                "WARREN_REQUIRE_TOOLS is set but Chromium is not installed (.ci/setup-tools.sh)"
            );
        }
        eprintln!("skipping: Chromium is not installed (.ci/setup-tools.sh installs it)");
    }
    Ok(b)
}

#[tokio::test]
async fn a_user_signs_in_sees_the_workspace_and_uses_the_terminal_another_user_gets_404(
) -> Result<()> {
    let Some(chromium) = browser().await? else {
        return Ok(());
    };
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    stack.set_endpoint(&ws, 8080, web_server("alice-web").await?);

    // Alice opens her workspace's URL: sign-in on the server, then the workspace's page.
    let mut tab = chromium.tab().await?;
    let page = stack.url(8080, "alice-web", "/some/page?x=1");
    tab.goto(&page).await?;
    tab.sign_in(&alice).await?;
    tab.wait_until(
        "document.getElementById('hello') !== null && \
         document.getElementById('hello').innerText === 'Hello from alice-web'",
        30,
    )
    .await?;
    assert_eq!(tab.url().await?, page, "back on the page she asked for");
    assert_eq!(
        tab.eval("document.getElementById('path').innerText")
            .await?,
        "/some/page?x=1"
    );
    // The session cookie is HttpOnly and never reaches the workspace.
    let seen = tab
        .eval("document.getElementById('cookies').innerText")
        .await?;
    assert!(
        !seen.as_str().unwrap_or_default().contains("warren"),
        "the workspace saw a proxy cookie: {seen}"
    );
    assert_eq!(tab.eval("document.cookie.includes('warren')").await?, false);

    // The web terminal of the same workspace: signed in at the server already, so no form.
    tab.goto(&stack.terminal_url("alice-web", "/")).await?;
    tab.wait_until(
        "document.body && document.body.dataset.state === 'connected'",
        30,
    )
    .await?;
    tab.eval("window.warrenTerminal.input('echo warren-$((6*7))\\r'); true")
        .await?;
    let screen = "(() => { const b = window.warrenTerminal.buffer.active; let s = ''; \
                  for (let i = 0; i < b.length; i++) { s += b.getLine(i).translateToString(true) + '\\n'; } \
                  return s; })()";
    tab.wait_until(&format!("{screen}.includes('warren-42')"), 30)
        .await?;
    tab.eval("window.warrenTerminal.input('exit 3\\r'); true")
        .await?;
    tab.wait_until("document.body.dataset.state === 'exited'", 30)
        .await?;
    assert_eq!(tab.eval("document.body.dataset.exitCode").await?, "3");

    // Bob, in a browser of his own, signs in and asks for Alice's workspace: 404, exactly
    // as for a workspace that does not exist.
    let bob_browser = Chromium::start().await?.context("a second Chromium")?;
    let mut bob_tab = bob_browser.tab().await?;
    bob_tab.goto(&page).await?;
    bob_tab.sign_in(&bob).await?;
    bob_tab.wait_not_found(30).await?;
    let alices = bob_tab.text().await?;
    assert!(!alices.contains("Hello from alice-web"), "{alices}");
    bob_tab
        .goto(&stack.url(8080, "no-such-workspace", "/some/page?x=1"))
        .await?;
    bob_tab.wait_not_found(30).await?;
    let missing = bob_tab.text().await?;
    assert_eq!(
        alices, missing,
        "another user's workspace and a missing one look the same"
    );
    assert!(!alices.contains("alice"), "the 404 names nothing: {alices}");

    // Issue 21: the workspace's old name, kept as a redirect mount. Alice's browser signs in
    // on the old host (no session is made there) and lands on the same path of the new one.
    stack
        .api(
            reqwest::Method::POST,
            "/api/v1/mounts",
            &alice.token,
            Some(serde_json::json!({"name": "alice-old", "type": "redirect", "ref": "alice-web"})),
        )
        .await?;
    tab.goto(&stack.url(8080, "alice-old", "/moved?y=2"))
        .await?;
    tab.wait_until(
        "document.getElementById('path') !== null && \
         document.getElementById('path').innerText === '/moved?y=2'",
        30,
    )
    .await?;
    assert_eq!(
        tab.url().await?,
        stack.url(8080, "alice-web", "/moved?y=2"),
        "followed to the new name"
    );
    // Bob, who may not see the redirect, gets the same 404 there.
    bob_tab
        .goto(&stack.url(8080, "alice-old", "/moved?y=2"))
        .await?;
    bob_tab.wait_not_found(30).await?;
    Ok(())
}

/// Issue 41, item 4 in a real browser: Alice, on her workspace's *Ports and sharing* page in
/// the web UI, shares port 3000 with every signed-in user and makes a link for port 8080; Bob
/// signs in and reaches port 3000; a browser that never signed in opens the link and sees
/// port 8080, with the secret gone from its address bar, and nothing of port 3000.
#[tokio::test]
async fn a_port_is_shared_from_the_web_ui_and_a_link_opens_it_without_signing_in() -> Result<()> {
    let Some(chromium) = browser().await? else {
        return Ok(());
    };
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let bob = stack.user("bob").await?;
    let ws = stack.workspace(&alice, "alice-web").await?;
    stack.set_endpoint(&ws, 8080, web_server("alice-web").await?);
    stack.set_endpoint(&ws, 3000, web_server("alice-app").await?);

    let mut tab = chromium.tab().await?;
    let ports = format!("{}/workspaces/alice-web/ports", stack.api_url);
    tab.goto(&ports).await?;
    tab.sign_in(&alice).await?;
    tab.wait_until("document.getElementById('visibility-3000') !== null", 30)
        .await?;
    let row = |port: u16| {
        format!("[...document.querySelectorAll('tbody tr')].find(r => r.querySelector('th').innerText === '{port}').innerText")
    };
    let before = tab.eval(&row(3000)).await?;
    assert!(
        before.as_str().unwrap_or_default().contains("space"),
        "{before}"
    );
    tab.eval(
        "const s = document.getElementById('visibility-3000'); s.value = 'authenticated'; \
         s.form.submit(); true",
    )
    .await?;
    tab.wait_until(
        &format!(
            "document.readyState === 'complete' && ({}).includes('every signed-in user')",
            row(3000)
        ),
        30,
    )
    .await?;
    tab.eval(
        "const e = document.getElementById('expires-8080'); e.value = '3600'; e.form.submit(); true",
    )
    .await?;
    tab.wait_until("document.getElementById('share-url') !== null", 30)
        .await?;
    let link = tab
        .eval("document.getElementById('share-url').value")
        .await?
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        link.starts_with(&stack.url(8080, "alice-web", "/.warren/share?token=wrn_share_")),
        "{link}"
    );

    // Bob, signed in, reaches port 3000 now (and still not 8080).
    let bob_browser = Chromium::start().await?.context("a second Chromium")?;
    let mut bob_tab = bob_browser.tab().await?;
    bob_tab.goto(&stack.url(3000, "alice-web", "/")).await?;
    bob_tab.sign_in(&bob).await?;
    bob_tab
        .wait_until(
            "document.getElementById('hello') !== null && \
             document.getElementById('hello').innerText === 'Hello from alice-app'",
            30,
        )
        .await?;
    bob_tab.goto(&stack.url(8080, "alice-web", "/")).await?;
    bob_tab.wait_not_found(30).await?;

    // A browser that never signed in opens the link.
    let guest_browser = Chromium::start().await?.context("a third Chromium")?;
    let mut guest = guest_browser.tab().await?;
    guest.goto(&link).await?;
    guest
        .wait_until(
            "document.getElementById('hello') !== null && \
             document.getElementById('hello').innerText === 'Hello from alice-web'",
            30,
        )
        .await?;
    assert_eq!(
        guest.url().await?,
        stack.url(8080, "alice-web", "/"),
        "the secret is gone from the address bar"
    );
    let seen = guest
        .eval("document.getElementById('cookies').innerText")
        .await?;
    assert!(
        !seen.as_str().unwrap_or_default().contains("warren"),
        "the workspace saw the share cookie: {seen}"
    );
    // Nothing else: port 3000 asks it to sign in.
    guest.goto(&stack.url(3000, "alice-web", "/")).await?;
    guest
        .wait_until("document.getElementById('password') !== null", 30)
        .await?;
    Ok(())
}

/// The screen of the web terminal, as text.
const SCREEN: &str = "(() => { const b = window.warrenTerminal.buffer.active; let s = ''; \
    for (let i = 0; i < b.length; i++) { s += b.getLine(i).translateToString(true) + '\\n'; } \
    return s; })()";

/// Issue 42: two proxy replicas; the web terminal's WebSocket goes through replica A, which
/// is killed. The page reconnects by itself through replica B with the session it has — no
/// sign-in page — and the new shell runs commands.
#[tokio::test]
async fn the_web_terminal_reconnects_through_another_replica() -> Result<()> {
    let Some(chromium) = browser().await? else {
        return Ok(());
    };
    let stack = Stack::start_with(warren_testkit::StackOptions {
        ssh: false,
        proxies: 2,
        ..warren_testkit::StackOptions::default()
    })
    .await?;
    let alice = stack.user("alice").await?;
    stack.workspace(&alice, "alice-web").await?;
    let steer = &stack.proxy_balancers.as_ref().context("replicas")?.0;

    steer.prefer(Some(0));
    let mut tab = chromium.tab().await?;
    let terminal = stack.terminal_url("alice-web", "/");
    tab.goto(&terminal).await?;
    tab.sign_in(&alice).await?;
    tab.wait_until(
        "document.body && document.body.dataset.state === 'connected'",
        30,
    )
    .await?;
    tab.eval("window.warrenTerminal.input('echo first-$((6*7))\\r'); true")
        .await?;
    tab.wait_until(&format!("{SCREEN}.includes('first-42')"), 30)
        .await?;

    steer.prefer(None);
    stack.kill_proxy(0);
    tab.wait_until(
        "document.body.dataset.state === 'connected' && document.body.dataset.connections === '2'",
        30,
    )
    .await?;
    let screen = tab.eval(SCREEN).await?;
    let screen = screen.as_str().unwrap_or_default();
    assert!(
        screen.contains("[connection lost: reconnecting…]")
            && screen.contains("[reconnected: a new shell]"),
        "{screen}"
    );
    tab.eval("window.warrenTerminal.input('echo second-$((7*7))\\r'); true")
        .await?;
    tab.wait_until(&format!("{SCREEN}.includes('second-49')"), 30)
        .await?;
    assert_eq!(tab.url().await?, terminal, "no sign-in on the way");
    let taken = steer.connections();
    assert!(taken[1] > 0, "replica B took the reconnection: {taken:?}");
    Ok(())
}
