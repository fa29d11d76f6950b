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

mod account_args;
mod agent_args;
mod audit_cmd;
mod classes_cmd;
mod commands;
pub mod credentials;
mod devcontainer_cmd;
mod devfile_cmd;
mod gitops_cmd;
mod group_cmd;
mod hours_args;
pub mod input;
pub mod open_cmd;
pub mod output;
mod port_forward_cmd;
mod region_cmd;
mod run_cmd;
mod secret_cmd;
mod share_cmd;
mod space_args;
pub mod ssh_cmd;
pub mod ssh_identity;
mod usage_cmd;
pub mod wait;
mod webhook_secret;
mod ws_args;

pub use account_args::{ScopeArg, SshKeyCommand, SshKeyGroup, TokenCommand, TokenGroup};
pub use agent_args::{
    AgentCommand, AgentGitopsCommand, AgentGroup, GitopsCommand, GitopsGroup, PolicyCommand,
    RepoCommand,
};
pub use hours_args::{WorkingHoursCommand, WorkingHoursGroup};
pub use space_args::{
    CredentialArgs, CredentialCommand, MemberCommand, MountCommand, MountGroup, PrebuildCommand,
    ProjectCommand, ProjectGroup, SpaceCommand, SpaceGroup, SpaceMemberCommand,
};
pub use ws_args::{LimitArgs, WaitArgs, WsActionArgs, WsCommand, WsCreateArgs, WsGroup};

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
    /// Your secrets: environment variables and files given to your workspaces.
    Secret(secret_cmd::SecretGroup),
    /// The name and email address your commits are made with in your workspaces.
    Profile(secret_cmd::ProfileGroup),
    /// Your own credentials for forges, used by your workspaces' Git instead of a project's.
    #[command(name = "git-credential")]
    GitCredential(secret_cmd::GitCredentialGroup),
    /// Your working hours: your running workspaces stop at the end of the day and start
    /// again in the morning.
    #[command(name = "working-hours")]
    WorkingHours(WorkingHoursGroup),
    /// OAuth clients of the server's sign-in (admin): the proxy's, or a third-party tool's.
    #[command(name = "oauth-client")]
    OAuthClient(OAuthClientGroup),
    /// GitOps (admin): repositories the relays read for agents, and the policy capping sources.
    Gitops(GitopsGroup),
    /// Regions (admin): where each region's workspaces are reached while its proxies serve.
    Region(region_cmd::RegionGroup),
    /// The audit log: who did what, when and from where (admins; owners for their spaces).
    Audit(audit_cmd::AuditGroup),
    /// Groups of users (kept by hand, or from the identity provider's groups claim): a role
    /// a group holds on a space holds for each member.
    Group(group_cmd::GroupArgs),
    /// What ran: running hours and the CPU, memory and storage asked for, by space, user,
    /// workspace or machine class.
    Usage(usage_cmd::UsageArgs),
    /// Rotate the proxies' cookie-signing key (admin); run as `warren proxy rotate-key`.
    #[command(name = "rotate-proxy-key", hide = true)]
    RotateProxyKey(OutputArgs),
    /// The proxies and their regions (admin); run as `warren proxy list`.
    #[command(name = "list-proxies", hide = true)]
    ListProxies(OutputArgs),
    /// Check and render devfiles locally, without a server.
    Devfile(DevfileGroup),
    /// Check dev container configurations (`devcontainer.json`) locally, and show the devfile
    /// Warren runs one as.
    Devcontainer(devcontainer_cmd::DevcontainerGroup),
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
        Command::Devcontainer(group) => devcontainer_cmd::run(group.cmd),
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

/// What the unit tests render and wait on.
#[cfg(test)]
pub(crate) mod sample {
    use warren_types::api::{Workspace, WorkspaceResources};
    use warren_types::{ActualState, AgentId, DesiredState, UserId, WorkspaceId};

    /// Workspace `dev` of ann on agent `local`, running, with nothing else set.
    pub(crate) fn workspace() -> Workspace {
        let t = "2026-03-01T10:00:00Z".parse().unwrap();
        Workspace {
            id: WorkspaceId(4),
            name: "dev".into(),
            namespace: "warren-ws-dev".into(),
            owner: UserId(1),
            owner_username: "ann".into(),
            space: "users/ann".into(),
            agent: AgentId(2),
            agent_name: "local".into(),
            project: None,
            project_name: None,
            repository: None,
            git_ref: None,
            desired_state: DesiredState::Running,
            actual_state: ActualState::Running,
            desired_state_updated_at: t,
            actual_state_updated_at: None,
            created_at: t,
            updated_at: t,
            last_activity_at: None,
            url: None,
            endpoints: Default::default(),
            failure_reason: None,
            waiting_reason: None,
            planned: None,
            agent_fault: None,
            isolation_warning: None,
            your_right: None,
            terminal_url: None,
            editor_url: None,
            region: None,
            resources: WorkspaceResources::default(),
            variables: vec![],
            version: 1,
            notices: vec![],
            commands: vec![],
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
            (c.limits.cpu.as_deref(), c.limits.memory.as_deref()),
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
