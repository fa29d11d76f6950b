//! The arguments of `warren project`, `warren space` and `warren mount`: the entries a
//! workspace comes from and goes in.

use super::*;

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
    /// Prebuilds: the clone and the create-time steps run ahead of time, so new workspaces
    /// of the default ref start from them.
    #[command(after_help = "Examples:\n  \
        warren project prebuild on app --agent local --ref release --every 1d\n  \
        warren project prebuild list app\n  \
        warren project prebuild log app")]
    Prebuild {
        #[command(subcommand)]
        cmd: PrebuildCommand,
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
pub enum PrebuildCommand {
    /// Turn prebuilds on, or change them (maintainers): each new commit of the default ref
    /// (and of each --ref) gets one, on the agent given (the only agent when there is one).
    /// What was set before is replaced.
    On {
        project: String,
        #[arg(long)]
        agent: Option<String>,
        /// Another branch to prebuild besides the default ref (repeatable).
        #[arg(long = "ref", value_name = "REF")]
        refs: Vec<String>,
        /// Also prebuild a ref again, at the same commit, once its newest prebuild is this
        /// old (e.g. 1d), so moving dependencies and base images are caught without a push.
        #[arg(long, value_name = "HOURS", value_parser = crate::input::hours)]
        every: Option<u32>,
        /// Keep a warm pool of this many stopped workspaces made from the default ref's
        /// newest prebuild: the next users who create a workspace of the project take one.
        #[arg(long, value_name = "N")]
        pool: Option<u32>,
    },
    /// Turn them off (maintainers): the prebuilds and their volumes are removed.
    Off { project: String },
    /// Prebuild a ref's newest commit now (maintainers; the default ref unless --ref).
    Run {
        project: String,
        #[arg(long = "ref", value_name = "REF")]
        git_ref: Option<String>,
    },
    /// The project's prebuilds, the newest first.
    #[command(visible_alias = "ls")]
    List { project: String },
    /// The output of a finished prebuild (the newest when no id is given).
    Log { project: String, id: Option<i64> },
    /// Set, generate or remove the secret the project's push webhook is checked with
    /// (maintainers). The forge then POSTs its push events to
    /// `…/api/v1/projects/<project>/prebuilds/webhook`, and a new commit gets its prebuild at
    /// once rather than at the next poll of the ref.
    WebhookSecret {
        project: String,
        #[command(flatten)]
        choice: crate::webhook_secret::SecretChoice,
    },
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
    /// Groups and their roles, which hold for each of their members.
    Group {
        #[command(subcommand)]
        cmd: crate::group_cmd::SpaceGroupCommand,
    },
    /// The space's budget of weighted hours per month.
    Budget {
        #[command(subcommand)]
        cmd: crate::usage_cmd::BudgetCommand,
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
