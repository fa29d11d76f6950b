//! The web UI (ui.md "The web UI"): server-rendered HTML pages at the server's root, a thin
//! adapter over the same domain functions as the JSON API (`crate::app`), so every rule and
//! authorisation decision is made once.
//!
//! - Pages are maud templates compiled into the binary; the only scripts are htmx and its
//!   server-sent-events extension, vendored from the npm registry and served from
//!   `/assets/` (no CDN). Every page works without them: live updates are the enhancement.
//! - The session is the server's one session cookie (`warren_session`, HttpOnly,
//!   SameSite=Lax, Secure under TLS), shared with the OAuth pages. Every state-changing form
//!   carries a CSRF token bound to that cookie ([`session`]); a POST without a valid one is
//!   refused with 403 before anything is read.
//! - A strict Content-Security-Policy (scripts and styles from this origin only, no inline
//!   script, no eval) on every page; all text goes through maud's escaping.
//! - What the user may not see is a 404 page, as in the API.

mod account;
mod admin;
mod assets;
mod audit;
mod errors;
mod groups;
mod layout;
mod prebuilds;
mod regions;
mod secrets;
mod session;
mod sign_in;
mod usage;
mod workspaces;

use axum::routing::{get, post};
use axum::Router;

pub use errors::{html_not_found, wants_html, UiError};

pub fn router() -> Router<crate::http::HttpState> {
    Router::new()
        .route("/", get(workspaces::list_page))
        .route("/login", get(sign_in::page).post(sign_in::submit))
        .route("/logout", post(sign_in::sign_out))
        .route("/events/workspaces", get(workspaces::list_events))
        .route(
            "/workspaces/new",
            get(workspaces::new_page).post(workspaces::create),
        )
        // `/new?repo=URL`: a link that opens a repository (the form, filled in).
        .route("/new", get(workspaces::new_page))
        .route("/workspaces/{name}", get(workspaces::show))
        .route("/workspaces/{name}/events", get(workspaces::show_events))
        .route(
            "/workspaces/{name}/confirm/{action}",
            get(workspaces::confirm),
        )
        .route("/workspaces/{name}/action/{action}", post(workspaces::act))
        .route("/workspaces/{name}/resize", post(workspaces::resize))
        .route(
            "/workspaces/{name}/rebuild",
            get(workspaces::rebuild_page).post(workspaces::rebuild),
        )
        .route("/workspaces/{name}/ports", get(workspaces::ports_page))
        .route(
            "/workspaces/{name}/ports/{port}",
            post(workspaces::set_port),
        )
        .route(
            "/workspaces/{name}/ports/{port}/share",
            post(workspaces::share_port),
        )
        .route(
            "/workspaces/{name}/share-links/{id}/revoke",
            post(workspaces::revoke_share_link),
        )
        .route("/workspaces/{name}/logs", get(workspaces::logs_page))
        .route(
            "/workspaces/{name}/logs/stream",
            get(workspaces::logs_stream),
        )
        .route(
            "/projects/{project}/prebuilds",
            get(prebuilds::page).post(prebuilds::run),
        )
        .route("/account", get(account::page))
        .route("/account/tokens", post(account::create_token))
        .route("/account/password", post(account::change_password))
        .route("/account/working-hours", post(account::set_working_hours))
        .route("/account/secrets", get(secrets::page).post(secrets::set))
        .route("/account/secrets/{name}/delete", post(secrets::delete))
        .route("/account/profile", post(secrets::set_profile))
        .route(
            "/account/git-credentials",
            post(secrets::set_git_credential),
        )
        .route(
            "/account/git-credentials/{id}/delete",
            post(secrets::delete_git_credential),
        )
        .route("/account/tokens/{id}/revoke", post(account::revoke_token))
        .route("/account/ssh-keys", post(account::add_ssh_key))
        .route(
            "/account/ssh-keys/{id}/delete",
            post(account::delete_ssh_key),
        )
        .route("/admin", get(admin::page))
        .route("/audit", get(audit::page))
        .route("/usage", get(usage::page))
        .route("/usage.csv", get(usage::csv))
        .route("/usage/budget", post(usage::set_budget))
        .route("/usage/budget/remove", post(usage::remove_budget))
        .route("/groups", get(groups::page).post(groups::create))
        .route("/groups/{name}/delete", post(groups::delete))
        .route("/groups/{name}/members", post(groups::add_member))
        .route(
            "/groups/{name}/members/{user}/remove",
            post(groups::remove_member),
        )
        .route("/groups/{name}/roles", post(groups::set_role))
        .route("/groups/{name}/roles/remove", post(groups::remove_role))
        .route("/admin/users", post(admin::create_user))
        .route("/admin/users/{name}", post(admin::update_user))
        .route("/admin/agents", post(admin::create_agent))
        .route(
            "/admin/agents/{name}",
            get(admin::agent_page).post(admin::update_agent),
        )
        .route("/admin/regions", get(regions::page).post(regions::save))
        .route("/admin/regions/{name}/delete", post(regions::remove))
        .route("/assets/{file}", get(assets::serve))
}
