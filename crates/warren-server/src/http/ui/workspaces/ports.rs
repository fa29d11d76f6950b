//! The ports page (issue 41, item 4): who may reach each port of a workspace, changed live,
//! and share links — made (the link shown once), listed and revoked. The same domain
//! functions as `/api/v1/workspaces/{name}/ports` and `…/share-links`.

use super::super::layout::{self, csrf};
use super::super::session::{Posted, Viewer};
use super::super::UiError;
use crate::app::{ports as domain, AppError, AppState, ErrorKind};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{CreateShareLinkRequest, SetPortRequest, ShareLink, VisibilitySource};
use warren_types::sharing::PortVisibility;

/// How long a link made here may last: the choices offered.
const DURATIONS: [(u64, &str); 4] = [
    (3600, "an hour"),
    (8 * 3600, "8 hours"),
    (24 * 3600, "a day"),
    (7 * 24 * 3600, "a week"),
];

#[derive(Debug, Default, Deserialize)]
pub struct PortForm {
    /// A visibility, or `default` for the devfile's (else the agent's) choice.
    #[serde(default)]
    visibility: String,
}

#[derive(Debug, Default, Deserialize)]
pub struct ShareForm {
    #[serde(default)]
    expires_in_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
pub struct RevokeForm {}

/// `GET /workspaces/{name}/ports`
pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    Path(name): Path<String>,
) -> Result<Response, UiError> {
    ports_page(&state, &viewer, &name, StatusCode::OK, Note::None).await
}

/// `POST /workspaces/{name}/ports/{port}`: a port's visibility.
pub async fn set(
    State(state): State<AppState>,
    Path((name, port)): Path<(String, u16)>,
    Posted { viewer, form }: Posted<PortForm>,
) -> Result<Response, UiError> {
    let visibility = match form.visibility.as_str() {
        "default" | "" => None,
        v => match v.parse::<PortVisibility>() {
            Ok(v) => Some(v),
            Err(why) => {
                let e = AppError::invalid_field("visibility", why);
                return refused(&state, &viewer, &name, e).await;
            }
        },
    };
    match domain::set(
        &state,
        &viewer.who,
        &name,
        port,
        &SetPortRequest { visibility },
    )
    .await
    {
        Ok(_) => Ok(Redirect::to(&format!("/workspaces/{name}/ports")).into_response()),
        Err(e) => refused(&state, &viewer, &name, e).await,
    }
}

/// `POST /workspaces/{name}/ports/{port}/share`: a new link, shown once on the page.
pub async fn share(
    State(state): State<AppState>,
    Path((name, port)): Path<(String, u16)>,
    Posted { viewer, form }: Posted<ShareForm>,
) -> Result<Response, UiError> {
    let req = CreateShareLinkRequest {
        expires_in_secs: form.expires_in_secs,
    };
    match domain::create_share_link(&state, &viewer.who, &name, port, &req).await {
        Ok(link) => {
            ports_page(
                &state,
                &viewer,
                &name,
                StatusCode::CREATED,
                Note::Made(link),
            )
            .await
        }
        Err(e) => refused(&state, &viewer, &name, e).await,
    }
}

/// `POST /workspaces/{name}/share-links/{id}/revoke`
pub async fn revoke(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, i64)>,
    Posted { viewer, form: _ }: Posted<RevokeForm>,
) -> Result<Response, UiError> {
    match domain::revoke_share_link(&state, &viewer.who, &name, id).await {
        Ok(()) => Ok(Redirect::to(&format!("/workspaces/{name}/ports")).into_response()),
        Err(e) => refused(&state, &viewer, &name, e).await,
    }
}

/// A refusal the page tells (a visibility wider than the agent allows, links not allowed,
/// the editor's port); the rest are error pages.
async fn refused(
    state: &AppState,
    viewer: &Viewer,
    name: &str,
    e: AppError,
) -> Result<Response, UiError> {
    if !matches!(e.kind, ErrorKind::Invalid | ErrorKind::Unprocessable) {
        return Err(e.into());
    }
    let status = crate::http::error::status_of(e.kind);
    ports_page(state, viewer, name, status, Note::Refused(e)).await
}

enum Note {
    None,
    Made(ShareLink),
    Refused(AppError),
}

fn source_words(s: VisibilitySource) -> &'static str {
    match s {
        VisibilitySource::AgentDefault => "the agent's default",
        VisibilitySource::Definition => "from the devfile",
        VisibilitySource::User => "set here or with the CLI",
        VisibilitySource::Warren => "the editor: never shared wider",
    }
}

async fn ports_page(
    state: &AppState,
    viewer: &Viewer,
    name: &str,
    status: StatusCode,
    note: Note,
) -> Result<Response, UiError> {
    let w = crate::app::workspaces::get(state, &viewer.who, name).await?;
    let ports = domain::list(state, &viewer.who, name).await?;
    let manage = w.your_right >= Some(warren_types::api::WorkspaceRight::Manage);
    let links = if manage {
        domain::share_links(state, &viewer.who, name).await?
    } else {
        vec![]
    };
    let base = format!("/workspaces/{}", w.name);
    let now = chrono::Utc::now();
    let body = html! {
        p { a href=(base) { "← " (w.name) } }
        @match &note {
            Note::Made(link) => {
                div.card role="status" {
                    p { "Share link for port " (link.port) ", until " (layout::date(link.expires_at)) " UTC" ". Copy it now: it is not shown again." }
                    @if let Some(u) = &link.url {
                        label for="share-url" { "Link" }
                        input id="share-url" type="text" readonly value=(u);
                    }
                }
            }
            Note::Refused(e) => { p.error role="alert" { "Not changed: " (e.message) } }
            Note::None => {}
        }
        p.hint { "Private: only " (w.owner_username) ". Space: whoever may use the workspace. Authenticated: every signed-in user. Public: anyone, without signing in. The terminal and SSH are never shared this way." }
        @if ports.is_empty() {
            p { "The proxy serves no port of this workspace: its devfile declares no public endpoint." }
        } @else {
            div.table-wrap { table {
                caption { "Ports" }
                thead { tr { th scope="col" { "Port" } th scope="col" { "Endpoints" } th scope="col" { "Who may reach it" } @if manage { th scope="col" { "Change" } th scope="col" { "Share link" } } } }
                tbody { @for p in &ports {
                    tr {
                        th scope="row" { a href=(p.url) { (p.port) } }
                        td { (p.endpoints.join(", ")) }
                        td { strong { (p.visibility) } " — " (p.visibility.describe()) br; small { (source_words(p.source)) } }
                        @if manage {
                            @let editable = p.source != VisibilitySource::Warren;
                            td { @if editable {
                                form method="post" action=(format!("{base}/ports/{}", p.port)) {
                                    (csrf(viewer))
                                    label for=(format!("visibility-{}", p.port)) { "Visibility of port " (p.port) }
                                    select id=(format!("visibility-{}", p.port)) name="visibility" {
                                        @for v in PortVisibility::ALL {
                                            @if v <= p.max_visibility {
                                                option value=(v) selected[v == p.visibility && p.source == VisibilitySource::User] { (v) }
                                            }
                                        }
                                        option value="default" selected[p.source != VisibilitySource::User] { "default" }
                                    }
                                    button type="submit" { "Save" }
                                }
                            } }
                            td { @if editable {
                                form method="post" action=(format!("{base}/ports/{}/share", p.port)) {
                                    (csrf(viewer))
                                    label for=(format!("expires-{}", p.port)) { "Link for port " (p.port) " lasts" }
                                    select id=(format!("expires-{}", p.port)) name="expires_in_secs" {
                                        @for (secs, words) in DURATIONS {
                                            option value=(secs) selected[secs == 24 * 3600] { (words) }
                                        }
                                    }
                                    button type="submit" { "Make a link" }
                                }
                            } }
                        }
                    }
                } }
            } }
        }
        @if manage && !links.is_empty() {
            h2 { "Share links" }
            div.table-wrap { table {
                caption { "Links that open a port without signing in" }
                thead { tr { th scope="col" { "Link" } th scope="col" { "Port" } th scope="col" { "By" } th scope="col" { "Until" } th scope="col" { "State" } } }
                tbody { @for l in &links {
                    tr {
                        th scope="row" { (l.id) }
                        td { (l.port) }
                        td { (l.created_by) }
                        td { (layout::date(l.expires_at)) }
                        td {
                            @if l.revoked_at.is_some() { "revoked" }
                            @else if l.expires_at <= now { "expired" }
                            @else {
                                form method="post" action=(format!("{base}/share-links/{}/revoke", l.id)) {
                                    (csrf(viewer))
                                    button type="submit" aria-label=(format!("Revoke link {}", l.id)) { "Revoke" }
                                }
                            }
                        }
                    }
                } }
            } }
        }
    };
    Ok(layout::page(
        viewer,
        status,
        &format!("Ports of {}", w.name),
        body,
    ))
}
