//! The `warren` user commands: login, tokens, keys, agents, projects, workspaces, devfiles.

use std::process::ExitCode;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Sign in to a Warren server.
    Login,
}

pub fn main(_cmd: Command) -> ExitCode {
    eprintln!("error: not yet available");
    ExitCode::FAILURE
}
