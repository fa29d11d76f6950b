//! A reconcile (reconcile.md): store what the agent saw, derive actual states, apply
//! RestartRequested and the timers, and answer with the workspaces the agent must act on —
//! all in one transaction (the store's [`ReconcileTx`]), so the same request twice leaves
//! the same state.

use super::lifecycle::{is_idle_stop, timer_decision, TimerInput};
use super::{auth, AppError, AppState};
use crate::store::agents::AgentRow;
use crate::store::reconcile::{ReconcileTx, ReportUpdate, ReportedRow, ResponseRow, Selection};
use crate::store::StoreError;
use std::collections::BTreeMap;
use warren_types::lifecycle::derive_actual_state;
use warren_types::reconcile::{
    ReconcileRequest, ReconcileResponse, UpdateType, WorkspaceAgentInfo, WorkspaceRailsInfo,
    AGENT_ID_HEADER, CONFIG_GENERATION_ANNOTATION,
};
use warren_types::{ActualState, AgentId, DesiredState, WorkspaceId};

/// `last_seen_at` is written at most this often, so a no-op partial reconcile writes nothing.
const LAST_SEEN_GRANULARITY_MS: i64 = 30_000;
const MAX_ATTEMPTS: usize = 5;
/// Most ports one connector serves.
const MAX_CONNECTOR_PORTS: usize = 64;
/// Most characters of a runtime fault kept (the agent's error chain, shown to users).
const MAX_FAULT_CHARS: usize = 2000;

/// A relay's reconcile call for the agent its JWT names (`sub`); `agent_header` is the
/// agent id header the relay also sent, which must agree.
pub async fn handle(
    state: &AppState,
    bearer: Option<&str>,
    agent_header: Option<&str>,
    req: &ReconcileRequest,
) -> Result<ReconcileResponse, AppError> {
    let claims = auth::relay(state, bearer)?;
    let agent_id: AgentId = claims
        .sub
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| AppError::unauthenticated("relay JWT lacks the agent id in `sub`"))?;
    if let Some(h) = agent_header {
        if h != agent_id.to_string() {
            return Err(AppError::unauthenticated(format!(
                "{AGENT_ID_HEADER} does not match the JWT's subject"
            )));
        }
    }
    let agent = state
        .store
        .agent_by_id(agent_id)
        .await?
        .ok_or_else(|| AppError::unauthenticated(format!("agent {agent_id} does not exist")))?;
    let started = tokio::time::Instant::now();
    // Connectors' agent rows carry the prefix (no agent may take it), so an agent's call
    // costs no extra query.
    if req.connector.is_some() || agent.is_connector() {
        return connector_heartbeat(state, &agent, req).await;
    }
    let mut resp = match &req.runtime_fault {
        Some(fault) => runtime_fault(state, &agent, fault).await?,
        None => reconcile(state, &agent, req).await?,
    };
    resp.gitops_sources = state.store.agent_source_names(agent.id).await?;
    // Also with a runtime fault: a URL's probe has nothing to do with the runtime.
    resp.mounts = url_mounts(state, &agent, &req.mounts).await?;
    let kind = match req.update_type {
        UpdateType::Full => "full",
        UpdateType::Partial => "partial",
    };
    metrics::counter!("warren_reconcile_total", "update_type" => kind).increment(1);
    metrics::histogram!("warren_reconcile_seconds", "update_type" => kind)
        .record(started.elapsed().as_secs_f64());
    Ok(resp)
}

/// Stores the agent's probes of the `proxy` mounts it reaches, and lists those mounts for it.
/// Reports about mounts that are not (or no longer) this agent's are ignored.
async fn url_mounts(
    state: &AppState,
    agent: &AgentRow,
    reports: &[warren_types::reconcile::MountReport],
) -> Result<Vec<warren_types::reconcile::ProxyMountSpec>, AppError> {
    let mine = state.store.url_mounts_of(agent.id).await?;
    let now = state.clock.now_ms();
    let mut changed = false;
    for r in reports {
        if !mine.iter().any(|(name, _)| *name == r.mount) {
            continue;
        }
        let Some(m) = state.store.mount_by_name(&r.mount).await? else {
            continue;
        };
        let conditions = clean_conditions(&r.conditions);
        let was = super::mounts::failing(&m.conditions).map(|c| c.reason.clone());
        let now_failing = super::mounts::failing(&conditions).map(|c| c.reason.clone());
        let back = m
            .reported_at
            .is_none_or(|t| now - t > super::mounts::heartbeat_deadline_ms(state));
        changed |= back || was != now_failing;
        state
            .store
            .record_mount_report(m.id, &[], &conditions, now)
            .await?;
    }
    if changed {
        state.changed();
    }
    Ok(mine
        .into_iter()
        .map(|(name, url)| warren_types::reconcile::ProxyMountSpec { name, url })
        .collect())
}

/// Reported conditions as stored: only `Workspace…` ones, each field bounded.
fn clean_conditions(
    conditions: &[warren_types::api::Condition],
) -> Vec<warren_types::api::Condition> {
    conditions
        .iter()
        .filter(|c| c.kind.starts_with("Workspace"))
        .take(16)
        .map(|c| warren_types::api::Condition {
            kind: c.kind.chars().take(64).collect(),
            status: c.status.chars().take(16).collect(),
            reason: c.reason.chars().take(64).collect(),
            message: c.message.chars().take(MAX_FAULT_CHARS).collect(),
        })
        .collect()
}

/// A connector's heartbeat (spec/mounts.md): the token must be the connector token of the
/// mount the connector says it backs; what it reports is stored with the time. It never gets
/// workspaces to run.
async fn connector_heartbeat(
    state: &AppState,
    agent: &AgentRow,
    req: &ReconcileRequest,
) -> Result<ReconcileResponse, AppError> {
    let mount = state.store.connector_mount(agent.id).await?;
    let (m, report) = match (mount, &req.connector) {
        (Some(m), Some(r)) if m.name == r.mount => (m, r),
        (Some(m), Some(r)) => {
            return Err(AppError::forbidden(format!(
                "this connector token backs mount {}, not {}; each mount has its own (`warren \
                 mount create NAME --type proxy --connector`)",
                m.name, r.mount
            )))
        }
        (Some(m), None) => {
            return Err(AppError::forbidden(format!(
                "this is the connector token of mount {}: run `warren connect --mount {}` with \
                 it, not an agent",
                m.name, m.name
            )))
        }
        (None, Some(r)) => {
            return Err(AppError::forbidden(format!(
                "this token is agent {}'s, not the connector token of mount {}",
                agent.name, r.mount
            )))
        }
        (None, None) => {
            return Err(AppError::forbidden(format!(
                "agent {} belonged to a connector mount that was removed",
                agent.name
            )))
        }
    };
    if !req.workspace_agent_infos.is_empty() {
        return Err(AppError::invalid_field(
            "workspace_agent_infos",
            "a connector runs no workspaces",
        ));
    }
    let mut ports = report.ports.clone();
    ports.sort_unstable();
    ports.dedup();
    if ports.first() == Some(&0) || ports.len() > MAX_CONNECTOR_PORTS {
        return Err(AppError::invalid_field(
            "connector.ports",
            format!("a connector serves 1 to {MAX_CONNECTOR_PORTS} ports between 1 and 65535"),
        ));
    }
    let conditions = clean_conditions(&report.conditions);
    let was = super::mounts::failing(&m.conditions).map(|c| c.reason.clone());
    let now = state.clock.now_ms();
    state
        .store
        .record_mount_report(m.id, &ports, &conditions, now)
        .await?;
    let deadline = super::mounts::heartbeat_deadline_ms(state);
    let back = m.reported_at.is_none_or(|t| now - t > deadline);
    if back
        || ports != m.ports
        || was != super::mounts::failing(&conditions).map(|c| c.reason.clone())
    {
        tracing::info!(mount = %m.name, ports = ?ports, "connector reporting");
        state.changed();
    }
    Ok(ReconcileResponse::nothing(state.settings))
}

/// The agent cannot see its runtime: record why (the first report's time is kept), mark the
/// agent seen, and answer with nothing to do, so nothing is marked as sent either.
async fn runtime_fault(
    state: &AppState,
    agent: &AgentRow,
    fault: &str,
) -> Result<ReconcileResponse, AppError> {
    let fault: String = fault.chars().take(MAX_FAULT_CHARS).collect();
    if agent.runtime_fault.as_ref().map(|(f, _)| f) != Some(&fault) {
        tracing::warn!(agent = %agent.name, fault, "the agent cannot see its runtime");
    }
    state
        .store
        .set_runtime_fault(agent.id, &fault, state.clock.now_ms())
        .await?;
    // The agent's fault shows on each of its workspaces.
    state.changed();
    Ok(ReconcileResponse::nothing(state.settings))
}

/// The reconcile transaction, retried when the database reports a conflict.
pub async fn reconcile(
    state: &AppState,
    agent: &AgentRow,
    req: &ReconcileRequest,
) -> Result<ReconcileResponse, AppError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match reconcile_once(state, agent, req).await {
            Err(e) if attempt < MAX_ATTEMPTS && e.is_retryable() => {
                tracing::debug!(error = %warren_types::error_chain(&e), attempt, "reconcile conflicted; retrying");
            }
            Err(e) => return Err(e.into()),
            Ok((resp, changes)) => {
                if !req.used.is_empty() {
                    super::usage::record_used(state, agent, &req.used).await;
                }
                if changes.desired {
                    state.signals.notify(agent.id);
                }
                if changes.any {
                    state.changed();
                }
                return Ok(resp);
            }
        }
    }
}

/// Why a workspace failed, in words; `None` keeps the stored reason.
fn failure_reason(
    info: &WorkspaceAgentInfo,
    derived: ActualState,
    old: &Option<String>,
) -> Option<String> {
    match derived {
        ActualState::Error => info.error_details.as_ref().map(|e| {
            let kind = match e.error_type {
                warren_types::reconcile::ErrorType::Applier => {
                    "applying the workspace's objects failed"
                }
                warren_types::reconcile::ErrorType::Runtime => "the runtime reported an error",
            };
            format!("{kind}: {}", e.error_message)
        }),
        ActualState::Failed => Some(match &info.pod_failure {
            Some(p) if p.message.is_empty() => p.reason.clone(),
            Some(p) => format!("{}: {}", p.reason, p.message),
            None => {
                let msg = info
                    .latest_k8s_deployment_info
                    .as_ref()
                    .and_then(|d| d.pointer("/status/conditions"))
                    .and_then(|c| c.as_array())
                    .and_then(|c| {
                        c.iter()
                            .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Progressing"))
                    })
                    .and_then(|c| c.get("message"))
                    .and_then(|m| m.as_str())
                    .unwrap_or("the workspace did not become ready in time");
                // The deadline's message names only the ReplicaSet; what held the pod is
                // what the user can act on.
                match info.pod_waiting.as_ref().filter(|w| !w.message.is_empty()) {
                    Some(w) => format!(
                        "ProgressDeadlineExceeded: {msg}; no node could run it: {}",
                        w.message
                    ),
                    None => format!("ProgressDeadlineExceeded: {msg}"),
                }
            }
        }),
        // Not enough information to say it recovered.
        ActualState::Unknown => old.clone(),
        _ => None,
    }
}

/// Why a starting workspace waits without having failed, in words; cleared in any other
/// state.
fn waiting_reason(info: &WorkspaceAgentInfo, derived: ActualState) -> Option<String> {
    if derived != ActualState::Starting {
        return None;
    }
    info.pod_waiting.as_ref().map(|w| {
        let what = if w.reason == "Unschedulable" {
            "no node can run it yet".to_owned()
        } else {
            w.reason.clone()
        };
        if w.message.is_empty() {
            what
        } else {
            format!("{what}: {}", w.message)
        }
    })
}

/// The rendering of its objects the agent says it applied to a workspace: its Deployment's
/// [`CONFIG_GENERATION_ANNOTATION`].
fn applied_generation<'a>(info: Option<&&'a WorkspaceAgentInfo>) -> Option<&'a str> {
    info?
        .latest_k8s_deployment_info
        .as_ref()?
        .get("metadata")?
        .get("annotations")?
        .get(CONFIG_GENERATION_ANNOTATION)?
        .as_str()
}

/// Whether row `r`'s answer carries its objects (reconcile.md): never for desired
/// `Terminated`; always when forced or changed since the last answer. A partial answer carries
/// no others. A full one carries all others too but those the agent has applied and settled:
/// the workspace reports the row's current generation and is in its desired state. Those
/// would be re-applied unchanged (ten thousand of them every hour, each opened, sent and
/// applied); one that is not settled (starting, failed, stopped behind Warren's back, or
/// never applied) gets its objects again, as reconcile.md has every full answer do.
fn carries_objects(r: &ResponseRow, full: bool, applied: Option<&str>) -> bool {
    if r.desired == DesiredState::Terminated {
        return false;
    }
    if r.forced || r.needs_response {
        return true;
    }
    if !full {
        return false;
    }
    let settled = matches!(
        (r.desired, r.actual),
        (DesiredState::Running, ActualState::Running)
            | (DesiredState::Stopped, ActualState::Stopped)
    );
    !(settled && applied.is_some() && applied == r.config_generation.as_deref())
}

/// What a committed reconcile changed.
#[derive(Debug, Default, Clone, Copy)]
struct Changes {
    /// Some workspace's row (or what it shows of its agent) changed.
    any: bool,
    /// Some desired state changed: the agent is signalled.
    desired: bool,
}

async fn reconcile_once(
    state: &AppState,
    agent: &AgentRow,
    req: &ReconcileRequest,
) -> Result<(ReconcileResponse, Changes), StoreError> {
    let store = &state.store;
    let now = state.clock.now_ms();
    let settings = state.settings;
    let seen_due = agent
        .last_seen_at
        .is_none_or(|t| now - t >= LAST_SEEN_GRANULARITY_MS);
    // Fast path: a partial reconcile reporting nothing, with nothing pending, needs no
    // transaction (and no write lock). A change committed right after this check is
    // flagged and signalled, and goes out on the next call.
    if req.update_type == UpdateType::Partial
        && req.workspace_agent_infos.is_empty()
        && !seen_due
        && agent.runtime_fault.is_none()
        && !store.has_pending_response(agent.id).await?
    {
        return Ok((ReconcileResponse::nothing(settings), Changes::default()));
    }
    let mut tx = store.begin_reconcile().await?;
    let mut changes = Changes::default();

    // Later reports of the same name win, as if they had arrived one after another.
    let mut infos: BTreeMap<&str, &WorkspaceAgentInfo> = BTreeMap::new();
    for info in &req.workspace_agent_infos {
        infos.insert(info.name.as_str(), info);
    }
    let names: Vec<&str> = infos.keys().copied().collect();
    let reported = tx.load_reported(&names).await?;
    let mut valid_names: Vec<String> = vec![];
    for (name, info) in &infos {
        let Some(row) = reported.get(*name) else {
            tracing::warn!(agent = %agent.name, workspace = %name, "agent reported an unknown workspace; ignored");
            continue;
        };
        if row.agent_id != agent.id {
            tracing::warn!(agent = %agent.name, workspace = %name, "agent reported a workspace of another agent; ignored");
            continue;
        }
        valid_names.push((*name).to_owned());
        let (wrote, desired) = apply_report(&mut tx, agent, row, info, now).await?;
        changes.any |= wrote;
        changes.desired |= desired;
    }

    // Which workspaces go back (reconcile.md); exactly those are marked responded.
    let full = req.update_type == UpdateType::Full;
    let selection = if full {
        Selection::Full
    } else {
        Selection::Partial {
            reported: &valid_names,
        }
    };
    let rows = tx.response_rows(agent.id, selection).await?;
    let mut out = Vec::with_capacity(rows.len());
    // Flagged rows have their flags cleared; the others go out and stay as they are.
    let flagged: Vec<WorkspaceId> = rows
        .iter()
        .filter(|r| r.forced || r.needs_response)
        .map(|r| r.id)
        .collect();
    let carrying: Vec<WorkspaceId> = rows
        .iter()
        .filter(|r| carries_objects(r, full, applied_generation(infos.get(r.name.as_str()))))
        .map(|r| r.id)
        .collect();
    let mut configs = tx.configs(agent.id, &carrying).await?;
    for r in rows {
        let config_to_apply = match configs.remove(&r.id) {
            Some(sealed) => Some(store.sbox.open_string(&sealed).map_err(StoreError::from)?),
            None => None,
        };
        out.push(WorkspaceRailsInfo {
            name: r.name,
            namespace: r.namespace,
            desired_state: r.desired,
            actual_state: r.actual,
            deployment_resource_version: r.resource_version,
            config_to_apply,
            image_pull_secrets: agent.config.image_pull_secrets.clone(),
        });
    }
    tx.mark_responded(agent.id, &flagged, now).await?;
    if agent.runtime_fault.is_some() {
        tx.clear_runtime_fault(agent.id).await?;
        changes.any = true;
    }
    if let Some(capacity) = req.capacity.filter(|c| Some(*c) != agent.capacity) {
        tx.set_capacity(agent.id, &capacity).await?;
    }
    if req.update_type == UpdateType::Full {
        let warning: Option<String> = req
            .isolation_warning
            .as_ref()
            .map(|w| w.chars().take(MAX_FAULT_CHARS).collect());
        if warning != agent.isolation_warning {
            if let Some(w) = &warning {
                tracing::warn!(agent = %agent.name, warning = %w, "the agent cannot isolate workspaces");
            }
            tx.set_isolation_warning(agent.id, warning.as_deref())
                .await?;
            changes.any = true;
        }
    }
    if seen_due {
        tx.set_last_seen(agent.id, now).await?;
    }
    tx.commit().await?;
    Ok((
        ReconcileResponse {
            workspace_rails_infos: out,
            settings,
            gitops_sources: vec![],
            mounts: vec![],
        },
        changes,
    ))
}

/// What the agent measured of a workspace's kept volumes and snapshots (a stopped prebuild's),
/// from its report's annotation; a value that is no count of bytes is ignored.
fn stored_bytes(info: &WorkspaceAgentInfo) -> Option<i64> {
    info.latest_k8s_deployment_info
        .as_ref()?
        .pointer("/metadata/annotations")?
        .get(warren_types::prebuild::STORED_BYTES_ANNOTATION)?
        .as_str()?
        .parse::<u64>()
        .ok()
        .and_then(|b| i64::try_from(b).ok())
}

/// Stores one report; returns whether it wrote anything, and whether the desired state
/// changed.
async fn apply_report(
    tx: &mut ReconcileTx,
    agent: &AgentRow,
    row: &ReportedRow,
    info: &WorkspaceAgentInfo,
    now: i64,
) -> Result<(bool, bool), StoreError> {
    // Terminated is final: later reports cannot revive the workspace.
    let actual = if row.actual == ActualState::Terminated {
        ActualState::Terminated
    } else {
        derive_actual_state(info)
    };
    let resource_version = info
        .latest_k8s_deployment_info
        .as_ref()
        .and_then(|d| d.pointer("/metadata/resourceVersion"))
        .and_then(|v| v.as_str())
        .map(str::to_owned)
        .or_else(|| row.resource_version.clone());
    let failure = failure_reason(info, actual, &row.failure_reason);
    let waiting = waiting_reason(info, actual);
    if let Some(bytes) = stored_bytes(info) {
        tx.set_stored_bytes(row.id, bytes).await?;
    }
    let mut desired = row.desired;
    let mut desired_at = row.desired_state_updated_at;
    if desired == DesiredState::RestartRequested && actual == ActualState::Stopped {
        desired = DesiredState::Running;
        desired_at = now;
    }
    // Terminated is final for both states: a workspace whose objects are all gone (deleted
    // behind Warren's back) must not be re-created by the next full reconcile.
    if actual == ActualState::Terminated && desired != DesiredState::Terminated {
        desired = DesiredState::Terminated;
        desired_at = now;
    }
    let timers = TimerInput {
        desired,
        desired_state_updated_at: desired_at,
        created_at: row.created_at,
        last_activity_at: row.last_activity_at,
    };
    let mut idle_stop = false;
    if let Some(to) = timer_decision(&agent.config.lifecycle, timers, now) {
        tracing::info!(workspace_id = row.id, from = %desired, %to, "lifecycle timer changed desired state");
        idle_stop = is_idle_stop(&agent.config.lifecycle, timers, now);
        desired = to;
    }
    let desired_changed = desired != row.desired;
    if actual == row.actual
        && resource_version == row.resource_version
        && failure == row.failure_reason
        && waiting == row.waiting_reason
        && !desired_changed
    {
        return Ok((false, false));
    }
    let update = ReportUpdate {
        actual,
        actual_changed: actual != row.actual,
        resource_version,
        failure_reason: failure,
        waiting_reason: waiting,
        desired: desired_changed.then_some(desired),
        idle_stop,
    };
    tx.update_reported(row.id, &update, now).await?;
    Ok((true, desired_changed))
}
