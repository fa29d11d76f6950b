//! The workspace pages: the list (live through server-sent events), the create form, a
//! workspace's page (state, links, actions with confirmation, resize) and its logs (tail
//! and follow). Each handler calls the same `crate::app::workspaces` function as the API.

use super::layout::{self, ago, csrf, field_error, invalid, select_field, state_badge};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::workspaces::{self as domain, Logs, LogsRequest};
use crate::app::{agents, projects, spaces, AppError, AppState, ErrorKind};
use axum::extract::{Path, Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio_stream::wrappers::ReceiverStream;
use warren_types::api::{
    CreateWorkspaceRequest, ResizeWorkspaceRequest, SpaceRole, VariableInput, VariableKind,
    Workspace, WorkspaceResources, WorkspaceRight,
};
use warren_types::startup::{StartupState, WorkspaceStartup};
use warren_types::{ActualState, DesiredState};

mod create;

use create::{form_field, is_form_error, opt};
mod events;
mod logs;
mod ports;
mod rebuild;

pub use create::{create, new_page};
pub use events::{list_events, show_events};
pub use logs::{logs_page, logs_stream};
pub use ports::{
    page as ports_page, revoke as revoke_share_link, set as set_port, share as share_port,
};
pub use rebuild::{page as rebuild_page, submit as rebuild};

/// How often a live view looks again without a change of this server's: another server
/// sharing the database may have made one.
const RECHECK: Duration = Duration::from_secs(2);
/// Lines of output the logs page shows unless asked for another number.
const DEFAULT_TAIL: u32 = 200;

// ---- the list ----

/// A row's cells. Nothing in them depends on the time of rendering (the creation time is a
/// date, not "3 s ago"), so a row is sent again only when the workspace changed.
fn cells(w: &Workspace) -> Markup {
    let running = w.actual_state == ActualState::Running;
    html! {
        th scope="row" { a href=(format!("/workspaces/{}", w.name)) { (w.name) } }
        td {
            (state_badge(w.actual_state, w.desired_state))
            @if let Some(r) = &w.failure_reason { p.reason { (r) } }
            @if let Some(r) = &w.waiting_reason { p.reason { "Waiting: " (r) } }
            @if let Some(f) = &w.agent_fault { p.reason { "Agent: " (f) } }
        }
        td.space { (w.space) }
        td { (w.owner_username) }
        td { (w.agent_name) }
        td.resources { (resources_text(&w.resources)) }
        td { (layout::date(w.created_at)) }
        td.open {
            @if running {
                @if let Some(u) = &w.editor_url { a href=(u) rel="noopener" { "Editor" } " " }
                @if let Some(u) = &w.terminal_url { a href=(u) rel="noopener" { "Terminal" } }
            }
        }
    }
}

/// A row: its element stays and only its cells are swapped (`innerHTML`), so a second
/// change arriving while the first is being swapped in still finds the row listening (an
/// `outerHTML` swap lost it: the new row is not listening yet for a moment).
fn row(id: &str, cells: &Markup) -> Markup {
    html! { tr id=(id) sse-swap=(id) hx-swap="innerHTML" { (cells) } }
}

fn resources_text(r: &WorkspaceResources) -> String {
    if let Some(class) = &r.class {
        return format!("class {class}");
    }
    match (&r.cpu, &r.memory) {
        (None, None) => "agent default".into(),
        (c, m) => format!(
            "{} CPU · {}",
            c.as_deref().unwrap_or("default"),
            m.as_deref().unwrap_or("default")
        ),
    }
}

/// The rows of the list, with the empty state when there are none (`later`: a page after
/// the first, which says so instead).
fn rows(list: &[Workspace], later: bool) -> (Markup, BTreeMap<String, String>) {
    let each: Vec<(String, Markup)> = list.iter().map(|w| (w.id.to_string(), cells(w))).collect();
    let cols = 8;
    let markup = html! {
        @if list.is_empty() && later {
            tr.empty { td colspan=(cols) { "No more workspaces. " a href="/" { "Back to the first page" } } }
        } @else if list.is_empty() {
            tr.empty { td colspan=(cols) {
                "No workspaces yet — " a href="/workspaces/new" { "create one" } "."
            } }
        }
        @for (id, c) in &each {
            (row(&format!("ws-{id}"), c))
        }
    };
    let each = each
        .into_iter()
        .map(|(id, c)| (id, c.into_string()))
        .collect();
    (markup, each)
}

fn digest(rows: &Markup) -> String {
    hex::encode(Sha256::digest(rows.0.as_bytes()))[..16].to_owned()
}

/// Rows a page of the list shows; the next ones are a link away (keyset pagination, as the
/// API's cursor).
const PAGE_SIZE: i64 = 100;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    /// The API's cursor: the page starts after this workspace.
    #[serde(default)]
    after: Option<String>,
}

/// One page of the list, as the domain's listing with the API's cursor.
async fn list_window(
    state: &AppState,
    viewer: &Viewer,
    after: Option<&str>,
) -> Result<warren_types::api::Page<Workspace>, AppError> {
    domain::list(
        state,
        &viewer.who,
        &warren_types::api::WorkspaceListQuery {
            limit: Some(PAGE_SIZE),
            cursor: after.map(str::to_owned),
            ..Default::default()
        },
    )
    .await
}

fn query_value(v: &str) -> String {
    url::form_urlencoded::byte_serialize(v.as_bytes()).collect()
}

/// `GET /`
pub async fn list_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<ListQuery>,
) -> Result<Response, UiError> {
    let after = q.after.as_deref().filter(|a| !a.is_empty());
    let window = list_window(&state, &viewer, after).await?;
    let (body, _) = rows(&window.items, after.is_some());
    let v = digest(&body);
    let events = match after {
        Some(a) => format!("/events/workspaces?v={v}&after={}", query_value(a)),
        None => format!("/events/workspaces?v={v}"),
    };
    let page = html! {
        p.actions { a.button.primary href="/workspaces/new" { "New workspace" } }
        div.table-wrap {
            table.list hx-ext="sse" sse-connect=(events) {
                caption.visually-hidden { "Your workspaces and those of your spaces; states update live" }
                thead { tr {
                    th scope="col" { "Name" }
                    th scope="col" { "State" }
                    th scope="col" { "Space" }
                    th scope="col" { "Owner" }
                    th scope="col" { "Agent" }
                    th scope="col" { "Resources" }
                    th scope="col" { "Created" }
                    th scope="col" { "Open" }
                } }
                tbody id="rows" sse-swap="rows" aria-live="polite" { (body) }
            }
        }
        @if after.is_some() || window.next_cursor.is_some() {
            nav.pages aria-label="Pages of workspaces" {
                @if after.is_some() { a href="/" { "← First page" } }
                @if let Some(next) = &window.next_cursor {
                    a href=(format!("/?after={}", query_value(next))) rel="next" { "Next " (PAGE_SIZE) " →" }
                }
            }
        }
    };
    Ok(layout::page(&viewer, StatusCode::OK, "Workspaces", page))
}

/// The part of a workspace's page that changes with its state: state, links, actions. Its
/// element stays and its contents are swapped, as a list row's.
fn live_panel(w: &Workspace, viewer: &Viewer) -> Markup {
    html! { div id="live" sse-swap="live" hx-swap="innerHTML" { (live_contents(w, viewer)) } }
}

/// When a timer stops or terminates the workspace next, and why: a warning in its last ten
/// minutes, a hint before.
fn planned_banner(p: &warren_types::api::PlannedChange) -> Markup {
    let now = Utc::now();
    let verb = if p.desired_state == DesiredState::Terminated {
        "Terminated"
    } else {
        "Stops"
    };
    let soon = p.at - now <= chrono::Duration::minutes(10);
    html! {
        p class=(if soon { "warning" } else { "hint" }) role="status" id="planned" {
            (verb) " " (layout::ago_or_in(p.at, now)) " (" (layout::date(p.at)) " UTC): " (p.reason) "."
        }
    }
}

fn live_contents(w: &Workspace, viewer: &Viewer) -> Markup {
    let running = w.actual_state == ActualState::Running;
    let terminated = w.desired_state == DesiredState::Terminated;
    let base = format!("/workspaces/{}", w.name);
    let may_manage = w.your_right >= Some(WorkspaceRight::Manage);
    let may_use = w.your_right >= Some(WorkspaceRight::Use);
    html! {
        div.live-body {
            p.state-line { "State: " (state_badge(w.actual_state, w.desired_state)) }
            @if let Some(r) = &w.failure_reason { p.error role="alert" { (r) } }
            @if let Some(r) = &w.waiting_reason { p.warning { "Waiting: " (r) } }
            @if let Some(f) = &w.agent_fault {
                p.warning { "The agent cannot see its runtime; the state shown may be out of date: " (f) }
            }
            @if let Some(i) = &w.isolation_warning { p.warning { (i) } }
            @if let Some(r) = &w.region {
                @match &r.notice {
                    Some(n) => p.warning role="status" data-region=(r.name) { (n) },
                    None => p.region data-region=(r.name) { "Region: " (r.name) " (reached through its own proxy)" },
                }
            }
            @if let Some(p) = &w.planned { (planned_banner(p)) }
            @if !running && !terminated && w.desired_state == DesiredState::Running {
                p.progress role="status" { span.spinner aria-hidden="true" {} "Starting… this page updates by itself." }
            }
            @if running && may_use {
                ul.links aria-label="Open" {
                    @if let Some(u) = &w.editor_url { li { a.button.primary href=(u) rel="noopener" { "Open editor" } } }
                    @if let Some(u) = &w.terminal_url { li { a.button href=(u) rel="noopener" { "Open terminal" } } }
                }
            }
            @if !w.endpoints.is_empty() {
                h2 { "Endpoints" }
                ul.endpoints {
                    @for (name, url) in &w.endpoints {
                        li {
                            @if running { a href=(url) rel="noopener" { (name) } } @else { (name) }
                            " " code { (url) }
                        }
                    }
                }
            }
            @if !terminated && may_use {
                h2 { "Actions" }
                div.actions {
                    @if matches!(w.desired_state, DesiredState::Stopped) || matches!(w.actual_state, ActualState::Failed | ActualState::Error) {
                        form method="post" action=(format!("{base}/action/start")) {
                            (csrf(viewer))
                            button.primary type="submit" { "Start" }
                        }
                    }
                    @if matches!(w.desired_state, DesiredState::Running | DesiredState::RestartRequested) {
                        a.button href=(format!("{base}/confirm/stop")) { "Stop…" }
                        a.button href=(format!("{base}/confirm/restart")) { "Restart…" }
                    }
                    @if may_manage {
                        a.button.danger href=(format!("{base}/confirm/delete")) { "Delete…" }
                    }
                }
            }
        }
    }
}

/// `GET /workspaces/{name}`
pub async fn show(
    State(state): State<AppState>,
    State(http): State<crate::http::HttpState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    let w = domain::get(&state, &viewer.who, &name).await?;
    let (mut notes, update) = tokio::join!(
        output_notes(&state, &viewer, &w),
        definition_update(&state, &viewer, &w)
    );
    notes.update = update;
    notes.ssh = http.access_info().await.ssh;
    notes.sizes = sizes(&state, &viewer, &w.agent_name).await;
    Ok(workspace_page(
        &viewer,
        &w,
        StatusCode::OK,
        None,
        &ResizeForm::default(),
        &notes,
    ))
}

/// What a running workspace's own output says: how its startup went, and whether its editor
/// started or why not, as `warren ws show` says them.
#[derive(Debug, Default)]
struct OutputNotes {
    startup: Option<WorkspaceStartup>,
    editor: Option<String>,
    /// How many parts its project's definition changed since it was built (the "update
    /// available" mark); `None` when nothing changed or it cannot be told at once.
    update: Option<usize>,
    /// The proxy's SSH server, for the desktop IDEs' links.
    ssh: Option<warren_types::api::SshEndpoint>,
    /// The machine classes its agent offers, for the resize form.
    sizes: Sizes,
}

/// What sizes an agent offers: its machine classes, and whether numbers are taken too.
#[derive(Debug, Default)]
pub(super) struct Sizes {
    pub classes: Vec<warren_types::machine::MachineClass>,
    pub numbers: bool,
}

/// The sizes agent `agent` offers (numbers only, when it cannot be read).
pub(super) async fn sizes(state: &AppState, viewer: &Viewer, agent: &str) -> Sizes {
    match crate::app::agents::get(state, &viewer.who, agent).await {
        Ok(a) => Sizes {
            numbers: a.config.custom_sizes || a.config.machine_classes.is_empty(),
            classes: a.config.machine_classes,
        },
        Err(_) => Sizes {
            classes: vec![],
            numbers: true,
        },
    }
}

/// Whether a project's workspace would change if rebuilt now: a dry run of the rebuild,
/// which reads the project's definition at the workspace's ref. Only for who may rebuild it,
/// and given as long as the page waits for the rest.
async fn definition_update(state: &AppState, viewer: &Viewer, w: &Workspace) -> Option<usize> {
    if (w.project.is_none() && w.repository.is_none())
        || w.your_right < Some(WorkspaceRight::Manage)
        || w.desired_state == DesiredState::Terminated
    {
        return None;
    }
    let req = warren_types::api::RebuildWorkspaceRequest {
        devfile: None,
        dry_run: true,
    };
    // Run apart and waited for at most 2 s, never cancelled: cancelling would kill a `git
    // fetch` of the project's cache half-way (leaving its lock behind).
    let (state, who, name) = (state.clone(), viewer.who.clone(), w.name.clone());
    let run = tokio::spawn(async move { domain::rebuild(&state, &who, &name, &req).await });
    let plan = tokio::time::timeout(Duration::from_secs(2), run)
        .await
        .ok()?
        .ok()?
        .ok()?;
    (!plan.changes.is_empty()).then_some(plan.changes.len())
}

/// The notes of a running workspace's output; each `None` when it cannot be read at once
/// (the page does not wait long for it).
async fn output_notes(state: &AppState, viewer: &Viewer, w: &Workspace) -> OutputNotes {
    if w.actual_state != ActualState::Running || w.your_right < Some(WorkspaceRight::Use) {
        return OutputNotes::default();
    }
    let patience = Duration::from_secs(2);
    let startup = tokio::time::timeout(patience, domain::startup(state, &viewer.who, &w.name));
    let editor = async {
        w.editor_url.as_ref()?;
        let req = LogsRequest {
            tail: Some(200),
            container: None,
            follow: false,
        };
        match tokio::time::timeout(patience, domain::logs(state, &viewer.who, &w.name, &req)).await
        {
            Ok(Ok(Logs::Text(t))) => warren_types::config::editor_status(&t),
            _ => None,
        }
    };
    let (startup, editor) = tokio::join!(startup, editor);
    OutputNotes {
        startup: startup
            .ok()
            .and_then(Result::ok)
            .filter(|s| !matches!(s.state, StartupState::Unknown | StartupState::Untold)),
        editor,
        update: None,
        ssh: None,
        sizes: Sizes::default(),
    }
}

fn right_words(r: Option<WorkspaceRight>) -> &'static str {
    match r {
        Some(WorkspaceRight::Manage) => "use, resize, rebuild and delete it",
        Some(WorkspaceRight::Use) => "use it (start, stop, open, logs)",
        Some(WorkspaceRight::See) | None => "see it (a viewer of its space)",
    }
}

fn workspace_page(
    viewer: &Viewer,
    w: &Workspace,
    status: StatusCode,
    resize_error: Option<&AppError>,
    resize: &ResizeForm,
    notes: &OutputNotes,
) -> Response {
    let now = Utc::now();
    let base = format!("/workspaces/{}", w.name);
    let may_manage = w.your_right >= Some(WorkspaceRight::Manage);
    let may_use = w.your_right >= Some(WorkspaceRight::Use);
    let resize_field = resize_error.and_then(form_field);
    let class_err = resize_error
        .filter(|_| resize_field == Some("class"))
        .map(|e| e.message.clone());
    let cpu_err = resize_error
        .filter(|_| !matches!(resize_field, Some("memory" | "class")))
        .map(|e| e.message.clone());
    let mem_err = resize_error
        .filter(|_| resize_field == Some("memory"))
        .map(|e| e.message.clone());
    let cpu_value = resize
        .cpu
        .clone()
        .or(w.resources.cpu.clone())
        .unwrap_or_default();
    let memory_value = resize
        .memory
        .clone()
        .or(w.resources.memory.clone())
        .unwrap_or_default();
    let class_value = resize.class.clone().or(w.resources.class.clone());
    let sizes = &notes.sizes;
    let numbers = sizes.numbers && w.resources.class.is_none();
    let body = html! {
        div hx-ext="sse" sse-connect=(format!("{base}/events?v={}", w.version)) {
            (live_panel(w, viewer))
        }
        @if let Some(st) = &notes.startup {
            @if st.state == StartupState::Failed {
                p.warning role="status" { "Startup " (st.describe()) ". The workspace runs on, to be fixed in; its logs show the output." }
            } @else {
                p.hint role="status" { "Startup: " (st.describe()) }
            }
        }
        @if let Some(n) = notes.update {
            p.warning role="status" { (if w.project.is_some() { "Its project's" } else { "Its repository's" }) " definition changed since it was built (" (n) " change(s)). "
                a href=(format!("{base}/rebuild")) { "Review and rebuild…" } }
        }
        @if let Some(e) = &notes.editor {
            @if e.starts_with("editor not started") {
                p.warning role="status" { "Editor: " (e) }
            } @else {
                p.hint { "Editor: " (e) }
            }
        }
        @if may_use {
            h2 { "Logs" }
            p { a href=(format!("{base}/logs")) { "Recent output" } " · " a href=(format!("{base}/logs?follow=true")) { "Follow output" } }
            @if !w.endpoints.is_empty() {
                h2 { "Ports" }
                p { "Who may reach each port, and links that open one without signing in: " a href=(format!("{base}/ports")) { "Ports and sharing" } }
            }
            @if let Some(ssh) = &notes.ssh {
                @let folder = warren_types::api::SshEndpoint::folder(w);
                h2 { "Desktop IDE" }
                p {
                    a.button href=(warren_types::api::SshEndpoint::vscode_url(&w.name, &folder)) { "Open in VS Code" } " "
                    a.button href=(ssh.gateway_url(&w.name, &folder)) { "Open in JetBrains Gateway" }
                }
                p.hint { "Over SSH, through the host " code { "warren-" (w.name) } " that " code { "warren ws open " (w.name) " --vscode" } " (or " code { "warren ws ssh-config --write" } ") installs on your machine once." }
            }
        }
        @if w.desired_state != DesiredState::Terminated && may_manage {
            h2 { "Resize" }
            form.card.inline method="post" action=(format!("{base}/resize")) {
                (csrf(viewer))
                @if !sizes.classes.is_empty() {
                    (class_select(&sizes.classes, class_value.as_deref(), numbers, class_err.as_deref()))
                }
                @if numbers {
                    div.row {
                        (layout::input(layout::Input { id: "cpu", label: "CPU", value: Some(&cpu_value), placeholder: Some("e.g. 2"), error: cpu_err.as_deref(), ..layout::Input::default() }))
                        (layout::input(layout::Input { id: "memory", label: "Memory", value: Some(&memory_value), placeholder: Some("e.g. 4Gi"), error: mem_err.as_deref(), ..layout::Input::default() }))
                    }
                }
                p.hint { "A running workspace restarts with the new size; its volume is kept (and never shrinks)." }
                button type="submit" { "Resize" }
            }
            h2 { "Rebuild" }
            p { "Make it again from its definition as it is now (after its devfile or dev container configuration changed), or from another devfile; what changes is shown first. "
                a.button href=(format!("{base}/rebuild")) { "Rebuild…" } }
        }
        h2 { "Details" }
        dl.details {
            dt { "Space" } dd { (w.space) }
            dt { "You may" } dd { (right_words(w.your_right)) }
            dt { "Owner" } dd { (w.owner_username) }
            dt { "Agent" } dd { (w.agent_name) }
            @if let Some(p) = &w.project_name { dt { "Project" } dd { (p) " · " a href=(format!("/projects/{p}/prebuilds")) { "its prebuilds" } } }
            @if let Some(r) = &w.repository { dt { "Repository" } dd { code { (r) } } }
            @if let Some(r) = &w.git_ref { dt { "Ref" } dd { code { (r) } } }
            dt { "Resources" } dd { (resources_text(&w.resources)) }
            dt { "Created" } dd { (ago(w.created_at, now)) }
            dt { "Last used" } dd { @match w.last_activity_at { Some(t) => (ago(t, now)), None => "never" } }
            dt { "Namespace" } dd { code { (w.namespace) } }
            @if !w.notices.is_empty() {
                dt { "Devfile notices" }
                dd { ul.plain { @for n in &w.notices { li { (n) } } } }
            }
            @if !w.variables.is_empty() {
                dt { "Variables" }
                dd { ul.plain { @for v in &w.variables {
                    li { code { (v.key) } " = " @match &v.value { Some(x) => code { (x) }, None => em { "secret" } } }
                } } }
            }
        }
    };
    layout::page(viewer, status, &w.name, body)
}

/// An action on a workspace.
#[derive(Debug, Clone, Copy)]
enum Action {
    Start,
    Stop,
    Restart,
    Delete,
}

impl Action {
    fn parse(s: &str) -> Option<Action> {
        Some(match s {
            "start" => Action::Start,
            "stop" => Action::Stop,
            "restart" => Action::Restart,
            "delete" => Action::Delete,
            _ => return None,
        })
    }
    fn verb(self) -> &'static str {
        match self {
            Action::Start => "Start",
            Action::Stop => "Stop",
            Action::Restart => "Restart",
            Action::Delete => "Delete",
        }
    }
    fn path(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Stop => "stop",
            Action::Restart => "restart",
            Action::Delete => "delete",
        }
    }
}

/// `GET /workspaces/{name}/confirm/{action}`: what the action does, and a button to do it.
pub async fn confirm(
    State(state): State<AppState>,
    viewer: Viewer,
    Path((name, action)): Path<(String, String)>,
) -> Result<Response, UiError> {
    let w = domain::get(&state, &viewer.who, &name).await?;
    let Some(action) = Action::parse(&action) else {
        return Ok(super::html_not_found());
    };
    let what = match action {
        Action::Start => "starts the workspace.",
        Action::Stop => "stops the workspace's containers. Its volume (your files under /projects and your home) is kept; start it again at any time.",
        Action::Restart => "stops the workspace's containers and starts them again. Its volume is kept; unsaved work in running programs is lost.",
        Action::Delete => "deletes the workspace and its volume. Files not pushed elsewhere are lost for good.",
    };
    let base = format!("/workspaces/{}", w.name);
    let body = html! {
        p { (action.verb()) " " strong { (w.name) } " — this " (what) }
        form.card method="post" action=(format!("{base}/action/{}", action.path())) {
            (csrf(&viewer))
            div.actions {
                @if matches!(action, Action::Delete) {
                    button.danger type="submit" autofocus { "Delete " (w.name) }
                } @else {
                    button.primary type="submit" autofocus { (action.verb()) " " (w.name) }
                }
                a.button href=(base) { "Cancel" }
            }
        }
    };
    Ok(layout::page(
        &viewer,
        StatusCode::OK,
        &format!("{} {}?", action.verb(), w.name),
        body,
    ))
}

/// `POST /workspaces/{name}/action/{action}`
pub async fn act(
    State(state): State<AppState>,
    Path((name, action)): Path<(String, String)>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    let who = &posted.viewer.who;
    let Some(action) = Action::parse(&action) else {
        return Ok(super::html_not_found());
    };
    let w = match action {
        Action::Start => {
            domain::set_desired_state(&state, who, &name, DesiredState::Running).await?
        }
        Action::Stop => {
            domain::set_desired_state(&state, who, &name, DesiredState::Stopped).await?
        }
        Action::Restart => {
            domain::set_desired_state(&state, who, &name, DesiredState::RestartRequested).await?
        }
        Action::Delete => {
            domain::terminate(&state, who, &name).await?;
            return Ok(Redirect::to("/").into_response());
        }
    };
    Ok(Redirect::to(&format!("/workspaces/{}", w.name)).into_response())
}

/// A select of an agent's machine classes (`class`), `chosen` selected; with `numbers`, a
/// first choice of none (a size in numbers instead).
pub(super) fn class_select(
    classes: &[warren_types::machine::MachineClass],
    chosen: Option<&str>,
    numbers: bool,
    error: Option<&str>,
) -> Markup {
    html! {
        label for="class" { "Machine class" }
        select #class name="class" aria-invalid=[error.map(|_| "true")] {
            @if numbers {
                option value="" selected[chosen.is_none()] { "None: the size below" }
            }
            @for c in classes {
                option value=(c.name) selected[chosen == Some(c.name.as_str())] {
                    (c.name) @if !c.description.is_empty() { " — " (c.description) }
                }
            }
        }
        @if let Some(e) = error { small.error { (e) } }
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ResizeForm {
    #[serde(default)]
    class: Option<String>,
    #[serde(default)]
    cpu: Option<String>,
    #[serde(default)]
    memory: Option<String>,
}

/// `POST /workspaces/{name}/resize`
pub async fn resize(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, form }: Posted<ResizeForm>,
) -> Result<Response, UiError> {
    let req = ResizeWorkspaceRequest {
        resources: WorkspaceResources {
            class: form.class.as_deref().and_then(opt),
            cpu: form.cpu.as_deref().and_then(opt),
            memory: form.memory.as_deref().and_then(opt),
        },
    };
    match domain::resize(&state, &viewer.who, &name, &req).await {
        Ok(w) => Ok(Redirect::to(&format!("/workspaces/{}", w.name)).into_response()),
        Err(e) if is_form_error(&e) => {
            let w = domain::get(&state, &viewer.who, &name).await?;
            let status = crate::http::error::status_of(e.kind);
            let notes = OutputNotes {
                sizes: sizes(&state, &viewer, &w.agent_name).await,
                ..OutputNotes::default()
            };
            Ok(workspace_page(&viewer, &w, status, Some(&e), &form, &notes))
        }
        Err(e) => Err(e.into()),
    }
}

// ---- logs ----
