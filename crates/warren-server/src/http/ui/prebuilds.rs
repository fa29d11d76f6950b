//! A project's prebuilds page (anyone who may use the project): the refs prebuilt and the
//! schedule, each prebuild's commit, state, trigger, failure, the space it takes and the end of its output, and —
//! for its maintainers — a button that asks for one of a ref now. The rules are `crate::app::prebuilds`'s, as for the API.

use super::layout::{self, ago, csrf};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{prebuilds, AppState};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::html;
use warren_types::prebuild::PrebuildState;
use warren_types::quantity::format_size;

/// `GET /projects/{project}/prebuilds`.
pub async fn page(
    State(state): State<AppState>,
    Path(project): Path<String>,
    viewer: Viewer,
) -> Result<Response, UiError> {
    let all = prebuilds::list(&state, &viewer.who, &project).await?;
    let shown = crate::app::projects::get(&state, &viewer.who, &project).await?;
    let refs = shown.prebuild_refs;
    let now = Utc::now();
    let action = format!("/projects/{project}/prebuilds");
    let body = html! {
        p { a href="/" { "← Workspaces" } }
        section aria-labelledby="prebuilds-h" {
            h2 id="prebuilds-h" { "Prebuilds of " (project) }
            p.hint { "A prebuild runs the project's setup for a commit of a prebuilt branch ahead of time; a new workspace of that branch starts from the newest ready one and only fetches what came since. A failed prebuild never blocks a workspace: it starts without it and says so." }
            @if !refs.is_empty() {
                p {
                    "Prebuilt: "
                    @for (i, r) in refs.iter().enumerate() { @if i > 0 { ", " } code { (r) } }
                    " on agent " (shown.prebuild_agent.as_deref().unwrap_or("?"))
                    @match shown.prebuild_every_hours {
                        Some(h) => { "; each new commit, and again when a branch's newest prebuild is " (h) " hours old." }
                        None => { "; each new commit." }
                    }
                }
                @if let Some(n) = shown.prebuild_pool {
                    p {
                        "Warm pool: " (n) " stopped workspaces made from the newest prebuild of " code { (refs[0]) } ", handed to the next users who create one; "
                        (all.iter().filter_map(|b| b.pool_ready).sum::<u32>()) " waiting now."
                    }
                }
                form method="post" action=(action) {
                    (csrf(&viewer))
                    @if refs.len() > 1 {
                        label for="prebuild-ref" { "Branch " }
                        select id="prebuild-ref" name="ref" {
                            @for r in &refs { option value=(r) { (r) } }
                        }
                        " "
                    }
                    button type="submit" { "Prebuild the newest commit now" }
                    " "
                    span.hint { "(the project's maintainers)" }
                }
            }
            @if all.is_empty() {
                p { "No prebuilds yet. A maintainer turns them on with " code { "warren project prebuild on " (project) } "." }
            } @else {
                @let measured: Vec<u64> = all.iter().filter_map(|b| b.stored_bytes).collect();
                p {
                    "Space kept on the agents: " strong { (format_size(measured.iter().fold(0u64, |a, b| a.saturating_add(*b)))) }
                    " in " (measured.len()) " ready prebuilds, as their agents measured them."
                }
                table {
                    thead { tr { th { "Commit" } th { "Ref" } th { "State" } th { "Trigger" } th { "Agent" } th { "Workspaces" } th { "Space" } th { "Started" } th { "Finished" } } }
                    tbody {
                        @for b in &all {
                            tr {
                                td { code { (b.commit.get(..12).unwrap_or(&b.commit)) } }
                                td { code { (b.git_ref) } }
                                td {
                                    span class=(format!("badge prebuild-{}", b.state.as_str())) { (b.state.as_str()) }
                                    @if let Some(r) = &b.reason { br; span.error { (r) } }
                                }
                                td { (b.trigger.as_str()) }
                                td { (b.agent) }
                                td { (b.used) }
                                td { @match b.stored_bytes { Some(n) => (format_size(n)), None => "—" } }
                                td { (ago(b.created_at, now)) }
                                td { @match b.finished_at { Some(t) => (ago(t, now)), None => "—" } }
                            }
                            @if let Some(log) = b.log.as_deref().filter(|l| !l.is_empty()) {
                                tr {
                                    td colspan="9" {
                                        details open[b.state == PrebuildState::Failed] {
                                            summary { "Output of " (b.commit.get(..12).unwrap_or(&b.commit)) }
                                            pre.log { (log) }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &viewer,
        StatusCode::OK,
        &format!("Prebuilds of {project}"),
        body,
    ))
}

/// The run form: the ref (the default ref when left out).
#[derive(Debug, serde::Deserialize)]
pub struct RunForm {
    #[serde(default, rename = "ref")]
    git_ref: Option<String>,
}

/// `POST /projects/{project}/prebuilds`: a prebuild now (maintainers), then the page.
pub async fn run(
    State(state): State<AppState>,
    Path(project): Path<String>,
    posted: Posted<RunForm>,
) -> Result<Response, UiError> {
    let git_ref = posted.form.git_ref.as_deref().filter(|r| !r.is_empty());
    prebuilds::trigger(&state, &posted.viewer.who, &project, git_ref).await?;
    Ok(Redirect::to(&format!("/projects/{project}/prebuilds")).into_response())
}
