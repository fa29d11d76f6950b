//! `GET /api/v1/access`: how users reach workspaces besides the API (the proxy's SSH
//! address), for `warren ws ssh` and `warren ws ssh-config`; the proxies' key rotation; and
//! which proxies serve which region.

use super::Auth;
use crate::app::AppState;
use crate::http::error::HttpError;
use crate::http::error::Json;
use crate::http::HttpState;
use axum::extract::State;
use warren_types::api::{AccessInfo, ProxyKeyRotation, RegionProxy};

/// How to reach workspaces from outside (any authenticated user).
#[utoipa::path(get, path = "/api/v1/access", responses((status = 200, body = AccessInfo)), tag = "access",
    security(("bearer" = [])))]
pub async fn access_info(State(state): State<HttpState>, _auth: Auth) -> Json<AccessInfo> {
    Json(state.access_info().await)
}

/// Rotates the proxies' cookie-signing key (admins only). Every replica learns the new key
/// before it signs with it; sessions signed with the previous key stay valid for one session
/// lifetime after that.
#[utoipa::path(post, path = "/api/v1/proxy/cookie-keys/rotate",
    responses((status = 200, body = ProxyKeyRotation), (status = 403, body = warren_types::api::ApiError)),
    tag = "access", security(("bearer" = [])))]
pub async fn rotate_cookie_key(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<ProxyKeyRotation>, HttpError> {
    Ok(Json(crate::app::proxy_keys::rotate(&state, &who).await?))
}

/// Every proxy seen in the last day: its region, where it serves, and whether it serves now
/// (admins only).
#[utoipa::path(get, path = "/api/v1/proxies",
    responses((status = 200, body = Vec<RegionProxy>), (status = 403, body = warren_types::api::ApiError)),
    tag = "access", security(("bearer" = [])))]
pub async fn proxies(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<RegionProxy>>, HttpError> {
    Ok(Json(crate::app::regions::list(&state, &who).await?))
}
