//! The audit log: a filtered page of it, and the check of its hash chain.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Query};
use axum::extract::State;
use warren_types::api::{ApiError, AuditEntry, AuditQuery, AuditVerification, Page};

/// Entries of the audit log, newest first: every entry for admins, for a space's owners what
/// happened in their spaces.
#[utoipa::path(get, path = "/api/v1/audit", params(AuditQuery),
    responses((status = 200, body = Page<AuditEntry>), (status = 403, body = ApiError)),
    tag = "audit", security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
    Query(q): Query<AuditQuery>,
) -> Result<Json<Page<AuditEntry>>, HttpError> {
    Ok(Json(app::audit::list(&state, &who, &q).await?))
}

/// Checks every entry's link to the one before it (admin).
#[utoipa::path(post, path = "/api/v1/audit/verify",
    responses((status = 200, body = AuditVerification), (status = 403, body = ApiError)),
    tag = "audit", security(("bearer" = [])))]
pub async fn verify(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<AuditVerification>, HttpError> {
    Ok(Json(app::audit::verify_for(&state, &who).await?))
}
