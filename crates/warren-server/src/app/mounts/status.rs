//! A mount's status, computed on every read from what backs it: a softlink's target and
//! grant, a connector's last report and heartbeat, a URL mount's agent and its probes.

use super::*;

/// A softlink's status: the state of the workspace that serves it.
pub(super) async fn link_status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
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
pub(super) async fn proxy_status(
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
pub(super) async fn status(state: &AppState, m: &MountRow) -> Result<MountStatus, AppError> {
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
