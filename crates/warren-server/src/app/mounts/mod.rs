//! Mounts (spec/mounts.md): entries of the tree that Warren does not run as containers. This
//! server makes `redirect` mounts — to another entry (followed through chains of redirects,
//! at most [`MAX_CHAIN`] long, never in a cycle) or to an external `http(s)` URL — and
//! `workspace` mounts, softlinks: the workspace at the end of a chain of softlinks serves
//! requests under the mount's name, while the mount's owner holds a grant of that
//! workspace's owner (or manages it); and `proxy` mounts, backed by a connector (`warren
//! connect` on an existing machine, dialling a relay with the token of an agent row made for
//! that mount alone) or reaching a URL through an agent (`via`, made by admins).
//!
//! Who may do what follows the same rule as for workspaces ([`super::rights::Right`]):
//! a mount's owner and the owners of its space manage it (remove it), developers use it,
//! viewers see it, admins manage every one through the API; everyone else gets 404. A
//! mount's status is computed when it is read, from what it points to, so it is never stale.

mod chains;
mod status;

use crate::app::audit;
pub use chains::{resolve, resolve_link, Linked, Resolved};
use status::status;
pub use status::{failing, get_status, heartbeat_deadline_ms};

use super::rights::{self, entry_right, for_new_entry, shown_entry_right, Right};
use super::{names, AppError, AppState, ErrorKind, Principal};
use crate::store::mounts::{MountRow, NewConnector, NewMount};
use crate::store::workspaces::WorkspaceRow;
use std::collections::HashSet;
use warren_types::api::{
    Condition, CreateMountRequest, Mount, MountPhase, MountStatus, MountType, SpaceRole,
    WorkspaceGrant,
};
use warren_types::reconcile::CONNECTOR_CONDITION;
use warren_types::{DesiredState, UserId};

/// Longest chain of redirects a mount may start (itself included).
pub const MAX_CHAIN: usize = 8;

/// The condition a redirect to an entry reports about its target.
/// The stored kind of every mount a connector or an agent's URL backs.
const PROXY: &str = MountType::Proxy.as_str();
const TARGET_CONDITION: &str = "WorkspaceTargetFound";
/// The condition about a URL mount's URL: the agent's probe, or the server's when the agent
/// fell silent or is gone.
const AGENT_CONDITION: &str = warren_types::reconcile::URL_CONDITION;

/// A condition as what backs a mount reports it.
fn condition(kind: &str, ok: bool, reason: &str, message: String) -> Condition {
    Condition {
        kind: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message,
    }
}

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
    entry_right(memberships, user, m.owner_id, &m.space_path)
}

fn shown_right(
    memberships: &[(String, SpaceRole)],
    who: &Principal,
    m: &MountRow,
) -> Option<Right> {
    shown_entry_right(memberships, who, m.owner_id, &m.space_path)
}

/// Whether a softlink owned by `owner` may be served by `w`: `owner` holds a grant on it,
/// or manages it (its owner, an owner of its space).
pub async fn may_link(state: &AppState, owner: UserId, w: &WorkspaceRow) -> Result<bool, AppError> {
    if rights::member_right(state, owner, w).await? == Some(Right::Manage) {
        return Ok(true);
    }
    Ok(state.store.has_grant(w.id, owner).await?)
}

/// Checks a new softlink from `owner` to `target`: the chain ends at a workspace, is not too
/// long, and the target's owner allows it.
async fn check_link(state: &AppState, owner: UserId, target: &str) -> Result<(), AppError> {
    let bad = |why: String| AppError::invalid_field("ref", why);
    let w = match resolve_link(state, target).await? {
        Linked::Workspace(w) => w,
        Linked::Missing(e) => return Err(bad(format!("{e:?} does not exist any more"))),
        Linked::NotAWorkspace(e) => {
            return Err(bad(format!(
                "{e:?} is a mount of another type: a softlink leads to a workspace"
            )))
        }
        Linked::Cycle(e) => {
            return Err(bad(format!(
                "the softlinks from {target:?} come back to {e:?}"
            )))
        }
        Linked::TooLong => {
            return Err(bad(format!(
                "{target:?} starts a chain of more than {MAX_CHAIN} softlinks"
            )))
        }
    };
    let hops = chain_length(state, target, MountType::Workspace).await? + 1;
    if hops > MAX_CHAIN {
        return Err(bad(format!(
            "{target:?} starts a chain of {} softlinks; with this one it would be {hops}, more \
             than {MAX_CHAIN}",
            hops - 1
        )));
    }
    if !may_link(state, owner, &w).await? {
        return Err(AppError::forbidden(format!(
            "a softlink to {} needs its owner's grant (`warren ws grant {} YOU`) or the owner \
             role on its space",
            w.name, w.name
        ))
        .with_field("ref"));
    }
    Ok(())
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
        connector: m.is_connector(),
        ports: m.ports.clone(),
        your_right,
        created_at: crate::db::from_millis(m.created_at),
        connector_token: None,
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
    let memberships = crate::app::rights::memberships(state, who.user.id).await?;
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
        let memberships = crate::app::rights::memberships(state, who.user.id).await?;
        return shown_right(&memberships, who, &m)
            .map(|_| ())
            .ok_or_else(hidden);
    }
    match rights::visible(state, who, target).await {
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
    let r: Result<Mount, AppError> = async {
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
        if kind == MountType::Proxy {
            return create_connector(state, who, req).await;
        }
        if req.connector {
            return Err(AppError::invalid_field(
                "connector",
                "only proxy mounts are backed by a connector",
            ));
        }
        if req.via.is_some() {
            return Err(AppError::invalid_field(
                "via",
                "only proxy mounts reach their URL through an agent",
            ));
        }
        let (target, url) =
            match (&req.reference, &req.url, kind) {
                (Some(r), None, _) => (Some(r.as_str()), None),
                (None, Some(u), MountType::Redirect) => (None, Some(check_url(u)?)),
                (_, _, MountType::Redirect) => {
                    return Err(AppError::invalid_field(
                        "ref",
                        "a redirect needs exactly one of `ref` (an entry) and `url`",
                    ))
                }
                _ => return Err(AppError::invalid_field(
                    "ref",
                    "a workspace mount needs `ref`, the workspace (or softlink) it stands for, and \
                     no `url`",
                )),
            };
        if let (Some(t), MountType::Workspace) = (target, kind) {
            if t == req.name {
                return Err(AppError::invalid_field(
                    "ref",
                    format!("{t:?} would link to itself"),
                ));
            }
            if let Err(e) = check_target(state, who, t).await {
                // A grant on a workspace lets its holder link to it without seeing it.
                let granted = match state.store.workspace_by_name(t).await? {
                    Some(w) => state.store.has_grant(w.id, who.user.id).await?,
                    None => false,
                };
                if !granted {
                    return Err(e);
                }
            }
            check_link(state, who.user.id, t).await?;
        }
        if let (Some(t), MountType::Redirect) = (target, kind) {
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
                    let hops = chain_length(state, t, MountType::Redirect).await? + 1;
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
        let base = new_entry(state, who, req, kind.as_str()).await?;
        let m = insert(
            state,
            &NewMount {
                target,
                url: url.as_deref(),
                ..base
            },
        )
        .await?;
        tracing::info!(mount = %m.name, kind = %m.kind, space = %m.space_path, by = %who.user.username, "mount created");
        state.changed();
        to_api(state, &m, Some(Right::Manage)).await
    }
    .await;
    audit::audited(
        state,
        who,
        "mount.create",
        audit::Target::named("mount", &req.name),
        r,
    )
    .await
}

/// Makes a `proxy` mount backed by a connector, and the agent row its token belongs to; the
/// token is in the answer, once.
async fn create_connector(
    state: &AppState,
    who: &Principal,
    req: &CreateMountRequest,
) -> Result<Mount, AppError> {
    if req.reference.is_some() {
        return Err(AppError::invalid_field(
            "ref",
            "a proxy mount points at no entry: a URL through an agent (`url`, `via`) or a \
             connector backs it",
        ));
    }
    match (&req.url, &req.via, req.connector) {
        (Some(url), Some(via), false) => return create_url_proxy(state, who, req, url, via).await,
        (None, None, true) => {}
        (_, _, true) => {
            return Err(AppError::invalid_field(
                "connector",
                "a connector backs the mount by itself: no `url` or `via` with it",
            ))
        }
        (Some(_), None, false) => {
            return Err(AppError::invalid_field(
                "via",
                "a proxy mount to a URL names the agent that reaches it",
            ))
        }
        (None, _, false) => {
            return Err(AppError::invalid_field(
                "connector",
                "a proxy mount is backed by a connector (`connector: true`, then `warren \
                 connect` on the machine) or reaches a URL through an agent (`url`, `via`)",
            ))
        }
    }
    // The connector's hosts are under the same domain as the workspaces of the first agent.
    let config = state
        .store
        .list_agents()
        .await?
        .into_iter()
        .next()
        .map(|a| a.config)
        .unwrap_or_default();
    let token = crate::crypto::new_agent_token();
    let agent_name = format!("{}{}", super::agents::CONNECTOR_PREFIX, req.name);
    let base = new_entry(state, who, req, PROXY).await?;
    let m = insert(
        state,
        &NewMount {
            connector: Some(NewConnector {
                agent_name: &agent_name,
                config: &config,
                token_digest: &crate::crypto::token_digest(&token),
            }),
            ..base
        },
    )
    .await?;
    tracing::info!(mount = %m.name, kind = %m.kind, space = %m.space_path, by = %who.user.username, "connector mount created");
    state.changed();
    let mut out = to_api(state, &m, Some(Right::Manage)).await?;
    out.connector_token = Some(token);
    Ok(out)
}

/// Makes a `proxy` mount to `url` through agent `via`. An agent reaches its whole network,
/// so only an admin points one at a URL.
async fn create_url_proxy(
    state: &AppState,
    who: &Principal,
    req: &CreateMountRequest,
    url: &str,
    via: &str,
) -> Result<Mount, AppError> {
    if !who.user.is_admin {
        return Err(AppError::forbidden(
            "a proxy mount through an agent reaches that agent's network: only an admin makes \
             one (others attach machines with `--connector`)",
        ));
    }
    let url = check_url(url)?;
    let agent = state
        .store
        .agent_by_key(via)
        .await?
        .filter(|a| !a.is_connector())
        .ok_or_else(|| AppError::invalid_field("via", format!("no agent named {via:?}")))?;
    let base = new_entry(state, who, req, PROXY).await?;
    let m = insert(
        state,
        &NewMount {
            url: Some(&url),
            via: Some(agent.id),
            ..base
        },
    )
    .await?;
    tracing::info!(mount = %m.name, url = %url, via = %agent.name, space = %m.space_path, by = %who.user.username, "proxy mount created");
    // The agent learns of it with its next answer; signalled, that is now.
    state.signals.notify(agent.id);
    state.changed();
    to_api(state, &m, Some(Right::Manage)).await
}

/// A new mount of `kind` named as the request asks, in the space it names once the caller may
/// add entries there: neither target, URL, agent nor connector yet, each kind sets its own.
async fn new_entry<'a>(
    state: &AppState,
    who: &Principal,
    req: &'a CreateMountRequest,
    kind: &'a str,
) -> Result<NewMount<'a>, AppError> {
    let space = for_new_entry(state, who, req.space.as_deref()).await?;
    Ok(NewMount::new(
        &req.name,
        kind,
        space.id,
        who.user.id,
        state.clock.now_ms(),
    ))
}

/// The port a URL mount serves as (`{port}-{mount}.{domain}`): its URL's.
pub fn url_port(url: &str) -> Option<u16> {
    url::Url::parse(url).ok()?.port_or_known_default()
}

/// Inserts a mount; a taken name is refused naming it (for a connector, its agent row's name
/// may be what is taken).
async fn insert(state: &AppState, m: &NewMount<'_>) -> Result<MountRow, AppError> {
    state
        .store
        .insert_mount(m)
        .await
        .map_err(super::error::already_exists(|| {
            let agent = m
                .connector
                .as_ref()
                .map(|c| format!(", or an agent named {:?},", c.agent_name))
                .unwrap_or_default();
            format!(
                "name: an entry (workspace or mount) named {:?}{agent} already exists",
                m.name
            )
        }))
        .map_err(|e| e.with_field("name"))
}

/// How many mounts of `kind` the chain from `name` follows (0 when `name` is none).
async fn chain_length(state: &AppState, name: &str, kind: MountType) -> Result<usize, AppError> {
    let mut n = 0;
    let mut current = name.to_owned();
    while let Some(m) = state.store.mount_by_name(&current).await? {
        if m.kind != kind.as_str() || n > MAX_CHAIN {
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
    let memberships = crate::app::rights::memberships(state, who.user.id).await?;
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
    let r: Result<(), AppError> = async {
        let (m, _) = authorized(state, who, name, Right::Manage).await?;
        if !state.store.delete_mount(m.id).await? {
            return Err(not_found(name));
        }
        tracing::info!(mount = %m.name, by = %who.user.username, "mount removed");
        state.changed();
        Ok(())
    }
    .await;
    audit::audited(
        state,
        who,
        "mount.remove",
        audit::Target::named("mount", name),
        r,
    )
    .await
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

/// Who may make softlinks to workspace `key` (its managers ask).
pub async fn grants(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Vec<WorkspaceGrant>, AppError> {
    let w = rights::authorized(state, who, key, Right::Manage).await?;
    Ok(state.store.grants(w.id).await?)
}

/// Allows `username` to make softlinks to workspace `key`.
pub async fn grant(
    state: &AppState,
    who: &Principal,
    key: &str,
    username: &str,
) -> Result<Vec<WorkspaceGrant>, AppError> {
    let r: Result<Vec<WorkspaceGrant>, AppError> = async {
        let w = rights::authorized(state, who, key, Right::Manage).await?;
        let user = super::lookup::user_named(state, username).await?;
        state
            .store
            .set_grant(w.id, user.id, state.clock.now_ms())
            .await?;
        tracing::info!(workspace = %w.name, to = %user.username, by = %who.user.username, "softlink grant given");
        // Now someone else may use it: its owner's personal secrets leave it.
        super::rerender::rerender_workspace(state, w.id, true).await?;
        state.changed();
        Ok(state.store.grants(w.id).await?)
    }
    .await;
    audit::audited_with(
        state,
        who,
        "workspace.grant",
        audit::Target::workspace_key(state, key).await,
        format!("to {username}"),
        r,
    )
    .await
}

/// Takes a grant back: the user's softlinks to the workspace stop serving (at once at the
/// server; within the proxy's authorisation-cache bound at the proxy).
pub async fn revoke(
    state: &AppState,
    who: &Principal,
    key: &str,
    username: &str,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let w = rights::authorized(state, who, key, Right::Manage).await?;
        let user = super::lookup::user_named(state, username).await?;
        if !state.store.remove_grant(w.id, user.id).await? {
            return Err(AppError::not_found(format!(
                "grant of {} to {username:?}",
                w.name
            )));
        }
        tracing::info!(workspace = %w.name, from = %user.username, by = %who.user.username, "softlink grant taken back");
        // When no one else may use it any more, its owner's secrets come back (files at once,
        // the environment at its next start).
        super::rerender::rerender_workspace(state, w.id, false).await?;
        state.changed();
        Ok(())
    }
    .await;
    audit::audited_with(
        state,
        who,
        "workspace.revoke_grant",
        audit::Target::workspace_key(state, key).await,
        format!("from {username}"),
        r,
    )
    .await
}
