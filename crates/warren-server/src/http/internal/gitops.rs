//! `POST /internal/gitops/authorize` and `/internal/gitops/status`: a relay's questions
//! before each poll and its agents' reports, answered by `crate::app::gitops`.

use crate::app::{self, AppState};
use crate::http::error::{HttpError, InternalJson, Json};
use axum::extract::State;
use http::{HeaderMap, StatusCode};
use warren_types::gitops::{AuthorizeSourceRequest, SourceGrant, SourceStatus};

pub async fn authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<AuthorizeSourceRequest>,
) -> Result<Json<SourceGrant>, HttpError> {
    let bearer = crate::relay::jwt::bearer(&headers);
    Ok(Json(
        app::gitops::authorize_source(&state, bearer, &req).await?,
    ))
}

pub async fn status(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(status): InternalJson<SourceStatus>,
) -> Result<StatusCode, HttpError> {
    let bearer = crate::relay::jwt::bearer(&headers);
    app::gitops::report_status(&state, bearer, &status).await?;
    Ok(StatusCode::NO_CONTENT)
}
