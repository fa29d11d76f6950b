//! `POST /internal/agents/authenticate`: the relay checks an agent token.

use crate::app::{auth, AppState};
use crate::http::error::{HttpError, InternalJson, Json};
use axum::extract::State;
use http::HeaderMap;
use warren_types::internal::{AuthenticateAgentRequest, AuthenticateAgentResponse};

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    InternalJson(req): InternalJson<AuthenticateAgentRequest>,
) -> Result<Json<AuthenticateAgentResponse>, HttpError> {
    auth::relay(&state, crate::relay::jwt::bearer(&headers))?;
    let a = auth::agent(&state, &req.token).await?;
    Ok(Json(AuthenticateAgentResponse {
        agent_id: a.id,
        agent_name: a.name,
    }))
}
