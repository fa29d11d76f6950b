//! The internal endpoints the relays (reconcile, authenticate, GitOps, build contexts) and proxies (access, start,
//! activity, SSH) call, authenticated by their JWTs.

pub mod access;
pub mod authenticate;
pub mod builds;
pub mod gitops;
pub mod reconcile;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post, put};
use axum::Router;
use warren_types::internal::AUTHENTICATE_AGENT_PATH;
use warren_types::reconcile::RECONCILE_PATH;

/// Largest internal request body: a full reconcile carries a whole Deployment per workspace
/// (1,000 workspaces with managed fields reach several MiB). Only relays (JWT) get here.
pub const INTERNAL_BODY_LIMIT: usize = 64 * 1024 * 1024;

pub fn router() -> Router<crate::http::HttpState> {
    Router::new()
        .route(RECONCILE_PATH, post(reconcile::handler))
        .route(AUTHENTICATE_AGENT_PATH, post(authenticate::handler))
        .route(
            warren_types::gitops::AUTHORIZE_SOURCE_PATH,
            post(gitops::authorize),
        )
        .route(
            warren_types::gitops::SOURCE_STATUS_PATH,
            post(gitops::status),
        )
        .route(
            warren_types::internal::WORKSPACE_ACCESS_PATH,
            get(access::access),
        )
        .route(
            warren_types::internal::WORKSPACE_ACTIVITY_PATH,
            post(access::activity),
        )
        .route(
            warren_types::internal::SESSIONS_PATH,
            post(access::sessions),
        )
        .route(
            warren_types::internal::SHARE_REDEEM_PATH,
            post(access::redeem_share),
        )
        .route(
            warren_types::internal::WORKSPACE_START_PATH,
            post(access::start),
        )
        .route(
            warren_types::internal::SSH_AUTHORIZE_PATH,
            get(access::ssh_authorize),
        )
        .route(
            warren_types::relay::BUILD_CONTEXT_PATH,
            post(builds::context),
        )
        .route(
            warren_types::internal::PROXY_KEYS_PATH,
            get(access::cookie_keys).post(access::adopt_keys),
        )
        .route(
            warren_types::internal::PROXY_PRESENCE_PATH,
            put(access::presence).delete(access::leaving),
        )
        .route(
            warren_types::internal::PROXY_HANDOFF_PATH,
            post(access::use_handoff),
        )
        .route(
            warren_types::internal::ENTRY_REDIRECT_PATH,
            get(access::redirect),
        )
        .layer(DefaultBodyLimit::max(INTERNAL_BODY_LIMIT))
}
