//! Telling the server this proxy serves (issue 42): at start, every few seconds after, and
//! that it stops when it does — a region's workspace URLs point at its proxies only while one
//! of them says so, and move to the central proxy at once when the last one leaves.

use crate::Shared;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the presence is said again: well within the server's staleness bound.
const EVERY: Duration = Duration::from_secs(5);
/// How long one saying may take: a slow server must not stretch the gap between two
/// sayings past the server's staleness bound (three of them).
const CALL_WAIT: Duration = Duration::from_secs(3);
/// How long a stopping proxy waits for the server to hear it leave.
const LEAVING_WAIT: Duration = Duration::from_secs(2);

/// Says this proxy serves until `shutdown`, then that it stops; `ssh` whether it serves SSH
/// (its SSH address is said only then).
pub(crate) async fn run(
    shared: Arc<Shared>,
    instance: String,
    ssh: bool,
    shutdown: CancellationToken,
) {
    let mut presence = shared.config.presence(&instance);
    if !ssh {
        presence.ssh_address = None;
    }
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            // Cancel-safe: a tick lost to shutdown is not needed.
            _ = tick.tick() => {}
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => break,
        }
        let said = tokio::select! {
            // Cancel-safe: a saying cut short is made again by no one; the leaving below
            // follows at once.
            r = tokio::time::timeout(CALL_WAIT, shared.server.present(&presence)) => r,
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => break,
        };
        let said = said.unwrap_or_else(|_| {
            Err(crate::server_api::ServerApiError::Status {
                status: 504,
                message: format!("no answer within {} s", CALL_WAIT.as_secs()),
            })
        });
        match said {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("the server hears this proxy's presence again");
            }
            Ok(()) => {}
            // Said once per outage: a region falls back to the central proxy meanwhile.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %crate::error_chain(&e), "telling the server this proxy serves; its region's workspaces are shown with the central proxy's URLs until it hears again");
            }
            Err(_) => {}
        }
    }
    match tokio::time::timeout(LEAVING_WAIT, shared.server.leaving(&instance)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tracing::warn!(error = %crate::error_chain(&e), "telling the server this proxy stops; its region moves to the central proxy when its presence expires")
        }
        Err(_) => tracing::warn!(
            "the server did not hear this proxy stop in time; its region moves to the central proxy when its presence expires"
        ),
    }
}
