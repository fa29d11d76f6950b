//! `POST/GET /api/v1/oauth/clients`: admins register OAuth clients. A confidential client's
//! secret is generated here and shown once.

use crate::api::Auth;
use crate::error::{ApiResult, Json};
use crate::state::AppState;
use crate::store::oauth::{NewOAuthClient, OAuthClientRow};
use axum::extract::State;
use http::StatusCode;
use serde::{Deserialize, Serialize};

/// Body of `POST /api/v1/oauth/clients`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CreateOAuthClient {
    /// Chosen id; generated when absent.
    #[serde(default)]
    pub client_id: Option<String>,
    pub name: String,
    /// Matched exactly against the authorization request's `redirect_uri`.
    pub redirect_uris: Vec<String>,
    /// First-party clients (Warren's own proxy) skip the consent page.
    #[serde(default)]
    pub first_party: bool,
    /// Confidential clients get a secret; public ones rely on PKCE alone.
    #[serde(default = "yes")]
    pub confidential: bool,
}

fn yes() -> bool {
    true
}

/// A client as the API shows it (never its secret).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct OAuthClient {
    pub client_id: String,
    pub name: String,
    pub redirect_uris: Vec<String>,
    pub first_party: bool,
    pub confidential: bool,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

impl From<&OAuthClientRow> for OAuthClient {
    fn from(c: &OAuthClientRow) -> Self {
        OAuthClient {
            client_id: c.client_id.clone(),
            name: c.name.clone(),
            redirect_uris: c.redirect_uris.clone(),
            first_party: c.first_party,
            confidential: c.confidential(),
            created_at: crate::db::from_millis(c.created_at),
        }
    }
}

/// 201 answer: the client and, for a confidential one, its secret (shown once).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct CreatedOAuthClient {
    pub client: OAuthClient,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
}

pub async fn create(
    State(state): State<AppState>,
    auth: Auth,
    Json(req): Json<CreateOAuthClient>,
) -> ApiResult<(StatusCode, Json<CreatedOAuthClient>)> {
    auth.require_admin()?;
    let secret = req
        .confidential
        .then(|| format!("wrn_cs_{}", crate::crypto::random_secret(32)));
    let new = NewOAuthClient {
        client_id: req
            .client_id
            .unwrap_or_else(|| format!("wrn_client_{}", crate::crypto::random_secret(9))),
        name: req.name,
        redirect_uris: req.redirect_uris,
        first_party: req.first_party,
        secret: secret.clone(),
    };
    let row = state
        .store
        .create_oauth_client(&new, state.clock.now_ms())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedOAuthClient {
            client: (&row).into(),
            client_secret: secret,
        }),
    ))
}

pub async fn list(State(state): State<AppState>, auth: Auth) -> ApiResult<Json<Vec<OAuthClient>>> {
    auth.require_admin()?;
    let rows = state.store.list_oauth_clients().await?;
    Ok(Json(rows.iter().map(OAuthClient::from).collect()))
}
