//! What reaching a workspace costs (issue 5's targets), in one run on loopback, each figure
//! also printed as a ratio to a baseline measured in the same run:
//!
//! - HTTP requests/s (32 keep-alive connections) and latency p50/p99 (one connection, no
//!   load) for: the upstream hit directly (baseline), nginx as a reverse proxy to the same
//!   upstream (when `nginx` is installed), the proxy's direct mode, and the full path
//!   proxy → relay → agent → workspace. Requests carry a personal access token, so every
//!   one goes through authentication and the authorisation cache.
//! - WebSocket echo round trip through the full path against the upstream directly.
//! - Proxy replicas (issue 42): requests/s of two replicas (direct mode) behind one TCP
//!   balancer against one replica behind the same balancer, and a kill of one replica under
//!   load: failed requests against the connections it held.
//! - Regional proxies (issue 42): the p50 of a request to a workspace through its region's
//!   proxy and through the central proxy, against the round trip within the region, with
//!   distance added by user-space latency links (this machine's kernel has no `netem`).
//! - Bulk upload throughput through a relay tunnel against direct TCP is in
//!   `cargo bench -p warren-relay --bench tunnel`.
//!
//! `cargo bench -p warren-testkit --bench access` (`ACCESS_BENCH_SECS` per load run, default 3;
//! `ACCESS_BENCH_ROUNDS` rounds of the wrk rows, default 3; `ACCESS_BENCH_ONLY=regions` runs
//! the regional section alone, `ACCESS_BENCH_ONLY=wrk` the wrk rows alone, e.g. under a
//! profiler).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use anyhow::{bail, Context, Result};
use futures::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use warren_testkit::{ProxyAt, Stack, StackOptions, TestUser};

#[path = "support/load.rs"]
mod load;
use load::{devfile, line, measure, ms, upstream, wait_ok, Conn, BODY, CONNECTIONS};

/// WebSocket echo round trips (p50, p99) of 1 KiB binary messages.
async fn ws_rtt(addr: SocketAddr, host: &str, token: Option<&str>) -> Result<(Duration, Duration)> {
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://{host}/ws"),
    )?;
    if let Some(t) = token {
        req.headers_mut()
            .insert("authorization", format!("Bearer {t}").parse()?);
    }
    let sock = TcpStream::connect(addr).await?;
    sock.set_nodelay(true)?;
    let (mut ws, _) = tokio_tungstenite::client_async(req, sock)
        .await
        .context("websocket handshake")?;
    let msg = vec![0x42u8; 1024];
    let mut samples = vec![];
    for i in 0..2200 {
        let t = Instant::now();
        ws.send(tokio_tungstenite::tungstenite::Message::binary(msg.clone()))
            .await?;
        let back = ws.next().await.context("echo closed")??;
        if back.into_data().len() != msg.len() {
            bail!("echo returned a different message");
        }
        if i >= 200 {
            samples.push(t.elapsed());
        }
    }
    samples.sort();
    Ok((
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    ))
}

/// Requests/s measured by `wrk` (when installed) in a process of its own, so the load
/// generator does not share the measured process's runtime and cores the way the in-process
/// one does (nginx always runs apart; the proxy here shares its process with the whole stack).
fn wrk(addr: SocketAddr, host: &str, token: Option<&str>, secs: u64) -> Result<Option<f64>> {
    let mut cmd = std::process::Command::new("wrk");
    cmd.args(["-t1", &format!("-c{CONNECTIONS}"), &format!("-d{secs}s")])
        .arg("-H")
        .arg(format!("Host: {host}"));
    if let Some(t) = token {
        cmd.arg("-H").arg(format!("Authorization: Bearer {t}"));
    }
    let out = match cmd.arg(format!("http://{addr}/")).output() {
        Ok(o) => o,
        Err(_) => return Ok(None),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("Non-2xx") {
        bail!("wrk saw error answers from {host}: {text}");
    }
    let rps = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .with_context(|| format!("no Requests/sec in wrk's output: {text}"))?;
    Ok(Some(rps))
}

/// nginx as a reverse proxy with upstream keep-alive, on a port of its own; `None` when
/// nginx is not installed. One process (`master_process off`), so killing it leaves no
/// worker behind.
struct Nginx {
    child: std::process::Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx(upstream: SocketAddr) -> Result<Option<Nginx>> {
    let bin = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists());
    let Some(bin) = bin else { return Ok(None) };
    // nginx binds by itself: take a free port from the kernel and hand it over.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let dir = tempfile::tempdir()?;
    let conf = format!(
        "master_process off; worker_processes 1; daemon off; pid {d}/nginx.pid; error_log {d}/error.log;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
  upstream ws {{ server {upstream}; keepalive 64; }}
  keepalive_requests 1000000; keepalive_timeout 300s;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://ws; proxy_http_version 1.1;
      proxy_set_header Connection \"\"; proxy_set_header Host $host;
      proxy_set_header X-Forwarded-For $remote_addr;
    }}
  }}
}}
",
        d = dir.path().display()
    );
    std::fs::write(dir.path().join("nginx.conf"), conf)?;
    let child = std::process::Command::new(bin)
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .arg("-p")
        .arg(dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .context("starting nginx")?;
    Ok(Some(Nginx {
        child,
        addr: format!("127.0.0.1:{port}").parse()?,
        _dir: dir,
    }))
}

async fn stack_with_workspace(
    options: StackOptions,
    up: SocketAddr,
) -> Result<(Stack, TestUser, String)> {
    let stack = Stack::start_with(options).await?;
    let user = stack.user("bench").await?;
    let ws = stack
        .workspace_from(&user, "bench", &devfile(up.port()))
        .await?;
    stack.set_endpoint(&ws, up.port(), up);
    let host = stack.host(up.port(), "bench");
    Ok((stack, user, host))
}

/// The middle value (`None` for none).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied()
}

fn main() -> Result<()> {
    warren_testkit::bench::block_on(run())
}

async fn run() -> Result<()> {
    let secs: u64 = warren_testkit::bench::env_or("ACCESS_BENCH_SECS", 3);
    let up = upstream().await?;
    if std::env::var("ACCESS_BENCH_ONLY").as_deref() == Ok("regions") {
        return regions(up).await;
    }
    let (full, full_user, full_host) = stack_with_workspace(StackOptions::default(), up).await?;
    let (direct, direct_user, direct_host) = stack_with_workspace(
        StackOptions {
            direct_upstream: Some("127.0.0.1:{port}".into()),
            ssh: false,
            ..StackOptions::default()
        },
        up,
    )
    .await?;
    let nginx = nginx(up)?;
    let up_host = up.to_string();
    wait_ok(up, &up_host, None).await?;
    wait_ok(full.proxy_addr, &full_host, Some(&full_user.token)).await?;
    wait_ok(direct.proxy_addr, &direct_host, Some(&direct_user.token)).await?;
    if let Some(n) = &nginx {
        wait_ok(n.addr, &up_host, None).await?;
    }

    let only_wrk = std::env::var("ACCESS_BENCH_ONLY").as_deref() == Ok("wrk");
    if !only_wrk {
        in_process_rows(
            up,
            nginx.as_ref().map(|n| n.addr),
            (&direct, &direct_user, &direct_host),
            (&full, &full_user, &full_host),
            secs,
        )
        .await?;
    }
    // The same rows with the load generated by wrk from a separate process, in rounds that
    // take turns (so a slow spell of the machine hits every row alike); medians printed.
    let rounds: usize = std::env::var("ACCESS_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(3);
    let mut w = [vec![], vec![], vec![], vec![]];
    for _ in 0..rounds {
        let Some(b) = wrk(up, &up_host, None, secs)? else {
            break;
        };
        w[0].push(b);
        if let Some(n) = &nginx {
            w[1].extend(wrk(n.addr, &up_host, None, secs)?);
        }
        let d = wrk(
            direct.proxy_addr,
            &direct_host,
            Some(&direct_user.token),
            secs,
        )?;
        w[2].extend(d);
        let f = wrk(full.proxy_addr, &full_host, Some(&full_user.token), secs)?;
        w[3].extend(f);
    }
    if w[0].is_empty() {
        println!("(wrk not installed: no separate-process load figures)");
    } else {
        let [w_base, w_nginx, w_direct, w_full] = w.map(median);
        println!(
            "requests/s with wrk (1 thread, {CONNECTIONS} connections, separate process), median of {rounds} alternating rounds:"
        );
        let (Some(w_base), Some(w_direct), Some(w_full)) = (w_base, w_direct, w_full) else {
            bail!("wrk measured the upstream but not the proxy");
        };
        println!("  upstream {w_base:.0}");
        if let Some(n) = w_nginx {
            println!("  nginx {n:.0} ({:.2}× upstream)", n / w_base);
        }
        match w_nginx {
            Some(n) => println!(
                "  proxy direct mode {w_direct:.0} ({:.2}× upstream, {:.2}× nginx; target ≥ 1.20× nginx)",
                w_direct / w_base,
                w_direct / n
            ),
            None => println!(
                "  proxy direct mode {w_direct:.0} ({:.2}× upstream)",
                w_direct / w_base
            ),
        }
        println!(
            "  full path {w_full:.0} ({:.2}× direct mode; target ≥ 0.75), {:.2}× upstream",
            w_full / w_direct,
            w_full / w_base
        );
    }
    drop(nginx);
    drop(full);
    drop(direct);
    if only_wrk {
        return Ok(());
    }
    replicas(up, secs, rounds).await?;
    regions(up).await
}

/// The rows measured by the in-process load generator, and the WebSocket round trips.
async fn in_process_rows(
    up: SocketAddr,
    nginx: Option<SocketAddr>,
    (direct, direct_user, direct_host): (&Stack, &TestUser, &str),
    (full, full_user, full_host): (&Stack, &TestUser, &str),
    secs: u64,
) -> Result<()> {
    let up_host = up.to_string();
    let base = measure(up, &up_host, None, secs).await?;
    let nginx_f = match nginx {
        Some(n) => Some(measure(n, &up_host, None, secs).await?),
        None => None,
    };
    let direct_f = measure(
        direct.proxy_addr,
        direct_host,
        Some(&direct_user.token),
        secs,
    )
    .await?;
    let full_f = measure(full.proxy_addr, full_host, Some(&full_user.token), secs).await?;
    let (ws_base50, ws_base99) = ws_rtt(up, &up_host, None).await?;
    let (ws_full50, ws_full99) = ws_rtt(full.proxy_addr, full_host, Some(&full_user.token)).await?;

    println!(
        "access bench: GET / ({} B body), {CONNECTIONS} connections for {secs} s per row; latency on one idle connection",
        BODY.len()
    );
    line("upstream directly (base)", &base, &base);
    match &nginx_f {
        Some(n) => line("nginx reverse proxy", n, &base),
        None => println!("nginx reverse proxy          (nginx not installed; skipped)"),
    }
    line("proxy, direct mode", &direct_f, &base);
    line("proxy → relay → agent", &full_f, &base);
    if let Some(n) = &nginx_f {
        println!(
            "direct mode / nginx requests/s: {:.2} (target ≥ 1.20)",
            direct_f.rps / n.rps
        );
    }
    println!(
        "full path: p50 added {:.3} ms (target ≤ 1 ms), requests/s {:.2}× direct mode (target ≥ 0.75), {:.2}× upstream",
        ms(full_f.p50) - ms(base.p50),
        full_f.rps / direct_f.rps,
        full_f.rps / base.rps
    );
    println!(
        "websocket echo 1 KiB rtt    upstream p50 {:.3} ms p99 {:.3} ms   full path p50 {:.3} ms ({:.2}×) p99 {:.3} ms ({:.2}×)",
        ms(ws_base50),
        ms(ws_base99),
        ms(ws_full50),
        ms(ws_full50) / ms(ws_base50),
        ms(ws_full99),
        ms(ws_full99) / ms(ws_base99)
    );

    Ok(())
}

/// p50 of `samples` sequential requests on one warm connection.
async fn p50(addr: SocketAddr, host: &str, token: &str, samples: usize) -> Result<Duration> {
    let mut c = Conn::open(addr, host, Some(token)).await?;
    for _ in 0..5 {
        c.get().await?;
    }
    let mut v = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        c.get().await?;
        v.push(t.elapsed());
    }
    v.sort();
    Ok(v[v.len() / 2])
}

/// A request to a workspace through its region's proxy against through the central one
/// (issue 42, item 4). The user, the agent, the relay and the region's proxy are in one
/// region; the server and the central proxy in another. User-space links add the distance,
/// as `tc netem` would on each way: 80 ms between the regions, 1 ms between the user and
/// anything in the region (tokio's timers count whole milliseconds, so each way costs 1–2 ms).
async fn regions(up: SocketAddr) -> Result<()> {
    let (stack, user, _) = stack_with_workspace(
        StackOptions {
            ssh: false,
            ..StackOptions::default()
        },
        up,
    )
    .await?;
    let (far, near) = (Duration::from_millis(80), Duration::from_millis(1));
    let addr_of = |url: &str| -> Result<SocketAddr> {
        Ok(url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()?)
    };
    let link = |to: SocketAddr, d: Duration| warren_testkit::latency::start(to, d);
    // The region's proxy calls the far server (authorisation, cached; activity reports);
    // the central proxy reaches the region's relay across the distance.
    let (l1, server_far) = link(addr_of(&stack.api_url)?, far).await?;
    let (l2, relay_far) = link(addr_of(&stack.relay_internal_url)?, far).await?;
    let eu = stack
        .proxy_at(ProxyAt {
            region: Some("eu".into()),
            domain: "eu.localhost".into(),
            server_url: Some(format!("http://{server_far}")),
            relay_url: None,
        })
        .await?;
    let central = stack
        .proxy_at(ProxyAt {
            region: None,
            domain: "central.localhost".into(),
            server_url: None,
            relay_url: Some(format!("http://{relay_far}")),
        })
        .await?;
    // Where the user connects: the workspace itself within the region (the base), the
    // region's proxy nearby, the central proxy far away.
    let (l3, to_up) = link(up, near).await?;
    let (l4, to_eu) = link(eu.http_addr, near).await?;
    let (l5, to_central) = link(central.http_addr, far).await?;
    let port = up.port();
    let eu_host = format!("{port}-bench.eu.localhost:{}", eu.http_addr.port());
    let central_host = format!(
        "{port}-bench.central.localhost:{}",
        central.http_addr.port()
    );
    let token = user.token.as_str();
    let base = p50(to_up, &up.to_string(), token, 200).await?;
    let regional = p50(to_eu, &eu_host, token, 200).await?;
    let via_central = p50(to_central, &central_host, token, 30).await?;
    println!(
        "regions (80 ms added each way between regions, 1 ms within; p50 on one warm connection): \
         in-region round trip to the workspace {:.2} ms (base); through the region's proxy {:.2} ms \
         (+{:.2} ms; goal ≤ +2 ms, {:.2}×); through the central proxy {:.2} ms ({:.2}×)",
        ms(base),
        ms(regional),
        ms(regional) - ms(base),
        ms(regional) / ms(base),
        ms(via_central),
        ms(via_central) / ms(base),
    );
    for l in [l1, l2, l3, l4, l5] {
        l.abort();
    }
    eu.stop().await;
    central.stop().await;
    Ok(())
}

/// Two proxy replicas against one, and a kill under load (issue 42).
async fn replicas(up: SocketAddr, secs: u64, rounds: usize) -> Result<()> {
    let (stack, user, host) = stack_with_workspace(
        StackOptions {
            direct_upstream: Some("127.0.0.1:{port}".into()),
            ssh: false,
            proxies: 2,
            ..StackOptions::default()
        },
        up,
    )
    .await?;
    let steer = stack.proxy_balancers.clone().context("replicas")?.0;
    let token = Some(user.token.as_str());
    wait_ok(stack.proxy_addr, &host, token).await?;
    let (mut one, mut two) = (vec![], vec![]);
    for _ in 0..rounds {
        steer.prefer(Some(0));
        one.push(measure(stack.proxy_addr, &host, token, secs).await?.rps);
        steer.prefer(None);
        two.push(measure(stack.proxy_addr, &host, token, secs).await?.rps);
    }
    let (Some(one), Some(two)) = (median(one), median(two)) else {
        bail!("no replica rounds");
    };
    println!(
        "proxy replicas (direct mode, behind the test's TCP balancer, median of {rounds} alternating rounds): \
         1 replica {one:.0} req/s (base), 2 replicas {two:.0} req/s ({:.2}×; two cores: ~flat expected)",
        two / one
    );

    // Every connection a client of its own that opens a new one when a request fails (the
    // usual retry); replica 0 is killed halfway.
    let taken_before = steer.connections()[0];
    let deadline = Instant::now() + Duration::from_secs(secs.max(2));
    let kill_at = Instant::now() + Duration::from_secs(secs.max(2)) / 2;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONNECTIONS {
        let (host, token) = (host.clone(), user.token.clone());
        let addr = stack.proxy_addr;
        tasks.spawn(async move {
            let (mut answered, mut failed) = (0u64, 0u64);
            let mut conn = Conn::open(addr, &host, Some(&token)).await?;
            while Instant::now() < deadline {
                if conn.get().await.is_ok() {
                    answered += 1;
                    continue;
                }
                failed += 1;
                conn = Conn::open(addr, &host, Some(&token)).await?;
            }
            Ok::<_, anyhow::Error>((answered, failed))
        });
    }
    tokio::time::sleep_until(kill_at.into()).await;
    let held = steer.connections()[0] - taken_before;
    stack.kill_proxy(0);
    let (mut answered, mut failed) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (a, f) = r??;
        answered += a;
        failed += f;
    }
    println!(
        "killing 1 of 2 replicas under load ({CONNECTIONS} connections): {answered} answered, {failed} failed; \
         the killed replica had taken {held} connections (goal: failed ≤ those, the requests in flight)"
    );
    Ok(())
}
