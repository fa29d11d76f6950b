//! The arguments of `warren ws`: its subcommands and their options.

use super::*;

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

/// `--cpu` and `--memory`: the main container's limits where a workspace is made or rendered.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// CPU limit of the main container, e.g. 2 or 500m.
    #[arg(long, value_parser = input::cpu)]
    pub cpu: Option<String>,
    /// Memory limit of the main container, e.g. 4Gi.
    #[arg(long, value_parser = input::memory)]
    pub memory: Option<String>,
}

impl LimitArgs {
    /// The limits asked for; none when neither flag was given (the agent's defaults apply).
    pub fn resources(&self) -> Option<warren_types::api::WorkspaceResources> {
        (self.cpu.is_some() || self.memory.is_some()).then(|| {
            warren_types::api::WorkspaceResources {
                class: None,
                cpu: self.cpu.clone(),
                memory: self.memory.clone(),
            }
        })
    }
}

#[derive(Debug, Args)]
pub struct WsCreateArgs {
    /// Project (name or id) whose devfile and repository the workspace uses.
    #[arg(long, conflicts_with = "repo")]
    pub project: Option<String>,
    /// A Git repository to open without a project: `URL[#REF]` (http, https, ssh, git or
    /// `user@host:path`). Its devfile is used, else its dev container configuration, else
    /// the server's default devfile, with the repository cloned into /projects.
    #[arg(long, value_name = "URL[#REF]", conflicts_with = "starter")]
    pub repo: Option<String>,
    /// A devfile to use instead of the project's (or the server's default); `-` for stdin.
    #[arg(long)]
    pub devfile: Option<PathBuf>,
    /// Agent (name or id); default: the only agent.
    #[arg(long)]
    pub agent: Option<String>,
    /// Workspace name; generated when absent.
    #[arg(long)]
    pub name: Option<String>,
    /// Git ref to check out instead of the project's (or the repository's) default.
    #[arg(long = "ref")]
    pub git_ref: Option<String>,
    /// With --project or --repo: the definition in its repository to run instead of the default (a
    /// devfile, or a dev container configuration such as
    /// `.devcontainer/python/devcontainer.json`).
    #[arg(long, value_name = "PATH")]
    pub definition: Option<String>,
    /// Without --project: the devfile's starter project to clone (default: its first).
    #[arg(long)]
    pub starter: Option<String>,
    /// The space it goes to (where you are a developer or owner); default: your personal
    /// space `users/<you>`.
    #[arg(long)]
    pub space: Option<String>,
    /// A machine class of the agent's (`warren ws classes` lists them) instead of a size in
    /// numbers. Without it, the definition's `hostRequirements` pick the class (the agent's
    /// default when it meets them, else the smallest that does).
    #[arg(long, conflicts_with_all = ["cpu", "memory"])]
    pub class: Option<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
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
pub struct WsPortArgs {
    /// Workspace name or id.
    pub name: String,
    /// A port the proxy serves (`warren ws port NAME` lists them).
    pub port: Option<u16>,
    /// Who may reach it: private (you), space (whoever may use the workspace),
    /// authenticated (every signed-in user) or public (anyone); never wider than its agent
    /// allows.
    #[arg(long, requires = "port", value_parser = parse_visibility,
        conflicts_with_all = ["default", "share", "revoke"])]
    pub visibility: Option<warren_types::sharing::PortVisibility>,
    /// Back to its devfile's visibility (else the agent's default).
    #[arg(long, requires = "port", conflicts_with_all = ["share", "revoke"])]
    pub default: bool,
    /// Make a link that opens this port for whoever holds it, without signing in; printed
    /// once.
    #[arg(long, requires = "port", conflicts_with = "revoke")]
    pub share: bool,
    /// How long the link lasts (default: a day; at most what the agent allows).
    #[arg(long, requires = "share", value_parser = input::duration)]
    pub expires: Option<std::time::Duration>,
    /// End share link ID now.
    #[arg(long, value_name = "ID")]
    pub revoke: Option<i64>,
}

fn parse_visibility(s: &str) -> Result<warren_types::sharing::PortVisibility, String> {
    s.parse()
}

const WS_PORT_HELP: &str = "Examples:
  warren ws port app                              # the ports, who may reach each, the links
  warren ws port app 8080 --visibility authenticated
  warren ws port app 8080 --default              # back to the devfile's (or the agent's) choice
  warren ws port app 3000 --share --expires 2h   # prints a link that opens port 3000 for 2 hours
  warren ws port app --revoke 7";

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
    /// The machine classes an agent offers (for `create --class` and `resize --class`).
    Classes {
        /// Only this agent's (name or id); default: every agent's.
        #[arg(long)]
        agent: Option<String>,
    },
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
        /// The container, by its devfile component name [default: the main one];
        /// `warren-build` for the output of the last image build at start.
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
        /// Open it in VS Code over Remote-SSH (installs its SSH host first).
        #[arg(long, conflicts_with_all = ["endpoint", "terminal", "main", "jetbrains"])]
        vscode: bool,
        /// Open it in JetBrains Gateway over SSH (installs its SSH host first).
        #[arg(long, conflicts_with_all = ["endpoint", "terminal", "main"])]
        jetbrains: bool,
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
        /// Write ~/.ssh/warren.config and include it from ~/.ssh/config (idempotent).
        #[arg(long, alias = "install")]
        write: bool,
    },
    /// Connect standard input and output to the workspace's SSH front door, as OpenSSH's
    /// `ProxyCommand` (the Host blocks of workspaces in a region use it): the region's proxy
    /// while it answers, else the central one, saying so.
    #[command(name = "ssh-proxy", after_long_help = WS_SSH_PROXY_HELP)]
    SshProxy {
        /// Workspace name or id.
        name: String,
        /// The door the Host block was written with (OpenSSH's `%h`): used as it is when the
        /// server cannot be asked.
        #[arg(long)]
        host: String,
        /// Its port (OpenSSH's `%p`).
        #[arg(long)]
        port: u16,
    },
    /// Make the workspace again from its definition as it is now: the devfile given, else
    /// its project's at its ref, else the one it was made from. Its volume and home are
    /// kept; what changes is shown first, and a running workspace restarts.
    #[command(after_long_help = WS_REBUILD_HELP)]
    Rebuild {
        name: String,
        /// A devfile to use from now on; `-` for stdin.
        #[arg(long)]
        devfile: Option<PathBuf>,
        /// Show what would change and change nothing.
        #[arg(long, conflicts_with = "yes")]
        dry_run: bool,
        /// Apply without asking (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        wait: WaitArgs,
    },
    /// Who may reach the workspace's ports (private, space, authenticated, public), and
    /// share links that open one port without signing in. Without PORT: lists them.
    #[command(after_long_help = WS_PORT_HELP)]
    Port(Box<WsPortArgs>),
    /// Change the workspace's size or machine class; it restarts, keeping its volume.
    #[command(group = clap::ArgGroup::new("size").required(true).multiple(true))]
    Resize {
        name: String,
        /// Another machine class of its agent's (`warren ws classes`).
        #[arg(long, group = "size", conflicts_with_all = ["cpu", "memory"])]
        class: Option<String>,
        #[arg(long, value_parser = input::cpu, group = "size")]
        cpu: Option<String>,
        #[arg(long, value_parser = input::memory, group = "size")]
        memory: Option<String>,
        #[command(flatten)]
        wait: WaitArgs,
    },
}

const WS_REBUILD_HELP: &str = "\
Use it after the project's devfile or dev container configuration changed (the web UI marks a
workspace whose project's definition moved on), or to try a devfile of your own with --devfile.
What changes is listed (containers, endpoints, volumes, start-up commands; environment values
are never shown, only that they changed) and asked about before anything happens. A definition
that does not validate, or that the agent does not allow, is refused with its reasons and the
workspace keeps running as it was. Exit codes: 0 rebuilt (or nothing applied with --dry-run),
1 refused or not confirmed, 2 asked without a terminal to answer on (pass --yes).";

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
Nothing needs setting up: the first time, the CLI makes a key of its own (in Warren's home,
ssh/id_ed25519_<you>, with ssh-keygen) and registers it as yours, saying so; ssh is given that
key alone. The proxy also accepts the keys you register with `warren ssh-key add`, or a
personal access token with the `workspace` scope as the password. WARREN_SSH names another ssh
program, WARREN_SSH_KEYGEN another ssh-keygen.

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
      IdentityFile <Warren's home>/ssh/id_ed25519_<you>
      IdentitiesOnly yes

The known-hosts lines pin the proxy's host key, which the server publishes and this command
records in ~/.ssh/warren_known_hosts (printed or written, the blocks never trust a first
key blindly); they are left out when the server publishes no key. The identity lines name the
CLI's own key, made and registered as yours the first time (as `warren ws ssh` does).

With --write the blocks go to ~/.ssh/warren.config (merged with the ones already there;
without NAMEs the file is rewritten with all your workspaces) and ~/.ssh/config gets an
`Include warren.config` line at its top, once. Running it again changes nothing.

Then `ssh warren-NAME` works, and VS Code Remote-SSH (\"Connect to Host…\") and JetBrains
Gateway list the hosts and connect with no key set up.

A workspace whose agent is in a region gets one more line,
`ProxyCommand <this warren> ws ssh-proxy NAME --host %h --port %p`: each connection then goes
to the region's proxy while it answers, else to the central one, so a block written while the
region served keeps working when it fails over (every proxy shows the same host key).";

const WS_SSH_PROXY_HELP: &str = "\
OpenSSH runs this as the ProxyCommand of a workspace's Host block (see `warren ws ssh-config`);
it is not meant to be typed. It asks the server where the workspace is reached now: the
region's SSH door while its proxy serves, tried first, else the central proxy's, with a notice
on standard error saying why. When the server cannot be asked, it connects to --host/--port
(the door the block was written with). The bytes are passed on unchanged: the SSH session,
its keys and its host-key check are ssh's alone.";

fn parse_actual_state(s: &str) -> Result<ActualState, String> {
    s.parse()
        .map_err(|e: warren_types::state::UnknownState| e.to_string())
}
