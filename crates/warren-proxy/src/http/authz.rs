//! Authorisation answers from the server, with positive answers for running workspaces
//! reused for at most `authorization_cache_secs` (access.md: revocation takes effect
//! within that bound). Refusals are never cached, and neither are answers about a
//! workspace that is not running (the stopped page must show the live state).

use crate::server_api::{ServerApi, ServerApiError};
use sha2::Digest;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use warren_types::internal::{WorkspaceAccess, WorkspaceAccessQuery};
use warren_types::{ActualState, UserId};

/// More entries than this and the cache starts over (bounded memory under a flood of
/// distinct tokens).
const MAX_ENTRIES: usize = 100_000;

/// Who is asking.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Principal<'a> {
    /// From a valid session cookie.
    User(UserId),
    /// A personal access token (`Authorization: Bearer`).
    Token(&'a str),
    /// Whoever holds share link `id` (from a valid share cookie for the host).
    Share(i64),
    /// Someone who has not signed in: only a public port lets them in.
    Anyone,
}

impl Principal<'_> {
    /// The server's question about `host` (a workspace's or a mount's name) for this caller.
    pub(crate) fn query(&self, host: &str, port: Option<u16>) -> WorkspaceAccessQuery {
        let mut q = WorkspaceAccessQuery {
            host: host.to_owned(),
            port,
            user: None,
            bearer: None,
            share: None,
            source: None,
        };
        match self {
            Principal::User(u) => q.user = Some(*u),
            Principal::Token(t) => q.bearer = Some((*t).to_owned()),
            Principal::Share(id) => q.share = Some(*id),
            Principal::Anyone => {}
        }
        q
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Who {
    User(UserId),
    /// SHA-256 of the token: the cache never holds secrets.
    Token([u8; 32]),
    Share(i64),
    Anyone,
}

/// How long "no" is remembered for someone who has not signed in: every request of a
/// stranger would otherwise cost a server call (a flood of them, many); short, so a port
/// just made public opens within seconds.
const ANYONE_REFUSED_SECS: u64 = 5;

/// Answers for one workspace name, per caller and port.
type PerWorkspace = HashMap<(Who, Option<u16>), (Arc<WorkspaceAccess>, Instant)>;

#[derive(Debug, Default)]
struct Entries {
    /// By workspace name first, so a lookup borrows the name from the request and
    /// allocates nothing (this runs on every proxied request).
    by_workspace: HashMap<String, PerWorkspace>,
    len: usize,
}

impl Entries {
    fn get(
        &self,
        who: &Who,
        workspace: &str,
        port: Option<u16>,
    ) -> Option<&(Arc<WorkspaceAccess>, Instant)> {
        self.by_workspace.get(workspace)?.get(&(*who, port))
    }

    fn insert(
        &mut self,
        who: Who,
        workspace: &str,
        port: Option<u16>,
        answer: Arc<WorkspaceAccess>,
    ) {
        if self.len >= MAX_ENTRIES {
            self.by_workspace.clear();
            self.len = 0;
        }
        let per = self.by_workspace.entry(workspace.to_owned()).or_default();
        if per.insert((who, port), (answer, Instant::now())).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, who: &Who, workspace: &str, port: Option<u16>) {
        let Some(per) = self.by_workspace.get_mut(workspace) else {
            return;
        };
        if per.remove(&(*who, port)).is_some() {
            self.len -= 1;
        }
        if per.is_empty() {
            self.by_workspace.remove(workspace);
        }
    }
}

#[derive(Debug)]
pub(crate) struct AuthzCache {
    ttl: Duration,
    entries: Mutex<Entries>,
    /// Refusals of [`Principal::Anyone`], by workspace and port, with when they were given.
    refused_anyone: Mutex<HashMap<(String, Option<u16>), Instant>>,
}

impl AuthzCache {
    pub(crate) fn new(ttl_secs: u64) -> Self {
        Self {
            ttl: Duration::from_secs(ttl_secs),
            entries: Mutex::default(),
            refused_anyone: Mutex::default(),
        }
    }

    fn who(principal: &Principal<'_>) -> Who {
        match principal {
            Principal::User(u) => Who::User(*u),
            Principal::Token(t) => Who::Token(sha2::Sha256::digest(t.as_bytes()).into()),
            Principal::Share(id) => Who::Share(*id),
            Principal::Anyone => Who::Anyone,
        }
    }

    /// Whether the server refused someone who has not signed in this workspace's port
    /// moments ago.
    fn refused_anyone_recently(&self, workspace: &str, port: Option<u16>) -> bool {
        let refused = self.refused_anyone.lock().expect("authz lock poisoned");
        refused
            .get(&(workspace.to_owned(), port))
            .is_some_and(|at| at.elapsed() < self.anyone_refused_ttl())
    }

    fn anyone_refused_ttl(&self) -> Duration {
        self.ttl.min(Duration::from_secs(ANYONE_REFUSED_SECS))
    }

    fn remember_anyone_refused(&self, workspace: &str, port: Option<u16>) {
        if self.anyone_refused_ttl().is_zero() {
            return;
        }
        let mut refused = self.refused_anyone.lock().expect("authz lock poisoned");
        if refused.len() >= MAX_ENTRIES {
            refused.clear();
        }
        refused.insert((workspace.to_owned(), port), Instant::now());
    }

    /// May `principal` reach `port` of `workspace` (`None`: the workspace itself)? `source`
    /// is the client's address, which the server records a refused token from.
    pub(crate) async fn check(
        &self,
        server: &ServerApi,
        principal: &Principal<'_>,
        workspace: &str,
        port: Option<u16>,
        source: Option<std::net::IpAddr>,
    ) -> Result<Arc<WorkspaceAccess>, ServerApiError> {
        let who = Self::who(principal);
        if who == Who::Anyone && self.refused_anyone_recently(workspace, port) {
            return Err(ServerApiError::Denied);
        }
        if !self.ttl.is_zero() {
            let entries = self.entries.lock().expect("authz lock poisoned");
            if let Some((a, at)) = entries.get(&who, workspace, port) {
                if at.elapsed() < self.ttl {
                    return Ok(a.clone());
                }
            }
        }
        let mut query = principal.query(workspace, port);
        query.source = source.map(|a| a.to_canonical());
        let answer = server.access(&query).await.map(Arc::new);
        let mut entries = self.entries.lock().expect("authz lock poisoned");
        match &answer {
            Ok(a) if a.allowed && a.actual_state == ActualState::Running && !self.ttl.is_zero() => {
                entries.insert(who, workspace, port, a.clone());
            }
            _ => entries.remove(&who, workspace, port),
        }
        drop(entries);
        if who == Who::Anyone && matches!(&answer, Err(ServerApiError::Denied)) {
            self.remember_anyone_refused(workspace, port);
        }
        answer
    }

    /// Forgets an answer (the workspace turned out unreachable, so the next request asks
    /// the server for its state again).
    pub(crate) fn forget(&self, principal: &Principal<'_>, workspace: &str, port: Option<u16>) {
        let who = Self::who(principal);
        self.entries
            .lock()
            .expect("authz lock poisoned")
            .remove(&who, workspace, port);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn answer(name: &str) -> Arc<WorkspaceAccess> {
        Arc::new(sample(name))
    }

    /// A running workspace `name` the caller may use, on port 8080.
    pub(crate) fn sample(name: &str) -> WorkspaceAccess {
        WorkspaceAccess {
            allowed: true,
            workspace_id: warren_types::ids::WorkspaceId(1),
            workspace_name: name.into(),
            agent_id: warren_types::ids::AgentId(7),
            namespace: "ns".into(),
            port: Some(8080),
            desired_state: warren_types::DesiredState::Running,
            actual_state: ActualState::Running,
            user_id: UserId(1),
            wake_on_request: false,
            mount: false,
            unavailable: None,
            mount_url: None,
            may_start: true,
            planned_stop: None,
            editor: false,
        }
    }

    #[test]
    fn entries_are_per_caller_workspace_and_port_and_counted() {
        let mut e = Entries::default();
        let alice = Who::User(UserId(1));
        let token = Who::Token([7; 32]);
        e.insert(alice, "a-web", Some(8080), answer("a-web"));
        e.insert(alice, "a-web", Some(8080), answer("a-web"));
        e.insert(alice, "a-web", None, answer("a-web"));
        e.insert(token, "a-web", Some(8080), answer("a-web"));
        assert_eq!(e.len, 3, "a replaced answer is not counted twice");
        assert!(e.get(&alice, "a-web", Some(8080)).is_some());
        assert!(e.get(&alice, "a-web", Some(3000)).is_none());
        assert!(e.get(&alice, "b-web", Some(8080)).is_none());
        e.remove(&alice, "a-web", Some(8080));
        e.remove(&alice, "a-web", Some(8080));
        assert_eq!(e.len, 2);
        e.remove(&alice, "a-web", None);
        e.remove(&token, "a-web", Some(8080));
        assert_eq!(e.len, 0);
        assert!(
            e.by_workspace.is_empty(),
            "no empty per-workspace maps are kept"
        );
    }

    #[test]
    fn entries_start_over_at_the_bound() {
        let mut e = Entries::default();
        let who = Who::User(UserId(1));
        for i in 0..MAX_ENTRIES {
            e.insert(who, &format!("w{i}"), None, answer("w"));
        }
        assert_eq!(e.len, MAX_ENTRIES);
        e.insert(who, "one-more", None, answer("one-more"));
        assert_eq!(e.len, 1);
        assert!(e.get(&who, "one-more", None).is_some());
        assert!(e.get(&who, "w0", None).is_none());
    }
}
