//! The tree of spaces (spec/mounts.md): who may create, see and manage which space.
//!
//! A role held on a space holds for every space below it: a user's role on `acme/platform`
//! is the highest of their roles on `acme/platform` and `acme`. Admins create top-level
//! spaces and manage every space; a space's owners create spaces under it and manage its
//! members. Every user has the personal space `users/<username>`, made on first use, which
//! only they own. Anyone with no role on a space (and no admin) is told "not found".

use super::audit;
use super::{rights, AppError, AppState, Principal};
use crate::store::spaces::USERS_ROOT;
use crate::store::workspaces::{TreeRow, WorkspaceFilter};
use std::collections::BTreeMap;
use warren_types::api::{
    CreateSpaceRequest, EntryKind, MountType, SetSpaceMemberRequest, Space, SpaceMember, Tree,
    TreeEntry, TreeSpace, MAX_TREE_ENTRIES,
};
use warren_types::{ActualState, DesiredState};

/// Deepest a space may be (`a/b/c/d/e/f/g/h`).
pub const MAX_DEPTH: usize = 8;

/// Checks a space path: 1-8 segments of 1-63 characters of a-z, 0-9 and '-' (starting with
/// a letter or digit), `/`-separated; personal spaces (`users/…`) are made by the server.
pub fn validate_path(path: &str) -> Result<(), AppError> {
    let bad = |why: String| AppError::invalid_field("path", why);
    if path.is_empty() || path.len() > 512 {
        return Err(bad(format!("{path:?} must be 1-512 characters")));
    }
    let segments: Vec<&str> = path.split('/').collect();
    if segments.len() > MAX_DEPTH {
        return Err(bad(format!(
            "{path:?} is {} levels deep; at most {MAX_DEPTH} are allowed",
            segments.len()
        )));
    }
    for s in &segments {
        let ok = !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && !s.ends_with('-');
        if !ok {
            return Err(bad(format!(
                "segment {s:?} of {path:?}: 1-63 characters of a-z, 0-9 and '-', starting and \
                 ending with a letter or digit"
            )));
        }
    }
    if segments[0] == USERS_ROOT {
        return Err(bad(format!(
            "{path:?}: spaces under {USERS_ROOT}/ are the personal spaces the server makes"
        )));
    }
    Ok(())
}

/// Creates a space: top-level ones by admins, others by owners of the space above.
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateSpaceRequest,
) -> Result<Space, AppError> {
    let r: Result<Space, AppError> = async {
        validate_path(&req.path)?;
        let now = state.clock.now_ms();
        let created = match req.path.rsplit_once('/') {
            None => {
                who.require_admin()?;
                // The admin who makes it owns it, so it can be handed on with `member add`.
                state
                    .store
                    .insert_space(&req.path, None, Some(who.user.id), Some(who.user.id), now)
                    .await
            }
            Some((parent, _)) => {
                let p = rights::managed_space(state, who, parent).await?;
                state
                    .store
                    .insert_space(&req.path, Some(p.id), Some(who.user.id), None, now)
                    .await
            }
        }
        .map_err(super::error::already_exists(|| {
            format!("a space {:?} already exists", req.path)
        }))?;
        tracing::info!(space = %created.path, by = %who.user.username, "space created");
        let role = rights::role_on(state, who.user.id, &created.path).await?;
        Ok(created.to_api(role))
    }
    .await;
    audit::audited(
        state,
        who,
        "space.create",
        audit::Target::named("space", &req.path).in_space(&req.path),
        r,
    )
    .await
}

/// The spaces the caller has a role on (every space for an admin), with the caller's
/// personal space made if missing.
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<Space>, AppError> {
    rights::personal(state, who).await?;
    let memberships = rights::memberships(state, who.user.id).await?;
    Ok(state
        .store
        .list_spaces()
        .await?
        .iter()
        .filter_map(|s| {
            let role = rights::role_in(&memberships, &s.path);
            (role.is_some() || who.user.is_admin).then(|| s.to_api(role))
        })
        .collect())
}

pub async fn get(state: &AppState, who: &Principal, path: &str) -> Result<Space, AppError> {
    let (s, role) = rights::visible_space(state, who, path).await?;
    Ok(s.to_api(role))
}

/// Removes an empty space; personal spaces and the root of them stay.
pub async fn remove(state: &AppState, who: &Principal, path: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let s = rights::managed_space(state, who, path).await?;
        if rights::within(&s.path, USERS_ROOT) {
            return Err(AppError::forbidden(format!(
                "{path:?} is a personal space (or their root); it goes with its user"
            )));
        }
        let (spaces, workspaces, mounts) = state.store.space_contents(s.id).await?;
        if spaces > 0 || workspaces > 0 || mounts > 0 {
            return Err(AppError::conflict(
                "not_empty",
                format!(
                    "space {path:?} still holds {spaces} space(s), {workspaces} workspace(s) and \
                     {mounts} mount(s); remove them first"
                ),
            ));
        }
        if !state.store.delete_space(s.id).await? {
            return Err(rights::space_not_found(path));
        }
        tracing::info!(space = %path, by = %who.user.username, "space removed");
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "space.remove",
        audit::Target::named("space", path).in_space(path),
        r,
    )
    .await
}

/// The members of a space (those holding a role on it directly).
pub async fn members(
    state: &AppState,
    who: &Principal,
    path: &str,
) -> Result<Vec<SpaceMember>, AppError> {
    let (s, _) = rights::visible_space(state, who, path).await?;
    Ok(state.store.space_members(s.id).await?)
}

/// Gives `username` a role on the space.
pub async fn set_member(
    state: &AppState,
    who: &Principal,
    path: &str,
    username: &str,
    req: &SetSpaceMemberRequest,
) -> Result<SpaceMember, AppError> {
    let r: Result<SpaceMember, AppError> = async {
        let s = rights::managed_space(state, who, path).await?;
        if rights::within(&s.path, USERS_ROOT) {
            return Err(AppError::forbidden(format!(
                "{path:?} is a personal space; share an entry from a team space instead"
            )));
        }
        let user = super::lookup::user_named(state, username).await?;
        state
            .store
            .set_space_member(s.id, user.id, req.role, state.clock.now_ms())
            .await?;
        tracing::info!(space = %s.path, member = %user.username, role = req.role.as_str(), by = %who.user.username, "space member set");
        state
            .store
            .space_members(s.id)
            .await?
            .into_iter()
            .find(|m| m.user_id == user.id)
            .ok_or_else(|| AppError::not_found(format!("member {username:?}")))
    }
    .await;
    audit::audited_with(
        state,
        who,
        "space.set_member",
        audit::Target::named("user", username).in_space(path),
        format!("role: {}", req.role.as_str()),
        r,
    )
    .await
}

/// Takes `username`'s role on the space away (roles held above it stay).
pub async fn remove_member(
    state: &AppState,
    who: &Principal,
    path: &str,
    username: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let s = rights::managed_space(state, who, path).await?;
        let user = super::lookup::user_named(state, username).await?;
        if !state.store.remove_space_member(s.id, user.id).await? {
            return Err(AppError::not_found(format!(
                "a membership of {username:?} in space {path:?}"
            )));
        }
        tracing::info!(space = %s.path, member = %user.username, by = %who.user.username, "space member removed");
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "space.remove_member",
        audit::Target::named("user", username).in_space(path),
        r,
    )
    .await
}

/// The tree the caller sees (`warren ws tree [PATH]`): the spaces at or below `root` where
/// they hold a role (every one for an admin), and the entries in them they may see — those
/// of their spaces, and their own wherever those live. One query for the spaces and one for
/// the entries, whatever the size of the tree.
pub async fn tree(state: &AppState, who: &Principal, root: Option<&str>) -> Result<Tree, AppError> {
    rights::personal(state, who).await?;
    if let Some(root) = root {
        rights::visible_space(state, who, root).await?;
    }
    let under = |path: &str| root.is_none_or(|r| rights::within(path, r));
    let memberships = rights::memberships(state, who.user.id).await?;
    // The spaces where the caller holds a role, anywhere: their workspaces are visible.
    let mut role_spaces = vec![];
    let mut spaces: BTreeMap<String, TreeSpace> = state
        .store
        .list_spaces()
        .await?
        .into_iter()
        .filter_map(|s| {
            let your_role = rights::role_in(&memberships, &s.path);
            if your_role.is_some() {
                role_spaces.push(s.id);
            }
            (under(&s.path) && (your_role.is_some() || who.user.is_admin)).then(|| {
                (
                    s.path.clone(),
                    TreeSpace {
                        path: s.path,
                        your_role,
                        entries: vec![],
                    },
                )
            })
        })
        .collect();
    let filter = WorkspaceFilter {
        space: root.map(str::to_owned),
        recursive: true,
        visible_to: (!who.user.is_admin).then_some(who.user.id),
        role_spaces: Some(role_spaces),
        limit: MAX_TREE_ENTRIES as i64 + 1,
        ..WorkspaceFilter::default()
    };
    let mut rows = state.store.tree_entries(&filter).await?;
    let truncated = rows.len() > MAX_TREE_ENTRIES;
    rows.truncate(MAX_TREE_ENTRIES);
    for r in rows {
        spaces
            .entry(r.space_path.clone())
            .or_insert_with(|| TreeSpace {
                path: r.space_path.clone(),
                your_role: None,
                entries: vec![],
            })
            .entries
            .push(entry(r));
    }
    for (m, phase) in super::mounts::for_tree(state, who, &memberships, root).await? {
        let points_to = if m.is_connector() {
            Some(connector_points_to(&m.ports))
        } else {
            m.target.clone().or(m.url.clone())
        };
        spaces
            .entry(m.space_path.clone())
            .or_insert_with(|| TreeSpace {
                path: m.space_path.clone(),
                your_role: None,
                entries: vec![],
            })
            .entries
            .push(TreeEntry {
                name: m.name,
                kind: EntryKind::Mount,
                owner_username: m.owner_username,
                mount_type: MountType::parse(&m.kind),
                phase: Some(phase),
                points_to,
                desired_state: DesiredState::Running,
                actual_state: ActualState::Running,
                reason: None,
                url: None,
            });
    }
    let mut spaces: Vec<TreeSpace> = spaces.into_values().collect();
    for s in &mut spaces {
        s.entries.sort_by(|a, b| a.name.cmp(&b.name));
    }
    Ok(Tree {
        root: root.map(str::to_owned),
        spaces,
        truncated,
    })
}

fn entry(r: TreeRow) -> TreeEntry {
    let reason = match r.actual_state {
        ActualState::Failed | ActualState::Error => r.failure_reason,
        _ => None,
    }
    .or_else(|| {
        r.agent_runtime_fault
            .map(|f| format!("its agent cannot see its runtime ({f}); the state may be old"))
    });
    TreeEntry {
        name: r.name,
        kind: EntryKind::Workspace,
        owner_username: r.owner_username,
        mount_type: None,
        phase: None,
        points_to: None,
        desired_state: r.desired_state,
        actual_state: r.actual_state,
        reason,
        url: r.url,
    }
}

/// Where a connector mount points, for the tree: the machine's ports.
fn connector_points_to(ports: &[u16]) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    match ports.is_empty() {
        true => "connector".into(),
        false => format!("connector (ports {})", ports.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_naming_the_problem() {
        assert!(validate_path("acme/platform").is_ok());
        for bad in [
            "",
            "/acme",
            "acme/",
            "Acme",
            "acme//x",
            "a/b/c/d/e/f/g/h/i",
            "users/bob",
            "a_b",
        ] {
            assert!(validate_path(bad).is_err(), "{bad:?}");
        }
    }
}
