//! Mounts (spec/mounts.md): entries of the tree that Warren does not run as containers. This
//! server makes `redirect` mounts — to another entry (followed through chains of redirects,
//! at most [`MAX_CHAIN`] long, never in a cycle) or to an external `http(s)` URL — and
//! refuses `proxy` and `workspace` mounts naming their type until it serves them.
//!
//! Who may do what follows the same rule as for workspaces ([`super::workspaces::Right`]):
//! a mount's owner and the owners of its space manage it (remove it), developers use it,
//! viewers see it, admins manage every one through the API; everyone else gets 404. A
//! mount's status is computed when it is read, from what it points to, so it is never stale.

use super::spaces::{for_new_entry, role_in};
use super::workspaces::Right;
use super::{names, AppError, AppState, ErrorKind, Principal};
use crate::store::mounts::{MountRow, NewMount};
use std::collections::HashSet;
use warren_types::api::{
    Condition, CreateMountRequest, Mount, MountPhase, MountStatus, MountType, SpaceRole,
};
use warren_types::{DesiredState, UserId};

/// Longest chain of redirects a mount may start (itself included).
pub const MAX_CHAIN: usize = 8;

/// The condition a redirect to an entry reports about its target.
const TARGET_CONDITION: &str = "WorkspaceTargetFound";

fn not_found(name: &str) -> AppError {
    AppError::not_found(format!("mount {name:?}"))
}

/// What a user may do with a mount, from its ownership and the roles on its space (admins
/// aside).
pub fn member_right(
    memberships: &[(String, SpaceRole)],
    user: UserId,
    m: &MountRow,
) -> Option<Right> {
    if m.owner_id == user {
        return Some(Right::Manage);
    }
    role_in(memberships, &m.space_path).map(|role| match role {
        SpaceRole::Owner => Right::Manage,
        SpaceRole::Developer => Right::Use,
        SpaceRole::Viewer => Right::See,
    })
}

fn shown_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    m: &MountRow,
) -> Option<Right> {
    if who.user.is_admin {
        Some(Right::Manage)
    } else {
        member_right(memberships, who.user.id, m)
    }
}

/// Where following a mount's redirects ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// A workspace of this Warren (or a mount of a type that is not a redirect).
    Entry(String),
    /// An external URL.
    Url(String),
    /// The chain breaks: this entry does not exist (any more).
    Missing(String),
    /// The chain comes back to this entry.
    Cycle(String),
    /// More than [`MAX_CHAIN`] redirects.
    TooLong,
}

/// Follows redirects from the entry `name` (a workspace ends the chain at once).
pub async fn resolve(state: &AppState, name: &str) -> Result<Resolved, AppError> {
    let mut seen = HashSet::new();
    let mut current = name.to_owned();
    for _ in 0..=MAX_CHAIN {
        if !seen.insert(current.clone()) {
            return Ok(Resolved::Cycle(current));
        }
        match state.store.mount_by_name(&current).await? {
            Some(m) if m.kind == MountType::Redirect.as_str() => match (&m.target, &m.url) {
                (Some(t), _) => current = t.clone(),
                (None, Some(u)) => return Ok(Resolved::Url(u.clone())),
                (None, None) => return Ok(Resolved::Missing(current)),
            },
            Some(_) => return Ok(Resolved::Entry(current)),
            None => {
                // A terminated workspace is gone for its users, though its row stays a while.
                return Ok(match state.store.workspace_by_name(&current).await? {
                    Some(w) if w.desired_state != DesiredState::Terminated => {
                        Resolved::Entry(current)
                    }
                    _ => Resolved::Missing(current),
                });
            }
        }
    }
    Ok(Resolved::TooLong)
}

/// The status of `m`, from what it points to now.
async fn status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
    let resolved = match (&m.target, &m.url) {
        (None, Some(u)) => Resolved::Url(u.clone()),
        _ => resolve(state, &m.name).await?,
    };
    let condition = |ok: bool, reason: &str, message: String| Condition {
        kind: TARGET_CONDITION.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
    };
    Ok(match resolved {
        Resolved::Url(u) => MountStatus {
            phase: MountPhase::Ready,
            conditions: vec![],
            url: Some(u),
            resolved: None,
        },
        Resolved::Entry(e) => {
            let url = match state.store.workspace_by_name(&e).await? {
                Some(w) => {
                    let a = w.to_api(&state.store)?;
                    a.url.or(a.terminal_url)
                }
                None => None,
            };
            MountStatus {
                phase: MountPhase::Ready,
                conditions: vec![condition(true, "Found", format!("leads to {e}"))],
                url,
                resolved: Some(e),
            }
        }
        Resolved::Missing(e) => MountStatus {
            phase: MountPhase::Unavailable,
            conditions: vec![condition(
                false,
                "TargetMissing",
                format!("{e}, where this redirect leads, does not exist any more"),
            )],
            url: None,
            resolved: None,
        },
        Resolved::Cycle(_) | Resolved::TooLong => MountStatus {
            phase: MountPhase::Unavailable,
            conditions: vec![condition(
                false,
                "ChainTooLong",
                format!("its redirects loop or go on for more than {MAX_CHAIN} entries"),
            )],
            url: None,
            resolved: None,
        },
    })
}

async fn to_api(
    state: &AppState,
    m: &MountRow,
    your_right: Option<Right>,
) -> Result<Mount, AppError> {
    Ok(Mount {
        id: m.id,
        name: m.name.clone(),
        mount_type: MountType::parse(&m.kind).unwrap_or(MountType::Redirect),
        space: m.space_path.clone(),
        owner_username: m.owner_username.clone(),
        reference: m.target.clone(),
        url: m.url.clone(),
        status: status(state, m).await?,
        your_right,
        created_at: crate::db::from_millis(m.created_at),
    })
}

/// Loads mount `name` if the caller holds `need` on it (404 without any right, 403 with
/// too small a one).
async fn authorized(
    state: &AppState,
    who: &Principal,
    name: &str,
    need: Right,
) -> Result<(MountRow, Right), AppError> {
    let m = state
        .store
        .mount_by_name(name)
        .await?
        .ok_or_else(|| not_found(name))?;
    let memberships = state.store.memberships(who.user.id).await?;
    match shown_right(&memberships, who, &m) {
        None => Err(not_found(name)),
        Some(r) if r >= need => Ok((m, r)),
        Some(_) => Err(AppError::forbidden(format!(
            "mount {name}: removing it needs its ownership, the owner role on its space, or an \
             admin"
        ))),
    }
}

/// Checks a redirect's URL: absolute, `http` or `https`, with a host.
fn check_url(raw: &str) -> Result<String, AppError> {
    let bad = |why: String| AppError::invalid_field("url", why);
    let u = url::Url::parse(raw).map_err(|e| bad(format!("{raw:?} is not a URL: {e}")))?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad(format!(
            "{raw:?}: the scheme must be http or https, not {}",
            u.scheme()
        )));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(bad(format!("{raw:?} names no host")));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad(format!(
            "{raw:?} carries credentials; a redirect would show them to every client"
        )));
    }
    Ok(u.to_string())
}

/// Checks that the caller may see the entry `target` (a workspace or a mount): anything
/// else is "not found", as if it did not exist.
async fn check_target(state: &AppState, who: &Principal, target: &str) -> Result<(), AppError> {
    let hidden = || AppError::not_found(format!("entry {target:?}")).with_field("ref");
    if let Some(m) = state.store.mount_by_name(target).await? {
        let memberships = state.store.memberships(who.user.id).await?;
        return shown_right(&memberships, who, &m)
            .map(|_| ())
            .ok_or_else(hidden);
    }
    match super::workspaces::visible(state, who, target).await {
        Ok(_) => Ok(()),
        Err(e) if e.kind == ErrorKind::NotFound => Err(hidden()),
        Err(e) => Err(e),
    }
}

/// Creates a mount (spec/mounts.md): in `req.space` (developer or owner there) or the
/// caller's personal space.
pub async fn create(
    state: &AppState,
    who: &Principal,
    req: &CreateMountRequest,
) -> Result<Mount, AppError> {
    names::validate(&req.name).map_err(|e| AppError::invalid_field("name", e))?;
    let kind = MountType::parse(&req.mount_type).ok_or_else(|| {
        AppError::invalid_field(
            "type",
            format!(
                "{:?} is not a mount type: redirect, proxy or workspace",
                req.mount_type
            ),
        )
    })?;
    if kind != MountType::Redirect {
        return Err(AppError::invalid_field(
            "type",
            format!(
                "{} mounts are not served by this server yet; redirect mounts are",
                kind.as_str()
            ),
        ));
    }
    if req.via.is_some() {
        return Err(AppError::invalid_field(
            "via",
            "only proxy mounts reach their URL through an agent",
        ));
    }
    let (target, url) = match (&req.reference, &req.url) {
        (Some(r), None) => (Some(r.as_str()), None),
        (None, Some(u)) => (None, Some(check_url(u)?)),
        _ => {
            return Err(AppError::invalid_field(
                "ref",
                "a redirect needs exactly one of `ref` (an entry) and `url`",
            ))
        }
    };
    if let Some(t) = target {
        if t == req.name {
            return Err(AppError::invalid_field(
                "ref",
                format!("{t:?} would redirect to itself"),
            ));
        }
        check_target(state, who, t).await?;
        match resolve(state, t).await? {
            Resolved::Entry(_) | Resolved::Url(_) | Resolved::Missing(_) => {
                // The new mount adds one hop to the chain from `t`.
                let hops = chain_length(state, t).await? + 1;
                if hops > MAX_CHAIN {
                    return Err(AppError::invalid_field(
                        "ref",
                        format!(
                            "{t:?} starts a chain of {} redirects; with this one it would be \
                             {hops}, more than {MAX_CHAIN}",
                            hops - 1
                        ),
                    ));
                }
            }
            Resolved::Cycle(e) => {
                return Err(AppError::invalid_field(
                    "ref",
                    format!("the redirects from {t:?} come back to {e:?}"),
                ))
            }
            Resolved::TooLong => {
                return Err(AppError::invalid_field(
                    "ref",
                    format!("{t:?} starts a chain of more than {MAX_CHAIN} redirects"),
                ))
            }
        }
    }
    let space = for_new_entry(state, who, req.space.as_deref())
        .await
        .map_err(|e| match (e.kind, &req.space) {
            (ErrorKind::NotFound, Some(p)) => AppError::invalid_field(
                "space",
                format!("no space {p:?} (or none you hold a role on)"),
            ),
            _ => e,
        })?;
    let m = state
        .store
        .insert_mount(&NewMount {
            name: &req.name,
            space_id: space.id,
            owner_id: who.user.id,
            kind: kind.as_str(),
            target,
            url: url.as_deref(),
            now: state.clock.now_ms(),
        })
        .await
        .map_err(super::error::already_exists(|| {
            format!(
                "name: an entry (workspace or mount) named {:?} already exists",
                req.name
            )
        }))
        .map_err(|e| e.with_field("name"))?;
    tracing::info!(mount = %m.name, kind = %m.kind, space = %m.space_path, by = %who.user.username, "mount created");
    state.changed();
    to_api(state, &m, Some(Right::Manage)).await
}

/// How many redirects the chain from `name` follows (0 when `name` is no redirect).
async fn chain_length(state: &AppState, name: &str) -> Result<usize, AppError> {
    let mut n = 0;
    let mut current = name.to_owned();
    while let Some(m) = state.store.mount_by_name(&current).await? {
        if m.kind != MountType::Redirect.as_str() || n > MAX_CHAIN {
            break;
        }
        n += 1;
        match m.target {
            Some(t) => current = t,
            None => break,
        }
    }
    Ok(n)
}

/// The mounts the caller may see, by name.
pub async fn list(state: &AppState, who: &Principal) -> Result<Vec<Mount>, AppError> {
    let memberships = state.store.memberships(who.user.id).await?;
    let mut out = vec![];
    for m in state.store.list_mounts().await? {
        if let Some(r) = shown_right(&memberships, who, &m) {
            out.push(to_api(state, &m, Some(r)).await?);
        }
    }
    Ok(out)
}

pub async fn get(state: &AppState, who: &Principal, name: &str) -> Result<Mount, AppError> {
    let (m, r) = authorized(state, who, name, Right::See).await?;
    to_api(state, &m, Some(r)).await
}

/// Removes a mount (its owner, an owner of its space, or an admin). Redirects that led to it
/// now show that their target is missing.
pub async fn remove(state: &AppState, who: &Principal, name: &str) -> Result<(), AppError> {
    let (m, _) = authorized(state, who, name, Right::Manage).await?;
    if !state.store.delete_mount(m.id).await? {
        return Err(not_found(name));
    }
    tracing::info!(mount = %m.name, by = %who.user.username, "mount removed");
    state.changed();
    Ok(())
}

/// The mounts at or below `root` a user sees, for the tree: (space path, name, type, phase,
/// where it points, owner).
pub async fn for_tree(
    state: &AppState,
    who: &Principal,
    memberships: &[(String, SpaceRole)],
    root: Option<&str>,
) -> Result<Vec<(MountRow, MountPhase)>, AppError> {
    let mut out = vec![];
    for m in state.store.mounts_under(root, true).await? {
        if shown_right(memberships, who, &m).is_some() {
            let phase = status(state, &m).await?.phase;
            out.push((m, phase));
        }
    }
    Ok(out)
}
