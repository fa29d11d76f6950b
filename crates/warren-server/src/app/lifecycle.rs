//! Lifecycle rules of lifecycle.md: which desired-state requests are allowed, and the
//! timers (max active hours, max stopped hours, the 8760 h ceiling, the idle timeout) —
//! each rule written once, applied by the periodic sweep and by every reconcile alike — and
//! a user's working hours (stop in the evening, start again in the morning), applied by the
//! sweep after the agent's timers and a spent budget's stop (`budgets`), which win.

use super::{AppError, AppState};
use crate::store::workspaces::ChangedBy;
use crate::store::StoreError;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::config::{LifecyclePolicy, MAX_WORKSPACE_LIFE_HOURS};
use warren_types::schedule::WorkingHours;
use warren_types::{ActualState, AgentId, DesiredState};

const HOUR_MS: i64 = 3_600_000;
const MINUTE_MS: i64 = 60_000;

/// Checks a user's request to move a workspace to `requested`.
pub fn check_desired_state_request(
    name: &str,
    desired: DesiredState,
    actual: ActualState,
    requested: DesiredState,
) -> Result<(), AppError> {
    if desired == DesiredState::Terminated || actual == ActualState::Terminated {
        return Err(AppError::conflict(
            "invalid_state_transition",
            format!(
                "workspace {name:?} is Terminated (desired {desired}, actual {actual}); a terminated workspace \
                 cannot be changed. Allowed requests on other workspaces: Running, Stopped, RestartRequested, Terminated"
            ),
        ));
    }
    let _ = requested;
    Ok(())
}

/// What the timers look at in a workspace.
#[derive(Debug, Clone, Copy)]
pub struct TimerInput {
    pub desired: DesiredState,
    pub desired_state_updated_at: i64,
    pub created_at: i64,
    /// Last use through the proxy, for the idle policy.
    pub last_activity_at: Option<i64>,
}

/// Whether the idle timeout (not another timer) is what stops the workspace now: a request
/// may wake such a workspace again.
pub fn is_idle_stop(policy: &LifecyclePolicy, w: TimerInput, now: i64) -> bool {
    timer_decision(policy, w, now) == Some(DesiredState::Stopped)
        && now - w.desired_state_updated_at
            < i64::from(policy.max_active_hours_before_stop) * HOUR_MS
}

/// What a lifecycle timer does to a workspace now, if anything.
pub fn timer_decision(policy: &LifecyclePolicy, w: TimerInput, now: i64) -> Option<DesiredState> {
    if w.desired == DesiredState::Terminated {
        return None;
    }
    if now - w.created_at >= i64::from(MAX_WORKSPACE_LIFE_HOURS) * HOUR_MS {
        return Some(DesiredState::Terminated);
    }
    let held = now - w.desired_state_updated_at;
    match w.desired {
        DesiredState::Running
            if held >= i64::from(policy.max_active_hours_before_stop) * HOUR_MS =>
        {
            Some(DesiredState::Stopped)
        }
        DesiredState::Stopped
            if held >= i64::from(policy.max_stopped_hours_before_termination) * HOUR_MS =>
        {
            Some(DesiredState::Terminated)
        }
        // Idle policy (off by default): no activity reported by the proxy, and no start,
        // for the timeout.
        DesiredState::Running => {
            let timeout = i64::from(policy.idle_timeout_minutes.filter(|m| *m > 0)?) * MINUTE_MS;
            let quiet = |t: i64| now - t >= timeout;
            (quiet(w.desired_state_updated_at) && w.last_activity_at.is_none_or(quiet))
                .then_some(DesiredState::Stopped)
        }
        _ => None,
    }
}

/// What a timer will do to a workspace next, and when (unix ms), unless it is used or its
/// desired state changes first; `None` when no timer is due (a transient request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    pub to: DesiredState,
    pub at: i64,
    pub reason: String,
    /// The idle timeout: using the workspace moves it.
    pub postponed_by_use: bool,
}

/// The next change [`timer_decision`] (or the owner's working hours, [`schedule_decision`])
/// will make to `w`: the earliest that applies, with the same thresholds (so what is shown is
/// what happens).
pub fn planned(
    policy: &LifecyclePolicy,
    w: TimerInput,
    working: Option<&WorkingHours>,
) -> Option<Planned> {
    let plan = |to, at, reason: String, postponed_by_use| Planned {
        to,
        at,
        reason,
        postponed_by_use,
    };
    let mut candidates = vec![];
    match w.desired {
        DesiredState::Terminated => return None,
        DesiredState::Running => {
            let hours = policy.max_active_hours_before_stop;
            candidates.push(plan(
                DesiredState::Stopped,
                w.desired_state_updated_at + i64::from(hours) * HOUR_MS,
                format!("it has then run for {hours} hours, its agent's most (max_active_hours_before_stop)"),
                false,
            ));
            if let Some(at) = working.and_then(|h| h.next_stop(w.desired_state_updated_at)) {
                candidates.push(plan(
                    DesiredState::Stopped,
                    at,
                    format!(
                        "your working hours end then ({}); warren working-hours changes them",
                        working.map(WorkingHours::describe).unwrap_or_default()
                    ),
                    false,
                ));
            }
            if let Some(minutes) = policy.idle_timeout_minutes.filter(|m| *m > 0) {
                let since = w.last_activity_at.map_or(w.desired_state_updated_at, |a| {
                    a.max(w.desired_state_updated_at)
                });
                candidates.push(plan(
                    DesiredState::Stopped,
                    since + i64::from(minutes) * MINUTE_MS,
                    format!("it will then have been unused for {minutes} minutes, its agent's idle timeout; using it (a page, a terminal, SSH) postpones it"),
                    true,
                ));
            }
        }
        DesiredState::Stopped => {
            let hours = policy.max_stopped_hours_before_termination;
            candidates.push(plan(
                DesiredState::Terminated,
                w.desired_state_updated_at + i64::from(hours) * HOUR_MS,
                format!("it will then have been stopped for {hours} hours, its agent's most (max_stopped_hours_before_termination); starting it postpones it"),
                false,
            ));
        }
        DesiredState::RestartRequested => {}
    }
    candidates.push(plan(
        DesiredState::Terminated,
        w.created_at + i64::from(MAX_WORKSPACE_LIFE_HOURS) * HOUR_MS,
        format!("a workspace lives at most {MAX_WORKSPACE_LIFE_HOURS} hours"),
        false,
    ));
    if w.desired == DesiredState::RestartRequested {
        return candidates.pop();
    }
    // The earliest; on a tie the one `timer_decision` applies (termination first).
    candidates
        .into_iter()
        .min_by_key(|p| (p.at, p.to != DesiredState::Terminated))
}

/// [`planned`] for a workspace as stored: its agent's policy and its owner's working hours,
/// and the stop of a running workspace whose space's budget is `spent`, when that is earlier.
pub fn planned_for(
    w: &crate::store::workspaces::WorkspaceRow,
    spent: &super::budgets::Spent,
) -> Option<Planned> {
    let input = TimerInput {
        desired: w.desired_state,
        desired_state_updated_at: w.desired_state_updated_at,
        created_at: w.created_at,
        last_activity_at: w.last_activity_at,
    };
    let timers = planned(&w.agent_lifecycle, input, w.owner_working_hours.as_ref());
    let budget = spent
        .stop_at(&w.space_path, w.owner_is_admin)
        .filter(|_| w.desired_state == DesiredState::Running);
    match (timers, budget) {
        (Some(p), Some(at)) if p.at <= at => Some(p),
        (_, Some(at)) => Some(budget_stop(at)),
        (p, None) => p,
    }
}

/// What a lifecycle timer plans for a running workspace a spent budget stops at `at`.
fn budget_stop(at: i64) -> Planned {
    Planned {
        to: warren_types::DesiredState::Stopped,
        at,
        reason: format!(
            "the budget of its space (or of one above it) is spent for this month, and what runs \
             there stops {} minutes later; an admin can raise it (warren space budget show)",
            super::budgets::GRACE_MS / 60_000
        ),
        postponed_by_use: false,
    }
}

/// What the owner's working hours do to `w` now, after the agent's timers (which win): stop
/// a running workspace when a stop time passed since it was last started, and start one
/// they stopped (and nothing since) when a start time passed since.
pub fn schedule_decision(
    hours: &WorkingHours,
    w: TimerInput,
    schedule_stopped: bool,
    now: i64,
) -> Option<DesiredState> {
    match w.desired {
        DesiredState::Running => hours
            .last_stop(now)
            .filter(|t| *t > w.desired_state_updated_at)
            .map(|_| DesiredState::Stopped),
        DesiredState::Stopped if schedule_stopped => hours
            .last_start(now)
            .filter(|t| *t > w.desired_state_updated_at)
            .map(|_| DesiredState::Running),
        _ => None,
    }
}

/// Applies the timers to every workspace of every agent once; returns the agents touched.
/// A workspace changed meanwhile (a lost race) is looked at again on the next sweep.
pub async fn run_timers_once(state: &AppState) -> Result<Vec<AgentId>, StoreError> {
    let now = state.clock.now_ms();
    let mut touched = vec![];
    let spent = super::budgets::Spent::load(state).await?;
    for agent in state.store.list_agents().await? {
        let mut changed = 0;
        for w in state.store.timer_rows(agent.id).await? {
            let input = TimerInput {
                desired: w.desired,
                desired_state_updated_at: w.desired_state_updated_at,
                created_at: w.created_at,
                last_activity_at: w.last_activity_at,
            };
            let (to, by) = match timer_decision(&agent.config.lifecycle, input, now) {
                Some(to) if is_idle_stop(&agent.config.lifecycle, input, now) => {
                    (to, ChangedBy::IdleTimeout)
                }
                Some(to) => (to, ChangedBy::Other),
                None if w.desired == DesiredState::Running
                    && spent
                        .stop_at(&w.space_path, w.owner_is_admin)
                        .is_some_and(|at| now >= at) =>
                {
                    (DesiredState::Stopped, ChangedBy::Budget)
                }
                None => match w
                    .working_hours
                    .as_ref()
                    .and_then(|h| schedule_decision(h, input, w.schedule_stopped, now))
                {
                    Some(to) => (to, ChangedBy::WorkingHours),
                    None => continue,
                },
            };
            if to == DesiredState::Running && !startable(state, &agent, w.id).await? {
                continue;
            }
            if state
                .store
                .set_desired_state(w.id, w.version, to, now, by)
                .await?
                .is_some()
            {
                tracing::info!(agent = %agent.name, workspace_id = %w.id, from = %w.desired, %to, ?by, "lifecycle timer changed desired state");
                changed += 1;
                let why = match by {
                    ChangedBy::IdleTimeout => "idle timeout",
                    ChangedBy::WorkingHours => "working hours",
                    ChangedBy::Budget => "the space's budget is spent",
                    ChangedBy::Other => "lifecycle policy",
                };
                let target = match state.store.workspace_by_id(w.id).await? {
                    Some(row) => super::audit::Target::workspace(&row),
                    None => super::audit::Target::new("workspace", w.id, ""),
                };
                super::audit::by_system(state, super::audit::desired_action(to), target, why).await;
            }
        }
        if changed > 0 {
            state.signals.notify(agent.id);
            state.changed();
            touched.push(agent.id);
        }
    }
    Ok(touched)
}

/// Whether the working hours may start workspace `id` again, as a user's start may: only
/// while its agent still allows what it runs (an exception taken back keeps it stopped).
async fn startable(
    state: &AppState,
    agent: &crate::store::agents::AgentRow,
    id: warren_types::WorkspaceId,
) -> Result<bool, StoreError> {
    let Some(w) = state.store.workspace_by_id(id).await? else {
        return Ok(false);
    };
    if super::render::machine_class(agent, &w.resources).is_err() {
        tracing::info!(agent = %agent.name, workspace = %w.name, "working hours did not start a workspace of a machine class its agent no longer offers");
        return Ok(false);
    }
    if let Err(e) = super::budgets::check_start(state, w.owner_id, &w.space_path).await {
        // Past a budget, or the budget could not be read: the next round asks again.
        tracing::info!(agent = %agent.name, workspace = %w.name, reason = %e.message, "working hours did not start a workspace");
        return Ok(false);
    }
    match warren_devfile::check_rendered_isolation(&w.objects(&state.store)?, &agent.config) {
        Ok(()) => Ok(true),
        Err(e) => {
            tracing::info!(agent = %agent.name, workspace = %w.name, reason = %e, "working hours did not start a workspace its agent no longer allows");
            Ok(false)
        }
    }
}

/// Runs the timers every `interval` until `shutdown`, while this server holds the housekeeping
/// lease (`leases`).
pub async fn timer_task(state: AppState, interval: Duration, shutdown: CancellationToken) {
    super::leases::housekeeping_rounds(&state, interval, &shutdown, || async {
        if let Err(e) = run_timers_once(&state).await {
            tracing::warn!(error = %warren_types::error_chain(&e), "lifecycle timers failed; retrying on the next tick");
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(desired: DesiredState, updated: i64, created: i64) -> TimerInput {
        TimerInput {
            desired,
            desired_state_updated_at: updated,
            created_at: created,
            last_activity_at: None,
        }
    }

    #[test]
    fn timers() {
        let p = LifecyclePolicy::default();
        let h = HOUR_MS;
        use DesiredState::*;
        assert_eq!(timer_decision(&p, at(Running, 0, 0), 35 * h), None);
        assert_eq!(timer_decision(&p, at(Running, 0, 0), 36 * h), Some(Stopped));
        assert_eq!(timer_decision(&p, at(Stopped, 0, 0), 743 * h), None);
        assert_eq!(
            timer_decision(&p, at(Stopped, 0, 0), 744 * h),
            Some(Terminated)
        );
        assert_eq!(
            timer_decision(&p, at(RestartRequested, 0, 0), 100 * h),
            None
        );
        assert_eq!(
            timer_decision(&p, at(Running, 8759 * h, 0), 8760 * h),
            Some(Terminated),
            "ceiling"
        );
        assert_eq!(timer_decision(&p, at(Terminated, 0, 0), 9000 * h), None);
    }

    #[test]
    fn idle_timeout_counts_from_the_later_of_start_and_activity() {
        let p = LifecyclePolicy {
            idle_timeout_minutes: Some(30),
            ..Default::default()
        };
        let m = MINUTE_MS;
        use DesiredState::*;
        let mut w = at(Running, 0, 0);
        assert_eq!(timer_decision(&p, w, 29 * m), None);
        assert_eq!(timer_decision(&p, w, 30 * m), Some(Stopped));
        w.last_activity_at = Some(20 * m);
        assert_eq!(timer_decision(&p, w, 49 * m), None, "used 29 minutes ago");
        assert_eq!(timer_decision(&p, w, 50 * m), Some(Stopped));
        w.desired_state_updated_at = 45 * m;
        assert_eq!(timer_decision(&p, w, 50 * m), None, "started 5 minutes ago");
        let off = LifecyclePolicy::default();
        assert_eq!(timer_decision(&off, at(Running, 0, 0), 30 * m), None);
        assert!(
            is_idle_stop(&p, at(Running, 0, 0), 30 * m),
            "the idle timeout's stop"
        );
        assert!(
            !is_idle_stop(&p, at(Running, 0, 0), 36 * 60 * m),
            "the max-active timer's stop is not idle"
        );
        assert_eq!(timer_decision(&p, at(Stopped, 0, 0), 30 * m), None);
    }

    #[test]
    fn what_is_planned_is_what_the_timers_do() {
        let p = LifecyclePolicy {
            idle_timeout_minutes: Some(30),
            ..Default::default()
        };
        let (h, m) = (HOUR_MS, MINUTE_MS);
        use DesiredState::*;
        let mut w = at(Running, 0, 0);
        w.last_activity_at = Some(20 * m);
        let next = planned(&p, w, None).unwrap();
        assert_eq!(
            (next.to, next.at, next.postponed_by_use),
            (Stopped, 50 * m, true)
        );
        assert_eq!(timer_decision(&p, w, next.at - 1), None);
        assert_eq!(timer_decision(&p, w, next.at), Some(Stopped));
        let off = LifecyclePolicy::default();
        let next = planned(&off, at(Running, 0, 0), None).unwrap();
        assert_eq!((next.to, next.at), (Stopped, 36 * h));
        assert!(next.reason.contains("36 hours"), "{}", next.reason);
        let next = planned(&off, at(Stopped, 0, 0), None).unwrap();
        assert_eq!((next.to, next.at), (Terminated, 744 * h));
        assert_eq!(
            timer_decision(&off, at(Stopped, 0, 0), next.at),
            Some(Terminated)
        );
        // The ceiling comes first near the end of a workspace's life.
        let old = at(Running, 8750 * h, 0);
        let next = planned(&off, old, None).unwrap();
        assert_eq!((next.to, next.at), (Terminated, 8760 * h));
        assert_eq!(planned(&off, at(Terminated, 0, 0), None), None);
    }

    #[test]
    fn working_hours_stop_in_the_evening_and_start_what_they_stopped() {
        let hours = WorkingHours {
            timezone: "UTC".into(),
            days: warren_types::schedule::Day::ALL.to_vec(),
            start: Some("08:00".into()),
            stop: "18:00".into(),
        };
        let h = HOUR_MS;
        // A day: midnight of 2026-01-05, a Monday.
        let day = 1_767_571_200_000;
        use DesiredState::*;
        let started_at_9 = at(Running, day + 9 * h, day);
        assert_eq!(
            schedule_decision(&hours, started_at_9, false, day + 17 * h),
            None
        );
        assert_eq!(
            schedule_decision(&hours, started_at_9, false, day + 18 * h),
            Some(Stopped)
        );
        // Started again at 20:00 by its user: it runs until tomorrow's 18:00.
        let late = at(Running, day + 20 * h, day);
        assert_eq!(schedule_decision(&hours, late, false, day + 23 * h), None);
        // Stopped by them: started again the next morning; stopped by its user: not.
        let evening = at(Stopped, day + 18 * h, day);
        assert_eq!(schedule_decision(&hours, evening, true, day + 31 * h), None);
        assert_eq!(
            schedule_decision(&hours, evening, true, day + 32 * h),
            Some(Running)
        );
        assert_eq!(
            schedule_decision(&hours, evening, false, day + 32 * h),
            None
        );
        // What is planned says so.
        let p = LifecyclePolicy::default();
        let next = planned(&p, started_at_9, Some(&hours)).unwrap();
        assert_eq!((next.to, next.at), (Stopped, day + 18 * h));
        assert!(next.reason.contains("working hours"), "{}", next.reason);
    }

    #[test]
    fn terminated_is_final() {
        for req in DesiredState::ALL {
            let e = check_desired_state_request(
                "w",
                DesiredState::Terminated,
                ActualState::Terminating,
                req,
            )
            .unwrap_err();
            assert_eq!(e.kind, super::super::ErrorKind::Conflict);
            assert!(
                e.message.contains("Terminated") && e.message.contains("Allowed"),
                "{}",
                e.message
            );
            assert!(check_desired_state_request(
                "w",
                DesiredState::Running,
                ActualState::Terminated,
                req
            )
            .is_err());
            assert!(check_desired_state_request(
                "w",
                DesiredState::Running,
                ActualState::Running,
                req
            )
            .is_ok());
        }
    }
}
