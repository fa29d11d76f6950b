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
    /// `projects` (and `dependentProjects`): cloned or extracted under the sources root at
    /// the first start, beside the workspace's own project.
    #[serde(default)]
    pub projects: Vec<DevfileProject>,
    /// `starterProjects`: the first is cloned when the workspace has no project repository.
    #[serde(default)]
    pub starter_projects: Vec<DevfileProject>,
    /// What Warren accepted without acting on it, and the choices it made for the file.
    #[serde(default)]
    pub notices: Vec<Notice>,
    /// `image` components: images built from a Dockerfile, on demand (`apply` commands).
    #[serde(default)]
    pub images: Vec<ImageComponent>,
    /// `kubernetes` and `openshift` components: manifests applied on demand (`apply`
    /// commands).
    #[serde(default)]
    pub manifests: Vec<ManifestComponent>,
    /// Names that resolve to the workspace's pod itself ([`crate::HOST_ALIASES_ATTRIBUTE`]):
    /// its containers reach one another by them, as Compose services do by their names.
    #[serde(default)]
    pub host_aliases: Vec<String>,
    /// What the injected editor is given ([`crate::EDITOR_ATTRIBUTE`]): a dev container's
    /// `customizations.vscode`.
    #[serde(default)]
    pub editor: Option<EditorCustomizations>,
    /// Exec commands of the main container run whenever a session attaches (a terminal, an
    /// SSH shell, the editor starting): [`crate::POST_ATTACH_ATTRIBUTE`], a dev container's
    /// `postAttachCommand`.
    #[serde(default)]
    pub post_attach: Vec<String>,
    /// When the workspace is usable ([`crate::WAIT_FOR_ATTRIBUTE`]): after the main
    /// container's `postStart` command with this id, or after the sources are in place (`""`);
    /// `None`: after every command.
    #[serde(default)]
    pub wait_for: Option<String>,
    /// The `postStart` exec commands a prebuild runs ([`crate::PREBUILD_ATTRIBUTE`]), in
    /// `postStart`'s order.
    #[serde(default)]
    pub prebuild: Vec<String>,
    /// The least its machine must have ([`crate::HOST_REQUIREMENTS_ATTRIBUTE`], a dev
    /// container's `hostRequirements`): the machine class it gets when its creator names none.
    #[serde(default)]
    pub host_requirements: Option<warren_types::host_requirements::HostRequirements>,
}

/// Extensions and settings for the injected editor.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditorCustomizations {
    /// Extension ids (`publisher.name`, optionally `@version`), installed from the agent's
    /// extension gallery.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// `.vsix` files of the repository, by path from its root, installed as they are.
    #[serde(default)]
    pub vsix: Vec<String>,
    /// Settings, as `settings.json` holds them; the machine's, under the user's own.
    #[serde(default)]
    pub settings: serde_json::Map<String, serde_json::Value>,
}

/// An `image` component: an image to build from a Dockerfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageComponent {
    pub name: String,
    /// The name (and tag) the built image gets.
    pub image_name: String,
    /// The Dockerfile: a path relative to the project's sources, or an `http(s)` URL.
    pub dockerfile: String,
    /// The build context, relative to the project's sources (by default the sources root).
    pub build_context: String,
    /// `--build-arg` values, `NAME=value`.
    pub args: Vec<String>,
    /// Whether the build needs root (`rootRequired`).
    pub root_required: bool,
    /// Built before the workspace's containers start (`autoBuild`), from the workspace's
    /// project at its ref; otherwise on demand, by an `apply` command.
    pub auto_build: bool,
    /// The Dockerfile stage to build ([`crate::BUILD_TARGET_ATTRIBUTE`]); the last when
    /// `None`.
    pub target: Option<String>,
    /// A dev container's image: the Features installed on top, and the image to start from
    /// when there is no Dockerfile (`dockerfile` is then empty).
    /// ([`warren_types::features::FEATURES_ATTRIBUTE`]).
    #[serde(default)]
    pub features: Option<warren_types::features::FeatureBuild>,
}

impl ImageComponent {
    /// The build context relative to the project's sources (`.` for their root) and the
    /// Dockerfile relative to that context: what an engine's build is given. An error says
    /// why there is none (a Dockerfile at a URL, or outside the context).
    pub fn build_paths(&self) -> Result<(String, String), String> {
        if self.dockerfile.is_empty() {
            // A dev container's image with Features: no Dockerfile, so no context either.
            return Ok((".".into(), String::new()));
        }
        if self.dockerfile.starts_with("http://") || self.dockerfile.starts_with("https://") {
            return Err(format!(
                "image {}: building from a Dockerfile at a URL ({}) is not available yet; keep the Dockerfile in the project's sources",
                self.image_name, self.dockerfile
            ));
        }
        let context = under_sources(&self.build_context);
        let dockerfile = under_sources(&self.dockerfile);
        let inside = if context == "." {
            Some(dockerfile)
        } else {
            dockerfile
                .strip_prefix(&format!("{context}/"))
                .map(str::to_owned)
        };
        inside.map(|d| (context, d)).ok_or_else(|| {
            format!(
                "image {}: the Dockerfile {} is outside the build context {}; the engine only sees the context",
                self.image_name, self.dockerfile, self.build_context
            )
        })
    }
}

/// `path` relative to the project's sources (`${PROJECT_SOURCE}/x`, `./x` and `x` alike;
/// `.` for the root).
pub fn under_sources(path: &str) -> String {
    let p = path.strip_prefix("${PROJECT_SOURCE}").unwrap_or(path);
    let parts: Vec<&str> = p
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// A `kubernetes` or `openshift` component: objects to apply in the workspace's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestComponent {
    pub name: String,
    /// `kubernetes` or `openshift`.
    pub kind: String,
    pub source: ManifestSource,
    pub endpoints: Vec<DevfileEndpoint>,
}

/// Where a manifest component's objects are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ManifestSource {
    /// The YAML in the devfile (`inlined`).
    Inlined(String),
    /// A path relative to the project's sources, or an `http(s)` URL (`uri`).
    Uri(String),
}

/// A project the devfile names: where it comes from and where it goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevfileProject {
    pub name: String,
    /// Its directory under the sources root (`clonePath`; by default its name).
    pub clone_path: String,
    pub origin: ProjectOrigin,
    /// A starter project's directory to keep, the rest of the source dropped (`subDir`).
    pub sub_dir: Option<String>,
}

/// Where a project comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ProjectOrigin {
    /// A Git repository: the remote checked out (`checkoutFrom.remote`, or the only one) and
    /// the revision (`checkoutFrom.revision`: a branch, tag or commit; else the default
    /// branch).
    Git {
        url: String,
        revision: Option<String>,
    },
    /// A zip archive, downloaded and extracted.
    Zip { location: String },
}

/// Something of the devfile Warren accepts without acting on it, or a choice Warren made
/// for it: listed by `warren devfile validate` and with a created workspace, never dropped
/// in silence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notice {
    /// Where in the devfile (`components`, `starterProjects[0]`, …).
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

impl Devfile {
    /// A devfile with nothing in it (a base for partial values inside the parser).
    pub(crate) fn empty() -> Self {
        Devfile {
            schema_version: String::new(),
            metadata_name: None,
            variables: BTreeMap::new(),
            containers: Vec::new(),
            volumes: Vec::new(),
            commands: Vec::new(),
            pre_start: Vec::new(),
            post_start: Vec::new(),
            main: 0,
            projects: Vec::new(),
            starter_projects: Vec::new(),
            notices: Vec::new(),
            images: Vec::new(),
            manifests: Vec::new(),
            host_aliases: Vec::new(),
            editor: None,
            post_attach: Vec::new(),
            wait_for: None,
            prebuild: Vec::new(),
            host_requirements: None,
        }
    }

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

    /// The exec and apply commands `id` stands for, in order, composites expanded. Parsing
    /// guarantees the ids exist and composites do not nest in a cycle.
    pub fn leaf_commands(&self, id: &str) -> Vec<&Command> {
        let mut out = Vec::new();
        self.leaves_into(id, 0, &mut out);
        out
    }

    fn leaves_into<'a>(&'a self, id: &str, depth: usize, out: &mut Vec<&'a Command>) {
        let Some(cmd) = self.command(id) else { return };
        match &cmd.action {
            CommandAction::Composite { commands, .. } if depth < MAX_COMPOSITE_DEPTH => {
                for c in commands {
                    self.leaves_into(c, depth + 1, out);
                }
            }
            CommandAction::Composite { .. } => {}
            _ => out.push(cmd),
        }
    }
}

/// How deep composite commands may nest.
pub const MAX_COMPOSITE_DEPTH: usize = 8;

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
    /// [`crate::HEALTHCHECK_ATTRIBUTE`]: the containers after this one start once it passes.
    #[serde(default)]
    pub healthcheck: Option<Healthcheck>,
    /// [`crate::ISOLATION_ATTRIBUTE`]: what it asks beyond the locked-down context.
    #[serde(default)]
    pub isolation: IsolationExceptions,
}

/// Capabilities and security options a container asks for beyond the confinement of every
/// workspace container, in the engines' one spelling ([`warren_types::isolation`]); rendered
/// only when the agent's admin allows each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IsolationExceptions {
    /// Capability names without `CAP_` (`SYS_PTRACE`).
    #[serde(default)]
    pub cap_add: Vec<String>,
    /// `seccomp=unconfined`, `apparmor=unconfined`.
    #[serde(default)]
    pub security_opt: Vec<String>,
}

impl IsolationExceptions {
    pub fn is_empty(&self) -> bool {
        self.cap_add.is_empty() && self.security_opt.is_empty()
    }
}

/// A command that says whether a container's service is up (a Compose `healthcheck`): the
/// containers after it in the pod start once it succeeds, and the start fails when it has
/// not within `start_period + interval × retries` seconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Healthcheck {
    /// The program and its arguments.
    pub test: Vec<String>,
    pub interval_seconds: u32,
    pub timeout_seconds: u32,
    pub retries: u32,
    #[serde(default)]
    pub start_period_seconds: u32,
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
    /// Who may reach it (the attribute `warren.dev/visibility`); `None`: the agent's
    /// default for exposed endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<warren_types::sharing::PortVisibility>,
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
    /// Starts a container component (as an init container when used by `preStart`), builds
    /// an image component, or applies a kubernetes/openshift component.
    Apply { component: String },
    /// Runs other commands, one after another or all at once.
    Composite {
        commands: Vec<String>,
        parallel: bool,
    },
}

impl Command {
    /// The component an exec or apply command runs on; `None` for a composite.
    pub fn component(&self) -> Option<&str> {
        match &self.action {
            CommandAction::Exec { component, .. } | CommandAction::Apply { component } => {
                Some(component)
            }
            CommandAction::Composite { .. } => None,
        }
    }

    /// `exec`, `apply` or `composite`.
    pub fn kind(&self) -> &'static str {
        match &self.action {
            CommandAction::Exec { .. } => "exec",
            CommandAction::Apply { .. } => "apply",
            CommandAction::Composite { .. } => "composite",
        }
    }
}
