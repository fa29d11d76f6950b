//! The account's secrets page: the user's secrets and Git credentials (names and hosts only —
//! a value is never shown again), forms to set them, and the name and email address their commits are made with.

use super::layout::{self, ago, csrf, danger_button, input, Input};
use super::session::{Posted, Viewer};
use super::UiError;
use crate::app::{secrets, AppError, ErrorKind};
use crate::http::HttpState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use http::StatusCode;
use maud::html;
use serde::Deserialize;
use warren_types::api::{
    SetGitCredentialRequest, SetProfileRequest, SetSecretRequest, VariableKind,
};
use warren_types::git::GitCredential;

/// A form's error, and what the form held (never the value), to show it again.
#[derive(Default)]
struct Shown<'a> {
    secret_error: Option<&'a AppError>,
    secret_form: Option<&'a SecretForm>,
    profile_error: Option<&'a AppError>,
    git_error: Option<&'a AppError>,
    git_form: Option<&'a GitCredentialForm>,
}

async fn render(http: &HttpState, viewer: &Viewer, shown: Shown<'_>) -> Result<Response, UiError> {
    let state = &http.app;
    let status = match shown
        .secret_error
        .or(shown.profile_error)
        .or(shown.git_error)
    {
        Some(e) => crate::http::error::status_of(e.kind),
        None => StatusCode::OK,
    };
    let now = Utc::now();
    let list = secrets::list(state, &viewer.who).await?;
    let credentials = secrets::list_git_credentials(state, &viewer.who).await?;
    let git_form = shown.git_form;
    let user = &viewer.who.user;
    let err_of = |e: Option<&AppError>, field: &str| {
        e.filter(|e| e.field.as_deref() == Some(field))
            .map(|e| e.message.clone())
    };
    let form = shown.secret_form;
    let body = html! {
        section aria-labelledby="secrets-h" {
            h2 id="secrets-h" { "Secrets" }
            p.hint { "Environment variables and files (" code { "/warren/variables/NAME" } ") given to your workspaces. A value is sealed on the server and never shown again. Files follow at once; a running workspace gets an environment variable at its next start. By default a secret goes only to workspaces no one else may use." }
            @if let Some(e) = shown.secret_error.filter(|e| e.field.is_none()) { p.error role="alert" { (e.message) } }
            @if list.is_empty() { p.empty { "No secrets yet." } } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Projects" } th scope="col" { "Shared workspaces" } th scope="col" { "Updated" } th scope="col" { span.visually-hidden { "Actions" } } } }
                    tbody { @for s in &list {
                        tr {
                            th scope="row" { code { (s.name) } }
                            td { @match s.kind { VariableKind::Env => "environment", VariableKind::File => "file" } }
                            td { (s.projects.as_deref().unwrap_or("all")) }
                            td { @if s.shared_workspaces { "yes" } @else { "no" } }
                            td { (ago(s.updated_at, now)) }
                            td { (danger_button(viewer, &format!("/account/secrets/{}/delete", s.name), "Remove", &s.name)) }
                        }
                    } }
                } }
            }
            form.card method="post" action="/account/secrets" {
                (csrf(viewer))
                @let name_err = err_of(shown.secret_error, "name");
                (input(Input { id: "name", label: "Name", value: form.map(|f| f.name.as_str()), placeholder: Some("NPM_TOKEN"), required: true, error: name_err.as_deref(), ..Input::default() }))
                div.field {
                    label for="kind" { "Kind" }
                    select id="kind" name="kind" {
                        option value="env" selected[form.is_none_or(|f| f.kind != "file")] { "Environment variable" }
                        option value="file" selected[form.is_some_and(|f| f.kind == "file")] { "File" }
                    }
                }
                @let value_err = err_of(shown.secret_error, "value");
                div.field {
                    label for="value" { "Value" }
                    @let (described, bad) = layout::invalid("value", value_err.as_deref());
                    textarea id="value" name="value" rows="3" required autocomplete="off" spellcheck="false"
                        aria-describedby=[described] aria-invalid=[bad] {}
                    (layout::field_error("value", value_err.as_deref()))
                }
                @let projects_err = err_of(shown.secret_error, "projects");
                (input(Input { id: "projects", label: "Only projects (optional, comma-separated globs)", value: form.map(|f| f.projects.as_str()), placeholder: Some("web-*, api"), error: projects_err.as_deref(), ..Input::default() }))
                label { input type="checkbox" name="shared_workspaces" value="true" checked[form.is_some_and(|f| f.shared_workspaces.is_some())]; " Also workspaces others may use (a team space, a softlink grant): they could read it" }
                button.primary type="submit" { "Set secret" }
            }
        }
        section aria-labelledby="git-h" {
            h2 id="git-h" { "Git credentials" }
            p.hint { "Your own token, password or SSH key for a forge. Your workspaces' Git uses it instead of the project's, so your pushes are yours, and a repository you open by URL is read with it. Sealed on the server and never shown again." }
            @if let Some(e) = shown.git_error.filter(|e| e.field.is_none()) { p.error role="alert" { (e.message) } }
            @if credentials.is_empty() { p.empty { "No Git credentials yet." } } @else {
                div.table-wrap { table {
                    thead { tr { th scope="col" { "Host" } th scope="col" { "Kind" } th scope="col" { "Shared workspaces" } th scope="col" { "Updated" } th scope="col" { span.visually-hidden { "Actions" } } } }
                    tbody { @for c in &credentials {
                        tr {
                            th scope="row" { code { (c.host) } }
                            td { (c.kind) }
                            td { @if c.shared_workspaces { "yes" } @else { "no" } }
                            td { (ago(c.updated_at, now)) }
                            td { (danger_button(viewer, &format!("/account/git-credentials/{}/delete", c.id), "Remove", &format!("the credential for {}", c.host))) }
                        }
                    } }
                } }
            }
            form.card method="post" action="/account/git-credentials" {
                (csrf(viewer))
                @let host_err = err_of(shown.git_error, "host");
                (input(Input { id: "host", label: "Host or repository URL", value: git_form.map(|f| f.host.as_str()), placeholder: Some("https://git.example.com"), required: true, error: host_err.as_deref(), ..Input::default() }))
                div.field {
                    label for="git-kind" { "Kind" }
                    select id="git-kind" name="kind" {
                        option value="token" selected[git_form.is_none_or(|f| f.kind == "token")] { "Access token (https)" }
                        option value="basic" selected[git_form.is_some_and(|f| f.kind == "basic")] { "Username and password (https)" }
                        option value="ssh_key" selected[git_form.is_some_and(|f| f.kind == "ssh_key")] { "Private key (ssh)" }
                    }
                }
                (input(Input { id: "username", label: "Username (for a password; optional for a token)", value: git_form.map(|f| f.username.as_str()), autocomplete: Some("off"), ..Input::default() }))
                @let secret_err = shown.git_error.filter(|e| e.field.as_deref().is_some_and(|f| f.starts_with("credential"))).map(|e| e.message.clone());
                div.field {
                    label for="secret" { "Token, password or private key" }
                    @let (described, bad) = layout::invalid("secret", secret_err.as_deref());
                    textarea id="secret" name="secret" rows="3" required autocomplete="off" spellcheck="false"
                        aria-describedby=[described] aria-invalid=[bad] {}
                    (layout::field_error("secret", secret_err.as_deref()))
                }
                label { input type="checkbox" name="shared_workspaces" value="true" checked[git_form.is_some_and(|f| f.shared_workspaces.is_some())]; " Also workspaces others may use (a team space, a softlink grant): they could read it" }
                button.primary type="submit" { "Save credential" }
            }
        }
        section aria-labelledby="profile-h" {
            h2 id="profile-h" { "Commit identity" }
            p { "Commits in your workspaces are made as " strong { (user.full_name.as_deref().unwrap_or(&user.username)) } " <" (user.email.as_deref().unwrap_or("no email address set")) ">." }
            form.card method="post" action="/account/profile" {
                (csrf(viewer))
                @let name_err = err_of(shown.profile_error, "full_name");
                @let email_err = err_of(shown.profile_error, "email");
                (input(Input { id: "full_name", label: "Name", value: user.full_name.as_deref(), placeholder: Some(&user.username), autocomplete: Some("name"), error: name_err.as_deref(), ..Input::default() }))
                (input(Input { id: "email", label: "Email address", kind: Some("email"), value: user.email.as_deref(), autocomplete: Some("email"), error: email_err.as_deref(), ..Input::default() }))
                button.primary type="submit" { "Save identity" }
            }
        }
    };
    Ok(layout::page(viewer, status, "Secrets", body))
}

/// `GET /account/secrets`
pub async fn page(State(http): State<HttpState>, viewer: Viewer) -> Result<Response, UiError> {
    render(&http, &viewer, Shown::default()).await
}

#[derive(Default, Deserialize)]
pub struct SecretForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    projects: String,
    #[serde(default)]
    shared_workspaces: Option<String>,
}

impl std::fmt::Debug for SecretForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretForm")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Errors shown beside the forms (the rest get an error page).
fn form_error(e: &AppError) -> bool {
    matches!(e.kind, ErrorKind::Invalid | ErrorKind::Conflict)
}

/// `POST /account/secrets`
pub async fn set(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<SecretForm>,
) -> Result<Response, UiError> {
    let req = SetSecretRequest {
        value: form.value.clone(),
        kind: if form.kind == "file" {
            VariableKind::File
        } else {
            VariableKind::Env
        },
        projects: Some(form.projects.trim().to_owned()).filter(|p| !p.is_empty()),
        shared_workspaces: form.shared_workspaces.is_some(),
    };
    match secrets::set(&http.app, &viewer.who, form.name.trim(), &req).await {
        Ok(_) => Ok(Redirect::to("/account/secrets").into_response()),
        Err(e) if form_error(&e) => {
            let shown = Shown {
                secret_error: Some(&e),
                secret_form: Some(&form),
                ..Shown::default()
            };
            render(&http, &viewer, shown).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /account/secrets/{name}/delete`
pub async fn delete(
    State(http): State<HttpState>,
    Path(name): Path<String>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    secrets::delete(&http.app, &posted.viewer.who, &name).await?;
    Ok(Redirect::to("/account/secrets").into_response())
}

#[derive(Debug, Default, Deserialize)]
pub struct ProfileForm {
    #[serde(default)]
    full_name: String,
    #[serde(default)]
    email: String,
}

/// `POST /account/profile`
pub async fn set_profile(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<ProfileForm>,
) -> Result<Response, UiError> {
    let req = SetProfileRequest {
        full_name: Some(form.full_name),
        email: Some(form.email),
    };
    match secrets::set_profile(&http.app, &viewer.who, &req).await {
        Ok(_) => Ok(Redirect::to("/account/secrets#profile-h").into_response()),
        Err(e) if form_error(&e) => {
            let shown = Shown {
                profile_error: Some(&e),
                ..Shown::default()
            };
            render(&http, &viewer, shown).await
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Default, Deserialize)]
pub struct GitCredentialForm {
    #[serde(default)]
    host: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    username: String,
    #[serde(default)]
    secret: String,
    #[serde(default)]
    shared_workspaces: Option<String>,
}

impl std::fmt::Debug for GitCredentialForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitCredentialForm")
            .field("host", &self.host)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// `POST /account/git-credentials`
pub async fn set_git_credential(
    State(http): State<HttpState>,
    Posted { viewer, form }: Posted<GitCredentialForm>,
) -> Result<Response, UiError> {
    let username = Some(form.username.trim().to_owned()).filter(|u| !u.is_empty());
    let credential = match form.kind.as_str() {
        "basic" => GitCredential::Basic {
            username: username.unwrap_or_default(),
            password: form.secret.clone(),
        },
        "ssh_key" => GitCredential::SshKey {
            private_key: form.secret.clone(),
            known_hosts: None,
        },
        _ => GitCredential::Token {
            token: form.secret.trim().to_owned(),
            username,
        },
    };
    let req = SetGitCredentialRequest {
        host: form.host.trim().to_owned(),
        credential,
        shared_workspaces: form.shared_workspaces.is_some(),
    };
    match secrets::set_git_credential(&http.app, &viewer.who, &req).await {
        Ok(_) => Ok(Redirect::to("/account/secrets#git-h").into_response()),
        Err(e) if form_error(&e) => {
            let shown = Shown {
                git_error: Some(&e),
                git_form: Some(&form),
                ..Shown::default()
            };
            render(&http, &viewer, shown).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `POST /account/git-credentials/{id}/delete`
pub async fn delete_git_credential(
    State(http): State<HttpState>,
    Path(id): Path<i64>,
    posted: Posted<serde::de::IgnoredAny>,
) -> Result<Response, UiError> {
    secrets::delete_git_credential(&http.app, &posted.viewer.who, id).await?;
    Ok(Redirect::to("/account/secrets#git-h").into_response())
}
