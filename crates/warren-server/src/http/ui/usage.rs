//! The usage page: what ran, by space, user, workspace or machine class over a range of
//! days, from a plain GET form, with the same report as CSV (`/usage.csv`). Admins see
//! everything, others their own workspaces and the spaces they own; the rule is
//! `crate::app::usage`'s, as for the API. With a space filled in, the budgets that apply to it
//! and what remains of each; admins set and remove them there.

use super::layout::{self, csrf, input, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{budgets, usage, AppError, AppState, ErrorKind};
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::NaiveDate;
use http::StatusCode;
use maud::html;
use maud::Markup;
use serde::Deserialize;
use warren_types::api::{SetBudgetRequest, SpaceBudget, UsageBy, UsageQuery, UsageReport};

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
    render(&state, &viewer, &form, None).await
}

/// The budget form as posted.
#[derive(Debug, Default, Deserialize)]
pub struct BudgetForm {
    #[serde(default)]
    space: String,
    #[serde(default)]
    hours: String,
    /// A checkbox: present when ticked.
    #[serde(default)]
    admins_exempt: Option<String>,
}

fn to_space(space: &str) -> Response {
    let q = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("space", space)
        .finish();
    Redirect::to(&format!("/usage?{q}")).into_response()
}

/// `POST /usage/budget`: sets the posted space's budget (the domain lets admins).
pub async fn set_budget(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<BudgetForm>,
) -> Result<Response, UiError> {
    let space = form.space.trim();
    let r = match form.hours.trim().parse::<i64>() {
        Ok(hours) => {
            let req = SetBudgetRequest {
                weighted_hours: hours,
                admins_exempt: form.admins_exempt.is_some(),
            };
            budgets::set(&state, &viewer.who, space, &req).await
        }
        Err(_) => Err(AppError::invalid_field(
            "weighted_hours",
            "must be a whole number of hours",
        )),
    };
    let shown = UsageForm {
        space: space.to_owned(),
        ..UsageForm::default()
    };
    match r {
        Ok(_) => Ok(to_space(space)),
        Err(e) if matches!(e.kind, ErrorKind::Invalid) => {
            render(&state, &viewer, &shown, Some(e)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /usage/budget/remove`: removes the posted space's budget.
pub async fn remove_budget(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<BudgetForm>,
) -> Result<Response, UiError> {
    budgets::remove(&state, &viewer.who, form.space.trim()).await?;
    Ok(to_space(form.space.trim()))
}

/// The budgets that apply to `space`, what remains of each, and the admins' form.
fn budget_section(
    viewer: &Viewer,
    space: &str,
    list: &[SpaceBudget],
    error: Option<&AppError>,
) -> Markup {
    html! {
        section.card aria-labelledby="budgets" {
            h2 #budgets { "Budgets of " code { (space) } }
            @if list.is_empty() {
                p.empty { "No budget applies to this space." }
            } @else {
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { "Set on" } th scope="col" { "Weighted hours a month" } th scope="col" { "Used" }
                        th scope="col" { "Remaining" } th scope="col" { "Renews" } th scope="col" { "Admins exempt" }
                        @if viewer.is_admin() { th scope="col" { span.visually-hidden { "Actions" } } }
                    } }
                    tbody { @for b in list {
                        tr {
                            th scope="row" { (b.space) }
                            td { (b.weighted_hours) }
                            td { (format!("{:.1}", b.used_hours)) }
                            td { (format!("{:.1}", b.remaining_hours)) }
                            td { (b.renews_at.format("%Y-%m-%d")) }
                            td { @if b.admins_exempt { "yes" } @else { "no" } }
                            @if viewer.is_admin() {
                                td.actions { (remove_form(viewer, &b.space)) }
                            }
                        }
                    } }
                } }
            }
            @if viewer.is_admin() {
                form.inline method="post" action="/usage/budget" {
                    (csrf(viewer))
                    input type="hidden" name="space" value=(space);
                    label for="budget-hours" { "Set this space's budget to" }
                    input type="number" id="budget-hours" name="hours" min="0" required
                        aria-invalid=[error.map(|_| "true")] aria-describedby=[error.map(|_| "budget-error")];
                    " weighted hours a month "
                    label { input type="checkbox" name="admins_exempt" value="1"; " admins exempt" }
                    button type="submit" { "Set budget" }
                }
                @if let Some(e) = error { p.error #budget-error role="alert" { (e.message) } }
            }
        }
    }
}

fn remove_form(viewer: &Viewer, space: &str) -> Markup {
    html! {
        form.inline method="post" action="/usage/budget/remove" {
            (csrf(viewer))
            input type="hidden" name="space" value=(space);
            button.danger type="submit" aria-label=(format!("Remove the budget of {space}")) { "Remove" }
        }
    }
}

async fn render(
    state: &AppState,
    viewer: &Viewer,
    form: &UsageForm,
    budget_error: Option<AppError>,
) -> Result<Response, UiError> {
    let space = form.space.trim();
    let budgets = if space.is_empty() {
        None
    } else {
        match budgets::show(state, &viewer.who, space).await {
            Ok(list) => Some(list),
            // A space the viewer may not see, or none: the report says so for itself.
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::Forbidden) => None,
            Err(e) => return Err(e.into()),
        }
    };
    let (r, error) = match report(state, viewer, form).await {
        Ok(r) => (Some(r), None),
        Err(e) if e.kind == crate::app::ErrorKind::Invalid => (None, Some(e)),
        Err(e) => return Err(e.into()),
    };
    let status = error
        .as_ref()
        .or(budget_error.as_ref())
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
        @if let Some(list) = &budgets { (budget_section(viewer, space, list, budget_error.as_ref())) }
        @if let Some(r) = &r {
            p { "From " (r.since.format("%Y-%m-%d %H:%M")) " to " (r.until.format("%Y-%m-%d %H:%M")) " UTC. " a href=(csv) { "Download as CSV" } }
            @if r.rows.is_empty() {
                p.empty { "Nothing ran." }
            } @else {
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { (by) } th scope="col" { "Workspaces" } th scope="col" { "Hours" }
                        th scope="col" { "Weighted hours" } th scope="col" { "CPU-hours" } th scope="col" { "CPU-hours used" }
                        th scope="col" { "Memory GiB-hours" } th scope="col" { "Memory used" } th scope="col" { "Storage GiB-hours" }
                    } }
                    tbody { @for row in &r.rows {
                        tr {
                            th scope="row" { (row.key) }
                            td { (row.workspaces) }
                            td { (format!("{:.1}", row.running_hours)) }
                            td { (format!("{:.1}", row.weighted_hours)) }
                            td { (format!("{:.1}", row.cpu_core_hours)) }
                            td { (format!("{:.2}", row.cpu_used_core_hours)) }
                            td { (format!("{:.1}", row.memory_gib_hours)) }
                            td { (format!("{:.2}", row.memory_used_gib_hours)) }
                            td { (format!("{:.1}", row.storage_gib_hours)) }
                        }
                    } }
                } }
            }
        }
    };
    Ok(layout::page(viewer, status, "Usage", body))
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
