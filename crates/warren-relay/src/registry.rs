//! Who holds a connection of which agent: the routing table (behind a trait, so a Redis one
//! shared by several relay instances can replace the in-memory one) and this instance's own
//! live sessions.
//!
//! The table records *where* connections are (instance, connection id), never the connection
//! itself: a session handle cannot be shared between processes. This instance keeps its
//! handles in [`LocalConnections`] and reaches a local entry through it; entries of other
//! instances will be reached over the relay↔relay endpoint (scale-out issue).

use crate::tunnel::Session;
use async_trait::async_trait;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::broadcast;
use uuid::Uuid;
use warren_types::AgentId;

/// One relay process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InstanceId(pub Uuid);

/// One agent connection (one replica's session) on one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionId(pub Uuid);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionEntry {
    pub agent: AgentId,
    pub instance: InstanceId,
    pub connection: ConnectionId,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("the connection registry is unavailable")]
    Unavailable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// The routing table. Implementations make `register`/`unregister` idempotent.
#[async_trait]
pub trait AgentRegistry: Send + Sync + 'static {
    async fn register(&self, entry: ConnectionEntry) -> Result<(), RegistryError>;
    async fn unregister(&self, entry: ConnectionEntry) -> Result<(), RegistryError>;
    /// Every live connection of `agent`, on any instance.
    async fn lookup(&self, agent: AgentId) -> Result<Vec<ConnectionEntry>, RegistryError>;
    /// Announces each agent that connects anywhere, so a waiting request wakes at once.
    fn subscribe(&self) -> broadcast::Receiver<AgentId>;
    /// The instance id this registry registers under, when it is fixed by the registry (a
    /// shared one advertises it to the other instances); `None` lets the relay pick one.
    fn local_instance(&self) -> Option<InstanceId> {
        None
    }
    /// Where another instance's relay↔relay endpoint is; `None` when the instance is unknown
    /// or gone (its metadata expired).
    async fn peer_url(&self, _instance: InstanceId) -> Result<Option<url::Url>, RegistryError> {
        Ok(None)
    }
    /// Clean shutdown of this instance: drops whatever it still holds in the table.
    async fn close(&self) {}
}

/// The table of a relay running alone.
#[derive(Debug)]
pub struct InMemoryRegistry {
    table: Mutex<HashMap<AgentId, BTreeSet<ConnectionEntry>>>,
    connected: broadcast::Sender<AgentId>,
}

impl Default for InMemoryRegistry {
    fn default() -> Self {
        InMemoryRegistry {
            table: Mutex::new(HashMap::new()),
            connected: broadcast::channel(1024).0,
        }
    }
}

#[async_trait]
impl AgentRegistry for InMemoryRegistry {
    async fn register(&self, entry: ConnectionEntry) -> Result<(), RegistryError> {
        self.table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(entry.agent)
            .or_default()
            .insert(entry);
        let _ = self.connected.send(entry.agent);
        Ok(())
    }

    async fn unregister(&self, entry: ConnectionEntry) -> Result<(), RegistryError> {
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(set) = table.get_mut(&entry.agent) {
            set.remove(&entry);
            if set.is_empty() {
                table.remove(&entry.agent);
            }
        }
        Ok(())
    }

    async fn lookup(&self, agent: AgentId) -> Result<Vec<ConnectionEntry>, RegistryError> {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        Ok(table
            .get(&agent)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default())
    }

    fn subscribe(&self) -> broadcast::Receiver<AgentId> {
        self.connected.subscribe()
    }
}

/// A live session of an agent on this instance.
#[derive(Debug, Clone)]
pub struct AgentSession {
    pub agent: AgentId,
    pub agent_name: String,
    pub session: Session,
}

/// This instance's sessions, by connection id.
#[derive(Debug, Default, Clone)]
pub struct LocalConnections {
    inner: Arc<Mutex<HashMap<ConnectionId, AgentSession>>>,
}

impl LocalConnections {
    pub fn insert(&self, id: ConnectionId, session: AgentSession) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, session);
    }

    pub fn remove(&self, id: ConnectionId) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    pub fn get(&self, id: ConnectionId) -> Option<AgentSession> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// This instance's live sessions of `agent`, without asking the routing table (a gateway
    /// answers from what it holds, even while the shared table is unreachable).
    pub fn for_agent(&self, agent: AgentId) -> Vec<AgentSession> {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| s.agent == agent && !s.session.is_closed())
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn register_lookup_unregister() {
        let reg = InMemoryRegistry::default();
        let mut events = reg.subscribe();
        let instance = InstanceId(Uuid::new_v4());
        let a = ConnectionEntry {
            agent: AgentId(1),
            instance,
            connection: ConnectionId(Uuid::new_v4()),
        };
        let b = ConnectionEntry {
            connection: ConnectionId(Uuid::new_v4()),
            ..a
        };
        reg.register(a).await.unwrap();
        reg.register(b).await.unwrap();
        reg.register(b).await.unwrap();
        assert_eq!(events.recv().await.unwrap(), AgentId(1));
        assert_eq!(reg.lookup(AgentId(1)).await.unwrap().len(), 2);
        assert!(reg.lookup(AgentId(2)).await.unwrap().is_empty());
        reg.unregister(a).await.unwrap();
        reg.unregister(a).await.unwrap();
        assert_eq!(reg.lookup(AgentId(1)).await.unwrap(), vec![b]);
        reg.unregister(b).await.unwrap();
        assert!(reg.lookup(AgentId(1)).await.unwrap().is_empty());
    }
}
