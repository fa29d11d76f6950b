//! The admin pages: accounts (create, admin rights, disable), agents (create with the token
//! shown once, connection state, faults) and an agent's configuration with its quotas. The
//! domain refuses non-admins; the pages add nothing to that rule.

use super::layout::{self, ago, csrf, field_error, input, invalid, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{agents, users, AppError, AppState, ErrorKind};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{
    Agent, CreateAgentRequest, CreateUserRequest, CreatedAgent, UpdateAgentRequest,
    UpdateUserRequest,
};
use warren_types::config::AgentConfig;

/// Whether an agent counts as connected: it called in within three partial
/// reconciliation intervals.
fn connected(state: &AppState, a: &Agent) -> bool {
    let window = 3 * state
        .settings
        .partial_reconciliation_interval_seconds
        .max(1) as i64;
    a.last_seen_at
        .is_some_and(|t| (Utc::now() - t).num_seconds() <= window)
}

/// Admin pages do not exist for others (404, as for anything a user may not see); the
/// domain refuses them too.
pub(super) fn admin_only(viewer: &Viewer) -> Result<(), UiError> {
    if viewer.is_admin() {
        Ok(())
    } else {
        Err(AppError::not_found("page").into())
    }
}

#[derive(Default)]
struct Extra<'a> {
    created_agent: Option<&'a CreatedAgent>,
    user_error: Option<&'a AppError>,
    agent_error: Option<&'a AppError>,
}

/// The page; its status says what happened (201 for a new agent, a form error's status).
async fn render(state: &AppState, viewer: &Viewer, extra: Extra<'_>) -> Result<Response, UiError> {
    admin_only(viewer)?;
    let status = match (extra.created_agent, extra.user_error.or(extra.agent_error)) {
        (Some(_), _) => StatusCode::CREATED,
        (None, Some(e)) => crate::http::error::status_of(e.kind),
        (None, None) => StatusCode::OK,
    };
    let now = Utc::now();
    let accounts = users::list(state, &viewer.who).await?;
    let agent_list = agents::list(state, &viewer.who).await?;
    let user_err = extra.user_error;
    let user_field = |f: &str| {
        user_err
            .filter(|e| e.field.as_deref() == Some(f))
            .map(|e| e.message.clone())
    };
    let user_general =
        user_err.filter(|e| !matches!(e.field.as_deref(), Some("username" | "password")));
    let agent_err = extra.agent_error.map(|e| e.message.clone());
    let (uname_err, pw_err) = (user_field("username"), user_field("password"));
    let body = html! {
        nav aria-label="Administration" { p { a href="/admin/regions" { "Regions and proxies" } } }
        section aria-labelledby="users-h" {
            h2 id="users-h" { "Users" }
            div.table-wrap { table {
                thead { tr { th scope="col" { "Username" } th scope="col" { "Role" } th scope="col" { "Status" } th scope="col" { "Created" } th scope="col" { span.visually-hidden { "Actions" } } } }
                tbody { @for u in &accounts {
                    tr {
                        th scope="row" { (u.username) }
                        td { @if u.is_admin { "admin" } @else { "user" } }
                        td {
                            @if u.deletion_requested_at.is_some() { "being deleted" }
                            @else if u.disabled_at.is_some() { "disabled" } @else { "active" }
                        }
                        td { (ago(u.created_at, now)) }
                        td.actions {
                            @if u.deletion_requested_at.is_none() && u.id != viewer.who.user.id {
                                form.inline method="post" action=(format!("/admin/users/{}", u.username)) {
                                    (csrf(viewer))
                                    @if u.is_admin {
                                        button type="submit" name="change" value="revoke_admin" { "Revoke admin" }
                                    } @else {
                                        button type="submit" name="change" value="grant_admin" { "Make admin" }
                                    }
                                    @if u.disabled_at.is_some() {
                                        button type="submit" name="change" value="enable" { "Enable" }
                                    } @else {
                                        button.danger type="submit" name="change" value="disable" { "Disable" }
                                    }
                                }
                            }
                        }
                    }
                } }
            } }
            form.card method="post" action="/admin/users" {
                (csrf(viewer))
                h3 { "Create a user" }
                @if let Some(e) = user_general { p.error role="alert" { (e.message) } }
                (input(Input { id: "username", label: "Username", autocomplete: Some("off"), required: true, error: uname_err.as_deref(), ..Input::default() }))
                (input(Input { id: "password", label: "Initial password", kind: Some("password"), autocomplete: Some("new-password"), required: true, error: pw_err.as_deref(), ..Input::default() }))
                label { input type="checkbox" name="is_admin" value="true"; " Admin" }
                button.primary type="submit" { "Create user" }
            }
        }
        section aria-labelledby="agents-h" {
            h2 id="agents-h" { "Agents" }
            @if let Some(c) = extra.created_agent {
                div.notice role="status" {
                    p { "Agent " strong { (c.agent.name) } " created. Copy its token now: it is not shown again. Start the agent with it:" }
                    label for="agent-token" { "Agent token" }
                    input.secret type="text" id="agent-token" readonly value=(c.token);
                    pre { "WARREN_AGENT_TOKEN=<the token> warren agent --name " (c.agent.name) " --relay <relay URL>" }
                }
            }
            @if agent_list.is_empty() { p.empty { "No agents yet — create one below, then start it where workspaces should run." } } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Connection" } th scope="col" { "Runtime" } th scope="col" { "Quotas" } } }
                    tbody { @for a in &agent_list {
                        tr {
                            th scope="row" { a href=(format!("/admin/agents/{}", a.name)) { (a.name) } }
                            td {
                                @if connected(state, a) { span.state.running { "connected" } }
                                @else { span.state.stopped { "not connected" } }
                                @if let Some(t) = a.last_seen_at { " · last seen " (ago(t, now)) } @else { " · never seen" }
                            }
                            td {
                                @match &a.runtime_fault { Some(f) => span.error { (f) }, None => "ok" }
                                @if let Some(w) = &a.isolation_warning { p.warning { (w) } }
                            }
                            td { (quota_text(a.config.workspaces_quota)) " in all · " (quota_text(a.config.workspaces_per_user_quota)) " per user" }
                        }
                    } }
                } }
            }
            form.card method="post" action="/admin/agents" {
                (csrf(viewer))
                h3 { "Create an agent" }
                (input(Input { id: "agent_name", name: Some("name"), label: "Name", required: true, error: agent_err.as_deref(), ..Input::default() }))
                button.primary type="submit" { "Create agent" }
            }
        }
    };
    Ok(layout::page(viewer, status, "Admin", body))
}

fn quota_text(q: i64) -> String {
    if q < 0 {
        "unlimited".into()
    } else {
        q.to_string()
    }
}

/// `GET /admin`
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, UiError> {
    render(&state, &viewer, Extra::default()).await
}

pub(super) fn form_error(e: &AppError) -> bool {
    matches!(e.kind, ErrorKind::Invalid | ErrorKind::Conflict)
}

#[derive(Debug, Default, Deserialize)]
pub struct NewUserForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    is_admin: Option<String>,
}

/// `POST /admin/users`
pub async fn create_user(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<NewUserForm>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let req = CreateUserRequest {
        username: form.username.trim().to_owned(),
        password: form.password,
        is_admin: form.is_admin.is_some(),
    };
    match users::create(&state, &viewer.who, &req).await {
        Ok(_) => Ok(Redirect::to("/admin").into_response()),
        Err(e) if form_error(&e) => {
            let e = if e.code == "already_exists" {
                e.with_field("username")
            } else {
                e
            };
            let extra = Extra {
                user_error: Some(&e),
                ..Extra::default()
            };
            render(&state, &viewer, extra).await
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct UserChangeForm {
    #[serde(default)]
    change: String,
}

/// `POST /admin/users/{name}`
pub async fn update_user(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, form }: Posted<UserChangeForm>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let req = match form.change.as_str() {
        "grant_admin" => UpdateUserRequest {
            is_admin: Some(true),
            ..Default::default()
        },
        "revoke_admin" => UpdateUserRequest {
            is_admin: Some(false),
            ..Default::default()
        },
        "disable" => UpdateUserRequest {
            disabled: Some(true),
            ..Default::default()
        },
        "enable" => UpdateUserRequest {
            disabled: Some(false),
            ..Default::default()
        },
        other => return Err(UiError::BadRequest(format!("unknown change {other:?}"))),
    };
    users::update(&state, &viewer.who, &name, &req).await?;
    Ok(Redirect::to("/admin").into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct NewAgentForm {
    #[serde(default)]
    name: String,
}

/// `POST /admin/agents`
pub async fn create_agent(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<NewAgentForm>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let req = CreateAgentRequest {
        name: form.name.trim().to_owned(),
        config: None,
    };
    match agents::create(&state, &viewer.who, req).await {
        Ok(created) => {
            let extra = Extra {
                created_agent: Some(&created),
                ..Extra::default()
            };
            render(&state, &viewer, extra).await
        }
        Err(e) if form_error(&e) => {
            let extra = Extra {
                agent_error: Some(&e),
                ..Extra::default()
            };
            render(&state, &viewer, extra).await
        }
        Err(e) => Err(e.into()),
    }
}

fn agent_view(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    a: &Agent,
    config_text: &str,
    error: Option<&str>,
    saved: bool,
) -> Response {
    let (described, bad) = invalid("config", error);
    let body = html! {
        p { a href="/admin" { "← Admin" } }
        p {
            @if connected(state, a) { span.state.running { "connected" } } @else { span.state.stopped { "not connected" } }
            @if let Some(f) = &a.runtime_fault { " · " span.error { (f) } }
        }
        @if saved { p.notice role="status" { "Saved. Workspaces whose objects changed are restarting with the new configuration." } }
        form.card method="post" action=(format!("/admin/agents/{}", a.name)) {
            (csrf(viewer))
            div.field {
                label for="config" { "Configuration (YAML)" }
                p.hint id="config-hint" { "Domain, quotas (" code { "workspaces_quota" } ", " code { "workspaces_per_user_quota" } "; -1: unlimited), default and maximum resources, policies, the editor, the exceptions to the confinement workspaces may ask for (" code { "security.allowed_capabilities" } ", " code { "security.allowed_security_options" } "). Saving re-renders this agent's workspaces." }
                textarea id="config" name="config" rows="24" spellcheck="false"
                    aria-describedby=(described.unwrap_or_else(|| "config-hint".into())) aria-invalid=[bad] { (config_text) }
                (field_error("config", error))
            }
            button.primary type="submit" { "Save configuration" }
        }
    };
    layout::page(viewer, status, &format!("Agent {}", a.name), body)
}

/// `GET /admin/agents/{name}`
pub async fn agent_page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let a = agents::get(&state, &viewer.who, &name).await?;
    let text = serde_yaml::to_string(&a.config).unwrap_or_default();
    Ok(agent_view(
        &state,
        &viewer,
        StatusCode::OK,
        &a,
        &text,
        None,
        false,
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct AgentConfigForm {
    #[serde(default)]
    config: String,
}

/// `POST /admin/agents/{name}`
pub async fn update_agent(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, form }: Posted<AgentConfigForm>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let a = agents::get(&state, &viewer.who, &name).await?;
    let parsed: Result<AgentConfig, AppError> =
        serde_yaml::from_str(&form.config).map_err(|e| AppError::invalid_field("config", e));
    let result = match parsed {
        Ok(config) => {
            agents::update(&state, &viewer.who, &name, &UpdateAgentRequest { config }).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(a) => {
            let text = serde_yaml::to_string(&a.config).unwrap_or_default();
            Ok(agent_view(
                &state,
                &viewer,
                StatusCode::OK,
                &a,
                &text,
                None,
                true,
            ))
        }
        Err(e) if form_error(&e) => Ok(agent_view(
            &state,
            &viewer,
            crate::http::error::status_of(e.kind),
            &a,
            &form.config,
            Some(&e.message),
            false,
        )),
        Err(e) => Err(e.into()),
    }
}
