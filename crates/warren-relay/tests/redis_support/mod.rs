//! Support for tests (and the scale benchmark) with several relay instances sharing a Redis
//! routing table: a relay instance with all three listeners on port 0, a key prefix per test
//! removed on drop, a TCP balancer for agents, and a private `redis-server` child process.
#![allow(dead_code)]

use crate::common::{self, SECRET};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use warren_relay::redis_registry::{RedisRegistry, RedisRegistryConfig};
use warren_relay::registry::AgentRegistry;
use warren_relay::{Listeners, RelayConfig};
use warren_types::AgentId;

pub const PEER_SECRET: &str = "relay-peer-secret-0123456789abcdef";

/// `WARREN_TEST_REDIS_URL`, or `None` after printing why the test is skipped.
pub fn redis_url() -> Option<String> {
    match std::env::var("WARREN_TEST_REDIS_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            eprintln!("skipping: WARREN_TEST_REDIS_URL is not set");
            None
        }
    }
}

/// A key prefix of its own; every key under it is deleted on drop.
pub struct Prefix {
    pub prefix: String,
    redis_url: String,
}

impl Prefix {
    pub fn new(redis_url: &str) -> Prefix {
        Prefix {
            prefix: format!("warren:test:{}:", uuid::Uuid::new_v4()),
            redis_url: redis_url.into(),
        }
    }

    pub fn agent_key(&self, agent: AgentId) -> String {
        format!("{}agent:{agent}", self.prefix)
    }

    pub fn instance_key(&self, instance: uuid::Uuid) -> String {
        format!("{}instance:{instance}", self.prefix)
    }

    pub async fn conn(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.redis_url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    }
}

impl Drop for Prefix {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.redis_url.as_str()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_secs(2)) else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<(), _> = redis::cmd("DEL").arg(keys).query(&mut conn);
        }
    }
}

/// Timings short enough for tests.
pub fn registry_config(
    redis_url: &str,
    prefix: &str,
    peer_addr: SocketAddr,
) -> RedisRegistryConfig {
    let mut c = RedisRegistryConfig::new(
        redis_url.into(),
        format!("http://{peer_addr}").parse().unwrap(),
    );
    c.key_prefix = prefix.into();
    c.entry_ttl = Duration::from_secs(10);
    c.refresh_interval = Duration::from_secs(5);
    c.health_interval = Duration::from_millis(200);
    c
}

/// One relay instance of a cluster.
pub struct Instance {
    pub agent_addr: SocketAddr,
    pub internal_addr: SocketAddr,
    pub peer_addr: SocketAddr,
    pub instance: uuid::Uuid,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl Instance {
    pub async fn start(
        server: &url::Url,
        redis_url: &str,
        prefix: &str,
        tweak: impl FnOnce(&mut RelayConfig),
    ) -> Instance {
        let agents = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(agents, server, redis_url, prefix, |c, _| tweak(c)).await
    }

    /// An instance whose agent listener is `agents` (a restarted instance takes its
    /// predecessor's address), with its registry's timings tweaked too.
    pub async fn start_on(
        agents: TcpListener,
        server: &url::Url,
        redis_url: &str,
        prefix: &str,
        tweak: impl FnOnce(&mut RelayConfig, &mut RedisRegistryConfig),
    ) -> Instance {
        let mut config = RelayConfig::new(server.clone(), SECRET.into());
        config.agent_wait_seconds = 5;
        config.peer_secret = Some(PEER_SECRET.into());
        let internal = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peers = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent_addr = agents.local_addr().unwrap();
        let internal_addr = internal.local_addr().unwrap();
        let peer_addr = peers.local_addr().unwrap();
        let mut registry_config = registry_config(redis_url, prefix, peer_addr);
        tweak(&mut config, &mut registry_config);
        let registry = RedisRegistry::connect(registry_config).await.unwrap();
        let instance = registry.local_instance().unwrap().0;
        let shutdown = CancellationToken::new();
        let s = shutdown.clone();
        let task = tokio::spawn(async move {
            warren_relay::run_with_peers(
                config,
                Listeners { agents, internal },
                Some(peers),
                Arc::new(registry),
                s,
            )
            .await
            .unwrap();
        });
        Instance {
            agent_addr,
            internal_addr,
            peer_addr,
            instance,
            shutdown,
            task: Some(task),
        }
    }

    pub fn agent_url(&self) -> url::Url {
        format!("http://{}", self.agent_addr).parse().unwrap()
    }

    /// Stops the instance cleanly and waits until it has let go of everything.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("relay stops within 10 s")
                .unwrap();
        }
    }
}

/// Opens a tunnel through an instance's internal listener.
pub async fn open_routed_tunnel(
    internal: SocketAddr,
    agent: AgentId,
    workspace: &str,
    port: u16,
) -> Result<reqwest::Upgraded, (u16, String)> {
    let url = format!(
        "http://{internal}/internal/agents/{agent}/tunnel?workspace={workspace}&namespace={}&port={port}",
        common::model::NAMESPACE
    );
    let req = common::http1()
        .get(url)
        .bearer_auth(common::internal_jwt("warren-proxy"));
    common::upgrade(req).await
}

/// Sends `msg` through a fresh tunnel and reads the echo.
pub async fn echo_once(
    internal: SocketAddr,
    agent: AgentId,
    msg: &[u8],
) -> Result<(), (u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut t = open_routed_tunnel(internal, agent, "ws-a", 8080).await?;
    t.write_all(msg)
        .await
        .map_err(|e| (0, format!("write: {e}")))?;
    let mut buf = vec![0u8; msg.len()];
    t.read_exact(&mut buf)
        .await
        .map_err(|e| (0, format!("read: {e}")))?;
    assert_eq!(buf, msg);
    Ok(())
}

/// A TCP balancer in front of the agent listeners: each new connection goes to the first
/// upstream that accepts it, starting after the last one used (a load balancer's health
/// check reduced to "does it connect").
pub struct Balancer {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Balancer {
    pub async fn start(upstreams: Vec<SocketAddr>) -> Balancer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let next = Arc::new(Mutex::new(0usize));
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let upstreams = upstreams.clone();
                let next = next.clone();
                tokio::spawn(async move {
                    let start = *next.lock().unwrap();
                    for i in 0..upstreams.len() {
                        let idx = (start + i) % upstreams.len();
                        if let Ok(mut up) = tokio::net::TcpStream::connect(upstreams[idx]).await {
                            *next.lock().unwrap() = idx;
                            let _ = up.set_nodelay(true);
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                            return;
                        }
                    }
                });
            }
        });
        Balancer { addr, task }
    }

    pub fn url(&self) -> url::Url {
        format!("http://{}", self.addr).parse().unwrap()
    }
}

/// A private `redis-server` on a free port, killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<std::process::Child>,
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

impl PrivateRedis {
    /// `None` (after printing why) when `redis-server` is not installed.
    pub async fn start() -> Option<PrivateRedis> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut r = PrivateRedis { port, child: None };
        if !r.spawn().await {
            eprintln!("skipping: redis-server is not available");
            return None;
        }
        Some(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) -> bool {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        let Ok(child) = child else { return false };
        self.child = Some(child);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while tokio::time::Instant::now() < deadline {
            if let Ok(c) = redis::Client::open(self.url()) {
                if let Ok(mut conn) = c.get_multiplexed_async_connection().await {
                    let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
                    if pong.is_ok() {
                        return true;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("redis-server did not start on port {}", self.port);
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port after [`PrivateRedis::kill`], empty.
    pub async fn start_again(&mut self) {
        assert!(self.spawn().await, "redis-server starts again");
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) {
        self.kill();
        assert!(self.spawn().await, "redis-server restarts");
    }
}
