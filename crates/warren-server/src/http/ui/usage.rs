//! The usage page: what ran, by space, user, workspace or machine class over a range of
//! days, from a plain GET form, with the same report as CSV (`/usage.csv`). Admins see
//! everything, others their own workspaces and the spaces they own; the rule is
//! `crate::app::usage`'s, as for the API.

use super::layout::{self, input, Input};
use super::session::Viewer;
use super::UiError;
use crate::app::{usage, AppError, AppState};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use chrono::NaiveDate;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{UsageBy, UsageQuery, UsageReport};

/// The form as the browser sends it: empty fields take the defaults.
#[derive(Debug, Default, Deserialize)]
pub struct UsageForm {
    #[serde(default)]
    by: String,
    /// A day (`YYYY-MM-DD`, UTC): hours from its start.
    #[serde(default)]
    since: String,
    /// A day: hours to its end.
    #[serde(default)]
    until: String,
    #[serde(default)]
    space: String,
}

fn day(field: &str, s: &str, end: bool) -> Result<Option<chrono::DateTime<chrono::Utc>>, AppError> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let d = NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .map_err(|_| AppError::invalid_field(field, "must be a day, YYYY-MM-DD"))?;
    let d = if end { d.succ_opt().unwrap_or(d) } else { d };
    Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()))
}

fn query(f: &UsageForm) -> Result<UsageQuery, AppError> {
    let by = match f.by.trim() {
        "" | "space" => UsageBy::Space,
        "user" => UsageBy::User,
        "workspace" => UsageBy::Workspace,
        "class" => UsageBy::Class,
        _ => {
            return Err(AppError::invalid_field(
                "by",
                "must be space, user, workspace or class",
            ))
        }
    };
    let space = f.space.trim();
    Ok(UsageQuery {
        by: Some(by),
        since: day("since", &f.since, false)?,
        until: day("until", &f.until, true)?,
        space: (!space.is_empty()).then(|| space.to_owned()),
        format: None,
    })
}

async fn report(state: &AppState, viewer: &Viewer, f: &UsageForm) -> Result<UsageReport, AppError> {
    usage::report(state, &viewer.who, &query(f)?).await
}

/// `GET /usage`
pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(form): Query<UsageForm>,
) -> Result<Response, UiError> {
    let (r, error) = match report(&state, &viewer, &form).await {
        Ok(r) => (Some(r), None),
        Err(e) if e.kind == crate::app::ErrorKind::Invalid => (None, Some(e)),
        Err(e) => return Err(e.into()),
    };
    let status = error
        .as_ref()
        .map_or(StatusCode::OK, |e| crate::http::error::status_of(e.kind));
    let field_err = |f: &str| {
        error
            .as_ref()
            .filter(|e| e.field.as_deref() == Some(f))
            .map(|e| e.message.clone())
    };
    let (since_err, until_err) = (field_err("since"), field_err("until"));
    let csv = {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("by", &form.by),
            ("since", &form.since),
            ("until", &form.until),
            ("space", &form.space),
        ] {
            if !v.trim().is_empty() {
                q.append_pair(k, v.trim());
            }
        }
        format!("/usage.csv?{}", q.finish())
    };
    let by = if form.by.trim().is_empty() {
        "space"
    } else {
        form.by.trim()
    };
    let body = html! {
        p.hint {
            "Running hours, and the CPU, memory and storage workspaces asked for (their size or machine class) times the hours they ran. "
            @if viewer.is_admin() { "Every workspace." } @else { "Your workspaces, and those in the spaces you own." }
        }
        form.card.filters method="get" action="/usage" {
            (layout::select_field("by", "By", None, html! {
                @for v in ["space", "user", "workspace", "class"] { option value=(v) selected[by == v] { (v) } }
            }))
            (input(Input { id: "space", label: "Space", value: Some(&form.space), placeholder: Some("e.g. acme/platform"), autocomplete: Some("off"), ..Input::default() }))
            (input(Input { id: "since", label: "From (day)", value: Some(&form.since), placeholder: Some("YYYY-MM-DD; 30 days ago"), error: since_err.as_deref(), ..Input::default() }))
            (input(Input { id: "until", label: "To (day)", value: Some(&form.until), placeholder: Some("YYYY-MM-DD; now"), error: until_err.as_deref(), ..Input::default() }))
            button.primary type="submit" { "Show" }
        }
        @if let Some(e) = &error { p.error role="alert" { (e.message) } }
        @if let Some(r) = &r {
            p { "From " (r.since.format("%Y-%m-%d %H:%M")) " to " (r.until.format("%Y-%m-%d %H:%M")) " UTC. " a href=(csv) { "Download as CSV" } }
            @if r.rows.is_empty() {
                p.empty { "Nothing ran." }
            } @else {
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { (by) } th scope="col" { "Workspaces" } th scope="col" { "Hours" }
                        th scope="col" { "Weighted hours" } th scope="col" { "CPU-hours" }
                        th scope="col" { "Memory GiB-hours" } th scope="col" { "Storage GiB-hours" }
                    } }
                    tbody { @for row in &r.rows {
                        tr {
                            th scope="row" { (row.key) }
                            td { (row.workspaces) }
                            td { (format!("{:.1}", row.running_hours)) }
                            td { (format!("{:.1}", row.weighted_hours)) }
                            td { (format!("{:.1}", row.cpu_core_hours)) }
                            td { (format!("{:.1}", row.memory_gib_hours)) }
                            td { (format!("{:.1}", row.storage_gib_hours)) }
                        }
                    } }
                } }
            }
        }
    };
    Ok(layout::page(&viewer, status, "Usage", body))
}

/// `GET /usage.csv`: the page's report as CSV.
pub async fn csv(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(form): Query<UsageForm>,
) -> Result<Response, UiError> {
    let r = report(&state, &viewer, &form).await?;
    let headers = [
        (http::header::CONTENT_TYPE, "text/csv; charset=utf-8"),
        (
            http::header::CONTENT_DISPOSITION,
            "attachment; filename=\"warren-usage.csv\"",
        ),
    ];
    Ok(layout::secure((headers, r.to_csv()).into_response()))
}
