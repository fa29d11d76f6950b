//! `direct-tcpip` (`ssh -L`, VS Code's port forwarding): a channel piped to a relay tunnel
//! to a port of the workspace, with backpressure both ways.

use super::handler::Authorized;
use crate::Shared;
use russh::server::Msg;
use russh::Channel;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_types::relay::DialTarget;
use warren_types::ActualState;

pub(crate) async fn run(
    shared: Arc<Shared>,
    auth: Arc<Authorized>,
    channel: Channel<Msg>,
    port: u16,
    stop: CancellationToken,
) {
    let a = match auth.current(&shared).await {
        Ok(a) if a.actual_state == ActualState::Running => a,
        _ => {
            let _ = channel.close().await;
            return;
        }
    };
    let target = DialTarget {
        workspace: a.workspace_name.clone(),
        namespace: a.namespace.clone(),
        port,
    };
    let opened = tokio::select! {
        // Cancel-safe: dropping a half-open tunnel request just abandons it.
        r = shared.relay.open_tunnel(a.agent_id, &target) => r,
        // Cancel-safe: cancellation is level-triggered.
        _ = stop.cancelled() => return,
    };
    let mut tunnel = match opened {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(workspace = %a.workspace_name, port, error = %crate::error_chain(&e), "ssh direct-tcpip: tunnel failed");
            let _ = channel.close().await;
            return;
        }
    };
    let mut stream = shared
        .activity
        .touching(channel.into_stream(), a.workspace_id);
    shared.activity.touch(a.workspace_id);
    tokio::select! {
        // Not cancel-safe and need not be: either way the forwarding ends and both ends
        // are dropped (closing the channel and the tunnel).
        r = tokio::io::copy_bidirectional(&mut stream, &mut tunnel) => {
            if let Err(e) = r {
                tracing::debug!(workspace = %a.workspace_name, port, error = %e, "ssh direct-tcpip ended");
            }
        }
        // Cancel-safe: cancellation is level-triggered.
        _ = stop.cancelled() => {}
    }
}
