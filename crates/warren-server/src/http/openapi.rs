//! The OpenAPI document of `/api/v1`, served at `/api/v1/openapi.json`.

use super::api;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(title = "Warren API", description = "Warren's REST API: users, tokens, SSH keys, OAuth clients, agents, spaces, mounts, projects, workspaces, GitOps, groups, usage, the audit log."),
    paths(
        api::users::create_session,
        api::users::me,
        api::access::access_info,
        api::access::rotate_cookie_key,
        api::access::proxies,
        api::access::regions,
        api::access::set_region,
        api::access::delete_region,
        api::users::list_users,
        api::audit::list,
        api::audit::verify,
        api::users::create_user,
        api::users::get_user,
        api::users::update_user,
        api::users::delete_user,
        api::users::change_password,
        api::users::set_dotfiles,
        api::users::delete_dotfiles,
        api::users::set_working_hours,
        api::users::delete_working_hours,
        api::secrets::list,
        api::secrets::set,
        api::secrets::delete,
        api::secrets::set_profile,
        api::secrets::list_git_credentials,
        api::secrets::set_git_credential,
        api::secrets::delete_git_credential,
        api::users::list_tokens,
        api::users::create_token,
        api::users::revoke_token,
        api::users::list_ssh_keys,
        api::users::add_ssh_key,
        api::users::delete_ssh_key,
        super::oauth::clients::create,
        super::oauth::clients::list,
        super::oauth::clients::delete,
        api::agents::list,
        api::agents::create,
        api::agents::get_one,
        api::agents::update,
        api::agents::delete_one,
        api::agents::reset_token,
        api::gitops::agent_gitops,
        api::gitops::set_agent_gitops,
        api::gitops::agent_status,
        api::gitops::list_repositories,
        api::gitops::create_repository,
        api::gitops::get_repository,
        api::gitops::delete_repository,
        api::gitops::set_credential,
        api::gitops::delete_credential,
        api::gitops::set_webhook_secret,
        api::gitops::delete_webhook_secret,
        api::gitops::policy,
        api::gitops::set_policy,
        api::gitops::webhook,
        api::spaces::list,
        api::spaces::create,
        api::spaces::get_one,
        api::spaces::delete_one,
        api::spaces::members,
        api::spaces::set_member,
        api::spaces::remove_member,
        api::spaces::tree,
        api::groups::list,
        api::groups::create,
        api::groups::get_one,
        api::groups::delete_one,
        api::groups::add_member,
        api::groups::remove_member,
        api::groups::space_roles,
        api::groups::set_space_role,
        api::groups::remove_space_role,
        api::usage::report,
        api::usage::budgets,
        api::usage::set_budget,
        api::usage::remove_budget,
        api::mounts::list,
        api::mounts::create,
        api::mounts::get_one,
        api::mounts::delete_one,
        api::mounts::grants,
        api::mounts::grant,
        api::mounts::revoke,
        api::projects::list,
        api::projects::create,
        api::projects::get_one,
        api::projects::delete_one,
        api::projects::update,
        api::projects::set_credential,
        api::projects::delete_credential,
        api::projects::members,
        api::projects::set_member,
        api::projects::remove_member,
        api::projects::prebuilds,
        api::projects::prebuild,
        api::projects::prebuilds_on,
        api::projects::prebuilds_off,
        api::projects::set_prebuild_webhook_secret,
        api::projects::delete_prebuild_webhook_secret,
        api::projects::prebuild_webhook,
        api::workspaces::list,
        api::workspaces::create,
        api::workspaces::resize,
        api::workspaces::rebuild,
        api::workspaces::logs,
        api::ports::list,
        api::ports::set,
        api::ports::links,
        api::ports::create_link,
        api::ports::revoke_link,
        api::workspaces::startup,
        api::workspaces::run_command,
        api::workspaces::get_one,
        api::workspaces::set_desired_state,
        api::workspaces::terminate,
    ),
    modifiers(&BearerAuth, &CommonResponses)
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

/// The answers every operation can give besides its own: a malformed request (400), no or
/// a bad token (401), a token or account that may not (403), a body that is too large or
/// not JSON (413, 415), and Warren's own faults (500) — all in the one error shape — so a
/// client (or a fuzzer) finds every status it can receive documented.
struct CommonResponses;

impl Modify for CommonResponses {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("ApiError")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.patch,
                &mut item.delete,
            ];
            for op in ops.into_iter().flatten() {
                let authenticated = op.security.as_ref().is_some_and(|s| !s.is_empty());
                let body = op.request_body.is_some();
                let mut add = |code: &str, description: &str| {
                    op.responses
                        .responses
                        .entry(code.to_owned())
                        .or_insert_with(|| error(description));
                };
                add(
                    "400",
                    "The request is malformed: a path, query or body that does not parse, or a field out of bounds",
                );
                if authenticated {
                    add(
                        "401",
                        "No token, or one that is not valid, has expired or was revoked",
                    );
                    add(
                        "403",
                        "The token lacks the scope, or the account the role, this request needs",
                    );
                }
                if body {
                    add("413", "The request body is larger than the API accepts");
                    add("415", "The request body is not `application/json`");
                }
                add("500", "A fault of the server's own; details are in its log");
            }
        }
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
