//! The account page: personal access tokens (a new one's secret shown once), SSH keys, the
//! password, working hours, and the `ssh-config` snippet for the user's workspaces.

use super::layout::{self, ago, csrf, danger_button, field_error, input, invalid, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{ssh_keys, tokens, users, workspaces, AppError, ErrorKind};
use crate::http::client_addr::ClientAddr;
use crate::http::HttpState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{
    AddSshKeyRequest, ChangePasswordRequest, CreateTokenRequest, CreatedToken, TokenScope,
};
use warren_types::ActualState;

/// Where OpenSSH is told to read the pinned host keys (as `warren ws ssh-config` does).
const KNOWN_HOSTS: &str = "~/.ssh/warren_known_hosts";

fn scope_name(s: TokenScope) -> &'static str {
    match s {
        TokenScope::Api => "api",
        TokenScope::ReadApi => "read_api",
        TokenScope::Workspace => "workspace",
    }
}

/// What to show besides the lists: a token just made, or a form's error.
#[derive(Default)]
struct Extra<'a> {
    created: Option<&'a CreatedToken>,
    token_error: Option<&'a AppError>,
    key_error: Option<&'a AppError>,
    key_text: &'a str,
    password_error: Option<&'a AppError>,
    password_changed: bool,
    hours_error: Option<&'a AppError>,
}

/// The page; its status says what happened (201 for a new token, a form error's status).
async fn render(http: &HttpState, viewer: &Viewer, extra: Extra<'_>) -> Result<Response, UiError> {
    let state = &http.app;
    let error = extra
        .token_error
        .or(extra.key_error)
        .or(extra.password_error)
        .or(extra.hours_error);
    let status = match (extra.created, error) {
        (Some(_), _) => StatusCode::CREATED,
        (None, Some(e)) => crate::http::error::status_of(e.kind),
        (None, None) => StatusCode::OK,
    };
    let now = Utc::now();
    let list = tokens::list(state, &viewer.who).await?;
    let keys = ssh_keys::list(state, &viewer.who).await?;
    let mine: Vec<_> = workspaces::list_all(state, &viewer.who)
        .await?
        .into_iter()
        .filter(|w| w.owner == viewer.who.user.id && w.actual_state != ActualState::Terminated)
        .collect();
    let token_err = extra.token_error.map(|e| e.message.clone());
    let key_err = extra.key_error.map(|e| e.message.clone());
    let (key_described, key_bad) = invalid("public_key", key_err.as_deref());
    let access = http.access_info().await;
    let ssh = access.ssh.as_ref();
    let snippet = ssh.map(|e| {
        let file = (!e.host_keys.is_empty()).then_some(KNOWN_HOSTS);
        mine.iter()
            .map(|w| e.host_block(&w.name, file))
            .collect::<Vec<_>>()
            .join("\n")
    });
    let body = html! {
        p { a href="/account/secrets" { "Secrets and commit identity" } ": environment variables and files for your workspaces, and the name your commits are made with." }
        section aria-labelledby="tokens-h" {
            h2 id="tokens-h" { "Personal access tokens" }
            p.hint { "For the CLI and the API (" code { "api" } ", " code { "read_api" } ") and for reaching workspaces from scripts and SSH (" code { "workspace" } ")." }
            @if let Some(c) = extra.created {
                div.notice role="status" {
                    p { "Token " strong { (c.token.name) } " created. Copy it now: it is not shown again." }
                    label for="new-token" { "Token" }
                    input.secret type="text" id="new-token" readonly value=(c.secret);
                }
            }
            @if list.is_empty() { p.empty { "No tokens yet." } } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Scopes" } th scope="col" { "Created" } th scope="col" { "Expires" } th scope="col" { "Last used" } th scope="col" { span.visually-hidden { "Actions" } } } }
                    tbody { @for t in &list {
                        tr {
                            th scope="row" { (t.name) }
                            td { (t.scopes.iter().map(|s| scope_name(*s)).collect::<Vec<_>>().join(", ")) }
                            td { (ago(t.created_at, now)) }
                            td { time datetime=(t.expires_at.to_rfc3339()) { (t.expires_at.format("%Y-%m-%d")) } }
                            td { @match t.last_used_at { Some(u) => (ago(u, now)), None => "never" } }
                            td {
                                @if t.revoked { "revoked" } @else if t.expires_at <= now { "expired" } @else {
                                    (danger_button(viewer, &format!("/account/tokens/{}/revoke", t.id), "Revoke", &format!("token {}", t.name)))
                                }
                            }
                        }
                    } }
                } }
            }
            form.card method="post" action="/account/tokens" {
                (csrf(viewer))
                h3 { "Create a token" }
                (input(Input { id: "token_name", name: Some("name"), label: "Name", required: true, error: token_err.as_deref(), ..Input::default() }))
                fieldset {
                    legend { "Scopes" }
                    label { input type="checkbox" name="scope" value="api" checked; " api — everything through the API" }
                    label { input type="checkbox" name="scope" value="read_api"; " read_api — read-only API" }
                    label { input type="checkbox" name="scope" value="workspace"; " workspace — workspace URLs and SSH" }
                }
                div.field {
                    label for="expires_in_days" { "Expires in (days)" }
                    input type="number" id="expires_in_days" name="expires_in_days" min="1" max="365" value="30";
                }
                button.primary type="submit" { "Create token" }
            }
        }
        section aria-labelledby="keys-h" {
            h2 id="keys-h" { "SSH keys" }
            @if keys.is_empty() { p.empty { "No SSH keys yet: add one to reach your workspaces with ssh, VS Code Remote-SSH or JetBrains Gateway." } } @else {
                ul.plain { @for k in &keys {
                    li.key {
                        strong { (k.name) } " " code { (k.fingerprint) } " · added " (ago(k.created_at, now))
                        (danger_button(viewer, &format!("/account/ssh-keys/{}/delete", k.id), "Remove", &format!("SSH key {}", k.name)))
                    }
                } }
            }
            form.card method="post" action="/account/ssh-keys" {
                (csrf(viewer))
                h3 { "Add an SSH key" }
                div.field {
                    label for="public_key" { "Public key" }
                    textarea id="public_key" name="public_key" rows="3" required spellcheck="false"
                        placeholder="ssh-ed25519 AAAA… you@laptop"
                        aria-describedby=[key_described] aria-invalid=[key_bad] { (extra.key_text) }
                    (field_error("public_key", key_err.as_deref()))
                }
                div.field {
                    label for="key_name" { "Name (optional)" }
                    input type="text" id="key_name" name="name" placeholder="the key's comment";
                }
                button.primary type="submit" { "Add key" }
            }
        }
        section aria-labelledby="password-h" {
            h2 id="password-h" { "Password" }
            @if extra.password_changed { p.notice role="status" { "Password changed." } }
            form.card method="post" action="/account/password" {
                (csrf(viewer))
                @let current_err = extra.password_error.filter(|e| e.field.as_deref() == Some("current_password")).map(|e| e.message.clone());
                @let new_err = extra.password_error.filter(|e| e.field.as_deref() != Some("current_password")).map(|e| e.message.clone());
                (input(Input { id: "current_password", label: "Current password", kind: Some("password"), autocomplete: Some("current-password"), required: true, error: current_err.as_deref(), ..Input::default() }))
                (input(Input { id: "new_password", label: "New password", kind: Some("password"), autocomplete: Some("new-password"), required: true, error: new_err.as_deref(), ..Input::default() }))
                label { input type="checkbox" name="revoke_sessions" value="true"; " Also sign out everywhere and revoke every token" }
                button.primary type="submit" { "Change password" }
            }
        }
        (hours_section(viewer, extra.hours_error))
        section aria-labelledby="ssh-h" {
            h2 id="ssh-h" { "SSH config" }
            @match (ssh, &snippet) {
                (Some(e), Some(s)) => {
                    @if mine.is_empty() { p.empty { "No workspaces yet: their blocks appear here once you have some." } } @else {
                        p { "Add to " code { "~/.ssh/config" } ", then " code { "ssh warren-<workspace>" } " (or pick the host in VS Code Remote-SSH). " code { "warren ws ssh-config --write" } " does this for you." }
                        label for="ssh-config" { "~/.ssh/config" }
                        textarea.snippet id="ssh-config" readonly rows=(s.lines().count().clamp(3, 30)) { (s) }
                        @if !e.host_keys.is_empty() {
                            label for="known-hosts" { (KNOWN_HOSTS) }
                            textarea.snippet id="known-hosts" readonly rows=(e.host_keys.len().clamp(1, 6)) { (e.known_hosts_lines().join("\n")) }
                        }
                    }
                }
                _ => { p.empty { "This installation offers no SSH access." } }
            }
        }
    };
    Ok(layout::page(viewer, status, "Account", body))
}

/// The working hours' section: what they are, and the form that sets or clears them.
fn hours_section(viewer: &Viewer, error: Option<&AppError>) -> maud::Markup {
    html! {
        section aria-labelledby="hours-h" {
            h2 id="hours-h" { "Working hours" }
            @let hours = viewer.who.user.working_hours.as_deref();
            p { @match hours {
                Some(h) => { "Your running workspaces stop at " (h.stop) " on " (h.describe()) "." @if let Some(s) = &h.start { " Those they stopped start again at " (s) "." } }
                None => { "None: your workspaces run until their agents' limits." }
            } }
            @if let Some(e) = error { p.error role="alert" { (e.message) } }
            form.card method="post" action="/account/working-hours" {
                (csrf(viewer))
                fieldset {
                    legend { "Days" }
                    @for d in warren_types::schedule::Day::ALL {
                        @let on = hours.map_or(d <= warren_types::schedule::Day::Fri, |h| h.days.contains(&d));
                        label { input type="checkbox" name="day" value=(d.as_str()) checked[on]; " " (d.as_str()) } " "
                    }
                }
                div.row {
                    (input(Input { id: "start", label: "Start again at (optional, HH:MM)", value: Some(hours.and_then(|h| h.start.as_deref()).unwrap_or("")), placeholder: Some("08:30"), ..Input::default() }))
                    (input(Input { id: "stop", label: "Stop at (HH:MM)", value: Some(hours.map_or("18:00", |h| h.stop.as_str())), required: true, ..Input::default() }))
                }
                (input(Input { id: "timezone", label: "Time zone (IANA)", value: Some(hours.map_or("UTC", |h| h.timezone.as_str())), placeholder: Some("Europe/Paris"), required: true, ..Input::default() }))
                div.actions {
                    button.primary type="submit" { "Save working hours" }
                    @if hours.is_some() { button type="submit" name="clear" value="1" { "Clear" } }
                }
            }
        }
    }
}

/// Errors the forms show beside their fields (the rest get an error page).
fn form_error(e: &AppError) -> bool {
    matches!(
        e.kind,
        ErrorKind::Invalid | ErrorKind::Forbidden | ErrorKind::Conflict
    )
}

#[derive(Debug, Default)]
pub struct HoursForm {
    days: Vec<String>,
    start: String,
    stop: String,
    timezone: String,
    clear: bool,
}

impl<'de> Deserialize<'de> for HoursForm {
    // Repeated `day` fields (checkboxes) are read as a list.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(String, String)> = Deserialize::deserialize(d)?;
        let mut f = HoursForm::default();
        for (k, v) in pairs {
            match k.as_str() {
                "day" => f.days.push(v),
                "start" => f.start = v,
                "stop" => f.stop = v,
                "timezone" => f.timezone = v,
                "clear" => f.clear = true,
                _ => {}
            }
        }
        Ok(f)
    }
}

/// `POST /account/working-hours`: set them, or clear them.
pub async fn set_working_hours(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<HoursForm>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let hours = if form.clear {
        Ok(None)
    } else {
        warren_types::schedule::Day::parse_list(&form.days.join(","))
            .map_err(|e| AppError::invalid_field("days", e))
            .map(|days| {
                Some(warren_types::schedule::WorkingHours {
                    timezone: form.timezone.trim().to_owned(),
                    days,
                    start: Some(form.start.trim().to_owned()).filter(|s| !s.is_empty()),
                    stop: form.stop.trim().to_owned(),
                })
            })
    };
    let result = match hours {
        Ok(h) => users::set_working_hours(state, &viewer.who, h.as_ref()).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(_) => Ok(Redirect::to("/account#hours-h").into_response()),
        Err(e) if form_error(&e) => {
            let extra = Extra {
                hours_error: Some(&e),
                ..Extra::default()
            };
            render(&http, &viewer, extra).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /account`
pub async fn page(State(http): State<HttpState>, viewer: Viewer) -> Result<Response, UiError> {
    render(&http, &viewer, Extra::default()).await
}

#[derive(Debug, Default)]
pub struct TokenForm {
    name: String,
    scopes: Vec<String>,
    expires_in_days: Option<u32>,
}

impl<'de> Deserialize<'de> for TokenForm {
    // Repeated `scope` fields (checkboxes) are read as a list.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(String, String)> = Deserialize::deserialize(d)?;
        let mut f = TokenForm::default();
        for (k, v) in pairs {
            match k.as_str() {
                "name" => f.name = v,
                "scope" => f.scopes.push(v),
                "expires_in_days" if !v.trim().is_empty() => {
                    f.expires_in_days = Some(v.trim().parse().map_err(|_| {
                        serde::de::Error::custom("expires_in_days: not a whole number of days")
                    })?)
                }
                _ => {}
            }
        }
        Ok(f)
    }
}

/// `POST /account/tokens`
pub async fn create_token(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<TokenForm>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let scopes: Result<Vec<TokenScope>, AppError> = form
        .scopes
        .iter()
        .map(|s| match s.as_str() {
            "api" => Ok(TokenScope::Api),
            "read_api" => Ok(TokenScope::ReadApi),
            "workspace" => Ok(TokenScope::Workspace),
            other => Err(AppError::invalid_field(
                "scopes",
                format!("unknown scope {other:?}"),
            )),
        })
        .collect();
    let result = match scopes {
        Ok(scopes) => {
            let req = CreateTokenRequest {
                name: form.name.trim().to_owned(),
                scopes,
                expires_in_days: form.expires_in_days,
            };
            tokens::create(state, &viewer.who, &req).await
        }
        Err(e) => Err(e),
    };
    // The secret is on the answer's page only (pages are never cached: `layout::secure`).
    let extra = match &result {
        Ok(created) => Extra {
            created: Some(created),
            ..Extra::default()
        },
        Err(e) if form_error(e) => Extra {
            token_error: Some(e),
            ..Extra::default()
        },
        Err(e) => return Err(e.clone().into()),
    };
    render(&http, &viewer, extra).await
}

/// The id in a form's path; one that does not parse names nothing, so it is not found.
fn path_id<T: std::str::FromStr>(what: &str, id: &str) -> Result<T, UiError> {
    id.parse()
        .map_err(|_| UiError::App(AppError::not_found(format!("{what} {id}"))))
}

/// `POST /account/tokens/{id}/revoke`
pub async fn revoke_token(
    State(http): State<HttpState>,
    Path(id): Path<String>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let id = path_id("token", &id)?;
    tokens::revoke(state, &posted.viewer.who, id).await?;
    Ok(Redirect::to("/account").into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct KeyForm {
    #[serde(default)]
    public_key: String,
    #[serde(default)]
    name: String,
}

/// `POST /account/ssh-keys`
pub async fn add_ssh_key(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<KeyForm>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let req = AddSshKeyRequest {
        public_key: form.public_key.trim().to_owned(),
        name: Some(form.name.trim().to_owned()).filter(|n| !n.is_empty()),
    };
    match ssh_keys::add(state, &viewer.who, &req).await {
        Ok(_) => Ok(Redirect::to("/account").into_response()),
        Err(e) if form_error(&e) => {
            let extra = Extra {
                key_error: Some(&e),
                key_text: &form.public_key,
                ..Extra::default()
            };
            render(&http, &viewer, extra).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /account/ssh-keys/{id}/delete`
pub async fn delete_ssh_key(
    State(http): State<HttpState>,
    Path(id): Path<String>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let id = path_id("SSH key", &id)?;
    ssh_keys::delete(state, &posted.viewer.who, id).await?;
    Ok(Redirect::to("/account").into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct PasswordForm {
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
    #[serde(default)]
    revoke_sessions: Option<String>,
}

/// `POST /account/password`: throttled like a sign-in; revoking sessions signs this browser
/// out too.
pub async fn change_password(
    State(http): State<HttpState>,
    ClientAddr(addr): ClientAddr,
    Posted { viewer, form }: Posted<PasswordForm>,
) -> Result<Response, UiError> {
    let state = &http.app;
    let revoke = form.revoke_sessions.is_some();
    let req = ChangePasswordRequest {
        current_password: form.current_password,
        new_password: form.new_password,
        revoke_sessions: revoke,
    };
    match users::change_password(state, &viewer.who, &req, addr).await {
        Ok(()) if revoke => Ok(Redirect::to("/login").into_response()),
        Ok(()) => {
            let extra = Extra {
                password_changed: true,
                ..Extra::default()
            };
            render(&http, &viewer, extra).await
        }
        Err(e) if form_error(&e) || e.kind == ErrorKind::TooManyRequests => {
            let extra = Extra {
                password_error: Some(&e),
                ..Extra::default()
            };
            render(&http, &viewer, extra).await
        }
        Err(e) => Err(e.into()),
    }
}
