//! `--wait`: poll a workspace until its actual state is the one the action aims at, and a
//! running one until its startup (clone, commands) is through.
//!
//! The decision is a pure function of the goal, what was seen so far and the latest answer,
//! so every rule is unit-tested without a server.

use chrono::{DateTime, Utc};
use std::io::IsTerminal;
use std::time::Duration;
use warren_client::Client;
use warren_types::api::Workspace;
use warren_types::startup::{StartupState, WorkspaceStartup};
use warren_types::{ActualState, DesiredState};

/// What an action waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Goal {
    /// `create`, `start`: actual `Running`.
    Running,
    /// `stop`: actual `Stopped`.
    Stopped,
    /// `rm`: actual `Terminated` (or the workspace gone).
    Terminated,
    /// `restart`: through a stop (the server flips desired `RestartRequested` back to
    /// `Running` only once the agent reported `Stopped`), then `Running`.
    Restarted,
    /// `resize`: the re-rendered workspace `Running` again. Seen either as a non-running state
    /// after the request, or as `Running` reported after `requested_at`.
    Resized { requested_at: DateTime<Utc> },
}

impl Goal {
    fn target(self) -> ActualState {
        match self {
            Goal::Running | Goal::Restarted | Goal::Resized { .. } => ActualState::Running,
            Goal::Stopped => ActualState::Stopped,
            Goal::Terminated => ActualState::Terminated,
        }
    }

    /// Desired states under which the goal can still be reached.
    fn desired_ok(self, d: DesiredState) -> bool {
        match self {
            Goal::Running | Goal::Resized { .. } => d == DesiredState::Running,
            Goal::Stopped => d == DesiredState::Stopped,
            Goal::Terminated => d == DesiredState::Terminated,
            Goal::Restarted => matches!(d, DesiredState::RestartRequested | DesiredState::Running),
        }
    }
}

/// Longest single wait on the server for a change (its limit is 60 s).
const WATCH_SECS: u64 = 30;

/// How long the first look at a startup waits; each later one waits twice as long, up to the
/// wait's interval. A startup from a prebuild (a fetch, the steps marked for it skipped) is
/// through in well under a second: a fixed half-second poll was up to half its time.
const FIRST_STARTUP_POLL: Duration = Duration::from_millis(100);

/// What to do after one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Done,
    Continue,
    Fail(String),
}

/// Memory of a wait across polls.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    saw_not_running: bool,
    /// When the action was made (the server's clock): a failure reported before it is the
    /// previous attempt's, not this one's outcome.
    since: Option<DateTime<Utc>>,
    /// A state other than `Failed`/`Error` was seen: the new attempt has begun.
    saw_not_failed: bool,
}

impl Progress {
    /// A wait for the outcome of an action the server recorded at `since`.
    pub fn since(since: DateTime<Utc>) -> Self {
        Progress {
            since: Some(since),
            ..Progress::default()
        }
    }

    /// Whether a `Failed`/`Error` answer is an earlier attempt's, still showing.
    fn is_stale_failure(&self, w: &Workspace) -> bool {
        match (self.since, w.actual_state_updated_at) {
            (Some(since), Some(reported)) => !self.saw_not_failed && reported < since,
            // A server that does not say when the state changed: every failure counts.
            _ => false,
        }
    }
}

/// Decides after one answer.
pub fn step(goal: Goal, progress: &mut Progress, w: &Workspace) -> Step {
    let actual = w.actual_state;
    if actual != ActualState::Running {
        progress.saw_not_running = true;
    }
    if !goal.desired_ok(w.desired_state) {
        return Step::Fail(format!(
            "workspace {:?} is now desired {} (actual {}); it will not become {}",
            w.name,
            w.desired_state,
            actual,
            goal.target()
        ));
    }
    if actual == ActualState::Terminated && goal != Goal::Terminated {
        return Step::Fail(format!("workspace {:?} is Terminated", w.name));
    }
    // Failed/Error on the way to Stopped or Terminated are normal starting points
    // (`Failed → Stopped|Terminating`); only a run that cannot start is a failure.
    let failed = matches!(actual, ActualState::Failed | ActualState::Error);
    if !failed {
        progress.saw_not_failed = true;
    }
    if failed && goal.target() == ActualState::Running {
        if progress.is_stale_failure(w) {
            return Step::Continue;
        }
        let reason = w
            .failure_reason
            .clone()
            .unwrap_or_else(|| "no reason reported".into());
        return Step::Fail(format!("workspace {:?} is {actual}: {reason}", w.name));
    }
    if actual != goal.target() {
        return Step::Continue;
    }
    match goal {
        Goal::Restarted if w.desired_state != DesiredState::Running => Step::Continue,
        Goal::Resized { requested_at }
            if !progress.saw_not_running && w.updated_at <= requested_at =>
        {
            Step::Continue
        }
        _ => Step::Done,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("{0}")]
    Failed(String),
    #[error("workspace {name:?} is Running, but its startup failed: {reason}; it runs on, to be fixed in (its output: warren ws logs {name})")]
    Startup { name: String, reason: String },
    #[error("timed out after {after:?} waiting for the startup of workspace {name:?} (now {now})")]
    StartupTimeout {
        name: String,
        after: Duration,
        now: String,
    },
    #[error("timed out after {after:?} waiting for workspace {name:?} to become {target} (now {actual}{reason})")]
    Timeout {
        name: String,
        after: Duration,
        target: ActualState,
        actual: ActualState,
        reason: String,
    },
    #[error(transparent)]
    Client(#[from] warren_client::Error),
}

/// Waits on `GET /workspaces/{name}?watch_version=` (the server answers on each change; a
/// server without versions is polled every `interval`) until `goal` is reached, it cannot
/// be, or `timeout` passes; `None` when a workspace being terminated is gone altogether.
/// Shows a spinner with the actual state on stderr when it is a terminal.
pub async fn wait(
    client: &Client,
    name: &str,
    goal: Goal,
    since: Option<DateTime<Utc>>,
    timeout: Duration,
    interval: Duration,
) -> Result<Option<Workspace>, WaitError> {
    let spinner = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new_spinner();
        pb.enable_steady_tick(Duration::from_millis(120));
        Some(pb)
    } else {
        None
    };
    let deadline = tokio::time::Instant::now() + timeout;
    // Said once each time it changes when there is no spinner to show it (a script's log).
    let mut said_waiting: Option<String> = None;
    let mut result = poll(client, name, goal, since, timeout, interval, |w| {
        let waiting = w
            .waiting_reason
            .as_ref()
            .map(|r| format!("; {r}"))
            .unwrap_or_default();
        if let Some(pb) = &spinner {
            pb.set_message(format!(
                "{}: {} (waiting for {}){waiting}",
                w.name,
                w.actual_state,
                goal.target()
            ));
        } else if w.waiting_reason.is_some() && w.waiting_reason != said_waiting {
            said_waiting.clone_from(&w.waiting_reason);
            eprintln!("{}: {}{waiting}", w.name, w.actual_state);
        }
    })
    .await;
    // Running is the container; usable is its startup (the clone, the commands) through.
    if let (Ok(Some(_)), ActualState::Running) = (&result, goal.target()) {
        let settled = settle(client, name, goal, deadline, timeout, interval, |s| {
            if let Some(pb) = &spinner {
                pb.set_message(format!("{name}: Running, startup {}", s.describe()));
            }
        })
        .await;
        result = match settled {
            Ok(Some(w)) => Ok(Some(w)),
            Ok(None) => result,
            Err(e) => Err(e),
        };
    }
    if let Some(pb) = spinner {
        pb.finish_and_clear();
    }
    result
}

async fn poll(
    client: &Client,
    name: &str,
    goal: Goal,
    since: Option<DateTime<Utc>>,
    timeout: Duration,
    interval: Duration,
    mut show: impl FnMut(&Workspace),
) -> Result<Option<Workspace>, WaitError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut progress = since.map(Progress::since).unwrap_or_default();
    // The version last seen: the next read waits on the server until it moves.
    let mut seen: Option<i64> = None;
    loop {
        let read = match seen {
            None => client.get_workspace(name).await,
            Some(v) => {
                // `Running` is reported only once the workspace is usable (the agent waits for
                // its probes and `minReadySeconds`), so the wait ends on the report itself.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let secs = (left.as_millis().div_ceil(1000) as u64).clamp(1, WATCH_SECS);
                client.watch_workspace(name, v, secs).await
            }
        };
        let w = match read {
            Ok(w) => w,
            // A terminated workspace may be purged; gone is as terminated as it gets.
            Err(e) if e.is_not_found() && goal == Goal::Terminated => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        show(&w);
        match step(goal, &mut progress, &w) {
            Step::Done => return Ok(Some(w)),
            Step::Fail(msg) => return Err(WaitError::Failed(msg)),
            Step::Continue => {}
        }
        seen = Some(w.version);
        if tokio::time::Instant::now() + interval > deadline {
            return Err(WaitError::Timeout {
                name: w.name.clone(),
                after: timeout,
                target: goal.target(),
                actual: w.actual_state,
                reason: w
                    .failure_reason
                    .as_ref()
                    .or(w.waiting_reason.as_ref())
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
            });
        }
        // A server that does not report versions (always 0) is polled, as before.
        if w.version == 0 {
            tokio::time::sleep(interval).await;
        }
    }
}

/// After the workspace is `Running`: waits until its startup says it is usable (ready or
/// done) or failed. `Some` with the workspace as last read when it was waited for; `None`
/// when there is no startup to wait for (a server without the status, a workspace whose
/// startup does not tell it), which is said.
async fn settle(
    client: &Client,
    name: &str,
    goal: Goal,
    deadline: tokio::time::Instant,
    timeout: Duration,
    interval: Duration,
    mut show: impl FnMut(&WorkspaceStartup),
) -> Result<Option<Workspace>, WaitError> {
    let mut progress = Progress::default();
    let mut last = WorkspaceStartup::unknown();
    let mut pause = FIRST_STARTUP_POLL.min(interval);
    loop {
        match client.workspace_startup(name).await {
            Ok(startup) => last = startup,
            Err(e) if e.is_not_found() => {
                eprintln!("note: not waiting for the startup of {name}: {e}");
                return Ok(None);
            }
            // Its output out of reach for a moment (an agent reconnecting): asked again.
            Err(e) => last.step = Some(format!("its status cannot be read now: {e}")),
        }
        show(&last);
        match last.state {
            StartupState::Ready | StartupState::Done => {
                return client
                    .get_workspace(name)
                    .await
                    .map(Some)
                    .map_err(Into::into)
            }
            StartupState::Failed if last.was_ready => {
                eprintln!(
                    "warning: {name} is usable, but a later step of its startup failed: {} (its output: warren ws logs {name})",
                    last.reason.as_deref().unwrap_or("no reason said")
                );
                return client
                    .get_workspace(name)
                    .await
                    .map(Some)
                    .map_err(Into::into);
            }
            StartupState::Failed => {
                return Err(WaitError::Startup {
                    name: name.to_owned(),
                    reason: last.reason.unwrap_or_else(|| "no reason said".to_owned()),
                })
            }
            StartupState::Untold => {
                eprintln!(
                    "note: the startup of {name} does not tell its status here; not waiting for it"
                );
                return Ok(None);
            }
            StartupState::Starting | StartupState::Unknown => {}
        }
        // Still wanted running and running: a stop or a failure meanwhile ends the wait.
        let w = client.get_workspace(name).await?;
        match step(goal, &mut progress, &w) {
            Step::Fail(msg) => return Err(WaitError::Failed(msg)),
            Step::Done | Step::Continue => {}
        }
        if tokio::time::Instant::now() + pause > deadline {
            return Err(WaitError::StartupTimeout {
                name: name.to_owned(),
                after: timeout,
                now: last.describe(),
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws(desired: DesiredState, actual: ActualState, updated_at: &str) -> Workspace {
        Workspace {
            desired_state: desired,
            actual_state: actual,
            updated_at: updated_at.parse().unwrap(),
            failure_reason: Some("image \"nope\" cannot be pulled".into()),
            ..crate::sample::workspace()
        }
    }

    const T0: &str = "2026-03-01T10:00:00Z";
    const T1: &str = "2026-03-01T10:00:05Z";

    fn run(goal: Goal, states: &[(DesiredState, ActualState, &str)]) -> Vec<Step> {
        let mut p = Progress::default();
        states
            .iter()
            .map(|(d, a, t)| step(goal, &mut p, &ws(*d, *a, t)))
            .collect()
    }

    use ActualState as A;
    use DesiredState as D;

    #[test]
    fn start_and_stop_wait_for_their_state() {
        assert_eq!(
            run(
                Goal::Running,
                &[
                    (D::Running, A::CreationRequested, T0),
                    (D::Running, A::Starting, T0),
                    (D::Running, A::Running, T0)
                ]
            ),
            [Step::Continue, Step::Continue, Step::Done]
        );
        // A failed workspace may still be stopped.
        assert_eq!(
            run(
                Goal::Stopped,
                &[
                    (D::Stopped, A::Failed, T0),
                    (D::Stopped, A::Stopping, T0),
                    (D::Stopped, A::Stopped, T0)
                ]
            ),
            [Step::Continue, Step::Continue, Step::Done]
        );
        assert_eq!(
            run(Goal::Terminated, &[(D::Terminated, A::Terminated, T0)]),
            [Step::Done]
        );
    }

    #[test]
    fn failure_while_starting_fails_with_the_reason() {
        let steps = run(Goal::Running, &[(D::Running, A::Failed, T0)]);
        let Step::Fail(msg) = &steps[0] else {
            panic!("{steps:?}")
        };
        assert_eq!(
            msg,
            "workspace \"dev\" is Failed: image \"nope\" cannot be pulled"
        );
    }

    #[test]
    fn a_changed_desired_state_ends_the_wait() {
        let steps = run(Goal::Running, &[(D::Stopped, A::Running, T0)]);
        let Step::Fail(msg) = &steps[0] else {
            panic!("{steps:?}")
        };
        assert!(msg.contains("now desired Stopped"), "{msg}");
        let steps = run(Goal::Stopped, &[(D::Terminated, A::Terminating, T0)]);
        assert!(matches!(&steps[0], Step::Fail(_)), "{steps:?}");
    }

    #[test]
    fn restart_needs_the_flip_back_to_running() {
        assert_eq!(
            run(
                Goal::Restarted,
                &[
                    // Still the old pod: desired not flipped yet.
                    (D::RestartRequested, A::Running, T0),
                    (D::RestartRequested, A::Stopping, T0),
                    (D::Running, A::Stopped, T0),
                    (D::Running, A::Starting, T0),
                    (D::Running, A::Running, T0),
                ]
            ),
            [
                Step::Continue,
                Step::Continue,
                Step::Continue,
                Step::Continue,
                Step::Done
            ]
        );
    }

    /// `ws start|restart|resize --wait` on a `Failed` workspace: the failure still showing
    /// was reported before the action and is not its outcome; the new attempt's is.
    #[test]
    fn an_earlier_failure_is_not_the_outcome_of_a_new_attempt() {
        let at = |t: &str| -> DateTime<Utc> { t.parse().unwrap() };
        let failed_as = |desired: DesiredState, reported: &str| {
            let mut w = ws(desired, A::Failed, T1);
            w.actual_state_updated_at = Some(at(reported));
            w
        };
        let failed = |reported: &str| failed_as(D::RestartRequested, reported);
        for (goal, desired) in [
            (Goal::Restarted, D::RestartRequested),
            (Goal::Running, D::Running),
        ] {
            let failed = |reported: &str| failed_as(desired, reported);
            let mut p = Progress::since(at(T1));
            assert_eq!(step(goal, &mut p, &failed(T0)), Step::Continue, "{goal:?}");
            // The same failure again, reported after the action: this attempt's outcome.
            let new = "2026-03-01T10:00:09Z";
            assert!(
                matches!(step(goal, &mut p, &failed(new)), Step::Fail(m) if m.contains("cannot be pulled")),
                "{goal:?}"
            );
        }
        // Once the new attempt has shown another state, a failure is its outcome even if the
        // server did not move the timestamp.
        let mut p = Progress::since(at(T1));
        let mut stopped = ws(D::RestartRequested, A::Stopped, T1);
        stopped.actual_state_updated_at = Some(at(T0));
        assert_eq!(step(Goal::Restarted, &mut p, &stopped), Step::Continue);
        assert!(matches!(
            step(Goal::Restarted, &mut p, &failed(T0)),
            Step::Fail(_)
        ));
        // A server that does not say when the state changed: every failure counts.
        let mut p = Progress::since(at(T1));
        assert!(matches!(
            step(
                Goal::Restarted,
                &mut p,
                &ws(D::RestartRequested, A::Failed, T0)
            ),
            Step::Fail(_)
        ));
    }

    #[test]
    fn resize_waits_for_a_report_after_the_request() {
        let at: DateTime<Utc> = T0.parse().unwrap();
        let goal = Goal::Resized { requested_at: at };
        assert_eq!(
            run(
                goal,
                &[(D::Running, A::Running, T0), (D::Running, A::Running, T1)]
            ),
            [Step::Continue, Step::Done]
        );
        assert_eq!(
            run(
                goal,
                &[(D::Running, A::Starting, T0), (D::Running, A::Running, T0)]
            ),
            [Step::Continue, Step::Done]
        );
    }
}
