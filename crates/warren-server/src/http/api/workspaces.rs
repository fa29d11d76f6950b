//! Workspaces: create, list, get, change desired state, resize, terminate, read output and
//! the startup's status —
//! each handler one call into `crate::app::workspaces`.

use super::Auth;
use crate::app::workspaces::{self, Logs, LogsRequest};
use crate::app::AppState;
use crate::http::error::{HttpError, Json, Path, Query};
use axum::extract::State;
use axum::response::IntoResponse;
use futures::StreamExt;
use http::StatusCode;
use serde::Deserialize;
use warren_types::api::{
    ApiError, CommandRunEvent, CreateWorkspaceRequest, Page, RebuildOutcome,
    RebuildWorkspaceRequest, ResizeWorkspaceRequest, UpdateDesiredStateRequest, Workspace,
    WorkspaceListQuery,
};
use warren_types::startup::WorkspaceStartup;

#[utoipa::path(get, path = "/api/v1/workspaces", params(WorkspaceListQuery),
    responses((status = 200, body = Page<Workspace>), (status = 400, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<AppState>,
    Auth(who): Auth,
    Query(q): Query<WorkspaceListQuery>,
) -> Result<Json<Page<Workspace>>, HttpError> {
    Ok(Json(workspaces::list(&state, &who, &q).await?))
}

#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}",
    params(("workspace" = String, Path, description = "workspace name or id"), GetQuery),
    responses((status = 200, body = Workspace), (status = 404, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn get_one(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Query(q): Query<GetQuery>,
) -> Result<Json<Workspace>, HttpError> {
    let w = match q.watch_version {
        Some(v) => {
            workspaces::watch(&state, &who, &key, v, q.timeout_seconds.unwrap_or(30)).await?
        }
        None => workspaces::get(&state, &who, &key).await?,
    };
    Ok(Json(w))
}

/// Query of `GET /api/v1/workspaces/{workspace}`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct GetQuery {
    /// Wait until the workspace's `version` differs from this one (answering at once if it
    /// already does), then answer; a push for clients waiting on a change.
    pub watch_version: Option<i64>,
    /// With `watch_version`: answer with the workspace as it is after this many seconds,
    /// 1–60 (default 30), if nothing changed.
    #[param(minimum = 1, maximum = 60)]
    pub timeout_seconds: Option<u64>,
}

#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/desired_state",
    params(("workspace" = String, Path, description = "workspace name or id")),
    request_body = UpdateDesiredStateRequest,
    responses((status = 200, body = Workspace), (status = 400, body = ApiError),
    (status = 403, description = "a viewer of its space: using it needs more", body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn set_desired_state(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<UpdateDesiredStateRequest>,
) -> Result<Json<Workspace>, HttpError> {
    let w = workspaces::set_desired_state(&state, &who, &key, req.desired_state).await?;
    Ok(Json(w))
}

/// Asks for `Terminated`: the agent deletes everything, volume included. Repeating it is harmless.
#[utoipa::path(delete, path = "/api/v1/workspaces/{workspace}",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = Workspace),
    (status = 403, description = "a developer or viewer of its space: terminating needs more", body = ApiError),
    (status = 404, body = ApiError)), tag = "workspaces",
    security(("bearer" = [])))]
pub async fn terminate(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<(StatusCode, Json<Workspace>), HttpError> {
    let w = workspaces::terminate(&state, &who, &key).await?;
    Ok((StatusCode::OK, Json(w)))
}

/// Creates a workspace from the request's devfile, else the project's stored one, else the
/// one at `devfile_path` in the project's repository at the workspace's ref (read with the
/// project's credential), else (without a project) the server's default; renders its
/// objects and asks for `Running`.
#[utoipa::path(post, path = "/api/v1/workspaces", request_body = CreateWorkspaceRequest,
    responses((status = 201, body = Workspace), (status = 400, body = ApiError), (status = 403, body = ApiError),
    (status = 409, body = ApiError), (status = 422, body = ApiError, description = "The devfile (given, stored, or read from the project's repository) cannot be used, or the repository refused the project's credential"),
    (status = 502, body = ApiError, description = "The project's repository could not be reached"),
    (status = 503, body = ApiError, description = "The server cannot read repositories (git is missing)")),
    tag = "workspaces", security(("bearer" = [])))]
pub async fn create(
    State(state): State<AppState>,
    Auth(who): Auth,
    Json(req): Json<CreateWorkspaceRequest>,
) -> Result<(StatusCode, Json<Workspace>), HttpError> {
    let w = workspaces::create(&state, &who, &req).await?;
    Ok((StatusCode::CREATED, Json(w)))
}

/// Resizes a workspace: re-renders its objects with the new size and restarts it (desired
/// `RestartRequested` when it was `Running`), keeping its volume. A field left out keeps
/// the size asked for earlier. A stopped workspace keeps
/// `Stopped` and starts with the new size next time.
#[utoipa::path(put, path = "/api/v1/workspaces/{workspace}/resources",
    params(("workspace" = String, Path, description = "workspace name or id")),
    request_body = ResizeWorkspaceRequest,
    responses((status = 200, body = Workspace), (status = 400, body = ApiError),
    (status = 403, description = "a developer or viewer of its space: resizing needs more", body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError), (status = 422, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn resize(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<ResizeWorkspaceRequest>,
) -> Result<Json<Workspace>, HttpError> {
    Ok(Json(workspaces::resize(&state, &who, &key, &req).await?))
}

/// Rebuilds a workspace from its definition as it is now (the body's devfile, else its
/// project's at the workspace's ref, else the one it was made from), keeping its volume and
/// home, and restarts it when it runs. The answer lists what changed; with `dry_run` nothing
/// is applied. A definition that does not validate or render is refused (422) and the
/// workspace is left as it was.
#[utoipa::path(post, path = "/api/v1/workspaces/{workspace}/rebuild",
    params(("workspace" = String, Path, description = "workspace name or id")),
    request_body = RebuildWorkspaceRequest,
    responses((status = 200, body = RebuildOutcome), (status = 400, body = ApiError),
    (status = 403, description = "a developer or viewer of its space: rebuilding needs more", body = ApiError), (status = 404, body = ApiError),
    (status = 409, body = ApiError), (status = 422, description = "the definition does not validate, the agent does not allow it, or the project's repository cannot be read", body = ApiError)),
    tag = "workspaces", security(("bearer" = [])))]
pub async fn rebuild(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Json(req): Json<RebuildWorkspaceRequest>,
) -> Result<Json<RebuildOutcome>, HttpError> {
    Ok(Json(workspaces::rebuild(&state, &who, &key, &req).await?))
}

/// Query of `GET /api/v1/workspaces/{workspace}/logs`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct LogsQuery {
    /// The last this many lines, 1–10000 (default 200).
    pub tail: Option<u32>,
    /// The container, by its devfile component name (default: the main one).
    pub container: Option<String>,
    /// Keep the answer open and send what the container writes next, until it stops.
    pub follow: Option<bool>,
}

/// The recent output (stdout and stderr) of a container of the workspace, as text; also
/// when it stopped or keeps failing to start. Fetched from the runtime through the relay.
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/logs",
    params(("workspace" = String, Path, description = "workspace name or id"), LogsQuery),
    responses((status = 200, description = "the output, text/plain", content_type = "text/plain"),
    (status = 400, body = ApiError), (status = 403, description = "a viewer of its space: logs need more", body = ApiError),
    (status = 404, body = ApiError), (status = 502, body = ApiError),
    (status = 503, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn logs(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
    Query(q): Query<LogsQuery>,
) -> Result<axum::response::Response, HttpError> {
    let q = LogsRequest {
        tail: q.tail,
        container: q.container,
        follow: q.follow.unwrap_or(false),
    };
    let text_plain = [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    Ok(match workspaces::logs(&state, &who, &key, &q).await? {
        Logs::Text(text) => (text_plain, text).into_response(),
        // Streamed as it comes; dropping the answer (the client left) closes the relay stream.
        Logs::Stream(io) => {
            let body = axum::body::Body::from_stream(tokio_util::io::ReaderStream::new(io));
            (text_plain, body).into_response()
        }
    })
}

/// How the startup of the workspace's main container went — the clone, the `postStart`
/// commands, a dev container's lifecycle commands — as its own output says: `starting` with the
/// step under way, `ready` (a dev container's `waitFor` reached), `done`, or `failed` with the
/// step and its exit code; `unknown` when it is not Running or its output does not say.
#[utoipa::path(get, path = "/api/v1/workspaces/{workspace}/startup",
    params(("workspace" = String, Path, description = "workspace name or id")),
    responses((status = 200, body = WorkspaceStartup),
    (status = 403, description = "a viewer of its space: the startup needs the right to read its logs", body = ApiError),
    (status = 404, body = ApiError), (status = 502, body = ApiError),
    (status = 503, body = ApiError)), tag = "workspaces", security(("bearer" = [])))]
pub async fn startup(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(key): Path<String>,
) -> Result<Json<WorkspaceStartup>, HttpError> {
    Ok(Json(workspaces::startup(&state, &who, &key).await?))
}

/// Runs a command of the workspace's devfile (exec, apply, or a composite of them) and
/// streams what happens as newline-delimited JSON events (`CommandRunEvent`): each step's
/// start, output and end, then `done` with the exit code. Leaving closes the session and
/// stops the command. Only the workspace's owner may run commands; it must be Running.
#[utoipa::path(post, path = "/api/v1/workspaces/{workspace}/commands/{command}/run",
    params(("workspace" = String, Path, description = "workspace name or id"),
        ("command" = String, Path, description = "the devfile's command id")),
    responses((status = 200, description = "one CommandRunEvent per line", body = CommandRunEvent, content_type = "application/x-ndjson"),
    (status = 403, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)),
    tag = "workspaces", security(("bearer" = [])))]
pub async fn run_command(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path((key, command)): Path<(String, String)>,
) -> Result<axum::response::Response, HttpError> {
    let rx = crate::app::commands::run(&state, &who, &key, &command).await?;
    let lines = tokio_stream::wrappers::ReceiverStream::new(rx).map(|event| {
        // Events are plain data: serialising them cannot fail.
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(line))
    });
    Ok((
        [(http::header::CONTENT_TYPE, "application/x-ndjson")],
        axum::body::Body::from_stream(lines),
    )
        .into_response())
}
