//! `warren agent`: connect to a relay with the agent token, build the chosen workspace runtime
//! and run the reconcile loop until Ctrl-C or SIGTERM.

use crate::relay_cmd::{read_secret, shutdown_on_signals};
use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use url::Url;
use warren_agent::connection::{identify, ConnectionConfig, RelayConnection};
use warren_agent::reconciler::{Reconciler, ReconcilerConfig};
use warren_agent::runtime::engine::{EngineConfig, EngineRuntime};
use warren_agent::runtime::kubernetes::{KubernetesOptions, KubernetesRuntime};
use warren_agent::runtime::WorkspaceRuntime;
use warren_types::AgentId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Docker or Podman through the Docker-compatible API.
    Engine,
    /// A Kubernetes cluster (in-cluster config or KUBECONFIG).
    Kubernetes,
}

#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// TOML file with any of the settings below (snake_case keys); flags and variables win.
    #[arg(long, env = "WARREN_AGENT_CONFIG")]
    config: Option<PathBuf>,
    /// The relay's agent listener, e.g. http://relay.example.com:7081.
    #[arg(long, env = "WARREN_RELAY_URL")]
    relay_url: Option<Url>,
    /// File holding the agent token (or set WARREN_AGENT_TOKEN).
    #[arg(long, env = "WARREN_AGENT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Which runtime runs the workspaces [default: engine].
    #[arg(long, env = "WARREN_AGENT_RUNTIME", value_enum)]
    runtime: Option<RuntimeKind>,
    /// Where the runtime keeps files it generates (mounted secrets) [default: ./warren-agent].
    #[arg(long, env = "WARREN_AGENT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// This agent's id; asked from the relay when absent.
    #[arg(long, env = "WARREN_AGENT_ID")]
    agent_id: Option<i64>,
    /// Output format of the management commands.
    #[command(flatten)]
    pub out: warren_cli::OutputArgs,
    /// Manage agents instead of running one.
    #[command(subcommand)]
    pub manage: Option<warren_cli::AgentCommand>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentFile {
    relay_url: Option<Url>,
    token_file: Option<PathBuf>,
    runtime: Option<RuntimeKind>,
    state_dir: Option<PathBuf>,
    agent_id: Option<i64>,
}

/// Builds the workspace runtime. The single place the binary chooses an implementation.
async fn make_runtime(
    kind: RuntimeKind,
    agent: AgentId,
    state_dir: &Path,
) -> anyhow::Result<Arc<dyn WorkspaceRuntime>> {
    match kind {
        RuntimeKind::Engine => {
            let config = EngineConfig::new(agent, state_dir);
            let runtime = EngineRuntime::connect(config)
                .await
                .context("connecting to the container engine")?;
            Ok(Arc::new(runtime))
        }
        RuntimeKind::Kubernetes => {
            let client = kube::Client::try_default()
                .await
                .context("connecting to Kubernetes (in-cluster configuration or KUBECONFIG)")?;
            Ok(Arc::new(KubernetesRuntime::new(
                client,
                agent,
                KubernetesOptions::default(),
            )))
        }
    }
}

/// Asks the relay for this agent's id, retrying until it answers or `shutdown` fires.
async fn discover_agent_id(
    config: &ConnectionConfig,
    shutdown: &CancellationToken,
) -> anyhow::Result<AgentId> {
    let mut delay = Duration::from_millis(500);
    loop {
        match identify(config).await {
            Ok(id) => return Ok(id),
            Err(e) if e.is_auth() => {
                return Err(anyhow::Error::new(e).context("the relay refused the agent token"))
            }
            Err(e) => {
                tracing::warn!(error = format!("{:#}", anyhow::Error::new(e)), retry_in = ?delay, "cannot reach the relay")
            }
        }
        tokio::select! {
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(delay) => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => bail!("stopped before the relay answered"),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let file = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            toml::from_str::<AgentFile>(&text)
                .with_context(|| format!("parsing {}", path.display()))?
        }
        None => AgentFile::default(),
    };
    let relay_url = args
        .relay_url
        .or(file.relay_url)
        .context("the relay URL is required: --relay-url, WARREN_RELAY_URL or relay_url")?;
    let token = match (
        std::env::var("WARREN_AGENT_TOKEN").ok(),
        args.token_file.or(file.token_file),
    ) {
        (_, Some(path)) => read_secret(&path, "agent token")?,
        (Some(t), None) if !t.is_empty() => t,
        _ => bail!(
            "the agent token is required: --token-file, WARREN_AGENT_TOKEN_FILE, \
             WARREN_AGENT_TOKEN or token_file"
        ),
    };
    let kind = args.runtime.or(file.runtime).unwrap_or(RuntimeKind::Engine);
    let state_dir = args
        .state_dir
        .or(file.state_dir)
        .unwrap_or_else(|| PathBuf::from("warren-agent"));
    let config = ConnectionConfig::new(relay_url, token);
    let shutdown = shutdown_on_signals();

    let agent = match args.agent_id.or(file.agent_id) {
        Some(id) => AgentId(id),
        None => discover_agent_id(&config, &shutdown).await?,
    };
    let runtime = make_runtime(kind, agent, &state_dir).await?;
    let connection = RelayConnection::new(config, runtime.clone())?;
    let reconciler = Reconciler::new(
        Arc::new(connection.clone()),
        runtime,
        ReconcilerConfig::default(),
    );
    tracing::info!(agent = %agent, runtime = ?kind, "agent starting");
    let conn_task = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { connection.run(shutdown).await }
    });
    let loop_task = tokio::spawn(reconciler.run(shutdown.clone()));
    let (c, l) = tokio::join!(conn_task, loop_task);
    c.context("the relay connection task panicked")?;
    l.context("the reconcile loop panicked")?;
    tracing::info!("agent stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_refuses_unknown_keys() {
        let err = toml::from_str::<AgentFile>("token = 'x'").unwrap_err();
        assert!(err.to_string().contains("unknown field `token`"), "{err}");
        let ok: AgentFile = toml::from_str("runtime = 'kubernetes'").unwrap();
        assert_eq!(ok.runtime, Some(RuntimeKind::Kubernetes));
    }
}
