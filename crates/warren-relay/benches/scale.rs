//! Scale-out figures with a Redis routing table (`WARREN_TEST_REDIS_URL`; skipped without):
//! - added latency of a routed request (routing instance ≠ gateway) against the same request
//!   sent to the gateway directly: tunnel open + one 1-byte round trip, p50/p99;
//! - idle agent connections held by one relay (simulated agents: authenticate, upgrade, keep
//!   a yamux session) and memory per connection, against plain loopback TCP pairs;
//! - time for routing to converge after the gateway instance is stopped (the agent dials
//!   again through a balancer), against the agent's first connect-to-routable time.
//!
//! `cargo bench -p warren-relay --bench scale` (`SCALE_BENCH_AGENTS`, default 10000).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use common::*;
use redis_support::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use warren_types::reconcile::ReconcileSettings;
use warren_types::relay::AuthenticateResponse;
use warren_types::AgentId;

fn settings() -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

fn main() {
    block_on(run());
}

fn pct(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Tunnel open + one round trip through `internal`.
async fn open_and_ping(internal: std::net::SocketAddr) -> Duration {
    let start = Instant::now();
    let mut t = open_routed_tunnel(internal, AGENT, "ws-a", 8080)
        .await
        .unwrap();
    t.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    t.read_exact(&mut b).await.unwrap();
    start.elapsed()
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn run() {
    let Some(redis) = redis_url() else {
        eprintln!("scale bench skipped: Redis is unavailable");
        return;
    };
    match redis::Client::open(redis.as_str()) {
        Ok(c) if c.get_multiplexed_async_connection().await.is_ok() => {}
        _ => {
            eprintln!("scale bench skipped: Redis at {redis} is unavailable");
            return;
        }
    }
    let prefix = Prefix::new(&redis);
    let server = TestServer::start(settings()).await;
    server.with(|s| s.model.create("ws-a"));

    routed_latency(&server, &redis, &prefix).await;
    convergence(&server, &redis, &prefix).await;
    idle_connections(&server, &redis, &prefix).await;
}

async fn routed_latency(server: &TestServer, redis: &str, prefix: &Prefix) {
    let gateway = Instance::start(&server.url, redis, &prefix.prefix, |_| {}).await;
    let router = Instance::start(&server.url, redis, &prefix.prefix, |_| {}).await;
    let agent = TestAgent::start(gateway.agent_url(), GOOD_TOKEN);
    agent.echoing("ws-a").await;
    let rounds = 500;
    for _ in 0..50 {
        open_and_ping(gateway.internal_addr).await;
        open_and_ping(router.internal_addr).await;
    }
    let mut direct = Vec::with_capacity(rounds);
    let mut routed = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        direct.push(open_and_ping(gateway.internal_addr).await);
        routed.push(open_and_ping(router.internal_addr).await);
    }
    let (d50, d99) = pct(&mut direct);
    let (r50, r99) = pct(&mut routed);
    println!("routed request (tunnel open + 1 round trip, {rounds} rounds):");
    println!(
        "  direct to gateway  p50 {:>7.3} ms  p99 {:>7.3} ms   (baseline)",
        ms(d50),
        ms(d99)
    );
    println!(
        "  via another relay  p50 {:>7.3} ms  p99 {:>7.3} ms   ×{:.2} p50, ×{:.2} p99, +{:.3} ms p50",
        ms(r50),
        ms(r99),
        r50.as_secs_f64() / d50.as_secs_f64(),
        r99.as_secs_f64() / d99.as_secs_f64(),
        ms(r50.saturating_sub(d50))
    );
    drop(agent);
    gateway.stop().await;
    router.stop().await;
}

async fn convergence(server: &TestServer, redis: &str, prefix: &Prefix) {
    let mut relays = Vec::new();
    for _ in 0..3 {
        relays.push(Instance::start(&server.url, redis, &prefix.prefix, |_| {}).await);
    }
    let lb = Balancer::start(relays.iter().map(|r| r.agent_addr).collect()).await;
    let router = relays.pop().unwrap();
    let started = Instant::now();
    let agent = TestAgent::start_with(lb.url(), GOOD_TOKEN, |c| {
        c.initial_backoff = Duration::from_millis(50);
        c.max_backoff = Duration::from_millis(500);
    });
    agent.echoing("ws-a").await;
    let routable = |deadline: u64| async move {
        let end = Instant::now() + Duration::from_secs(deadline);
        while Instant::now() < end {
            if echo_once(router.internal_addr, AGENT, b"c").await.is_ok() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    };
    assert!(routable(30).await);
    let first = started.elapsed();
    let mut samples = Vec::new();
    // Stop each gateway in turn (the balancer sends the agent to the next one).
    for _ in 0..2 {
        let gw = relays.remove(0);
        let t = Instant::now();
        gw.stop().await;
        assert!(routable(30).await, "routing converges");
        samples.push(t.elapsed());
    }
    println!("convergence after the gateway instance stops (agent backoff 50 ms):");
    println!(
        "  first connect → routable       {:>8.1} ms   (baseline)",
        ms(first)
    );
    for (i, s) in samples.iter().enumerate() {
        println!(
            "  stop #{} → routable again      {:>8.1} ms   ×{:.2}",
            i + 1,
            ms(*s),
            s.as_secs_f64() / first.as_secs_f64()
        );
    }
    drop(agent);
    drop(lb);
    drop(router);
}

/// A simulated agent connection: authenticate, upgrade, hold a yamux session open.
async fn simulated_agent(
    agent_url: &url::Url,
    token: &str,
    http: &reqwest::Client,
    stop: &CancellationToken,
) -> Result<(), String> {
    let resp = http
        .get(format!("{agent_url}v1/agent/connect"))
        .bearer_auth(token)
        .header("connection", "upgrade")
        .header("upgrade", "warren-tunnel/1")
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != 101 {
        return Err(format!("status {}", resp.status()));
    }
    let upgraded = resp.upgrade().await.map_err(|e| e.to_string())?;
    let (_session, driver) =
        warren_relay::tunnel::start(upgraded, yamux::Mode::Client, stop.child_token(), |_| {});
    tokio::spawn(driver);
    Ok(())
}

async fn idle_connections(server: &TestServer, redis: &str, prefix: &Prefix) {
    let target: usize = std::env::var("SCALE_BENCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    for i in 0..target {
        server.with(|s| {
            s.tokens.insert(
                format!("sim-{i}"),
                AuthenticateResponse {
                    agent_id: AgentId(100_000 + i as i64),
                    agent_name: format!("sim-{i}"),
                },
            )
        });
    }

    // Baseline: the same number of idle loopback TCP pairs, both ends in this process.
    let before = vm_rss_kib();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut pairs = Vec::new();
    for _ in 0..target {
        let Ok(c) = tokio::net::TcpStream::connect(addr).await else {
            break;
        };
        let Ok((s, _)) = listener.accept().await else {
            break;
        };
        pairs.push((c, s));
    }
    let tcp_n = pairs.len();
    let tcp_kib = vm_rss_kib().saturating_sub(before);
    drop(pairs);
    drop(listener);

    let relay = Instance::start(&server.url, redis, &prefix.prefix, |c| {
        c.agent_idle_timeout_seconds = 3600;
        c.auth_cache_seconds = 3600;
    })
    .await;
    let url = relay.agent_url();
    let http = reqwest::Client::builder()
        .http1_only()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let stop = CancellationToken::new();
    let before = vm_rss_kib();
    let started = Instant::now();
    let mut reached = 0;
    let mut failure = None;
    'outer: for batch in (0..target).collect::<Vec<_>>().chunks(200) {
        let conns = batch.iter().map(|i| {
            let token = format!("sim-{i}");
            let (url, http, stop) = (&url, &http, &stop);
            async move { simulated_agent(url, &token, http, stop).await }
        });
        for r in futures::future::join_all(conns).await {
            match r {
                Ok(()) => reached += 1,
                Err(e) => {
                    failure = Some(e);
                    break 'outer;
                }
            }
        }
    }
    let connect_time = started.elapsed();
    // Let the relay register the last ones before measuring.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let relay_kib = vm_rss_kib().saturating_sub(before);
    println!("idle agent connections on one relay (simulated agents, Redis registry):");
    println!(
        "  reached {reached} of {target} in {:.1} s{}",
        connect_time.as_secs_f64(),
        failure
            .map(|e| format!(" (stopped: {e}; ulimit -n is {})", nofile()))
            .unwrap_or_default()
    );
    let per_tcp = tcp_kib as f64 / tcp_n.max(1) as f64;
    let per_agent = relay_kib as f64 / reached.max(1) as f64;
    println!(
        "  plain TCP pair (both ends)        {per_tcp:>7.1} KiB/conn over {tcp_n}   (baseline)"
    );
    println!(
        "  agent connection (both ends)      {per_agent:>7.1} KiB/conn over {reached}   ×{:.1}",
        per_agent / per_tcp.max(0.001)
    );
    stop.cancel();
    relay.stop().await;
}

fn nofile() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .map(|l| l.split_whitespace().nth(3).unwrap_or("?").to_owned())
        })
        .unwrap_or_else(|| "?".into())
}
