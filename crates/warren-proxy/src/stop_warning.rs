//! Warnings of a planned stop, written into a user's web terminal (issue 41, item 7): ten
//! minutes before a lifecycle timer stops or terminates the workspace, a line says when and
//! why. The plan moves (using the workspace postpones the idle timeout; a restart moves the
//! others), so the server is asked again when a warning falls due, and once a warned-of time
//! has passed without the stop.

use crate::http::authz::Principal;
use crate::Shared;
use std::time::Duration;
use warren_types::internal::PlannedStop;
use warren_types::UserId;

/// How long before the change the warning comes.
pub(crate) const WARN_BEFORE_MS: i64 = 10 * 60_000;
/// A plan found due within this much more than [`WARN_BEFORE_MS`] is warned of at once
/// (clocks and sweeps are not to the millisecond).
const SLACK_MS: i64 = 5_000;
/// After a warned-of time passes without the change (the timers' sweep is periodic), or
/// when the server cannot be asked, look again after this long.
const RECHECK_MS: i64 = 60_000;

/// The terminal line of a warning: on a line of its own, in the terminal's warning colour.
pub(crate) fn line(p: &PlannedStop, now_ms: i64) -> String {
    let minutes = ((p.at_ms - now_ms).max(0) + 59_999) / 60_000;
    let what = if p.terminated {
        "is terminated"
    } else {
        "stops"
    };
    format!(
        "\r\n\x1b[1;33m[warren] This workspace {what} in {minutes} min: {}.\x1b[0m\r\n",
        p.reason
    )
}

async fn sleep_until_ms(at_ms: i64) {
    let wait = at_ms - warren_types::unix_millis();
    if wait > 0 {
        tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())).await;
    }
}

/// Warnings for one terminal of a workspace: each call waits for the next one due and
/// returns its line; it never returns while nothing is planned.
pub(crate) struct StopWarnings<'a> {
    shared: &'a Shared,
    /// Who uses the terminal, and where.
    user: UserId,
    workspace: &'a str,
    plan: Option<PlannedStop>,
    /// The planned time last warned of.
    warned: Option<i64>,
}

impl<'a> StopWarnings<'a> {
    /// Warnings for `user`'s terminal in `workspace`, whose plan the server last told as
    /// `plan`.
    pub(crate) fn new(
        shared: &'a Shared,
        user: UserId,
        workspace: &'a str,
        plan: Option<PlannedStop>,
    ) -> Self {
        StopWarnings {
            shared,
            user,
            workspace,
            plan,
            warned: None,
        }
    }

    /// The plan as the server sees it now; `Err` when it cannot be asked.
    async fn ask(&self) -> Result<Option<PlannedStop>, ()> {
        let query = Principal::User(self.user).query(self.workspace, None);
        match self.shared.server.access(&query).await {
            Ok(a) => Ok(a.planned_stop),
            // No longer theirs to use (or gone): nothing more to warn of.
            Err(crate::server_api::ServerApiError::Denied) => Ok(None),
            Err(e) => {
                tracing::debug!(error = %crate::error_chain(&e), "asking for the workspace's plan failed");
                Err(())
            }
        }
    }

    pub(crate) async fn next(&mut self) -> String {
        loop {
            let Some(p) = self.plan.clone() else {
                return std::future::pending().await;
            };
            let due = if self.warned == Some(p.at_ms) {
                p.at_ms + RECHECK_MS
            } else {
                p.at_ms - WARN_BEFORE_MS
            };
            sleep_until_ms(due).await;
            match self.ask().await {
                Ok(fresh) => self.plan = fresh,
                Err(()) => {
                    sleep_until_ms(warren_types::unix_millis() + RECHECK_MS).await;
                    continue;
                }
            }
            let now = warren_types::unix_millis();
            if let Some(f) = &self.plan {
                if f.at_ms - now <= WARN_BEFORE_MS + SLACK_MS && self.warned != Some(f.at_ms) {
                    self.warned = Some(f.at_ms);
                    return line(f, now);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_says_when_and_why_on_a_line_of_its_own() {
        let p = PlannedStop {
            at_ms: 600_000,
            terminated: false,
            reason: "it will then have been unused for 30 minutes".into(),
        };
        let l = line(&p, 1_000);
        assert!(l.starts_with("\r\n") && l.ends_with("\r\n"), "{l:?}");
        assert!(
            l.contains(
                "This workspace stops in 10 min: it will then have been unused for 30 minutes."
            ),
            "{l:?}"
        );
        let t = PlannedStop {
            terminated: true,
            ..p
        };
        assert!(line(&t, 600_000).contains("is terminated in 0 min"));
    }
}
