//! Terminals, SSH sessions and editor sessions opened and closed through this proxy,
//! reported to the server's audit log (who, on which workspace, from where, how long).
//! Reported in batches beside the activity reports, never on the data path: a session that
//! opens waits for nothing.

use crate::server_api::ServerApi;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::ids::{UserId, WorkspaceId};
use warren_types::internal::{SessionEvent, SessionKind, SessionReport, MAX_SESSION_EVENTS};
use warren_types::unix_millis as now_ms;

/// Events kept while the server cannot be reached; past it the oldest go (and are counted),
/// so an unreachable server never grows the proxy's memory without end.
const MAX_PENDING: usize = 20 * MAX_SESSION_EVENTS;

/// An editor session: one caller from one address on one workspace.
type EditorKey = (WorkspaceId, UserId, Option<IpAddr>);

/// The events not yet reported; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Sessions {
    pending: Arc<Mutex<Vec<SessionEvent>>>,
    /// Editor sessions open now, with how many WebSockets each holds (bounded by the open
    /// connections: an entry goes with its last one).
    editors: Arc<Mutex<HashMap<EditorKey, (usize, SessionGuard)>>>,
}

/// One WebSocket of an editor session; the session ends when its last one does.
#[derive(Debug)]
pub struct EditorHold {
    sessions: Sessions,
    key: EditorKey,
}

impl Drop for EditorHold {
    fn drop(&mut self) {
        let ended = {
            let mut open = self
                .sessions
                .editors
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            match open.get_mut(&self.key) {
                Some((n, _)) if *n > 1 => {
                    *n -= 1;
                    None
                }
                _ => open.remove(&self.key).map(|(_, guard)| guard),
            }
        };
        // Its end is recorded outside the lock of open sessions.
        drop(ended);
    }
}

/// An open session: its end is recorded when this is dropped, however the session ends.
#[derive(Debug)]
pub struct SessionGuard {
    sessions: Sessions,
    opened: SessionEvent,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let mut closed = self.opened.clone();
        closed.closed_at_ms = Some(now_ms());
        self.sessions.push(closed);
    }
}

impl Sessions {
    /// Records a session's opening; keep the guard for as long as it lasts.
    pub fn open(
        &self,
        kind: SessionKind,
        workspace_id: WorkspaceId,
        user_id: UserId,
        source: Option<IpAddr>,
        what: Option<&str>,
    ) -> SessionGuard {
        let opened = SessionEvent {
            kind,
            workspace_id,
            user_id,
            source: source.map(|a| a.to_canonical().to_string()),
            opened_at_ms: now_ms(),
            closed_at_ms: None,
            what: what.map(str::to_owned),
        };
        self.push(opened.clone());
        SessionGuard {
            sessions: self.clone(),
            opened,
        }
    }

    /// Records a WebSocket to a workspace's editor: the first of a caller from an address
    /// opens an editor session (a browser window holds several, and reconnects them), the
    /// end of the last one closes it. Keep the hold for as long as the WebSocket lasts.
    pub fn editor(
        &self,
        workspace_id: WorkspaceId,
        user_id: UserId,
        source: Option<IpAddr>,
    ) -> EditorHold {
        let key = (workspace_id, user_id, source.map(|a| a.to_canonical()));
        let mut open = self.editors.lock().unwrap_or_else(|e| e.into_inner());
        match open.get_mut(&key) {
            Some((n, _)) => *n += 1,
            None => {
                let guard = self.open(SessionKind::Editor, workspace_id, user_id, source, None);
                open.insert(key, (1, guard));
            }
        }
        EditorHold {
            sessions: self.clone(),
            key,
        }
    }

    fn push(&self, e: SessionEvent) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.len() >= MAX_PENDING {
            p.remove(0);
            metrics::counter!("warren_proxy_session_events_dropped_total").increment(1);
        }
        p.push(e);
    }

    /// Up to one report's worth of events, oldest first.
    fn take(&self) -> Vec<SessionEvent> {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let n = p.len().min(MAX_SESSION_EVENTS);
        p.drain(..n).collect()
    }

    /// Puts events a failed report carried back in front, in their order.
    fn put_back(&self, mut events: Vec<SessionEvent>) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        events.append(&mut p);
        let over = events.len().saturating_sub(MAX_PENDING);
        events.drain(..over);
        *p = events;
    }

    /// Events waiting to be reported (tests).
    #[cfg(test)]
    pub(crate) fn pending(&self) -> Vec<SessionEvent> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reports pending events every `interval` until `shutdown`, then what is left once more.
    pub async fn report_loop(
        self,
        api: ServerApi,
        interval: Duration,
        shutdown: CancellationToken,
    ) {
        let mut rounds = crate::activity::Rounds::new(interval);
        loop {
            let last = rounds.next(&shutdown).await;
            loop {
                let events = self.take();
                if events.is_empty() {
                    break;
                }
                let report = SessionReport { events };
                if let Err(e) = api.report_sessions(&report).await {
                    tracing::info!(error = %crate::error_chain(&e), "session report failed; kept for the next one");
                    self.put_back(report.events);
                    break;
                }
            }
            if last {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_recorded_when_it_opens_and_again_when_it_ends() {
        let s = Sessions::default();
        let guard = s.open(
            SessionKind::Ssh,
            WorkspaceId(7),
            UserId(3),
            Some("::ffff:10.1.2.3".parse().unwrap()),
            Some("shell"),
        );
        let opened = s.pending();
        assert_eq!(opened.len(), 1);
        assert_eq!(opened[0].closed_at_ms, None);
        assert_eq!(opened[0].source.as_deref(), Some("10.1.2.3"));
        drop(guard);
        let both = s.take();
        assert_eq!(both.len(), 2);
        assert!(both[1].closed_at_ms.unwrap() >= both[1].opened_at_ms);
        assert_eq!(both[1].what.as_deref(), Some("shell"));
        assert!(s.take().is_empty());
    }

    #[test]
    fn an_editors_websockets_make_one_session_until_the_last_ends() {
        let s = Sessions::default();
        let from = Some("10.1.2.3".parse().unwrap());
        let a = s.editor(WorkspaceId(7), UserId(3), from);
        let b = s.editor(WorkspaceId(7), UserId(3), from);
        // Another user, or the same from elsewhere, is a session of its own.
        let c = s.editor(WorkspaceId(7), UserId(4), from);
        let d = s.editor(WorkspaceId(7), UserId(3), None);
        assert_eq!(s.take().len(), 3);
        drop(a);
        assert!(s.take().is_empty(), "one WebSocket of two ended");
        drop(b);
        let closed = s.take();
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].kind, SessionKind::Editor);
        assert_eq!(closed[0].user_id, UserId(3));
        assert!(closed[0].closed_at_ms.is_some());
        drop((c, d));
        assert_eq!(s.take().len(), 2);
        assert!(s.editors.lock().unwrap().is_empty(), "nothing kept");
        // A new WebSocket after the end opens a new session.
        let _e = s.editor(WorkspaceId(7), UserId(3), from);
        assert_eq!(s.take().len(), 1);
    }

    #[test]
    fn an_unreachable_server_keeps_memory_bounded_and_the_newest_events() {
        let s = Sessions::default();
        for i in 0..(MAX_PENDING + 10) {
            drop(s.open(
                SessionKind::Terminal,
                WorkspaceId(i as i64),
                UserId(1),
                None,
                None,
            ));
        }
        let p = s.pending();
        assert_eq!(p.len(), MAX_PENDING);
        assert!(p.last().unwrap().closed_at_ms.is_some());
        let first = s.take();
        s.put_back(first.clone());
        assert_eq!(s.pending()[..first.len()], first[..]);
    }
}
