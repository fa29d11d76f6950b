//! Bodies of the API's usage report: what ran, summed by workspace, user, space or machine
//! class over a time range (issue 44, item 3).

use super::*;

/// What the report's rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    Workspace,
    User,
    #[default]
    Space,
    Class,
}

impl UsageBy {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageBy::Workspace => "workspace",
            UsageBy::User => "user",
            UsageBy::Space => "space",
            UsageBy::Class => "class",
        }
    }
}

/// Query of `GET /usage`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Rows by `workspace`, `user`, `space` (the default) or `class`.
    #[serde(default)]
    pub by: Option<UsageBy>,
    /// From this time (RFC 3339); 30 days ago when absent.
    #[serde(default)]
    pub since: Option<DateTime<Utc>>,
    /// Before this time; now when absent.
    #[serde(default)]
    pub until: Option<DateTime<Utc>>,
    /// Only what ran in this space or below it.
    #[serde(default)]
    pub space: Option<String>,
    /// `json` (the default) or `csv`.
    #[serde(default)]
    pub format: Option<String>,
}

/// One row of the report. Hours are fractional; CPU, memory and storage are what the
/// workspaces asked for (their size or machine class), times the hours they ran; the `used`
/// figures are what their agents measured them using (CPU time, and working-set memory over
/// time), where the runtime can tell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageRow {
    /// The workspace, username, space path or machine class (`-` for workspaces of none).
    pub key: String,
    /// How many workspaces ran.
    pub workspaces: i64,
    pub running_hours: f64,
    /// Running hours times the machine class's weight (1 for workspaces of no class): what
    /// budgets count.
    pub weighted_hours: f64,
    pub cpu_core_hours: f64,
    pub memory_gib_hours: f64,
    pub storage_gib_hours: f64,
    /// CPU time used, in core-hours.
    #[serde(default)]
    pub cpu_used_core_hours: f64,
    /// Working-set memory used over time, in GiB-hours.
    #[serde(default)]
    pub memory_used_gib_hours: f64,
}

/// Answer of `GET /usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageReport {
    pub by: UsageBy,
    pub since: DateTime<Utc>,
    pub until: DateTime<Utc>,
    /// Largest `running_hours` first.
    pub rows: Vec<UsageRow>,
}

impl UsageReport {
    /// The report as CSV, a header line first.
    pub fn to_csv(&self) -> String {
        fn field(s: &str) -> String {
            // Quoted when it would split a field or a line; a leading `=`, `+`, `-`, `@`
            // is prefixed so a spreadsheet does not run it as a formula.
            let s = if s.starts_with(['=', '+', '-', '@']) && s != "-" {
                format!("'{s}")
            } else {
                s.to_owned()
            };
            if s.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s
            }
        }
        let mut out = format!(
            "{},workspaces,running_hours,weighted_hours,cpu_core_hours,memory_gib_hours,storage_gib_hours,\
             cpu_used_core_hours,memory_used_gib_hours\n",
            self.by.as_str()
        );
        for r in &self.rows {
            out.push_str(&format!(
                "{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3}\n",
                field(&r.key),
                r.workspaces,
                r.running_hours,
                r.weighted_hours,
                r.cpu_core_hours,
                r.memory_gib_hours,
                r.storage_gib_hours,
                r.cpu_used_core_hours,
                r.memory_used_gib_hours
            ));
        }
        out
    }
}

/// A budget that applies to a space: its own, or one of a space above it (which counts what
/// ran anywhere below it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SpaceBudget {
    /// The space the budget is set on.
    pub space: String,
    /// Weighted hours (running hours times the machine class's weight) per calendar month,
    /// UTC.
    pub weighted_hours: i64,
    /// Whether admins' own workspaces start past it.
    pub admins_exempt: bool,
    /// Weighted hours used this month, in the space and below (counted once a minute).
    pub used_hours: f64,
    /// What is left this month (never below 0).
    pub remaining_hours: f64,
    pub period_start: DateTime<Utc>,
    /// When the next month's budget begins.
    pub renews_at: DateTime<Utc>,
}

/// Body of `PUT /spaces/{space}/budget`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetBudgetRequest {
    /// Weighted hours per calendar month (UTC); 0 lets nothing start.
    pub weighted_hours: i64,
    /// Let admins' own workspaces start past it (off unless asked).
    #[serde(default)]
    pub admins_exempt: bool,
}

/// Most weighted hours a budget may hold: a thousand workspaces of weight 100 all month.
pub const MAX_BUDGET_HOURS: i64 = 100_000_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_would_split_and_defuses_formulas() {
        let row = |key: &str| UsageRow {
            key: key.into(),
            workspaces: 1,
            running_hours: 1.5,
            weighted_hours: 3.0,
            cpu_core_hours: 3.0,
            memory_gib_hours: 6.0,
            storage_gib_hours: 30.0,
            cpu_used_core_hours: 0.25,
            memory_used_gib_hours: 2.0,
        };
        let r = UsageReport {
            by: UsageBy::Space,
            since: DateTime::UNIX_EPOCH,
            until: DateTime::UNIX_EPOCH,
            rows: vec![row("acme/a,b"), row("=HYPERLINK(\"x\")"), row("-")],
        };
        let csv = r.to_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("space,workspaces,running_hours"));
        assert_eq!(
            lines[1],
            "\"acme/a,b\",1,1.500,3.000,3.000,6.000,30.000,0.250,2.000"
        );
        assert!(
            lines[2].starts_with("\"'=HYPERLINK(\"\"x\"\")\",1,"),
            "{}",
            lines[2]
        );
        assert!(lines[3].starts_with("-,1,"));
    }
}
