//! `warren connect` (spec/mounts.md): attaches the machine it runs on to the tree as the
//! backing of one `proxy` mount. It is the agent's relay connection over a [`HostRuntime`]:
//! the relay routes tunnels and exec sessions to it as to any agent, and instead of
//! reconciling workspaces it sends a heartbeat — a reconcile call carrying its mount report —
//! every partial-reconcile interval the server asks for. The server refuses a token that
//! backs another mount (or no mount at all); the connector then stops, naming why.

use crate::connection::{ConnectError, ConnectionConfig, RelayConnection};
use crate::reconciler::{ReconcileTransport, TransportError};
use crate::runtime::host::{HostConfig, HostRuntime};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::api::Condition;
use warren_types::reconcile::{MountReport, ReconcileRequest, UpdateType, CONNECTOR_CONDITION};

/// Shortest heartbeat interval honoured from the server's settings.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Everything [`run`] needs.
#[derive(Debug, Clone)]
pub struct ConnectorConfig {
    pub connection: ConnectionConfig,
    /// The mount this machine backs; the server checks that the token is for it.
    pub mount: String,
    /// The machine's ports served through the mount (`{port}-{mount}.{domain}`), on
    /// 127.0.0.1.
    pub ports: Vec<u16>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    #[error("setting up the relay connection")]
    Connection(#[source] ConnectError),
    #[error("the server refused this connector: {0}")]
    Refused(String),
    #[error("the relay connection task failed")]
    Task(#[source] tokio::task::JoinError),
}

/// Serves the mount until `shutdown` fires or the server refuses the connector.
pub async fn run(
    config: ConnectorConfig,
    shutdown: CancellationToken,
) -> Result<(), ConnectorError> {
    let runtime = Arc::new(HostRuntime::new(HostConfig {
        mount: config.mount.clone(),
        ports: config.ports.clone(),
    }));
    let connection = RelayConnection::new(config.connection.clone(), runtime)
        .map_err(ConnectorError::Connection)?;
    let stop = shutdown.child_token();
    let conn_task = tokio::spawn({
        let connection = connection.clone();
        let stop = stop.clone();
        async move { connection.run(stop).await }
    });
    tracing::info!(mount = %config.mount, ports = ?config.ports, "connector starting");
    let result = heartbeat(&connection, &config, &stop).await;
    stop.cancel();
    conn_task.await.map_err(ConnectorError::Task)?;
    tracing::info!(mount = %config.mount, "connector stopped");
    result
}

fn report(config: &ConnectorConfig) -> ReconcileRequest {
    ReconcileRequest {
        update_type: UpdateType::Partial,
        workspace_agent_infos: vec![],
        capacity: None,
        runtime_fault: None,
        isolation_warning: None,
        mounts: vec![],
        used: vec![],
        connector: Some(MountReport {
            mount: config.mount.clone(),
            ports: config.ports.clone(),
            conditions: vec![Condition {
                kind: CONNECTOR_CONDITION.into(),
                status: "True".into(),
                reason: "Heartbeat".into(),
                message: format!(
                    "{} is connected",
                    hostname().unwrap_or_else(|| "the machine".into())
                ),
            }],
        }),
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

async fn heartbeat(
    connection: &RelayConnection,
    config: &ConnectorConfig,
    stop: &CancellationToken,
) -> Result<(), ConnectorError> {
    let mut events = connection.events();
    let mut interval = Duration::from_secs(10);
    let mut ready = false;
    loop {
        match connection.reconcile(&report(config)).await {
            Ok(resp) => {
                interval =
                    Duration::from_secs(resp.settings.partial_reconciliation_interval_seconds)
                        .max(MIN_INTERVAL);
                if !ready {
                    tracing::info!(mount = %config.mount, "connected: the mount is served");
                    ready = true;
                }
            }
            Err(TransportError::Status {
                status: 401 | 403 | 404,
                message,
            }) => return Err(ConnectorError::Refused(message)),
            Err(TransportError::NotConnected) => ready = false,
            Err(e) => {
                ready = false;
                tracing::warn!(error = %warren_types::error_chain(&e), "heartbeat failed");
            }
        }
        tokio::select! {
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(interval) => {}
            // Cancel-safe: `changed` only marks the value seen; a new connection beats at once.
            changed = events.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return Ok(()),
        }
    }
}
