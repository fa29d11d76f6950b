//! The web terminal: a page hosting xterm.js and the WebSocket ⇄ exec bridge behind it.

use crate::Shared;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use warren_types::internal::WorkspaceAccess;

/// Serves every request to `terminal-{workspace}.{domain}` once the HTTP front door has
/// authenticated the user and the server has allowed access to the workspace itself
/// (`access.port` is `None`): the page, its assets, and the WebSocket at `/ws`.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    access: WorkspaceAccess,
    req: axum::extract::Request,
) -> Response {
    // Placeholder until the terminal lands.
    let _ = (shared, access, req);
    http::StatusCode::NOT_IMPLEMENTED.into_response()
}
