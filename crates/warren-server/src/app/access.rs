//! The proxy's questions (access.md): may a user reach a workspace port, may an SSH key or
//! token open a workspace; the stopped page's start button; activity for the idle policy.
//!
//! Those who may use a workspace reach it: its owner, and the developers and owners of its
//! space (spec/mounts.md, [`Right::Use`]) — its terminal, and the ports shared with its space
//! (the owner every port). A port shared wider lets in every signed-in user or anyone, and a
//! share link its own port (`ports`). Admins as such are refused, as access.md says; they
//! manage workspaces through the API instead.
//! Every refusal (unknown workspace, another user, undeclared port, terminated workspace,
//! bad token) is the same "not found", so the answer never tells whether a workspace exists.
//! A connector mount (spec/mounts.md) is answered like a workspace served by the connector's
//! agent, with the reason it cannot serve when its connector is silent or down.

use super::budgets::Spent;
use super::rights::{member_right, Right};
use super::{auth, AppError, AppState};
use crate::store::mounts::MountRow;
use crate::store::workspaces::WorkspaceRow;
use warren_types::api::{MountPhase, MountType};
use warren_types::internal::{
    ActivityReport, EntryRedirect, PlannedStop, SshAuthorization, SshAuthorizeQuery,
    WorkspaceAccess, WorkspaceAccessQuery, WorkspaceStartRequest,
};
use warren_types::sharing::PortVisibility;
use warren_types::{ActualState, AgentId, DesiredState, UserId, WorkspaceId};

/// Most workspaces one activity report may carry.
const MAX_ACTIVITY_ITEMS: usize = 10_000;

/// A query that names neither or both of two ways to say who asks.
fn exactly_one_of(a: &str, b: &str) -> AppError {
    AppError::new(
        super::ErrorKind::Invalid,
        "invalid_query",
        format!("query string: exactly one of `{a}` and `{b}` is required"),
    )
}

/// Who asks: the user the proxy names, or the owner of a `workspace`-scoped token.
async fn asking(state: &AppState, q: &WorkspaceAccessQuery) -> Result<UserId, AppError> {
    match asker(state, q).await? {
        Asker::User(u) => Ok(u),
        Asker::Share(_) | Asker::Anyone => Err(hidden()),
    }
}

/// Who asks about a workspace port.
enum Asker {
    /// A user (named by the proxy's session, or by a `workspace`-scoped token).
    User(UserId),
    /// Whoever holds share link `id` (the proxy's share cookie names it).
    Share(i64),
    /// Someone who has not signed in.
    Anyone,
}

async fn asker(state: &AppState, q: &WorkspaceAccessQuery) -> Result<Asker, AppError> {
    match (q.user, q.bearer.as_deref(), q.share) {
        (Some(u), None, None) => Ok(Asker::User(u)),
        (None, Some(b), None) => match auth::workspace_token_user(state, b).await? {
            Some(u) => Ok(Asker::User(u)),
            None => {
                let why = auth::REFUSED_TOKEN;
                super::audit::refused_credential(state, "token.use", "token", why).await;
                Err(hidden())
            }
        },
        (None, None, Some(id)) => Ok(Asker::Share(id)),
        (None, None, None) => Ok(Asker::Anyone),
        _ => Err(AppError::new(
            super::ErrorKind::Invalid,
            "invalid_query",
            "query string: at most one of `user`, `bearer` and `share`",
        )),
    }
}

fn hidden() -> AppError {
    AppError::not_found("workspace")
}

/// The declared (public) ports of a workspace, from the URLs its render produced:
/// `{scheme}://{port}-{name}.{domain}/…`.
pub fn declared_ports(w: &WorkspaceRow) -> Vec<u16> {
    let prefix_end = format!("-{}.", w.name);
    w.endpoints
        .values()
        .filter_map(|u| url::Url::parse(u).ok())
        .filter_map(|u| {
            let host = u.host_str()?.to_owned();
            let i = host.find(&prefix_end)?;
            host[..i].parse::<u16>().ok()
        })
        .collect()
}

/// The workspace `name` and the caller's username if `user` may use it, the account is active
/// and the workspace is not terminated; else the usual refusal.
async fn usable(
    state: &AppState,
    name: &str,
    user: UserId,
) -> Result<(WorkspaceRow, String), AppError> {
    let w = state
        .store
        .workspace_by_name(name)
        .await?
        .ok_or_else(hidden)?;
    let reachable =
        w.desired_state != DesiredState::Terminated && w.actual_state != ActualState::Terminated;
    if !reachable || member_right(state, user, &w).await? < Some(Right::Use) {
        return Err(hidden());
    }
    // A disabled account's browser sessions, keys and tokens all end here, whichever way
    // the proxy learnt who asks.
    Ok((w, active_user(state, user).await?.username))
}

/// The account `user` while it is active: a disabled account's browser sessions, keys and
/// tokens all end here; otherwise the usual "not found".
async fn active_user(
    state: &AppState,
    user: UserId,
) -> Result<crate::store::users::UserRow, AppError> {
    state
        .store
        .user_by_id(user)
        .await?
        .filter(|u| u.is_active())
        .ok_or_else(hidden)
}

/// [`usable`], or — when `name` is a softlink (a `workspace` mount) — the workspace serving
/// it: the user may use the mount, its chain ends at a live workspace, and the mount's owner
/// may still link to it (a grant, or managing it). Every refusal is the usual "not found".
async fn usable_or_linked(
    state: &AppState,
    name: &str,
    user: UserId,
) -> Result<(WorkspaceRow, String), AppError> {
    match usable(state, name, user).await {
        Err(e) if e.kind == super::ErrorKind::NotFound => {}
        r => return r,
    }
    let m = state
        .store
        .mount_by_name(name)
        .await?
        .filter(|m| m.kind == MountType::Workspace.as_str())
        .ok_or_else(hidden)?;
    let username = mount_user(state, &m, user).await?;
    let super::mounts::Linked::Workspace(w) = super::mounts::resolve_link(state, name).await?
    else {
        return Err(hidden());
    };
    let reachable =
        w.desired_state != DesiredState::Terminated && w.actual_state != ActualState::Terminated;
    if !reachable || !super::mounts::may_link(state, m.owner_id, &w).await? {
        return Err(hidden());
    }
    Ok((*w, username))
}

/// Whether a request may wake `w`: the idle timeout stopped it and its agent allows it.
async fn wakes(state: &AppState, w: &WorkspaceRow) -> Result<bool, AppError> {
    if !(w.idle_stopped && w.desired_state == DesiredState::Stopped) {
        return Ok(false);
    }
    Ok(state
        .store
        .agent_by_id(w.agent_id)
        .await?
        .is_some_and(|a| a.config.lifecycle.wake_on_request))
}

/// What a timer will do to `w` next, as the proxy tells it in terminals.
fn planned_stop(w: &WorkspaceRow, spent: &Spent) -> Option<PlannedStop> {
    super::lifecycle::planned_for(w, spent).map(|p| PlannedStop {
        at_ms: p.at,
        terminated: p.to == DesiredState::Terminated,
        reason: p.reason,
    })
}

fn answer(
    w: WorkspaceRow,
    user: UserId,
    port: Option<u16>,
    wake: bool,
    spent: &Spent,
) -> WorkspaceAccess {
    let planned_stop = planned_stop(&w, spent);
    let editor = port.is_some_and(|p| super::ports::is_editor(&w, p));
    WorkspaceAccess {
        planned_stop,
        wake_on_request: wake,
        allowed: true,
        workspace_id: w.id,
        workspace_name: w.name,
        agent_id: w.agent_id,
        namespace: w.namespace,
        port,
        desired_state: w.desired_state,
        actual_state: w.actual_state,
        user_id: user,
        mount: false,
        unavailable: None,
        mount_url: None,
        may_start: true,
        editor,
    }
}

/// The username of `user` if the account is active and may use mount `m`; else the usual
/// "not found".
async fn mount_user(state: &AppState, m: &MountRow, user: UserId) -> Result<String, AppError> {
    let u = active_user(state, user).await?;
    let memberships = super::rights::memberships(state, user).await?;
    if super::mounts::member_right(&memberships, user, m) < Some(Right::Use) {
        return Err(hidden());
    }
    Ok(u.username)
}

/// A `proxy` mount (a connector's, or a URL through an agent) the user may use (the usual
/// "not found" otherwise), with the reason it cannot serve now, if any.
async fn usable_proxy_mount(
    state: &AppState,
    name: &str,
    user: UserId,
) -> Result<(MountRow, String, Option<String>), AppError> {
    let m = state
        .store
        .mount_by_name(name)
        .await?
        .filter(|m| m.kind == MountType::Proxy.as_str())
        .ok_or_else(hidden)?;
    let username = mount_user(state, &m, user).await?;
    if m.agent_id.is_none() {
        return Err(hidden());
    }
    let status = super::mounts::get_status(state, &m).await?;
    let unavailable = match status.phase {
        MountPhase::Ready => None,
        phase => Some(
            match status.conditions.iter().find(|c| c.status != "True") {
                Some(c) => format!("{} is {phase:?}: {} ({})", m.name, c.message, c.reason),
                None => format!("{} is {phase:?}", m.name),
            },
        ),
    };
    Ok((m, username, unavailable))
}

/// The access answer for a `proxy` mount: its agent (the connector's, or the one reaching
/// its URL) serves `port` of "the workspace" named after the mount.
fn mount_answer(
    m: &MountRow,
    user: UserId,
    port: Option<u16>,
    unavailable: Option<String>,
) -> WorkspaceAccess {
    let ready = unavailable.is_none();
    WorkspaceAccess {
        allowed: true,
        workspace_id: WorkspaceId(0),
        workspace_name: m.name.clone(),
        agent_id: m.agent_id.unwrap_or(AgentId(0)),
        namespace: String::new(),
        port,
        desired_state: DesiredState::Running,
        actual_state: if ready {
            ActualState::Running
        } else {
            ActualState::Unknown
        },
        user_id: user,
        wake_on_request: false,
        mount: true,
        unavailable,
        mount_url: m.url.clone(),
        may_start: false,
        planned_stop: None,
        editor: false,
    }
}

/// Where the redirect mount `q.host` leads, for a user (named, or by a `workspace`-scoped
/// token) who may see it: an entry of this Warren at the end of its chain, or an external
/// URL. Anything else — no such mount, another kind of mount, a user who may not see it —
/// is the usual "not found"; a chain that breaks is "unavailable", naming where.
pub async fn redirect(
    state: &AppState,
    q: &WorkspaceAccessQuery,
) -> Result<EntryRedirect, AppError> {
    let user = asking(state, q).await?;
    let u = active_user(state, user).await?;
    let m = state
        .store
        .mount_by_name(&q.host)
        .await?
        .filter(|m| m.kind == MountType::Redirect.as_str())
        .ok_or_else(hidden)?;
    let memberships = super::rights::memberships(state, u.id).await?;
    if super::mounts::member_right(&memberships, u.id, &m).is_none() {
        return Err(hidden());
    }
    match super::mounts::resolve(state, &m.name).await? {
        super::mounts::Resolved::Entry(e) => Ok(EntryRedirect {
            entry: Some(e),
            url: None,
        }),
        super::mounts::Resolved::Url(url) => Ok(EntryRedirect {
            entry: None,
            url: Some(url),
        }),
        super::mounts::Resolved::Missing(e) => Err(AppError::new(
            super::ErrorKind::Unavailable,
            "redirect_broken",
            format!("{} redirects to {e}, which does not exist any more", m.name),
        )),
        super::mounts::Resolved::Cycle(_) | super::mounts::Resolved::TooLong => Err(AppError::new(
            super::ErrorKind::Unavailable,
            "redirect_broken",
            format!(
                "the redirects from {} loop or go on for more than {} entries",
                m.name,
                super::mounts::MAX_CHAIN
            ),
        )),
    }
}

/// May the caller reach the workspace `q.host`, and port `q.port` of it? Those who may use
/// the workspace reach its terminal and the ports it shares with its space (its owner every
/// port); a port shared wider lets in every signed-in user, or anyone; a share link opens its
/// own port (`ports`).
pub async fn workspace(
    state: &AppState,
    q: &WorkspaceAccessQuery,
) -> Result<WorkspaceAccess, AppError> {
    let user = match asker(state, q).await? {
        Asker::User(u) => u,
        Asker::Share(id) => {
            let port = q.port.ok_or_else(hidden)?;
            let link = state.store.share_link_by_id(id).await?;
            let (_, w) = super::ports::open_link(state, link, &q.host, port).await?;
            return Ok(outsider_answer(w, UserId(0), port));
        }
        Asker::Anyone => return beyond_use(state, q, None).await,
    };
    let (w, _) = match usable_or_linked(state, &q.host, user).await {
        Err(e) if e.kind == super::ErrorKind::NotFound => {
            let (m, _, unavailable) = match usable_proxy_mount(state, &q.host, user).await {
                Err(e) if e.kind == super::ErrorKind::NotFound => {
                    return beyond_use(state, q, Some(user)).await
                }
                r => r?,
            };
            // A URL serves its own port and no terminal; a connector the ports it declared
            // (none known before its first heartbeat).
            let serves = match (&m.url, q.port) {
                (Some(u), Some(p)) => super::mounts::url_port(u) == Some(p),
                (Some(_), None) => false,
                (None, Some(p)) => m.ports.contains(&p) || unavailable.is_some(),
                (None, None) => true,
            };
            if !serves {
                return Err(hidden());
            }
            return Ok(mount_answer(&m, user, q.port, unavailable));
        }
        r => r?,
    };
    if let Some(p) = q.port {
        if !declared_ports(&w).contains(&p) {
            return Err(hidden());
        }
        // Its owner reaches every port; the others who use it those shared with its space.
        if w.owner_id != user && port_reach(state, &w, p).await? < Some(PortVisibility::Space) {
            return Err(hidden());
        }
    }
    let wake = wakes(state, &w).await?;
    // Through a softlink, the target's start button only for those who use it themselves.
    let may_start = w.name == q.host || member_right(state, user, &w).await? >= Some(Right::Use);
    let spent = Spent::load_for(state, &w).await?;
    Ok(WorkspaceAccess {
        may_start,
        ..answer(w, user, q.port, wake && may_start, &spent)
    })
}

/// Who may reach port `port` of `w` now (`None`: the proxy does not serve it).
async fn port_reach(
    state: &AppState,
    w: &WorkspaceRow,
    port: u16,
) -> Result<Option<PortVisibility>, AppError> {
    let Some(agent) = state.store.agent_by_id(w.agent_id).await? else {
        return Ok(None);
    };
    super::ports::reach(state, w, &agent, port).await
}

/// A caller who may not use workspace `q.host` (a signed-in `user`, or anyone): only a port
/// shared with every signed-in user, or with anyone, and nothing else (no terminal, no start).
async fn beyond_use(
    state: &AppState,
    q: &WorkspaceAccessQuery,
    user: Option<UserId>,
) -> Result<WorkspaceAccess, AppError> {
    let port = q.port.ok_or_else(hidden)?;
    let needed = match user {
        Some(u) => {
            active_user(state, u).await?;
            PortVisibility::Authenticated
        }
        None => PortVisibility::Public,
    };
    let w = state
        .store
        .workspace_by_name(&q.host)
        .await?
        .filter(|w| {
            w.desired_state != DesiredState::Terminated && w.actual_state != ActualState::Terminated
        })
        .ok_or_else(hidden)?;
    if !declared_ports(&w).contains(&port) || port_reach(state, &w, port).await? < Some(needed) {
        return Err(hidden());
    }
    Ok(outsider_answer(w, user.unwrap_or(UserId(0)), port))
}

/// The answer for someone let in by a port's visibility or a share link: that port only,
/// and never waking or starting the workspace on its owner's behalf.
fn outsider_answer(w: WorkspaceRow, user: UserId, port: u16) -> WorkspaceAccess {
    WorkspaceAccess {
        may_start: false,
        // Outsiders get no terminal to be warned in.
        ..answer(w, user, Some(port), false, &Spent::default())
    }
}

/// The stopped-workspace page's start button, on a user's behalf: the same rules as a
/// desired-state request through the API (a terminated workspace is refused naming its
/// state); anyone who may not use the workspace gets the usual "not found".
pub async fn start(
    state: &AppState,
    req: &WorkspaceStartRequest,
) -> Result<WorkspaceAccess, AppError> {
    if !state
        .store
        .user_by_id(req.user_id)
        .await?
        .is_some_and(|u| u.is_active())
    {
        return Err(hidden());
    }
    let load = || async {
        let w = state
            .store
            .workspace_by_id(req.workspace_id)
            .await?
            .ok_or_else(hidden)?;
        if member_right(state, req.user_id, &w).await? < Some(Right::Use) {
            return Err(hidden());
        }
        Ok(w)
    };
    let w =
        super::workspaces::change_desired_state(state, load, DesiredState::Running, false).await?;
    // Just started, so within its budgets.
    Ok(answer(w, req.user_id, None, false, &Spent::default()))
}

/// Records the proxy's activity report.
pub async fn record_activity(state: &AppState, report: &ActivityReport) -> Result<(), AppError> {
    if report.workspaces.len() > MAX_ACTIVITY_ITEMS {
        return Err(AppError::invalid_field(
            "workspaces",
            format!("at most {MAX_ACTIVITY_ITEMS} entries per report"),
        ));
    }
    let items: Vec<_> = report
        .workspaces
        .iter()
        .map(|a| (a.workspace_id, a.last_activity_ms))
        .collect();
    state
        .store
        .record_activity(&items, state.clock.now_ms())
        .await?;
    Ok(())
}

/// May this SSH key or token open the workspace named `q.username`?
pub async fn ssh(state: &AppState, q: &SshAuthorizeQuery) -> Result<SshAuthorization, AppError> {
    let (user, credential) = match (q.public_key_fingerprint.as_deref(), q.token.as_deref()) {
        (Some(fp), None) => (
            state
                .store
                .ssh_key_by_fingerprint(fp)
                .await?
                .map(|k| k.user_id),
            "ssh key",
        ),
        (None, Some(t)) => (auth::workspace_token_user(state, t).await?, "token"),
        _ => return Err(exactly_one_of("public_key_fingerprint", "token")),
    };
    let Some(user) = user else {
        // A client tries its keys one after another: once per source and minute.
        let why = match credential {
            "token" => auth::REFUSED_TOKEN,
            _ => "no account has this SSH key",
        };
        super::audit::refused_credential(state, "ssh.sign_in", credential, why).await;
        return Err(hidden());
    };
    let (w, username) = match usable_or_linked(state, &q.username, user).await {
        Err(e) if e.kind == super::ErrorKind::NotFound => {
            let (m, username, unavailable) = usable_proxy_mount(state, &q.username, user).await?;
            if !m.is_connector() {
                // A URL has no shell to log in to.
                return Err(hidden());
            }
            let a = mount_answer(&m, user, None, unavailable);
            return Ok(SshAuthorization {
                user_id: user,
                username,
                workspace_id: a.workspace_id,
                workspace_name: a.workspace_name,
                agent_id: a.agent_id,
                namespace: a.namespace,
                desired_state: a.desired_state,
                actual_state: a.actual_state,
                wake_on_request: false,
                mount: true,
                unavailable: a.unavailable,
                planned_stop: None,
            });
        }
        r => r?,
    };
    // Through a softlink, waking the target is for those who use it themselves.
    let may_start =
        w.name == q.username || member_right(state, user, &w).await? >= Some(Right::Use);
    let wake_on_request = may_start && wakes(state, &w).await?;
    let spent = Spent::load_for(state, &w).await?;
    Ok(SshAuthorization {
        planned_stop: planned_stop(&w, &spent),
        wake_on_request,
        user_id: user,
        username,
        workspace_id: w.id,
        workspace_name: w.name,
        agent_id: w.agent_id,
        namespace: w.namespace,
        desired_state: w.desired_state,
        actual_state: w.actual_state,
        mount: false,
        unavailable: None,
    })
}
