//! Sharing a workspace's ports (issue 41, item 4). Each port the proxy serves has a
//! visibility — private (the owner), space (whoever may use the workspace), authenticated
//! (every signed-in user), public (anyone) — from, in order: what a user set
//! (`warren ws port`, the web UI), the devfile's `warren.dev/visibility`, the agent's
//! `ports.default_visibility`; never wider than the agent's `ports.max_visibility`, which is
//! applied when a request comes, so an admin narrowing it narrows every port at once. The
//! injected editor is a shell into the workspace and is never shared wider than `space`.
//!
//! Share links open one port for whoever holds them until they expire or are revoked; the
//! server keeps only their digest. Seeing a workspace's ports needs the right to use it;
//! changing them, and making or revoking links, the right to manage it.

use super::rights::{self, Right};
use super::{AppError, AppState, ErrorKind, Principal};
use crate::app::audit;
use crate::crypto;
use crate::store::agents::AgentRow;
use crate::store::ports::ShareLinkRow;
use crate::store::workspaces::WorkspaceRow;
use std::collections::BTreeMap;
use warren_types::api::{
    CreateShareLinkRequest, SetPortRequest, ShareLink, VisibilitySource, WorkspacePort,
};
use warren_types::config::EDITOR_ENDPOINT;
use warren_types::internal::{ShareRedeemRequest, ShareRedemption};
use warren_types::sharing::{PortPolicy, PortVisibility, SHARE_PATH, SHARE_TOKEN_PREFIX};
use warren_types::DesiredState;

/// A share link lasts this long unless asked otherwise.
const DEFAULT_SHARE_LINK_SECS: u64 = 24 * 3600;
/// Ended links are kept this long for their lists, then dropped.
const KEEP_ENDED_MS: i64 = 24 * 3600 * 1000;

/// A port the proxy serves, as its definition declares it.
#[derive(Debug, Clone)]
struct Declared {
    endpoints: Vec<String>,
    url: String,
    /// The narrowest visibility the devfile's endpoints on this port ask for.
    asked: Option<PortVisibility>,
    editor: bool,
}

/// The ports of `w` the proxy serves, from its endpoints' URLs and its devfile.
fn declared(w: &WorkspaceRow) -> BTreeMap<u16, Declared> {
    let asked: BTreeMap<u16, PortVisibility> = super::render::parse(&w.devfile, "devfile")
        .map(|d| {
            let mut by_port = BTreeMap::new();
            for e in d.containers.iter().flat_map(|c| &c.endpoints) {
                if let Some(v) = e.visibility {
                    let slot = by_port.entry(e.target_port).or_insert(v);
                    *slot = (*slot).min(v);
                }
            }
            by_port
        })
        .unwrap_or_default();
    let mut out: BTreeMap<u16, Declared> = BTreeMap::new();
    for (name, url) in &w.endpoints {
        let Some(port) = port_of_url(&w.name, url) else {
            continue;
        };
        let d = out.entry(port).or_insert_with(|| Declared {
            endpoints: vec![],
            url: url.clone(),
            asked: asked.get(&port).copied(),
            editor: false,
        });
        d.endpoints.push(name.clone());
        d.editor |= name == EDITOR_ENDPOINT;
    }
    out
}

/// Whether `port` of `w` is its injected editor's.
pub(super) fn is_editor(w: &WorkspaceRow, port: u16) -> bool {
    w.endpoints
        .iter()
        .any(|(name, url)| name == EDITOR_ENDPOINT && port_of_url(&w.name, url) == Some(port))
}

/// The port of an endpoint URL of workspace `name`: `{scheme}://{port}-{name}.{domain}/…`.
fn port_of_url(name: &str, url: &str) -> Option<u16> {
    let u = url::Url::parse(url).ok()?;
    let host = u.host_str()?;
    let (port, rest) = host.split_once('-')?;
    rest.strip_prefix(name)?.strip_prefix('.')?;
    port.parse().ok()
}

/// A port's visibility now, and where it comes from.
fn visibility(
    policy: &PortPolicy,
    d: &Declared,
    set: Option<PortVisibility>,
) -> (PortVisibility, VisibilitySource) {
    if d.editor {
        return (PortVisibility::Space, VisibilitySource::Warren);
    }
    match (set, d.asked) {
        (Some(v), _) => (policy.effective(Some(v)), VisibilitySource::User),
        (None, Some(v)) => (policy.effective(Some(v)), VisibilitySource::Definition),
        (None, None) => (policy.effective(None), VisibilitySource::AgentDefault),
    }
}

/// Who may reach port `port` of `w` (served by `agent`) now; `None` when the proxy does not
/// serve that port. The proxy's authorisation (`access`) asks this for every caller who is
/// not the workspace's owner.
pub(super) async fn reach(
    state: &AppState,
    w: &WorkspaceRow,
    agent: &AgentRow,
    port: u16,
) -> Result<Option<PortVisibility>, AppError> {
    let Some(d) = declared(w).remove(&port) else {
        return Ok(None);
    };
    let set = state.store.port_visibilities(w.id).await?.remove(&port);
    Ok(Some(visibility(&agent.config.ports, &d, set).0))
}

async fn agent_of(state: &AppState, w: &WorkspaceRow) -> Result<AgentRow, AppError> {
    state
        .store
        .agent_by_id(w.agent_id)
        .await?
        .ok_or_else(|| AppError::not_found(format!("agent of workspace {:?}", w.name)))
}

fn port_view(
    port: u16,
    d: Declared,
    policy: &PortPolicy,
    set: Option<PortVisibility>,
) -> WorkspacePort {
    let (visibility, source) = visibility(policy, &d, set);
    WorkspacePort {
        port,
        endpoints: d.endpoints,
        url: d.url,
        visibility,
        source,
        max_visibility: policy.max_visibility,
    }
}

/// The ports of workspace `key` the proxy serves, with who may reach each (for those who
/// may use it).
pub async fn list(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Vec<WorkspacePort>, AppError> {
    let w = rights::authorized(state, who, key, Right::Use).await?;
    let agent = agent_of(state, &w).await?;
    let mut set = state.store.port_visibilities(w.id).await?;
    let doors = super::regions::FrontDoors::load(state).await?;
    Ok(declared(&w)
        .into_iter()
        .map(|(port, mut d)| {
            if let Some(front) = &w.agent_front {
                doors.move_url(&mut d.url, front);
            }
            port_view(port, d, &agent.config.ports, set.remove(&port))
        })
        .collect())
}

/// A declared port of `w`, or "not found" naming the ports there are.
fn declared_port(w: &WorkspaceRow, port: u16) -> Result<Declared, AppError> {
    let mut all = declared(w);
    let ports: Vec<String> = all.keys().map(u16::to_string).collect();
    all.remove(&port).ok_or_else(|| {
        AppError::not_found(format!(
            "port {port} of workspace {:?} (the proxy serves {})",
            w.name,
            if ports.is_empty() {
                "none of its ports".to_owned()
            } else {
                ports.join(", ")
            }
        ))
    })
}

/// Workspace `key`, its agent and its port `port`, for a change of who may reach the port:
/// the caller may manage the workspace, it is not terminated, the proxy serves the port, and
/// it is not the editor's (a shell into the workspace, never shared wider).
async fn shareable(
    state: &AppState,
    who: &Principal,
    key: &str,
    port: u16,
) -> Result<(WorkspaceRow, AgentRow, Declared), AppError> {
    let w = rights::authorized(state, who, key, Right::Manage).await?;
    if w.desired_state == DesiredState::Terminated {
        return Err(AppError::not_found(format!("workspace {key:?}")));
    }
    let agent = agent_of(state, &w).await?;
    let d = declared_port(&w, port)?;
    if d.editor {
        return Err(AppError::new(
            ErrorKind::Unprocessable,
            "not_shareable",
            format!(
                "port {port} is the editor's, a shell into the workspace: it is reached by whoever may use the workspace and is never shared wider"
            ),
        ));
    }
    Ok((w, agent, d))
}

/// Sets who may reach port `port` of workspace `key` (or, with `null`, goes back to its
/// definition's choice). Needs the right to manage the workspace; never wider than its
/// agent allows, and the editor's port is not changed.
pub async fn set(
    state: &AppState,
    who: &Principal,
    key: &str,
    port: u16,
    req: &SetPortRequest,
) -> Result<WorkspacePort, AppError> {
    let r: Result<WorkspacePort, AppError> = async {
        let (w, agent, d) = shareable(state, who, key, port).await?;
        let policy = &agent.config.ports;
        if let Some(v) = req.visibility {
            if v > policy.max_visibility {
                return Err(AppError::new(
                    ErrorKind::Unprocessable,
                    "not_allowed_by_agent",
                    format!(
                        "visibility {v} is wider than agent {:?} allows (its ports.max_visibility is {}); an admin may widen it",
                        agent.name, policy.max_visibility
                    ),
                )
                .with_field("visibility"));
            }
        }
        state
            .store
            .set_port_visibility(w.id, port, req.visibility, state.clock.now_ms())
            .await?;
        tracing::info!(workspace = %w.name, port, visibility = ?req.visibility, by = %who.user.username, "port visibility set");
        Ok(port_view(port, d, policy, req.visibility))
    }
    .await;
    audit::audited_with(
        state,
        who,
        "port.set_visibility",
        audit::Target::workspace_key(state, key).await,
        format!(
            "port {port}: {}",
            req.visibility
                .map_or_else(|| "default".to_owned(), |v| v.to_string())
        ),
        r,
    )
    .await
}

fn link_view(l: &ShareLinkRow, url: Option<String>) -> ShareLink {
    ShareLink {
        id: l.id,
        port: l.port,
        url,
        created_by: l.created_by_username.clone(),
        created_at: crate::db::from_millis(l.created_at),
        expires_at: crate::db::from_millis(l.expires_at),
        revoked_at: l.revoked_at.map(crate::db::from_millis),
    }
}

/// The share links of workspace `key` that still open its ports or ended within a day
/// (for who may manage it); never their secrets.
pub async fn share_links(
    state: &AppState,
    who: &Principal,
    key: &str,
) -> Result<Vec<ShareLink>, AppError> {
    let w = rights::authorized(state, who, key, Right::Manage).await?;
    let since = state.clock.now_ms() - KEEP_ENDED_MS;
    Ok(state
        .store
        .share_links(w.id, since)
        .await?
        .iter()
        .map(|l| link_view(l, None))
        .collect())
}

/// Makes a link that opens port `port` of workspace `key` for whoever holds it, until it
/// expires (a day unless asked; at most the agent's `ports.max_share_link_secs`). Needs the
/// right to manage the workspace and an agent that allows links; never for the editor.
pub async fn create_share_link(
    state: &AppState,
    who: &Principal,
    key: &str,
    port: u16,
    req: &CreateShareLinkRequest,
) -> Result<ShareLink, AppError> {
    let r: Result<ShareLink, AppError> = async {
        let (w, agent, _) = shareable(state, who, key, port).await?;
        let policy = &agent.config.ports;
        let refused =
            |code: &'static str, why: String| AppError::new(ErrorKind::Unprocessable, code, why);
        if !policy.share_links {
            return Err(refused(
                "not_allowed_by_agent",
                format!(
                    "agent {:?} does not allow share links (its ports.share_links is false)",
                    agent.name
                ),
            ));
        }
        let secs = req
            .expires_in_secs
            .unwrap_or(DEFAULT_SHARE_LINK_SECS.min(policy.max_share_link_secs));
        if secs == 0 || secs > policy.max_share_link_secs {
            return Err(refused(
                "invalid_field",
                format!(
                    "expires_in_secs: between 1 and {} (agent {:?}'s ports.max_share_link_secs)",
                    policy.max_share_link_secs, agent.name
                ),
            )
            .with_field("expires_in_secs"));
        }
        let now = state.clock.now_ms();
        let _ = state.store.purge_share_links(now - KEEP_ENDED_MS).await;
        let token = format!("{SHARE_TOKEN_PREFIX}{}", crypto::random_secret(32));
        let expires_at = now.saturating_add(i64::try_from(secs * 1000).unwrap_or(i64::MAX));
        let id = state
            .store
            .insert_share_link(
                w.id,
                port,
                &crypto::token_digest(&token),
                who.user.id,
                now,
                expires_at,
            )
            .await?;
        let cfg = &agent.config;
        let url = format!(
            "{}://{port}-{}.{}{SHARE_PATH}?token={token}",
            cfg.workspace_scheme, w.name, cfg.workspace_domain
        );
        tracing::info!(workspace = %w.name, port, link = id, secs, by = %who.user.username, "share link made");
        let row = state
            .store
            .share_link_by_id(id)
            .await?
            .ok_or_else(|| AppError::not_found(format!("share link {id}")))?;
        Ok(link_view(&row, Some(url)))
    }
    .await;
    audit::audited_with(
        state,
        who,
        "share_link.create",
        audit::Target::workspace_key(state, key).await,
        format!("port {port}"),
        r,
    )
    .await
}

/// Revokes share link `id` of workspace `key` (again: no change); the proxy stops honouring
/// it within its authorisation cache's bound.
pub async fn revoke_share_link(
    state: &AppState,
    who: &Principal,
    key: &str,
    id: i64,
) -> Result<(), AppError> {
    let r: Result<(), AppError> = async {
        let w = rights::authorized(state, who, key, Right::Manage).await?;
        if !state
            .store
            .revoke_share_link(w.id, id, state.clock.now_ms())
            .await?
        {
            return Err(AppError::not_found(format!(
                "share link {id} of workspace {:?}",
                w.name
            )));
        }
        tracing::info!(workspace = %w.name, link = id, by = %who.user.username, "share link revoked");
        Ok(())
    }
    .await;
    audit::audited_with(
        state,
        who,
        "share_link.revoke",
        audit::Target::workspace_key(state, key).await,
        format!("link {id}"),
        r,
    )
    .await
}

fn hidden() -> AppError {
    AppError::not_found("share link")
}

/// The share link `id` while it opens port `port` of the workspace named `host`: not
/// expired or revoked, the workspace not terminated, the port still served and not the
/// editor's, links still allowed by its agent. Every refusal is the same "not found".
pub(super) async fn open_link(
    state: &AppState,
    link: Option<ShareLinkRow>,
    host: &str,
    port: u16,
) -> Result<(ShareLinkRow, WorkspaceRow), AppError> {
    let l = link
        .filter(|l| l.port == port && l.valid_at(state.clock.now_ms()))
        .ok_or_else(hidden)?;
    let w = state
        .store
        .workspace_by_id(l.workspace_id)
        .await?
        .filter(|w| w.name == host && w.desired_state != DesiredState::Terminated)
        .ok_or_else(hidden)?;
    let agent = agent_of(state, &w).await?;
    let served = declared(&w).get(&port).is_some_and(|d| !d.editor);
    if !served || !agent.config.ports.share_links {
        return Err(hidden());
    }
    Ok((l, w))
}

/// A share link's secret brought to a workspace host by its holder (the proxy asks).
pub async fn redeem(
    state: &AppState,
    req: &ShareRedeemRequest,
) -> Result<ShareRedemption, AppError> {
    if !req.token.starts_with(SHARE_TOKEN_PREFIX) || req.token.len() > 200 {
        return Err(hidden());
    }
    let link = state
        .store
        .share_link_by_digest(&crypto::token_digest(&req.token))
        .await?;
    let (l, w) = open_link(state, link, &req.host, req.port).await?;
    tracing::info!(workspace = %w.name, port = l.port, link = l.id, "share link opened");
    Ok(ShareRedemption {
        link_id: l.id,
        workspace_id: w.id,
        expires_at_ms: l.expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_from_their_urls() {
        assert_eq!(
            port_of_url("web", "http://8080-web.ws.localhost:7080/app"),
            Some(8080)
        );
        assert_eq!(port_of_url("web", "http://8080-webby.ws.localhost/"), None);
        assert_eq!(
            port_of_url("a-b", "https://3000-a-b.example.com/"),
            Some(3000)
        );
        assert_eq!(port_of_url("web", "not a url"), None);
    }

    #[test]
    fn the_editor_stays_with_those_who_use_the_workspace() {
        let d = |editor, asked| Declared {
            endpoints: vec![],
            url: String::new(),
            asked,
            editor,
        };
        let open = PortPolicy {
            max_visibility: PortVisibility::Public,
            ..PortPolicy::default()
        };
        assert_eq!(
            visibility(
                &open,
                &d(true, Some(PortVisibility::Public)),
                Some(PortVisibility::Public)
            )
            .0,
            PortVisibility::Space
        );
        assert_eq!(
            visibility(&open, &d(false, Some(PortVisibility::Public)), None),
            (PortVisibility::Public, VisibilitySource::Definition)
        );
        let closed = PortPolicy {
            max_visibility: PortVisibility::Private,
            ..PortPolicy::default()
        };
        assert_eq!(
            visibility(&closed, &d(false, None), Some(PortVisibility::Public)),
            (PortVisibility::Private, VisibilitySource::User),
            "the agent's most wins over what was set before it narrowed"
        );
    }
}
