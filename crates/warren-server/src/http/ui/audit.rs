//! The audit log page: who did what, when and from where, filtered by a plain GET form,
//! newest first, a page at a time. Admins see everything, a space's owners what happened in
//! their spaces; the rule is `crate::app::audit`'s, as for the API.

use super::layout::{self, input, Input};
use super::session::Viewer;
use super::UiError;
use crate::app::{audit, AppError, AppState};
use axum::extract::{Query, State};
use axum::response::Response;
use chrono::NaiveDate;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{AuditActorKind, AuditEntry, AuditQuery};

/// The filter form as the browser sends it: empty fields are no filter.
#[derive(Debug, Default, Deserialize)]
pub struct AuditForm {
    #[serde(default)]
    actor: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    action: String,
    #[serde(default)]
    outcome: String,
    #[serde(default)]
    space: String,
    /// A day (`YYYY-MM-DD`, UTC): entries from its start.
    #[serde(default)]
    since: String,
    /// A day: entries before its end.
    #[serde(default)]
    until: String,
    #[serde(default)]
    cursor: String,
}

fn some(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

fn day(field: &str, s: &str, end: bool) -> Result<Option<chrono::DateTime<chrono::Utc>>, AppError> {
    let Some(s) = some(s) else { return Ok(None) };
    let d = NaiveDate::parse_from_str(&s, "%Y-%m-%d")
        .map_err(|_| AppError::invalid_field(field, "must be a day, YYYY-MM-DD"))?;
    let d = if end { d.succ_opt().unwrap_or(d) } else { d };
    Ok(d.and_hms_opt(0, 0, 0).map(|t| t.and_utc()))
}

fn query(f: &AuditForm) -> Result<AuditQuery, AppError> {
    Ok(AuditQuery {
        actor: some(&f.actor),
        target: some(&f.target),
        target_kind: None,
        action: some(&f.action),
        outcome: some(&f.outcome),
        space: some(&f.space),
        since: day("since", &f.since, false)?,
        until: day("until", &f.until, true)?,
        limit: Some(100),
        cursor: some(&f.cursor),
    })
}

fn actor(e: &AuditEntry) -> String {
    match (&e.actor, e.actor_kind) {
        (Some(a), AuditActorKind::Anonymous) => format!("{a} (not signed in)"),
        (Some(a), _) => a.clone(),
        (None, AuditActorKind::System) => "Warren".to_owned(),
        (None, _) => "unknown".to_owned(),
    }
}

fn target(e: &AuditEntry) -> String {
    match (&e.target_kind, &e.target, &e.target_id) {
        (Some(k), Some(n), _) if !n.is_empty() => format!("{k} {n}"),
        (Some(k), _, Some(id)) => format!("{k} #{id}"),
        (Some(k), _, None) => k.clone(),
        _ => String::new(),
    }
}

/// `GET /audit`
pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(form): Query<AuditForm>,
) -> Result<Response, UiError> {
    let (entries, error) = match query(&form) {
        Ok(q) => match audit::list(&state, &viewer.who, &q).await {
            Ok(p) => (Some(p), None),
            Err(e) if e.kind == crate::app::ErrorKind::Invalid => (None, Some(e)),
            Err(e) => return Err(e.into()),
        },
        Err(e) => (None, Some(e)),
    };
    let status = error
        .as_ref()
        .map_or(StatusCode::OK, |e| crate::http::error::status_of(e.kind));
    let next = entries
        .as_ref()
        .and_then(|p| p.next_cursor.clone())
        .map(|c| {
            let mut q = url::form_urlencoded::Serializer::new(String::new());
            for (k, v) in [
                ("actor", &form.actor),
                ("target", &form.target),
                ("action", &form.action),
                ("outcome", &form.outcome),
                ("space", &form.space),
                ("since", &form.since),
                ("until", &form.until),
            ] {
                if !v.trim().is_empty() {
                    q.append_pair(k, v.trim());
                }
            }
            q.append_pair("cursor", &c);
            format!("/audit?{}", q.finish())
        });
    let body = html! {
        p.hint {
            @if viewer.is_admin() { "Every recorded action, newest first." }
            @else { "What happened in the spaces you own, newest first." }
        }
        form.card.filters method="get" action="/audit" {
            (input(Input { id: "actor", label: "Who", value: Some(&form.actor), placeholder: Some("username"), autocomplete: Some("off"), ..Input::default() }))
            (input(Input { id: "target", label: "On what", value: Some(&form.target), placeholder: Some("workspace, user, token… name or id"), autocomplete: Some("off"), ..Input::default() }))
            (input(Input { id: "action", label: "Action", value: Some(&form.action), placeholder: Some("e.g. workspace.* or session.sign_in"), autocomplete: Some("off"), ..Input::default() }))
            (input(Input { id: "space", label: "Space", value: Some(&form.space), placeholder: Some("e.g. acme/platform"), autocomplete: Some("off"), ..Input::default() }))
            (input(Input { id: "since", label: "From (day)", value: Some(&form.since), placeholder: Some("YYYY-MM-DD"), error: error.as_ref().filter(|e| e.field.as_deref() == Some("since")).map(|e| e.message.as_str()), ..Input::default() }))
            (input(Input { id: "until", label: "To (day)", value: Some(&form.until), placeholder: Some("YYYY-MM-DD"), error: error.as_ref().filter(|e| e.field.as_deref() == Some("until")).map(|e| e.message.as_str()), ..Input::default() }))
            (layout::select_field("outcome", "Outcome", None, html! {
                @for (v, label) in [("", "any"), ("success", "success"), ("failure", "failure"), ("denied", "denied")] {
                    option value=(v) selected[form.outcome == v] { (label) }
                }
            }))
            button.primary type="submit" { "Filter" }
        }
        @if let Some(e) = &error { p.error role="alert" { (e.message) } }
        @if let Some(page) = &entries {
            @if page.items.is_empty() {
                p.empty { "No entry matches." }
            } @else {
                div.table-wrap { table {
                    thead { tr {
                        th scope="col" { "Time (UTC)" } th scope="col" { "Who" } th scope="col" { "Action" }
                        th scope="col" { "On" } th scope="col" { "Space" } th scope="col" { "From" }
                        th scope="col" { "Via" } th scope="col" { "Outcome" } th scope="col" { "Detail" }
                    } }
                    tbody { @for e in &page.items {
                        tr {
                            td { time datetime=(e.at.to_rfc3339()) { (e.at.format("%Y-%m-%d %H:%M:%S")) } }
                            td { (actor(e)) }
                            td { code { (e.action) } }
                            td { (target(e)) }
                            td { (e.space.as_deref().unwrap_or("")) }
                            td { (e.source.as_deref().unwrap_or("")) }
                            td { (e.channel) }
                            td { span class=(format!("outcome {}", e.outcome.as_str())) { (e.outcome.as_str()) } }
                            td { (e.detail.as_deref().unwrap_or("")) }
                        }
                    } }
                } }
                @if let Some(href) = &next { p { a href=(href) { "Older entries →" } } }
            }
        }
    };
    Ok(layout::page(&viewer, status, "Audit log", body))
}
