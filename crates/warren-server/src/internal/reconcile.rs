//! `POST /internal/agents/reconcile` (reconcile.md): store what the agent saw, derive actual
//! states, apply RestartRequested and the timers, and answer with the workspaces the agent
//! must act on — all in one transaction, so the same request twice leaves the same state.

use super::authenticate::check_relay;
use crate::db::{DbKind, Tx};
use crate::error::{HttpError, Json};
use crate::lifecycle::timer_decision;
use crate::state::AppState;
use crate::store::agents::AgentRow;
use crate::store::{bind_all, get_i64, get_opt_str, get_str, Bind};
use axum::extract::State;
use http::{HeaderMap, StatusCode};
use std::collections::BTreeMap;
use warren_types::lifecycle::derive_actual_state;
use warren_types::reconcile::{
    ReconcileRequest, ReconcileResponse, UpdateType, WorkspaceAgentInfo, WorkspaceRailsInfo,
    AGENT_ID_HEADER,
};
use warren_types::{ActualState, AgentId, DesiredState};

/// `last_seen_at` is written at most this often, so a no-op partial reconcile writes nothing.
const LAST_SEEN_GRANULARITY_MS: i64 = 30_000;
const MAX_ATTEMPTS: usize = 5;

pub async fn handler(
    State(state): State<AppState>,
    headers: HeaderMap,
    Json(req): Json<ReconcileRequest>,
) -> Result<(StatusCode, Json<ReconcileResponse>), HttpError> {
    let claims = check_relay(&state, &headers)?;
    let agent_id: AgentId = claims
        .sub
        .as_deref()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| HttpError::unauthorized("relay JWT lacks the agent id in `sub`"))?;
    if let Some(h) = headers.get(AGENT_ID_HEADER) {
        if h.to_str().ok() != Some(agent_id.to_string().as_str()) {
            return Err(HttpError::unauthorized(format!(
                "{AGENT_ID_HEADER} does not match the JWT's subject"
            )));
        }
    }
    let agent = state
        .store
        .agent_by_id(agent_id)
        .await?
        .ok_or_else(|| HttpError::unauthorized(format!("agent {agent_id} does not exist")))?;
    let started = std::time::Instant::now();
    let resp = match &req.runtime_fault {
        Some(fault) => runtime_fault(&state, &agent, fault).await?,
        None => reconcile(&state, &agent, &req).await?,
    };
    let kind = match req.update_type {
        UpdateType::Full => "full",
        UpdateType::Partial => "partial",
    };
    metrics::counter!("warren_reconcile_total", "update_type" => kind).increment(1);
    metrics::histogram!("warren_reconcile_seconds", "update_type" => kind)
        .record(started.elapsed().as_secs_f64());
    Ok((StatusCode::CREATED, Json(resp)))
}

/// Most characters of a runtime fault kept (the agent's error chain, shown to users).
const MAX_FAULT_CHARS: usize = 2000;

/// The agent cannot see its runtime: record why (the first report's time is kept), mark the
/// agent seen, and answer with nothing to do, so nothing is marked as sent either.
async fn runtime_fault(
    state: &AppState,
    agent: &AgentRow,
    fault: &str,
) -> Result<ReconcileResponse, HttpError> {
    let now = state.clock.now_ms();
    let fault: String = fault.chars().take(MAX_FAULT_CHARS).collect();
    if agent.runtime_fault.as_ref().map(|(f, _)| f) != Some(&fault) {
        tracing::warn!(agent = %agent.name, fault, "the agent cannot see its runtime");
    }
    sqlx::query(
        "UPDATE agents SET runtime_fault = $1, \
         runtime_fault_since = COALESCE(runtime_fault_since, $2), last_seen_at = $2 WHERE id = $3",
    )
    .bind(fault)
    .bind(now)
    .bind(agent.id.get())
    .execute(&state.store.db.pool)
    .await?;
    Ok(ReconcileResponse {
        workspace_rails_infos: vec![],
        settings: state.settings,
    })
}

/// The reconcile transaction, retried when the database reports a conflict.
pub async fn reconcile(
    state: &AppState,
    agent: &AgentRow,
    req: &ReconcileRequest,
) -> Result<ReconcileResponse, HttpError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match reconcile_once(state, agent, req).await {
            Err(Failure::Sql(e)) if attempt < MAX_ATTEMPTS && is_retryable(&e) => {
                tracing::debug!(error = %e, attempt, "reconcile conflicted; retrying");
            }
            Err(Failure::Sql(e)) => return Err(e.into()),
            Err(Failure::Http(e)) => return Err(e),
            Ok((resp, desired_changed)) => {
                if desired_changed {
                    state.signals.notify(agent.id);
                }
                return Ok(resp);
            }
        }
    }
}

enum Failure {
    Sql(sqlx::Error),
    Http(HttpError),
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}

impl From<HttpError> for Failure {
    fn from(e: HttpError) -> Self {
        Failure::Http(e)
    }
}

fn is_retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => {
            matches!(
                d.code().as_deref(),
                Some("40001" | "40P01" | "5" | "6" | "517")
            ) || d.message().contains("database is locked")
        }
        _ => false,
    }
}

/// The row of a reported workspace, as far as the report's processing needs it.
struct Reported {
    id: i64,
    agent_id: i64,
    desired: DesiredState,
    actual: ActualState,
    desired_state_updated_at: i64,
    created_at: i64,
    resource_version: Option<String>,
    failure_reason: Option<String>,
}

fn for_update(kind: DbKind) -> &'static str {
    match kind {
        DbKind::Postgres => " FOR UPDATE",
        DbKind::Sqlite => "",
    }
}

fn placeholders(start: usize, n: usize) -> String {
    (start..start + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
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
                format!("ProgressDeadlineExceeded: {msg}")
            }
        }),
        // Not enough information to say it recovered.
        ActualState::Unknown => old.clone(),
        _ => None,
    }
}

async fn reconcile_once(
    state: &AppState,
    agent: &AgentRow,
    req: &ReconcileRequest,
) -> Result<(ReconcileResponse, bool), Failure> {
    let store = &state.store;
    let now = state.clock.now_ms();
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
    {
        let pending = sqlx::query(
            "SELECT id FROM workspaces WHERE agent_id = $1 AND needs_response = 1 LIMIT 1",
        )
        .bind(agent.id.get())
        .fetch_optional(&store.db.pool)
        .await?;
        if pending.is_none() {
            let settings = state.settings;
            return Ok((
                ReconcileResponse {
                    workspace_rails_infos: vec![],
                    settings,
                },
                false,
            ));
        }
    }
    let mut tx = store.db.begin().await?;
    let mut desired_changed = false;

    // Later reports of the same name win, as if they had arrived one after another.
    let mut infos: BTreeMap<&str, &WorkspaceAgentInfo> = BTreeMap::new();
    for info in &req.workspace_agent_infos {
        infos.insert(info.name.as_str(), info);
    }
    let reported = load_reported(&mut tx, store.db.kind, infos.keys().copied()).await?;
    let mut valid_names: Vec<String> = vec![];
    for (name, info) in &infos {
        let Some(row) = reported.get(*name) else {
            tracing::warn!(agent = %agent.name, workspace = %name, "agent reported an unknown workspace; ignored");
            continue;
        };
        if row.agent_id != agent.id.get() {
            tracing::warn!(agent = %agent.name, workspace = %name, "agent reported a workspace of another agent; ignored");
            continue;
        }
        valid_names.push((*name).to_owned());
        desired_changed |= apply_report(&mut tx, agent, row, info, now).await?;
    }

    // Which workspaces go back (reconcile.md); the same predicate marks them responded.
    let mut binds = vec![Bind::I(agent.id.get())];
    let predicate = match req.update_type {
        UpdateType::Full => {
            "NOT (desired_state = 'Terminated' AND actual_state = 'Terminated')".to_owned()
        }
        UpdateType::Partial => {
            // `needs_response` is set by every write that sets desired_state_updated_at or
            // the force flag, and cleared with responded_to_agent_at: it is reconcile.md's
            // rule (desired_state_updated_at >= responded_to_agent_at, never responded, or
            // forced), kept in an indexed column.
            let mut p = "(needs_response = 1".to_owned();
            if !valid_names.is_empty() {
                p.push_str(&format!(
                    " OR name IN ({})",
                    placeholders(2, valid_names.len())
                ));
                binds.extend(valid_names.iter().map(|n| Bind::S(n.clone())));
            }
            p.push(')');
            p
        }
    };
    let sql = format!(
        "SELECT id, name, namespace, desired_state, actual_state, deployment_resource_version, config_running, \
         config_stopped, force_include_all_resources, needs_response \
         FROM workspaces WHERE agent_id = $1 AND {predicate} ORDER BY id{}",
        for_update(store.db.kind)
    );
    let rows = bind_all(sqlx::query(&sql), &binds)
        .fetch_all(&mut *tx)
        .await?;
    let full = req.update_type == UpdateType::Full;
    let mut out = Vec::with_capacity(rows.len());
    for r in &rows {
        let desired: DesiredState = parse_state(&get_str(r, "desired_state")?)?;
        let actual: ActualState = parse_state(&get_str(r, "actual_state")?)?;
        let forced = get_i64(r, "force_include_all_resources")? != 0;
        let changed = get_i64(r, "needs_response")? != 0;
        let config_to_apply = match desired.replicas() {
            Some(replicas) if full || forced || changed => {
                let column = if replicas > 0 {
                    "config_running"
                } else {
                    "config_stopped"
                };
                Some(
                    store
                        .sbox
                        .open_string(&get_str(r, column)?)
                        .map_err(HttpError::from)?,
                )
            }
            _ => None,
        };
        out.push(WorkspaceRailsInfo {
            name: get_str(r, "name")?,
            namespace: get_str(r, "namespace")?,
            desired_state: desired,
            actual_state: actual,
            deployment_resource_version: get_opt_str(r, "deployment_resource_version")?,
            config_to_apply,
            image_pull_secrets: agent.config.image_pull_secrets.clone(),
        });
    }
    if !out.is_empty() {
        let mut mark_binds = vec![Bind::I(now)];
        mark_binds.extend(binds.iter().cloned());
        // Shift the predicate's placeholders by one: $1 is now the time.
        let shifted = shift_placeholders(&predicate, 1);
        let sql = format!(
            "UPDATE workspaces SET responded_to_agent_at = $1, force_include_all_resources = 0, needs_response = 0 \
             WHERE agent_id = $2 AND {shifted}"
        );
        bind_all(sqlx::query(&sql), &mark_binds)
            .execute(&mut *tx)
            .await?;
    }
    if agent.runtime_fault.is_some() {
        // The agent sees its runtime again.
        sqlx::query(
            "UPDATE agents SET runtime_fault = NULL, runtime_fault_since = NULL WHERE id = $1",
        )
        .bind(agent.id.get())
        .execute(&mut *tx)
        .await?;
    }
    if req.capacity.is_some() && req.capacity != agent.capacity {
        let json = serde_json::to_string(&req.capacity)
            .map_err(|e| Failure::Http(HttpError::internal("encoding the agent capacity", &e)))?;
        sqlx::query("UPDATE agents SET capacity = $1 WHERE id = $2")
            .bind(json)
            .bind(agent.id.get())
            .execute(&mut *tx)
            .await?;
    }
    if seen_due {
        sqlx::query("UPDATE agents SET last_seen_at = $1 WHERE id = $2")
            .bind(now)
            .bind(agent.id.get())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    let settings = state.settings;
    Ok((
        ReconcileResponse {
            workspace_rails_infos: out,
            settings,
        },
        desired_changed,
    ))
}

fn parse_state<T: std::str::FromStr>(s: &str) -> Result<T, sqlx::Error>
where
    T::Err: std::fmt::Display,
{
    s.parse().map_err(|e| crate::store::corrupt("state", e))
}

/// Renumbers `$n` to `$(n + by)`.
fn shift_placeholders(sql: &str, by: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' {
            let mut n = String::new();
            while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                n.push(*d);
                chars.next();
            }
            match n.parse::<usize>() {
                Ok(v) => out.push_str(&format!("${}", v + by)),
                Err(_) => out.push('$'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

async fn load_reported<'a>(
    tx: &mut Tx,
    kind: DbKind,
    names: impl Iterator<Item = &'a str>,
) -> Result<BTreeMap<String, Reported>, sqlx::Error> {
    let names: Vec<Bind> = names.map(|n| Bind::S(n.to_owned())).collect();
    let mut out = BTreeMap::new();
    if names.is_empty() {
        return Ok(out);
    }
    let sql = format!(
        "SELECT id, name, agent_id, desired_state, actual_state, desired_state_updated_at, created_at, \
         deployment_resource_version, failure_reason FROM workspaces WHERE name IN ({}) ORDER BY id{}",
        placeholders(1, names.len()),
        for_update(kind)
    );
    for r in bind_all(sqlx::query(&sql), &names)
        .fetch_all(&mut **tx)
        .await?
    {
        out.insert(
            get_str(&r, "name")?,
            Reported {
                id: get_i64(&r, "id")?,
                agent_id: get_i64(&r, "agent_id")?,
                desired: parse_state(&get_str(&r, "desired_state")?)?,
                actual: parse_state(&get_str(&r, "actual_state")?)?,
                desired_state_updated_at: get_i64(&r, "desired_state_updated_at")?,
                created_at: get_i64(&r, "created_at")?,
                resource_version: get_opt_str(&r, "deployment_resource_version")?,
                failure_reason: get_opt_str(&r, "failure_reason")?,
            },
        );
    }
    Ok(out)
}

/// Stores one report; returns whether the desired state changed.
async fn apply_report(
    tx: &mut Tx,
    agent: &AgentRow,
    row: &Reported,
    info: &WorkspaceAgentInfo,
    now: i64,
) -> Result<bool, sqlx::Error> {
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
    if let Some(to) = timer_decision(
        &agent.config.lifecycle,
        desired,
        desired_at,
        row.created_at,
        now,
    ) {
        tracing::info!(workspace_id = row.id, from = %desired, %to, "lifecycle timer changed desired state");
        desired = to;
        desired_at = now;
    }
    let desired_changed = desired != row.desired;
    if actual == row.actual
        && resource_version == row.resource_version
        && failure == row.failure_reason
        && !desired_changed
    {
        return Ok(false);
    }
    let needs = if desired_changed {
        ", needs_response = 1"
    } else {
        ""
    };
    let actual_at_sql = if actual != row.actual {
        "$7"
    } else {
        "actual_state_updated_at"
    };
    sqlx::query(&format!(
        "UPDATE workspaces SET actual_state = $1, deployment_resource_version = $2, failure_reason = $3, \
         desired_state = $4, desired_state_updated_at = $5, actual_state_updated_at = {actual_at_sql}, \
         updated_at = $7, version = version + 1{needs} WHERE id = $6"
    ))
    .bind(actual.as_str())
    .bind(resource_version)
    .bind(failure)
    .bind(desired.as_str())
    .bind(desired_at)
    .bind(row.id)
    .bind(now)
    .execute(&mut **tx)
    .await?;
    Ok(desired_changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shifting_placeholders() {
        assert_eq!(
            shift_placeholders("a = $1 OR b IN ($2, $10)", 1),
            "a = $2 OR b IN ($3, $11)"
        );
        assert_eq!(placeholders(2, 3), "$2, $3, $4");
    }
}
