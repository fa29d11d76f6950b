//! The internal endpoints the relay calls (reconcile, authenticate) and the server → relay
//! "reconcile now" signal.

pub mod authenticate;
pub mod jwt;
pub mod reconcile;
pub mod signal;

use crate::state::AppState;
use axum::routing::post;
use axum::Router;
use warren_types::internal::AUTHENTICATE_AGENT_PATH;
use warren_types::reconcile::RECONCILE_PATH;

pub fn router() -> Router<AppState> {
    Router::new()
        .route(RECONCILE_PATH, post(reconcile::handler))
        .route(AUTHENTICATE_AGENT_PATH, post(authenticate::handler))
}
