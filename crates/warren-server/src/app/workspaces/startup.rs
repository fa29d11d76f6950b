//! A workspace's startup status (clone, `postStart` commands, a dev container's lifecycle
//! commands), read on demand from the output of the containers that run Warren's startup
//! script: nothing watches it while nobody asks.

use super::{logs, Logs, LogsRequest};
use crate::app::rights::{self, Right};
use crate::app::{AppError, AppState, ErrorKind, Principal};
use warren_types::relay::MAX_LOG_TAIL;
use warren_types::startup::{startup_status, StartupState, WorkspaceStartup};
use warren_types::ActualState;

/// Lines of a container's output read for its startup status: its first lines (the clone,
/// the commands) are all the status needs, and a command that writes more than this after
/// them rolls them out of reach, which says `unknown`.
const STARTUP_TAIL: u32 = MAX_LOG_TAIL;

/// How the startup of the workspace went (clone, `postStart` commands, a dev container's
/// lifecycle commands), as the startup script says in the output of each container that runs
/// it: `unknown` unless the workspace is Running, `untold` for a workspace rendered before the
/// startup said it or on a server that reads no output (no relay). Needs the right to read its
/// logs.
pub async fn startup(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<WorkspaceStartup, AppError> {
    let w = rights::authorized(state, who, key, Right::Use).await?;
    if w.actual_state != ActualState::Running {
        return Ok(WorkspaceStartup::unknown());
    }
    // A server without a relay reads no workspace's output: it cannot be told.
    let told =
        startup_containers(&w.objects(&state.store)?).filter(|_| !state.relay_urls.is_empty());
    let Some(containers) = told else {
        return Ok(WorkspaceStartup::of(StartupState::Untold));
    };
    let mut each = Vec::with_capacity(containers.len());
    for c in containers {
        let req = LogsRequest {
            tail: Some(STARTUP_TAIL),
            container: Some(c.clone()),
            follow: false,
        };
        let mut status = match logs(state, who, key, &req).await {
            Ok(Logs::Text(t)) => startup_status(&t),
            // Not there yet (its pod is being replaced): it has said nothing.
            Err(e) if e.kind == ErrorKind::NotFound => WorkspaceStartup::unknown(),
            Ok(Logs::Stream(_)) => WorkspaceStartup::unknown(),
            Err(e) => return Err(e),
        };
        status.container.get_or_insert(c);
        each.push(status);
    }
    Ok(WorkspaceStartup::combine(each))
}

/// The containers whose output tells the startup (the Deployment's
/// [`warren_types::startup::STARTUP_CONTAINERS_ANNOTATION`]), when it has them.
pub(crate) fn startup_containers(objects: &[serde_json::Value]) -> Option<Vec<String>> {
    let names = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .find_map(|o| {
            o.pointer("/metadata/annotations")?
                .get(warren_types::startup::STARTUP_CONTAINERS_ANNOTATION)?
                .as_str()
        })?;
    let names: Vec<String> = names
        .split(',')
        .filter(|n| warren_types::is_dns_label(n, 63))
        .map(str::to_owned)
        .collect();
    (!names.is_empty()).then_some(names)
}
