//! `warren region`: the regions administrators registered (issue 42) — the one door each
//! region's workspaces are shown with while one of its proxies serves it.

use crate::commands::{client, done, named, print};
use crate::output::{self, Format};
use crate::{CliError, OutputArgs};
use clap::{Args, Subcommand};
use warren_types::api::RegionSpec;

#[derive(Debug, Args)]
pub struct RegionGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: RegionCommand,
}

#[derive(Debug, Subcommand)]
pub enum RegionCommand {
    /// Register a region with its door, or change the door. The region's proxies must be
    /// started with the same --workspace-domain, scheme and --ssh-public-address; a proxy
    /// saying another door is refused, so the region's URLs never point elsewhere.
    #[command(
        after_long_help = "Example, region eu served by proxies behind ws.eu.example.com:
  warren region set eu --workspace-domain ws.eu.example.com --ssh-address ssh.eu.example.com:22"
    )]
    Set {
        /// The region's name, as in its agents' `region`.
        name: String,
        /// The domain of its workspace hosts, `host[:port]` (the port browsers use, when not
        /// the scheme's).
        #[arg(long, value_name = "HOST[:PORT]")]
        workspace_domain: String,
        /// The scheme browsers use.
        #[arg(long, default_value = "https", value_parser = ["https", "http"])]
        scheme: String,
        /// Its proxies' SSH front door; without it, SSH goes through the central proxy.
        #[arg(long, value_name = "HOST:PORT")]
        ssh_address: Option<String>,
    },
    /// List the regions, their doors and whether one of their proxies serves now.
    #[command(visible_alias = "ls")]
    List,
    /// Remove a region: its workspaces are reached through the central proxy at once.
    #[command(visible_alias = "rm")]
    Remove { name: String },
}

pub async fn region(out: Format, cmd: RegionCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        RegionCommand::Set {
            name,
            workspace_domain,
            scheme,
            ssh_address,
        } => {
            let door = RegionSpec {
                workspace_domain,
                public_scheme: scheme,
                ssh_address,
            };
            let r = named("region", &name, c.set_region(&name, &door).await)?;
            print(out, &r, |r| output::regions(std::slice::from_ref(r)));
        }
        RegionCommand::List => print(out, &c.regions().await?, |l| output::regions(l)),
        RegionCommand::Remove { name } => done(
            "region",
            &name,
            c.delete_region(&name).await,
            &format!(
                "Region {name} removed: its workspaces are reached through the central proxy."
            ),
        )?,
    }
    Ok(())
}
