//! Groups (issue 44): a role a group holds on a space holds for each of its members, exactly
//! as if each held it directly ([`super::rights::memberships`] reads both). Admins make and
//! remove groups and keep the members of `local` ones; the members of `oidc` groups are
//! what the provider's groups claim says at each sign-in ([`synced`]), and a membership the
//! provider stops confirming ends at the member's next sign-in, or `oidc.group_ttl_hours`
//! after the last one, whichever comes first. Space owners give groups roles on their
//! spaces as they give users.

use super::audit::{self, Target};
use super::{rights, AppError, AppState, Principal};
use crate::store::groups::GroupRow;
use crate::store::spaces::USERS_ROOT;
use crate::store::users::UserRow;
use warren_types::api::{
    check_group_name, CreateGroupRequest, Group, GroupMember, GroupSource, SetSpaceMemberRequest,
    SpaceGroupRole,
};

/// Most names of a groups claim looked at: a provider may list hundreds, and only those
/// naming an `oidc` group matter.
const CLAIMED_MAX: usize = 1000;

fn group_not_found(name: &str) -> AppError {
    AppError::not_found(format!("group {name:?}"))
}

async fn group_named(state: &AppState, name: &str) -> Result<GroupRow, AppError> {
    state
        .store
        .group_by_name(name)
        .await?
        .ok_or_else(|| group_not_found(name))
}

fn target(name: &str) -> Target {
    Target::named("group", name)
}

/// Every group, with how many members count now. Anyone signed in may read the names (a
/// space owner picks among them); who is in a group is for admins and its members.
pub async fn list(state: &AppState, _who: &Principal) -> Result<Vec<Group>, AppError> {
    let now = state.clock.now_ms();
    Ok(state
        .store
        .list_groups(now)
        .await?
        .into_iter()
        .map(|(g, n)| g.to_api(n))
        .collect())
}

/// Makes a group (admins).
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateGroupRequest,
) -> Result<Group, AppError> {
    let r: Result<Group, AppError> = async {
        who.require_admin()?;
        check_group_name(&req.name).map_err(|e| AppError::invalid_field("name", e))?;
        if req.description.len() > 1000 || req.description.chars().any(char::is_control) {
            return Err(AppError::invalid_field(
                "description",
                "must be at most 1000 bytes, without control characters",
            ));
        }
        let g = state
            .store
            .insert_group(
                &req.name,
                req.source,
                &req.description,
                who.user.id,
                state.clock.now_ms(),
            )
            .await
            .map_err(super::error::already_exists(|| {
                format!("a group named {:?} exists", req.name)
            }))?;
        tracing::info!(group = %g.name, source = g.source.as_str(), by = %who.user.username, "group created");
        Ok(g.to_api(0))
    }
    .await;
    let detail = format!("source: {}", req.source.as_str());
    audit::audited_with(state, who, "group.create", target(&req.name), detail, r).await
}

/// Removes a group, and with it every role it held (admins).
pub async fn delete(state: &AppState, who: &Principal, name: &str) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        let g = group_named(state, name).await?;
        if !state.store.delete_group(g.id).await? {
            return Err(group_not_found(name));
        }
        tracing::info!(group = %g.name, by = %who.user.username, "group deleted");
        Ok(())
    }
    .await;
    audit::audited(state, who, "group.delete", target(name), r).await
}

/// The group and its members: for admins and for its members.
pub async fn show(
    state: &AppState,
    who: &Principal,
    name: &str,
) -> Result<(Group, Vec<GroupMember>), AppError> {
    let g = group_named(state, name).await?;
    let members = state
        .store
        .group_members(g.id, state.clock.now_ms())
        .await?;
    if !who.user.is_admin && !members.iter().any(|m| m.user_id == who.user.id) {
        return Err(AppError::forbidden(format!(
            "seeing the members of group {name:?} needs an admin account, or membership"
        )));
    }
    let n = members.len() as i64;
    Ok((g.to_api(n), members))
}

/// Adds `username` to a `local` group (admins).
pub async fn add_member(
    state: &AppState,
    who: &Principal,
    name: &str,
    username: &str,
) -> Result<GroupMember, AppError> {
    let r: Result<GroupMember, AppError> = async {
        who.require_admin()?;
        let g = group_named(state, name).await?;
        if g.source == GroupSource::Oidc {
            return Err(AppError::conflict(
                "group_from_provider",
                format!(
                    "the members of group {name:?} come from the identity provider's groups \
                     claim at each sign-in; add {username:?} to the group there"
                ),
            ));
        }
        let user = super::lookup::user_named(state, username).await?;
        let now = state.clock.now_ms();
        state.store.add_group_member(g.id, user.id, now).await?;
        tracing::info!(group = %g.name, member = %user.username, by = %who.user.username, "group member added");
        state
            .store
            .group_members(g.id, now)
            .await?
            .into_iter()
            .find(|m| m.user_id == user.id)
            .ok_or_else(|| AppError::not_found(format!("member {username:?}")))
    }
    .await;
    let t = Target::named("user", username);
    let detail = format!("group: {name}");
    audit::audited_with(state, who, "group.add_member", t, detail, r).await
}

/// Takes `username` out of a group (admins). From an `oidc` group this lasts until the
/// member's next sign-in says otherwise; to keep them out, remove them at the provider.
pub async fn remove_member(
    state: &AppState,
    who: &Principal,
    name: &str,
    username: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        who.require_admin()?;
        let g = group_named(state, name).await?;
        let user = super::lookup::user_named(state, username).await?;
        if !state.store.remove_group_member(g.id, user.id).await? {
            return Err(AppError::not_found(format!(
                "a membership of {username:?} in group {name:?}"
            )));
        }
        tracing::info!(group = %g.name, member = %user.username, by = %who.user.username, "group member removed");
        Ok(())
    }
    .await;
    let t = Target::named("user", username);
    let detail = format!("group: {name}");
    audit::audited_with(state, who, "group.remove_member", t, detail, r).await
}

/// Makes `user`'s `oidc` group memberships those `claimed` at a sign-in through the provider,
/// each counting for `ttl_ms` unless a later sign-in renews it; records what changed.
pub async fn synced(
    state: &AppState,
    user: &UserRow,
    claimed: &[&str],
    ttl_ms: i64,
) -> Result<(), AppError> {
    let claimed: Vec<String> = claimed
        .iter()
        .take(CLAIMED_MAX)
        .map(|s| (*s).to_owned())
        .collect();
    let now = state.clock.now_ms();
    let (joined, left) = state
        .store
        .sync_oidc_groups(user.id, &claimed, now.saturating_add(ttl_ms), now)
        .await?;
    if joined.is_empty() && left.is_empty() {
        return Ok(());
    }
    tracing::info!(user = %user.username, ?joined, ?left, "groups from the identity provider");
    let mut detail = vec![];
    if !joined.is_empty() {
        detail.push(format!("joined {}", joined.join(", ")));
    }
    if !left.is_empty() {
        detail.push(format!("left {}", left.join(", ")));
    }
    audit::record(
        state,
        audit::Actor::user(user, "sso"),
        "group.sync",
        Some(Target::user(user)),
        warren_types::api::AuditOutcome::Success,
        Some(detail.join("; ")),
    )
    .await;
    Ok(())
}

/// The roles group `name` holds, on the spaces the caller may see (every one for an admin).
pub async fn roles_of(
    state: &AppState,
    who: &Principal,
    name: &str,
) -> Result<Vec<(String, warren_types::api::SpaceRole)>, AppError> {
    let g = group_named(state, name).await?;
    let roles = state.store.roles_of_group(g.id).await?;
    if who.user.is_admin {
        return Ok(roles);
    }
    let mine = rights::memberships(state, who.user.id).await?;
    Ok(roles
        .into_iter()
        .filter(|(path, _)| rights::role_in(&mine, path).is_some())
        .collect())
}

/// The roles groups hold on a space (directly): for whoever may see the space.
pub async fn space_roles(
    state: &AppState,
    who: &Principal,
    path: &str,
) -> Result<Vec<SpaceGroupRole>, AppError> {
    let (s, _) = rights::visible_space(state, who, path).await?;
    Ok(state.store.space_group_roles(s.id).await?)
}

/// Gives group `name` a role on the space (its owners, admins).
pub async fn set_space_role(
    state: &AppState,
    who: &Principal,
    path: &str,
    name: &str,
    req: &SetSpaceMemberRequest,
) -> Result<SpaceGroupRole, AppError> {
    let r: Result<SpaceGroupRole, AppError> = async {
        let s = rights::managed_space(state, who, path).await?;
        if rights::within(&s.path, USERS_ROOT) {
            return Err(AppError::forbidden(format!(
                "{path:?} is a personal space; share an entry from a team space instead"
            )));
        }
        let g = group_named(state, name).await?;
        state
            .store
            .set_space_group_role(s.id, g.id, req.role, state.clock.now_ms())
            .await?;
        tracing::info!(space = %s.path, group = %g.name, role = req.role.as_str(), by = %who.user.username, "space group role set");
        state
            .store
            .space_group_roles(s.id)
            .await?
            .into_iter()
            .find(|m| m.group_id == g.id)
            .ok_or_else(|| group_not_found(name))
    }
    .await;
    let t = target(name).in_space(path);
    let detail = format!("role: {}", req.role.as_str());
    audit::audited_with(state, who, "space.set_group_role", t, detail, r).await
}

/// Takes group `name`'s role on the space away (roles held above it stay).
pub async fn remove_space_role(
    state: &AppState,
    who: &Principal,
    path: &str,
    name: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let s = rights::managed_space(state, who, path).await?;
        let g = group_named(state, name).await?;
        if !state.store.remove_space_group_role(s.id, g.id).await? {
            return Err(AppError::not_found(format!(
                "a role of group {name:?} on space {path:?}"
            )));
        }
        tracing::info!(space = %s.path, group = %g.name, by = %who.user.username, "space group role removed");
        Ok(())
    }
    .await;
    let t = target(name).in_space(path);
    audit::audited(state, who, "space.remove_group_role", t, r).await
}
