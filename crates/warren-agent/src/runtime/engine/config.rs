//! The engine runtime's configuration: where the engine and the state are, how builds and
//! the agent's own registry fetches may go; checked before anything is started.

use super::EngineError;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use warren_types::AgentId;

/// Configuration of the engine runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineConfig {
    /// The agent this runtime belongs to; every container, volume and network is labelled
    /// with it, and only those are listed.
    pub agent_id: AgentId,
    /// `unix:///path`, `tcp://host:port`; auto-detected when absent (`DOCKER_HOST`,
    /// `/var/run/docker.sock`, `/run/podman/podman.sock`,
    /// `$XDG_RUNTIME_DIR/podman/podman.sock`, then a `podman system service` of our own).
    #[serde(default)]
    pub host: Option<String>,
    /// Start our own `podman system service` even when another socket answers.
    #[serde(default)]
    pub own_podman_service: bool,
    /// Where Secret/ConfigMap files and per-workspace records live (created 0700).
    pub state_dir: PathBuf,
    /// Seconds a container gets to stop on SIGTERM before it is killed.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout_secs: u32,
    /// Where image pull secrets are kept, `<dir>/<name>.json` each (see `registry_auth`);
    /// `<state_dir>/pull-secrets` when absent.
    #[serde(default)]
    pub pull_secrets_dir: Option<PathBuf>,
    /// Whether workspaces may build images here (devfile `image` components). Builds run
    /// on the engine's default network, outside the workspaces' NetworkPolicies, with what
    /// the Dockerfile says; an agent whose engine should run only pulled images turns them
    /// off, and a build is then refused saying so.
    #[serde(default = "default_image_builds")]
    pub image_builds: bool,
    /// Where the certificates trusted for a registry are, `<dir>/<registry>/*.crt`, as
    /// Podman keeps them; `/etc/containers/certs.d` when absent. Used when the agent itself
    /// fetches from a registry (a dev container's Features).
    #[serde(default)]
    pub registry_certs_dir: Option<PathBuf>,
    /// Registries (`host[:port]`) the agent itself reaches over plain HTTP (a local mirror);
    /// every other one over HTTPS.
    #[serde(default)]
    pub plain_http_registries: Vec<String>,
    /// Special-purpose address ranges (loopback, private, …) the agent's own registry
    /// fetches may reach besides public addresses; the registries above and those with
    /// certificates in `registry_certs_dir` are trusted by name. Empty: no other.
    #[serde(default)]
    pub outbound_allow: Vec<ipnet::IpNet>,
    /// Where the engine reads Container Device Interface specifications (a machine class's
    /// devices); the specification's defaults, `/etc/cdi` and `/var/run/cdi`, which Podman
    /// reads, when absent. Docker's daemon may be configured with others (`cdi-spec-dirs`).
    #[serde(default = "default_cdi_dirs")]
    pub cdi_spec_dirs: Vec<PathBuf>,
}

fn default_cdi_dirs() -> Vec<PathBuf> {
    super::plan::cdi::SPEC_DIRS
        .iter()
        .map(PathBuf::from)
        .collect()
}

fn default_stop_timeout() -> u32 {
    10
}

fn default_image_builds() -> bool {
    true
}

impl EngineConfig {
    pub fn new(agent_id: AgentId, state_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            agent_id,
            host: None,
            own_podman_service: false,
            state_dir: state_dir.into(),
            stop_timeout_secs: default_stop_timeout(),
            pull_secrets_dir: None,
            image_builds: default_image_builds(),
            registry_certs_dir: None,
            plain_http_registries: vec![],
            outbound_allow: vec![],
            cdi_spec_dirs: default_cdi_dirs(),
        }
    }

    /// The directory of certificates trusted per registry.
    pub fn registry_certs_dir(&self) -> PathBuf {
        self.registry_certs_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/etc/containers/certs.d"))
    }

    /// The directory of image pull secrets in use.
    pub fn pull_secrets_dir(&self) -> PathBuf {
        self.pull_secrets_dir
            .clone()
            .unwrap_or_else(|| self.state_dir.join("pull-secrets"))
    }

    /// Checks the configuration before anything is bound or started.
    pub fn validate(&self) -> Result<(), EngineError> {
        if self.state_dir.as_os_str().is_empty() {
            return Err(EngineError::Config("state_dir must not be empty".into()));
        }
        if self.stop_timeout_secs > 600 {
            return Err(EngineError::Config(format!(
                "stop_timeout_secs is {}; at most 600 is allowed",
                self.stop_timeout_secs
            )));
        }
        for r in &self.plain_http_registries {
            if r.is_empty() || r.contains(['/', ' ']) || r.contains("://") {
                return Err(EngineError::Config(format!(
                    "plain_http_registries: {r:?} must be a registry's host[:port]"
                )));
            }
        }
        if let Some(h) = &self.host {
            if !(h.starts_with("unix://") || h.starts_with("tcp://") || h.starts_with("http://")) {
                return Err(EngineError::Config(format!(
                    "host {h:?} must start with unix://, tcp:// or http://"
                )));
            }
        }
        Ok(())
    }
}
