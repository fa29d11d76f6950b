//! Mounts (spec/mounts.md): entries of the tree that Warren does not run as containers. This
//! server makes `redirect` mounts — to another entry (followed through chains of redirects,
//! at most [`MAX_CHAIN`] long, never in a cycle) or to an external `http(s)` URL — and
//! `workspace` mounts, softlinks: the workspace at the end of a chain of softlinks serves
//! requests under the mount's name, while the mount's owner holds a grant of that
//! workspace's owner (or manages it); and `proxy` mounts, backed by a connector (`warren
//! connect` on an existing machine, dialling a relay with the token of an agent row made for
//! that mount alone) or reaching a URL through an agent (`via`, made by admins).
//!
//! Who may do what follows the same rule as for workspaces ([`super::workspaces::Right`]):
//! a mount's owner and the owners of its space manage it (remove it), developers use it,
//! viewers see it, admins manage every one through the API; everyone else gets 404. A
//! mount's status is computed when it is read, from what it points to, so it is never stale.

use super::spaces::for_new_entry;
use super::workspaces::{entry_right, shown_entry_right, Right};
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

/// Where following a softlink's chain ends.
#[derive(Debug)]
pub enum Linked {
    /// The workspace that serves it.
    Workspace(Box<WorkspaceRow>),
    /// The chain breaks: this entry does not exist (any more), or is terminated.
    Missing(String),
    /// The chain reaches a mount that is no softlink.
    NotAWorkspace(String),
    /// The chain comes back to this entry.
    Cycle(String),
    /// More than [`MAX_CHAIN`] softlinks.
    TooLong,
}

/// Follows softlinks from the entry `name` to the workspace that serves it.
pub async fn resolve_link(state: &AppState, name: &str) -> Result<Linked, AppError> {
    let mut seen = HashSet::new();
    let mut current = name.to_owned();
    for _ in 0..=MAX_CHAIN {
        if !seen.insert(current.clone()) {
            return Ok(Linked::Cycle(current));
        }
        if let Some(m) = state.store.mount_by_name(&current).await? {
            if m.kind != MountType::Workspace.as_str() {
                return Ok(Linked::NotAWorkspace(current));
            }
            match m.target {
                Some(t) => current = t,
                None => return Ok(Linked::Missing(current)),
            }
            continue;
        }
        return Ok(match state.store.workspace_by_name(&current).await? {
            Some(w) if w.desired_state != DesiredState::Terminated => {
                Linked::Workspace(Box::new(w))
            }
            _ => Linked::Missing(current),
        });
    }
    Ok(Linked::TooLong)
}

/// Whether a softlink owned by `owner` may be served by `w`: `owner` holds a grant on it,
/// or manages it (its owner, an owner of its space).
pub async fn may_link(state: &AppState, owner: UserId, w: &WorkspaceRow) -> Result<bool, AppError> {
    if super::workspaces::member_right(state, owner, w).await? == Some(Right::Manage) {
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

/// A softlink's status: the state of the workspace that serves it.
async fn link_status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
    let down = |c: Condition| MountStatus {
        phase: MountPhase::Unavailable,
        conditions: vec![c],
        url: None,
        resolved: None,
    };
    let w = match resolve_link(state, &m.name).await? {
        Linked::Workspace(w) => w,
        Linked::Missing(e) => {
            return Ok(down(condition(
                TARGET_CONDITION,
                false,
                "TargetMissing",
                format!("{e}, where this softlink leads, does not exist any more"),
            )))
        }
        Linked::NotAWorkspace(e) => {
            return Ok(down(condition(
                TARGET_CONDITION,
                false,
                "NotAWorkspace",
                format!("{e} is no workspace"),
            )))
        }
        Linked::Cycle(_) | Linked::TooLong => {
            return Ok(down(condition(
                TARGET_CONDITION,
                false,
                "ChainTooLong",
                format!("its softlinks loop or go on for more than {MAX_CHAIN} entries"),
            )))
        }
    };
    if !may_link(state, m.owner_id, &w).await? {
        return Ok(down(condition(
            "WorkspaceGrant",
            false,
            "GrantRevoked",
            format!("{}'s owner no longer allows this softlink", w.name),
        )));
    }
    let running = w.actual_state == warren_types::ActualState::Running;
    let found = condition(
        TARGET_CONDITION,
        true,
        "Found",
        format!("served by {}", w.name),
    );
    let state_condition = condition(
        "WorkspaceRunning",
        running,
        w.actual_state.as_str(),
        format!("{} is {}", w.name, w.actual_state),
    );
    // The target's address under this mount's name (`{port}-{mount}.{domain}`).
    let url = running
        .then_some(w.url.as_ref())
        .flatten()
        .map(|u| u.replacen(&format!("-{}.", w.name), &format!("-{}.", m.name), 1));
    Ok(MountStatus {
        phase: if running {
            MountPhase::Ready
        } else {
            MountPhase::Unavailable
        },
        conditions: vec![found, state_condition],
        url,
        resolved: Some(w.name.clone()),
    })
}

/// How long a connector may stay silent before its mount is `Unknown`: three heartbeats
/// (the partial-reconcile interval), and never under 3 s.
pub fn heartbeat_deadline_ms(state: &AppState) -> i64 {
    let secs = state
        .settings
        .partial_reconciliation_interval_seconds
        .max(1)
        * 3;
    (secs.max(3) * 1000) as i64
}

/// The first condition that makes a report unavailable, or `None` when all hold.
pub fn failing(conditions: &[Condition]) -> Option<&Condition> {
    conditions
        .iter()
        .find(|c| c.kind.starts_with("Workspace") && c.status != "True")
}

/// A `proxy` mount's status: `Connecting` until what backs it first reports (the connector's
/// heartbeat, the agent's probe of the URL), then its reported `Workspace…` conditions while
/// reports keep within the deadline, else `Unknown`.
async fn proxy_status(
    state: &AppState,
    m: &MountRow,
) -> Result<MountStatus, crate::store::StoreError> {
    let now = state.clock.now_ms();
    let deadline = heartbeat_deadline_ms(state);
    let (kind, backer) = if m.is_connector() {
        (CONNECTOR_CONDITION, "the connector".to_owned())
    } else {
        let agent = match m.agent_id {
            Some(a) => state.store.agent_by_id(a).await?.map(|a| a.name),
            None => None,
        };
        let Some(agent) = agent else {
            return Ok(MountStatus {
                phase: MountPhase::Unavailable,
                conditions: vec![condition(
                    AGENT_CONDITION,
                    false,
                    "AgentMissing",
                    "the agent that reached its URL does not exist any more".into(),
                )],
                url: None,
                resolved: None,
            });
        };
        (AGENT_CONDITION, format!("agent {agent}"))
    };
    let Some(seen) = m.reported_at else {
        let waiting = match &m.url {
            None => format!("waiting for `warren connect --mount {}` to dial in", m.name),
            Some(u) => format!("waiting for {backer} to reach {u}"),
        };
        return Ok(MountStatus {
            phase: MountPhase::Connecting,
            conditions: vec![Condition {
                kind: kind.into(),
                status: "Unknown".into(),
                reason: "NeverConnected".into(),
                message: waiting,
            }],
            url: None,
            resolved: None,
        });
    };
    if now - seen > deadline {
        return Ok(MountStatus {
            phase: MountPhase::Unknown,
            conditions: vec![Condition {
                kind: kind.into(),
                status: "Unknown".into(),
                reason: "HeartbeatMissed".into(),
                message: format!(
                    "{backer} has been silent for {} s (its deadline is {} s)",
                    (now - seen) / 1000,
                    deadline / 1000
                ),
            }],
            url: None,
            resolved: None,
        });
    }
    let conditions: Vec<Condition> = m
        .conditions
        .iter()
        .filter(|c| c.kind.starts_with("Workspace"))
        .cloned()
        .collect();
    if failing(&conditions).is_some() {
        return Ok(MountStatus {
            phase: MountPhase::Unavailable,
            conditions,
            url: None,
            resolved: None,
        });
    }
    let config = match m.agent_id {
        Some(a) => state.store.agent_by_id(a).await?.map(|a| a.config),
        None => None,
    }
    .unwrap_or_default();
    let port = match &m.url {
        Some(u) => url_port(u),
        None => m.ports.first().copied(),
    };
    let host = match port {
        Some(p) => format!("{p}-{}", m.name),
        None => format!("terminal-{}", m.name),
    };
    Ok(MountStatus {
        phase: MountPhase::Ready,
        conditions,
        url: Some(format!(
            "{}://{host}.{}/",
            config.workspace_scheme, config.workspace_domain
        )),
        resolved: None,
    })
}

/// The status of `m`, from what it points to now (for the proxy's access answers).
pub async fn get_status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
    status(state, m).await
}

/// The status of `m`, from what it points to now.
async fn status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
    if m.kind == MountType::Workspace.as_str() {
        return link_status(state, m).await;
    }
    if m.kind == MountType::Proxy.as_str() {
        return Ok(proxy_status(state, m).await?);
    }
    let resolved = match (&m.target, &m.url) {
        (None, Some(u)) => Resolved::Url(u.clone()),
        _ => resolve(state, &m.name).await?,
    };
    let condition =
        |ok: bool, reason: &str, message: String| condition(TARGET_CONDITION, ok, reason, message);
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
    let space = space_for(state, who, req).await?;
    let m = insert(
        state,
        &NewMount {
            name: &req.name,
            space_id: space.id,
            owner_id: who.user.id,
            kind: kind.as_str(),
            target,
            url: url.as_deref(),
            connector: None,
            via: None,
            now: state.clock.now_ms(),
        },
    )
    .await?;
    tracing::info!(mount = %m.name, kind = %m.kind, space = %m.space_path, by = %who.user.username, "mount created");
    state.changed();
    to_api(state, &m, Some(Right::Manage)).await
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
    let space = space_for(state, who, req).await?;
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
    let m = insert(
        state,
        &NewMount {
            name: &req.name,
            space_id: space.id,
            owner_id: who.user.id,
            kind: MountType::Proxy.as_str(),
            target: None,
            url: None,
            via: None,
            connector: Some(NewConnector {
                agent_name: &agent_name,
                config: &config,
                token_digest: &crate::crypto::token_digest(&token),
            }),
            now: state.clock.now_ms(),
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
    let space = space_for(state, who, req).await?;
    let m = insert(
        state,
        &NewMount {
            name: &req.name,
            space_id: space.id,
            owner_id: who.user.id,
            kind: MountType::Proxy.as_str(),
            target: None,
            url: Some(&url),
            via: Some(agent.id),
            connector: None,
            now: state.clock.now_ms(),
        },
    )
    .await?;
    tracing::info!(mount = %m.name, url = %url, via = %agent.name, space = %m.space_path, by = %who.user.username, "proxy mount created");
    // The agent learns of it with its next answer; signalled, that is now.
    state.signals.notify(agent.id);
    state.changed();
    to_api(state, &m, Some(Right::Manage)).await
}

/// The port a URL mount serves as (`{port}-{mount}.{domain}`): its URL's.
pub fn url_port(url: &str) -> Option<u16> {
    url::Url::parse(url).ok()?.port_or_known_default()
}

/// The space a new mount goes in: `req.space` (developer or owner there) or the caller's
/// personal space.
async fn space_for(
    state: &AppState,
    who: &Principal,
    req: &CreateMountRequest,
) -> Result<crate::store::spaces::SpaceRow, AppError> {
    for_new_entry(state, who, req.space.as_deref())
        .await
        .map_err(|e| match (e.kind, &req.space) {
            (ErrorKind::NotFound, Some(p)) => AppError::invalid_field(
                "space",
                format!("no space {p:?} (or none you hold a role on)"),
            ),
            _ => e,
        })
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

/// Who may make softlinks to workspace `key` (its managers ask).
pub async fn grants(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Vec<WorkspaceGrant>, AppError> {
    let w = super::workspaces::authorized(state, who, key, Right::Manage).await?;
    Ok(state.store.grants(w.id).await?)
}

/// Allows `username` to make softlinks to workspace `key`.
pub async fn grant(
    state: &AppState,
    who: &Principal,
    key: &str,
    username: &str,
) -> Result<Vec<WorkspaceGrant>, AppError> {
    let w = super::workspaces::authorized(state, who, key, Right::Manage).await?;
    let user = state
        .store
        .user_by_name(username)
        .await?
        .ok_or_else(|| AppError::not_found(format!("user {username:?}")))?;
    state
        .store
        .set_grant(w.id, user.id, state.clock.now_ms())
        .await?;
    tracing::info!(workspace = %w.name, to = %user.username, by = %who.user.username, "softlink grant given");
    state.changed();
    Ok(state.store.grants(w.id).await?)
}

/// Takes a grant back: the user's softlinks to the workspace stop serving (at once at the
/// server; within the proxy's authorisation-cache bound at the proxy).
pub async fn revoke(
    state: &AppState,
    who: &Principal,
    key: &str,
    username: &str,
) -> Result<(), AppError> {
    let w = super::workspaces::authorized(state, who, key, Right::Manage).await?;
    let user = state
        .store
        .user_by_name(username)
        .await?
        .ok_or_else(|| AppError::not_found(format!("user {username:?}")))?;
    if !state.store.remove_grant(w.id, user.id).await? {
        return Err(AppError::not_found(format!(
            "grant of {} to {username:?}",
            w.name
        )));
    }
    tracing::info!(workspace = %w.name, from = %user.username, by = %who.user.username, "softlink grant taken back");
    state.changed();
    Ok(())
}
