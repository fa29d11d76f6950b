//! Rights: who may see, use and manage which workspace, mount and space. The one place
//! roles on spaces become rights on the entries in them; the domain's other modules, the
//! proxy's questions and the web UI ask here.
//!
//! A role held on a space holds for every space below it. Without any right the answer is
//! "not found", so existence does not leak; with too small a right, "forbidden" naming what
//! is needed.

use super::{AppError, AppState, ErrorKind, Principal};
use crate::store::spaces::{SpaceRow, USERS_ROOT};
use crate::store::workspaces::WorkspaceRow;
use warren_types::api::SpaceRole;
use warren_types::UserId;

/// What a user may do with a workspace (spec/mounts.md): see it (API, web UI), use it (start
/// and stop it, reach its ports, terminal and SSH, read its logs, run its commands), or
/// manage it (also resize and terminate it). The API shows it as `your_right`.
pub use warren_types::api::WorkspaceRight as Right;

/// Why `need` was refused on workspace `name` to someone who may see it.
fn refusal(need: Right, name: &str) -> String {
    match need {
        Right::See => format!("workspace {name}: seeing it needs a role on its space"),
        Right::Use => format!(
            "workspace {name}: starting, stopping, reaching it and reading its logs need its \
                 ownership or the developer or owner role on its space"
        ),
        Right::Manage => format!(
            "workspace {name}: resizing and terminating it need its ownership, the owner \
                 role on its space, or an admin"
        ),
    }
}

/// The right the roles give `user` on `w`, admins aside: its own owner manages it; a role on
/// its space (held there or on a space above) gives the rest — owner: manage, developer: use,
/// viewer: see. The one place this rule lives; the proxy's questions ask it too.
pub async fn member_right(
    state: &AppState,
    user: UserId,
    w: &WorkspaceRow,
) -> Result<Option<Right>, AppError> {
    if w.owner_id == user {
        return Ok(Some(Right::Manage));
    }
    let memberships = memberships(state, user).await?;
    Ok(entry_right(&memberships, user, w.owner_id, &w.space_path))
}

/// The rule itself, for any entry of the tree (workspace or mount) owned by `owner` in the
/// space at `space_path`, with the user's memberships already read (a list reads them once).
pub fn entry_right(
    memberships: &[(String, SpaceRole)],
    user: UserId,
    owner: UserId,
    space_path: &str,
) -> Option<Right> {
    if owner == user {
        return Some(Right::Manage);
    }
    role_in(memberships, space_path).map(|role| match role {
        SpaceRole::Owner => Right::Manage,
        SpaceRole::Developer => Right::Use,
        SpaceRole::Viewer => Right::See,
    })
}

/// What the caller may do with an entry as the API and the web UI show it: admins manage
/// every one (through the API; the proxy asks [`member_right`]).
pub fn shown_entry_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    owner: UserId,
    space_path: &str,
) -> Option<Right> {
    if who.user.is_admin {
        Some(Right::Manage)
    } else {
        entry_right(memberships, who.user.id, owner, space_path)
    }
}

/// Loads the workspace `key` (name or id) if the caller holds `need` on it. Admins manage
/// every workspace through the API. Without any right the answer is "not found", so
/// existence does not leak; with too small a right, "forbidden" naming what is needed.
pub async fn authorized(
    state: &AppState,
    who: &Principal,
    key: &str,
    need: Right,
) -> Result<WorkspaceRow, AppError> {
    let not_found = || AppError::not_found(format!("workspace {key:?}"));
    let w = state
        .store
        .workspace_by_key(key)
        .await?
        .ok_or_else(not_found)?;
    let right = if who.user.is_admin {
        Some(Right::Manage)
    } else {
        member_right(state, who.user.id, &w).await?
    };
    match right {
        None => Err(not_found()),
        Some(r) if r >= need => Ok(w),
        Some(_) => Err(AppError::forbidden(refusal(need, &w.name))),
    }
}

/// Loads a workspace the caller may see, by name or id.
pub async fn visible(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<WorkspaceRow, AppError> {
    authorized(state, who, key, Right::See).await
}

pub(super) fn space_not_found(path: &str) -> AppError {
    AppError::not_found(format!("space {path:?}"))
}

/// Whether `path` is `ancestor` or lies below it.
pub fn within(path: &str, ancestor: &str) -> bool {
    path == ancestor
        || path
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Every role `user` holds now, directly or through their groups: (space path, role).
pub async fn memberships(
    state: &AppState,
    user: UserId,
) -> Result<Vec<(String, SpaceRole)>, AppError> {
    Ok(state.store.memberships(user, state.clock.now_ms()).await?)
}

/// The highest role among `memberships` that holds on `path`.
pub fn role_in(memberships: &[(String, SpaceRole)], path: &str) -> Option<SpaceRole> {
    memberships
        .iter()
        .filter(|(p, _)| within(path, p))
        .map(|(_, r)| *r)
        .max()
}

/// A user's role on the space at `path` (held there or above).
pub async fn role_on(
    state: &AppState,
    user: UserId,
    path: &str,
) -> Result<Option<SpaceRole>, AppError> {
    Ok(role_in(&memberships(state, user).await?, path))
}

/// The space at `path` if the caller has a role there (or is an admin), with that role.
pub(super) async fn visible_space(
    state: &AppState,
    who: &Principal,
    path: &str,
) -> Result<(SpaceRow, Option<SpaceRole>), AppError> {
    let role = role_on(state, who.user.id, path).await?;
    if role.is_none() && !who.user.is_admin {
        return Err(space_not_found(path));
    }
    let s = state
        .store
        .space_by_path(path)
        .await?
        .ok_or_else(|| space_not_found(path))?;
    Ok((s, role))
}

/// The space at `path` if the caller owns it (or one above it) or is an admin.
pub(super) async fn managed_space(
    state: &AppState,
    who: &Principal,
    path: &str,
) -> Result<SpaceRow, AppError> {
    let (s, role) = visible_space(state, who, path).await?;
    if who.user.is_admin || role == Some(SpaceRole::Owner) {
        Ok(s)
    } else {
        Err(AppError::forbidden(format!(
            "managing space {path:?} needs its owner role (here or on a space above it), or an \
             admin"
        )))
    }
}

/// The caller's personal space, made on first use.
pub async fn personal(state: &AppState, who: &Principal) -> Result<SpaceRow, AppError> {
    Ok(state
        .store
        .personal_space(who.user.id, &who.user.username, state.clock.now_ms())
        .await?)
}

/// The space a new entry goes to: `path` (the request's field `space`), where the caller must
/// be a developer or owner, or the caller's personal space.
pub async fn for_new_entry(
    state: &AppState,
    who: &Principal,
    path: Option<&str>,
) -> Result<SpaceRow, AppError> {
    let Some(path) = path.filter(|p| *p != format!("{USERS_ROOT}/{}", who.user.username)) else {
        return personal(state, who).await;
    };
    let (s, role) = visible_space(state, who, path)
        .await
        .map_err(|e| match e.kind {
            // The request names a space that is not there for the caller: its field is wrong.
            ErrorKind::NotFound => AppError::invalid_field(
                "space",
                format!("no space {path:?} (or none you hold a role on)"),
            ),
            _ => e,
        })?;
    if role >= Some(SpaceRole::Developer) {
        Ok(s)
    } else {
        Err(AppError::forbidden(format!(
            "creating entries in space {path:?} needs its developer or owner role"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_hold_below_and_not_beside() {
        let m = vec![
            ("acme".to_owned(), SpaceRole::Viewer),
            ("acme/platform".to_owned(), SpaceRole::Developer),
        ];
        assert_eq!(role_in(&m, "acme"), Some(SpaceRole::Viewer));
        assert_eq!(role_in(&m, "acme/platform/api"), Some(SpaceRole::Developer));
        assert_eq!(role_in(&m, "acme/web"), Some(SpaceRole::Viewer));
        assert_eq!(
            role_in(&m, "acme-corp"),
            None,
            "a name prefix is not a parent"
        );
        assert_eq!(role_in(&m, "other"), None);
    }
}
