//! `warren audit`: who did what, when and from where — the audit log, filtered, newest first
//! (admins: everything; a space's owners: what happened in their spaces), and the check of
//! its hash chain.

use crate::commands::{client, print};
use crate::output::Format;
use crate::{CliError, OutputArgs};
use chrono::{DateTime, Duration, NaiveDate, Utc};
use clap::{Args, Subcommand};
use comfy_table::{presets, Table};
use warren_types::api::{AuditEntry, AuditQuery};

#[derive(Debug, Args)]
pub struct AuditGroup {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: AuditCommand,
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// List entries, newest first.
    #[command(
        visible_alias = "ls",
        after_long_help = "Examples:
  warren audit list --target my-ws --action workspace.* --since 7d
  warren audit list --actor alice --outcome denied
  warren audit list --action session.sign_in --since 2026-12-01 --until 2026-12-02 -o json"
    )]
    List(ListArgs),
    /// Check that no entry was changed or removed since it was written (admin).
    Verify,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Username or id of who acted (also the account a failed sign-in tried).
    #[arg(long)]
    actor: Option<String>,
    /// Name or id of what was acted on.
    #[arg(long)]
    target: Option<String>,
    /// What kind of thing the target is: workspace, user, token, space, agent, ssh_key.
    #[arg(long, value_name = "KIND")]
    target_kind: Option<String>,
    /// An action (`workspace.create`), or all of a kind (`workspace.*`).
    #[arg(long)]
    action: Option<String>,
    /// success, failure or denied.
    #[arg(long, value_parser = ["success", "failure", "denied"])]
    outcome: Option<String>,
    /// Entries about what lives in this space or below it.
    #[arg(long)]
    space: Option<String>,
    /// From this time: RFC 3339, a date (`2026-12-01`, UTC), or an age (`30m`, `24h`, `7d`).
    #[arg(long, value_parser = parse_time)]
    since: Option<DateTime<Utc>>,
    /// Before this time (same forms as --since).
    #[arg(long, value_parser = parse_time)]
    until: Option<DateTime<Utc>>,
    /// At most this many entries (1–1000) unless --all.
    #[arg(long, default_value_t = 100)]
    limit: i64,
    /// Every matching entry, page after page.
    #[arg(long)]
    all: bool,
}

/// A time as `--since` takes it, relative to now for an age.
pub(crate) fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    time_at(s, Utc::now())
}

fn time_at(s: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&Utc));
    }
    if let Ok(d) = NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
    }
    let (n, unit) = s.split_at(s.len().saturating_sub(1));
    let n: i64 =
        n.parse().ok().filter(|n| *n >= 0).ok_or_else(|| {
            format!("{s:?} is not a time (RFC 3339, YYYY-MM-DD, or an age like 24h)")
        })?;
    let age = match unit {
        "s" => Duration::try_seconds(n),
        "m" => Duration::try_minutes(n),
        "h" => Duration::try_hours(n),
        "d" => Duration::try_days(n),
        "w" => Duration::try_weeks(n),
        _ => None,
    }
    .ok_or_else(|| format!("{s:?}: an age ends in s, m, h, d or w"))?;
    now.checked_sub_signed(age)
        .ok_or_else(|| format!("{s:?} is too long ago"))
}

pub async fn audit(out: Format, cmd: AuditCommand) -> Result<(), CliError> {
    let (c, _) = client()?;
    match cmd {
        AuditCommand::List(a) => {
            let mut q = AuditQuery {
                actor: a.actor,
                target: a.target,
                target_kind: a.target_kind,
                action: a.action,
                outcome: a.outcome,
                space: a.space,
                since: a.since,
                until: a.until,
                limit: Some(if a.all { 1000 } else { a.limit }),
                cursor: None,
            };
            let mut items = vec![];
            loop {
                let page = c.audit(&q).await?;
                items.extend(page.items);
                match page.next_cursor {
                    Some(next) if a.all => q.cursor = Some(next),
                    _ => break,
                }
            }
            print(out, &items, |l| entries(l));
        }
        AuditCommand::Verify => {
            let v = c.verify_audit().await?;
            print(out, &v, crate::output::audit_verification);
            if v.broken.is_some() {
                return Err(CliError::Failed("the audit log's chain is broken".into()));
            }
        }
    }
    Ok(())
}

fn entries(items: &[AuditEntry]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header([
        "TIME", "ACTOR", "ACTION", "TARGET", "SPACE", "SOURCE", "VIA", "OUTCOME", "DETAIL",
    ]);
    for e in items {
        let actor = match (&e.actor, e.actor_kind) {
            (Some(a), warren_types::api::AuditActorKind::Anonymous) => format!("({a}?)"),
            (Some(a), _) => a.clone(),
            (None, warren_types::api::AuditActorKind::System) => "(warren)".into(),
            (None, _) => "(unknown)".into(),
        };
        let target = match (&e.target_kind, &e.target, &e.target_id) {
            (Some(k), Some(n), _) if !n.is_empty() => format!("{k} {n}"),
            (Some(k), _, Some(id)) => format!("{k} #{id}"),
            (Some(k), _, None) => k.clone(),
            _ => String::new(),
        };
        let text = |s: &Option<String>| printable(s.as_deref().unwrap_or_default());
        t.add_row(vec![
            e.at.format("%Y-%m-%d %H:%M:%S").to_string(),
            printable(&actor),
            printable(&e.action),
            printable(&target),
            text(&e.space),
            text(&e.source),
            printable(&e.channel),
            e.outcome.as_str().to_owned(),
            text(&e.detail),
        ]);
    }
    crate::share_cmd::trimmed(&t)
}

/// `s` with its control characters written out: what the log holds came partly from anyone
/// (a name tried at sign-in), and must not act on the reader's terminal — whatever server
/// recorded it.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    s.chars()
        .map(|c| match c {
            c if c.is_control() => format!("\\u{{{:x}}}", c as u32),
            c => c.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_entries_do_not_reach_the_terminal() {
        let e: AuditEntry = serde_json::from_value(serde_json::json!({
            "seq": 1, "at": "2026-12-06T12:00:00Z", "actor_kind": "anonymous",
            "actor": "x\u{1b}[2J\u{1b}]0;owned\u{7}", "credential": "password",
            "action": "session.sign_in", "channel": "api", "outcome": "denied",
            "detail": "line one\nline two", "hash": "00"
        }))
        .unwrap();
        let shown = entries(&[e]);
        assert!(
            !shown.contains('\u{1b}') && !shown.contains('\u{7}'),
            "{shown:?}"
        );
        assert!(shown.contains("x\\u{1b}[2J"), "{shown}");
        assert!(shown.contains("line one\\u{a}line two"), "{shown}");
    }

    #[test]
    fn times_are_read_as_rfc3339_dates_or_ages() {
        let now = DateTime::parse_from_rfc3339("2026-12-06T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let at = |s| time_at(s, now).map(|t| t.to_rfc3339());
        assert_eq!(at("7d").unwrap(), "2026-11-29T12:00:00+00:00");
        assert_eq!(at("30m").unwrap(), "2026-12-06T11:30:00+00:00");
        assert_eq!(at("2026-12-01").unwrap(), "2026-12-01T00:00:00+00:00");
        assert_eq!(
            at("2026-12-01T08:00:00+01:00").unwrap(),
            "2026-12-01T07:00:00+00:00"
        );
        assert!(at("7y").unwrap_err().contains("ends in"));
        assert!(at("-3d").unwrap_err().contains("not a time"));
        assert!(at("yesterday").unwrap_err().contains("not a time"));
        assert!(at("99999999999999d").is_err());
    }
}
