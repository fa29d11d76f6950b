//! The routing table shared by several relay instances, in Redis.
//!
//! Key layout (`{p}` is the configured prefix, `warren:relay:` by default):
//! - `{p}agent:{agent_id}`: hash, field `{instance}/{connection}` → expiry (Unix ms). One
//!   field per live connection; the key itself expires with the longest TTL written, so an
//!   agent whose every instance crashed disappears on its own.
//! - `{p}instance:{instance}`: string, the instance's relay↔relay URL, with the same TTL.
//! - `{p}events`: pub/sub channel, messages `connect {agent_id}` / `disconnect {agent_id}`.
//!
//! Each write (register, unregister, refresh) is one MULTI/EXEC transaction. Expiries are
//! wall-clock milliseconds because other processes read them. Entries are refreshed every
//! `refresh_interval`; a health check every `health_interval` notices a Redis that came back
//! empty (our instance key is gone) and re-registers every local connection at once.

use crate::registry::{AgentRegistry, ConnectionEntry, ConnectionId, InstanceId, RegistryError};
use async_trait::async_trait;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use url::Url;
use uuid::Uuid;
use warren_types::AgentId;

/// Settings of a [`RedisRegistry`].
#[derive(Debug, Clone)]
pub struct RedisRegistryConfig {
    pub redis_url: String,
    /// Prefix of every key and of the channel; tests use their own.
    pub key_prefix: String,
    /// Lifetime of an entry that is not refreshed (a crashed instance's entries).
    pub entry_ttl: Duration,
    /// How often live entries are written again; well below `entry_ttl`.
    pub refresh_interval: Duration,
    /// How often Redis is checked for having lost our entries (a restart).
    pub health_interval: Duration,
    /// This instance.
    pub instance: InstanceId,
    /// Where other instances reach this one's relay↔relay endpoint.
    pub peer_url: Url,
}

impl RedisRegistryConfig {
    /// Defaults: TTL 300 s, refresh every 240 s, health check every second.
    pub fn new(redis_url: String, peer_url: Url) -> Self {
        RedisRegistryConfig {
            redis_url,
            key_prefix: "warren:relay:".into(),
            entry_ttl: Duration::from_secs(300),
            refresh_interval: Duration::from_secs(240),
            health_interval: Duration::from_secs(1),
            instance: InstanceId(Uuid::new_v4()),
            peer_url,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RedisRegistryError {
    #[error("invalid redis URL")]
    Url(#[source] redis::RedisError),
    #[error("connecting to redis")]
    Connect(#[source] redis::RedisError),
    #[error("refresh_interval must be shorter than entry_ttl")]
    Intervals,
}

fn unavailable(e: redis::RedisError) -> RegistryError {
    RegistryError::Unavailable(Box::new(e))
}

use warren_types::unix_millis as now_ms;

#[derive(Clone)]
struct Keys {
    prefix: String,
}

impl Keys {
    fn agent(&self, agent: AgentId) -> String {
        format!("{}agent:{agent}", self.prefix)
    }
    fn instance(&self, instance: InstanceId) -> String {
        format!("{}instance:{}", self.prefix, instance.0)
    }
    fn events(&self) -> String {
        format!("{}events", self.prefix)
    }
}

fn field(entry: &ConnectionEntry) -> String {
    format!("{}/{}", entry.instance.0, entry.connection.0)
}

fn parse_field(agent: AgentId, field: &str) -> Option<ConnectionEntry> {
    let (i, c) = field.split_once('/')?;
    Some(ConnectionEntry {
        agent,
        instance: InstanceId(i.parse().ok()?),
        connection: ConnectionId(c.parse().ok()?),
    })
}

/// State shared with the background tasks.
struct Shared {
    conn: ConnectionManager,
    keys: Keys,
    config: RedisRegistryConfig,
    /// This instance's registered connections: rewritten on refresh and after a restart.
    local: Mutex<HashSet<ConnectionEntry>>,
    /// A write failed: the next health check rewrites everything.
    dirty: AtomicBool,
    connected: broadcast::Sender<AgentId>,
}

impl Shared {
    fn ttl_ms(&self) -> i64 {
        self.config.entry_ttl.as_millis() as i64
    }

    /// Adds `entries` (and this instance's metadata) in one transaction; `announce` publishes
    /// a connect event for each (new connections, or a re-registration after an outage during
    /// which waiters may have missed them), not for a routine refresh.
    async fn write(
        &self,
        entries: &[ConnectionEntry],
        announce: bool,
    ) -> Result<(), redis::RedisError> {
        let ttl = self.ttl_ms();
        let expiry = now_ms() + ttl;
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.cmd("SET")
            .arg(self.keys.instance(self.config.instance))
            .arg(self.config.peer_url.as_str())
            .arg("PX")
            .arg(ttl)
            .ignore();
        for e in entries {
            let key = self.keys.agent(e.agent);
            pipe.hset(&key, field(e), expiry).ignore();
            pipe.pexpire(&key, ttl).ignore();
            if announce {
                pipe.publish(self.keys.events(), format!("connect {}", e.agent))
                    .ignore();
            }
        }
        let mut conn = self.conn.clone();
        pipe.query_async::<()>(&mut conn).await
    }

    async fn refresh_all(&self, announce: bool) -> Result<usize, redis::RedisError> {
        let entries: Vec<_> = self
            .local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .copied()
            .collect();
        self.write(&entries, announce).await?;
        Ok(entries.len())
    }
}

/// The Redis routing table of one relay instance. Background tasks (refresh, health check,
/// pub/sub) stop when it is dropped.
pub struct RedisRegistry {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl std::fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRegistry")
            .field("instance", &self.shared.config.instance)
            .field("key_prefix", &self.shared.keys.prefix)
            .finish()
    }
}

impl Drop for RedisRegistry {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl RedisRegistry {
    /// Connects (Redis must be reachable now; later outages are survived) and starts the
    /// background tasks.
    pub async fn connect(config: RedisRegistryConfig) -> Result<RedisRegistry, RedisRegistryError> {
        if config.refresh_interval >= config.entry_ttl {
            return Err(RedisRegistryError::Intervals);
        }
        let client =
            redis::Client::open(config.redis_url.as_str()).map_err(RedisRegistryError::Url)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Duration::from_secs(2))
            .set_response_timeout(Duration::from_secs(2))
            .set_number_of_retries(2)
            .set_max_delay(500);
        let conn = ConnectionManager::new_with_config(client.clone(), manager_config)
            .await
            .map_err(RedisRegistryError::Connect)?;
        let (connected, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            conn,
            keys: Keys {
                prefix: config.key_prefix.clone(),
            },
            config,
            local: Mutex::new(HashSet::new()),
            dirty: AtomicBool::new(false),
            connected,
        });
        shared
            .write(&[], false)
            .await
            .map_err(RedisRegistryError::Connect)?;
        // Subscribed before returning, so no connect event published from now on is missed.
        let mut first = client
            .get_async_pubsub()
            .await
            .map_err(RedisRegistryError::Connect)?;
        first
            .subscribe(shared.keys.events())
            .await
            .map_err(RedisRegistryError::Connect)?;
        let stop = CancellationToken::new();
        tokio::spawn(maintain(shared.clone(), stop.clone()));
        tokio::spawn(listen(client, first, shared.clone(), stop.clone()));
        Ok(RedisRegistry { shared, stop })
    }
}

/// Refreshes entries on schedule, and at once when Redis lost them (restarted empty).
async fn maintain(shared: Arc<Shared>, stop: CancellationToken) {
    let mut last_refresh = tokio::time::Instant::now();
    let mut healthy = true;
    loop {
        tokio::select! {
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(shared.config.health_interval) => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return,
        }
        let mut conn = shared.conn.clone();
        let present: Result<bool, _> = conn
            .exists(shared.keys.instance(shared.config.instance))
            .await;
        let due = last_refresh.elapsed() >= shared.config.refresh_interval;
        let lost = match present {
            Ok(p) => !p || !healthy || shared.dirty.swap(false, Ordering::SeqCst),
            Err(e) => {
                if healthy {
                    tracing::warn!(error = %e, "redis unreachable; local connections will be re-registered when it is back");
                }
                healthy = false;
                continue;
            }
        };
        if !(due || lost) {
            continue;
        }
        match shared.refresh_all(lost).await {
            Ok(n) => {
                if lost {
                    tracing::info!(connections = n, "re-registered local connections in redis");
                }
                healthy = true;
                last_refresh = tokio::time::Instant::now();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot refresh connection entries in redis");
                healthy = false;
            }
        }
    }
}

/// Forwards `connect` events from the pub/sub channel to local waiters, resubscribing after
/// Redis comes back.
async fn listen(
    client: redis::Client,
    first: redis::aio::PubSub,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let channel = shared.keys.events();
    let mut first = Some(first);
    loop {
        let session = async {
            let mut pubsub = match first.take() {
                Some(p) => p,
                None => {
                    let mut p = client.get_async_pubsub().await?;
                    p.subscribe(&channel).await?;
                    p
                }
            };
            let mut messages = pubsub.on_message();
            while let Some(msg) = messages.next().await {
                let Ok(payload) = msg.get_payload::<String>() else {
                    continue;
                };
                if let Some(id) = payload.strip_prefix("connect ") {
                    if let Ok(agent) = id.parse::<AgentId>() {
                        let _ = shared.connected.send(agent);
                    }
                }
            }
            Ok::<(), redis::RedisError>(())
        };
        tokio::select! {
            // Cancel-safe: a dropped subscription loses only messages, and waiters look the
            // table up again anyway.
            r = session => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "redis pub/sub connection lost");
                }
            }
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return,
        }
        tokio::select! {
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return,
        }
    }
}

#[async_trait]
impl AgentRegistry for RedisRegistry {
    async fn register(&self, entry: ConnectionEntry) -> Result<(), RegistryError> {
        // Remembered first: a write lost to an outage is redone by the health check, and
        // meanwhile the connection still serves requests sent to this instance, so an outage
        // is not a reason to drop it.
        self.shared
            .local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(entry);
        if let Err(e) = self.shared.write(&[entry], true).await {
            tracing::warn!(agent = %entry.agent, error = %e, "cannot register a connection in redis yet; will retry");
            self.shared.dirty.store(true, Ordering::SeqCst);
        }
        Ok(())
    }

    async fn unregister(&self, entry: ConnectionEntry) -> Result<(), RegistryError> {
        self.shared
            .local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&entry);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hdel(self.shared.keys.agent(entry.agent), field(&entry))
            .ignore()
            .publish(
                self.shared.keys.events(),
                format!("disconnect {}", entry.agent),
            )
            .ignore();
        let mut conn = self.shared.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
    }

    async fn lookup(&self, agent: AgentId) -> Result<Vec<ConnectionEntry>, RegistryError> {
        let key = self.shared.keys.agent(agent);
        let mut conn = self.shared.conn.clone();
        let all: HashMap<String, i64> = conn.hgetall(&key).await.map_err(unavailable)?;
        let now = now_ms();
        let mut live = Vec::new();
        let mut expired = Vec::new();
        for (f, expiry) in all {
            match parse_field(agent, &f) {
                Some(e) if expiry > now => live.push(e),
                _ => expired.push(f),
            }
        }
        if !expired.is_empty() {
            // Garbage of a crashed instance; a failure here only delays the cleanup.
            let r: Result<(), _> = conn.hdel(&key, &expired).await;
            if let Err(e) = r {
                tracing::debug!(error = %e, "cannot delete expired connection entries");
            }
        }
        live.sort();
        Ok(live)
    }

    fn subscribe(&self) -> broadcast::Receiver<AgentId> {
        self.shared.connected.subscribe()
    }

    fn local_instance(&self) -> Option<InstanceId> {
        Some(self.shared.config.instance)
    }

    async fn peer_url(&self, instance: InstanceId) -> Result<Option<Url>, RegistryError> {
        let mut conn = self.shared.conn.clone();
        let raw: Option<String> = conn
            .get(self.shared.keys.instance(instance))
            .await
            .map_err(unavailable)?;
        Ok(raw.and_then(|s| s.parse().ok()))
    }

    async fn close(&self) {
        self.stop.cancel();
        let entries: Vec<_> = self
            .shared
            .local
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .collect();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .del(self.shared.keys.instance(self.shared.config.instance))
            .ignore();
        for e in &entries {
            pipe.hdel(self.shared.keys.agent(e.agent), field(e))
                .ignore()
                .publish(self.shared.keys.events(), format!("disconnect {}", e.agent))
                .ignore();
        }
        let mut conn = self.shared.conn.clone();
        if let Err(e) = pipe.query_async::<()>(&mut conn).await {
            tracing::warn!(error = %e, "cannot remove this instance's entries from redis");
        }
    }
}
