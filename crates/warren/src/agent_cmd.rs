//! `warren agent`: connect to a relay with the agent token, build the chosen workspace runtime
//! and run the reconcile loop until Ctrl-C or SIGTERM.

use crate::relay_cmd::shutdown_on_signals;
use anyhow::Context;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use url::Url;
use warren_agent::connection::ConnectionConfig;
use warren_agent::leader::LeaderElectionConfig;
use warren_agent::reconciler::ReconcilerConfig;
use warren_agent::runtime::kubernetes::{BuildSettings, ComponentPolicy};
use warren_agent::{AgentConfig, RuntimeChoice};
use warren_types::AgentId;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
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
    #[command(flatten)]
    settings: AgentSettings,
    /// Output format of the management commands.
    #[command(flatten)]
    pub out: warren_cli::OutputArgs,
    /// Manage agents instead of running one.
    #[command(subcommand)]
    pub manage: Option<warren_cli::AgentCommand>,
}

/// The agent's settings, from flags and variables or from the file (every key optional,
/// unknown keys refused).
#[derive(Debug, Default, clap::Args, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct AgentSettings {
    /// The relay's agent listener, e.g. http://relay.example.com:7081.
    #[arg(long, env = "WARREN_RELAY_URL")]
    relay_url: Option<Url>,
    /// Address serving /metrics and /healthz for Prometheus and probes (none: not served).
    #[arg(long, env = "WARREN_AGENT_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// CA bundle (PEM) trusted for an https relay besides the public roots.
    #[arg(long, env = "WARREN_RELAY_CA_FILE", value_name = "FILE")]
    relay_ca_file: Option<PathBuf>,
    /// File holding the agent token (or set WARREN_AGENT_TOKEN).
    #[arg(long, env = "WARREN_AGENT_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    /// Which runtime runs the workspaces [default: engine].
    #[arg(long, env = "WARREN_AGENT_RUNTIME", value_enum)]
    runtime: Option<RuntimeKind>,
    /// Where the runtime keeps files it generates (mounted secrets) [default: ./warren-agent].
    #[arg(long, env = "WARREN_AGENT_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Whether devfile `image` components may build images on this agent's engine
    /// [default: true]; builds share the engine, so a site that does not trust its users'
    /// Dockerfiles turns them off.
    #[arg(long, env = "WARREN_AGENT_IMAGE_BUILDS", value_name = "BOOL")]
    image_builds: Option<bool>,
    /// Registries (host[:port], comma-separated) the agent itself reaches over plain HTTP
    /// when it fetches a dev container's Features (a local mirror); others over HTTPS,
    /// trusting `/etc/containers/certs.d/<registry>/*.crt` besides the public roots.
    #[arg(
        long,
        env = "WARREN_AGENT_PLAIN_HTTP_REGISTRIES",
        value_delimiter = ',',
        value_name = "REGISTRIES"
    )]
    plain_http_registries: Option<Vec<String>>,
    /// A special-purpose address range (loopback, private, link-local, …) the agent's own
    /// fetches of Features may reach (repeat, or comma-separate); the registries above and
    /// those with certificates in certs.d are trusted by name. None: public addresses only,
    /// so a configuration cannot make the agent reach what only it reaches.
    #[arg(
        long = "outbound-allow",
        env = "WARREN_AGENT_OUTBOUND_ALLOW",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    outbound_allow: Option<Vec<ipnet::IpNet>>,
    /// Kinds a devfile `kubernetes` component may apply, comma-separated (kubernetes
    /// runtime) [default: ConfigMap, Secret, PersistentVolumeClaim, Service, Pod, Deployment,
    /// StatefulSet, Job, CronJob; Ingress and Route publish a workspace past the proxy].
    #[arg(
        long,
        env = "WARREN_AGENT_COMPONENT_KINDS",
        value_delimiter = ',',
        value_name = "KINDS"
    )]
    component_kinds: Option<Vec<String>>,
    /// Service types a component's Service may have, comma-separated (kubernetes runtime)
    /// [default: ClusterIP]; external IPs are never allowed.
    #[arg(
        long,
        env = "WARREN_AGENT_COMPONENT_SERVICE_TYPES",
        value_delimiter = ',',
        value_name = "TYPES"
    )]
    component_service_types: Option<Vec<String>>,
    /// Where images built at a workspace's start (devfile `autoBuild`, a dev container's
    /// `build` and Features) are pushed for the cluster to pull, `host[:port][/path]`
    /// (kubernetes runtime; none: such workspaces are refused). The workspaces' image pull
    /// secrets must let the cluster pull from it.
    #[arg(long, env = "WARREN_AGENT_BUILD_REGISTRY", value_name = "REGISTRY")]
    build_registry: Option<String>,
    /// The Docker-compatible engine that builds them (`unix://…`, `tcp://…`) (kubernetes
    /// runtime) [default: found as the engine runtime finds one].
    #[arg(long, env = "WARREN_AGENT_BUILD_ENGINE", value_name = "URL")]
    build_engine: Option<String>,
    /// `namespace/name` of a kubernetes.io/dockerconfigjson Secret with the credentials for
    /// pushing to the build registry (kubernetes runtime) [default: push anonymously].
    #[arg(long, env = "WARREN_AGENT_BUILD_PUSH_SECRET", value_name = "SECRET")]
    build_push_secret: Option<String>,
    /// This agent's id; asked from the relay when absent.
    #[arg(long, env = "WARREN_AGENT_ID")]
    agent_id: Option<i64>,
    /// Run as one of several replicas: only the one holding a Kubernetes Lease works, the
    /// others take over when it stops renewing it (kubernetes runtime only).
    #[arg(
        long,
        env = "WARREN_AGENT_LEADER_ELECTION",
        value_name = "BOOL",
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    leader_election: Option<bool>,
    /// Namespace of the Lease [default: $POD_NAMESPACE, else warren].
    #[arg(long, env = "WARREN_AGENT_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the Lease [default: warren-agent-<agent id>].
    #[arg(long, env = "WARREN_AGENT_LEADER_ELECTION_LEASE")]
    leader_election_lease: Option<String>,
    /// This replica's name in the Lease [default: $POD_NAME, else the host name and a
    /// random suffix].
    #[arg(long, env = "WARREN_AGENT_LEADER_ELECTION_IDENTITY")]
    leader_election_identity: Option<String>,
    /// Seconds a Lease lasts without renewal: how long a dead leader's replacement waits
    /// [default: 15].
    #[arg(long, env = "WARREN_AGENT_LEADER_ELECTION_LEASE_SECONDS")]
    leader_election_lease_seconds: Option<u64>,
}

/// The admin's component lists, each defaulting on its own, checked before anything starts.
pub fn component_policy(
    kinds: Option<Vec<String>>,
    service_types: Option<Vec<String>>,
) -> anyhow::Result<ComponentPolicy> {
    let defaults = ComponentPolicy::default();
    let trim = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    };
    ComponentPolicy::new(
        kinds.map(trim).unwrap_or(defaults.kinds),
        service_types.map(trim).unwrap_or(defaults.service_types),
    )
    .map_err(|e| anyhow::anyhow!("the agent's component settings: {e}"))
}

/// The Kubernetes runtime's builder, when a build registry is set; checked before anything
/// starts.
pub fn build_settings(
    registry: Option<String>,
    engine: Option<String>,
    push_secret: Option<String>,
    state_dir: PathBuf,
    plain_http_registries: Vec<String>,
    outbound_allow: Vec<ipnet::IpNet>,
) -> anyhow::Result<Option<BuildSettings>> {
    let Some(registry) = registry.filter(|r| !r.trim().is_empty()) else {
        if engine.is_some() || push_secret.is_some() {
            anyhow::bail!(
                "build_engine and build_push_secret need build_registry: where the built \
                 images go"
            );
        }
        return Ok(None);
    };
    let settings = BuildSettings {
        engine,
        registry: registry.trim().to_owned(),
        push_secret,
        state_dir,
        plain_http_registries,
        outbound_allow,
    };
    settings
        .validate()
        .map_err(|e| anyhow::anyhow!("the agent's build settings: {e}"))?;
    Ok(Some(settings))
}

pub async fn run(args: AgentArgs) -> anyhow::Result<()> {
    let s: AgentSettings = crate::settings::layered(&args.settings, args.config.as_deref())?;
    let relay_url = s
        .relay_url
        .context("the relay URL is required: --relay-url, WARREN_RELAY_URL or relay_url")?;
    let token = crate::settings::secret("WARREN_AGENT_TOKEN", s.token_file, "agent token")?
        .context(
            "the agent token is required: --token-file, WARREN_AGENT_TOKEN_FILE, \
             WARREN_AGENT_TOKEN or token_file",
        )?;
    let kind = s.runtime.unwrap_or(RuntimeKind::Engine);
    let state_dir = s.state_dir.unwrap_or_else(|| PathBuf::from("warren-agent"));
    let mut connection = ConnectionConfig::new(relay_url, token);
    connection.relay_ca_file = s.relay_ca_file;
    if let Some(path) = &connection.relay_ca_file {
        // Named now rather than at the first dial.
        warren_tls::CaBundle::load(path).context("the relay's CA bundle")?;
    }
    let config = AgentConfig {
        connection,
        agent: s.agent_id.map(AgentId),
        runtime: match kind {
            RuntimeKind::Engine => RuntimeChoice::Engine {
                state_dir,
                image_builds: s.image_builds.unwrap_or(true),
                plain_http_registries: s.plain_http_registries.unwrap_or_default(),
                outbound_allow: s.outbound_allow.unwrap_or_default(),
            },
            RuntimeKind::Kubernetes => RuntimeChoice::Kubernetes {
                components: component_policy(s.component_kinds, s.component_service_types)?,
                builds: build_settings(
                    s.build_registry,
                    s.build_engine,
                    s.build_push_secret,
                    state_dir.join("builder"),
                    s.plain_http_registries.unwrap_or_default(),
                    s.outbound_allow.unwrap_or_default(),
                )?,
            },
        },
        reconciler: ReconcilerConfig::default(),
        leader_election: s
            .leader_election
            .unwrap_or(false)
            .then(|| LeaderElectionConfig {
                namespace: s
                    .leader_election_namespace
                    .or_else(|| {
                        std::env::var("POD_NAMESPACE")
                            .ok()
                            .filter(|s| !s.is_empty())
                    })
                    .unwrap_or_else(|| "warren".into()),
                lease_name: s.leader_election_lease.unwrap_or_default(),
                identity: s
                    .leader_election_identity
                    .or_else(|| std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()))
                    .unwrap_or_else(default_identity),
                lease_duration: std::time::Duration::from_secs(
                    s.leader_election_lease_seconds.unwrap_or(15),
                ),
            }),
    };
    let shutdown = shutdown_on_signals();
    // Before anything is recorded: what is recorded without a recorder is lost.
    warren_metrics::handle();
    let metrics = match s.metrics_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the agent's metrics listener to {addr}"))?;
            tracing::info!(%addr, "agent metrics listening");
            Some(listener)
        }
        None => None,
    };
    warren_agent::run(config, metrics, shutdown).await?;
    Ok(())
}

/// Outside a pod: the host name plus a random suffix, so two replicas on one host differ.
fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default();
    let host = if host.is_empty() {
        "agent".into()
    } else {
        host
    };
    format!("{host}-{:08x}", rand::random::<u32>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_refuses_unknown_keys() {
        let err = toml::from_str::<AgentSettings>("token = 'x'").unwrap_err();
        assert!(err.to_string().contains("unknown field `token`"), "{err}");
        let ok: AgentSettings = toml::from_str("runtime = 'kubernetes'").unwrap();
        assert_eq!(ok.runtime, Some(RuntimeKind::Kubernetes));
    }

    #[test]
    fn build_settings_need_a_valid_registry() {
        let none = build_settings(None, None, None, "s".into(), vec![], vec![]).unwrap();
        assert!(none.is_none());
        let e = build_settings(
            None,
            Some("unix:///run/podman.sock".into()),
            None,
            "s".into(),
            vec![],
            vec![],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("need build_registry"), "{e:#}");
        let e = build_settings(
            Some("https://r.example.com".into()),
            None,
            None,
            "s".into(),
            vec![],
            vec![],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("without a scheme"), "{e:#}");
        let e = build_settings(
            Some("r.example.com".into()),
            None,
            Some("builds".into()),
            "s".into(),
            vec![],
            vec![],
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("namespace/name"), "{e:#}");
        let ok = build_settings(
            Some("r.example.com:5000/builds".into()),
            None,
            Some("warren/push".into()),
            "s".into(),
            vec![],
            vec![],
        )
        .unwrap()
        .unwrap();
        assert_eq!(ok.registry, "r.example.com:5000/builds");
        let file: AgentSettings = toml::from_str("build_registry = 'r.example.com'").unwrap();
        assert_eq!(file.build_registry.as_deref(), Some("r.example.com"));
    }

    #[test]
    fn component_settings_default_apart_and_name_what_is_unknown() {
        let p = component_policy(None, None).unwrap();
        assert!(p.kinds.contains(&"Deployment".to_owned()));
        assert!(!p.kinds.contains(&"Ingress".to_owned()));
        assert_eq!(p.service_types, ["ClusterIP"]);
        let file: AgentSettings =
            toml::from_str("component_kinds = ['ConfigMap', 'Ingress']\ncomponent_service_types = ['ClusterIP', 'NodePort']").unwrap();
        let p = component_policy(file.component_kinds, file.component_service_types).unwrap();
        assert_eq!(p.kinds, ["ConfigMap", "Ingress"]);
        assert_eq!(p.service_types, ["ClusterIP", "NodePort"]);
        let e = component_policy(Some(vec!["ClusterRole".into()]), None).unwrap_err();
        assert!(format!("{e:#}").contains("\"ClusterRole\""), "{e:#}");
        let e = component_policy(None, Some(vec!["Headless".into()])).unwrap_err();
        assert!(format!("{e:#}").contains("\"Headless\""), "{e:#}");
    }
}
