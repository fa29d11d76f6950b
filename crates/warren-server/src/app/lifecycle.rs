//! Lifecycle rules of lifecycle.md: which desired-state requests are allowed, and the
//! timers (max active hours, max stopped hours, the 8760 h ceiling, the idle timeout) —
//! each rule written once, applied by the periodic sweep and by every reconcile alike.

use super::{AppError, AppState};
use crate::store::StoreError;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::config::{LifecyclePolicy, MAX_WORKSPACE_LIFE_HOURS};
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

/// Applies the timers to every workspace of every agent once; returns the agents touched.
/// A workspace changed meanwhile (a lost race) is looked at again on the next sweep.
pub async fn run_timers_once(state: &AppState) -> Result<Vec<AgentId>, StoreError> {
    let now = state.clock.now_ms();
    let mut touched = vec![];
    for agent in state.store.list_agents().await? {
        let mut changed = 0;
        for w in state.store.timer_rows(agent.id).await? {
            let input = TimerInput {
                desired: w.desired,
                desired_state_updated_at: w.desired_state_updated_at,
                created_at: w.created_at,
                last_activity_at: w.last_activity_at,
            };
            let Some(to) = timer_decision(&agent.config.lifecycle, input, now) else {
                continue;
            };
            let idle = is_idle_stop(&agent.config.lifecycle, input, now);
            if state
                .store
                .set_desired_state(w.id, w.version, to, now, idle)
                .await?
                .is_some()
            {
                tracing::info!(agent = %agent.name, workspace_id = %w.id, from = %w.desired, %to, "lifecycle timer changed desired state");
                changed += 1;
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

/// Runs the timers every `interval` until `shutdown`, while this server holds the housekeeping
/// lease (`leases`).
pub async fn timer_task(state: AppState, interval: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Cancel-safe: cancellation only flips a flag.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: a lost tick is simply taken on the next iteration.
            _ = tick.tick() => {}
        }
        if !state.housekeeping.hold(&state).await {
            continue;
        }
        if let Err(e) = run_timers_once(&state).await {
            tracing::warn!(error = %warren_types::error_chain(&e), "lifecycle timers failed; retrying on the next tick");
        }
    }
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
