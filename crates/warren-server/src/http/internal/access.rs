//! The proxy's internal endpoints (access.md), each answered by `crate::app::access` after
//! the proxy's JWT is checked.

use crate::app::{access, auth, AppState};
use crate::http::error::{HttpError, InternalJson, Json, Query};
use axum::extract::State;
use http::{HeaderMap, StatusCode};
use warren_types::internal::{
    ActivityReport, EntryRedirect, HandoffUse, ProxyKeyOffer, ProxyKeys, ProxyLeaving,
    ProxyPresence, ShareRedeemRequest, ShareRedemption, SshAuthorization, SshAuthorizeQuery,
    WorkspaceAccess, WorkspaceAccessQuery, WorkspaceStartRequest,
};

fn check_proxy(state: &AppState, headers: &HeaderMap) -> Result<(), HttpError> {
    auth::proxy(state, crate::relay::jwt::bearer(headers))?;
    Ok(())
}

/// `GET /internal/workspaces/access?host=&port=&user=|bearer=`
pub async fn access(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WorkspaceAccessQuery>,
) -> Result<Json<WorkspaceAccess>, HttpError> {
    check_proxy(&state, &headers)?;
    // The proxy names its client: the audit log records a refused token from there.
    let origin = crate::trace::Origin {
        addr: q.source,
        channel: crate::trace::Channel::Proxy,
    };
    Ok(Json(
        crate::trace::with_origin(origin, access::workspace(&state, &q)).await?,
    ))
}

/// `POST /internal/workspaces/start`: the stopped-workspace page's start button.
pub async fn start(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<WorkspaceStartRequest>,
) -> Result<Json<WorkspaceAccess>, HttpError> {
    check_proxy(&state, &headers)?;
    Ok(Json(access::start(&state, &req).await?))
}

/// `POST /internal/workspaces/activity` → 204.
pub async fn activity(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(report): InternalJson<ActivityReport>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    access::record_activity(&state, &report).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /internal/sessions` → 204: terminals and SSH sessions a proxy opened and closed.
pub async fn sessions(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(report): InternalJson<warren_types::internal::SessionReport>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    crate::app::audit::sessions(&state, &report).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /internal/ssh/authorize?username=<workspace>&public_key_fingerprint=|token=`
pub async fn ssh_authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<SshAuthorizeQuery>,
) -> Result<Json<SshAuthorization>, HttpError> {
    check_proxy(&state, &headers)?;
    // The proxy names its client: the audit log records a refusal from there.
    let origin = crate::trace::Origin {
        addr: q.source,
        channel: crate::trace::Channel::Ssh,
    };
    Ok(Json(
        crate::trace::with_origin(origin, access::ssh(&state, &q)).await?,
    ))
}

/// `GET /internal/entries/redirect?host=&user=|bearer=`: where a redirect mount leads.
pub async fn redirect(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<WorkspaceAccessQuery>,
) -> Result<Json<EntryRedirect>, HttpError> {
    check_proxy(&state, &headers)?;
    Ok(Json(access::redirect(&state, &q).await?))
}

/// `POST /internal/share-links/redeem`: a share link's secret, brought to the host it opens.
pub async fn redeem_share(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<ShareRedeemRequest>,
) -> Result<Json<ShareRedemption>, HttpError> {
    check_proxy(&state, &headers)?;
    Ok(Json(crate::app::ports::redeem(&state, &req).await?))
}

/// `POST /internal/proxy/keys`: a starting proxy's offer; the keys every replica shares.
pub async fn adopt_keys(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(offer): InternalJson<ProxyKeyOffer>,
) -> Result<Json<ProxyKeys>, HttpError> {
    check_proxy(&state, &headers)?;
    Ok(Json(crate::app::proxy_keys::adopt(&state, &offer).await?))
}

/// `GET /internal/proxy/keys`: the cookie keys, polled by replicas.
pub async fn cookie_keys(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<ProxyKeys>, HttpError> {
    check_proxy(&state, &headers)?;
    Ok(Json(crate::app::proxy_keys::current(&state).await?))
}

/// `POST /internal/proxy/handoffs`: 204 the first time a hand-off is used, 409 after.
pub async fn use_handoff(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(h): InternalJson<HandoffUse>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    if crate::app::proxy_keys::use_handoff(&state, &h).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Ok(StatusCode::CONFLICT)
    }
}

/// `PUT /internal/proxy/presence`: a proxy says it serves, and where.
pub async fn presence(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(p): InternalJson<ProxyPresence>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    crate::app::regions::announce(&state, &p).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `DELETE /internal/proxy/presence?instance=`: a proxy stops serving.
pub async fn leaving(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ProxyLeaving>,
) -> Result<StatusCode, HttpError> {
    check_proxy(&state, &headers)?;
    crate::app::regions::leave(&state, &q.instance).await?;
    Ok(StatusCode::NO_CONTENT)
}
