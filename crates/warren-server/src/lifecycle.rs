//! Lifecycle rules of lifecycle.md: which desired-state requests are allowed, and the
//! timers (max active hours, max stopped hours, the 8760 h ceiling, the idle timeout).

use crate::error::HttpError;
use crate::state::AppState;
use http::StatusCode;
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
) -> Result<(), HttpError> {
    if desired == DesiredState::Terminated || actual == ActualState::Terminated {
        return Err(HttpError::new(
            StatusCode::CONFLICT,
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

/// What a lifecycle timer does to a workspace now, if anything.
pub fn timer_decision(
    policy: &LifecyclePolicy,
    desired: DesiredState,
    desired_state_updated_at: i64,
    created_at: i64,
    now: i64,
) -> Option<DesiredState> {
    if desired == DesiredState::Terminated {
        return None;
    }
    if now - created_at >= i64::from(MAX_WORKSPACE_LIFE_HOURS) * HOUR_MS {
        return Some(DesiredState::Terminated);
    }
    let held = now - desired_state_updated_at;
    match desired {
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
        _ => None,
    }
}

/// Applies the timers to every workspace of every agent once; returns the agents touched.
pub async fn run_timers_once(state: &AppState) -> Result<Vec<AgentId>, sqlx::Error> {
    let now = state.clock.now_ms();
    let mut touched = vec![];
    for agent in state.store.list_agents().await? {
        let p = &agent.config.lifecycle;
        let mut changed = 0;
        let ceiling = now - i64::from(MAX_WORKSPACE_LIFE_HOURS) * HOUR_MS;
        let mut stmts: Vec<(&str, DesiredState, i64)> = vec![
            (
                "desired_state <> 'Terminated' AND created_at <= $4",
                DesiredState::Terminated,
                ceiling,
            ),
            (
                "desired_state = 'Running' AND desired_state_updated_at <= $4",
                DesiredState::Stopped,
                now - i64::from(p.max_active_hours_before_stop) * HOUR_MS,
            ),
            (
                "desired_state = 'Stopped' AND desired_state_updated_at <= $4",
                DesiredState::Terminated,
                now - i64::from(p.max_stopped_hours_before_termination) * HOUR_MS,
            ),
        ];
        // Idle policy (off by default): no activity reported by the proxy, and no start,
        // for the timeout since max(last activity, desired_state_updated_at).
        if let Some(minutes) = p.idle_timeout_minutes.filter(|m| *m > 0) {
            stmts.push((
                "desired_state = 'Running' AND desired_state_updated_at <= $4 AND NOT EXISTS \
                 (SELECT 1 FROM workspace_activity x WHERE x.workspace_id = workspaces.id \
                 AND x.last_activity_at > $4)",
                DesiredState::Stopped,
                now - i64::from(minutes) * MINUTE_MS,
            ));
        }
        for (cond, to, cutoff) in stmts {
            let r = sqlx::query(&format!(
                "UPDATE workspaces SET desired_state = $1, \
                 desired_state_updated_at = CASE WHEN responded_to_agent_at IS NOT NULL AND responded_to_agent_at > $2 \
                     THEN responded_to_agent_at ELSE $2 END, \
                 needs_response = 1, updated_at = $2, version = version + 1 WHERE agent_id = $3 AND {cond}"
            ))
            .bind(to.as_str())
            .bind(now)
            .bind(agent.id.get())
            .bind(cutoff)
            .execute(&state.store.db.pool)
            .await?;
            if r.rows_affected() > 0 {
                tracing::info!(agent = %agent.name, to = %to, count = r.rows_affected(), "lifecycle timer changed desired state");
            }
            changed += r.rows_affected();
        }
        if changed > 0 {
            state.signals.notify(agent.id);
            touched.push(agent.id);
        }
    }
    Ok(touched)
}

/// Runs the timers every `interval` until `shutdown`.
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
        if let Err(e) = run_timers_once(&state).await {
            tracing::warn!(error = %e, "lifecycle timers failed; retrying on the next tick");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timers() {
        let p = LifecyclePolicy::default();
        let h = HOUR_MS;
        use DesiredState::*;
        assert_eq!(timer_decision(&p, Running, 0, 0, 35 * h), None);
        assert_eq!(timer_decision(&p, Running, 0, 0, 36 * h), Some(Stopped));
        assert_eq!(timer_decision(&p, Stopped, 0, 0, 743 * h), None);
        assert_eq!(timer_decision(&p, Stopped, 0, 0, 744 * h), Some(Terminated));
        assert_eq!(timer_decision(&p, RestartRequested, 0, 0, 100 * h), None);
        assert_eq!(
            timer_decision(&p, Running, 8759 * h, 0, 8760 * h),
            Some(Terminated),
            "ceiling"
        );
        assert_eq!(timer_decision(&p, Terminated, 0, 0, 9000 * h), None);
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
            assert_eq!(e.status, StatusCode::CONFLICT);
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
