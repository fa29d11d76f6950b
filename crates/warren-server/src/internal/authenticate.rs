//! `POST /internal/agents/authenticate`: the relay checks an agent token.

use super::jwt;
use crate::error::{HttpError, Json};
use crate::state::AppState;
use axum::extract::State;
use http::HeaderMap;
use warren_types::internal::{AuthenticateAgentRequest, AuthenticateAgentResponse};
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};

/// Checks the relay's JWT; returns its claims.
pub fn check_relay(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<warren_types::internal::InternalClaims, HttpError> {
    let token = jwt::bearer(headers).ok_or_else(|| HttpError::unauthorized(jwt::MISSING_BEARER))?;
    // Internal JWTs are about wall-clock time between processes, not the server's clock seam.
    jwt::verify(
        &state.relay_secret,
        token,
        RELAY_JWT_ISSUER,
        SERVER_JWT_AUDIENCE,
        warren_jwt::now_secs(),
    )
    .map_err(|e| HttpError::unauthorized(crate::render::error_chain(&e)))
}

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(req): Json<AuthenticateAgentRequest>,
) -> Result<Json<AuthenticateAgentResponse>, HttpError> {
    check_relay(&state, &headers)?;
    match state.store.authenticate_agent(&req.token).await? {
        Some(a) => Ok(Json(AuthenticateAgentResponse {
            agent_id: a.id,
            agent_name: a.name,
        })),
        None => Err(HttpError::unauthorized("agent token is not valid")),
    }
}
