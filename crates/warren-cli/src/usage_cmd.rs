//! `warren usage`: what ran — running hours, weighted hours, and the CPU, memory and storage
//! asked for — summed by space, user, workspace or machine class (admins: everything; others:
//! their own workspaces and the spaces they own), as a table, JSON or CSV.

use crate::audit_cmd::parse_time;
use crate::commands::{client, print};
use crate::output::Format;
use crate::{CliError, OutputArgs};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use comfy_table::{presets, Table};
use warren_types::api::{SetBudgetRequest, SpaceBudget, UsageBy, UsageQuery, UsageReport};

#[derive(Debug, Args)]
#[command(after_long_help = "Examples:
  warren usage --by space --since 30d
  warren usage --by user --space acme --since 2026-11-01 --until 2026-12-01
  warren usage --by class --csv > usage.csv")]
pub struct UsageArgs {
    #[command(flatten)]
    pub out: OutputArgs,
    /// Rows by space, user, workspace or class.
    #[arg(long, default_value = "space", value_parser = ["space", "user", "workspace", "class"])]
    by: String,
    /// From this time: RFC 3339, a date (`2026-12-01`, UTC), or an age (`24h`, `7d`);
    /// 30 days ago by default.
    #[arg(long, value_parser = parse_time)]
    since: Option<DateTime<Utc>>,
    /// Before this time (same forms); now by default.
    #[arg(long, value_parser = parse_time)]
    until: Option<DateTime<Utc>>,
    /// Only what ran in this space or below it.
    #[arg(long)]
    space: Option<String>,
    /// Print CSV (as the server writes it) instead.
    #[arg(long)]
    csv: bool,
}

pub async fn usage(a: UsageArgs) -> Result<(), CliError> {
    let (c, _) = client()?;
    let by = match a.by.as_str() {
        "user" => UsageBy::User,
        "workspace" => UsageBy::Workspace,
        "class" => UsageBy::Class,
        _ => UsageBy::Space,
    };
    let q = UsageQuery {
        by: Some(by),
        since: a.since,
        until: a.until,
        space: a.space,
        format: None,
    };
    if a.csv {
        print!("{}", c.usage_csv(&q).await?);
        return Ok(());
    }
    let r = c.usage(&q).await?;
    print(a.out.output, &r, table);
    Ok(())
}

fn table(r: &UsageReport) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header([
        r.by.as_str().to_uppercase().as_str(),
        "WORKSPACES",
        "HOURS",
        "WEIGHTED",
        "CPU-HOURS",
        "USED",
        "GIB-HOURS",
        "USED",
        "STORAGE GIB-HOURS",
    ]);
    for row in &r.rows {
        t.add_row(vec![
            row.key.clone(),
            row.workspaces.to_string(),
            format!("{:.1}", row.running_hours),
            format!("{:.1}", row.weighted_hours),
            format!("{:.1}", row.cpu_core_hours),
            format!("{:.1}", row.cpu_used_core_hours),
            format!("{:.1}", row.memory_gib_hours),
            format!("{:.1}", row.memory_used_gib_hours),
            format!("{:.1}", row.storage_gib_hours),
        ]);
    }
    let range = format!(
        "From {} to {}.\n",
        r.since.format("%Y-%m-%d %H:%M"),
        r.until.format("%Y-%m-%d %H:%M UTC")
    );
    if r.rows.is_empty() {
        return format!("{range}Nothing ran.\n");
    }
    format!("{range}{}", crate::share_cmd::trimmed(&t))
}

/// `warren space budget …`: a space's weighted hours per calendar month.
#[derive(Debug, Subcommand)]
pub enum BudgetCommand {
    /// The budgets that apply to a space (its own and those above it), and what remains.
    Show { path: String },
    /// Set a space's budget (admins): past it, nothing in the space or below it starts.
    #[command(after_help = "Example:\n  warren space budget set acme --hours 2000")]
    Set {
        path: String,
        /// Weighted hours (running hours times the machine class's weight) per calendar
        /// month, UTC.
        #[arg(long)]
        hours: i64,
        /// Let admins' own workspaces start past it.
        #[arg(long)]
        admins_exempt: bool,
    },
    /// Remove a space's budget (admins).
    #[command(visible_alias = "remove")]
    Rm { path: String },
}

pub async fn budget(out: Format, cmd: BudgetCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        BudgetCommand::Show { path } => {
            let b = c.space_budgets(&path).await?;
            print(out, &b, |b| budgets(&path, b));
        }
        BudgetCommand::Set {
            path,
            hours,
            admins_exempt,
        } => {
            let req = SetBudgetRequest {
                weighted_hours: hours,
                admins_exempt,
            };
            let b = c.set_space_budget(&path, &req).await?;
            print(out, &b, |b| budgets(&path, std::slice::from_ref(b)));
        }
        BudgetCommand::Rm { path } => {
            c.remove_space_budget(&path).await?;
            eprintln!("Space {path:?} has no budget of its own now.");
        }
    }
    Ok(())
}

fn budgets(path: &str, items: &[SpaceBudget]) -> String {
    if items.is_empty() {
        return format!("No budget applies to {path}.\n");
    }
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header([
        "SPACE",
        "HOURS/MONTH",
        "USED",
        "LEFT",
        "ADMINS EXEMPT",
        "RENEWS",
    ]);
    for b in items {
        t.add_row(vec![
            b.space.clone(),
            b.weighted_hours.to_string(),
            format!("{:.1}", b.used_hours),
            format!("{:.1}", b.remaining_hours),
            if b.admins_exempt { "yes" } else { "no" }.to_owned(),
            b.renews_at.format("%Y-%m-%d").to_string(),
        ]);
    }
    crate::share_cmd::trimmed(&t)
}
