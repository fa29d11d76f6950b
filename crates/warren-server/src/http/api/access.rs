//! `GET /api/v1/access`: how users reach workspaces besides the API (the proxy's SSH
//! address), for `warren ws ssh` and `warren ws ssh-config`; the proxies' key rotation;
//! which proxies serve which region; and the regions administrators registered.

use super::Auth;
use crate::app::AppState;
use crate::http::error::HttpError;
use crate::http::error::{Json, Path};
use crate::http::HttpState;
use axum::extract::State;
use http::StatusCode;
use warren_types::api::{AccessInfo, ApiError, ProxyKeyRotation, Region, RegionProxy, RegionSpec};

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

/// The registered regions, their doors and whether one of their proxies serves now (admins
/// only).
#[utoipa::path(get, path = "/api/v1/regions",
    responses((status = 200, body = Vec<Region>), (status = 403, body = ApiError)),
    tag = "access", security(("bearer" = [])))]
pub async fn regions(
    State(state): State<AppState>,
    Auth(who): Auth,
) -> Result<Json<Vec<Region>>, HttpError> {
    Ok(Json(crate::app::regions::regions(&state, &who).await?))
}

/// Register a region with its door (workspace domain, scheme, SSH address), or change the
/// door (admins only). A regional proxy's presence switches the region on only while it says
/// exactly this door.
#[utoipa::path(put, path = "/api/v1/regions/{name}", request_body = RegionSpec,
    params(("name" = String, Path, description = "the region's name (the agents' `region`)")),
    responses((status = 200, body = Region), (status = 400, body = ApiError), (status = 403, body = ApiError)),
    tag = "access", security(("bearer" = [])))]
pub async fn set_region(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
    Json(spec): Json<RegionSpec>,
) -> Result<Json<Region>, HttpError> {
    Ok(Json(
        crate::app::regions::register(&state, &who, &name, &spec).await?,
    ))
}

/// Remove a region (admins only): its workspaces are reached through the central proxy at
/// once.
#[utoipa::path(delete, path = "/api/v1/regions/{name}",
    params(("name" = String, Path, description = "the region's name")),
    responses((status = 204), (status = 403, body = ApiError), (status = 404, body = ApiError)),
    tag = "access", security(("bearer" = [])))]
pub async fn delete_region(
    State(state): State<AppState>,
    Auth(who): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, HttpError> {
    crate::app::regions::unregister(&state, &who, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
