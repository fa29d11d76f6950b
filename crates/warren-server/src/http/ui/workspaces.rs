//! The workspace pages: the list (live through server-sent events), the create form, a
//! workspace's page (state, links, actions with confirmation, resize) and its logs (tail
//! and follow). Each handler calls the same `crate::app::workspaces` function as the API.

use super::layout::{self, ago, csrf, field_error, invalid, state_badge};
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
use warren_types::{ActualState, DesiredState};

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

#[derive(Debug, Default, Deserialize)]
pub struct EventsQuery {
    /// Digest of the rows the page was rendered with: sent again only when they differ.
    #[serde(default)]
    v: Option<String>,
    /// The page's cursor ([`ListQuery::after`]).
    #[serde(default)]
    after: Option<String>,
}

type EventStream =
    Sse<axum::response::sse::KeepAliveStream<ReceiverStream<Result<Event, Infallible>>>>;

/// An event carrying HTML; SSE cannot carry carriage returns (axum refuses them), so any in
/// user text become a character reference.
fn event(name: impl Into<String>, html: &str) -> Event {
    Event::default()
        .event(name.into())
        .data(html.replace('\r', "&#13;"))
}

fn sse(rx: tokio::sync::mpsc::Receiver<Result<Event, Infallible>>) -> EventStream {
    Sse::new(ReceiverStream::new(rx)).keep_alive(KeepAlive::default())
}

type EventSender = tokio::sync::mpsc::Sender<Result<Event, Infallible>>;

/// The channel of an event stream, its first event already in it: the reconnection delay,
/// sent at once so the answer's head and first bytes leave now. (A stream that stays silent
/// until its first change keeps Chromium's connection to the server open after the page
/// is gone, and six of those block every further request to the server.)
fn live_channel(
    capacity: usize,
) -> (
    EventSender,
    tokio::sync::mpsc::Receiver<Result<Event, Infallible>>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel(capacity);
    let _ = tx.try_send(Ok(Event::default().retry(Duration::from_secs(3))));
    (tx, rx)
}

/// Waits for a change of this server's or the recheck timer.
async fn next_change(changes: &mut tokio::sync::watch::Receiver<u64>) {
    tokio::select! {
        // Cancel-safe: `changed` only marks the value seen; the caller reads everything
        // again after either arm.
        r = changes.changed() => {
            if r.is_err() {
                tokio::time::sleep(RECHECK).await;
            }
        }
        // Cancel-safe: a sleep holds nothing.
        _ = tokio::time::sleep(RECHECK) => {}
    }
}

/// `GET /events/workspaces`: the list's changes as server-sent events — `rows` (all rows)
/// when workspaces came or went, else `ws-<id>` for each row that changed.
pub async fn list_events(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<EventsQuery>,
) -> EventStream {
    let (tx, rx) = live_channel(16);
    tokio::spawn(async move {
        let mut changes = state.changes.subscribe();
        let mut sent: Option<BTreeMap<String, String>> = None;
        let mut page_digest = q.v;
        loop {
            changes.borrow_and_update();
            let after = q.after.as_deref().filter(|a| !a.is_empty());
            let list = match list_window(&state, &viewer, after).await {
                Ok(l) => l.items,
                // The account was disabled or the database is away: end; the browser
                // reconnects and the page shows what is wrong.
                Err(_) => return,
            };
            let (all, each) = rows(&list, after.is_some());
            let events: Vec<Event> = match &sent {
                None if page_digest.take().as_deref() == Some(digest(&all).as_str()) => vec![],
                Some(prev) if prev.keys().eq(each.keys()) => each
                    .iter()
                    .filter(|(id, html)| prev.get(*id) != Some(html))
                    .map(|(id, html)| event(format!("ws-{id}"), html))
                    .collect(),
                _ => vec![event("rows", &all.into_string())],
            };
            sent = Some(each);
            for e in events {
                if tx.send(Ok(e)).await.is_err() {
                    return; // the page was closed
                }
            }
            tokio::select! {
                // Cancel-safe: dropping the wait loses nothing; the list is read again.
                _ = next_change(&mut changes) => {}
                // Cancel-safe: `closed` only watches the channel.
                _ = tx.closed() => return,
                // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                _ = state.closing.cancelled() => return,
            }
        }
    });
    sse(rx)
}

// ---- create ----

#[derive(Debug, Default, Deserialize)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    devfile: String,
    /// An uploaded devfile (multipart); wins over the pasted one when not empty.
    #[serde(default)]
    devfile_file: String,
    #[serde(default)]
    agent: String,
    /// The space's path; empty: the creator's personal space.
    #[serde(default)]
    space: String,
    #[serde(default)]
    cpu: String,
    #[serde(default)]
    memory: String,
    #[serde(default, rename = "ref")]
    git_ref: String,
    /// Without a project: the devfile's starter project to clone.
    #[serde(default)]
    starter: String,
    /// `KEY=value` per line.
    #[serde(default)]
    variables: String,
    /// `KEY=value` per line, stored encrypted and never shown again.
    #[serde(default)]
    secret_variables: String,
}

fn opt(s: &str) -> Option<String> {
    let t = s.trim();
    (!t.is_empty()).then(|| t.to_owned())
}

/// Reads `KEY=value` lines; a line without `=` is an error naming it.
fn parse_variables(text: &str, secret: bool, field: &str) -> Result<Vec<VariableInput>, AppError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            return Err(AppError::invalid_field(
                field,
                format!("line {}: expected KEY=value", i + 1),
            ));
        };
        out.push(VariableInput {
            key: k.trim().to_owned(),
            value: v.to_owned(),
            kind: VariableKind::Env,
            secret,
        });
    }
    Ok(out)
}

/// The form field a domain error concerns, as the create form names its fields.
fn form_field(e: &AppError) -> Option<&'static str> {
    let f = e.field.as_deref()?;
    Some(match f {
        "name" => "name",
        "agent" => "agent",
        "space" => "space",
        "project" | "project devfile" | "repository devfile" => "project",
        "devfile" => "devfile",
        "ref" => "ref",
        "starter" => "starter",
        f if f.starts_with("resources.cpu") || f == "cpu" => "cpu",
        f if f.starts_with("resources.memory") || f == "memory" => "memory",
        f if f.starts_with("resources") => "cpu",
        f if f.starts_with("variables") => "variables",
        "secret_variables" => "secret_variables",
        _ => return None,
    })
}

async fn create_form(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    f: &CreateForm,
    error: Option<&AppError>,
) -> Result<Response, UiError> {
    let projects = projects::list(state, &viewer.who).await?;
    let agents = agents::list(state, &viewer.who).await?;
    // Where the viewer may create: developer or owner there (the personal space among them).
    let spaces: Vec<String> = spaces::list(state, &viewer.who)
        .await?
        .into_iter()
        .filter(|s| s.your_role >= Some(SpaceRole::Developer))
        .map(|s| s.path)
        .collect();
    let personal = format!("users/{}", viewer.who.user.username);
    let err_field = error.and_then(form_field);
    let err_for = |name: &str| -> Option<String> {
        error
            .filter(|_| err_field == Some(name))
            .map(|e| e.message.clone())
    };
    let general = error.filter(|_| err_field.is_none());
    let field = |id: &'static str, label: &'static str, value: &str, hint: &'static str| {
        let e = err_for(id);
        layout::input(layout::Input {
            id,
            label,
            value: Some(value),
            placeholder: Some(hint),
            error: e.as_deref(),
            ..layout::Input::default()
        })
    };
    let devfile_err = err_for("devfile");
    let (dev_described, dev_bad) = invalid("devfile", devfile_err.as_deref());
    let vars_err = err_for("variables");
    let (vars_described, vars_bad) = invalid("variables", vars_err.as_deref());
    let agent_err = err_for("agent");
    let space_err = err_for("space");
    let project_err = err_for("project");
    let body = html! {
        @if let Some(e) = general { p.error role="alert" { (e.message) } }
        form.card method="post" action="/workspaces/new" enctype="multipart/form-data" {
            (csrf(viewer))
            (field("name", "Name (optional)", &f.name, "generated when empty"))
            div.field {
                label for="project" { "Project" }
                select id="project" name="project" aria-invalid=[project_err.as_ref().map(|_| "true")]
                    aria-describedby=[project_err.as_ref().map(|_| "project-error")] {
                    option value="" selected[f.project.is_empty()] { "None: use the devfile below" }
                    @for p in &projects {
                        option value=(p.name) selected[f.project == p.name] { (p.name) " — " (p.git_url) }
                    }
                }
                (field_error("project", project_err.as_deref()))
            }
            (field("ref", "Git ref (optional)", &f.git_ref, "the project's default branch"))
            (field("starter", "Starter project (optional)", &f.starter, "without a project: the devfile's first"))
            div.field {
                label for="devfile" { "Devfile (YAML)" }
                p.hint id="devfile-hint" { "Paste a devfile, or upload one below. Left empty: the project's devfile, else the server's default." }
                textarea id="devfile" name="devfile" rows="12" spellcheck="false"
                    aria-describedby=(dev_described.unwrap_or_else(|| "devfile-hint".into())) aria-invalid=[dev_bad] { (f.devfile) }
                (field_error("devfile", devfile_err.as_deref()))
                label for="devfile_file" { "Or upload a devfile" }
                input type="file" id="devfile_file" name="devfile_file" accept=".yaml,.yml,text/yaml";
            }
            div.field {
                label for="agent" { "Agent" }
                select id="agent" name="agent" aria-invalid=[agent_err.as_ref().map(|_| "true")]
                    aria-describedby=[agent_err.as_ref().map(|_| "agent-error")] {
                    @if agents.len() != 1 { option value="" { "Choose an agent" } }
                    @for a in &agents {
                        option value=(a.name) selected[f.agent == a.name || agents.len() == 1] {
                            (a.name)
                            @if a.last_seen_at.is_none() { " (never connected)" }
                        }
                    }
                }
                (field_error("agent", agent_err.as_deref()))
            }
            div.field {
                label for="space" { "Space" }
                select id="space" name="space" aria-invalid=[space_err.as_ref().map(|_| "true")]
                    aria-describedby=[space_err.as_ref().map(|_| "space-error")] {
                    @for p in &spaces {
                        option value=(p) selected[f.space == *p || (f.space.is_empty() && *p == personal)] {
                            (p) @if *p == personal { " (yours)" }
                        }
                    }
                }
                (field_error("space", space_err.as_deref()))
            }
            div.row {
                (field("cpu", "CPU (optional)", &f.cpu, "e.g. 2 or 500m"))
                (field("memory", "Memory (optional)", &f.memory, "e.g. 4Gi"))
            }
            div.field {
                label for="variables" { "Environment variables (optional)" }
                p.hint id="variables-hint" { "One KEY=value per line." }
                textarea id="variables" name="variables" rows="3" spellcheck="false"
                    aria-describedby=(vars_described.unwrap_or_else(|| "variables-hint".into())) aria-invalid=[vars_bad] { (f.variables) }
                (field_error("variables", vars_err.as_deref()))
            }
            div.field {
                label for="secret_variables" { "Secret variables (optional)" }
                p.hint id="secret-hint" { "One KEY=value per line; stored encrypted, never shown again." }
                textarea id="secret_variables" name="secret_variables" rows="2" spellcheck="false"
                    aria-describedby="secret-hint" { }
                (field_error("secret_variables", err_for("secret_variables").as_deref()))
            }
            button.primary type="submit" { "Create workspace" }
        }
    };
    Ok(layout::page(viewer, status, "New workspace", body))
}

#[derive(Debug, Default, Deserialize)]
pub struct NewQuery {
    #[serde(default)]
    project: Option<String>,
}

/// `GET /workspaces/new`
pub async fn new_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Query(q): Query<NewQuery>,
) -> Result<Response, UiError> {
    let f = CreateForm {
        project: q.project.unwrap_or_default(),
        ..CreateForm::default()
    };
    create_form(&state, &viewer, StatusCode::OK, &f, None).await
}

/// `POST /workspaces/new`
pub async fn create(
    State(state): State<AppState>,
    Posted { viewer, form: f }: Posted<CreateForm>,
) -> Result<Response, UiError> {
    let request = (|| -> Result<CreateWorkspaceRequest, AppError> {
        let mut variables = parse_variables(&f.variables, false, "variables")?;
        variables.extend(parse_variables(
            &f.secret_variables,
            true,
            "secret_variables",
        )?);
        let resources = match (opt(&f.cpu), opt(&f.memory)) {
            (None, None) => None,
            (cpu, memory) => Some(WorkspaceResources { cpu, memory }),
        };
        Ok(CreateWorkspaceRequest {
            project: opt(&f.project),
            devfile: opt(&f.devfile_file).or_else(|| opt(&f.devfile)),
            agent: opt(&f.agent),
            name: opt(&f.name),
            resources,
            variables,
            git_ref: opt(&f.git_ref),
            starter: opt(&f.starter),
            space: opt(&f.space),
        })
    })();
    let result = match request {
        Ok(req) => domain::create(&state, &viewer.who, &req).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(w) => Ok(Redirect::to(&format!("/workspaces/{}", w.name)).into_response()),
        Err(e) if is_form_error(&e) => {
            let status = crate::http::error::status_of(e.kind);
            // The uploaded file is shown in the text area, so a fix does not need it again.
            let f = CreateForm {
                devfile: opt(&f.devfile_file).unwrap_or(f.devfile.clone()),
                devfile_file: String::new(),
                secret_variables: String::new(),
                ..f
            };
            create_form(&state, &viewer, status, &f, Some(&e)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Errors the form shows beside its fields (the rest get an error page).
fn is_form_error(e: &AppError) -> bool {
    matches!(
        e.kind,
        ErrorKind::Invalid | ErrorKind::Unprocessable | ErrorKind::Conflict | ErrorKind::Forbidden
    ) || e.code == "quota_exceeded"
}

// ---- one workspace ----

/// The part of a workspace's page that changes with its state: state, links, actions. Its
/// element stays and its contents are swapped, as a list row's.
fn live_panel(w: &Workspace, viewer: &Viewer) -> Markup {
    html! { div id="live" sse-swap="live" hx-swap="innerHTML" { (live_contents(w, viewer)) } }
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
            @if let Some(f) = &w.agent_fault {
                p.warning { "The agent cannot see its runtime; the state shown may be out of date: " (f) }
            }
            @if let Some(i) = &w.isolation_warning { p.warning { (i) } }
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
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    let w = domain::get(&state, &viewer.who, &name).await?;
    let editor = editor_note(&state, &viewer, &w).await;
    Ok(workspace_page(
        &viewer,
        &w,
        StatusCode::OK,
        None,
        &ResizeForm::default(),
        editor.as_deref(),
    ))
}

/// What a running workspace's output says about its editor (started, or why not), as
/// `warren ws show` says it; `None` when the output cannot be read at once (the page does
/// not wait long for it).
async fn editor_note(state: &AppState, viewer: &Viewer, w: &Workspace) -> Option<String> {
    if w.actual_state != ActualState::Running || w.editor_url.is_none() {
        return None;
    }
    let req = LogsRequest {
        tail: Some(200),
        container: None,
        follow: false,
    };
    let read = domain::logs(state, &viewer.who, &w.name, &req);
    match tokio::time::timeout(Duration::from_secs(2), read).await {
        Ok(Ok(Logs::Text(t))) => warren_types::config::editor_status(&t),
        _ => None,
    }
}

fn right_words(r: Option<WorkspaceRight>) -> &'static str {
    match r {
        Some(WorkspaceRight::Manage) => "use, resize and delete it",
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
    editor: Option<&str>,
) -> Response {
    let now = Utc::now();
    let base = format!("/workspaces/{}", w.name);
    let may_manage = w.your_right >= Some(WorkspaceRight::Manage);
    let may_use = w.your_right >= Some(WorkspaceRight::Use);
    let resize_field = resize_error.and_then(form_field);
    let cpu_err = resize_error
        .filter(|_| resize_field != Some("memory"))
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
    let body = html! {
        div hx-ext="sse" sse-connect=(format!("{base}/events?v={}", w.version)) {
            (live_panel(w, viewer))
        }
        @if let Some(e) = editor {
            @if e.starts_with("editor not started") {
                p.warning role="status" { "Editor: " (e) }
            } @else {
                p.hint { "Editor: " (e) }
            }
        }
        @if may_use {
            h2 { "Logs" }
            p { a href=(format!("{base}/logs")) { "Recent output" } " · " a href=(format!("{base}/logs?follow=true")) { "Follow output" } }
        }
        @if w.desired_state != DesiredState::Terminated && may_manage {
            h2 { "Resize" }
            form.card.inline method="post" action=(format!("{base}/resize")) {
                (csrf(viewer))
                div.row {
                    (layout::input(layout::Input { id: "cpu", label: "CPU", value: Some(&cpu_value), placeholder: Some("e.g. 2"), error: cpu_err.as_deref(), ..layout::Input::default() }))
                    (layout::input(layout::Input { id: "memory", label: "Memory", value: Some(&memory_value), placeholder: Some("e.g. 4Gi"), error: mem_err.as_deref(), ..layout::Input::default() }))
                }
                p.hint { "A running workspace restarts with the new size; its volume is kept." }
                button type="submit" { "Resize" }
            }
        }
        h2 { "Details" }
        dl.details {
            dt { "Space" } dd { (w.space) }
            dt { "You may" } dd { (right_words(w.your_right)) }
            dt { "Owner" } dd { (w.owner_username) }
            dt { "Agent" } dd { (w.agent_name) }
            @if let Some(p) = &w.project_name { dt { "Project" } dd { (p) } }
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

#[derive(Debug, Default, Deserialize)]
pub struct ShowEventsQuery {
    #[serde(default)]
    v: Option<i64>,
}

/// `GET /workspaces/{name}/events`: the page's live panel again (event `live`) whenever the
/// workspace changes.
pub async fn show_events(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<ShowEventsQuery>,
) -> Result<EventStream, UiError> {
    // Not found is answered now, as a page would be.
    let first = domain::get(&state, &viewer.who, &name).await?;
    let (tx, rx) = live_channel(4);
    tokio::spawn(async move {
        let mut changes = state.changes.subscribe();
        let mut shown = q.v;
        let mut w = first;
        loop {
            if shown != Some(w.version) {
                shown = Some(w.version);
                let html = live_contents(&w, &viewer).into_string();
                if tx.send(Ok(event("live", &html))).await.is_err() {
                    return;
                }
            }
            tokio::select! {
                // Cancel-safe: dropping the wait loses nothing; the workspace is read again.
                _ = next_change(&mut changes) => {}
                // Cancel-safe: `closed` only watches the channel.
                _ = tx.closed() => return,
                // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                _ = state.closing.cancelled() => return,
            }
            changes.borrow_and_update();
            w = match domain::get(&state, &viewer.who, &name).await {
                Ok(w) => w,
                Err(_) => return, // gone (terminated and purged) or no longer visible
            };
        }
    });
    Ok(sse(rx))
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

#[derive(Debug, Default, Deserialize)]
pub struct ResizeForm {
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
            cpu: form.cpu.as_deref().and_then(opt),
            memory: form.memory.as_deref().and_then(opt),
        },
    };
    match domain::resize(&state, &viewer.who, &name, &req).await {
        Ok(w) => Ok(Redirect::to(&format!("/workspaces/{}", w.name)).into_response()),
        Err(e) if is_form_error(&e) => {
            let w = domain::get(&state, &viewer.who, &name).await?;
            let status = crate::http::error::status_of(e.kind);
            Ok(workspace_page(&viewer, &w, status, Some(&e), &form, None))
        }
        Err(e) => Err(e.into()),
    }
}

// ---- logs ----

#[derive(Debug, Default, Deserialize)]
pub struct LogsQuery {
    #[serde(default)]
    tail: Option<u32>,
    #[serde(default)]
    container: Option<String>,
    #[serde(default)]
    follow: Option<bool>,
}

/// `GET /workspaces/{name}/logs`: the last lines, or (`follow=true`) the last lines and
/// what comes next, streamed into the page.
pub async fn logs_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<Response, UiError> {
    let w = domain::get(&state, &viewer.who, &name).await?;
    let tail = q.tail.unwrap_or(DEFAULT_TAIL);
    let follow = q.follow.unwrap_or(false);
    let base = format!("/workspaces/{}", w.name);
    let container_q = q
        .container
        .as_deref()
        .map(|c| {
            format!(
                "&container={}",
                url::form_urlencoded::byte_serialize(c.as_bytes()).collect::<String>()
            )
        })
        .unwrap_or_default();
    let text = if follow {
        None
    } else {
        let req = LogsRequest {
            tail: Some(tail),
            container: q.container.clone(),
            follow: false,
        };
        Some(match domain::logs(&state, &viewer.who, &name, &req).await {
            Ok(Logs::Text(t)) => Ok(String::from_utf8_lossy(&t).into_owned()),
            Ok(Logs::Stream(_)) => Ok(String::new()),
            Err(e) if e.kind == ErrorKind::NotFound => return Err(e.into()),
            Err(e) => Err(e.message),
        })
    };
    let body = html! {
        p { a href=(base) { "← " (w.name) } }
        form.inline method="get" action=(format!("{base}/logs")) {
            label for="tail" { "Lines" }
            input type="number" id="tail" name="tail" min="1" max="10000" value=(tail);
            @if let Some(c) = &q.container { input type="hidden" name="container" value=(c); }
            label { input type="checkbox" name="follow" value="true" checked[follow]; " Follow" }
            button type="submit" { "Show" }
        }
        @match text {
            None => {
                p.hint role="status" { "Following: new output appears below as the workspace writes it." }
                pre.logs id="logs" hx-ext="sse" sse-connect=(format!("{base}/logs/stream?tail={tail}{container_q}"))
                    sse-swap="line" hx-swap="beforeend" sse-close="end" tabindex="0" aria-live="polite" {}
            }
            Some(Ok(t)) if t.is_empty() => { p.empty { "No output yet." } }
            Some(Ok(t)) => { pre.logs id="logs" tabindex="0" { (t) } }
            Some(Err(m)) => { p.error role="alert" { (m) } }
        }
    };
    Ok(layout::page(
        &viewer,
        StatusCode::OK,
        &format!("Logs of {}", w.name),
        body,
    ))
}

/// `GET /workspaces/{name}/logs/stream`: the output as server-sent events (`line`, HTML-
/// escaped text), then `end` when the container stops or the stream breaks.
pub async fn logs_stream(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<EventStream, UiError> {
    let req = LogsRequest {
        tail: Some(q.tail.unwrap_or(DEFAULT_TAIL)),
        container: q.container.clone(),
        follow: true,
    };
    let logs = domain::logs(&state, &viewer.who, &name, &req).await;
    let (tx, rx) = live_channel(64);
    tokio::spawn(async move {
        let line = |text: &str| event("line", &html! { (text) "\n" }.into_string());
        match logs {
            Ok(Logs::Text(t)) => {
                for l in String::from_utf8_lossy(&t).lines() {
                    if tx.send(Ok(line(l))).await.is_err() {
                        return;
                    }
                }
            }
            Ok(Logs::Stream(io)) => {
                let mut lines = tokio::io::BufReader::new(io).lines();
                loop {
                    tokio::select! {
                        // Cancel-safe per tokio's docs for `Lines::next_line`.
                        l = lines.next_line() => match l {
                            Ok(Some(l)) => if tx.send(Ok(line(&l))).await.is_err() { return },
                            Ok(None) | Err(_) => break,
                        },
                        // Cancel-safe: `closed` only watches the channel.
                        _ = tx.closed() => return,
                        // Cancel-safe: a token's wait holds nothing. The server is shutting down.
                        _ = state.closing.cancelled() => break,
                    }
                }
            }
            Err(e) => {
                let _ = tx.send(Ok(line(&format!("warren: {}", e.message)))).await;
            }
        }
        let _ = tx
            .send(Ok(event(
                "line",
                &html! { span.end { "— end of output —" } }.into_string(),
            )))
            .await;
        let _ = tx.send(Ok(event("end", "end"))).await;
    });
    Ok(sse(rx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_lines() {
        let v = parse_variables("A=1\n\nB = two=2\r\n", false, "variables").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[1].key.as_str(), v[1].value.as_str()), ("B", " two=2"));
        let e = parse_variables("A=1\nnope", true, "secret_variables").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("secret_variables"));
        assert!(e.message.contains("line 2"), "{}", e.message);
    }

    #[test]
    fn errors_land_beside_their_field() {
        let f = |field: &str| form_field(&AppError::invalid_field(field, "x"));
        assert_eq!(f("resources.memory"), Some("memory"));
        assert_eq!(f("variables[3].key"), Some("variables"));
        assert_eq!(f("repository devfile"), Some("project"));
        assert_eq!(f("devfile"), Some("devfile"));
        assert_eq!(f("limit"), None);
    }
}
