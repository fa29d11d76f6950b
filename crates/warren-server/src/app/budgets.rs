//! Budgets (issue 44, item 4): a space may have a budget of weighted hours (running hours
//! times the machine class's weight) per calendar month, UTC, which counts what ran in it
//! and below it (`app::usage`'s hours). Past a budget of the space or of any space above
//! it, no workspace there is created or started — by its user, the proxy's start button or
//! working hours — with a message that says which budget, how much was used and when it
//! renews. Admins set budgets; admins' own workspaces are exempt only where the budget says
//! so. Everyone who sees a space sees what remains.
//!
//! What runs when a budget is spent goes on for [`GRACE_MS`] — the lifecycle timers plan
//! its stop, so the API, the CLI and its terminals warn of it as of any timer's — and is then
//! stopped. The usage sampler marks a budget spent when it finds it so ([`mark_spent`]);
//! setting the budget again (raising it) or a new month lifts the mark.

use super::audit::{self, Target};
use super::{rights, AppError, AppState, ErrorKind, Principal};
use crate::store::usage::Budget;
use crate::store::StoreError;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use warren_types::api::{SetBudgetRequest, SpaceBudget, MAX_BUDGET_HOURS};
use warren_types::UserId;

const HOUR_MS: i64 = 3_600_000;
/// How long a running workspace goes on once its space's budget is found spent.
pub const GRACE_MS: i64 = 30 * 60_000;

/// The budgets found spent this month, as the lifecycle timers and the views apply them.
#[derive(Debug, Default)]
pub struct Spent(Vec<Budget>);

impl Spent {
    pub async fn load(state: &AppState) -> Result<Self, StoreError> {
        let (start, _) = month_of(state.clock.now_ms());
        Ok(Spent(
            state.store.spent_budgets(start.timestamp_millis()).await?,
        ))
    }

    /// [`Spent::load`] where `w` runs (a budget stops nothing else).
    pub async fn load_for(
        state: &AppState,
        w: &crate::store::workspaces::WorkspaceRow,
    ) -> Result<Self, StoreError> {
        if w.desired_state == warren_types::DesiredState::Running {
            Self::load(state).await
        } else {
            Ok(Self::default())
        }
    }

    /// When a running workspace in the space at `space`, of an owner who is an admin or
    /// not, is stopped for a spent budget (there or above), if it is.
    pub fn stop_at(&self, space: &str, owner_is_admin: bool) -> Option<i64> {
        self.0
            .iter()
            .filter(|b| {
                space == b.space
                    || space
                        .strip_prefix(&b.space)
                        .is_some_and(|r| r.starts_with('/'))
            })
            .filter(|b| !(b.admins_exempt && owner_is_admin))
            .filter_map(|b| b.spent_at)
            .map(|t| t + GRACE_MS)
            .min()
    }
}

/// Marks each budget spent this month when it is and was not yet, and lifts the mark of one
/// no longer spent (a new month; a raised budget is unmarked when set). After each usage
/// sample, on the housekeeping replica.
pub async fn mark_spent(state: &AppState) -> Result<(), AppError> {
    let now = state.clock.now_ms();
    let start = month_of(now).0.timestamp_millis();
    for b in state.store.all_budgets().await? {
        let used = state.store.weighted_ms_under(&b.space, start).await?;
        let spent = used >= b.weighted_hours.saturating_mul(HOUR_MS);
        let marked = b.spent_at.is_some_and(|t| t >= start);
        if spent && !marked {
            if !state.store.mark_budget_spent(&b.space, now, start).await? {
                // Another replica marked it a moment ago.
                continue;
            }
            tracing::info!(space = %b.space, hours = b.weighted_hours, "budget spent: what runs in the space stops after the grace period");
            let t = Target::named("space", &b.space).in_space(&b.space);
            let detail = format!(
                "{} weighted hours this month; running workspaces stop in {} minutes",
                b.weighted_hours,
                GRACE_MS / 60_000
            );
            audit::by_system(state, "space.budget_spent", t, &detail).await;
        } else if !spent && b.spent_at.is_some() {
            state.store.clear_budget_spent(&b.space).await?;
        }
    }
    Ok(())
}

/// The calendar month (UTC) `now_ms` falls in: its start and the next month's.
pub fn month_of(now_ms: i64) -> (DateTime<Utc>, DateTime<Utc>) {
    let now = crate::db::from_millis(now_ms);
    let start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now);
    let (y, m) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    let next = Utc
        .with_ymd_and_hms(y, m, 1, 0, 0, 0)
        .single()
        .unwrap_or(now);
    (start, next)
}

/// `acme/platform/x` → `acme`, `acme/platform`, `acme/platform/x`.
fn at_and_above(path: &str) -> Vec<String> {
    let mut out = vec![];
    let mut end = 0;
    for (i, c) in path.char_indices() {
        if c == '/' {
            out.push(path[..i].to_owned());
        }
        end = i + c.len_utf8();
    }
    out.push(path[..end].to_owned());
    out
}

async fn shown(state: &AppState, b: &Budget) -> Result<SpaceBudget, AppError> {
    let (start, next) = month_of(state.clock.now_ms());
    let used_ms = state
        .store
        .weighted_ms_under(&b.space, start.timestamp_millis())
        .await?;
    let used = used_ms as f64 / HOUR_MS as f64;
    Ok(SpaceBudget {
        space: b.space.clone(),
        weighted_hours: b.weighted_hours,
        admins_exempt: b.admins_exempt,
        used_hours: used,
        remaining_hours: (b.weighted_hours as f64 - used).max(0.0),
        period_start: start,
        renews_at: next,
    })
}

/// Refuses to create or start a workspace of `owner` in the space at `path` when a budget
/// there or above is spent.
pub async fn check_start(state: &AppState, owner: UserId, path: &str) -> Result<(), AppError> {
    let budgets = state.store.budgets_on(&at_and_above(path)).await?;
    let mut owner_is_admin = None;
    for b in &budgets {
        if b.admins_exempt {
            if owner_is_admin.is_none() {
                let u = state.store.user_by_id(owner).await?;
                owner_is_admin = Some(u.is_some_and(|u| u.is_admin));
            }
            if owner_is_admin == Some(true) {
                continue;
            }
        }
        let s = shown(state, b).await?;
        if s.used_hours >= s.weighted_hours as f64 {
            return Err(AppError::new(
                ErrorKind::Forbidden,
                "budget_exhausted",
                format!(
                    "space {:?} has used its budget of {} weighted hours for {} ({:.1} used): \
                     nothing in it starts until {}, unless an admin raises the budget \
                     (warren space budget set {} --hours N)",
                    b.space,
                    b.weighted_hours,
                    s.period_start.format("%B %Y"),
                    s.used_hours,
                    s.renews_at.format("%Y-%m-%d %H:%M UTC"),
                    b.space
                ),
            ));
        }
    }
    Ok(())
}

/// The budgets that apply to the space at `path` (its own and those above it), with what
/// remains of each: for whoever may see the space.
pub async fn show(
    state: &AppState,
    who: &Principal,
    path: &str,
) -> Result<Vec<SpaceBudget>, AppError> {
    let (s, _) = rights::visible_space(state, who, path).await?;
    let mut out = vec![];
    for b in state.store.budgets_on(&at_and_above(&s.path)).await? {
        out.push(shown(state, &b).await?);
    }
    Ok(out)
}

/// Sets the budget of the space at `path` (admins).
pub async fn set(
    state: &AppState,
    who: &Principal,
    path: &str,
    req: &SetBudgetRequest,
) -> Result<SpaceBudget, AppError> {
    let r: Result<SpaceBudget, AppError> = async {
        who.require_admin()?;
        if !(0..=MAX_BUDGET_HOURS).contains(&req.weighted_hours) {
            return Err(AppError::invalid_field(
                "weighted_hours",
                format!("must be between 0 and {MAX_BUDGET_HOURS}"),
            ));
        }
        let s = state
            .store
            .space_by_path(path)
            .await?
            .ok_or_else(|| rights::space_not_found(path))?;
        state
            .store
            .set_budget(
                s.id,
                req.weighted_hours,
                req.admins_exempt,
                state.clock.now_ms(),
            )
            .await?;
        tracing::info!(space = %s.path, hours = req.weighted_hours, by = %who.user.username, "budget set");
        let b = Budget {
            space: s.path,
            weighted_hours: req.weighted_hours,
            admins_exempt: req.admins_exempt,
            spent_at: None,
        };
        shown(state, &b).await
    }
    .await;
    let detail = format!(
        "{} weighted hours a month{}",
        req.weighted_hours,
        if req.admins_exempt {
            ", admins exempt"
        } else {
            ""
        }
    );
    let t = Target::named("space", path).in_space(path);
    audit::audited_with(state, who, "space.set_budget", t, detail, r).await
}

/// Removes the budget of the space at `path` (admins).
pub async fn remove(state: &AppState, who: &Principal, path: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        let s = state
            .store
            .space_by_path(path)
            .await?
            .ok_or_else(|| rights::space_not_found(path))?;
        if !state.store.remove_budget(s.id).await? {
            return Err(AppError::not_found(format!("a budget on space {path:?}")));
        }
        tracing::info!(space = %s.path, by = %who.user.username, "budget removed");
        Ok(())
    }
    .await;
    let t = Target::named("space", path).in_space(path);
    audit::audited(state, who, "space.remove_budget", t, r).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_runs_from_its_first_day_to_the_next_ones() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis();
        let (a, b) = month_of(at("2026-12-06T08:00:00Z"));
        assert_eq!(a.to_rfc3339(), "2026-12-01T00:00:00+00:00");
        assert_eq!(b.to_rfc3339(), "2027-01-01T00:00:00+00:00");
        let (a, b) = month_of(at("2027-02-28T23:59:59Z"));
        assert_eq!(a.to_rfc3339(), "2027-02-01T00:00:00+00:00");
        assert_eq!(b.to_rfc3339(), "2027-03-01T00:00:00+00:00");
    }

    #[test]
    fn a_path_and_the_spaces_above_it() {
        assert_eq!(at_and_above("acme"), ["acme"]);
        assert_eq!(
            at_and_above("acme/platform/x"),
            ["acme", "acme/platform", "acme/platform/x"]
        );
    }
}
