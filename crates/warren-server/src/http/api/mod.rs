//! The JSON adapter of the REST API under `/api/v1`: each handler parses the request, calls
//! one domain function (`crate::app`) and maps its answer. Authentication is the [`Auth`]
//! extractor; authorisation is the domain's.

pub mod access;
pub mod agents;
pub mod audit;
pub mod gitops;
pub mod groups;
pub mod mounts;
pub mod ports;
pub mod projects;
pub mod secrets;
pub mod spaces;
pub mod usage;
pub mod users;
pub mod workspaces;

use super::error::HttpError;
use crate::app::auth::{self, Access};
use crate::app::Principal;
use axum::extract::FromRequestParts;
use axum::routing::{delete, get, post, put};
use axum::Router;
use http::request::Parts;
use http::Method;

/// Largest request body accepted, in bytes.
pub const BODY_LIMIT: usize = 4 * 1024 * 1024;

/// The authenticated caller of a REST route: the bearer token, checked by the domain for
/// the scope the method needs (reads: `api` or `read_api`; writes: `api`).
#[derive(Debug, Clone)]
pub struct Auth(pub Principal);

impl FromRequestParts<crate::http::HttpState> for Auth {
    type Rejection = HttpError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::http::HttpState,
    ) -> Result<Self, Self::Rejection> {
        let access = if parts.method == Method::GET || parts.method == Method::HEAD {
            Access::Read
        } else {
            Access::Write
        };
        let bearer = crate::relay::jwt::bearer(&parts.headers);
        Ok(Auth(auth::api_principal(&state.app, bearer, access).await?))
    }
}

pub fn router() -> Router<crate::http::HttpState> {
    let v1 = Router::new()
        .route("/session", post(users::create_session))
        .route("/users/me", get(users::me))
        .route("/access", get(access::access_info))
        .route("/proxy/cookie-keys/rotate", post(access::rotate_cookie_key))
        .route("/proxies", get(access::proxies))
        .route("/regions", get(access::regions))
        .route(
            "/regions/{name}",
            put(access::set_region).delete(access::delete_region),
        )
        .route("/users", get(users::list_users).post(users::create_user))
        .route("/audit", get(audit::list))
        .route("/audit/verify", post(audit::verify))
        .route("/users/me/password", post(users::change_password))
        .route(
            "/users/me/dotfiles",
            put(users::set_dotfiles).delete(users::delete_dotfiles),
        )
        .route(
            "/users/me/working-hours",
            put(users::set_working_hours).delete(users::delete_working_hours),
        )
        .route("/users/me/secrets", get(secrets::list))
        .route(
            "/users/me/secrets/{name}",
            put(secrets::set).delete(secrets::delete),
        )
        .route("/users/me/profile", put(secrets::set_profile))
        .route(
            "/users/me/git-credentials",
            get(secrets::list_git_credentials).post(secrets::set_git_credential),
        )
        .route(
            "/users/me/git-credentials/{id}",
            delete(secrets::delete_git_credential),
        )
        .route(
            "/users/{user}",
            get(users::get_user)
                .patch(users::update_user)
                .delete(users::delete_user),
        )
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
        .route(
            "/agents/{agent}",
            get(agents::get_one)
                .put(agents::update)
                .delete(agents::delete_one),
        )
        .route("/agents/{agent}/token", post(agents::reset_token))
        .route(
            "/agents/{agent}/gitops",
            get(gitops::agent_gitops).put(gitops::set_agent_gitops),
        )
        .route("/agents/{agent}/gitops/status", get(gitops::agent_status))
        .route(
            "/gitops/repositories",
            get(gitops::list_repositories).post(gitops::create_repository),
        )
        .route(
            "/gitops/repositories/{repository}",
            get(gitops::get_repository).delete(gitops::delete_repository),
        )
        .route(
            "/gitops/repositories/{repository}/credential",
            put(gitops::set_credential).delete(gitops::delete_credential),
        )
        .route(
            "/gitops/repositories/{repository}/webhook_secret",
            put(gitops::set_webhook_secret).delete(gitops::delete_webhook_secret),
        )
        .route(
            "/gitops/policy",
            get(gitops::policy).put(gitops::set_policy),
        )
        .route("/gitops/webhooks/{repository}", post(gitops::webhook))
        .route("/spaces", get(spaces::list).post(spaces::create))
        .route("/tree", get(spaces::tree))
        .route("/mounts", get(mounts::list).post(mounts::create))
        .route(
            "/mounts/{mount}",
            get(mounts::get_one).delete(mounts::delete_one),
        )
        .route("/workspaces/{workspace}/grants", get(mounts::grants))
        .route(
            "/workspaces/{workspace}/grants/{user}",
            put(mounts::grant).delete(mounts::revoke),
        )
        .route(
            "/spaces/{space}",
            get(spaces::get_one).delete(spaces::delete_one),
        )
        .route("/spaces/{space}/members", get(spaces::members))
        .route(
            "/spaces/{space}/members/{user}",
            put(spaces::set_member).delete(spaces::remove_member),
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
        .route("/workspaces/{workspace}/rebuild", post(workspaces::rebuild))
        .route("/workspaces/{workspace}/ports", get(ports::list))
        .route("/workspaces/{workspace}/ports/{port}", put(ports::set))
        .route(
            "/workspaces/{workspace}/ports/{port}/share-links",
            post(ports::create_link),
        )
        .route("/workspaces/{workspace}/share-links", get(ports::links))
        .route(
            "/workspaces/{workspace}/share-links/{id}",
            delete(ports::revoke_link),
        )
        .route("/workspaces/{workspace}/logs", get(workspaces::logs))
        .route("/workspaces/{workspace}/startup", get(workspaces::startup))
        .route(
            "/workspaces/{workspace}/commands/{command}/run",
            post(workspaces::run_command),
        )
        .route("/openapi.json", get(super::openapi::serve));
    let v1 = governance_routes(project_routes(v1));
    Router::new().nest(warren_types::api::API_PREFIX, v1)
}

/// Groups, usage and budgets (issue 44).
fn governance_routes(v1: Router<crate::http::HttpState>) -> Router<crate::http::HttpState> {
    v1.route("/spaces/{space}/groups", get(groups::space_roles))
        .route(
            "/spaces/{space}/groups/{group}",
            put(groups::set_space_role).delete(groups::remove_space_role),
        )
        .route("/groups", get(groups::list).post(groups::create))
        .route(
            "/groups/{group}",
            get(groups::get_one).delete(groups::delete_one),
        )
        .route(
            "/groups/{group}/members/{user}",
            put(groups::add_member).delete(groups::remove_member),
        )
        .route("/usage", get(usage::report))
        .route(
            "/spaces/{space}/budget",
            get(usage::budgets)
                .put(usage::set_budget)
                .delete(usage::remove_budget),
        )
}

/// The projects' routes (their members, credential and prebuilds).
fn project_routes(v1: Router<crate::http::HttpState>) -> Router<crate::http::HttpState> {
    v1.route("/projects", get(projects::list).post(projects::create))
        .route(
            "/projects/{project}",
            get(projects::get_one)
                .patch(projects::update)
                .delete(projects::delete_one),
        )
        .route(
            "/projects/{project}/credential",
            put(projects::set_credential).delete(projects::delete_credential),
        )
        .route("/projects/{project}/members", get(projects::members))
        .route(
            "/projects/{project}/prebuilds",
            get(projects::prebuilds).post(projects::prebuild),
        )
        .route(
            "/projects/{project}/prebuilds/settings",
            put(projects::prebuilds_on).delete(projects::prebuilds_off),
        )
        // PUT and DELETE set its secret (maintainers); POST is the forge's push, proved by
        // its signature alone.
        .route(
            "/projects/{project}/prebuilds/webhook",
            put(projects::set_prebuild_webhook_secret)
                .delete(projects::delete_prebuild_webhook_secret)
                .post(projects::prebuild_webhook),
        )
        .route(
            "/projects/{project}/members/{user}",
            put(projects::set_member).delete(projects::remove_member),
        )
}
