//! The `warren` user commands: login, tokens, keys, agents, projects, workspaces, devfiles.
//!
//! The binary flattens [`Command`] into its top-level commands and calls [`main`] with a
//! factory of its whole `clap::Command` (for `warren completions`). Every command except
//! `devfile` and `completions` talks only to the REST API through `warren-client`.
//!
//! Exit codes (also in [`EXIT_CODES_HELP`], shown by `warren --help`):
//! 0 success; 1 the request failed (API error, not found, workspace failed, `--wait` timed
//! out, invalid devfile); 2 usage (bad arguments or input files); 3 the server could not be
//! reached or answered something that is not the API; 4 not signed in or the token was refused.

mod commands;
pub mod credentials;
mod devfile_cmd;
mod gitops_cmd;
pub mod input;
pub mod open_cmd;
pub mod output;
mod port_forward_cmd;
mod run_cmd;
pub mod ssh_cmd;
pub mod wait;

use clap::{Args, Subcommand};
use input::KeyValue;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use warren_types::ActualState;

pub use output::Format;

/// Text for the binary's `after_long_help`.
pub const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  the request failed: API error, not found, workspace Failed/Error, --wait timed out,
     invalid devfile
  2  usage: bad arguments or unreadable input files
  3  the Warren server could not be reached or did not answer like Warren
  4  not signed in, or the server refused the token (run `warren login`)

Environment: WARREN_HOME (credentials.toml lives there), WARREN_URL and WARREN_TOKEN
(override the stored server URL and token, for scripts and CI).";

/// The user commands, flattened into the binary's top level.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sign in to a Warren server and remember its URL and a token.
    Login(LoginArgs),
    /// Forget the stored credentials and revoke the token `warren login` created.
    Logout,
    /// Show the signed-in user.
    Whoami(OutputArgs),
    /// Personal access tokens.
    Token(TokenGroup),
    /// SSH public keys for reaching workspaces over SSH.
    #[command(name = "ssh-key")]
    SshKey(SshKeyGroup),
    /// Agents, one per cluster or container-engine host (admin). Not parsed here: the
    /// binary's `warren agent` is also the agent service, so it parses these commands itself
    /// and hands them back through this variant.
    #[command(skip)]
    Agent(AgentGroup),
    /// Projects: a git repository and its devfile.
    Project(ProjectGroup),
    /// Spaces: the tree workspaces live in (`acme/platform`; yours is `users/<you>`).
    Space(SpaceGroup),
    /// Mounts: entries of the tree Warren does not run (redirects and softlinks today).
    Mount(MountGroup),
    /// Workspaces.
    #[command(visible_alias = "workspace")]
    Ws(WsGroup),
    /// Users (admin).
    User(UserGroup),
    /// Change your own password.
    Passwd(PasswdArgs),
    /// Your dotfiles repository, installed into the home of your new workspaces.
    Dotfiles(DotfilesGroup),
    /// OAuth clients of the server's sign-in (admin): the proxy's, or a third-party tool's.
    #[command(name = "oauth-client")]
    OAuthClient(OAuthClientGroup),
    /// GitOps (admin): repositories the relays read for agents, and the policy capping sources.
    Gitops(GitopsGroup),
    /// Check and render devfiles locally, without a server.
    Devfile(DevfileGroup),
    /// Print a shell completion script.
    Completions(CompletionsArgs),
}

/// `-o/--output`, accepted anywhere after the command group.
#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Output format: a table for people, or the API's JSON/YAML for scripts.
    #[arg(
        short = 'o',
        long = "output",
        value_enum,
        default_value_t,
        global = true
    )]
    pub output: Format,
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// Base URL of the Warren server, e.g. https://warren.example.com.
    #[arg(long, env = credentials::URL_ENV)]
    pub url: String,
    /// Username (prompted for when a terminal is attached).
    #[arg(long, short = 'u')]
    pub username: Option<String>,
    /// Read a personal access token from standard input instead of using a password.
    #[arg(long, conflicts_with_all = ["password_stdin", "username"])]
    pub token_stdin: bool,
    /// Read the password from standard input (first line) instead of prompting.
    #[arg(long)]
    pub password_stdin: bool,
}

#[derive(Debug, Args)]
pub struct TokenGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: TokenCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum ScopeArg {
    Api,
    ReadApi,
    Workspace,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; its secret is printed once, on standard output.
    Create {
        name: String,
        /// What the token may do (repeatable); default: api (the REST API only). Workspace
        /// URLs (`curl -H "Authorization: Bearer …"`) and SSH need `--scope workspace`.
        #[arg(long = "scope", value_enum)]
        scopes: Vec<ScopeArg>,
        /// Days until it expires (server default 30, at most 365).
        #[arg(long)]
        expires_in_days: Option<u32>,
    },
    /// List your tokens.
    #[command(visible_alias = "ls")]
    List,
    /// Revoke a token by id.
    Revoke { id: i64 },
}

#[derive(Debug, Args)]
pub struct SshKeyGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: SshKeyCommand,
}

#[derive(Debug, Subcommand)]
pub enum SshKeyCommand {
    /// Add an OpenSSH public key from FILE, or from standard input with `-`.
    Add {
        file: PathBuf,
        /// Name shown in lists (default: the key's comment).
        #[arg(long)]
        name: Option<String>,
    },
    /// List your SSH keys.
    #[command(visible_alias = "ls")]
    List,
    /// Remove a key by id.
    #[command(visible_alias = "remove")]
    Rm { id: i64 },
}

#[derive(Debug, Args)]
pub struct AgentGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: AgentCommand,
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Register an agent; its token is printed once, on standard output.
    Create {
        name: String,
        /// Agent configuration (AgentConfig) as TOML, YAML or JSON, by file extension.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// List agents.
    #[command(visible_alias = "ls")]
    List,
    /// Show one agent and its configuration.
    Show { name: String },
    /// Replace an agent's configuration.
    Update {
        name: String,
        #[arg(long)]
        config: PathBuf,
    },
    /// Give the agent a new token (printed once); the old one stops working (relays may
    /// accept new connections with it for up to their auth cache, 300 s by default).
    ResetToken { name: String },
    /// The agent's GitOps sources: what it keeps in sync with Git.
    Gitops {
        #[command(subcommand)]
        cmd: AgentGitopsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum AgentGitopsCommand {
    /// Replace the agent's sources with those of a file (`sources:` list; YAML, or JSON by
    /// extension). Every problem is reported at once, naming its field.
    #[command(after_help = "Example sources.yaml:\n  \
        sources:\n    \
          - name: platform\n      \
            repository: platform-config\n      \
            ref: main\n      \
            paths: [\"deploy/**/*.yaml\"]\n      \
            mode: namespaced\n      \
            namespace: team-a\n      \
            kinds: { deny: [\"v1/Secret\"] }\n      \
            prune: true\n      \
            interval: 60s")]
    Set {
        agent: String,
        /// The file; `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Show the agent's sources.
    Show { agent: String },
    /// What the agent last reported for each source: commit, counts, errors, health.
    Status { agent: String },
}

#[derive(Debug, Args)]
pub struct GitopsGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: GitopsCommand,
}

#[derive(Debug, Subcommand)]
pub enum GitopsCommand {
    /// Git repositories the relays read on the agents' behalf.
    #[command(visible_alias = "repository")]
    Repo {
        #[command(subcommand)]
        cmd: RepoCommand,
    },
    /// The policy every source is held to.
    Policy {
        #[command(subcommand)]
        cmd: PolicyCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum RepoCommand {
    /// Register a repository; credentials and webhook secret are stored encrypted.
    #[command(after_help = "Examples:\n  \
        echo \"$TOKEN\" | warren gitops repo add platform --url https://git.example.com/ops/platform.git --token-stdin --generate-webhook-secret\n  \
        warren gitops repo add platform --url ssh://git@git.example.com/ops/platform.git --ssh-key deploy_key --known-hosts known_hosts")]
    Add {
        name: String,
        /// https://, http://, ssh://, git:// or file:// URL, without credentials in it.
        #[arg(long)]
        url: String,
        #[command(flatten)]
        credential: CredentialArgs,
        /// Read the webhook secret from standard input.
        #[arg(long, conflicts_with_all = ["generate_webhook_secret", "token_stdin", "password_stdin"])]
        webhook_secret_stdin: bool,
        /// Generate a webhook secret and print it once, to give the forge.
        #[arg(long)]
        generate_webhook_secret: bool,
    },
    /// List repositories.
    #[command(visible_alias = "ls")]
    List,
    /// Show one repository and the sources using it.
    Show { name: String },
    /// Remove a repository no source uses.
    #[command(visible_alias = "remove")]
    Rm { name: String },
    /// Set or remove the repository's credential.
    Credential {
        #[command(subcommand)]
        cmd: CredentialCommand,
    },
    /// Set, generate or remove the secret push webhooks are checked with.
    WebhookSecret {
        name: String,
        /// Read the new secret from standard input.
        #[arg(long, conflicts_with_all = ["generate", "remove"])]
        stdin: bool,
        /// Generate a secret and print it once.
        #[arg(long, conflicts_with = "remove")]
        generate: bool,
        /// Remove the secret: webhooks for this repository are refused.
        #[arg(long)]
        remove: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Show the policy.
    Show,
    /// Replace the policy with a file (`deny:` kind patterns, `allow_cluster_mode:`).
    Set {
        /// The file (YAML, or JSON by extension); `-` reads standard input.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct ProjectGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: ProjectCommand,
}

#[derive(Debug, Subcommand)]
pub enum ProjectCommand {
    /// Register a project (you become its maintainer).
    #[command(after_help = "Examples:\n  \
        echo \"$TOKEN\" | warren project create app --git-url https://git.example.com/team/app.git --token-stdin\n  \
        warren project create app --git-url git@git.example.com:team/app.git --ssh-key ~/.ssh/deploy_key")]
    Create {
        name: String,
        /// The repository, without credentials in it (see the credential options).
        #[arg(long)]
        git_url: String,
        /// Default branch, tag or commit.
        #[arg(long = "ref")]
        git_ref: Option<String>,
        /// Where the devfile lives in the repository (default .devfile.yaml); the server
        /// reads it when a workspace is created.
        #[arg(long)]
        devfile_path: Option<String>,
        /// Store this devfile with the project instead of reading the repository's.
        #[arg(long)]
        devfile: Option<PathBuf>,
        /// Who may see and use it: `private` (members and admins, the default) or
        /// `internal` (every signed-in user).
        #[arg(long, value_parser = ["private", "internal"])]
        visibility: Option<String>,
        #[command(flatten)]
        credential: CredentialArgs,
    },
    /// List the projects you may see.
    #[command(visible_alias = "ls")]
    List,
    /// Show one project.
    Show { name: String },
    /// Change a project's visibility, default ref or devfile path (maintainers).
    Update {
        name: String,
        #[arg(long = "ref")]
        git_ref: Option<String>,
        #[arg(long)]
        devfile_path: Option<String>,
        #[arg(long, value_parser = ["private", "internal"])]
        visibility: Option<String>,
    },
    /// The repository credential (maintainers): stored encrypted, never shown.
    Credential {
        #[command(subcommand)]
        cmd: CredentialCommand,
    },
    /// Who may use the project.
    Member {
        #[command(subcommand)]
        cmd: MemberCommand,
    },
    /// Delete a project (maintainers).
    #[command(visible_alias = "remove")]
    Rm { name: String },
}

/// How to authenticate to a repository: at most one of a token, a password or an SSH key.
#[derive(Debug, Clone, Default, Args)]
pub struct CredentialArgs {
    /// Read an access token from standard input (sent as the password over HTTPS).
    #[arg(long, conflicts_with_all = ["password_stdin", "ssh_key"])]
    pub token_stdin: bool,
    /// Username for --password-stdin (or sent with --token-stdin; default oauth2).
    #[arg(long)]
    pub username: Option<String>,
    /// Read a password from standard input (with --username).
    #[arg(long, requires = "username", conflicts_with = "ssh_key")]
    pub password_stdin: bool,
    /// A private key file for ssh:// and user@host:path URLs.
    #[arg(long)]
    pub ssh_key: Option<PathBuf>,
    /// known_hosts lines for the Git server (without them the first key seen is trusted).
    #[arg(long, requires = "ssh_key")]
    pub known_hosts: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum CredentialCommand {
    /// Set or replace the credential (stored encrypted, never shown); a project's
    /// workspaces get it without a restart.
    Set {
        name: String,
        #[command(flatten)]
        credential: CredentialArgs,
    },
    /// Remove the credential.
    #[command(visible_alias = "remove")]
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// List members.
    #[command(visible_alias = "ls")]
    List { project: String },
    /// Add a member, or change their role (maintainers).
    Add {
        project: String,
        user: String,
        #[arg(long, default_value = "developer", value_parser = ["developer", "maintainer"])]
        role: String,
    },
    /// Remove a member (maintainers; anyone may leave).
    #[command(visible_alias = "remove")]
    Rm { project: String, user: String },
}

#[derive(Debug, Args)]
pub struct SpaceGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: SpaceCommand,
}

#[derive(Debug, Args)]
pub struct MountGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: MountCommand,
}

#[derive(Debug, Subcommand)]
pub enum MountCommand {
    /// Create a mount: a redirect to another entry (`--ref`) or to a URL (`--url`), a
    /// softlink to a workspace (`--type workspace --ref WS`, with its owner's grant), or a
    /// machine attached with `warren connect` (`--type proxy --connector`: its token is
    /// shown once).
    #[command(
        after_help = "Examples:\n  warren mount create old-name --type redirect --ref new-name\n  warren mount create elsewhere --type redirect --url https://8080-ws.other.example/ --space acme\n  warren mount create gpu-box --type proxy --connector --space acme/platform"
    )]
    Create {
        /// The entry's name (a host name label, unique among workspaces and mounts).
        name: String,
        /// redirect, workspace (a softlink) or proxy (with --connector).
        #[arg(long = "type", value_name = "TYPE")]
        mount_type: String,
        /// The entry it stands for.
        #[arg(long = "ref", value_name = "ENTRY", conflicts_with = "url")]
        reference: Option<String>,
        /// The URL it stands for (http or https).
        #[arg(long)]
        url: Option<String>,
        /// For a proxy mount: the agent that reaches the URL.
        #[arg(long, value_name = "AGENT")]
        via: Option<String>,
        /// For a proxy mount: backed by `warren connect` on an existing machine.
        #[arg(long, conflicts_with_all = ["url", "via", "reference"])]
        connector: bool,
        /// The space to put it in (default: your personal space).
        #[arg(long)]
        space: Option<String>,
    },
    /// List the mounts you may see.
    #[command(visible_alias = "ls")]
    List,
    /// Show one mount and its status.
    Show { name: String },
    /// Remove a mount.
    #[command(visible_alias = "remove")]
    Rm { name: String },
}

#[derive(Debug, Subcommand)]
pub enum SpaceCommand {
    /// Create a space: top-level ones as an admin, others as an owner of the space above.
    #[command(
        after_help = "Examples:\n  warren space create acme\n  warren space create acme/platform"
    )]
    Create { path: String },
    /// The spaces you hold a role on (every space, for an admin).
    #[command(visible_alias = "ls")]
    List,
    /// Show one space.
    Show { path: String },
    /// Remove an empty space (its owners, or an admin).
    #[command(visible_alias = "remove")]
    Rm { path: String },
    /// Members and their roles, which hold for every space below.
    Member {
        #[command(subcommand)]
        cmd: SpaceMemberCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum SpaceMemberCommand {
    /// List the members of a space (those holding a role on it directly).
    #[command(visible_alias = "ls")]
    List { path: String },
    /// Give a user a role on a space (its owners, or an admin).
    Add {
        path: String,
        user: String,
        #[arg(long, default_value = "developer", value_parser = ["viewer", "developer", "owner"])]
        role: String,
    },
    /// Take a user's role on a space away.
    #[command(visible_alias = "remove")]
    Rm { path: String, user: String },
}

#[derive(Debug, Args)]
pub struct WsGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: WsCommand,
}

/// `--wait` and `--timeout`.
#[derive(Debug, Clone, Args)]
pub struct WaitArgs {
    /// Wait until the workspace reaches the state the command aims at.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits, e.g. 90s, 5m, 1h.
    #[arg(long, default_value = "5m", value_parser = input::duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct WsCreateArgs {
    /// Project (name or id) whose devfile and repository the workspace uses.
    #[arg(long)]
    pub project: Option<String>,
    /// A devfile to use instead of the project's (or the server's default); `-` for stdin.
    #[arg(long)]
    pub devfile: Option<PathBuf>,
    /// Agent (name or id); default: the only agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Workspace name; generated when absent.
    #[arg(long)]
    pub name: Option<String>,
    /// Git ref to check out instead of the project's default.
    #[arg(long = "ref")]
    pub git_ref: Option<String>,
    /// Without --project: the devfile's starter project to clone (default: its first).
    #[arg(long)]
    pub starter: Option<String>,
    /// The space it goes to (where you are a developer or owner); default: your personal
    /// space `users/<you>`.
    #[arg(long)]
    pub space: Option<String>,
    /// CPU limit of the main container, e.g. 2 or 500m.
    #[arg(long, value_parser = input::cpu)]
    pub cpu: Option<String>,
    /// Memory limit of the main container, e.g. 4Gi.
    #[arg(long, value_parser = input::memory)]
    pub memory: Option<String>,
    /// Environment variable KEY=VALUE (repeatable).
    #[arg(long = "var", value_name = "KEY=VALUE", value_parser = input::key_value)]
    pub vars: Vec<KeyValue>,
    /// Secret environment variable KEY=VALUE: encrypted at rest, never shown again.
    #[arg(long = "secret-var", value_name = "KEY=VALUE", value_parser = input::key_value)]
    pub secret_vars: Vec<KeyValue>,
    /// File variable KEY=@PATH: the file's content is mounted in the workspace.
    #[arg(long = "file-var", value_name = "KEY=@PATH", value_parser = input::key_file)]
    pub file_vars: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Args)]
pub struct WsActionArgs {
    /// Workspace name or id.
    pub name: String,
    #[command(flatten)]
    pub wait: WaitArgs,
}

#[derive(Debug, Subcommand)]
pub enum WsCommand {
    /// Create a workspace (desired Running).
    Create(Box<WsCreateArgs>),
    /// List workspaces (without --all: the first page only).
    #[command(visible_alias = "ls")]
    List {
        /// Only workspaces in this actual state.
        #[arg(long, value_parser = parse_actual_state)]
        state: Option<ActualState>,
        #[arg(long)]
        agent: Option<String>,
        #[arg(long)]
        project: Option<String>,
        /// Only this owner's workspaces (admins).
        #[arg(long)]
        owner: Option<String>,
        /// Only workspaces in this space (`acme/platform`, `users/alice`).
        #[arg(long)]
        space: Option<String>,
        /// With --space: the spaces below it too.
        #[arg(long, requires = "space")]
        recursive: bool,
        /// Page size.
        #[arg(long)]
        limit: Option<u32>,
        /// Follow the pages to the end.
        #[arg(long)]
        all: bool,
    },
    /// Show one workspace.
    Show {
        /// Workspace name or id.
        name: String,
    },
    /// Allow a user to make softlinks (`warren mount create --type workspace`) to a workspace.
    Grant {
        /// Workspace name or id.
        name: String,
        /// The user's name.
        user: String,
    },
    /// Take a grant back: that user's softlinks to the workspace stop serving.
    Revoke {
        /// Workspace name or id.
        name: String,
        /// The user's name.
        user: String,
    },
    /// Who may make softlinks to a workspace.
    Grants {
        /// Workspace name or id.
        name: String,
    },
    /// Draw the tree of spaces with the entries in them and their states (all you may see,
    /// or the tree under PATH).
    Tree {
        /// A space's path (`acme/platform`).
        path: Option<String>,
    },
    /// Ask for Running.
    Start(WsActionArgs),
    /// Ask for Stopped (the volume is kept).
    Stop(WsActionArgs),
    /// Restart: stop, then run again.
    Restart(WsActionArgs),
    /// Terminate: delete everything, volume included. Final.
    #[command(visible_aliases = ["remove", "terminate"])]
    Rm(WsActionArgs),
    /// Open a shell in a workspace over SSH, or run a command there.
    #[command(after_long_help = WS_SSH_HELP)]
    Ssh {
        /// Workspace name or id.
        name: String,
        /// An OpenSSH option for this connection, as `ssh -o` takes it (repeatable).
        #[arg(long = "ssh-option", value_name = "OPTION")]
        ssh_options: Vec<String>,
        /// The command to run instead of a login shell (after `--`).
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Run a command of the workspace's devfile (exec, apply, or a composite of them): its
    /// output is printed as it comes, and the exit code is the command's.
    #[command(after_long_help = WS_RUN_HELP)]
    Run {
        /// Workspace name or id.
        name: String,
        /// The devfile's command id (`warren ws show NAME` lists them).
        command: String,
    },
    /// Forward local TCP ports to ports of a workspace through the proxy (no SSH needed),
    /// until interrupted. A port is `REMOTE` (the same locally), `LOCAL:REMOTE`, or
    /// `:REMOTE` (a free local port, printed).
    #[command(
        name = "port-forward",
        after_help = "Examples:\n  \
        warren ws port-forward dev 5432            # localhost:5432 → dev's 5432\n  \
        warren ws port-forward dev 8000:8080 :9229"
    )]
    PortForward {
        /// Workspace name or id.
        name: String,
        /// `[LOCAL:]REMOTE`, one or more.
        #[arg(required = true, value_name = "[LOCAL:]REMOTE")]
        ports: Vec<String>,
        /// The local address to listen on.
        #[arg(long, default_value = "127.0.0.1")]
        address: std::net::IpAddr,
    },
    /// Print what a container of the workspace wrote lately (stdout and stderr), also when
    /// it stopped or keeps failing to start.
    Logs {
        /// Workspace name or id.
        name: String,
        /// The last this many lines (1–10000).
        #[arg(long, short = 'n', default_value_t = 200)]
        tail: u32,
        /// The container, by its devfile component name [default: the main one].
        #[arg(long, short = 'c')]
        container: Option<String>,
        /// Keep printing what the container writes until it stops (Ctrl-C to leave).
        #[arg(long, short = 'f')]
        follow: bool,
    },
    /// Open the workspace in the browser: its editor (VS Code), its main endpoint, another
    /// endpoint, or its terminal.
    #[command(after_long_help = WS_OPEN_HELP)]
    Open {
        /// Workspace name or id.
        name: String,
        /// The endpoint to open, by its devfile name [default: the editor, else the main one].
        #[arg(long, conflicts_with_all = ["terminal", "main"])]
        endpoint: Option<String>,
        /// Open the web terminal instead.
        #[arg(long, conflicts_with = "main")]
        terminal: bool,
        /// Open the devfile's main endpoint instead of the editor.
        #[arg(long)]
        main: bool,
        /// Only print the address.
        #[arg(long)]
        print: bool,
    },
    /// Print SSH config Host blocks for workspaces (VS Code Remote-SSH, JetBrains Gateway);
    /// --write installs them into ~/.ssh.
    #[command(name = "ssh-config", after_long_help = WS_SSH_CONFIG_HELP)]
    SshConfig {
        /// Workspaces (names or ids); default: all of yours.
        names: Vec<String>,
        /// Write ~/.ssh/warren.config and include it from ~/.ssh/config.
        #[arg(long)]
        write: bool,
    },
    /// Change the workspace's size; it restarts, keeping its volume.
    #[command(group = clap::ArgGroup::new("size").required(true).multiple(true))]
    Resize {
        name: String,
        #[arg(long, value_parser = input::cpu, group = "size")]
        cpu: Option<String>,
        #[arg(long, value_parser = input::memory, group = "size")]
        memory: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

const WS_RUN_HELP: &str = "\
Steps are announced on stderr (`==> ID (exec in COMPONENT)`); a step's stdout and stderr go to
yours. A composite runs its commands one after another, stopping at the first that fails, or
all at once when it is `parallel` (their lines then prefixed with `[ID]`). The exit code is 0
when every step succeeded, else the failed step's (1 when it gave none). Ctrl-C stops the
command in the workspace.

Examples:
  warren ws run dev test
  warren ws run dev deploy
";

const WS_SSH_HELP: &str = "\
Runs your OpenSSH client against the Warren proxy's SSH server as
`ssh -p PORT -l WORKSPACE HOST [COMMAND…]`; the exit code is ssh's (the remote command's).
The proxy accepts the SSH keys registered with `warren ssh-key add`, or a personal access
token with the `workspace` scope as the password. WARREN_SSH names another ssh program.

Examples:
  warren ws ssh dev
  warren ws ssh dev -- make test
  warren ws ssh dev --ssh-option ForwardAgent=yes";

const WS_OPEN_HELP: &str = "\
The browser is $BROWSER when set, else xdg-open (macOS: open). Where none can be started, the
address is printed instead. The workspace need not be running: a stopped one shows a page with
a start button.";

const WS_SSH_CONFIG_HELP: &str = "\
Prints one OpenSSH `Host` block per workspace:

  Host warren-NAME
      HostName <the proxy's SSH host>
      Port <its port>
      User NAME
      UserKnownHostsFile ~/.ssh/warren_known_hosts
      StrictHostKeyChecking yes

The last two lines pin the proxy's host key, which the server publishes and this command
records in ~/.ssh/warren_known_hosts (printed or written, the blocks never trust a first
key blindly); they are left out when the server publishes no key.

With --write the blocks go to ~/.ssh/warren.config (merged with the ones already there;
without NAMEs the file is rewritten with all your workspaces) and ~/.ssh/config gets an
`Include warren.config` line at its top, once. Running it again changes nothing.

Then `ssh warren-NAME` works, and VS Code Remote-SSH (\"Connect to Host…\") and JetBrains
Gateway list the hosts. Authentication uses your SSH keys registered with
`warren ssh-key add`.";

fn parse_actual_state(s: &str) -> Result<ActualState, String> {
    s.parse()
        .map_err(|e: warren_types::state::UnknownState| e.to_string())
}

#[derive(Debug, Args)]
pub struct UserGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: UserCommand,
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a local account (admin); the password is prompted for or read from stdin.
    Create {
        username: String,
        #[arg(long)]
        admin: bool,
        #[arg(long)]
        password_stdin: bool,
    },
    /// List accounts (admin).
    #[command(visible_alias = "ls")]
    List,
    /// Show one account (admin).
    Show { username: String },
    /// Disable an account (admin): it cannot sign in, use its tokens or keys, or reach its
    /// workspaces, which are stopped. Nothing is deleted.
    Disable { username: String },
    /// Enable a disabled account again (admin).
    Enable { username: String },
    /// Grant admin rights (admin).
    Promote { username: String },
    /// Revoke admin rights (admin); the last active admin cannot be demoted.
    Demote { username: String },
    /// Set a new password for an account (admin); every session and token of it is revoked.
    ResetPassword {
        username: String,
        #[arg(long)]
        password_stdin: bool,
    },
    /// Delete an account (admin). Its workspaces are terminated first, volumes included,
    /// after a confirmation (or `--yes`).
    #[command(visible_alias = "rm")]
    Delete {
        username: String,
        /// Do not ask; terminate the account's workspaces without confirmation.
        #[arg(long, short = 'y')]
        yes: bool,
        /// Return once asked instead of waiting for the account to be gone.
        #[arg(long)]
        no_wait: bool,
    },
}

#[derive(Debug, Args)]
pub struct OAuthClientGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: OAuthClientCommand,
}

#[derive(Debug, Subcommand)]
pub enum OAuthClientCommand {
    /// Register a client; a confidential client's secret is printed once, on standard
    /// output (e.g. `> /etc/warren/proxy-oauth.secret` for the proxy).
    #[command(
        after_help = "Example, the proxy of workspaces under ws.example.com:\n  \
        warren oauth-client create proxy --name 'Warren proxy' --first-party \\\n    \
        --redirect-uri https://auth.ws.example.com/oauth/callback > /etc/warren/proxy-oauth.secret"
    )]
    Create {
        /// The client id (generated when absent).
        client_id: Option<String>,
        /// A name shown on the consent page.
        #[arg(long)]
        name: String,
        /// An allowed redirect URI (repeatable; matched exactly).
        #[arg(long = "redirect-uri", required = true)]
        redirect_uris: Vec<String>,
        /// Skip the consent page (Warren's own proxy).
        #[arg(long)]
        first_party: bool,
        /// A public client without a secret (PKCE alone), e.g. a desktop tool.
        #[arg(long)]
        public: bool,
    },
    /// List clients.
    #[command(visible_alias = "ls")]
    List,
    /// Delete a client; every session signed in through it ends.
    #[command(visible_alias = "rm")]
    Delete { client_id: String },
}

#[derive(Debug, Args)]
pub struct DotfilesGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: DotfilesCommand,
}

#[derive(Debug, Subcommand)]
pub enum DotfilesCommand {
    /// Use this Git repository: cloned into `~/.dotfiles` of each new workspace at its first
    /// start, then its install script run (install.sh, install, bootstrap.sh, setup.sh, …) or,
    /// without one, its dotfiles linked into the home. Logged; a failure never stops the
    /// workspace.
    Set { url: String },
    /// Stop installing dotfiles into new workspaces.
    #[command(visible_alias = "rm")]
    Unset,
    /// Show the repository in use.
    Show,
}

#[derive(Debug, Args)]
pub struct PasswdArgs {
    /// Read the current and the new password from standard input, one per line.
    #[arg(long)]
    pub password_stdin: bool,
    /// Also sign out everywhere else: revoke every other token and browser session.
    #[arg(long)]
    pub revoke_sessions: bool,
}

#[derive(Debug, Args)]
pub struct DevfileGroup {
    #[command(subcommand)]
    pub cmd: DevfileCommand,
}

#[derive(Debug, Subcommand)]
pub enum DevfileCommand {
    /// Check that Warren can run a devfile; prints every error with its path.
    Validate {
        /// The devfile (`-` for stdin).
        file: PathBuf,
        /// A devfile registry for a `parent` named by `id` without `registryUrl` (repeatable;
        /// searched in order).
        #[arg(
            long = "devfile-registry",
            env = "WARREN_DEVFILE_REGISTRIES",
            value_delimiter = ',',
            value_name = "URL"
        )]
        registries: Vec<String>,
    },
    /// Print the Kubernetes objects Warren would create for a devfile, as YAML.
    Render(Box<devfile_cmd::RenderArgs>),
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    pub shell: clap_complete::Shell,
}

/// Why a command failed, and which exit code that means.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Client(#[from] warren_client::Error),
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    #[error(transparent)]
    Read(#[from] input::ReadError),
    #[error(transparent)]
    Wait(#[from] wait::WaitError),
    #[error("not logged in; run `warren login --url URL` or set WARREN_URL and WARREN_TOKEN")]
    NotLoggedIn,
    /// Something answered at the URL, but not as a Warren server does.
    #[error("{url} does not answer like a Warren server ({detail}); give the server's URL (what `warren up` prints as the API), not the proxy's or a workspace's")]
    NotWarren { url: String, detail: String },
    /// Bad arguments or input the command cannot use.
    #[error("{0}")]
    Usage(String),
    /// The command ran and the answer is no (invalid devfile, …).
    #[error("{0}")]
    Failed(String),
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// A program the command ran (ssh) ended with this code; it has said why itself.
    #[error("exited with status {0}")]
    Exited(u8),
}

impl CliError {
    pub fn exit_code(&self) -> u8 {
        fn client(e: &warren_client::Error) -> u8 {
            use warren_client::Error as E;
            match e {
                E::Api { status: 401, .. } => 4,
                E::Api { .. } | E::Starting { .. } => 1,
                E::InvalidUrl { .. } => 2,
                E::Transport { .. } | E::Decode { .. } | E::CursorLoop { .. } => 3,
            }
        }
        match self {
            CliError::Client(e) | CliError::Wait(wait::WaitError::Client(e)) => client(e),
            CliError::Wait(_) | CliError::Failed(_) | CliError::Credentials(_) => 1,
            CliError::Runtime(_) => 1,
            CliError::Read(_) | CliError::Usage(_) => 2,
            CliError::NotLoggedIn => 4,
            CliError::NotWarren { .. } => 3,
            CliError::Exited(code) => *code,
        }
    }

    /// The message, plus the innermost cause when there is one (`cannot reach …: Connection
    /// refused`), plus a hint for a refused token.
    pub fn report(&self) -> String {
        let mut msg = self.to_string();
        let mut source = std::error::Error::source(self);
        let mut last = None;
        while let Some(s) = source {
            last = Some(s.to_string());
            source = s.source();
        }
        if let Some(last) = last.filter(|l| !msg.contains(l.as_str())) {
            msg.push_str(": ");
            msg.push_str(&last);
        }
        if self.exit_code() == 4 && !matches!(self, CliError::NotLoggedIn) {
            msg.push_str(" (run `warren login` to sign in again)");
        }
        msg
    }
}

/// Runs one user command and turns its outcome into an exit code, printing `error: …` on
/// stderr on failure. `cli` builds the binary's whole command, for `warren completions`.
pub fn main(cmd: Command, cli: impl FnOnce() -> clap::Command) -> ExitCode {
    let result = match cmd {
        Command::Completions(args) => {
            let mut command = cli();
            let name = command.get_name().to_owned();
            clap_complete::generate(args.shell, &mut command, name, &mut std::io::stdout());
            Ok(())
        }
        Command::Devfile(group) => devfile_cmd::run(group.cmd),
        cmd => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(CliError::Runtime)
            .and_then(|rt| rt.block_on(commands::run(cmd))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Exited(code)) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {}", e.report());
            ExitCode::from(e.exit_code())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    /// Stands in for the binary's top-level parser.
    #[derive(Debug, Parser)]
    #[command(name = "warren")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    fn parse(args: &[&str]) -> Result<Command, clap::Error> {
        Cli::try_parse_from(std::iter::once("warren").chain(args.iter().copied()))
            .map(|c| c.command)
    }

    #[test]
    fn the_command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn ws_create_takes_every_option() {
        let cmd = parse(&[
            "ws",
            "create",
            "--project",
            "p",
            "--devfile",
            "d.yaml",
            "--agent",
            "a",
            "--name",
            "dev",
            "--cpu",
            "2",
            "--memory",
            "4Gi",
            "--var",
            "A=1",
            "--var",
            "B=x=y",
            "--secret-var",
            "PW=s",
            "--file-var",
            "CFG=@c.json",
            "--wait",
            "--timeout",
            "90s",
            "-o",
            "json",
        ])
        .unwrap();
        let Command::Ws(WsGroup {
            out,
            cmd: WsCommand::Create(c),
        }) = cmd
        else {
            panic!("{cmd:?}")
        };
        assert_eq!(out.output, Format::Json);
        assert_eq!(c.project.as_deref(), Some("p"));
        assert_eq!(c.devfile, Some(PathBuf::from("d.yaml")));
        assert_eq!(
            (c.cpu.as_deref(), c.memory.as_deref()),
            (Some("2"), Some("4Gi"))
        );
        assert_eq!(c.vars.len(), 2);
        assert_eq!(c.vars[1].value, "x=y");
        assert_eq!(c.secret_vars[0].key, "PW");
        assert_eq!(
            c.file_vars,
            vec![("CFG".to_owned(), PathBuf::from("c.json"))]
        );
        assert!(c.wait.wait);
        assert_eq!(c.wait.timeout, Duration::from_secs(90));
    }

    #[test]
    fn output_flag_works_before_and_after_the_subcommand() {
        for args in [
            &["ws", "-o", "yaml", "list"][..],
            &["ws", "list", "--output", "yaml"],
        ] {
            let Command::Ws(g) = parse(args).unwrap() else {
                panic!()
            };
            assert_eq!(g.out.output, Format::Yaml);
        }
        let Command::Ws(g) = parse(&["ws", "list", "--all", "--state", "Running"]).unwrap() else {
            panic!()
        };
        assert_eq!(g.out.output, Format::Table);
        assert!(matches!(
            g.cmd,
            WsCommand::List {
                all: true,
                state: Some(ActualState::Running),
                ..
            }
        ));
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        let cases: &[&[&str]] = &[
            &["ws", "create", "--var", "NOEQUALS"],
            &["ws", "create", "--file-var", "K=/no/at"],
            &["ws", "create", "--cpu", "lots"],
            &["ws", "create", "--timeout", "soon", "--wait"],
            &["ws", "list", "--state", "running"],
            &["ws", "resize", "dev"],
            &["ws", "stop"],
            &["token", "create", "t", "--scope", "admin"],
            &[
                "login",
                "--url",
                "http://x",
                "--token-stdin",
                "--password-stdin",
            ],
            &["ws", "list", "-o", "xml"],
        ];
        for args in cases {
            let err = parse(args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}: {err}");
        }
    }

    #[test]
    fn ws_ssh_takes_a_command_after_the_separator() {
        let Command::Ws(g) = parse(&[
            "ws",
            "ssh",
            "dev",
            "--ssh-option",
            "ForwardAgent=yes",
            "--",
            "ls",
            "-la",
        ])
        .unwrap() else {
            panic!("not ws")
        };
        let WsCommand::Ssh {
            name,
            ssh_options,
            command,
        } = g.cmd
        else {
            panic!("not ssh")
        };
        assert_eq!(name, "dev");
        assert_eq!(ssh_options, ["ForwardAgent=yes"]);
        assert_eq!(command, ["ls", "-la"]);
        let Command::Ws(g) = parse(&["ws", "ssh-config", "a", "b", "--write"]).unwrap() else {
            panic!("not ws")
        };
        assert!(
            matches!(g.cmd, WsCommand::SshConfig { names, write: true } if names == ["a", "b"])
        );
    }

    #[test]
    fn actions_parse_name_and_wait() {
        let Command::Ws(g) = parse(&["ws", "restart", "dev", "--wait"]).unwrap() else {
            panic!()
        };
        let WsCommand::Restart(a) = g.cmd else {
            panic!()
        };
        assert_eq!(a.name, "dev");
        assert!(a.wait.wait);
        assert_eq!(a.wait.timeout, Duration::from_secs(300));
        assert!(matches!(
            parse(&["ws", "resize", "dev", "--memory", "8Gi"]).unwrap(),
            Command::Ws(WsGroup {
                cmd: WsCommand::Resize {
                    cpu: None,
                    memory: Some(_),
                    ..
                },
                ..
            })
        ));
        assert!(matches!(
            parse(&["token", "create", "ci", "--scope", "read_api", "--scope", "workspace"]).unwrap(),
            Command::Token(TokenGroup { cmd: TokenCommand::Create { ref scopes, .. }, .. })
                if scopes == &[ScopeArg::ReadApi, ScopeArg::Workspace]
        ));
    }

    #[test]
    fn exit_codes_follow_the_kind_of_failure() {
        let api = |status| {
            CliError::Client(warren_client::Error::Api {
                status,
                code: "x".into(),
                message: "m".into(),
            })
        };
        assert_eq!(api(404).exit_code(), 1);
        assert_eq!(api(401).exit_code(), 4);
        assert!(api(401).report().contains("warren login"));
        assert_eq!(CliError::NotLoggedIn.exit_code(), 4);
        assert_eq!(CliError::Usage("u".into()).exit_code(), 2);
        let read = CliError::Read(input::ReadError {
            what: "devfile",
            path: "x.yaml".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "No such file"),
        });
        assert_eq!(read.exit_code(), 2);
        assert_eq!(read.report(), "reading devfile x.yaml: No such file");
    }

    /// `warren agent` is also the agent service. The binary can host both under one name: the
    /// service's flags when no subcommand is given, these management commands otherwise (and
    /// then leave [`Command::Agent`] out of the flattened enum). This checks that shape parses.
    #[test]
    fn agent_management_can_share_the_name_with_the_agent_service() {
        #[derive(Debug, Parser)]
        #[command(name = "warren")]
        struct Bin {
            #[command(subcommand)]
            command: BinCommand,
        }
        #[derive(Debug, Subcommand)]
        enum BinCommand {
            #[command(args_conflicts_with_subcommands = true)]
            Agent(AgentService),
        }
        #[derive(Debug, Args)]
        struct AgentService {
            #[arg(long)]
            relay_url: Option<String>,
            #[command(flatten)]
            out: OutputArgs,
            #[command(subcommand)]
            manage: Option<AgentCommand>,
        }
        Bin::command().debug_assert();
        let BinCommand::Agent(a) =
            Bin::try_parse_from(["warren", "agent", "--relay-url", "http://r"])
                .unwrap()
                .command;
        assert!(a.manage.is_none() && a.relay_url.is_some());
        let BinCommand::Agent(a) =
            Bin::try_parse_from(["warren", "agent", "create", "x", "-o", "json"])
                .unwrap()
                .command;
        assert!(matches!(a.manage, Some(AgentCommand::Create { .. })));
        assert_eq!(a.out.output, Format::Json);
        // What the binary then runs:
        let _ = Command::Agent(AgentGroup {
            out: a.out,
            cmd: a.manage.unwrap(),
        });
    }

    #[test]
    fn completions_are_generated_from_the_binary_command() {
        let mut cmd = Cli::command();
        let mut buf = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut cmd, "warren", &mut buf);
        let script = String::from_utf8(buf).unwrap();
        assert!(script.contains("ssh-key"), "bash completion lacks ssh-key");
    }
}
