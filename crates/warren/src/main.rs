//! The `warren` binary: argument parsing and wiring only; every behaviour lives in a crate.

mod agent_cmd;
mod relay_cmd;
mod server_cmd;
mod telemetry;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Warren: self-hosted remote development workspaces.
#[derive(Debug, Parser)]
#[command(name = "warren", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the control plane (REST API, web UI, reconcile handler).
    Server(server_cmd::ServerArgs),
    /// Run a relay: agents connect to it; it forwards their calls and carries traffic to them.
    Relay(relay_cmd::RelayArgs),
    /// Run an agent: reconcile a workspace runtime with the server, through a relay.
    Agent(agent_cmd::AgentArgs),
    #[command(flatten)]
    User(warren_cli::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Relay(args) => {
            telemetry::init();
            run_service(relay_cmd::run(args))
        }
        Command::Agent(args) => {
            telemetry::init();
            run_service(agent_cmd::run(args))
        }
        Command::Server(args) => {
            telemetry::init();
            run_service(server_cmd::run(args))
        }
        Command::User(cmd) => warren_cli::main(cmd),
    }
}

/// Runs a long-lived service on a multi-threaded runtime and reports its whole error chain.
fn run_service(fut: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "exiting");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
