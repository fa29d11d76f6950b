//! `POST /internal/agents/reconcile` (reconcile.md): the relay's call for one agent,
//! answered by `crate::app::reconcile`.

use crate::app::{self, AppState};
use crate::http::error::{HttpError, InternalJson, Json};
use axum::extract::State;
use http::{HeaderMap, StatusCode};
use warren_types::reconcile::{ReconcileRequest, ReconcileResponse, AGENT_ID_HEADER};

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<ReconcileRequest>,
) -> Result<(StatusCode, Json<ReconcileResponse>), HttpError> {
    let bearer = crate::relay::jwt::bearer(&headers);
    // A header that is not text cannot match the JWT's subject; the domain says so.
    let agent_header = headers
        .get(AGENT_ID_HEADER)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
    let resp = app::reconcile::handle(&state, bearer, agent_header, &req).await?;
    Ok((StatusCode::CREATED, Json(resp)))
}
