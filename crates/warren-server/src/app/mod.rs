//! The domain layer: every rule and authorisation decision of the control plane, as
//! functions taking typed inputs and the acting [`Principal`], answering with domain types or
//! an [`AppError`]. It knows the store and the relays' client, and nothing of HTTP: the JSON
//! API, the OAuth pages and the internal endpoints (`crate::http`) are adapters over it.

pub mod access;
pub mod agents;
pub mod audit;
pub mod auth;
pub mod budgets;
pub mod builds;
pub mod commands;
pub mod error;
pub mod gitops;
pub mod groups;
pub mod leases;
pub mod lifecycle;
pub mod lookup;
pub mod mounts;
pub mod names;
pub mod oauth;
pub mod personal;
pub mod ports;
pub mod prebuild_pools;
pub mod prebuild_progress;
pub mod prebuild_webhook;
pub mod prebuilds;
pub mod projects;
pub mod proxy_keys;
pub mod reconcile;
pub mod regions;
pub mod render;
pub mod rerender;
pub mod rights;
pub mod secrets;
pub mod sources;
pub mod spaces;
pub mod ssh_keys;
pub mod sso;
pub mod throttle;
pub mod tokens;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod workspaces;

pub use error::{AppError, ErrorKind};

use crate::clock::Clock;
use crate::relay::signal::SignalHub;
use crate::store::tokens::TokenRow;
use crate::store::users::UserRow;
use crate::store::Store;
use std::sync::Arc;
use warren_types::reconcile::ReconcileSettings;

/// What every domain operation shares: the store, the clock, the relays, the settings.
#[derive(Debug, Clone)]
pub struct AppState {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    /// HS256 secret shared with the relays.
    pub relay_secret: Arc<Vec<u8>>,
    /// Internal URLs of the relays (signals, workspace logs).
    pub relay_urls: Arc<Vec<String>>,
    pub signals: SignalHub,
    pub settings: ReconcileSettings,
    /// The devfile used when neither request nor project gives one.
    pub default_devfile: Arc<String>,
    /// Slows password guessing down (`throttle`).
    pub login_throttle: Arc<throttle::LoginThrottle>,
    /// Bumped after every committed change of a workspace made by this server, so watchers
    /// ([`workspaces::watch`]) look again at once instead of polling.
    pub changes: Arc<tokio::sync::watch::Sender<u64>>,
    /// Reads devfiles from projects' repositories (cached by commit).
    pub git: warren_git::GitReader,
    /// Fetches devfiles' parents (cached a few minutes).
    pub parents: crate::devfile_fetch::DevfileFetcher,
    /// Cancelled when the server begins to shut down: answers that would stream forever
    /// (the web UI's live events) end, so the graceful shutdown does not wait on them.
    pub closing: tokio_util::sync::CancellationToken,
    /// Single sign-on through an OpenID provider, when configured.
    pub sso: Option<Arc<sso::Sso>>,
    /// Whether local passwords sign in (off: single sign-on and tokens only).
    pub password_login: bool,
    /// The lease of the jobs one replica runs (lifecycle timers, account deletions).
    pub housekeeping: Arc<leases::Lease>,
    /// The audit log's writer (and its copies besides the database).
    pub audit: Arc<audit::Log>,
}

impl AppState {
    /// Tells watchers that some workspace changed.
    pub fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// Who acts: a user, through one of their personal access tokens or (`token: None`) a
/// signed-in browser session of the web UI, which may do what an `api` token may.
#[derive(Debug, Clone)]
pub struct Principal {
    pub user: UserRow,
    pub token: Option<TokenRow>,
}

impl Principal {
    /// Whether the caller's credential carries `scope` (a browser session carries `api`).
    pub fn has_scope(&self, scope: warren_types::api::TokenScope) -> bool {
        match &self.token {
            Some(t) => t.has_scope(scope),
            None => scope == warren_types::api::TokenScope::Api,
        }
    }

    pub fn require_admin(&self) -> Result<(), AppError> {
        if self.user.is_admin {
            Ok(())
        } else {
            Err(AppError::forbidden("this action needs an admin account"))
        }
    }
}

/// Whether the server can serve: its database answers.
pub async fn ready(state: &AppState) -> Result<(), AppError> {
    state.store.db.ping().await.map_err(|e| {
        AppError::new(
            ErrorKind::Unavailable,
            "not_ready",
            format!("database is not reachable: {e}"),
        )
    })
}

/// Workspaces per (desired, actual) state, for metrics.
pub async fn workspace_counts(state: &AppState) -> Result<Vec<(String, String, i64)>, AppError> {
    Ok(state.store.count_by_state().await?)
}
