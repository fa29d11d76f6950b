//! Usage: what ran, summed by workspace, user, space or machine class, as JSON or CSV.

use super::Auth;
use crate::app::{self, AppError, AppState};
use crate::http::error::{HttpError, Json, Path, Query};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use warren_types::api::{ApiError, SetBudgetRequest, SpaceBudget, UsageQuery, UsageReport};

/// The usage report: admins everything; others what their own workspaces ran and what ran
/// in the spaces they own. `format=csv` answers `text/csv`.
#[utoipa::path(get, path = "/api/v1/usage", params(UsageQuery),
    responses((status = 200, body = UsageReport, description = "the report (or, with format=csv, its CSV)")),
    tag = "usage", security(("bearer" = [])))]
pub async fn report(
    State(state): State<AppState>,
    Auth(who): Auth,
    Query(q): Query<UsageQuery>,
) -> Result<Response, HttpError> {
    let csv = match q.format.as_deref() {
        None | Some("json") => false,
        Some("csv") => true,
        Some(_) => return Err(AppError::invalid_field("format", "must be json or csv").into()),
    };
    let r = app::usage::report(&state, &who, &q).await?;
    if csv {
        let headers = [
            (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                http::header::CONTENT_DISPOSITION,
                "attachment; filename=\"warren-usage.csv\"",
            ),
        ];
        return Ok((headers, r.to_csv()).into_response());
    }
    Ok(axum::Json(r).into_response())
}

/// The budgets that apply to the space (its own and those of the spaces above it), with
/// what remains of each this month.
#[utoipa::path(get, path = "/api/v1/spaces/{space}/budget", params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 200, body = Vec<SpaceBudget>), (status = 404, body = ApiError)), tag = "usage", security(("bearer" = [])))]
pub async fn budgets(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<Json<Vec<SpaceBudget>>, HttpError> {
    Ok(Json(app::budgets::show(&state, &who, &path).await?))
}

/// Sets the space's budget of weighted hours per calendar month (admins): past it, nothing
/// in the space or below it starts.
#[utoipa::path(put, path = "/api/v1/spaces/{space}/budget", request_body = SetBudgetRequest,
    params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 200, body = SpaceBudget), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "usage", security(("bearer" = [])))]
pub async fn set_budget(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
    Json(req): Json<SetBudgetRequest>,
) -> Result<Json<SpaceBudget>, HttpError> {
    Ok(Json(app::budgets::set(&state, &who, &path, &req).await?))
}

#[utoipa::path(delete, path = "/api/v1/spaces/{space}/budget",
    params(("space" = String, Path, description = "the space's path, slashes encoded")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "usage", security(("bearer" = [])))]
pub async fn remove_budget(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(path): Path<String>,
) -> Result<http::StatusCode, HttpError> {
    app::budgets::remove(&state, &who, &path).await?;
    Ok(http::StatusCode::NO_CONTENT)
}
