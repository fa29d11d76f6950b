//! Prometheus metrics: request counts and latency per route, reconcile counts and cost,
//! workspaces by state. Rendered into `/metrics`; no listener of its own.

use crate::app::{self, AppState};
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the process-wide recorder once; later servers in the same process share it.
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => Some(handle),
                Err(_) => {
                    tracing::warn!("another metrics recorder is installed; /metrics will be empty");
                    None
                }
            }
        })
        .as_ref()
}

/// Counts and times every request by method, route template and status.
pub async fn track(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = req.method().to_string();
    let started = std::time::Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("warren_http_requests_total", "method" => method.clone(), "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("warren_http_request_duration_seconds", "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

pub async fn serve(State(state): State<AppState>) -> Response {
    match app::workspace_counts(&state).await {
        Ok(counts) => {
            // Every combination is set, so a state that emptied shows 0 rather than a stale count.
            for d in warren_types::DesiredState::ALL {
                for a in warren_types::ActualState::ALL {
                    let n = counts
                        .iter()
                        .find(|(cd, ca, _)| cd == d.as_str() && ca == a.as_str())
                        .map_or(0, |c| c.2);
                    metrics::gauge!("warren_workspaces", "desired_state" => d.as_str(), "actual_state" => a.as_str())
                        .set(n as f64);
                }
            }
        }
        Err(e) => tracing::warn!(error = %e.message, "counting workspaces for /metrics failed"),
    }
    let text = handle().map(|h| h.render()).unwrap_or_default();
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}
