//! Authorisation answers from the server, with positive answers for running workspaces
//! reused for at most `authorization_cache_secs` (access.md: revocation takes effect
//! within that bound). Refusals are never cached, and neither are answers about a
//! workspace that is not running (the stopped page must show the live state).

use crate::server_api::{ServerApi, ServerApiError};
use sha2::Digest;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use warren_types::internal::{WorkspaceAccess, WorkspaceAccessQuery};
use warren_types::{ActualState, UserId};

/// More entries than this and the cache starts over (bounded memory under a flood of
/// distinct tokens).
const MAX_ENTRIES: usize = 100_000;

/// Who is asking.
#[derive(Debug, Clone)]
pub(crate) enum Principal {
    /// From a valid session cookie.
    User(UserId),
    /// A personal access token (`Authorization: Bearer`).
    Token(String),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Who {
    User(UserId),
    /// SHA-256 of the token: the cache never holds secrets.
    Token([u8; 32]),
}

type Key = (Who, String, Option<u16>);

#[derive(Debug)]
pub(crate) struct AuthzCache {
    ttl: Duration,
    entries: Mutex<HashMap<Key, (WorkspaceAccess, Instant)>>,
}

impl AuthzCache {
    pub(crate) fn new(ttl_secs: u64) -> Self {
        Self {
            ttl: Duration::from_secs(ttl_secs),
            entries: Mutex::default(),
        }
    }

    fn key(principal: &Principal, workspace: &str, port: Option<u16>) -> Key {
        let who = match principal {
            Principal::User(u) => Who::User(*u),
            Principal::Token(t) => Who::Token(sha2::Sha256::digest(t.as_bytes()).into()),
        };
        (who, workspace.to_owned(), port)
    }

    /// May `principal` reach `port` of `workspace` (`None`: the workspace itself)?
    pub(crate) async fn check(
        &self,
        server: &ServerApi,
        principal: &Principal,
        workspace: &str,
        port: Option<u16>,
    ) -> Result<WorkspaceAccess, ServerApiError> {
        let key = Self::key(principal, workspace, port);
        if !self.ttl.is_zero() {
            let entries = self.entries.lock().expect("authz lock poisoned");
            if let Some((a, at)) = entries.get(&key) {
                if at.elapsed() < self.ttl {
                    return Ok(a.clone());
                }
            }
        }
        let (user, bearer) = match principal {
            Principal::User(u) => (Some(*u), None),
            Principal::Token(t) => (None, Some(t.clone())),
        };
        let query = WorkspaceAccessQuery {
            host: workspace.to_owned(),
            port,
            user,
            bearer,
        };
        let answer = server.access(&query).await;
        let mut entries = self.entries.lock().expect("authz lock poisoned");
        match &answer {
            Ok(a) if a.allowed && a.actual_state == ActualState::Running && !self.ttl.is_zero() => {
                if entries.len() >= MAX_ENTRIES {
                    entries.clear();
                }
                entries.insert(key, (a.clone(), Instant::now()));
            }
            _ => {
                entries.remove(&key);
            }
        }
        answer
    }

    /// Forgets an answer (the workspace turned out unreachable, so the next request asks
    /// the server for its state again).
    pub(crate) fn forget(&self, principal: &Principal, workspace: &str, port: Option<u16>) {
        let key = Self::key(principal, workspace, port);
        self.entries
            .lock()
            .expect("authz lock poisoned")
            .remove(&key);
    }
}
