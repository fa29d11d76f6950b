//! What a `proxy` mount costs (issue 21's figures), in one run on loopback, each figure also
//! printed as a ratio to a baseline measured in the same run:
//!
//! - HTTP requests/s (32 keep-alive connections) and latency p50/p99 (one idle connection)
//!   for the same upstream reached directly (the baseline), as a workspace endpoint through
//!   proxy → relay → agent, as a `proxy` mount to its URL through that agent, and as a port a
//!   connector (`warren connect`, in process) serves. Requests carry a personal access token.
//! - A connector's time from start to `Ready` (its mount's status through the API), against
//!   the same relay connection alone reaching "connected".
//!
//! `cargo bench -p warren-testkit --bench mounts` (`MOUNTS_BENCH_SECS` per load run, default
//! 3). `ws tree` on 10,000 entries is `--bench tree`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use anyhow::{bail, Result};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use warren_agent::connection::{ConnectionConfig, RelayConnection};
use warren_agent::connector::ConnectorConfig;
use warren_agent::runtime::host::{HostConfig, HostRuntime};
use warren_testkit::Stack;

#[path = "support/load.rs"]
mod load;
use load::{devfile, line, measure, ms, upstream, wait_ok};

/// Polls mount `name` until its phase is `want`; how long that took.
async fn until_phase(stack: &Stack, token: &str, name: &str, want: &str) -> Result<Duration> {
    let start = Instant::now();
    loop {
        let m = stack
            .api(
                reqwest::Method::GET,
                &format!("/api/v1/mounts/{name}"),
                token,
                None,
            )
            .await?;
        if m["status"]["phase"] == want {
            return Ok(start.elapsed());
        }
        if start.elapsed() > Duration::from_secs(60) {
            bail!("mount {name} never {want}: {m}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn main() -> Result<()> {
    warren_testkit::bench::block_on(run())
}

async fn run() -> Result<()> {
    let secs: u64 = warren_testkit::bench::env_or("MOUNTS_BENCH_SECS", 3);
    let up = upstream().await?;
    let port = up.port();
    let stack = Stack::start().await?;
    let admin = stack.admin.token.clone();
    let user = stack.user("bench").await?;
    let ws = stack.workspace_from(&user, "bench", &devfile(port)).await?;
    stack.set_endpoint(&ws, port, up);
    stack
        .api(
            reqwest::Method::POST,
            "/api/v1/spaces",
            &admin,
            Some(json!({"path": "lab"})),
        )
        .await?;
    stack
        .api(
            reqwest::Method::PUT,
            "/api/v1/spaces/lab/members/bench",
            &admin,
            Some(json!({"role": "developer"})),
        )
        .await?;
    stack
        .api(
            reqwest::Method::POST,
            "/api/v1/mounts",
            &admin,
            Some(json!({"name": "site", "type": "proxy", "url": format!("http://{up}/"), "via": "local", "space": "lab"})),
        )
        .await?;
    let created = stack
        .api(
            reqwest::Method::POST,
            "/api/v1/mounts",
            &user.token,
            Some(json!({"name": "machine", "type": "proxy", "connector": true, "space": "lab"})),
        )
        .await?;
    let token = created["connector_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let relay: url::Url = stack.relay_agents_url().parse()?;

    // The baseline: the connector's relay connection alone, until connected.
    let stop = CancellationToken::new();
    let runtime = Arc::new(HostRuntime::new(HostConfig {
        mount: "machine".into(),
        ports: vec![port],
    }));
    let alone = RelayConnection::new(ConnectionConfig::new(relay.clone(), token.clone()), runtime)?;
    let start = Instant::now();
    let task = tokio::spawn({
        let (alone, stop) = (alone.clone(), stop.clone());
        async move { alone.run(stop).await }
    });
    while !alone.is_connected() {
        if start.elapsed() > Duration::from_secs(30) {
            bail!("the relay connection never came up");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let connected = start.elapsed();
    stop.cancel();
    task.await?;

    // The connector itself, until its mount is Ready.
    let shutdown = CancellationToken::new();
    let start = Instant::now();
    let connector = tokio::spawn(warren_agent::connector::run(
        ConnectorConfig {
            connection: ConnectionConfig::new(relay, token),
            mount: "machine".into(),
            ports: vec![port],
        },
        shutdown.clone(),
    ));
    until_phase(&stack, &user.token, "machine", "Ready").await?;
    let ready = start.elapsed();
    until_phase(&stack, &user.token, "site", "Ready").await?;

    let ws_host = stack.host(port, "bench");
    let site_host = stack.host(port, "site");
    let machine_host = stack.host(port, "machine");
    let up_host = up.to_string();
    wait_ok(up, &up_host, None).await?;
    for h in [&ws_host, &site_host, &machine_host] {
        wait_ok(stack.proxy_addr, h, Some(&user.token)).await?;
    }
    let base = measure(up, &up_host, None, secs).await?;
    let ws_f = measure(stack.proxy_addr, &ws_host, Some(&user.token), secs).await?;
    let site_f = measure(stack.proxy_addr, &site_host, Some(&user.token), secs).await?;
    let machine_f = measure(stack.proxy_addr, &machine_host, Some(&user.token), secs).await?;

    println!(
        "mounts bench: GET / ({} B body), {} connections for {secs} s per row; latency on one idle connection",
        load::BODY.len(),
        load::CONNECTIONS
    );
    line("upstream directly (base)", &base, &base);
    line("workspace endpoint", &ws_f, &base);
    line("proxy mount (URL via agent)", &site_f, &base);
    line("connector", &machine_f, &base);
    println!(
        "proxy mount: p50 added {:.3} ms, requests/s {:.2}× the workspace path; connector: p50 added {:.3} ms, requests/s {:.2}× the workspace path",
        ms(site_f.p50) - ms(base.p50),
        site_f.rps / ws_f.rps,
        ms(machine_f.p50) - ms(base.p50),
        machine_f.rps / ws_f.rps,
    );
    println!(
        "connector start → Ready: {:.1} ms; its relay connection alone: {:.1} ms ({:.2}×)",
        ms(ready),
        ms(connected),
        ready.as_secs_f64() / connected.as_secs_f64()
    );
    shutdown.cancel();
    connector.await??;
    Ok(())
}
