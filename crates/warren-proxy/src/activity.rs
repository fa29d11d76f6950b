//! Last user activity per workspace (a request, a WebSocket frame, SSH data), reported to
//! the server at most every few seconds for the idle policy (access.md, lifecycle.md).

use crate::server_api::ServerApi;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use warren_types::ids::WorkspaceId;
use warren_types::internal::{ActivityReport, WorkspaceActivity};

/// Records activity; cheap to clone and to call on every request or frame.
#[derive(Debug, Clone, Default)]
pub struct Activity {
    pending: Arc<Mutex<HashMap<WorkspaceId, i64>>>,
}

use warren_types::unix_millis as now_ms;

impl Activity {
    /// Marks `workspace` active now.
    pub fn touch(&self, workspace: WorkspaceId) {
        let now = now_ms();
        let mut p = self.pending.lock().expect("activity lock poisoned");
        let e = p.entry(workspace).or_insert(now);
        *e = (*e).max(now);
    }

    /// Workspaces with unreported activity (tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> Vec<WorkspaceId> {
        let p = self.pending.lock().expect("activity lock poisoned");
        p.keys().copied().collect()
    }

    /// Wraps a byte stream from a user (an upgraded HTTP connection, an SSH channel) so
    /// that every read marks `workspace` active.
    pub(crate) fn touching<T>(&self, io: T, workspace: WorkspaceId) -> Touching<T> {
        Touching {
            io,
            activity: self.clone(),
            workspace,
        }
    }

    fn take(&self) -> Vec<WorkspaceActivity> {
        let mut p = self.pending.lock().expect("activity lock poisoned");
        p.drain()
            .map(|(workspace_id, last_activity_ms)| WorkspaceActivity {
                workspace_id,
                last_activity_ms,
            })
            .collect()
    }

    fn put_back(&self, items: Vec<WorkspaceActivity>) {
        let mut p = self.pending.lock().expect("activity lock poisoned");
        for a in items {
            let e = p.entry(a.workspace_id).or_insert(a.last_activity_ms);
            *e = (*e).max(a.last_activity_ms);
        }
    }

    /// Reports pending activity every `interval` until `shutdown`, then once more.
    pub async fn report_loop(
        self,
        api: ServerApi,
        interval: Duration,
        shutdown: CancellationToken,
    ) {
        let mut rounds = Rounds::new(interval);
        loop {
            let last = rounds.next(&shutdown).await;
            let items = self.take();
            if !items.is_empty() {
                let report = ActivityReport { workspaces: items };
                if let Err(e) = api.report_activity(&report).await {
                    tracing::info!(error = %crate::error_chain(&e), "activity report failed; kept for the next one");
                    self.put_back(report.workspaces);
                }
            }
            if last {
                return;
            }
        }
    }
}

/// The rounds of a report loop: one per `interval`, and a last one at shutdown.
pub(crate) struct Rounds(tokio::time::Interval);

impl Rounds {
    pub(crate) fn new(interval: Duration) -> Rounds {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Rounds(tick)
    }

    /// Waits for the next round; true for the last one (`shutdown` was cancelled).
    pub(crate) async fn next(&mut self, shutdown: &CancellationToken) -> bool {
        tokio::select! {
            // Cancel-safe: a tick holds no state.
            _ = self.0.tick() => false,
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => true,
        }
    }
}

/// A byte stream that marks its workspace active whenever bytes arrive.
pub(crate) struct Touching<T> {
    io: T,
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
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
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
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
