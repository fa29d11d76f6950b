//! The HTTP adapters over the domain layer: the JSON API (`api`), the web UI (`ui`), the
//! OAuth server's pages and token endpoint (`oauth`), the relays' and proxies' internal
//! endpoints (`internal`), health and metrics. Errors become HTTP answers in one place ([`error`]).

pub mod api;
pub mod client_addr;
pub mod error;
pub mod internal;
pub mod metrics;
pub mod oauth;
pub mod openapi;
pub mod strict;
pub mod trace;
pub mod ui;

use crate::app::{self, AppState};
use axum::extract::{DefaultBodyLimit, FromRef, State};
use axum::routing::get;
use axum::Router;
use error::HttpError;
use http::StatusCode;
use std::sync::Arc;

/// What the HTTP adapters share: the domain's state, and what only HTTP needs besides.
/// Handlers take `State<AppState>` when the domain is all they use.
#[derive(Debug, Clone)]
pub struct HttpState {
    pub app: AppState,
    /// Reverse proxies whose `X-Forwarded-For` is believed (the client's address, and
    /// whether the browser came over HTTPS).
    pub trusted_proxies: Arc<Vec<ipnet::IpNet>>,
    /// How users reach workspaces besides the API (`GET /api/v1/access`, the account page).
    pub access: Arc<warren_types::api::AccessInfo>,
}

impl HttpState {
    /// How users reach workspaces: the configured SSH address and host keys, and the proxies'
    /// shared host key once a proxy offered it (so clients pin the key every replica shows).
    pub async fn access_info(&self) -> warren_types::api::AccessInfo {
        let mut info = (*self.access).clone();
        if let Some(ssh) = &mut info.ssh {
            match crate::app::proxy_keys::ssh_public_key(&self.app).await {
                Ok(Some(k)) if !ssh.host_keys.contains(&k) => ssh.host_keys.push(k),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "reading the proxies' SSH host key");
                }
            }
        }
        info
    }
}

impl FromRef<HttpState> for AppState {
    fn from_ref(s: &HttpState) -> AppState {
        s.app.clone()
    }
}

/// Sets fixed response headers (those a page kind always carries), replacing any earlier value.
pub(crate) fn set_headers(
    r: &mut axum::response::Response,
    headers: &[(http::HeaderName, &'static str)],
) {
    let h = r.headers_mut();
    for (name, value) in headers {
        h.insert(name.clone(), http::HeaderValue::from_static(value));
    }
}

/// The whole HTTP application over a given state.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .merge(api::router())
        .merge(internal::router())
        .merge(oauth::router())
        .merge(ui::router())
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics::serve))
        // A browser gets the UI's page, a client of the API its JSON error.
        .fallback(|headers: http::HeaderMap| async move {
            if ui::wants_html(&headers) {
                ui::html_not_found()
            } else {
                axum::response::IntoResponse::into_response(HttpError::from(
                    app::AppError::not_found("route"),
                ))
            }
        })
        .method_not_allowed_fallback(|| async {
            HttpError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        // A bug must still answer in the one error shape, not drop the connection; inside
        // the layers below, so that answer is counted, logged and carries its trace id.
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            axum::response::IntoResponse::into_response(HttpError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error",
            ))
        }))
        .layer(axum::middleware::from_fn_with_state(
            "server",
            warren_metrics::track,
        ))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        // Outside the trace layer, so its span (and every log line in it) names the trace id.
        .layer(axum::middleware::from_fn_with_state(
            state.trusted_proxies.clone(),
            trace::layer,
        ))
        .layer(DefaultBodyLimit::max(api::BODY_LIMIT))
        .with_state(state)
}

async fn readyz(State(state): State<AppState>) -> Result<&'static str, HttpError> {
    app::ready(&state).await?;
    Ok("ready")
}
