//! The rebuild page: what making the workspace again from its definition as it is now (or
//! from a devfile pasted here) would change, and the button that does it. The same domain
//! function as `POST /api/v1/workspaces/{name}/rebuild`, first as a dry run.

use super::super::layout::{self, csrf};
use super::super::session::{Posted, Viewer};
use super::super::UiError;
use crate::app::workspaces as domain;
use crate::app::{AppError, AppState, ErrorKind};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{ChangeKind, RebuildOutcome, RebuildWorkspaceRequest, Workspace};
use warren_types::DesiredState;

#[derive(Debug, Default, Deserialize)]
pub struct RebuildForm {
    /// A devfile to use instead of the workspace's definition; empty: none.
    #[serde(default)]
    devfile: Option<String>,
    /// Present when the button that applies was pressed; absent for a preview.
    #[serde(default)]
    apply: Option<String>,
}

/// `GET /workspaces/{name}/rebuild`: the preview of a rebuild from its definition.
pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    preview(&state, &viewer, &name, None).await
}

/// `POST /workspaces/{name}/rebuild`: a preview with the pasted devfile, or the rebuild.
pub async fn submit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, form }: Posted<RebuildForm>,
) -> Result<Response, UiError> {
    let devfile = form.devfile.filter(|d| !d.trim().is_empty());
    if form.apply.is_none() {
        return preview(&state, &viewer, &name, devfile).await;
    }
    let req = RebuildWorkspaceRequest {
        devfile: devfile.clone(),
        dry_run: false,
    };
    match domain::rebuild(&state, &viewer.who, &name, &req).await {
        Ok(done) => {
            Ok(Redirect::to(&format!("/workspaces/{}", done.workspace.name)).into_response())
        }
        Err(e) if refusal(&e) => {
            let w = domain::get(&state, &viewer.who, &name).await?;
            Ok(rebuild_page(&viewer, &w, Err(&e), devfile.as_deref()))
        }
        Err(e) => Err(e.into()),
    }
}

async fn preview(
    state: &AppState,
    viewer: &Viewer,
    name: &str,
    devfile: Option<String>,
) -> Result<Response, UiError> {
    let req = RebuildWorkspaceRequest {
        devfile: devfile.clone(),
        dry_run: true,
    };
    match domain::rebuild(state, &viewer.who, name, &req).await {
        Ok(plan) => Ok(rebuild_page(
            viewer,
            &plan.workspace,
            Ok(&plan),
            devfile.as_deref(),
        )),
        Err(e) if refusal(&e) => {
            let w = domain::get(state, &viewer.who, name).await?;
            Ok(rebuild_page(viewer, &w, Err(&e), devfile.as_deref()))
        }
        Err(e) => Err(e.into()),
    }
}

/// A definition the rebuild refuses (it does not validate, the agent does not allow it, its
/// repository cannot be read): told on the page, with the workspace as it was.
fn refusal(e: &AppError) -> bool {
    matches!(
        e.kind,
        ErrorKind::Invalid
            | ErrorKind::Unprocessable
            | ErrorKind::Upstream
            | ErrorKind::Unavailable
    )
}

fn rebuild_page(
    viewer: &Viewer,
    w: &Workspace,
    plan: Result<&RebuildOutcome, &AppError>,
    devfile: Option<&str>,
) -> Response {
    let base = format!("/workspaces/{}", w.name);
    let status = match plan {
        Ok(_) => StatusCode::OK,
        Err(e) => crate::http::error::status_of(e.kind),
    };
    let restarts = w.desired_state != DesiredState::Stopped;
    let body = html! {
        @match plan {
            Ok(plan) => {
                p { "Rebuilding " strong { (w.name) } " from " (plan.source) " keeps its volume (your files under /projects and your home)"
                    @if restarts { " and restarts it" } @else { "; it starts with the new definition next time" } "." }
                @if plan.changes.is_empty() {
                    p.hint role="status" { "No change to its containers, endpoints, volumes or start-up commands: a rebuild makes its containers again as they are." }
                } @else {
                    div.table-wrap { table {
                        caption { (plan.changes.len()) " change(s)" }
                        thead { tr { th scope="col" { "Part" } th scope="col" { "Change" } th scope="col" { "Was" } th scope="col" { "Becomes" } } }
                        tbody { @for c in &plan.changes {
                            tr {
                                th scope="row" { (c.part) }
                                td { (match c.change { ChangeKind::Added => "added", ChangeKind::Removed => "removed", ChangeKind::Changed => "changed" }) }
                                td { @if let Some(b) = &c.before { code { (b) } } }
                                td { @if let Some(a) = &c.after { code { (a) } } }
                            }
                        } }
                    } }
                }
                form.card method="post" action=(format!("{base}/rebuild")) {
                    (csrf(viewer))
                    @if let Some(d) = devfile { input type="hidden" name="devfile" value=(d); }
                    input type="hidden" name="apply" value="1";
                    div.actions {
                        button.primary type="submit" { "Rebuild " (w.name) }
                        a.button href=(base) { "Cancel" }
                    }
                }
            }
            Err(e) => {
                p.error role="alert" { "Not rebuilt: " (e.message) }
                p.hint { "The workspace is as it was." }
            }
        }
        h2 { "Another devfile" }
        form.card method="post" action=(format!("{base}/rebuild")) {
            (csrf(viewer))
            div.field {
                label for="devfile" { "Devfile to use from now on (empty: its definition as it is now)" }
                textarea id="devfile" name="devfile" rows="12" spellcheck="false" { (devfile.unwrap_or_default()) }
            }
            button type="submit" { "Show what changes" }
        }
    };
    layout::page(viewer, status, &format!("Rebuild {}?", w.name), body)
}
