//! The web UI's workspaces page with 1,000 workspaces (issue 18's targets), in one run on
//! loopback, each figure also printed as a ratio to the JSON API listing the same 1,000
//! workspaces (the baseline, measured in the same run; goal ≤ 1.5×):
//!
//! - time to first byte of the page against the API's first page (500 items, its maximum);
//! - the page fetched whole over HTTP against the API's whole listing (both pages, parsed);
//! - the page in headless Chromium until interactive (DOMContentLoaded: HTML parsed, the
//!   deferred htmx scripts run) and until loaded, against the API's whole listing;
//! - bytes shipped: the page's HTML and its assets against the API's JSON.
//!
//! The page shows the first 100 workspaces (the rest are a "Next" link away), as the list a
//! user sees; the API's listing of all of them is the baseline the goal names.
//!
//! Workspaces run on the simulated runtime (the list's cost is the server's, not Podman's).
//! `cargo bench -p warren-testkit --bench ui` (`UI_BENCH_WORKSPACES`, default 1000;
//! `UI_BENCH_ROUNDS`, default 10; medians are printed).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use warren_testkit::bench::{self, env_or, list_workspaces, median};
use warren_testkit::browser::Chromium;
use warren_testkit::{Stack, TestUser};

/// Rows on a page of the list (the server's page size).
const PAGE_ROWS: usize = 100;

/// The value of cookie `name` set by an answer.
fn set_cookie(resp: &reqwest::Response, name: &str) -> Option<String> {
    resp.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|c| c.split(';').next()?.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| format!("{name}={v}"))
}

/// Signs `user` in to the UI; returns the `Cookie` header of the session.
async fn ui_session(http: &reqwest::Client, base: &str, user: &TestUser) -> Result<String> {
    let login = http.get(format!("{base}/login")).send().await?;
    let prelogin = set_cookie(&login, "warren_login").context("the sign-in page's cookie")?;
    let page = login.text().await?;
    let csrf = page
        .split("name=\"csrf_token\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .context("the sign-in form's token")?
        .to_owned();
    let r = http
        .post(format!("{base}/login"))
        .header(reqwest::header::COOKIE, prelogin)
        .form(&[
            ("username", user.username.as_str()),
            ("password", &user.password),
            ("csrf_token", &csrf),
        ])
        .send()
        .await?;
    if r.status() != 303 {
        bail!("signing in answered {}", r.status());
    }
    set_cookie(&r, "warren_session").context("no session cookie")
}

#[tokio::main]
async fn main() -> Result<()> {
    let count = env_or("UI_BENCH_WORKSPACES", 1000);
    let rounds = env_or("UI_BENCH_ROUNDS", 10).max(1);
    let stack = Stack::start().await?;
    let base = stack.api_url.clone();
    let user = stack.user("bench").await?;
    let http = reqwest::Client::new();

    let t = Instant::now();
    let created: Vec<Result<Value>> = futures::stream::iter(0..count)
        .map(|i| {
            let stack = &stack;
            let token = user.token.clone();
            async move {
                stack
                    .api(
                        reqwest::Method::POST,
                        "/api/v1/workspaces",
                        &token,
                        Some(json!({"name": format!("bench-{i:04}"), "devfile": warren_testkit::WEB_DEVFILE})),
                    )
                    .await
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    for c in created {
        c?;
    }
    eprintln!(
        "created {count} workspaces in {:.1} s; waiting for them to run",
        t.elapsed().as_secs_f64()
    );
    // Measure a settled list: every workspace Running.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let page = stack
            .api(
                reqwest::Method::GET,
                "/api/v1/workspaces?state=Running&limit=500",
                &user.token,
                None,
            )
            .await?;
        let mut running = page["items"].as_array().map_or(0, Vec::len);
        if page["next_cursor"].is_string() {
            let c = page["next_cursor"].as_str().unwrap_or_default();
            let more = stack
                .api(
                    reqwest::Method::GET,
                    &format!("/api/v1/workspaces?state=Running&limit=500&cursor={c}"),
                    &user.token,
                    None,
                )
                .await?;
            running += more["items"].as_array().map_or(0, Vec::len);
        }
        if running >= count.min(1000) {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {running} of {count} workspaces running after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The baseline: the JSON API.
    let (mut api_ttfb, mut api_total) = (vec![], vec![]);
    let mut api_bytes = 0;
    list_workspaces(&http, &base, &user.token).await?; // warm-up
    for _ in 0..rounds {
        let listing = list_workspaces(&http, &base, &user.token).await?;
        if listing.items != count {
            bail!("the API listed {} workspaces, not {count}", listing.items);
        }
        api_ttfb.push(bench::ms(listing.first_headers));
        api_total.push(bench::ms(listing.total));
        api_bytes = listing.bytes;
    }

    // The page over HTTP.
    let ui = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let cookie = ui_session(&ui, &base, &user).await?;
    let (mut page_ttfb, mut page_total) = (vec![], vec![]);
    let mut page_bytes = 0;
    for round in 0..=rounds {
        let start = Instant::now();
        let resp = ui
            .get(format!("{base}/"))
            .header(reqwest::header::COOKIE, &cookie)
            .send()
            .await?
            .error_for_status()?;
        let ttfb = start.elapsed().as_secs_f64() * 1e3;
        let body = resp.text().await?;
        let total = start.elapsed().as_secs_f64() * 1e3;
        let rows = body.matches("<tr id=\"ws-").count();
        if rows != count.min(PAGE_ROWS) {
            bail!("the page shows {rows} rows, not {}", count.min(PAGE_ROWS));
        }
        if round > 0 {
            page_ttfb.push(ttfb);
            page_total.push(total);
        }
        page_bytes = body.len();
    }
    let mut asset_bytes = 0;
    for asset in ["warren.css", "htmx.min.js", "sse.min.js", "warren.js"] {
        asset_bytes += ui
            .get(format!("{base}/assets/{asset}"))
            .send()
            .await?
            .bytes()
            .await?
            .len();
    }

    // The page in Chromium: navigation timing of a signed-in tab.
    let (mut b_ttfb, mut b_interactive, mut b_load) = (vec![], vec![], vec![]);
    let browser_note = match Chromium::start().await? {
        None => "Chromium not installed: browser rows skipped",
        Some(chromium) => {
            let mut tab = chromium.tab().await?;
            tab.set_viewport(1280, 800).await?;
            tab.goto(&format!("{base}/login")).await?;
            tab.wait_until("document.getElementById('password') !== null", 30)
                .await?;
            tab.eval(&format!(
                "document.getElementById('username').value = {u:?}; document.getElementById('password').value = {p:?}; \
                 document.getElementById('password').form.submit(); true",
                u = user.username,
                p = user.password
            ))
            .await?;
            tab.wait_until(
                "location.pathname === '/' && document.readyState === 'complete'",
                60,
            )
            .await?;
            for round in 0..=rounds {
                tab.goto(&format!("{base}/?r={round}")).await?;
                tab.wait_until(
                    &format!("location.search === '?r={round}' && document.readyState === 'complete' && performance.getEntriesByType('navigation')[0].loadEventEnd > 0"),
                    60,
                )
                .await?;
                let t = tab
                    .eval("(() => { const n = performance.getEntriesByType('navigation')[0]; return [n.responseStart - n.startTime, n.domContentLoadedEventEnd - n.startTime, n.loadEventEnd - n.startTime, document.querySelectorAll('#rows tr').length]; })()")
                    .await?;
                let f = |i: usize| t[i].as_f64().unwrap_or_default();
                if f(3) as usize != count.min(PAGE_ROWS) {
                    bail!("Chromium shows {} rows, not {}", f(3), count.min(PAGE_ROWS));
                }
                if round > 0 {
                    b_ttfb.push(f(0));
                    b_interactive.push(f(1));
                    b_load.push(f(2));
                }
            }
            ""
        }
    };

    let (a_ttfb, a_total) = (median(api_ttfb), median(api_total));
    println!("Web UI list page (first {} rows) with {count} workspaces, median of {rounds} rounds (baseline: the JSON API listing all {count}, in pages of 500):", count.min(PAGE_ROWS));
    println!("{:<52} {:>10} {:>8}", "figure", "ms", "ratio");
    println!(
        "{:<52} {:>10.1} {:>8}",
        "API: first page's first byte (baseline)", a_ttfb, "1.00×"
    );
    println!(
        "{:<52} {:>10.1} {:>8}",
        "API: whole listing, parsed (baseline)", a_total, "1.00×"
    );
    let row = |name: &str, v: f64, base: f64| println!("{name:<52} {v:>10.1} {:>7.2}×", v / base);
    row("page over HTTP: first byte", median(page_ttfb), a_ttfb);
    row("page over HTTP: whole", median(page_total), a_total);
    if browser_note.is_empty() {
        row("page in Chromium: first byte", median(b_ttfb), a_ttfb);
        row(
            "page in Chromium: interactive (vs whole listing)",
            median(b_interactive),
            a_total,
        );
        row(
            "page in Chromium: loaded (vs whole listing)",
            median(b_load),
            a_total,
        );
    } else {
        println!("{browser_note}");
    }
    println!("{:<52} {:>10} {:>8}", "bytes", "KiB", "ratio");
    let kib = |b: usize| b as f64 / 1024.0;
    println!(
        "{:<52} {:>10.1} {:>8}",
        "API: JSON of the whole listing (baseline)",
        kib(api_bytes),
        "1.00×"
    );
    println!(
        "{:<52} {:>10.1} {:>7.2}×",
        "page: HTML",
        kib(page_bytes),
        page_bytes as f64 / api_bytes as f64
    );
    println!(
        "{:<52} {:>10.1} {:>8}",
        "page: CSS and scripts (cached after the first visit)",
        kib(asset_bytes),
        ""
    );
    Ok(())
}
