//! Issue 18's "done when", on Podman in headless Chromium: a new user runs `warren up`,
//! opens the URL it prints, signs in (keyboard only) with the printed password, and without
//! the CLI creates a workspace from a pasted devfile (a bad one first: its error beside the
//! field), watches its row reach Running without a reload, opens its endpoint (no second
//! sign-in) and its terminal, reads and follows its logs, stops and starts it through the
//! confirmation page, makes a token, and deletes it. Another user gets 404 for the
//! workspace's page and the admin pages; a form without its CSRF token is refused; script
//! in a devfile or a variable renders as text. Screenshots of each page are kept in
//! `$CARGO_TARGET_TMPDIR/ui-screenshots`.
//!
//! Skips with a notice without Podman or Chromium (fails under `WARREN_REQUIRE_ENGINE=1`).

use crate::support;

use serde_json::Value;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::{
    api, containers, create_user, ensure_image, podman_available, wait_for, Up, WEB_DEVFILE,
};
use warren_testkit::browser::{Chromium, Tab};

/// A devfile whose component name carries script; the error quoting it must stay text.
const BAD_DEVFILE: &str = "schemaVersion: 2.2.0\ncomponents:\n  - name: \"<script>window.__xss='devfile'</script>\"\n    container:\n      image: localhost/warren-test:latest\n";
/// A variable value with script in two forms.
const XSS_VALUE: &str =
    "<script>window.__xss='variable'</script><img src=x onerror=\"window.__xss='img'\">";

fn shots() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots")
}

/// Keeps a screenshot of the page, after checking what every page must have: a label for
/// every control, a main landmark, one heading, and nothing wider than the window.
async fn shot(tab: &mut Tab, name: &str) {
    let unlabelled = tab
        .eval(
            "[...document.querySelectorAll('input:not([type=hidden]), select, textarea')] \
             .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')) \
             .map(e => e.outerHTML).join('\\n')",
        )
        .await
        .expect("labels");
    assert_eq!(unlabelled, "", "{name}: controls without a label");
    assert_eq!(
        tab.eval("document.querySelectorAll('main h1').length === 1 && document.querySelector('main') !== null")
            .await
            .expect("landmarks"),
        true,
        "{name}: one main landmark with one heading"
    );
    assert_eq!(
        tab.eval("document.documentElement.scrollWidth <= window.innerWidth")
            .await
            .expect("width"),
        true,
        "{name}: wider than the window"
    );
    tab.screenshot(&shots().join(format!("{name}.png")))
        .await
        .expect("screenshot");
}

/// Sets a form control's value as typing would.
async fn fill(tab: &mut Tab, selector: &str, value: &str) {
    let js = format!(
        "(() => {{ const e = document.querySelector({selector:?}); e.value = {value:?}; \
         e.dispatchEvent(new Event('input', {{bubbles: true}})); return true; }})()",
        value = value
    );
    tab.eval(&js)
        .await
        .unwrap_or_else(|e| panic!("fill {selector}: {e}"));
}

async fn click(tab: &mut Tab, selector: &str) {
    let js = format!("(() => {{ document.querySelector({selector:?}).click(); return true; }})()");
    tab.eval(&js)
        .await
        .unwrap_or_else(|e| panic!("click {selector}: {e}"));
}

/// Waits until the page at `path` has loaded.
async fn at(tab: &mut Tab, path: &str) {
    tab.wait_until(
        &format!("location.pathname === {path:?} && document.readyState === 'complete'"),
        60,
    )
    .await
    .unwrap_or_else(|e| panic!("page {path}: {e}"));
}

async fn text(tab: &mut Tab) -> String {
    tab.text().await.expect("page text")
}

fn state_is(state: &str) -> String {
    format!("document.querySelector('#live [data-state]')?.dataset.state === {state:?}")
}

#[test]
fn a_new_user_creates_opens_stops_and_deletes_a_workspace_in_the_browser() {
    if !podman_available() || !support::chromium_available() {
        return;
    }
    ensure_image();
    let mut up = Up::start();
    let (url, password) = up.web_ui_and_password();
    let base = url.trim_end_matches('/').to_owned();
    let admin_token = up.admin_token();
    let name = support::unique_name("ui");
    up.workspace = Some(name.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::new();
        let chromium = Chromium::start().await.expect("Chromium").expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        tab.set_viewport(1280, 800).await.expect("viewport");
        // Network events (event-stream messages among them) are kept for a failure's report.
        tab.call("Network.enable", serde_json::json!({})).await.expect("network events");

        // The printed URL sends a stranger to sign in; the username field has the focus, so
        // the keyboard alone signs in.
        tab.goto(&url).await.expect("open the printed URL");
        tab.wait_until(
            "location.pathname === '/login' && document.activeElement?.id === 'username'",
            30,
        )
        .await
        .expect("the sign-in page, username focused");
        shot(&mut tab, "sign-in").await;
        tab.type_text("admin").await.expect("type");
        tab.press("Tab").await.expect("tab");
        tab.type_text(&password).await.expect("type");
        tab.press("Enter").await.expect("enter");
        at(&mut tab, "/").await;
        let t = text(&mut tab).await;
        assert!(t.contains("No workspaces yet"), "empty state: {t}");
        shot(&mut tab, "workspaces-empty").await;
        // The first Tab reaches the skip link, then the navigation.
        tab.press("Tab").await.expect("tab");
        assert_eq!(
            tab.eval("document.activeElement.innerText").await.expect("focus"),
            "Skip to content"
        );

        // A bad devfile: the error beside the field, the script in it as text.
        tab.goto(&format!("{base}/workspaces/new")).await.expect("new");
        at(&mut tab, "/workspaces/new").await;
        fill(&mut tab, "#name", &name).await;
        fill(&mut tab, "#devfile", BAD_DEVFILE).await;
        click(&mut tab, "form.card button[type=submit]").await;
        tab.wait_until("document.getElementById('devfile-error') !== null", 30)
            .await
            .expect("the devfile's error beside its field");
        let err = tab
            .eval("document.getElementById('devfile-error').innerText")
            .await
            .expect("error text");
        assert!(err.as_str().is_some_and(|e| e.contains("devfile has")), "{err}");
        assert_eq!(
            tab.eval("document.getElementById('devfile').getAttribute('aria-invalid')")
                .await
                .expect("aria"),
            "true"
        );
        assert_eq!(tab.eval("window.__xss === undefined").await.expect("xss"), true);
        assert_eq!(
            tab.eval("document.getElementById('devfile').value").await.expect("kept"),
            BAD_DEVFILE,
            "the devfile is kept for fixing"
        );
        shot(&mut tab, "create-error").await;

        // The good one, with a variable carrying script.
        fill(&mut tab, "#devfile", WEB_DEVFILE).await;
        fill(&mut tab, "#variables", &format!("GREETING={XSS_VALUE}")).await;
        click(&mut tab, "form.card button[type=submit]").await;
        at(&mut tab, &format!("/workspaces/{name}")).await;
        shot(&mut tab, "workspace-starting").await;

        // The list follows the workspace to Running with no reload.
        tab.goto(&url).await.expect("list");
        at(&mut tab, "/").await;
        tab.eval("window.__samePage = 'yes'; true").await.expect("mark");
        // The workspace's own run first (the engine's part), then the row (the UI's part),
        // so a failure says which of the two did not happen.
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let w = api(&http, &base, Some(&admin_token), reqwest::Method::GET, &format!("/workspaces/{name}"), None).await;
            if w["actual_state"] == "Running" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the workspace never ran: {w}\npodman: {}\n{}",
                support::podman(&["ps", "-a", "--format", "{{.Names}} {{.Status}}"]),
                up.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let row = format!("document.getElementById('rows').querySelector('[data-state=Running]') !== null && document.getElementById('rows').innerText.includes({name:?})");
        if let Err(e) = tab.wait_until(&row, 15).await {
            let streams: Vec<String> = tab
                .events
                .iter()
                .filter(|e| e["method"].as_str().is_some_and(|m| m.starts_with("Network.eventSource") || m == "Network.loadingFailed"))
                .map(|e| e.to_string())
                .collect();
            panic!("the workspace runs but its row never showed it: {e}\nevent-stream events: {streams:#?}\n{}", up.log());
        }
        assert_eq!(
            tab.eval("window.__samePage").await.expect("marker"),
            "yes",
            "the list updated without reloading"
        );
        shot(&mut tab, "workspaces-running").await;
        tab.set_viewport(390, 844).await.expect("phone");
        shot(&mut tab, "workspaces-phone").await;
        tab.goto(&format!("{base}/workspaces/{name}")).await.expect("page");
        at(&mut tab, &format!("/workspaces/{name}")).await;
        shot(&mut tab, "workspace-phone").await;
        tab.goto(&format!("{base}/workspaces/new")).await.expect("new");
        at(&mut tab, "/workspaces/new").await;
        shot(&mut tab, "create-phone").await;
        tab.set_viewport(1280, 800).await.expect("viewport");

        // Going back and forth between live pages many times keeps working: a page left
        // behind must not keep its event stream (six would block the browser's requests).
        for i in 0..8 {
            let path = if i % 2 == 0 { format!("/workspaces/{name}") } else { "/".to_owned() };
            tab.goto(&format!("{base}{path}")).await.expect("navigate");
            at(&mut tab, &path).await;
        }

        // The page says how its startup went and why the busybox image has no editor, as
        // `warren ws show` does.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            tab.goto(&format!("{base}/workspaces/{name}")).await.expect("page");
            at(&mut tab, &format!("/workspaces/{name}")).await;
            let t = text(&mut tab).await;
            if t.contains("Editor: editor not started: its Node.js cannot run") && t.contains("Startup: done") {
                break;
            }
            assert!(Instant::now() < deadline, "no editor or startup status on the page: {t}");
        }

        // Its page: the variable's script is text.
        tab.goto(&format!("{base}/workspaces/{name}")).await.expect("page");
        at(&mut tab, &format!("/workspaces/{name}")).await;
        assert_eq!(tab.eval("window.__xss === undefined").await.expect("xss"), true);
        assert!(text(&mut tab).await.contains(XSS_VALUE), "the variable shows as text");
        shot(&mut tab, "workspace-running").await;
        let endpoint = tab
            .eval("[...document.querySelectorAll('ul.endpoints a')].find(a => a.innerText === 'web')?.href ?? ''")
            .await
            .expect("endpoint link");
        let endpoint = endpoint.as_str().expect("href").to_owned();
        assert!(endpoint.starts_with(&format!("http://8080-{name}.")), "{endpoint}");
        let terminal = tab
            .eval("[...document.querySelectorAll('a')].find(a => a.innerText === 'Open terminal')?.href ?? ''")
            .await
            .expect("terminal link");
        let terminal = terminal.as_str().expect("href").to_owned();
        assert!(!terminal.is_empty(), "an Open terminal link");

        // The endpoint, with the UI's session: no second sign-in.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            tab.goto(&endpoint).await.expect("open the endpoint");
            if tab
                .wait_until("document.body && document.body.innerText.includes('served-by-workspace')", 5)
                .await
                .is_ok()
            {
                break;
            }
            assert!(Instant::now() < deadline, "no page from the endpoint:\n{}", up.log());
        }

        // The terminal: a real shell in the container.
        support::terminal_shows(&mut tab, &terminal, "echo ui-$((6*7))\r", "screen.includes('ui-42')").await;

        // Logs: the last lines, then followed.
        tab.goto(&format!("{base}/workspaces/{name}/logs")).await.expect("logs");
        at(&mut tab, &format!("/workspaces/{name}/logs")).await;
        tab.wait_until("document.getElementById('logs')?.innerText.includes('warren:')", 30)
            .await
            .expect("the startup script's lines");
        tab.goto(&format!("{base}/workspaces/{name}/logs?follow=true"))
            .await
            .expect("follow");
        tab.wait_until("document.getElementById('logs')?.innerText.includes('warren:')", 30)
            .await
            .expect("followed output");
        shot(&mut tab, "logs").await;

        // A form without its CSRF token, or with a forged one, is refused; nothing changes.
        for body in ["", "csrf_token=forged"] {
            let status = tab
                .eval(&format!(
                    "fetch('/workspaces/{name}/action/stop', {{method: 'POST', headers: \
                     {{'content-type': 'application/x-www-form-urlencoded'}}, body: {body:?}, \
                     redirect: 'manual'}}).then(r => r.status)"
                ))
                .await
                .expect("fetch");
            assert_eq!(status, 403, "body {body:?}");
        }
        let w = api(&http, &base, Some(&admin_token), reqwest::Method::GET, &format!("/workspaces/{name}"), None).await;
        assert_eq!(w["desired_state"], "Running", "{w}");

        // Stop, through its confirmation page; the page follows the state live.
        tab.goto(&format!("{base}/workspaces/{name}")).await.expect("page");
        at(&mut tab, &format!("/workspaces/{name}")).await;
        click(&mut tab, "a[href$='/confirm/stop']").await;
        at(&mut tab, &format!("/workspaces/{name}/confirm/stop")).await;
        shot(&mut tab, "confirm-stop").await;
        click(&mut tab, "form.card button[type=submit]").await;
        at(&mut tab, &format!("/workspaces/{name}")).await;
        tab.eval("window.__samePage = 'yes'; true").await.expect("mark");
        tab.wait_until(&state_is("Stopped"), 120)
            .await
            .unwrap_or_else(|e| panic!("never Stopped: {e}\n{}", up.log()));
        assert_eq!(tab.eval("window.__samePage").await.expect("marker"), "yes");
        shot(&mut tab, "workspace-stopped").await;
        click(&mut tab, "form[action$='/action/start'] button").await;
        at(&mut tab, &format!("/workspaces/{name}")).await;
        tab.wait_until(&state_is("Running"), 240)
            .await
            .unwrap_or_else(|e| panic!("never Running again: {e}\n{}", up.log()));

        // Another user sees neither the workspace nor the admin pages.
        let (bob_password, _) = create_user(&http, &base, &admin_token, "bob").await;
        let bobs = Chromium::start().await.expect("Chromium").expect("installed");
        let mut bob = bobs.tab().await.expect("tab");
        bob.goto(&format!("{base}/workspaces/{name}")).await.expect("open");
        support::sign_in(&mut bob, "bob", &bob_password).await;
        bob.wait_until("document.readyState === 'complete' && location.pathname.startsWith('/workspaces/')", 30)
            .await
            .expect("back at the asked page");
        assert_eq!(bob.status().await.expect("status"), 404);
        assert!(text(&mut bob).await.contains("Not found"));
        for path in ["/admin", &format!("/workspaces/{name}/logs"), &format!("/workspaces/{name}/confirm/delete")] {
            bob.goto(&format!("{base}{path}")).await.expect("open");
            bob.wait_until("document.readyState === 'complete'", 30).await.expect("load");
            assert_eq!(bob.status().await.expect("status"), 404, "{path}");
        }
        bob.goto(&url).await.expect("list");
        at(&mut bob, "/").await;
        assert!(!text(&mut bob).await.contains(&name), "bob's list shows alice's workspace");
        // Bob's own forms cannot act on the workspace either.
        let csrf = bob
            .eval("document.querySelector('input[name=csrf_token]').value")
            .await
            .expect("bob's token");
        let status = bob
            .eval(&format!(
                "fetch('/workspaces/{name}/action/delete', {{method: 'POST', headers: \
                 {{'content-type': 'application/x-www-form-urlencoded'}}, body: 'csrf_token=' + {csrf}, \
                 redirect: 'manual'}}).then(r => r.status)"
            ))
            .await
            .expect("fetch");
        assert_eq!(status, 404);

        // The account: a token shown once.
        tab.goto(&format!("{base}/account")).await.expect("account");
        at(&mut tab, "/account").await;
        fill(&mut tab, "#token_name", "laptop").await;
        click(&mut tab, "form[action='/account/tokens'] button[type=submit]").await;
        tab.wait_until("document.getElementById('new-token') !== null", 30)
            .await
            .expect("the new token");
        let secret = tab
            .eval("document.getElementById('new-token').value")
            .await
            .expect("secret");
        assert!(secret.as_str().is_some_and(|s| s.starts_with("wrn_pat_")), "{secret}");
        let me = http
            .get(format!("{base}/api/v1/users/me"))
            .bearer_auth(secret.as_str().unwrap_or_default())
            .send()
            .await
            .expect("me");
        assert_eq!(me.status(), 200, "the token works");
        shot(&mut tab, "account").await;
        tab.goto(&format!("{base}/admin")).await.expect("admin");
        at(&mut tab, "/admin").await;
        assert_eq!(
            tab.eval("document.querySelector('[aria-labelledby=agents-h] .state.running')?.innerText ?? ''")
                .await
                .expect("agent state"),
            "connected"
        );
        shot(&mut tab, "admin").await;

        // Delete, confirmed; the list drops the row by itself.
        tab.goto(&format!("{base}/workspaces/{name}/confirm/delete")).await.expect("confirm");
        at(&mut tab, &format!("/workspaces/{name}/confirm/delete")).await;
        click(&mut tab, "form.card button[type=submit]").await;
        at(&mut tab, "/").await;
        tab.wait_until(
            &format!("!document.getElementById('rows').innerText.includes({name:?})"),
            120,
        )
        .await
        .unwrap_or_else(|e| panic!("the row never left: {e}\n{}", up.log()));
        let w: Value = api(&http, &base, Some(&admin_token), reqwest::Method::GET, &format!("/workspaces/{name}"), None).await;
        assert_eq!(w["actual_state"], "Terminated", "{w}");
    });
    wait_for(
        "the workspace's containers removed",
        Duration::from_secs(60),
        || containers(&name).is_empty().then_some(()),
        || up.log(),
    );
}
