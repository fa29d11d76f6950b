//! Server → relay: a process run in a workspace (`warren ws run`), through whichever relay
//! routes to the workspace's agent (the relay's internal exec endpoint, as the proxy uses it
//! for terminals and SSH; after the upgrade the stream carries exec frames).

use super::logs::{upgrade, RelayLogsError};
use warren_types::relay::{ExecFrame, ExecQuery, ExecTarget, EXEC_ROUTE};
use warren_types::AgentId;

/// An exec session: frames to and from the process.
pub struct ExecStream {
    io: reqwest::Upgraded,
}

#[derive(Debug, thiserror::Error)]
#[error("exec session")]
pub struct ExecStreamError(#[source] warren_tunnel::TunnelError);

/// Starts `target` in the workspace through the first of `relay_urls` that answers.
pub async fn open(
    relay_urls: &[String],
    secret: &[u8],
    agent: AgentId,
    target: &ExecTarget,
) -> Result<ExecStream, RelayLogsError> {
    // An ExecTarget always serialises (strings and numbers only).
    let request = serde_json::to_string(target).unwrap_or_default();
    let (io, _url) = upgrade(
        relay_urls,
        secret,
        agent,
        EXEC_ROUTE,
        &ExecQuery { request },
    )
    .await?;
    Ok(ExecStream { io })
}

impl ExecStream {
    /// The next frame from the agent; `None` once the stream ended.
    pub async fn next(&mut self) -> Result<Option<ExecFrame>, ExecStreamError> {
        warren_tunnel::read_exec_frame(&mut self.io)
            .await
            .map_err(ExecStreamError)
    }

    pub async fn send(&mut self, frame: &ExecFrame) -> Result<(), ExecStreamError> {
        warren_tunnel::write_exec_frame(&mut self.io, frame)
            .await
            .map_err(ExecStreamError)
    }
}
