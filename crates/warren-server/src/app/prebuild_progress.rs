//! Watching a workspace's startup from its output, as the prebuild driver does for a
//! prebuild's own workspace and a warm pool's: done, failed (and why), or not yet.

use super::{AppError, AppState};
use crate::store::workspaces::WorkspaceRow;
use warren_types::relay::{LogsTarget, MAX_LOG_TAIL};
use warren_types::startup::{startup_status, StartupState};
use warren_types::{ActualState, DesiredState};

/// A prebuild still running after this long has failed.
pub const TIMEOUT_MS: i64 = 60 * 60 * 1000;

/// The end of a finished prebuild's output kept with it (bytes).
const LOG_KEEP: usize = 16 * 1024;

/// What a running prebuild's workspace says: done (its output), stopped after that, failed
/// (why, and its output when read), or not yet.
pub enum Progress {
    Waiting,
    Done(String),
    Stopped,
    Failed(String, Option<String>),
}

pub async fn progress(
    state: &AppState,
    started_at: i64,
    w: &WorkspaceRow,
) -> Result<Progress, AppError> {
    let now = state.clock.now_ms();
    if w.desired_state == DesiredState::Terminated {
        return Ok(Progress::Failed("its workspace was removed".into(), None));
    }
    if matches!(w.actual_state, ActualState::Failed | ActualState::Error) {
        let why = w
            .failure_reason
            .clone()
            .unwrap_or_else(|| "no reason given".into());
        return Ok(Progress::Failed(
            format!("its workspace failed: {why}"),
            None,
        ));
    }
    let timed_out = now - started_at > TIMEOUT_MS;
    let timeout = || format!("it ran longer than {} minutes", TIMEOUT_MS / 60_000);
    if w.actual_state != ActualState::Running {
        return Ok(if timed_out {
            Progress::Failed(timeout(), None)
        } else {
            Progress::Waiting
        });
    }
    let Some(container) = super::workspaces::startup::startup_containers(&w.objects(&state.store)?)
        .and_then(|c| c.into_iter().next())
    else {
        return Ok(Progress::Failed(
            "its workspace has no startup to watch".into(),
            None,
        ));
    };
    if state.relay_urls.is_empty() {
        return Ok(Progress::Failed("the server reads no workspace's output (it has no relay), so it cannot tell a prebuild's end".into(), None));
    }
    let target = LogsTarget {
        workspace: w.name.clone(),
        namespace: w.namespace.clone(),
        container: Some(container),
        tail: MAX_LOG_TAIL,
        follow: false,
    };
    let output =
        crate::relay::logs::fetch(&state.relay_urls, &state.relay_secret, w.agent_id, &target)
            .await;
    let output = match output {
        Ok(o) => o,
        // Not reachable now (the agent reconnects, the pod is replaced): asked again later.
        Err(e) => {
            tracing::debug!(workspace = %w.name, error = %warren_types::error_chain(&e), "prebuild output not read");
            return Ok(if timed_out {
                Progress::Failed(timeout(), None)
            } else {
                Progress::Waiting
            });
        }
    };
    let status = startup_status(&output);
    let log = tail_of(&output);
    Ok(match status.state {
        StartupState::Done => Progress::Done(log),
        StartupState::Failed => Progress::Failed(
            status.reason.unwrap_or_else(|| "a step failed".into()),
            Some(log),
        ),
        StartupState::Untold => {
            Progress::Failed("its workspace does not tell its startup".into(), Some(log))
        }
        _ if timed_out => Progress::Failed(timeout(), Some(log)),
        _ => Progress::Waiting,
    })
}

/// The end of a prebuild's output, at a line start, as kept with it.
fn tail_of(output: &[u8]) -> String {
    let text = String::from_utf8_lossy(output);
    if text.len() <= LOG_KEEP {
        return text.into_owned();
    }
    let mut from = text.len() - LOG_KEEP;
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let rest = &text[from..];
    rest.find('\n').map_or(rest, |n| &rest[n + 1..]).to_owned()
}
