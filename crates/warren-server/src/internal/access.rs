//! The proxy's internal endpoints (access.md): may a user reach a workspace port, may an
//! SSH key or token open a workspace, and activity reports for the idle policy.
//!
//! Only the owner may reach a workspace — admins included get 404, as access.md says
//! ("only the workspace's owner"); admins manage workspaces through the API instead.
//! Every refusal (unknown workspace, another user, undeclared port, terminated workspace,
//! bad token) is the same 404, so the answer never tells whether a workspace exists.

use super::jwt;
use crate::error::{HttpError, Json, Query};
use crate::state::AppState;
use crate::store::workspaces::WorkspaceRow;
use axum::extract::State;
use http::{HeaderMap, StatusCode};
use warren_types::api::TokenScope;
use warren_types::internal::{
    ActivityReport, InternalClaims, SshAuthorization, SshAuthorizeQuery, WorkspaceAccess,
    WorkspaceAccessQuery, WorkspaceStartRequest, PROXY_JWT_ISSUER,
};
use warren_types::reconcile::SERVER_JWT_AUDIENCE;
use warren_types::{ActualState, DesiredState, UserId};

/// Most workspaces one activity report may carry.
const MAX_ACTIVITY_ITEMS: usize = 10_000;

/// Checks the proxy's JWT (issuer `warren-proxy`, audience `warren-server`, ≤ 30 s).
pub fn check_proxy(state: &AppState, headers: &HeaderMap) -> Result<InternalClaims, HttpError> {
    let token = jwt::bearer(headers).ok_or_else(|| HttpError::unauthorized(jwt::MISSING_BEARER))?;
    // Internal JWTs are about wall-clock time between processes, not the server's clock seam.
    jwt::verify(
        &state.relay_secret,
        token,
        PROXY_JWT_ISSUER,
        SERVER_JWT_AUDIENCE,
        warren_jwt::now_secs(),
    )
    .map_err(|e| HttpError::unauthorized(crate::render::error_chain(&e)))
}

fn hidden() -> HttpError {
    HttpError::not_found("workspace")
}

/// The declared (public) ports of a workspace, from the URLs its render produced:
/// `{scheme}://{port}-{name}.{domain}/…`.
pub fn declared_ports(w: &WorkspaceRow) -> Vec<u16> {
    let prefix_end = format!("-{}.", w.name);
    w.endpoints
        .values()
        .filter_map(|u| url::Url::parse(u).ok())
        .filter_map(|u| {
            let host = u.host_str()?.to_owned();
            let i = host.find(&prefix_end)?;
            host[..i].parse::<u16>().ok()
        })
        .collect()
}

fn reachable(w: &WorkspaceRow) -> bool {
    w.desired_state != DesiredState::Terminated && w.actual_state != ActualState::Terminated
}

/// The user a presented personal access token stands for, if it is valid and has the
/// `workspace` scope. A valid token without that scope is told so (403, before any
/// workspace is looked at, so the answer says nothing about one): the usual mistake is an
/// `api` token, `warren token create`'s default.
async fn token_user(state: &AppState, secret: &str) -> Result<Option<UserId>, HttpError> {
    let now = state.clock.now_ms();
    match state.store.authenticate_token(secret, now).await? {
        Some(t) if t.has_scope(TokenScope::Workspace) => Ok(Some(t.user_id)),
        Some(_) => Err(HttpError::new(
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "this token lacks the `workspace` scope that workspace URLs need; create one with \
             `warren token create NAME --scope workspace`",
        )),
        None => Ok(None),
    }
}

/// `GET /internal/workspaces/access?host=&port=&user=|bearer=`
pub async fn access(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WorkspaceAccessQuery>,
) -> Result<Json<WorkspaceAccess>, HttpError> {
    check_proxy(&state, &headers)?;
    let user = match (q.user, q.bearer.as_deref()) {
        (Some(u), None) => u,
        (None, Some(b)) => token_user(&state, b).await?.ok_or_else(hidden)?,
        _ => {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "query string: exactly one of `user` and `bearer` is required",
            ))
        }
    };
    let w = state
        .store
        .workspace_by_name(&q.host)
        .await?
        .ok_or_else(hidden)?;
    if w.owner_id != user
        || !reachable(&w)
        || q.port.is_some_and(|p| !declared_ports(&w).contains(&p))
    {
        return Err(hidden());
    }
    Ok(Json(WorkspaceAccess {
        allowed: true,
        workspace_id: w.id,
        workspace_name: w.name,
        agent_id: w.agent_id,
        namespace: w.namespace,
        port: q.port,
        desired_state: w.desired_state,
        actual_state: w.actual_state,
        user_id: user,
    }))
}

/// Attempts of the optimistic desired-state write before giving up with 409.
const START_ATTEMPTS: usize = 20;

/// `POST /internal/workspaces/start`: the stopped-workspace page's start button, on the
/// owner's behalf. The same lifecycle rules as `PUT …/desired_state` apply (a terminated
/// workspace answers 409 naming its state); anyone but the owner gets the usual 404.
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(req): Json<WorkspaceStartRequest>,
) -> Result<Json<WorkspaceAccess>, HttpError> {
    check_proxy(&state, &headers)?;
    for _ in 0..START_ATTEMPTS {
        let w = state
            .store
            .workspace_by_id(req.workspace_id)
            .await?
            .filter(|w| w.owner_id == req.user_id)
            .ok_or_else(hidden)?;
        crate::lifecycle::check_desired_state_request(
            &w.name,
            w.desired_state,
            w.actual_state,
            DesiredState::Running,
        )?;
        let written = w.desired_state == DesiredState::Running
            || state
                .store
                .set_desired_state(w.id, w.version, DesiredState::Running, state.clock.now_ms())
                .await?
                .is_some();
        if !written {
            continue;
        }
        if w.desired_state != DesiredState::Running {
            state.signals.notify(w.agent_id);
        }
        let w = state
            .store
            .workspace_by_id(w.id)
            .await?
            .ok_or_else(hidden)?;
        return Ok(Json(WorkspaceAccess {
            allowed: true,
            workspace_id: w.id,
            workspace_name: w.name,
            agent_id: w.agent_id,
            namespace: w.namespace,
            port: None,
            desired_state: w.desired_state,
            actual_state: w.actual_state,
            user_id: req.user_id,
        }));
    }
    Err(HttpError::conflict(
        "conflict",
        "the workspace changed too often while starting it; try again",
    ))
}

/// `POST /internal/workspaces/activity` → 204.
pub async fn activity(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(report): Json<ActivityReport>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    if report.workspaces.len() > MAX_ACTIVITY_ITEMS {
        return Err(HttpError::invalid_field(
            "workspaces",
            format!("at most {MAX_ACTIVITY_ITEMS} entries per report"),
        ));
    }
    let items: Vec<_> = report
        .workspaces
        .iter()
        .map(|a| (a.workspace_id, a.last_activity_ms))
        .collect();
    state
        .store
        .record_activity(&items, state.clock.now_ms())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /internal/ssh/authorize?username=<workspace>&public_key_fingerprint=|token=`
pub async fn ssh_authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SshAuthorizeQuery>,
) -> Result<Json<SshAuthorization>, HttpError> {
    check_proxy(&state, &headers)?;
    let user = match (q.public_key_fingerprint.as_deref(), q.token.as_deref()) {
        (Some(fp), None) => state
            .store
            .ssh_key_by_fingerprint(fp)
            .await?
            .map(|k| k.user_id)
            .ok_or_else(hidden)?,
        (None, Some(t)) => token_user(&state, t).await?.ok_or_else(hidden)?,
        _ => {
            return Err(HttpError::new(
                StatusCode::BAD_REQUEST,
                "invalid_query",
                "query string: exactly one of `public_key_fingerprint` and `token` is required",
            ))
        }
    };
    let w = state
        .store
        .workspace_by_name(&q.username)
        .await?
        .ok_or_else(hidden)?;
    if w.owner_id != user || !reachable(&w) {
        return Err(hidden());
    }
    Ok(Json(SshAuthorization {
        user_id: user,
        username: w.owner_username,
        workspace_id: w.id,
        workspace_name: w.name,
        agent_id: w.agent_id,
        namespace: w.namespace,
        desired_state: w.desired_state,
        actual_state: w.actual_state,
    }))
}
