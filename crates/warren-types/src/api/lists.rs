//! Lists of the API: a page of any list, and the filters of the workspace list (one type for
//! the client that sends them and the server that reads them).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A page of a list; `next_cursor` is passed back as `?cursor=` for the next page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Filters of `GET /api/v1/workspaces`, one type for the client that sends them and the server
/// that reads them; `None` leaves a filter out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct WorkspaceListQuery {
    /// Actual state to match; without it, workspaces both desired and actual Terminated are left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Agent name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Project name or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Username or id of the owner, among the workspaces the caller may see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Path of the space the workspaces live in (`acme/platform`, `users/alice`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub space: Option<String>,
    /// With `space`: also every space below it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// Page size, 1–500 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    /// `next_cursor` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
