//! `warren ws tree` on a big tree (issue 21's goal: 10,000 entries in 5 levels, < 100 ms of
//! server time), in one run on loopback. The figure is `GET /api/v1/tree` from the request
//! to the answer's last byte (server time plus loopback transfer, so an upper bound on the
//! server's part; the client's JSON parsing is left out), printed against the goal and as a
//! ratio to the baseline measured in the same run, the same way:
//! the JSON API listing the same entries the way a client must without the tree (every page
//! of `GET /api/v1/workspaces?limit=500`).
//!
//! The tree: `acme` → 4 teams → 4 groups each → 4 squads each → 4 units each (341 spaces, 5
//! levels), the workspaces spread over the 256 units, all created by a user who owns `acme`
//! and seen by a developer of one team (a quarter) and by that owner (all). Workspaces are
//! created on the simulated runtime; the relay is stopped before measuring, so the server is
//! not also reconciling 10,000 workspaces with the agent while it answers. `cargo bench -p warren-testkit --bench tree` (`TREE_BENCH_ENTRIES`,
//! default 10000; `TREE_BENCH_ROUNDS`, default 10; medians are printed).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use anyhow::{bail, Context, Result};
use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Instant;
use warren_testkit::bench::{self, env_or, list_workspaces, median};
use warren_testkit::Stack;

const FANOUT: usize = 4;

/// The whole tree the caller sees: (milliseconds, entries, spaces).
async fn tree(http: &reqwest::Client, base: &str, token: &str) -> Result<(f64, usize, usize)> {
    let start = Instant::now();
    let body = http
        .get(format!("{base}/api/v1/tree"))
        .bearer_auth(token)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    let t: Value = serde_json::from_slice(&body)?;
    if t["truncated"] == true {
        bail!("the tree was truncated");
    }
    let spaces = t["spaces"].as_array().context("spaces")?;
    let entries = spaces
        .iter()
        .map(|s| s["entries"].as_array().map_or(0, Vec::len))
        .sum();
    Ok((ms, entries, spaces.len()))
}

#[tokio::main]
async fn main() -> Result<()> {
    // The stack's own log, at `RUST_LOG` (default: errors only), on stderr.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("error")),
        )
        .with_writer(std::io::stderr)
        .init();
    let count = env_or("TREE_BENCH_ENTRIES", 10_000);
    let rounds = env_or("TREE_BENCH_ROUNDS", 10).max(1);
    let stack = Stack::start().await?;
    let base = stack.api_url.clone();
    let admin = stack.admin.token.clone();
    let owner = stack.user("olga").await?;
    let dev = stack.user("dev").await?;
    let http = reqwest::Client::new();
    let post = reqwest::Method::POST;
    let put = reqwest::Method::PUT;

    stack
        .api(
            post.clone(),
            "/api/v1/spaces",
            &admin,
            Some(json!({"path": "acme"})),
        )
        .await?;
    stack
        .api(
            put.clone(),
            "/api/v1/spaces/acme/members/olga",
            &admin,
            Some(json!({"role": "owner"})),
        )
        .await?;
    let mut level = vec!["acme".to_owned()];
    let mut leaves = vec![];
    let mut spaces = 1;
    for name in ["team", "group", "squad", "unit"] {
        let mut next = vec![];
        for parent in &level {
            for i in 0..FANOUT {
                let path = format!("{parent}/{name}-{i}");
                stack
                    .api(
                        post.clone(),
                        "/api/v1/spaces",
                        &owner.token,
                        Some(json!({"path": path})),
                    )
                    .await?;
                next.push(path);
                spaces += 1;
            }
        }
        leaves.clone_from(&next);
        level = next;
    }
    stack
        .api(
            put.clone(),
            "/api/v1/spaces/acme%2Fteam-0/members/dev",
            &owner.token,
            Some(json!({"role": "developer"})),
        )
        .await?;

    let t = Instant::now();
    let created: Vec<Result<Value>> = futures::stream::iter(0..count)
        .map(|i| {
            let stack = &stack;
            let token = owner.token.clone();
            let space = leaves[i % leaves.len()].clone();
            async move {
                stack
                    .api(
                        reqwest::Method::POST,
                        "/api/v1/workspaces",
                        &token,
                        Some(json!({"name": format!("t-{i:05}"), "space": space,
                                    "devfile": warren_testkit::WEB_DEVFILE})),
                    )
                    .await
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    for c in created {
        c?;
    }
    eprintln!(
        "created {spaces} spaces and {count} workspaces in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // Measure the server answering the tree, not the server busy reconciling 10,000
    // workspaces with the agent meanwhile: the relay goes, the agent with it.
    stack.stop_relay(0);
    // The first team holds the first quarter of the units (leaves are made team by team).
    let per_team = leaves.len() / FANOUT;
    let in_team = (0..count).filter(|i| i % leaves.len() < per_team).count();
    for (who, token, want) in [
        ("owner of acme (all)", &owner.token, count),
        ("developer of one team", &dev.token, in_team),
    ] {
        list_workspaces(&http, &base, token).await?; // warm-up
        tree(&http, &base, token).await?;
        let (mut base_ms, mut tree_ms) = (vec![], vec![]);
        let mut shape = (0, 0);
        for _ in 0..rounds {
            let listing = list_workspaces(&http, &base, token).await?;
            // Until each page's last byte: the client's parsing is not the server's time.
            let (ms, items) = (bench::ms(listing.fetching), listing.items);
            if items != want {
                bail!("{who}: the list held {items} workspaces, not {want}");
            }
            base_ms.push(ms);
            let (ms, entries, spaces) = tree(&http, &base, token).await?;
            if entries != items {
                bail!("{who}: the tree held {entries} entries, the list {items}");
            }
            tree_ms.push(ms);
            shape = (entries, spaces);
        }
        let (b, t) = (median(base_ms), median(tree_ms));
        println!(
            "{who}: ws tree ({} entries in {} spaces, 5 levels) {t:.1} ms (goal < 100 ms: {}) \
             — {:.2}x the API listing the same entries page by page ({b:.1} ms)",
            shape.0,
            shape.1,
            if t < 100.0 { "met" } else { "NOT met" },
            t / b
        );
    }
    Ok(())
}
