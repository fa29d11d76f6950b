//! GitOps configuration (admins): repositories, an agent's sources, the policy.

use super::Auth;
use crate::app::{self, AppState};
use crate::http::error::{HttpError, Json, Path};
use axum::extract::State;
use http::StatusCode;
use warren_types::api::ApiError;
use warren_types::git::GitCredential;
use warren_types::gitops::{
    AgentGitops, CreateRepositoryRequest, Policy, Repository, SourceStatus, WebhookSecretRequest,
};

#[utoipa::path(get, path = "/api/v1/gitops/repositories",
    responses((status = 200, body = Vec<Repository>), (status = 403, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn list_repositories(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Repository>>, HttpError> {
    Ok(Json(app::gitops::list_repositories(&state, &who).await?))
}

/// Registers a repository; its credential and webhook secret are stored encrypted and
/// never returned.
#[utoipa::path(post, path = "/api/v1/gitops/repositories", request_body = CreateRepositoryRequest,
    responses((status = 201, body = Repository), (status = 400, body = ApiError),
    (status = 403, body = ApiError), (status = 409, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn create_repository(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateRepositoryRequest>,
) -> Result<(StatusCode, Json<Repository>), HttpError> {
    let r = app::gitops::create_repository(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(r)))
}

#[utoipa::path(get, path = "/api/v1/gitops/repositories/{repository}",
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 200, body = Repository), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn get_repository(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<Json<Repository>, HttpError> {
    Ok(Json(
        app::gitops::get_repository(&state, &who, &name).await?,
    ))
}

/// Removes a repository; refused (409) while a source uses it.
#[utoipa::path(delete, path = "/api/v1/gitops/repositories/{repository}",
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 204), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn delete_repository(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    app::gitops::delete_repository(&state, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sets the repository's credential; stored encrypted, never returned.
#[utoipa::path(put, path = "/api/v1/gitops/repositories/{repository}/credential",
    request_body = GitCredential,
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 200, body = Repository), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn set_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
    Json(c): Json<GitCredential>,
) -> Result<Json<Repository>, HttpError> {
    Ok(Json(
        app::gitops::set_credential(&state, &who, &name, Some(&c)).await?,
    ))
}

#[utoipa::path(delete, path = "/api/v1/gitops/repositories/{repository}/credential",
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 200, body = Repository), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn delete_credential(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<Json<Repository>, HttpError> {
    Ok(Json(
        app::gitops::set_credential(&state, &who, &name, None).await?,
    ))
}

/// Sets the secret push webhooks are checked with; stored encrypted, never returned.
#[utoipa::path(put, path = "/api/v1/gitops/repositories/{repository}/webhook_secret",
    request_body = WebhookSecretRequest,
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 200, body = Repository), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn set_webhook_secret(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
    Json(req): Json<WebhookSecretRequest>,
) -> Result<Json<Repository>, HttpError> {
    Ok(Json(
        app::gitops::set_webhook_secret(&state, &who, &name, Some(&req.secret)).await?,
    ))
}

#[utoipa::path(delete, path = "/api/v1/gitops/repositories/{repository}/webhook_secret",
    params(("repository" = String, Path, description = "repository name")),
    responses((status = 200, body = Repository), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn delete_webhook_secret(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<Json<Repository>, HttpError> {
    Ok(Json(
        app::gitops::set_webhook_secret(&state, &who, &name, None).await?,
    ))
}

#[utoipa::path(get, path = "/api/v1/agents/{agent}/gitops",
    params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = AgentGitops), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn agent_gitops(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(agent): Path<String>,
) -> Result<Json<AgentGitops>, HttpError> {
    Ok(Json(app::gitops::agent_gitops(&state, &who, &agent).await?))
}

/// Replaces the agent's sources; every problem is named in one answer.
#[utoipa::path(put, path = "/api/v1/agents/{agent}/gitops", request_body = AgentGitops,
    params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = AgentGitops), (status = 400, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn set_agent_gitops(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(agent): Path<String>,
    Json(config): Json<AgentGitops>,
) -> Result<Json<AgentGitops>, HttpError> {
    Ok(Json(
        app::gitops::set_agent_gitops(&state, &who, &agent, &config).await?,
    ))
}

/// What the agent last reported for each source: commit, counts, errors, workload health.
#[utoipa::path(get, path = "/api/v1/agents/{agent}/gitops/status",
    params(("agent" = String, Path, description = "agent name or id")),
    responses((status = 200, body = Vec<SourceStatus>), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn agent_status(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(agent): Path<String>,
) -> Result<Json<Vec<SourceStatus>>, HttpError> {
    Ok(Json(app::gitops::agent_status(&state, &who, &agent).await?))
}

#[utoipa::path(get, path = "/api/v1/gitops/policy",
    responses((status = 200, body = Policy), (status = 403, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn policy(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Policy>, HttpError> {
    Ok(Json(app::gitops::policy(&state, &who).await?))
}

/// Replaces the policy that caps every source.
#[utoipa::path(put, path = "/api/v1/gitops/policy", request_body = Policy,
    responses((status = 200, body = Policy), (status = 400, body = ApiError), (status = 403, body = ApiError)),
    tag = "gitops", security(("bearer" = [])))]
pub async fn set_policy(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(p): Json<Policy>,
) -> Result<Json<Policy>, HttpError> {
    Ok(Json(app::gitops::set_policy(&state, &who, &p).await?))
}

/// A forge's push webhook: checked against the repository's webhook secret (GitHub's
/// `X-Hub-Signature-256`, Gitea's `X-Gitea-Signature`, GitLab's `X-Gitlab-Token`); a valid
/// one makes the relays poll the sources reading it at once. No bearer token.
#[utoipa::path(post, path = "/api/v1/gitops/webhooks/{repository}",
    params(("repository" = String, Path, description = "repository name")),
    request_body(content = String, description = "the forge's event, as sent", content_type = "application/json"),
    responses((status = 202, body = WebhookAccepted), (status = 401, body = ApiError), (status = 404, body = ApiError)),
    tag = "gitops")]
pub async fn webhook(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: http::HeaderMap,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<WebhookAccepted>), HttpError> {
    let proof = webhook_proof(&headers);
    let relays = app::gitops::webhook(&state, &name, &proof, &body).await?;
    Ok((StatusCode::ACCEPTED, Json(WebhookAccepted { relays })))
}

/// What a forge's webhook request presents as proof (each forge sends one of these headers).
pub(super) fn webhook_proof(headers: &http::HeaderMap) -> app::webhooks::WebhookProof {
    let header = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    app::webhooks::WebhookProof {
        github: header("x-hub-signature-256"),
        gitea: header("x-gitea-signature").or_else(|| header("x-gogs-signature")),
        gitlab: header("x-gitlab-token"),
    }
}

/// A webhook's answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct WebhookAccepted {
    /// How many relays were told to poll.
    pub relays: usize,
}
