//! Bodies of the API's workspaces: creation, the workspace itself, its commands, its size and
//! how users reach it.

use super::*;

// ---- workspaces ----

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VariableKind {
    Env,
    File,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VariableInput {
    pub key: String,
    pub value: String,
    #[serde(default = "default_variable_kind")]
    pub kind: VariableKind,
    /// Secret values are encrypted at rest and never returned.
    #[serde(default)]
    pub secret: bool,
}

fn default_variable_kind() -> VariableKind {
    VariableKind::Env
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Variable {
    pub key: String,
    pub kind: VariableKind,
    pub secret: bool,
    /// `None` for secret variables.
    pub value: Option<String>,
}

/// A whole-workspace size, e.g. `{"cpu": "2", "memory": "4Gi"}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceResources {
    /// A machine class of the agent's, by name: its size, storage, devices and placement
    /// (with no `cpu` or `memory` beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    #[serde(default)]
    pub cpu: Option<String>,
    #[serde(default)]
    pub memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkspaceRequest {
    /// Project name or id; its devfile is used unless `devfile` is given.
    #[serde(default)]
    pub project: Option<String>,
    /// A devfile's text (YAML).
    #[serde(default)]
    pub devfile: Option<String>,
    /// Agent name or id; defaults to the only agent when there is exactly one.
    #[serde(default)]
    pub agent: Option<String>,
    /// Requested name; generated (`adjective-animal-xxxx`) when absent.
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub resources: Option<WorkspaceResources>,
    #[serde(default)]
    pub variables: Vec<VariableInput>,
    /// Git ref to check out instead of the project's (or the repository's) default.
    #[serde(default, rename = "ref")]
    pub git_ref: Option<String>,
    /// A Git repository to open without registering a project (the Gitpod and Codespaces
    /// habit): its URL (http, https, ssh or git; no credentials in it). The definition is
    /// read from it at `ref` (a devfile, else a dev container configuration, else the
    /// server's default devfile with the repository cloned), unless `devfile` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// With a project: the definition in its repository to run instead of the project's
    /// (a devfile, or a dev container configuration such as
    /// `.devcontainer/python/devcontainer.json` when the repository has several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub definition: Option<String>,
    /// Without a project: the devfile's starter project to clone, by name (default: its
    /// first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starter: Option<String>,
    /// Path of the space it goes to (where the caller is a developer or owner); the
    /// caller's personal space `users/<username>` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Workspace {
    pub id: WorkspaceId,
    pub name: String,
    pub namespace: String,
    pub owner: UserId,
    pub owner_username: String,
    /// Path of the space it lives in.
    #[serde(default)]
    pub space: String,
    pub agent: AgentId,
    pub agent_name: String,
    pub project: Option<ProjectId>,
    pub project_name: Option<String>,
    /// The Git repository it was opened from without a project (`warren ws create --repo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The branch, tag or commit its project or repository was checked out at (`None`: the
    /// repository's default branch).
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub desired_state_updated_at: DateTime<Utc>,
    /// When the actual state last changed (a failure newer than a request is that
    /// request's outcome; an older one is not).
    #[serde(default)]
    pub actual_state_updated_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Last use through the proxy (HTTP, WebSocket, terminal, SSH), as the idle timeout
    /// sees it; reported in batches, so up to a few seconds behind. `None`: never used.
    #[serde(default)]
    pub last_activity_at: Option<DateTime<Utc>>,
    /// URL of the main endpoint, when the devfile declares one.
    pub url: Option<String>,
    /// The workspace's web terminal on the proxy (also where `warren ws port-forward`
    /// connects).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal_url: Option<String>,
    /// The editor injected into the workspace (VS Code in the browser), when its agent
    /// injects one; also listed in `endpoints` as `warren-editor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub editor_url: Option<String>,
    /// Every declared endpoint: name → URL.
    pub endpoints: BTreeMap<String, String>,
    /// The region of its agent, and whether its URLs point at that region's proxy or (while
    /// none of the region's proxies serves) at the central one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<WorkspaceRegion>,
    /// Why the workspace is `Failed` or `Error`, in words a user can act on.
    pub failure_reason: Option<String>,
    /// Why a `Starting` workspace does not run yet although nothing failed: no node of the
    /// cluster can take its pod (its machine class's devices or node selector, the cluster's
    /// capacity), in the scheduler's words. It keeps waiting (a node may be added).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_reason: Option<String>,
    /// What a lifecycle timer will do to it next (stop or terminate it), when, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned: Option<PlannedChange>,
    /// Set while the workspace's agent cannot see its runtime: the states shown are the
    /// last ones it reported and may be out of date.
    #[serde(default)]
    pub agent_fault: Option<String>,
    /// Why this workspace is not isolated as its agent's configuration asks (see the
    /// agent's `isolation_warning`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_warning: Option<String>,
    /// What the caller may do with it (spec/mounts.md roles): `see`, `use` (start, stop,
    /// reach, logs, commands) or `manage` (also resize and terminate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub your_right: Option<WorkspaceRight>,
    pub resources: WorkspaceResources,
    pub variables: Vec<Variable>,
    /// Grows with every change of the workspace; `GET …?watch_version=` waits for it to move.
    #[serde(default)]
    pub version: i64,
    /// What Warren did with the workspace's devfile that its owner should know: parts it
    /// accepts without acting on them, choices it made (`path: message`). In the answers
    /// about one workspace (create, get), not in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The devfile's commands, runnable with `POST …/commands/{command}/run` (`warren ws
    /// run`). In the answers about one workspace (create, get), not in lists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<WorkspaceCommand>,
}

/// Which front door a workspace of a region is reached through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceRegion {
    /// The region's name (its agent's `region`).
    pub name: String,
    /// `true`: its URLs point at the region's proxy (traffic stays in the region); `false`:
    /// at the central proxy, because none of the region's proxies serves now.
    pub regional: bool,
    /// The region's SSH front door (`host:port`), when its proxy serves one and says where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_address: Option<String>,
    /// Why the central proxy is used instead, in words a user can act on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

/// One proxy as `GET /api/v1/proxies` shows it (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RegionProxy {
    /// The region it serves; `None`: a central proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Its workspace hosts' domain, with the port browsers use when not the scheme's.
    pub workspace_domain: String,
    pub public_scheme: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_address: Option<String>,
    pub started_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
    /// It said it serves within the last few seconds.
    pub serving: bool,
}

/// A region as an administrator registers it (`PUT /api/v1/regions/{name}`): the one door
/// its workspaces may be shown with. A regional proxy's presence only switches the region
/// on, and only while it says exactly this door.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// The domain of the region's workspace hosts, `host[:port]` (the port browsers use,
    /// when not the scheme's).
    pub workspace_domain: String,
    /// `https` (the default) or `http`.
    #[serde(default = "default_region_scheme")]
    pub public_scheme: String,
    /// The region's SSH front door, `host:port`; without it, SSH goes through the central
    /// proxy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_address: Option<String>,
}

fn default_region_scheme() -> String {
    "https".into()
}

/// A registered region as `GET /api/v1/regions` shows it (admins).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Region {
    pub name: String,
    pub workspace_domain: String,
    pub public_scheme: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_address: Option<String>,
    /// One of its proxies says it serves this door now.
    pub serving: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// What a lifecycle timer (its agent's limits, the idle timeout, its owner's working hours)
/// will do to a workspace next, unless it is used or its desired state changes first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlannedChange {
    /// `Stopped` or `Terminated`.
    pub desired_state: DesiredState,
    pub at: DateTime<Utc>,
    /// Why, in words a user can act on.
    pub reason: String,
    /// Whether using the workspace (a page, a terminal, SSH) postpones it.
    pub postponed_by_use: bool,
}

/// A command of a workspace's devfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WorkspaceCommand {
    /// The devfile's command id.
    pub id: String,
    /// `exec`, `apply` or `composite`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// `build`, `run`, `test`, `debug` or `deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// What it does, in a few words (`make test in runtime`, `build + deploy`).
    pub summary: String,
    /// Run by Warren at workspace start (`preStart`/`postStart` events).
    #[serde(default)]
    pub at_start: bool,
}

/// One line of the answer of `POST /api/v1/workspaces/{workspace}/commands/{command}/run`
/// (`application/x-ndjson`): the steps of the command as they start, their output and how
/// they end, then `done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CommandRunEvent {
    /// An exec or apply command (a step of a composite) starts.
    Started {
        command: String,
        kind: String,
        /// The component it runs on.
        component: String,
    },
    /// Output of a running step (text; bytes that are not UTF-8 are replaced).
    Output {
        command: String,
        stream: OutputStream,
        data: String,
    },
    /// A step ended: its exit code (`None` when unknown) and what went wrong.
    Finished {
        command: String,
        exit_code: Option<i32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The whole command ended: 0 when every step succeeded, else the first failure's code
    /// (1 when a step failed without one); `failed` names that step.
    Done {
        exit_code: i32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateDesiredStateRequest {
    pub desired_state: DesiredState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeWorkspaceRequest {
    pub resources: WorkspaceResources,
}

/// `POST /api/v1/workspaces/{name}/rebuild`: the workspace made again from its definition —
/// the request's devfile (or dev container configuration), else its project's at the
/// workspace's ref, else the one it was made from — keeping its volume and home. With
/// `dry_run`, only what would change is answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RebuildWorkspaceRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devfile: Option<String>,
    #[serde(default)]
    pub dry_run: bool,
}

/// How one part of a workspace's definition changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// One difference between a workspace's definition and another: a container, an endpoint,
/// a volume or the start-up commands, each told as a line of its settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DefinitionChange {
    /// `container dev`, `endpoint web`, `volume cache`, `events`.
    pub part: String,
    pub change: ChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// What a rebuild changes (or would change, for a dry run) and the workspace after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RebuildOutcome {
    /// Where the new definition was read from.
    pub source: String,
    pub changes: Vec<DefinitionChange>,
    /// The workspace was made again (restarted when it ran). False for a dry run.
    pub applied: bool,
    pub workspace: Workspace,
}

/// `GET /api/v1/access`: how users reach their workspaces besides the API (for the CLI's
/// `warren ws ssh` and `warren ws ssh-config`). Any authenticated user may ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AccessInfo {
    /// The proxy's SSH server; `None` when this installation offers no SSH.
    pub ssh: Option<SshEndpoint>,
}

/// Answer to an admin's rotation of the proxies' cookie-signing key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProxyKeyRotation {
    /// The new key's generation.
    pub generation: i64,
    /// When (unix seconds) replicas start signing with it; cookies signed with the previous
    /// key stay valid for one session lifetime after that.
    pub signing_from: i64,
}

/// Where the proxy's SSH server is reached: `ssh -p {port} {workspace}@{host}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SshEndpoint {
    pub host: String,
    pub port: u16,
    /// The server's host keys in OpenSSH form (`ssh-ed25519 AAAA…`), when the installation
    /// publishes them: clients pin these instead of trusting the first key they see.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_keys: Vec<String>,
}

/// The prefix of the `Host` names Warren's `ssh-config` blocks use (`warren-<workspace>`).
pub const SSH_HOST_PREFIX: &str = "warren-";

impl SshEndpoint {
    /// One OpenSSH `Host` block for `workspace`; with `known_hosts` (the file holding the
    /// pinned host keys, as OpenSSH should read its path), the host key is checked against
    /// that file only.
    pub fn host_block(&self, workspace: &str, known_hosts: Option<&str>) -> String {
        let mut block = format!(
            "Host {SSH_HOST_PREFIX}{workspace}\n    HostName {}\n    Port {}\n    User {workspace}\n",
            self.host, self.port
        );
        if let Some(file) = known_hosts {
            block.push_str(&format!(
                "    UserKnownHostsFile {file}\n    StrictHostKeyChecking yes\n"
            ));
        }
        block
    }

    /// The folder a desktop IDE opens in workspace `w`: its project's clone (or that of the
    /// repository it was opened from), else the sources root.
    pub fn folder(w: &Workspace) -> String {
        let cloned = w
            .project_name
            .clone()
            .or_else(|| w.repository.as_deref().map(crate::git::repository_folder));
        match cloned {
            Some(p) => format!("/projects/{p}"),
            None => "/projects".to_owned(),
        }
    }

    /// The link that has VS Code open `folder` of `workspace` over Remote-SSH, through the
    /// `Host` block `ssh-config --write` installs (`warren-<workspace>`).
    pub fn vscode_url(workspace: &str, folder: &str) -> String {
        format!("vscode://vscode-remote/ssh-remote+{SSH_HOST_PREFIX}{workspace}{folder}")
    }

    /// The link that has JetBrains Gateway connect over SSH and open `folder`: the host is the
    /// installed `Host` block's name (Gateway reads `~/.ssh/config` for its key and host key),
    /// the user and port as the block says.
    pub fn gateway_url(&self, workspace: &str, folder: &str) -> String {
        format!(
            "jetbrains-gateway://connect#type=ssh&deploy=false&host={SSH_HOST_PREFIX}{workspace}\
             &port={}&user={workspace}&projectPath={}",
            self.port,
            folder.replace('%', "%25").replace('/', "%2F")
        )
    }

    /// `known_hosts` lines for the published host keys (`[host]:port key`, or `host key` on
    /// port 22, as OpenSSH looks them up).
    pub fn known_hosts_lines(&self) -> Vec<String> {
        let name = if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        };
        self.host_keys
            .iter()
            .map(|k| format!("{name} {k}"))
            .collect()
    }

    /// Checks one OpenSSH public key line (`algorithm base64 [comment]`) and returns it
    /// without the comment.
    pub fn parse_host_key(line: &str) -> Result<String, String> {
        let mut words = line.split_whitespace();
        let (Some(algorithm), Some(data)) = (words.next(), words.next()) else {
            return Err("not an OpenSSH public key (`ssh-ed25519 AAAA… [comment]`)".into());
        };
        let algorithm_ok = !algorithm.is_empty()
            && algorithm
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '@'));
        let data_ok = data.len() >= 16
            && data
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='));
        if !algorithm_ok || !data_ok {
            return Err(format!(
                "{:?} is not an OpenSSH public key (`ssh-ed25519 AAAA… [comment]`)",
                line.chars().take(40).collect::<String>()
            ));
        }
        Ok(format!("{algorithm} {data}"))
    }

    /// Parses `host`, `host:port`, `[v6]:port` or a bare IPv6 address (port 22 when none).
    pub fn parse(address: &str) -> Result<SshEndpoint, String> {
        let bad = |why: &str| format!("{address:?} is not an SSH address (`host[:port]`): {why}");
        let (host, port) = if let Some(rest) = address.strip_prefix('[') {
            let (h, after) = rest.split_once(']').ok_or_else(|| bad("missing `]`"))?;
            match after {
                "" => (h, None),
                p => (
                    h,
                    Some(p.strip_prefix(':').ok_or_else(|| bad("junk after `]`"))?),
                ),
            }
        } else if address.matches(':').count() > 1 {
            (address, None)
        } else {
            match address.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (address, None),
            }
        };
        if host.is_empty()
            || host
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '@' | '/' | '"' | '\''))
        {
            return Err(bad("bad host"));
        }
        let port = match port {
            None => 22,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("bad port"))?,
        };
        Ok(SshEndpoint {
            host: host.to_owned(),
            port,
            host_keys: Vec::new(),
        })
    }
}
