//! The arguments of `warren token` and `warren ssh-key`: the caller's own credentials.

use crate::OutputArgs;
use clap::{Args, Subcommand};
use std::path::PathBuf;

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
