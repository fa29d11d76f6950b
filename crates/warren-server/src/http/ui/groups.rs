//! The groups page: every group with its source and member count; for admins the form that
//! makes one, each group's members (added and taken out here for `local` groups) and its
//! removal; for everyone the roles each group holds on the spaces they see, and the form
//! that gives a group a role on a space (the domain lets a space's owners and admins). The
//! rules are `crate::app::groups`'s, as for the API.

use super::admin::form_error;
use super::layout::{self, ago, csrf, danger_button, input, select_field, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{groups, AppError, AppState, ErrorKind};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::{html, Markup};
use serde::Deserialize;
use warren_types::api::{CreateGroupRequest, GroupSource, SetSpaceMemberRequest, SpaceRole};

/// A group's name as one path segment: providers' names hold `/` and blanks.
fn seg(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The forms as posted (kept to show them again with their error).
#[derive(Debug, Default, Deserialize)]
pub struct GroupForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    source: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    space: String,
    #[serde(default)]
    role: String,
}

/// Which form a refusal belongs to, so its error shows beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Create,
    /// A group's member or role form.
    Of,
}

async fn render(
    state: &AppState,
    viewer: &Viewer,
    form: &GroupForm,
    error: Option<(Form, &AppError)>,
) -> Result<Response, UiError> {
    let status = error.map_or(StatusCode::OK, |(_, e)| {
        crate::http::error::status_of(e.kind)
    });
    let now = Utc::now();
    let admin = viewer.is_admin();
    let list = groups::list(state, &viewer.who).await?;
    let mut shown = vec![];
    for g in &list {
        let members = if admin {
            groups::show(state, &viewer.who, &g.name).await?.1
        } else {
            vec![]
        };
        let roles = groups::roles_of(state, &viewer.who, &g.name).await?;
        shown.push((g, members, roles));
    }
    let error_of = |f: Form, group: &str| {
        error
            .filter(|(which, _)| *which == f && (f == Form::Create || form.name == group))
            .map(|(_, e)| e.message.clone())
    };
    let create_err = error_of(Form::Create, "");
    let body = html! {
        section aria-labelledby="groups-h" {
            h2 id="groups-h" { "Groups" }
            p.hint { "A role a group holds on a space holds for each of its members, there and below. Members of " code { "oidc" } " groups are those whose sign-in through the identity provider named the group in its groups claim; each such membership lasts until their next sign-in." }
            @if shown.is_empty() {
                p.empty { "No groups." }
            }
            @for (g, members, roles) in &shown {
                article.card aria-labelledby=(format!("group-{}", g.id)) {
                    h3 id=(format!("group-{}", g.id)) { (g.name) " " span.hint { "(" (g.source.as_str()) ", " (g.members) " members)" } }
                    @if !g.description.is_empty() { p { (g.description) } }
                    @if let Some(e) = error_of(Form::Of, &g.name) { p.error role="alert" { (e) } }
                    @if admin {
                        (member_list(viewer, g.source, &g.name, members, now))
                    }
                    (role_list(viewer, &g.name, roles))
                    @if admin {
                        (danger_button(viewer, &format!("/groups/{}/delete", seg(&g.name)), "Remove", &format!("group {}", g.name)))
                    }
                }
            }
            @if admin {
                form.card method="post" action="/groups" {
                    (csrf(viewer))
                    h3 { "New group" }
                    (input(Input { id: "name", label: "Name (for an oidc group: the value of the groups claim)", value: Some(&form.name), autocomplete: Some("off"), required: true, error: create_err.as_deref(), ..Input::default() }))
                    (select_field("source", "Members", None, html! {
                        option value="local" selected[form.source != "oidc"] { "local: added here" }
                        option value="oidc" selected[form.source == "oidc"] { "oidc: from the identity provider's groups claim" }
                    }))
                    (input(Input { id: "description", label: "Description (optional)", value: Some(&form.description), autocomplete: Some("off"), ..Input::default() }))
                    button.primary type="submit" { "Create group" }
                }
            }
        }
    };
    Ok(layout::page(viewer, status, "Groups", body))
}

fn member_list(
    viewer: &Viewer,
    source: GroupSource,
    name: &str,
    members: &[warren_types::api::GroupMember],
    now: chrono::DateTime<Utc>,
) -> Markup {
    let id = seg(name);
    html! {
        @if members.is_empty() {
            p.empty { "No members." }
        } @else {
            div.table-wrap { table {
                thead { tr { th scope="col" { "Member" } th scope="col" { "Since" } th scope="col" { "Until" } th scope="col" { span.visually-hidden { "Actions" } } } }
                tbody { @for m in members {
                    tr {
                        th scope="row" { (m.username) }
                        td { (ago(m.created_at, now)) }
                        td { @match m.expires_at { Some(t) => (layout::ago_or_in(t, now)), None => "-" } }
                        td.actions { (danger_button(viewer, &format!("/groups/{id}/members/{}/remove", seg(&m.username)), "Take out", &m.username)) }
                    }
                } }
            } }
        }
        @if source == GroupSource::Local {
            form.inline method="post" action=(format!("/groups/{id}/members")) {
                (csrf(viewer))
                input type="hidden" name="name" value=(name);
                label for=(format!("user-{id}")) { "Add a member" }
                input type="text" id=(format!("user-{id}")) name="user" required autocomplete="off" placeholder="username";
                button type="submit" { "Add" }
            }
        }
    }
}

fn role_list(viewer: &Viewer, name: &str, roles: &[(String, SpaceRole)]) -> Markup {
    let id = seg(name);
    html! {
        @if !roles.is_empty() {
            ul { @for (path, role) in roles {
                li { (role.as_str()) " of " code { (path) } " "
                    form.inline method="post" action=(format!("/groups/{id}/roles/remove")) {
                        (csrf(viewer))
                        input type="hidden" name="name" value=(name);
                        input type="hidden" name="space" value=(path);
                        button.danger type="submit" aria-label=(format!("Take the role on {path} from {name}")) { "Take away" }
                    }
                }
            } }
        }
        form.inline method="post" action=(format!("/groups/{id}/roles")) {
            (csrf(viewer))
            input type="hidden" name="name" value=(name);
            label for=(format!("space-{id}")) { "Give a role on space" }
            input type="text" id=(format!("space-{id}")) name="space" required autocomplete="off" placeholder="acme/platform";
            label for=(format!("role-{id}")) { "as" }
            select id=(format!("role-{id}")) name="role" {
                @for r in ["viewer", "developer", "owner"] { option value=(r) selected[r == "developer"] { (r) } }
            }
            button type="submit" { "Give" }
        }
    }
}

/// `GET /groups`
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Result<Response, UiError> {
    render(&state, &viewer, &GroupForm::default(), None).await
}

/// Whether a refusal of a group's member or role form is shown beside it: a mistyped user
/// or space, a space the viewer does not own, as well as the form's own errors.
fn inline(e: &AppError) -> bool {
    form_error(e) || matches!(e.kind, ErrorKind::NotFound | ErrorKind::Forbidden)
}

fn back() -> Response {
    Redirect::to("/groups").into_response()
}

/// `POST /groups`: makes a group (the domain lets admins).
pub async fn create(
    State(state): State<AppState>,
    Posted { viewer, form }: Posted<GroupForm>,
) -> Result<Response, UiError> {
    let req = CreateGroupRequest {
        name: form.name.trim().to_owned(),
        source: GroupSource::parse(form.source.trim()).unwrap_or_default(),
        description: form.description.trim().to_owned(),
    };
    match groups::create(&state, &viewer.who, &req).await {
        Ok(_) => Ok(back()),
        Err(e) if form_error(&e) => render(&state, &viewer, &form, Some((Form::Create, &e))).await,
        Err(e) => Err(e.into()),
    }
}

/// `POST /groups/{name}/delete`
pub async fn delete(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, .. }: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    groups::delete(&state, &viewer.who, &name).await?;
    Ok(back())
}

/// `POST /groups/{name}/members`: adds the posted user.
pub async fn add_member(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, mut form }: Posted<GroupForm>,
) -> Result<Response, UiError> {
    form.name = name;
    match groups::add_member(&state, &viewer.who, &form.name, form.user.trim()).await {
        Ok(_) => Ok(back()),
        Err(e) if inline(&e) => render(&state, &viewer, &form, Some((Form::Of, &e))).await,
        Err(e) => Err(e.into()),
    }
}

/// `POST /groups/{name}/members/{user}/remove`
pub async fn remove_member(
    State(state): State<AppState>,
    Path((name, user)): Path<(String, String)>,
    Posted { viewer, .. }: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    groups::remove_member(&state, &viewer.who, &name, &user).await?;
    Ok(back())
}

/// `POST /groups/{name}/roles`: gives the group the posted role on the posted space.
pub async fn set_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, mut form }: Posted<GroupForm>,
) -> Result<Response, UiError> {
    form.name = name;
    let Some(role) = SpaceRole::parse(form.role.trim()) else {
        let e = AppError::invalid_field("role", "must be viewer, developer or owner");
        return render(&state, &viewer, &form, Some((Form::Of, &e))).await;
    };
    let req = SetSpaceMemberRequest { role };
    let space = form.space.trim().to_owned();
    match groups::set_space_role(&state, &viewer.who, &space, &form.name, &req).await {
        Ok(_) => Ok(back()),
        Err(e) if inline(&e) => render(&state, &viewer, &form, Some((Form::Of, &e))).await,
        Err(e) => Err(e.into()),
    }
}

/// `POST /groups/{name}/roles/remove`: takes the group's role on the posted space away.
pub async fn remove_role(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Posted { viewer, form }: Posted<GroupForm>,
) -> Result<Response, UiError> {
    groups::remove_space_role(&state, &viewer.who, form.space.trim(), &name).await?;
    Ok(back())
}
