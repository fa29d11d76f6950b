//! The OpenAPI document of `/api/v1`, served at `/api/v1/openapi.json`.

use super::api;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Warren API", description = "Warren's REST API: users, tokens, SSH keys, agents, projects, workspaces."),
    paths(
        api::users::create_session,
        api::users::me,
        api::access::access_info,
        api::users::list_users,
        api::users::create_user,
        api::users::list_tokens,
        api::users::create_token,
        api::users::revoke_token,
        api::users::list_ssh_keys,
        api::users::add_ssh_key,
        api::users::delete_ssh_key,
        api::agents::list,
        api::agents::create,
        api::agents::get_one,
        api::agents::update,
        api::projects::list,
        api::projects::create,
        api::projects::get_one,
        api::projects::delete_one,
        api::workspaces::list,
        api::workspaces::create,
        api::workspaces::resize,
        api::workspaces::logs,
        api::workspaces::get_one,
        api::workspaces::set_desired_state,
        api::workspaces::terminate,
    ),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("wrn_pat_…")
                    .build(),
            ),
        );
    }
}

/// The document as JSON text (pretty, stable key order from utoipa's maps).
pub fn document() -> String {
    ApiDoc::openapi().to_pretty_json().unwrap_or_default()
}

pub async fn serve() -> impl IntoResponse {
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        document(),
    )
}
