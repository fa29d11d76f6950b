//! Arguments of `warren working-hours`: set, clear and show a user's working hours.

use crate::OutputArgs;
use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct WorkingHoursGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: WorkingHoursCommand,
}

#[derive(Debug, Subcommand)]
pub enum WorkingHoursCommand {
    /// Stop your running workspaces at STOP on DAYS (your time zone), and start those it
    /// stopped again at START. The agents' own limits still apply.
    #[command(after_long_help = "Examples:
  warren working-hours set --days mon-fri --start 08:30 --stop 18:00 --timezone Europe/Paris
  warren working-hours set --days mon,wed,fri --stop 19:00   # no morning start; TZ from $TZ")]
    Set {
        /// Days they apply: `mon-fri`, `mon,wed,fri`, `sat-sun`.
        #[arg(long, value_parser = parse_days)]
        days: std::vec::Vec<warren_types::schedule::Day>,
        /// Local time (HH:MM) the workspaces they stopped start again.
        #[arg(long)]
        start: Option<String>,
        /// Local time (HH:MM) your running workspaces stop.
        #[arg(long)]
        stop: String,
        /// IANA time zone (`Europe/Paris`); default: this machine's (`$TZ`, `/etc/timezone`,
        /// `/etc/localtime`).
        #[arg(long)]
        timezone: Option<String>,
    },
    /// Forget them: your workspaces run until the agents' limits.
    #[command(visible_alias = "rm")]
    Clear,
    /// Show them.
    Show,
}

fn parse_days(s: &str) -> Result<std::vec::Vec<warren_types::schedule::Day>, String> {
    warren_types::schedule::Day::parse_list(s)
}
