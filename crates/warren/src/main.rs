//! The `warren` binary: argument parsing and wiring only; every behaviour lives in a crate.

mod admin_cmd;
mod agent_cmd;
mod connect_cmd;
mod proxy_cmd;
mod relay_cmd;
mod scaletest_cmd;
mod server_cmd;
mod settings;
mod telemetry;
mod tools_cmd;
mod up_cmd;

use clap::{CommandFactory, Parser, Subcommand};
use std::process::ExitCode;

/// Warren: self-hosted remote development workspaces.
#[derive(Debug, Parser)]
#[command(name = "warren", version, about, propagate_version = true)]
#[command(after_long_help = warren_cli::EXIT_CODES_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run Warren on this machine: server, relay and an agent on the local Docker or Podman.
    Up(up_cmd::UpArgs),
    /// Run the control plane (REST API, reconcile handler, lifecycle timers).
    Server(server_cmd::ServerArgs),
    /// Run a relay: agents connect to it; it forwards their calls and carries traffic to them.
    Relay(relay_cmd::RelayArgs),
    /// Run the proxy: workspace hosts in the browser (sign-in, WebSocket, HTTP/2) and SSH;
    /// `warren proxy rotate-key` rotates the replicas' cookie key, `host-key` prints an SSH
    /// host key.
    Proxy(Box<proxy_cmd::ProxyArgs>),
    /// Run an agent (no subcommand), or manage agents: create, list, show, update.
    #[command(args_conflicts_with_subcommands = true)]
    Agent(agent_cmd::AgentArgs),
    /// Attach this machine to Warren as the backing of a `proxy` mount: its ports, a terminal
    /// and SSH (sftp too) through the proxy, with the mount's connector token.
    Connect(connect_cmd::ConnectArgs),
    /// Build what agents inject into workspaces: `warren tools build` makes the editor's
    /// tools image.
    Tools(tools_cmd::ToolsArgs),
    /// Operations on the server's own files: `backup` and `restore` (SQLite).
    Admin(admin_cmd::AdminArgs),
    /// Load a running installation (as an admin): users, workspaces on simulated agents, a
    /// mixed API workload at a rate; prints latency percentiles, then removes what it made.
    Scaletest(scaletest_cmd::ScaletestArgs),
    #[command(flatten)]
    User(warren_cli::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Up(args) => {
            telemetry::init();
            run_service(up_cmd::run(args))
        }
        Command::Server(args) => {
            telemetry::init();
            run_service(server_cmd::run(args))
        }
        Command::Relay(args) => {
            telemetry::init();
            run_service(relay_cmd::run(args))
        }
        Command::Proxy(mut args) => match args.client_command() {
            Some(cmd) => warren_cli::main(cmd, Cli::command),
            None => {
                telemetry::init();
                run_service(proxy_cmd::run(*args))
            }
        },
        Command::Agent(mut args) => match args.manage.take() {
            Some(cmd) => warren_cli::main(
                warren_cli::Command::Agent(warren_cli::AgentGroup {
                    out: args.out.clone(),
                    cmd,
                }),
                Cli::command,
            ),
            None => {
                telemetry::init();
                run_service(agent_cmd::run(args))
            }
        },
        Command::Connect(args) => {
            telemetry::init();
            run_service(connect_cmd::run(args))
        }
        Command::Tools(args) => run_service(tools_cmd::run(args)),
        Command::Admin(args) => run_service(admin_cmd::run(args)),
        Command::Scaletest(args) => {
            telemetry::init_at("warn");
            let mut clean = true;
            let code = run_service(async {
                clean = scaletest_cmd::run(args).await?;
                Ok(())
            });
            if code == ExitCode::SUCCESS && !clean {
                // The report says what failed or was left behind.
                ExitCode::FAILURE
            } else {
                code
            }
        }
        Command::User(cmd) => warren_cli::main(cmd, Cli::command),
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
