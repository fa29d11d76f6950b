//! Prometheus metrics: request counts and latency per route (`warren_metrics::track`),
//! reconcile counts and cost, workspaces by state. Rendered into `/metrics`; no listener of
//! its own.

use crate::app::{self, AppState};
use axum::extract::State;
use axum::response::{IntoResponse, Response};

/// Installs the process-wide recorder (shared with any other service in this process).
pub fn handle() {
    warren_metrics::handle();
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
    warren_metrics::metrics_page().await.into_response()
}
