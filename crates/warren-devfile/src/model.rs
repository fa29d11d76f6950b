//! The validated devfile: only what Warren honours, with defaults applied and variables substituted.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A devfile that passed every check of [`crate::parse_devfile`]; rendering it cannot fail for
/// devfile reasons (only agent caps and request values can refuse it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Devfile {
    pub schema_version: String,
    pub metadata_name: Option<String>,
    /// The devfile's own `variables` (already substituted into every other string).
    pub variables: BTreeMap<String, String>,
    /// Container components in devfile order, including init-only ones.
    pub containers: Vec<Container>,
    pub volumes: Vec<Volume>,
    pub commands: Vec<Command>,
    /// Command ids of `events.preStart`, in order.
    pub pre_start: Vec<String>,
    /// Command ids of `events.postStart`, in order.
    pub post_start: Vec<String>,
    /// Index into `containers` of the main container.
    pub main: usize,
}

impl Devfile {
    /// # Panics
    ///
    /// Only on a `Devfile` not made by [`crate::parse_devfile`] (e.g. deserialized from
    /// altered data) whose `main` is out of range.
    pub fn main_container(&self) -> &Container {
        &self.containers[self.main]
    }

    pub fn command(&self, id: &str) -> Option<&Command> {
        self.commands.iter().find(|c| c.id == id)
    }

    pub fn container(&self, name: &str) -> Option<&Container> {
        self.containers.iter().find(|c| c.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<EnvVar>,
    pub cpu_request: Option<String>,
    pub cpu_limit: Option<String>,
    pub memory_request: Option<String>,
    pub memory_limit: Option<String>,
    pub mount_sources: bool,
    /// Where the project sources (the `warren-data` volume) are mounted; default `/projects`.
    pub source_mapping: String,
    pub endpoints: Vec<DevfileEndpoint>,
    pub volume_mounts: Vec<VolumeMount>,
    pub deployment_annotations: BTreeMap<String, String>,
    pub service_annotations: BTreeMap<String, String>,
    /// Applied by a `preStart` event: runs as an init container only, not in the pod's main set.
    pub init_only: bool,
    pub main: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevfileEndpoint {
    pub name: String,
    pub target_port: u16,
    pub exposure: Exposure,
    pub protocol: Protocol,
    pub path: Option<String>,
    pub secure: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Exposure {
    Public,
    Internal,
    None,
}

impl Exposure {
    pub fn as_str(self) -> &'static str {
        match self {
            Exposure::Public => "public",
            Exposure::Internal => "internal",
            Exposure::None => "none",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Http,
    Https,
    Ws,
    Wss,
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Ws => "ws",
            Protocol::Wss => "wss",
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeMount {
    /// A volume component's name.
    pub name: String,
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub size: Option<String>,
    /// Lives as long as the pod (an `emptyDir`), not a PersistentVolumeClaim.
    pub ephemeral: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub id: String,
    pub label: Option<String>,
    /// `build`, `run`, `test`, `debug` or `deploy`.
    pub group: Option<String>,
    pub action: CommandAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandAction {
    Exec {
        component: String,
        command_line: String,
        working_dir: Option<String>,
        env: Vec<EnvVar>,
    },
    /// Starts a container component (as an init container when used by `preStart`).
    Apply { component: String },
}

impl Command {
    pub fn component(&self) -> &str {
        match &self.action {
            CommandAction::Exec { component, .. } | CommandAction::Apply { component } => component,
        }
    }
}
