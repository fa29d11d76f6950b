//! The REST API under `/api/v1`: bearer-token authentication, scopes, and the routes.

pub mod access;
pub mod agents;
pub mod projects;
pub mod users;
pub mod workspaces;

use crate::error::HttpError;
use crate::state::AppState;
use crate::store::tokens::TokenRow;
use crate::store::users::UserRow;
use axum::extract::FromRequestParts;
use axum::routing::{delete, get, post, put};
use axum::Router;
use http::request::Parts;
use http::Method;
use warren_types::api::TokenScope;

/// Largest request body accepted, in bytes.
pub const BODY_LIMIT: usize = 4 * 1024 * 1024;

/// The authenticated caller of a REST route.
#[derive(Debug, Clone)]
pub struct Auth {
    pub user: UserRow,
    pub token: TokenRow,
}

impl Auth {
    pub fn require_admin(&self) -> Result<(), HttpError> {
        if self.user.is_admin {
            Ok(())
        } else {
            Err(HttpError::forbidden("this action needs an admin account"))
        }
    }
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let secret = crate::internal::jwt::bearer(&parts.headers).ok_or_else(|| {
            HttpError::unauthorized(
                "missing `Authorization: Bearer <personal access token>` header",
            )
        })?;
        let now = state.clock.now_ms();
        let token = state
            .store
            .authenticate_token(secret, now)
            .await?
            .ok_or_else(|| {
                HttpError::unauthorized("the token is not valid, has expired or was revoked")
            })?;
        let user = state
            .store
            .user_by_id(token.user_id)
            .await?
            .ok_or_else(|| HttpError::unauthorized("the token's user no longer exists"))?;
        let read_only = parts.method == Method::GET || parts.method == Method::HEAD;
        let allowed =
            token.has_scope(TokenScope::Api) || (read_only && token.has_scope(TokenScope::ReadApi));
        if !allowed {
            let needed = if read_only {
                "`api` or `read_api`"
            } else {
                "`api`"
            };
            return Err(HttpError::forbidden(format!(
                "this token lacks the {needed} scope this request needs"
            )));
        }
        Ok(Auth { user, token })
    }
}

pub fn router() -> Router<AppState> {
    let v1 = Router::new()
        .route("/session", post(users::create_session))
        .route("/users/me", get(users::me))
        .route("/access", get(access::access_info))
        .route("/users", get(users::list_users).post(users::create_user))
        .route(
            "/users/me/tokens",
            get(users::list_tokens).post(users::create_token),
        )
        .route("/users/me/tokens/{id}", delete(users::revoke_token))
        .route(
            "/users/me/ssh-keys",
            get(users::list_ssh_keys).post(users::add_ssh_key),
        )
        .route("/users/me/ssh-keys/{id}", delete(users::delete_ssh_key))
        .route("/agents", get(agents::list).post(agents::create))
        .route("/agents/{agent}", get(agents::get_one).put(agents::update))
        .route("/projects", get(projects::list).post(projects::create))
        .route(
            "/projects/{project}",
            get(projects::get_one).delete(projects::delete_one),
        )
        .route(
            "/workspaces",
            get(workspaces::list).post(workspaces::create),
        )
        .route(
            "/workspaces/{workspace}",
            get(workspaces::get_one).delete(workspaces::terminate),
        )
        .route(
            "/workspaces/{workspace}/desired_state",
            put(workspaces::set_desired_state),
        )
        .route("/workspaces/{workspace}/resources", put(workspaces::resize))
        .route("/workspaces/{workspace}/logs", get(workspaces::logs))
        .route("/openapi.json", get(crate::openapi::serve));
    Router::new().nest(warren_types::api::API_PREFIX, v1)
}
