//! The agent as a service, as the others have one: [`run`] asks the relay who it is when not
//! told, builds the chosen workspace runtime, and runs the relay connection and the reconcile
//! loop until `shutdown` fires; [`serve`] does the last part for a runtime built by the
//! caller (`warren up`, which checks the engine before anything listens).

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::AgentId;

use crate::connection::{identify, ConnectError, ConnectionConfig, RelayConnection};
use crate::leader::{run_elected, Elector, LeaderElectionConfig};
use crate::reconciler::{Reconciler, ReconcilerConfig};
use crate::runtime::engine::{EngineConfig, EngineError, EngineRuntime};
use crate::runtime::kubernetes::{
    BuildSettings, BuilderError, ComponentPolicy, ImageBuilder, KubernetesOptions,
    KubernetesRuntime,
};
use crate::runtime::WorkspaceRuntime;

/// Which runtime runs the workspaces.
#[derive(Debug, Clone)]
pub enum RuntimeChoice {
    /// Docker or Podman; generated files (mounted secrets, records) under `state_dir`;
    /// devfile image builds only when `image_builds`.
    Engine {
        state_dir: PathBuf,
        image_builds: bool,
        /// Registries the agent itself reaches over plain HTTP (Features).
        plain_http_registries: Vec<String>,
        /// Special-purpose ranges the agent's own fetches may reach (Features).
        outbound_allow: Vec<ipnet::IpNet>,
    },
    /// The cluster of the in-cluster configuration or KUBECONFIG; `components` is what devfile
    /// `kubernetes` components may apply there; `builds`, where images built at a
    /// workspace's start are built and pushed (none: such workspaces are refused).
    Kubernetes {
        components: ComponentPolicy,
        builds: Option<BuildSettings>,
    },
    /// No runtime at all: workspaces exist in memory, become ready at once and go at once
    /// when deleted, as reported to the server like a real runtime's (`warren scaletest`'s
    /// stand-ins for thousands of workspaces). Nothing runs: every exec (a web terminal, an
    /// SSH session) writes back what it reads, so terminal load can be carried and its echo
    /// timed, and nothing anyone sends runs on the host.
    Simulated,
}

/// Everything [`run`] needs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub connection: ConnectionConfig,
    /// This agent's id; asked from the relay when `None`.
    pub agent: Option<AgentId>,
    pub runtime: RuntimeChoice,
    pub reconciler: ReconcilerConfig,
    /// With several replicas of this agent: elect one through a Lease (Kubernetes only).
    pub leader_election: Option<LeaderElectionConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("the relay refused the agent token")]
    Refused(#[source] ConnectError),
    #[error("stopped before the relay answered")]
    Stopped,
    #[error("connecting to the container engine")]
    Engine(#[source] EngineError),
    #[error("connecting to Kubernetes (in-cluster configuration or KUBECONFIG)")]
    Kubernetes(#[source] kube::Error),
    #[error("setting up the image builder")]
    Builder(#[source] BuilderError),
    #[error("setting up the relay connection")]
    Connection(#[source] ConnectError),
    #[error("leader election needs the kubernetes runtime (the lease is a Kubernetes object)")]
    LeaderElectionNeedsKubernetes,
    #[error("invalid leader election settings: {0}")]
    LeaderElection(String),
    #[error("the {0} task failed")]
    Task(&'static str, #[source] tokio::task::JoinError),
}

/// Runs the agent until `shutdown`; `metrics`, when given, serves `/metrics` (recorded
/// metrics and the workspaces' CPU and memory, read from the runtime at each scrape) and
/// `/healthz`.
pub async fn run(
    config: AgentConfig,
    metrics: Option<tokio::net::TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), AgentError> {
    if let Some(election) = &config.leader_election {
        election.validate().map_err(AgentError::LeaderElection)?;
        if !matches!(config.runtime, RuntimeChoice::Kubernetes { .. }) {
            return Err(AgentError::LeaderElectionNeedsKubernetes);
        }
    }
    // Served from the start, before the relay or the runtime answer: the liveness probe reads
    // `/healthz` here, and a relay that is down for a while must not get the agent killed.
    // The workspaces' usage joins once the runtime exists. Stopped with the agent, whether
    // it stops on `shutdown` or on an error.
    let metrics_stop = shutdown.child_token();
    let usage_from: Arc<OnceLock<Arc<dyn WorkspaceRuntime>>> = Arc::default();
    let metrics = metrics.map(|listener| {
        let usage_from = usage_from.clone();
        let collector: warren_metrics::Collector = Arc::new(move || {
            let runtime = usage_from.get().cloned();
            Box::pin(async move {
                let Some(runtime) = runtime else {
                    return String::new();
                };
                // Bounded as a whole: a slow engine must not fail the scrape of everything.
                match tokio::time::timeout(USAGE_TIMEOUT, runtime.usage()).await {
                    Ok(Ok(usage)) => crate::runtime::usage_metrics(&usage),
                    Ok(Err(e)) => {
                        tracing::warn!(error = %warren_types::error_chain(&e), "reading the workspaces' usage for /metrics failed");
                        String::new()
                    }
                    Err(_) => {
                        tracing::warn!("reading the workspaces' usage for /metrics timed out");
                        String::new()
                    }
                }
            })
        });
        tokio::spawn(warren_metrics::serve_with(
            listener,
            Some(collector),
            metrics_stop.clone(),
        ))
    });
    let result = run_agent(config, usage_from, shutdown).await;
    metrics_stop.cancel();
    if let Some(task) = metrics {
        match task.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the metrics listener failed"),
            Err(e) => tracing::warn!(error = %e, "the metrics listener's task failed"),
            Ok(Ok(())) => {}
        }
    }
    result
}

/// How long a scrape waits for the workspaces' usage.
const USAGE_TIMEOUT: Duration = Duration::from_secs(5);

/// The agent itself: its id, its runtime (offered to the metrics through `usage_from`) and
/// the relay connection, elected or alone.
async fn run_agent(
    config: AgentConfig,
    usage_from: Arc<OnceLock<Arc<dyn WorkspaceRuntime>>>,
    shutdown: CancellationToken,
) -> Result<(), AgentError> {
    let agent = match config.agent {
        Some(id) => id,
        None => discover_agent_id(&config.connection, &shutdown).await?,
    };
    let mut kube_client = None;
    let (runtime, engine): (Arc<dyn WorkspaceRuntime>, Option<EngineRuntime>) =
        match &config.runtime {
            RuntimeChoice::Engine {
                state_dir,
                image_builds,
                plain_http_registries,
                outbound_allow,
            } => {
                let mut engine_config = EngineConfig::new(agent, state_dir);
                engine_config.image_builds = *image_builds;
                engine_config
                    .plain_http_registries
                    .clone_from(plain_http_registries);
                engine_config.outbound_allow.clone_from(outbound_allow);
                let engine = EngineRuntime::connect(engine_config)
                    .await
                    .map_err(AgentError::Engine)?;
                (Arc::new(engine.clone()), Some(engine))
            }
            RuntimeChoice::Kubernetes { components, builds } => {
                let client = kube::Client::try_default()
                    .await
                    .map_err(AgentError::Kubernetes)?;
                kube_client = Some(client.clone());
                let options = KubernetesOptions {
                    components: components.clone(),
                    ..KubernetesOptions::default()
                };
                let mut runtime = KubernetesRuntime::new(client, agent, options);
                if let Some(settings) = builds {
                    let builder = ImageBuilder::connect(agent, settings.clone())
                        .await
                        .map_err(AgentError::Builder)?;
                    runtime = runtime.with_builder(builder);
                }
                (Arc::new(runtime), None)
            }
            RuntimeChoice::Simulated => {
                let runtime = crate::runtime::simulated::SimulatedRuntime::new();
                runtime.set_auto_settle(true);
                runtime.set_auto_delete(true);
                runtime.echo_exec();
                (Arc::new(runtime), None)
            }
        };
    tracing::info!(agent = %agent, runtime = ?config.runtime, "agent starting");
    let _ = usage_from.set(runtime.clone());
    let result = match (config.leader_election, kube_client) {
        (Some(mut election), Some(client)) => {
            if election.lease_name.is_empty() {
                election.lease_name = format!("warren-agent-{agent}");
            }
            tracing::info!(identity = %election.identity, namespace = %election.namespace, lease = %election.lease_name, "standing for election among this agent's replicas");
            let elector = Elector::new(client, election);
            run_elected(elector, shutdown, |leading| {
                serve(
                    config.connection.clone(),
                    runtime.clone(),
                    config.reconciler.clone(),
                    agent,
                    leading,
                )
            })
            .await
        }
        _ => {
            // Alone, this process is the agent's one worker: counted as its leader, so a
            // dashboard counts one per agent either way.
            metrics::gauge!("warren_agent_leader").set(1.0);
            let result = serve(
                config.connection,
                runtime,
                config.reconciler,
                agent,
                shutdown,
            )
            .await;
            metrics::gauge!("warren_agent_leader").set(0.0);
            result
        }
    };
    if let Some(engine) = engine {
        // Stops a Podman service the runtime started; workspaces keep running.
        engine.shutdown().await;
    }
    tracing::info!("agent stopped");
    result
}

/// Runs the relay connection, the reconcile loop over `runtime` and the GitOps sources
/// until `shutdown` fires.
pub async fn serve(
    connection: ConnectionConfig,
    runtime: Arc<dyn WorkspaceRuntime>,
    reconciler: ReconcilerConfig,
    agent: AgentId,
    shutdown: CancellationToken,
) -> Result<(), AgentError> {
    let connection =
        RelayConnection::new(connection, runtime.clone()).map_err(AgentError::Connection)?;
    runtime.use_build_contexts(connection.build_contexts());
    let reconciler = Reconciler::new(Arc::new(connection.clone()), runtime.clone(), reconciler)
        .with_url_mounts(connection.url_mounts());
    let probe_task = tokio::spawn(connection.url_mounts().run(shutdown.clone()));
    let gitops_task = tokio::spawn(crate::gitops::run(
        agent.to_string(),
        connection.clone(),
        runtime,
        reconciler.status(),
        shutdown.clone(),
    ));
    let conn_task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { connection.run(shutdown).await }
    });
    let loop_task = tokio::spawn(reconciler.run(shutdown.clone()));
    let (c, l, g, p) = tokio::join!(conn_task, loop_task, gitops_task, probe_task);
    p.map_err(|e| AgentError::Task("mount probes", e))?;
    c.map_err(|e| AgentError::Task("relay connection", e))?;
    l.map_err(|e| AgentError::Task("reconcile loop", e))?;
    g.map_err(|e| AgentError::Task("GitOps", e))?;
    Ok(())
}

/// Asks the relay for this agent's id, retrying (jittered backoff up to 30 s) until it
/// answers, refuses the token, or `shutdown` fires.
async fn discover_agent_id(
    config: &ConnectionConfig,
    shutdown: &CancellationToken,
) -> Result<AgentId, AgentError> {
    let mut failures = 0;
    loop {
        match identify(config).await {
            Ok(id) => return Ok(id),
            Err(e) if e.is_auth() => return Err(AgentError::Refused(e)),
            Err(e) => {
                let delay = crate::backoff::jittered(
                    Duration::from_millis(500),
                    Duration::from_secs(30),
                    failures,
                );
                failures += 1;
                tracing::warn!(error = %warren_types::error_chain(&e), retry_in = ?delay, "cannot reach the relay");
                tokio::select! {
                    // Cancel-safe: a sleep holds no state.
                    _ = tokio::time::sleep(delay) => {}
                    // Cancel-safe: cancellation is level-triggered.
                    _ = shutdown.cancelled() => return Err(AgentError::Stopped),
                }
            }
        }
    }
}
