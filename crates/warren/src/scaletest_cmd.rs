//! `warren scaletest`: parses the run's settings, finds the admin's credentials as the CLI
//! does, starts the simulated agents (`warren_agent` with the simulated runtime, dialling the
//! relay like real agents) and hands the run to `warren_scaletest`. The first Ctrl-C (or
//! SIGTERM) stops the run and cleans up; a second one leaves at once.

use anyhow::Context;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_agent::connection::ConnectionConfig;
use warren_agent::reconciler::ReconcilerConfig;
use warren_agent::{AgentConfig, RuntimeChoice};
use warren_scaletest::{AgentLauncher, ScaletestConfig};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct ScaletestArgs {
    /// Users to create; each signs in with a password of its own.
    #[arg(long, default_value_t = 10)]
    users: usize,
    /// Workspaces to create, spread over the users and agents.
    #[arg(long, default_value_t = 20)]
    workspaces: usize,
    /// Simulated agents to start (each dials the relay at --relay-url); 0 puts the workspaces
    /// on the real agent named by --agent.
    #[arg(long, default_value_t = 1)]
    agents: usize,
    /// The existing agent for the workspaces when --agents is 0.
    #[arg(long)]
    agent: Option<String>,
    /// The relay's agent URL the simulated agents dial (as `warren agent --relay-url`).
    #[arg(long, env = "WARREN_RELAY_URL")]
    relay_url: Option<url::Url>,
    /// CA bundle (PEM) the simulated agents trust for the relay.
    #[arg(long, env = "WARREN_RELAY_CA_FILE")]
    relay_ca_file: Option<PathBuf>,
    /// Requests per second of the mixed API workload (list, show, logs, stop, start, create,
    /// delete, tree); 0 skips it.
    #[arg(long, default_value_t = 20.0)]
    api_rate: f64,
    /// How long the workload runs, in seconds.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Calls in flight at once while setting up and cleaning up.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Seconds the workspaces may take to run, and the clean-up to finish.
    #[arg(long, default_value_t = 300)]
    ready_timeout: u64,
    /// Seconds between progress lines (on standard error).
    #[arg(long, default_value_t = 10)]
    progress_every: u64,
    /// Web terminals to hold open through the proxy while the workload runs (simulated
    /// agents only: their terminals write back what they read, which is timed and checked).
    #[arg(long, default_value_t = 0)]
    terminals: usize,
    /// SSH sessions to hold open through the proxy while the workload runs (simulated agents
    /// only), signed in with each user's token as the password.
    #[arg(long = "ssh", default_value_t = 0)]
    ssh_sessions: usize,
    /// Bytes a second each terminal and SSH session writes, in chunks ten times a second.
    #[arg(long, default_value_t = 4096)]
    session_rate: u64,
    /// The report's format on standard output.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

pub async fn run(args: ScaletestArgs) -> anyhow::Result<bool> {
    let config = ScaletestConfig {
        users: args.users,
        workspaces: args.workspaces,
        agents: args.agents,
        agent: args.agent.clone(),
        api_rate: args.api_rate,
        duration: Duration::from_secs(args.duration),
        concurrency: args.concurrency,
        ready_timeout: Duration::from_secs(args.ready_timeout),
        progress_every: Duration::from_secs(args.progress_every),
        terminals: args.terminals,
        ssh_sessions: args.ssh_sessions,
        session_rate: args.session_rate,
    };
    config.validate()?;
    let launcher = if args.agents > 0 {
        let relay_url = args
            .relay_url
            .clone()
            .context("simulated agents dial the relay: --relay-url or WARREN_RELAY_URL")?;
        if let Some(path) = &args.relay_ca_file {
            warren_tls::CaBundle::load(path).context("the relay's CA bundle")?;
        }
        Some(launcher(relay_url, args.relay_ca_file.clone()))
    } else {
        None
    };
    let path = warren_cli::credentials::default_path()?;
    let creds = warren_cli::credentials::resolve(
        warren_cli::credentials::load(&path)?,
        std::env::var(warren_cli::credentials::URL_ENV).ok(),
        std::env::var(warren_cli::credentials::TOKEN_ENV).ok(),
    )
    .context("not logged in: run `warren login --url URL` as an admin, or set WARREN_URL and WARREN_TOKEN")?;
    let admin = warren_client::Client::new(&creds.url, creds.token)?;
    let shutdown = stop_on_signals();
    let progress: warren_scaletest::Progress = Arc::new(|line| eprintln!("{line}"));
    let report = warren_scaletest::run(config, admin, launcher, progress, shutdown).await?;
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Text => print!("{}", text(&report)),
    }
    Ok(report.error.is_none() && report.cleanup.leftovers.is_empty())
}

fn launcher(relay_url: url::Url, relay_ca_file: Option<PathBuf>) -> AgentLauncher {
    Arc::new(move |token: String, stop: CancellationToken| {
        let mut connection = ConnectionConfig::new(relay_url.clone(), token);
        connection.relay_ca_file = relay_ca_file.clone();
        let config = AgentConfig {
            connection,
            agent: None,
            runtime: RuntimeChoice::Simulated,
            reconciler: ReconcilerConfig::default(),
            leader_election: None,
        };
        tokio::spawn(async move {
            if let Err(e) = warren_agent::run(config, None, stop).await {
                tracing::error!(error = %warren_types::error_chain(&e), "a simulated agent stopped");
            }
        })
    })
}

/// Cancelled on the first Ctrl-C or SIGTERM; the second leaves at once (exit code 130).
fn stop_on_signals() -> CancellationToken {
    let token = crate::relay_cmd::shutdown_on_signals();
    let second = token.clone();
    tokio::spawn(async move {
        second.cancelled().await;
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("interrupted twice: leaving the clean-up unfinished");
            std::process::exit(130);
        }
    });
    token
}

fn text(r: &warren_scaletest::Report) -> String {
    use warren_scaletest::stats::table;
    let mut out = format!("scale test {}\n\nset-up\n{}", r.run, table(&r.setup));
    if let Some(s) = r.ready_seconds {
        out.push_str(&format!("all workspaces running after {s:.1} s\n"));
    }
    if !r.load.is_empty() {
        out.push_str(&format!(
            "\nmixed workload over {:.1} s\n{}",
            r.load_seconds,
            table(&r.load)
        ));
    }
    if r.session_bytes > 0 {
        out.push_str(&format!(
            "terminal and SSH sessions: {} KiB written and echoed intact ({:.1} KiB/s)\n",
            r.session_bytes >> 10,
            r.session_bytes as f64 / 1024.0 / r.load_seconds.max(0.001)
        ));
    }
    if r.interrupted {
        out.push_str("\ninterrupted before the end\n");
    }
    if let Some(e) = &r.error {
        out.push_str(&format!("\nthe run stopped early: {e}\n"));
    }
    let c = &r.cleanup;
    out.push_str(&format!(
        "\nclean-up: {} user(s) and {} agent(s) removed in {:.1} s\n",
        c.users_deleted, c.agents_deleted, c.seconds
    ));
    for l in &c.leftovers {
        out.push_str(&format!("  left behind: {l}\n"));
    }
    out
}
