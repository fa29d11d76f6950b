//! Scale-out figures with a Redis routing table (`WARREN_TEST_REDIS_URL`; skipped without):
//! - added latency of a routed request (routing instance ≠ gateway) against the same request
//!   sent to the gateway directly: tunnel open + one 1-byte round trip, p50/p99;
//! - idle agents held by one relay instance (simulated agents in child processes:
//!   authenticate, upgrade, keep a yamux session, ping every 15 s, dial again with the
//!   agent's backoff), the relay's and Redis's memory per agent against a plain accepted TCP
//!   connection, and the time until all are back after the relay restarts;
//! - time for routing to converge after the gateway instance is stopped (the agent dials
//!   again through a balancer), against the agent's first connect-to-routable time.
//!
//! `cargo bench -p warren-relay --bench scale` (`SCALE_BENCH_AGENTS`, default 100000: the
//! issue's figure; capped, with the reason printed, at what one process may open here;
//! `SCALE_BENCH_ONLY=routed|convergence|idle` runs one part).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "../tests/redis_support/mod.rs"]
mod redis_support;

use common::*;

/// Counts the bytes allocated and not yet freed: the relay's live state, which the resident
/// size hides behind what the allocator keeps after a burst.
#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);
use redis_support::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use warren_types::reconcile::ReconcileSettings;
use warren_types::relay::{
    AuthenticateResponse, StreamOpen, HEARTBEAT_INTERVAL_SECS, HEARTBEAT_TIMEOUT_SECS,
    TUNNEL_PROTOCOL,
};
use warren_types::AgentId;

fn settings() -> ReconcileSettings {
    ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    }
}

fn main() {
    match std::env::var(SWARM_ENV) {
        Ok(spec) => swarm(&spec),
        Err(_) => block_on(run()),
    }
}

fn pct(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    )
}

/// `bytes` over `n`, in KiB.
fn kib_each(bytes: usize, n: usize) -> f64 {
    bytes as f64 / 1024.0 / n.max(1) as f64
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

    let only = std::env::var("SCALE_BENCH_ONLY").ok();
    let want = |part: &str| only.as_deref().is_none_or(|o| o == part);
    if want("routed") {
        routed_latency(&server, &redis, &prefix).await;
    }
    if want("convergence") {
        convergence(&server, &redis, &prefix).await;
    }
    if want("idle") {
        idle_agents(&server, &redis, &prefix).await;
    }
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

/// Why the swarm child processes exist: this machine lets a process hold 20,000 descriptors
/// (the hard limit; raising it takes CAP_SYS_RESOURCE), so the agents' ends of the
/// connections live in children, each under the limit, and the parent's memory is the
/// relay's alone. A child exits when its standard input closes (the parent ended or died).
const SWARM_ENV: &str = "WARREN_BENCH_SWARM";
/// Connections one swarm child holds.
const PER_CHILD: usize = 8_000;
/// Descriptors the relay's process keeps for everything but agent connections.
const FD_HEADROOM: usize = 1_000;

/// One swarm child: `tcp ADDR N` holds N plain connections; `agents URL FROM TO` runs agents
/// `sim-FROM`…`sim-TO` (exclusive) as the real agent connects: authenticate, upgrade, hold
/// a yamux session, ping every 15 s, and dial again with its jittered backoff when the
/// session ends.
fn swarm(spec: &str) {
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let args: Vec<&str> = spec.split(' ').collect();
    block_on(async move {
        match args.as_slice() {
            ["tcp", addr, n] => {
                let mut held = Vec::new();
                for _ in 0..n.parse::<usize>().unwrap() {
                    held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
                }
                std::future::pending::<()>().await;
            }
            ["agents", url, from, to] => {
                let url: url::Url = url.parse().unwrap();
                let http = reqwest::Client::builder()
                    .http1_only()
                    .pool_max_idle_per_host(0)
                    .build()
                    .unwrap();
                for i in from.parse::<usize>().unwrap()..to.parse().unwrap() {
                    tokio::spawn(simulated_agent(
                        url.clone(),
                        format!("sim-{i}"),
                        http.clone(),
                    ));
                }
                std::future::pending::<()>().await;
            }
            _ => panic!("unknown swarm spec {spec:?}"),
        }
    });
}

/// One idle agent, for ever: connect, ping while connected, back off, connect again.
async fn simulated_agent(url: url::Url, token: String, http: reqwest::Client) {
    let initial = Duration::from_millis(500);
    let max = Duration::from_secs(30);
    let mut failures = 0;
    loop {
        if let Ok(upgraded) = connect_agent(&url, &token, &http).await {
            failures = 0;
            let stop = CancellationToken::new();
            let (session, driver) =
                warren_relay::tunnel::start(upgraded, yamux::Mode::Client, stop.clone(), |_| {});
            let pings = async {
                loop {
                    tokio::time::sleep(Duration::from_secs(HEARTBEAT_INTERVAL_SECS)).await;
                    let ping = async {
                        let mut stream = session.open().await?;
                        warren_relay::tunnel::write_json(&mut stream, &StreamOpen::Ping).await?;
                        warren_relay::tunnel::read_frame(&mut stream).await
                    };
                    let timeout = Duration::from_secs(HEARTBEAT_TIMEOUT_SECS);
                    if !matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_))) {
                        return;
                    }
                }
            };
            tokio::select! {
                // Cancel-safe: the session ended; the pings stop with it.
                _ = driver => {}
                // Cancel-safe: the pings failed; the driver is dropped with its socket.
                _ = pings => {}
            }
        }
        tokio::time::sleep(warren_agent::backoff::jittered(initial, max, failures)).await;
        failures += 1;
    }
}

async fn connect_agent(
    url: &url::Url,
    token: &str,
    http: &reqwest::Client,
) -> Result<reqwest::Upgraded, String> {
    let resp = http
        .get(format!("{url}v1/agent/connect"))
        .bearer_auth(token)
        .header("connection", "upgrade")
        .header("upgrade", TUNNEL_PROTOCOL)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if resp.status() != 101 {
        return Err(format!("status {}", resp.status()));
    }
    resp.upgrade().await.map_err(|e| e.to_string())
}

/// Swarm children, killed (their standard input closed) on drop.
struct Swarm {
    _children: Vec<tokio::process::Child>,
}

impl Swarm {
    /// `specs` one child each.
    fn start(specs: impl IntoIterator<Item = String>) -> Swarm {
        let exe = std::env::current_exe().unwrap();
        Swarm {
            _children: specs
                .into_iter()
                .map(|spec| {
                    tokio::process::Command::new(&exe)
                        .env(SWARM_ENV, spec)
                        .stdin(std::process::Stdio::piped())
                        .kill_on_drop(true)
                        .spawn()
                        .unwrap()
                })
                .collect(),
        }
    }

    /// Agents `sim-0`…`sim-n` over children of [`PER_CHILD`] each.
    fn agents(url: &url::Url, n: usize) -> Swarm {
        Swarm::start(
            (0..n)
                .step_by(PER_CHILD)
                .map(|from| format!("agents {url} {from} {}", (from + PER_CHILD).min(n))),
        )
    }
}

/// Agent connections the relays of this process hold now (their gauge).
fn relay_connections() -> usize {
    warren_metrics::render()
        .lines()
        .filter(|l| l.starts_with("warren_relay_agent_connections"))
        .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
        .sum::<f64>() as usize
}

/// Waits up to `limit` until the relay holds `n` agent connections; how long it took, or how
/// many it held at the limit.
async fn until_connected(n: usize, limit: Duration) -> Result<Duration, usize> {
    let started = Instant::now();
    loop {
        let held = relay_connections();
        if held >= n {
            return Ok(started.elapsed());
        }
        if started.elapsed() > limit {
            return Err(held);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Bytes Redis holds for the keys under `prefix` (the relay's routing entries): the mean of a
/// sample of them (`MEMORY USAGE`), times their count.
async fn redis_bytes(redis: &str, prefix: &str) -> u64 {
    let mut conn = redis::Client::open(redis)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap_or_default();
    let sample = &keys[..keys.len().min(200)];
    let mut sampled = 0u64;
    for key in sample {
        let bytes: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap_or(None);
        sampled += bytes.unwrap_or(0);
    }
    sampled * keys.len() as u64 / sample.len().max(1) as u64
}

/// Idle agents held by one relay instance (production registry timings, real heartbeats),
/// the relay's memory for each against a plain accepted TCP connection, and the time until
/// all are back after the relay restarts.
async fn idle_agents(server: &TestServer, redis: &str, prefix: &Prefix) {
    let asked: usize = std::env::var("SCALE_BENCH_AGENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let fd_limit = nofile();
    let target = asked.min(fd_limit.saturating_sub(FD_HEADROOM));
    println!(
        "idle agents on one relay instance (simulated agents in child processes, Redis registry):"
    );
    if target < asked {
        println!(
            "  {asked} asked; {target} held: one process may open {fd_limit} descriptors here \
             (the hard limit, which only CAP_SYS_RESOURCE raises), one per agent"
        );
    }
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
    // Baseline, measured first (memory freed later is reused, which would hide a later
    // figure): plain TCP connections accepted and held by this process.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let before = vm_rss_kib();
    let heap_before = HEAP.allocated();
    let tcp_swarm = Swarm::start(
        (0..target)
            .step_by(PER_CHILD)
            .map(|from| format!("tcp {addr} {}", PER_CHILD.min(target - from))),
    );
    let mut held = Vec::with_capacity(target);
    while held.len() < target {
        held.push(listener.accept().await.unwrap().0);
    }
    let tcp_kib = vm_rss_kib().saturating_sub(before);
    let per_tcp = tcp_kib as f64 / target.max(1) as f64;
    let tcp_heap = kib_each(HEAP.allocated().saturating_sub(heap_before), target);
    drop(tcp_swarm);
    drop(held);
    // The recorder serves the relay's connection gauge; installed before the relay counts.
    let _ = warren_metrics::handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let agent_addr = listener.local_addr().unwrap();
    let start_relay = |agents| {
        Instance::start_on(agents, &server.url, redis, &prefix.prefix, |_, registry| {
            // Production timings: each entry refreshed every 4 minutes, not every 5 s.
            registry.entry_ttl = Duration::from_secs(300);
            registry.refresh_interval = Duration::from_secs(240);
        })
    };
    let relay = start_relay(listener).await;
    let url = relay.agent_url();
    let before = vm_rss_kib();
    let heap_before = HEAP.allocated();
    let started = Instant::now();
    let swarm = Swarm::agents(&url, target);
    let connected = until_connected(target, Duration::from_secs(600)).await;
    let relay_kib = vm_rss_kib().saturating_sub(before);
    let relay_heap = HEAP.allocated().saturating_sub(heap_before);
    let redis_bytes = redis_bytes(redis, &prefix.prefix).await;
    let first_connect = started.elapsed();
    let reached = match connected {
        Ok(t) => {
            println!(
                "  {target} connected in {:.1} s (baseline)",
                t.as_secs_f64()
            );
            target
        }
        Err(held) => {
            println!(
                "  only {held} of {target} connected after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            held
        }
    };
    let per_agent = relay_kib as f64 / reached.max(1) as f64;
    let heap_per_agent = kib_each(relay_heap, reached);
    println!(
        "  plain accepted TCP connection     live heap {tcp_heap:>5.1} KiB, resident {per_tcp:>5.1} KiB   (baseline)"
    );
    println!(
        "  agent connection on the relay     live heap {heap_per_agent:>5.1} KiB (×{:.0}), resident {per_agent:>5.1} KiB (×{:.0}; {:.0} MiB for {reached})   goal: < 8 KiB",
        heap_per_agent / tcp_heap.max(0.001),
        per_agent / per_tcp.max(0.001),
        relay_kib as f64 / 1024.0
    );
    println!(
        "  Redis memory per agent            {:>5.2} KiB",
        redis_bytes as f64 / 1024.0 / reached.max(1) as f64
    );

    // A restart: every agent notices its session end and dials again after its backoff.
    let restarted = Instant::now();
    relay.stop().await;
    let stopped = restarted.elapsed();
    let listener = tokio::net::TcpListener::bind(agent_addr).await.unwrap();
    let relay = start_relay(listener).await;
    match until_connected(reached, Duration::from_secs(600)).await {
        Ok(_) => println!(
            "  relay restart → all {reached} back  {:>5.1} s (its stop {:.1} s), ×{:.1} the first connect",
            restarted.elapsed().as_secs_f64(),
            stopped.as_secs_f64(),
            restarted.elapsed().as_secs_f64() / first_connect.as_secs_f64().max(0.001)
        ),
        Err(held) => println!("  relay restart → only {held} of {reached} back after 600 s"),
    }
    drop(swarm);
    relay.stop().await;
}

/// This process's limit of open descriptors (the soft one).
fn nofile() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        })
        .unwrap_or(1024)
}
