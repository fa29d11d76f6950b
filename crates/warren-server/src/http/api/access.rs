//! `GET /api/v1/access`: how users reach workspaces besides the API (the proxy's SSH
//! address), for `warren ws ssh` and `warren ws ssh-config`.

use super::Auth;
use crate::http::error::Json;
use crate::http::HttpState;
use axum::extract::State;
use warren_types::api::AccessInfo;

/// How to reach workspaces from outside (any authenticated user).
#[utoipa::path(get, path = "/api/v1/access", responses((status = 200, body = AccessInfo)), tag = "access",
    security(("bearer" = [])))]
pub async fn access_info(State(state): State<HttpState>, _auth: Auth) -> Json<AccessInfo> {
    Json((*state.access).clone())
}
