//! Projects: any signed-in user creates them; members (or everyone, for internal ones) see
//! and use them; maintainers manage their settings, credential and members.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, OptionalJson, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{
    ApiError, CreateProjectRequest, Project, ProjectMember, SetProjectMemberRequest,
    UpdateProjectRequest,
};
use warren_types::git::GitCredential;
use warren_types::prebuild::{Prebuild, RunPrebuildRequest, SetPrebuildsRequest};

#[utoipa::path(get, path = "/api/v1/projects", responses((status = 200, body = Vec<Project>)), tag = "projects",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Project>>, HttpError> {
    Ok(Json(app::projects::list(&state, &who).await?))
}

/// A stored devfile is validated now, so a broken one is refused (422) before anyone uses it.
#[utoipa::path(post, path = "/api/v1/projects", request_body = CreateProjectRequest,
    responses((status = 201, body = Project), (status = 400, body = ApiError), (status = 409, body = ApiError),
    (status = 422, body = ApiError)), tag = "projects", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateProjectRequest>,
) -> Result<(StatusCode, Json<Project>), HttpError> {
    let p = app::projects::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(p)))
}

#[utoipa::path(get, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(app::projects::get(&state, &who, &key).await?))
}

/// Deletes a project; its workspaces keep running and only lose the link.
#[utoipa::path(delete, path = "/api/v1/projects/{project}",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn delete_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::projects::delete(&state, &who, &key).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes visibility, default ref or devfile path (maintainers).
#[utoipa::path(patch, path = "/api/v1/projects/{project}", request_body = UpdateProjectRequest,
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn update(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateProjectRequest>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(app::projects::update(&state, &who, &key, &req).await?))
}

/// Sets the repository credential (maintainers); it is stored encrypted and never returned.
#[utoipa::path(put, path = "/api/v1/projects/{project}/credential", request_body = GitCredential,
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn set_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(c): Json<GitCredential>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(
        app::projects::set_credential(&state, &who, &key, Some(&c)).await?,
    ))
}

/// Removes the repository credential (maintainers).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/credential",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn delete_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(
        app::projects::set_credential(&state, &who, &key, None).await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/projects/{project}/members",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Vec<ProjectMember>), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn members(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Vec<ProjectMember>>, HttpError> {
    Ok(Json(app::projects::members(&state, &who, &key).await?))
}

/// Adds a member or changes their role (maintainers); answers the members.
#[utoipa::path(put, path = "/api/v1/projects/{project}/members/{user}", request_body = SetProjectMemberRequest,
    params(("project" = String, Path, description = "project name or id"),
           ("user" = String, Path, description = "username or id")),
    responses((status = 200, body = Vec<ProjectMember>), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn set_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, user)): Path<(String, String)>,
    Json(req): Json<SetProjectMemberRequest>,
) -> Result<Json<Vec<ProjectMember>>, HttpError> {
    Ok(Json(
        app::projects::set_member(&state, &who, &key, &user, &req).await?,
    ))
}

/// Removes a member (maintainers, or a member leaving); never the last maintainer.
#[utoipa::path(delete, path = "/api/v1/projects/{project}/members/{user}",
    params(("project" = String, Path, description = "project name or id"),
           ("user" = String, Path, description = "username or id")),
    responses((status = 204), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn remove_member(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, user)): Path<(String, String)>,
) -> Result<StatusCode, HttpError> {
    app::projects::remove_member(&state, &who, &key, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The project's prebuilds, the newest first (anyone who may use the project).
#[utoipa::path(get, path = "/api/v1/projects/{project}/prebuilds",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Vec<Prebuild>), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn prebuilds(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Vec<Prebuild>>, HttpError> {
    Ok(Json(app::prebuilds::list(&state, &who, &key).await?))
}

/// A prebuild of a ref's newest commit now (maintainers; the default ref when the body names
/// none); the running one when a prebuild of the ref runs already.
#[utoipa::path(post, path = "/api/v1/projects/{project}/prebuilds",
    request_body(content = Option<RunPrebuildRequest>, description = "optional"),
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 202, body = Prebuild), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn prebuild(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    OptionalJson(req): OptionalJson<RunPrebuildRequest>,
) -> Result<(StatusCode, Json<Prebuild>), HttpError> {
    let p = app::prebuilds::trigger(&state, &who, &key, req.git_ref.as_deref()).await?;
    Ok((StatusCode::ACCEPTED, Json(p)))
}

/// Turns prebuilds on, or changes them (maintainers): on an agent, of the default ref and
/// the refs named, of each new commit and on an optional schedule.
#[utoipa::path(put, path = "/api/v1/projects/{project}/prebuilds/settings", request_body = SetPrebuildsRequest,
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn prebuilds_on(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<SetPrebuildsRequest>,
) -> Result<Json<Project>, HttpError> {
    let p = app::prebuilds::turn_on(&state, &who, &key, &req).await?;
    Ok(Json(p))
}

/// Turns prebuilds off (maintainers): the project's prebuilds and their volumes are removed.
#[utoipa::path(delete, path = "/api/v1/projects/{project}/prebuilds/settings",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 200, body = Project), (status = 404, body = ApiError)), tag = "projects",
    security(("bearer" = [])))]
pub async fn prebuilds_off(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<Project>, HttpError> {
    Ok(Json(app::prebuilds::turn_off(&state, &who, &key).await?))
}

/// Sets the secret the project's push webhooks are checked with (maintainers); stored
/// sealed, never returned.
#[utoipa::path(put, path = "/api/v1/projects/{project}/prebuilds/webhook",
    request_body = warren_types::gitops::WebhookSecretRequest,
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 204), (status = 400, body = ApiError), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn set_prebuild_webhook_secret(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<warren_types::gitops::WebhookSecretRequest>,
) -> Result<StatusCode, HttpError> {
    app::prebuild_webhook::set_webhook_secret(&state, &who, &key, Some(&req.secret)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes the project's webhook secret (maintainers): its webhooks are refused from then on.
#[utoipa::path(delete, path = "/api/v1/projects/{project}/prebuilds/webhook",
    params(("project" = String, Path, description = "project name or id")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "projects", security(("bearer" = [])))]
pub async fn delete_prebuild_webhook_secret(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::prebuild_webhook::set_webhook_secret(&state, &who, &key, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A forge's push webhook for the project (GitHub's `X-Hub-Signature-256`, Gitea's
/// `X-Gitea-Signature`, GitLab's `X-Gitlab-Token`, checked against its webhook secret); a
/// valid one makes the server look at the project's prebuilt refs now and start a prebuild of
/// each new commit. No bearer token.
#[utoipa::path(post, path = "/api/v1/projects/{project}/prebuilds/webhook",
    params(("project" = String, Path, description = "project name or id")),
    request_body(content = String, description = "the forge's event, as sent", content_type = "application/json"),
    responses((status = 202, body = PrebuildWebhookAccepted), (status = 401, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "projects")]
pub async fn prebuild_webhook(
    State(state): State<AppState>,
    Path(key): Path<String>,
    headers: http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<PrebuildWebhookAccepted>), HttpError> {
    let proof = super::gitops::webhook_proof(&headers);
    let started = app::prebuild_webhook::webhook(&state, &key, &proof, &body).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(PrebuildWebhookAccepted { started }),
    ))
}

/// A prebuild webhook's answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct PrebuildWebhookAccepted {
    /// The prebuilds it started, one per ref at most; none when each ref's newest commit has
    /// one or one runs.
    pub started: Vec<Prebuild>,
}
