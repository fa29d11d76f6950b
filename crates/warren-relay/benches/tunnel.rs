//! Tunnel cost: throughput and round-trip latency of a byte stream through the relay and the
//! agent's multiplexed connection (client → relay internal listener → yamux → agent → echo
//! server), against a direct TCP connection to the same echo server, on loopback, in one run.
//!
//! Loopback makes "direct TCP" a bare memory copy, so every extra hop shows at full weight
//! (the worst case for any tunnel). Run as root with `ip` and `tc`, the bench also measures
//! bulk upload over a link shaped to 10 Gbit/s (a veth pair with `tbf`, the client in a
//! network namespace of its own): the case of a user reaching a workspace over a network.
//!
//! `cargo bench -p warren-relay --bench tunnel` (set `TUNNEL_BENCH_MB` to change the volume).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warren_types::reconcile::ReconcileSettings;

/// Full-duplex echo: write `total` bytes while reading them back; returns MB/s.
async fn throughput<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, total: usize) -> f64 {
    let chunk = vec![0x5au8; 64 * 1024];
    let (mut r, mut w) = tokio::io::split(stream);
    let start = Instant::now();
    let write = async {
        let mut sent = 0;
        while sent < total {
            let n = chunk.len().min(total - sent);
            w.write_all(&chunk[..n]).await.unwrap();
            sent += n;
        }
        w.flush().await.unwrap();
    };
    let read = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < total {
            let n = r.read(&mut buf).await.unwrap();
            assert!(n > 0, "echo closed early");
            got += n;
        }
    };
    tokio::join!(write, read);
    total as f64 / 1e6 / start.elapsed().as_secs_f64()
}

/// Bulk upload: writes `total` bytes to a sink that answers one byte once it has them all;
/// returns MB/s. One direction, as a file copy or `git push` through the tunnel would be.
async fn bulk<S: AsyncRead + AsyncWrite + Unpin>(stream: &mut S, total: usize) -> f64 {
    let chunk = vec![0x5au8; 256 * 1024];
    let start = Instant::now();
    stream
        .write_all(&(total as u64).to_be_bytes())
        .await
        .unwrap();
    let mut sent = 0;
    while sent < total {
        let n = chunk.len().min(total - sent);
        stream.write_all(&chunk[..n]).await.unwrap();
        sent += n;
    }
    stream.flush().await.unwrap();
    let mut ack = [0u8; 1];
    stream.read_exact(&mut ack).await.unwrap();
    total as f64 / 1e6 / start.elapsed().as_secs_f64()
}

/// A sink on `ip`: per connection, reads an 8-byte length, then that many bytes, answers
/// one byte; repeats until the client closes.
async fn sink_server(ip: std::net::IpAddr) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    let mut len = [0u8; 8];
                    if sock.read_exact(&mut len).await.is_err() {
                        return;
                    }
                    let mut left = u64::from_be_bytes(len) as usize;
                    while left > 0 {
                        let want = buf.len().min(left);
                        match sock.read(&mut buf[..want]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => left -= n,
                        }
                    }
                    if sock.write_all(&[1]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// 1-byte ping-pong; returns (p50, p99) round-trip times.
async fn latency<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    rounds: usize,
) -> (Duration, Duration) {
    let mut samples = Vec::with_capacity(rounds);
    let mut b = [0u8; 1];
    for i in 0..rounds + 100 {
        let start = Instant::now();
        stream.write_all(&[i as u8]).await.unwrap();
        stream.read_exact(&mut b).await.unwrap();
        if i >= 100 {
            samples.push(start.elapsed());
        }
    }
    samples.sort();
    (samples[rounds / 2], samples[rounds * 99 / 100])
}

/// A plain TCP forwarder (no multiplexing, no framing) in front of `upstream`.
async fn forwarder(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let _ = inbound.set_nodelay(true);
                let mut outbound = tokio::net::TcpStream::connect(upstream).await.unwrap();
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut inbound,
                    &mut outbound,
                    64 * 1024,
                    64 * 1024,
                )
                .await;
            });
        }
    });
    addr
}

/// Set in the environment of the shaped link's client: the address it sends to.
const CLIENT_ENV: &str = "TUNNEL_BENCH_CLIENT";
/// Link rate for the shaped rows (`tc` syntax).
const LINK_RATE: &str = "10gbit";

/// A veth pair between this network namespace and a new one, shaped to [`LINK_RATE`] both
/// ways; removed on drop.
struct Link {
    ns: String,
    host_if: String,
    host_ip: std::net::Ipv4Addr,
}

impl Link {
    /// `None` (with the reason printed) where this is not possible: not root, no `ip`/`tc`.
    fn create() -> Option<Link> {
        let pid = std::process::id();
        let octet = (pid % 250) as u8 + 1;
        let link = Link {
            ns: format!("wrnb{pid}"),
            host_if: format!("wrnb{pid}h"),
            host_ip: std::net::Ipv4Addr::new(10, 213, octet, 1),
        };
        let peer_if = format!("wrnb{pid}p");
        let ns = link.ns.as_str();
        let host_cidr = format!("{}/30", link.host_ip);
        let peer_cidr = format!("10.213.{octet}.2/30");
        let steps: Vec<Vec<&str>> = vec![
            vec!["ip", "netns", "add", ns],
            vec![
                "ip",
                "link",
                "add",
                &link.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &peer_if,
                "netns",
                ns,
            ],
            vec!["ip", "addr", "add", &host_cidr, "dev", &link.host_if],
            vec!["ip", "link", "set", &link.host_if, "up"],
            vec!["ip", "-n", ns, "addr", "add", &peer_cidr, "dev", &peer_if],
            vec!["ip", "-n", ns, "link", "set", &peer_if, "up"],
            vec!["ip", "-n", ns, "link", "set", "lo", "up"],
            vec![
                "tc",
                "qdisc",
                "add",
                "dev",
                &link.host_if,
                "root",
                "tbf",
                "rate",
                LINK_RATE,
                "burst",
                "4mb",
                "latency",
                "10ms",
            ],
            vec![
                "tc", "-n", ns, "qdisc", "add", "dev", &peer_if, "root", "tbf", "rate", LINK_RATE,
                "burst", "4mb", "latency", "10ms",
            ],
        ];
        for step in steps {
            let ok = std::process::Command::new(step[0])
                .args(&step[1..])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!(
                    "no shaped link ({} failed: needs root, ip and tc); loopback rows only",
                    step.join(" ")
                );
                return None; // `link` drops here and removes what was made.
            }
        }
        Some(link)
    }

    /// Bulk upload MB/s measured by a client in the link's namespace (this binary again),
    /// sending to `addr`, through the tunnel when `upgrade` names its path and JWT.
    async fn bulk(
        &self,
        addr: std::net::SocketAddr,
        total: usize,
        upgrade: Option<(&str, &str)>,
    ) -> f64 {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = tokio::process::Command::new("ip");
        cmd.args(["netns", "exec", &self.ns])
            .arg(exe)
            .env(CLIENT_ENV, addr.to_string())
            .env("TUNNEL_BENCH_BYTES", total.to_string())
            .kill_on_drop(true);
        if let Some((path, jwt)) = upgrade {
            cmd.env("TUNNEL_BENCH_UPGRADE", path)
                .env("TUNNEL_BENCH_JWT", jwt);
        }
        let out = cmd.output().await.unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "link client failed: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.trim().parse().unwrap()
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for args in [
            vec!["netns", "del", &self.ns],
            vec!["link", "del", &self.host_if],
        ] {
            let _ = std::process::Command::new("ip")
                .args(args)
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// The shaped link's client (run inside its namespace): connects to `addr`, switches to
/// the tunnel protocol when asked, warms up, prints the best of three bulk uploads in MB/s.
fn link_client(addr: String) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let total: usize = std::env::var("TUNNEL_BENCH_BYTES")
            .unwrap()
            .parse()
            .unwrap();
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        if let Ok(path) = std::env::var("TUNNEL_BENCH_UPGRADE") {
            let jwt = std::env::var("TUNNEL_BENCH_JWT").unwrap();
            let head = format!(
                "GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {jwt}\r\n\
                 connection: upgrade\r\nupgrade: {}\r\n\r\n",
                warren_types::relay::TUNNEL_PROTOCOL
            );
            s.write_all(head.as_bytes()).await.unwrap();
            // Byte by byte up to the blank line: nothing of the tunnel is read here.
            let mut answer = Vec::new();
            while !answer.ends_with(b"\r\n\r\n") {
                answer.push(s.read_u8().await.unwrap());
            }
            assert!(
                answer.starts_with(b"HTTP/1.1 101"),
                "{}",
                String::from_utf8_lossy(&answer)
            );
        }
        bulk(&mut s, 16 << 20).await;
        let mut best: f64 = 0.0;
        for _ in 0..3 {
            best = best.max(bulk(&mut s, total).await);
        }
        println!("{best}");
    });
}

fn main() {
    if let Ok(addr) = std::env::var(CLIENT_ENV) {
        return link_client(addr);
    }
    block_on(run());
}

async fn run() {
    let mb: usize = std::env::var("TUNNEL_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    let total = mb * 1024 * 1024;
    let rounds = 5000;

    let link = Link::create();
    let bind_ip: std::net::IpAddr = match &link {
        Some(l) => l.host_ip.into(),
        None => std::net::Ipv4Addr::LOCALHOST.into(),
    };
    let server = TestServer::start(ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 3600,
    })
    .await;
    server.with(|s| s.model.create("bench"));
    let relay = TestRelay::start_with_internal(
        &server.url,
        "127.0.0.1:0".parse().unwrap(),
        (bind_ip, 0).into(),
        |_| {},
    )
    .await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("the workspace to exist", 30, || async {
        agent.runtime.workspace(&key("bench")).is_some()
    })
    .await;
    let echo = echo_server().await;
    agent.runtime.set_endpoint(&key("bench"), 8080, echo);
    let sink = sink_server(bind_ip).await;
    agent.runtime.set_endpoint(&key("bench"), 9090, sink);
    let jwt = internal_jwt("warren-proxy");

    eprintln!("set up; measuring");
    let mut direct = tokio::net::TcpStream::connect(echo).await.unwrap();
    direct.set_nodelay(true).unwrap();
    let mut tunnel = open_tunnel(&relay, AGENT, "bench", 8080, &jwt)
        .await
        .unwrap();
    // The same number of socket hops as the tunnel (client → relay → agent → workspace)
    // through plain forwarders: separates the cost of the hops from yamux and HTTP.
    let chain = forwarder(forwarder(echo).await).await;
    let mut hops = tokio::net::TcpStream::connect(chain).await.unwrap();
    hops.set_nodelay(true).unwrap();

    // Warm both paths (window auto-tuning, allocator), then measure.
    throughput(&mut direct, 16 << 20).await;
    throughput(&mut tunnel, 16 << 20).await;
    throughput(&mut hops, 16 << 20).await;
    eprintln!("warm");
    let direct_tp = throughput(&mut direct, total).await;
    let tunnel_tp = throughput(&mut tunnel, total).await;
    let hops_tp = throughput(&mut hops, total).await;
    let mut direct_sink = tokio::net::TcpStream::connect(sink).await.unwrap();
    direct_sink.set_nodelay(true).unwrap();
    let mut tunnel_sink = open_tunnel(&relay, AGENT, "bench", 9090, &jwt)
        .await
        .unwrap();
    let sink_chain = forwarder(forwarder(sink).await).await;
    let mut hops_sink = tokio::net::TcpStream::connect(sink_chain).await.unwrap();
    hops_sink.set_nodelay(true).unwrap();
    bulk(&mut direct_sink, 16 << 20).await;
    bulk(&mut tunnel_sink, 16 << 20).await;
    bulk(&mut hops_sink, 16 << 20).await;
    // Best of three: the machine is shared; the best run is the path's capacity.
    let mut bulk_direct: f64 = 0.0;
    let mut bulk_tunnel: f64 = 0.0;
    let mut bulk_hops: f64 = 0.0;
    for _ in 0..3 {
        bulk_direct = bulk_direct.max(bulk(&mut direct_sink, total).await);
        bulk_tunnel = bulk_tunnel.max(bulk(&mut tunnel_sink, total).await);
        bulk_hops = bulk_hops.max(bulk(&mut hops_sink, total).await);
    }
    let (direct_p50, direct_p99) = latency(&mut direct, rounds).await;
    let (tunnel_p50, tunnel_p99) = latency(&mut tunnel, rounds).await;
    let (hops_p50, hops_p99) = latency(&mut hops, rounds).await;

    // Opening a stream: the relay's JWT check, the agent's dial and the upgrade.
    let mut opens = vec![];
    for _ in 0..200 {
        let start = Instant::now();
        let t = open_tunnel(&relay, AGENT, "bench", 8080, &jwt)
            .await
            .unwrap();
        opens.push(start.elapsed());
        drop(t);
    }
    let mut connects = vec![];
    for _ in 0..200 {
        let start = Instant::now();
        let s = tokio::net::TcpStream::connect(echo).await.unwrap();
        connects.push(start.elapsed());
        drop(s);
    }
    opens.sort();
    connects.sort();

    // Over the shaped link, after everything on loopback (the client runs apart, so its
    // load does not overlap the rows above).
    let shaped = match &link {
        Some(l) => {
            let path = format!(
                "/internal/agents/{AGENT}/tunnel?workspace=bench&namespace={}&port=9090",
                model::NAMESPACE
            );
            let direct = l.bulk(sink, total, None).await;
            let tunnel = l
                .bulk(relay.internal_addr, total, Some((&path, &jwt)))
                .await;
            Some((direct, tunnel))
        }
        None => None,
    };

    println!("tunnel bench ({mb} MiB full-duplex echo, {rounds} 1-byte round trips, loopback)");
    println!(
        "throughput   direct {direct_tp:>9.1} MB/s   tunnel {tunnel_tp:>9.1} MB/s   tunnel/direct {:.2}",
        tunnel_tp / direct_tp
    );
    println!(
        "bulk upload  direct {bulk_direct:>9.1} MB/s   tunnel {bulk_tunnel:>9.1} MB/s   tunnel/direct {:.2}   (3 plain TCP hops {bulk_hops:.1} MB/s, tunnel/hops {:.2})",
        bulk_tunnel / bulk_direct,
        bulk_tunnel / bulk_hops
    );
    println!(
        "rtt p50      direct {:>9.1} µs     tunnel {:>9.1} µs     tunnel/direct {:.2}",
        micros(direct_p50),
        micros(tunnel_p50),
        micros(tunnel_p50) / micros(direct_p50)
    );
    println!(
        "rtt p99      direct {:>9.1} µs     tunnel {:>9.1} µs     tunnel/direct {:.2}",
        micros(direct_p99),
        micros(tunnel_p99),
        micros(tunnel_p99) / micros(direct_p99)
    );
    println!(
        "3 plain TCP hops (same hop count as the tunnel): throughput {hops_tp:.1} MB/s \
         (tunnel/hops {:.2}), rtt p50 {:.1} µs (tunnel/hops {:.2}), p99 {:.1} µs (tunnel/hops {:.2})",
        tunnel_tp / hops_tp,
        micros(hops_p50),
        micros(tunnel_p50) / micros(hops_p50),
        micros(hops_p99),
        micros(tunnel_p99) / micros(hops_p99)
    );
    println!(
        "open p50     direct {:>9.1} µs     tunnel {:>9.1} µs     tunnel/direct {:.2}",
        micros(connects[100]),
        micros(opens[100]),
        micros(opens[100]) / micros(connects[100])
    );
    match shaped {
        Some((direct, tunnel)) => println!(
            "over a {LINK_RATE} link (client in its own network namespace): bulk upload direct \
             {direct:.1} MB/s   tunnel {tunnel:.1} MB/s   tunnel/direct {:.2}",
            tunnel / direct
        ),
        None => println!("over a shaped link: skipped (needs root, ip and tc)"),
    }
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
