//! The regions page (admins): each registered region with its door and whether a proxy of it
//! serves now, the form that registers a region or changes its door, removal, and every
//! proxy seen in the last day. The rules are `crate::app::regions`'s, as for the API.

use super::admin::{admin_only, form_error};
use super::layout::{self, ago, csrf, danger_button, input, select_field, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{agents, regions, AppError, AppState};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use std::collections::BTreeMap;
use warren_types::api::RegionSpec;

/// The registration form as posted (kept to show it again with its error).
#[derive(Debug, Default, Deserialize)]
pub struct RegionForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    workspace_domain: String,
    #[serde(default)]
    public_scheme: String,
    #[serde(default)]
    ssh_address: String,
}

/// The page; a refused registration shows its form again with the error beside its field.
async fn render(
    state: &AppState,
    viewer: &Viewer,
    form: &RegionForm,
    error: Option<&AppError>,
) -> Result<Response, UiError> {
    admin_only(viewer)?;
    let status = error.map_or(StatusCode::OK, |e| crate::http::error::status_of(e.kind));
    let now = Utc::now();
    let registered = regions::regions(state, &viewer.who).await?;
    let proxies = regions::list(state, &viewer.who).await?;
    // Agents by the region their configuration names; a name no admin registered is shown
    // too, as its workspaces go through the central proxy.
    let mut agents_in: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in agents::list(state, &viewer.who).await? {
        if let Some(r) = a.config.region {
            agents_in.entry(r).or_default().push(a.name);
        }
    }
    let unregistered: Vec<(&String, &Vec<String>)> = agents_in
        .iter()
        .filter(|(r, _)| !registered.iter().any(|g| &&g.name == r))
        .collect();
    let agents_of = |r: &str| agents_in.get(r).map(|v| v.join(", ")).unwrap_or_default();
    let field_err = |f: &str| {
        error
            .filter(|e| e.field.as_deref() == Some(f))
            .map(|e| e.message.clone())
    };
    let general = error.filter(|e| {
        !matches!(
            e.field.as_deref(),
            Some("name" | "workspace_domain" | "public_scheme" | "ssh_address")
        )
    });
    let scheme = if form.public_scheme.is_empty() {
        "https"
    } else {
        form.public_scheme.as_str()
    };
    let (name_err, domain_err) = (field_err("name"), field_err("workspace_domain"));
    let (scheme_err, ssh_err) = (field_err("public_scheme"), field_err("ssh_address"));
    let body = html! {
        p { a href="/admin" { "← Admin" } }
        section aria-labelledby="regions-h" {
            h2 id="regions-h" { "Regions" }
            p.hint { "A region's workspaces are reached through its own proxy while one serves the door registered here, and through the central proxy otherwise. Agents join a region with " code { "region" } " in their configuration." }
            @if registered.is_empty() {
                p.empty { "No regions: every workspace is reached through the central proxy." }
            } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Door" } th scope="col" { "Agents" } th scope="col" { "State" } th scope="col" { "Changed" } th scope="col" { span.visually-hidden { "Actions" } } } }
                    tbody { @for r in &registered {
                        tr {
                            th scope="row" { (r.name) }
                            td { (regions::describe((&r.workspace_domain, &r.public_scheme, r.ssh_address.as_deref()))) }
                            td { (agents_of(&r.name)) }
                            td {
                                @if r.serving { span.state.running { "served by its proxy" } }
                                @else { span.state.stopped { "no proxy serving: its workspaces go through the central proxy" } }
                            }
                            td { (ago(r.updated_at, now)) }
                            td.actions {
                                (danger_button(viewer, &format!("/admin/regions/{}/delete", r.name), "Remove", &format!("region {}", r.name)))
                            }
                        }
                    } }
                } }
            }
            @for (region, names) in &unregistered {
                p.warning role="status" { "Agents " (names.join(", ")) " name region " strong { (region) } ", which is not registered: their workspaces go through the central proxy." }
            }
            form.card method="post" action="/admin/regions" {
                (csrf(viewer))
                h3 { "Register a region or change its door" }
                @if let Some(e) = general { p.error role="alert" { (e.message) } }
                (input(Input { id: "name", label: "Name", value: Some(&form.name), placeholder: Some("e.g. eu"), autocomplete: Some("off"), required: true, error: name_err.as_deref(), ..Input::default() }))
                (input(Input { id: "workspace_domain", label: "Domain of its workspace hosts", value: Some(&form.workspace_domain), placeholder: Some("e.g. ws.eu.example.com"), autocomplete: Some("off"), required: true, error: domain_err.as_deref(), ..Input::default() }))
                (select_field("public_scheme", "Scheme", scheme_err.as_deref(), html! {
                    @for s in ["https", "http"] { option value=(s) selected[s == scheme] { (s) } }
                }))
                (input(Input { id: "ssh_address", label: "SSH address (optional)", value: Some(&form.ssh_address), placeholder: Some("e.g. ssh.eu.example.com:22"), autocomplete: Some("off"), error: ssh_err.as_deref(), ..Input::default() }))
                button.primary type="submit" { "Save region" }
            }
        }
        section aria-labelledby="proxies-h" {
            h2 id="proxies-h" { "Proxies" }
            @if proxies.is_empty() {
                p.empty { "No proxy has said it serves in the last day." }
            } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Region" } th scope="col" { "Door" } th scope="col" { "State" } th scope="col" { "Started" } th scope="col" { "Last seen" } } }
                    tbody { @for p in &proxies {
                        tr {
                            td { @match &p.region { Some(r) => (r), None => "central" } }
                            td { (regions::describe((&p.workspace_domain, &p.public_scheme, p.ssh_address.as_deref()))) }
                            td {
                                @if p.serving { span.state.running { "serving" } }
                                @else { span.state.stopped { "quiet" } }
                            }
                            td { (ago(p.started_at, now)) }
                            td { (ago(p.last_seen_at, now)) }
                        }
                    } }
                } }
            }
        }
    };
    Ok(layout::page(viewer, status, "Regions", body))
}

/// `GET /admin/regions`
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, UiError> {
    render(&state, &viewer, &RegionForm::default(), None).await
}

/// `POST /admin/regions`: registers a region or changes its door.
pub async fn save(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<RegionForm>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    let ssh = form.ssh_address.trim();
    let spec = RegionSpec {
        workspace_domain: form.workspace_domain.trim().to_owned(),
        public_scheme: match form.public_scheme.trim() {
            "" => "https".to_owned(),
            s => s.to_owned(),
        },
        ssh_address: (!ssh.is_empty()).then(|| ssh.to_owned()),
    };
    match regions::register(&state, &viewer.who, form.name.trim(), &spec).await {
        Ok(_) => Ok(Redirect::to("/admin/regions").into_response()),
        Err(e) if form_error(&e) => render(&state, &viewer, &form, Some(&e)).await,
        Err(e) => Err(e.into()),
    }
}

/// `POST /admin/regions/{name}/delete`
pub async fn remove(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, .. }: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    admin_only(&viewer)?;
    regions::unregister(&state, &viewer.who, &name).await?;
    Ok(Redirect::to("/admin/regions").into_response())
}
