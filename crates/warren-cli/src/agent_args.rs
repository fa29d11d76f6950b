//! The arguments of `warren agent` and `warren gitops`: agents, their GitOps sources,
//! repositories and policies.

use super::*;

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
    /// Delete an agent that has no workspaces left (terminate them first); its token stops
    /// working.
    #[command(visible_alias = "delete")]
    Rm { name: String },
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
        #[command(flatten)]
        choice: crate::webhook_secret::SecretChoice,
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
