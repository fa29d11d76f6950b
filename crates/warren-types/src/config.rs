//! Per-agent configuration (lifecycle.md, desired-config.md): domain, quotas, policy, resources.
//!
//! Stored by the server with each agent, read by the renderer. Every field has the spec's
//! default so an empty document `{}` is a valid configuration; unknown fields are refused so
//! a typo in an operator's file is an error rather than a silently ignored setting.

use crate::reconcile::ImagePullSecretRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Hours after which any workspace is terminated, whatever the policy says.
pub const MAX_WORKSPACE_LIFE_HOURS: u32 = 8760;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Workspace hosts are `{port}-{workspace}.{workspace_domain}`; may carry a `:port`.
    pub workspace_domain: String,
    /// URL scheme users reach workspace hosts with (`http` for `*.localhost`, else `https`).
    pub workspace_scheme: String,
    /// The region whose proxy is its workspaces' front door (a DNS label, as that proxy's
    /// `--region` says). While one of the region's proxies serves, workspace URLs use its
    /// domain; otherwise they fall back to `workspace_domain` (the central proxy) with a
    /// notice. `None`: always the central proxy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Put every workspace in this namespace instead of `warren-ws-<name>`.
    pub shared_namespace: Option<String>,
    /// Max workspaces not desired `Terminated` on this agent; -1 unlimited, 0 blocks creation.
    pub workspaces_quota: i64,
    /// The same, per user.
    pub workspaces_per_user_quota: i64,
    pub lifecycle: LifecyclePolicy,
    /// Fill what a devfile container leaves out; devfile values win.
    pub default_resources_per_workspace_container: ResourceRequirements,
    /// Caps the sum over the workspace's containers; `None` means no cap.
    pub max_resources_per_workspace: Option<ResourceRequirements>,
    /// Added to every object's labels.
    pub labels: BTreeMap<String, String>,
    /// Added to every object's annotations.
    pub annotations: BTreeMap<String, String>,
    pub network_policy: NetworkPolicyConfig,
    pub image_pull_secrets: Vec<ImagePullSecretRef>,
    pub security: SecurityConfig,
    /// Size of the `warren-data` volume mounted at `/projects`.
    pub data_volume_size: String,
    /// The editor injected into every workspace (ui.md, "The editor in every workspace").
    pub editor: EditorConfig,
    /// Images to take from elsewhere: a devfile's image reference (exact, digest and all)
    /// or a prefix of it ending in `/` (`docker.io/`) → what to use instead, as an
    /// air-gapped site's mirror (`mirror.example/docker.io/`) or a local copy. The longest
    /// matching key wins; a prefix keeps the rest of the reference.
    pub image_mirrors: BTreeMap<String, String>,
    /// Who may reach its workspaces' ports, and share links (issue 41, item 4).
    pub ports: crate::sharing::PortPolicy,
    /// The sizes users pick from at create and resize (issue 41, item 3).
    pub machine_classes: Vec<crate::machine::MachineClass>,
    /// The class a workspace gets when its creator names none and gives no size; the
    /// first class when absent.
    pub default_machine_class: Option<String>,
    /// Whether users may still give a size in numbers (`--cpu`, `--memory`) instead of a
    /// class; only where classes are defined does `false` refuse them.
    pub custom_sizes: bool,
    /// Most weight (a class's `weight`, 1 for a workspace of no class) one user's
    /// running workspaces may add up to on this agent; -1 unlimited.
    pub weight_per_user_quota: i64,
}

impl AgentConfig {
    /// The class named `name`.
    pub fn machine_class(&self, name: &str) -> Option<&crate::machine::MachineClass> {
        self.machine_classes.iter().find(|c| c.name == name)
    }

    /// The class a workspace gets when its creator names none and gives no size.
    pub fn default_class(&self) -> Option<&crate::machine::MachineClass> {
        match &self.default_machine_class {
            Some(name) => self.machine_class(name),
            None => self.machine_classes.first(),
        }
    }

    /// `image` as this agent's workspaces pull it ([`AgentConfig::image_mirrors`]).
    pub fn mirrored_image(&self, image: &str) -> String {
        if let Some(to) = self.image_mirrors.get(image) {
            return to.clone();
        }
        self.image_mirrors
            .iter()
            .filter(|(from, _)| from.ends_with('/') && image.starts_with(from.as_str()))
            .max_by_key(|(from, _)| from.len())
            .map(|(from, to)| format!("{to}{}", &image[from.len()..]))
            .unwrap_or_else(|| image.to_owned())
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            workspace_domain: "ws.localhost".into(),
            workspace_scheme: "http".into(),
            region: None,
            shared_namespace: None,
            workspaces_quota: -1,
            workspaces_per_user_quota: -1,
            lifecycle: LifecyclePolicy::default(),
            default_resources_per_workspace_container: ResourceRequirements::default(),
            max_resources_per_workspace: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            network_policy: NetworkPolicyConfig::default(),
            image_pull_secrets: vec![],
            security: SecurityConfig::default(),
            data_volume_size: "20Gi".into(),
            editor: EditorConfig::default(),
            image_mirrors: BTreeMap::new(),
            ports: crate::sharing::PortPolicy::default(),
            machine_classes: vec![],
            default_machine_class: None,
            custom_sizes: true,
            weight_per_user_quota: -1,
        }
    }
}

/// The name of the editor endpoint added to every workspace that has one (devfiles cannot use
/// it: names starting `warren-` are Warren's).
pub const EDITOR_ENDPOINT: &str = "warren-editor";
/// What a workspace's own output last said about its editor (the startup script's
/// `warren: …` lines): that it started, or why it did not. `warren ws show` and the web UI's
/// workspace page show it.
pub fn editor_status(container_output: &[u8]) -> Option<String> {
    String::from_utf8_lossy(container_output)
        .lines()
        .filter_map(crate::startup::said)
        .rfind(|l| l.contains("editor") && !l.starts_with("startup of container "))
        // The workspace wrote it: no terminal control sequence reaches whoever reads it.
        .map(|l| l.chars().filter(|c| !c.is_control()).collect())
}

/// Annotation on a workspace's Deployment naming the port its editor listens on. On
/// Kubernetes the editor listens on the pod's loopback only, so no other pod reaches it
/// whatever the cluster's network does; the agent reaches it through the API server's port
/// forwarding.
pub const EDITOR_PORT_ANNOTATION: &str = "warren.dev/editor-port";

/// The script a workspace's renderer writes for its post-attach commands (a dev container's
/// `postAttachCommand`), in the main container's scripts volume; the agent runs it there
/// beside every terminal or SSH shell of that container.
pub const POST_ATTACH_SCRIPT: &str = "/warren/scripts/post-attach.sh";

/// Annotation on a workspace's Deployment: the name of its main container, where terminals,
/// SSH sessions, commands and logs go when no container is named. Not the pod's first
/// container always: a Compose dev container's services start before it.
pub const MAIN_CONTAINER_ANNOTATION: &str = "warren.dev/main-container";
/// Set by the engine runtime in a workspace's containers: the address the editor listens on.
/// Containers there are reached on their network's address (the firewall keeps every other
/// workspace out), where the editor would otherwise take the loopback.
pub const EDITOR_ADDRESS_ENV: &str = "WARREN_EDITOR_ADDRESS";

/// The pod volume holding the injected tools, and the init container that fills it.
pub const TOOLS_VOLUME: &str = "warren-tools";
/// Where the tools volume is mounted (read-only in the main container, writable only in the
/// init container that fills it).
pub const TOOLS_MOUNT_PATH: &str = "/warren/tools";
/// Where a tools image keeps its files: `install` (a `/bin/sh` script copying them into the
/// directory it is given) and one directory per tool (`code-server/`).
pub const TOOLS_IMAGE_ROOT: &str = "/warren-tools";
/// The editor Warren injects when the agent's configuration does not say.
pub const DEFAULT_EDITOR_VERSION: &str = "4.100.3";
/// The port the editor listens on unless the devfile uses it (Coder's choice for code-server).
pub const DEFAULT_EDITOR_PORT: u16 = 13337;

/// Which editor a workspace gets and where its files come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EditorConfig {
    /// `code-server` (VS Code in the browser) or `none` (no editor: terminal and the
    /// devfile's own endpoints only).
    pub name: EditorName,
    /// The editor's version; names the default tools image.
    pub version: String,
    /// The tools image the editor's files are copied from (by an init container on
    /// Kubernetes, once per image into a shared read-only volume on Docker/Podman); default
    /// `localhost/warren-tools:code-server-<version>`, as `warren tools build` makes it.
    pub image: Option<String>,
    /// The port the editor listens on inside the workspace; the next free one when the
    /// devfile declares an endpoint on it.
    pub port: u16,
    /// An extension gallery compatible with VS Code's (Open VSX's is
    /// `https://open-vsx.org/vscode/gallery`), where the editor installs the extensions a
    /// dev container names; none: those extensions are not installed, and the workspace's
    /// editor log says so.
    pub extensions_gallery: Option<String>,
}

impl Default for EditorConfig {
    fn default() -> Self {
        EditorConfig {
            name: EditorName::CodeServer,
            version: DEFAULT_EDITOR_VERSION.into(),
            image: None,
            port: DEFAULT_EDITOR_PORT,
            extensions_gallery: None,
        }
    }
}

impl EditorConfig {
    /// Whether workspaces get an editor.
    pub fn enabled(&self) -> bool {
        self.name != EditorName::None
    }

    /// The tools image: the configured one, else the one `warren tools build` tags.
    pub fn tools_image(&self) -> String {
        self.image
            .clone()
            .unwrap_or_else(|| default_tools_image(&self.version))
    }
}

/// The tag `warren tools build` gives the image of code-server `version`.
pub fn default_tools_image(version: &str) -> String {
    format!("localhost/warren-tools:code-server-{version}")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub enum EditorName {
    #[serde(rename = "code-server")]
    CodeServer,
    #[serde(rename = "none")]
    None,
}

impl EditorName {
    pub fn as_str(self) -> &'static str {
        match self {
            EditorName::CodeServer => "code-server",
            EditorName::None => "none",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LifecyclePolicy {
    pub max_active_hours_before_stop: u32,
    pub max_stopped_hours_before_termination: u32,
    /// Stop a workspace after this many minutes without user traffic; `None` is off.
    pub idle_timeout_minutes: Option<u32>,
    /// Start a workspace the idle timeout stopped when a request reaches it through the
    /// proxy (browsers see a "starting" page that continues to the workspace; other clients
    /// get 503 with `Retry-After`). A workspace its user stopped stays stopped.
    pub wake_on_request: bool,
}

impl Default for LifecyclePolicy {
    fn default() -> Self {
        LifecyclePolicy {
            max_active_hours_before_stop: 36,
            max_stopped_hours_before_termination: 744,
            idle_timeout_minutes: None,
            wake_on_request: true,
        }
    }
}

/// Kubernetes-style requests and limits of cpu and memory, as quantity strings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceRequirements {
    pub requests: ResourceList,
    pub limits: ResourceList,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ResourceList {
    pub cpu: Option<String>,
    pub memory: Option<String>,
}

/// The namespace of the shipped manifests (`deploy/kubernetes`).
pub const DEFAULT_AGENT_NAMESPACE: &str = "warren";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkPolicyConfig {
    pub enabled: bool,
    /// Egress allow-list; DNS (port 53 UDP/TCP) is always allowed.
    pub egress: Vec<EgressRule>,
    /// The namespace the agent's pods run in: only pods there labelled
    /// `warren.dev/component: agent` (a label tenants' objects may not carry) reach a
    /// workspace. Selected by `kubernetes.io/metadata.name`, which the API server sets.
    pub agent_namespace: String,
}

impl Default for NetworkPolicyConfig {
    fn default() -> Self {
        NetworkPolicyConfig {
            enabled: true,
            egress: vec![EgressRule {
                allow: "0.0.0.0/0".into(),
                except: vec![
                    "10.0.0.0/8".into(),
                    "172.16.0.0/12".into(),
                    "192.168.0.0/16".into(),
                ],
            }],
            agent_namespace: DEFAULT_AGENT_NAMESPACE.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    /// A CIDR.
    pub allow: String,
    #[serde(default)]
    pub except: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// The fixed non-root user every container runs as.
    pub run_as_user: i64,
    /// Group 0 so images built for arbitrary user ids work.
    pub run_as_group: i64,
    pub allow_privilege_escalation: bool,
    pub runtime_class_name: Option<String>,
    /// Run pods in a user namespace (`hostUsers: false`).
    pub use_user_namespaces: bool,
    /// Capabilities a workspace may add when its definition asks (a dev container's
    /// `capAdd`), each named (`SYS_PTRACE`); none by default. On Podman and Docker the
    /// workspace's processes get them; Kubernetes gives a non-root container's processes
    /// no added capability (no ambient set), so there they reach only the bounding set.
    pub allowed_capabilities: Vec<String>,
    /// Security options a workspace may run with when its definition asks (a dev
    /// container's `securityOpt`): `seccomp=unconfined`, `apparmor=unconfined`; none by
    /// default.
    pub allowed_security_options: Vec<String>,
}

impl SecurityConfig {
    /// Whether the admin allows capability `cap` (a name of
    /// [`crate::isolation::CAPABILITIES`]), however the list spells it.
    pub fn allows_capability(&self, cap: &str) -> bool {
        self.allowed_capabilities
            .iter()
            .any(|a| crate::isolation::capability(a) == Ok(cap))
    }

    /// Whether the admin allows security option `opt`, however the list spells it.
    pub fn allows_security_option(&self, opt: crate::isolation::SecurityOption) -> bool {
        self.allowed_security_options
            .iter()
            .any(|a| crate::isolation::SecurityOption::parse(a) == Ok(opt))
    }
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            run_as_user: 5001,
            run_as_group: 0,
            allow_privilege_escalation: false,
            runtime_class_name: None,
            use_user_namespaces: false,
            allowed_capabilities: Vec::new(),
            allowed_security_options: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_mirrored_by_reference_or_longest_prefix() {
        let c = AgentConfig {
            image_mirrors: BTreeMap::from([
                ("docker.io/".to_owned(), "mirror.local/hub/".to_owned()),
                (
                    "docker.io/library/".to_owned(),
                    "mirror.local/official/".to_owned(),
                ),
                (
                    "quay.io/x@sha256:ab".to_owned(),
                    "localhost/x:copy".to_owned(),
                ),
            ]),
            ..AgentConfig::default()
        };
        assert_eq!(
            c.mirrored_image("docker.io/library/redis:7"),
            "mirror.local/official/redis:7"
        );
        assert_eq!(
            c.mirrored_image("docker.io/bitnami/mongo"),
            "mirror.local/hub/bitnami/mongo"
        );
        assert_eq!(c.mirrored_image("quay.io/x@sha256:ab"), "localhost/x:copy");
        assert_eq!(c.mirrored_image("quay.io/y:1"), "quay.io/y:1");
    }

    #[test]
    fn the_editor_status_is_the_last_word_of_the_startup_on_it() {
        let output = b"server log line\nwarren: starting the editor (code-server 4.100.3) on port 13337, opening /projects/app\n\
                       more\nwarren: editor not started: image x has no glibc\n";
        assert_eq!(
            editor_status(output).as_deref(),
            Some("editor not started: image x has no glibc")
        );
        assert_eq!(editor_status(b"nothing about it\nwarren: other\n"), None);
    }

    #[test]
    fn empty_document_is_the_default_and_typos_are_refused() {
        let c: AgentConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(c, AgentConfig::default());
        assert_eq!(c.lifecycle.max_active_hours_before_stop, 36);
        let err = serde_json::from_str::<AgentConfig>(r#"{"workspace_quota": 3}"#).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `workspace_quota`"),
            "{err}"
        );
    }
}
