//! `direct-tcpip` (`ssh -L`, VS Code's port forwarding): a channel piped to a relay tunnel
//! to a port of the workspace, with backpressure both ways.

use super::handler::Authorized;
use crate::activity::Activity;
use crate::Shared;
use russh::server::Msg;
use russh::Channel;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use warren_types::ids::WorkspaceId;
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
    let mut stream = Touching {
        inner: channel.into_stream(),
        activity: shared.activity.clone(),
        workspace: a.workspace_id,
    };
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

/// Marks the workspace active whenever the client sends something.
struct Touching<T> {
    inner: T,
    activity: Activity,
    workspace: WorkspaceId,
}

impl<T: AsyncRead + Unpin> AsyncRead for Touching<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch(self.workspace);
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Touching<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
