//! `warren admin`: operations on an installation's own files, run on a server's machine with
//! the server's flags, variables or `--config` (so they find the same database and key).

use crate::server_cmd::{self, ServerArgs};
use anyhow::Context;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    cmd: AdminCommand,
}

#[derive(Debug, clap::Subcommand)]
enum AdminCommand {
    /// Copy the SQLite database (consistently, while servers run) and the key that encrypts
    /// its secrets into DIR, with a manifest of checksums. PostgreSQL: use pg_dump.
    Backup {
        /// The backup directory (created; must be empty).
        #[arg(long, short = 'o', value_name = "DIR")]
        output: PathBuf,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Put a backup back: checks its checksums and schema version, writes the database and
    /// the key, migrates it to this release. Stop every server first.
    Restore {
        /// The backup directory.
        #[arg(long, value_name = "DIR")]
        from: PathBuf,
        /// Replace an existing database, and a key that is not the backup's.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The audit log, read straight from the database.
    Audit {
        #[command(subcommand)]
        cmd: AuditCommand,
    },
}

#[derive(Debug, clap::Subcommand)]
enum AuditCommand {
    /// Check that no entry was changed or removed since it was written: every entry's hash
    /// must cover the one before it, and the last must be the newest appended. Exit code 1
    /// when the chain is broken.
    Verify {
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        server: ServerArgs,
    },
}

pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    match args.cmd {
        AdminCommand::Backup { output, server } => {
            let config = server_cmd::config_of(server)?;
            let m = warren_server::backup::backup(&config, &output)
                .await
                .with_context(|| format!("backing up into {}", output.display()))?;
            println!(
                "backed up schema version {} into {} (database and secret key; keep them \
                 together and private)",
                m.schema_version,
                output.display()
            );
        }
        AdminCommand::Restore {
            from,
            force,
            server,
        } => {
            let config = server_cmd::config_of(server)?;
            let m = warren_server::backup::restore(&config, &from, force)
                .await
                .with_context(|| format!("restoring {}", from.display()))?;
            println!(
                "restored the backup of {} (schema version {}, Warren {}) into {}",
                m.created_at,
                m.schema_version,
                m.warren_version,
                config.home.display()
            );
        }
        AdminCommand::Audit {
            cmd: AuditCommand::Verify { json, server },
        } => {
            let config = server_cmd::config_of(server)?;
            let v = warren_server::verify_audit(&config).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
            } else {
                print!("{}", warren_cli::output::audit_verification(&v));
            }
            if v.broken.is_some() {
                anyhow::bail!(
                    "the audit log's chain is broken at entry {}",
                    v.broken.map_or(0, |b| b.seq)
                );
            }
        }
    }
    Ok(())
}
