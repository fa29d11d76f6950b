//! The agent's reconcile loop (reconcile.md "Agent loop" and "Agent side").
//!
//! The loop is told nothing about what changed: a wake-up (timer, runtime change, the relay's
//! signal, a reconnect) only decides *when* to run and whether the cycle is full or partial;
//! each cycle compares the runtime with what the server last echoed. Everything here can be
//! lost at any time: the next full reconcile rebuilds it from the runtime and the server.

use crate::runtime::{ObservedWorkspace, RuntimeError, WorkspaceKey, WorkspaceRuntime};
use async_trait::async_trait;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use warren_types::error_chain;
use warren_types::reconcile::{
    ErrorDetails, ErrorType, PodFailure, PodWaiting, ReconcileRequest, ReconcileResponse,
    ReconcileSettings, TerminationProgress, UpdateType, WorkspaceAgentInfo, WorkspaceRailsInfo,
};
use warren_types::trace::TraceId;
use warren_types::{ActualState, DesiredState};

/// Shortest interval honoured from the server's settings, so a bad setting cannot spin.
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// What the transport tells the loop besides answers: counters that only grow.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TransportEvents {
    /// Incremented on every new connection to the relay: the loop runs a full reconcile.
    pub connection: u64,
    /// Incremented on every "reconcile now" signal: the loop runs a partial reconcile.
    pub signals: u64,
    /// The trace id the latest signal carried (the API request that caused it): the
    /// reconcile it triggers logs under it.
    pub trace: Option<TraceId>,
}

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("not connected to the relay")]
    NotConnected,
    #[error("the reconcile call timed out")]
    Timeout,
    #[error("the relay connection failed")]
    Connection(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the server answered {status}: {message}")]
    Status { status: u16, message: String },
    #[error("the server's answer is malformed")]
    Malformed(#[source] serde_json::Error),
}

/// How the loop reaches the server (production: the relay connection).
#[async_trait]
pub trait ReconcileTransport: Send + Sync + 'static {
    async fn reconcile(
        &self,
        request: &ReconcileRequest,
    ) -> Result<ReconcileResponse, TransportError>;

    /// Connection and signal counters; a change wakes the loop.
    fn events(&self) -> watch::Receiver<TransportEvents>;
}

#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// First retry delay after a failed cycle; doubles up to `max_backoff`, jittered.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Workspaces applied at the same time.
    pub apply_concurrency: usize,
}

impl Default for ReconcilerConfig {
    fn default() -> Self {
        ReconcilerConfig {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            apply_concurrency: 8,
        }
    }
}

/// What the loop has done so far; for logs, metrics and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcilerStatus {
    pub full_cycles: u64,
    pub partial_cycles: u64,
    pub failed_cycles: u64,
    pub last_error: Option<String>,
    pub settings: ReconcileSettings,
    /// The agent's GitOps sources, as the server last said (`crate::gitops` follows it).
    pub gitops_sources: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
enum CycleError {
    #[error("listing the runtime's workspaces")]
    List(#[source] RuntimeError),
    #[error("calling the server")]
    Transport(#[from] TransportError),
}

/// An error waiting to be reported; `seq` orders errors so a newer one wins.
#[derive(Debug, Clone)]
struct PendingError {
    details: ErrorDetails,
    seq: u64,
}

/// What the agent remembers of one workspace between cycles.
#[derive(Debug, Clone, Default)]
struct Tracked {
    /// The `deployment_resource_version` the server last echoed.
    echoed_version: Option<String>,
    desired: Option<DesiredState>,
    /// Termination progress to report (set once desired `Terminated` was acted on).
    termination: Option<TerminationProgress>,
    error: Option<PendingError>,
    /// The pod failure last reported, so a new or cleared one is reported at once.
    reported_pod_failure: Option<PodFailure>,
    /// Why the pod waited when last reported, for the same reason.
    reported_pod_waiting: Option<PodWaiting>,
    /// An unfinished deletion's next attempt: when, and after how many unfinished ones.
    delete_retry: Option<(Instant, u32)>,
    /// Why the deletion last could not progress, once reported (said again only if it
    /// changes).
    delete_blocked: Option<String>,
}

impl Tracked {
    fn has_pending(&self) -> bool {
        self.termination.is_some() || self.error.is_some()
    }
}

pub struct Reconciler {
    transport: Arc<dyn ReconcileTransport>,
    runtime: Arc<dyn WorkspaceRuntime>,
    config: ReconcilerConfig,
    tracked: BTreeMap<WorkspaceKey, Tracked>,
    settings: ReconcileSettings,
    error_seq: u64,
    status: watch::Sender<ReconcilerStatus>,
    /// The `proxy` mounts the server lists for this agent: kept current from each answer,
    /// their probes reported with each call.
    url_mounts: crate::url_mounts::UrlMounts,
    /// What the workspaces use, reported with the calls.
    meter: crate::meter::Meter,
}

impl std::fmt::Debug for Reconciler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reconciler")
            .field("workspaces", &self.tracked.len())
            .field("settings", &self.settings)
            .finish()
    }
}

struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// Full-jitter-ish: uniformly in [d/2, d] where d doubles per failure up to `max`.
    fn next(&mut self) -> Duration {
        let d = crate::backoff::jittered(self.initial, self.max, self.failures);
        self.failures = self.failures.saturating_add(1);
        d
    }
    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A signal not seen yet makes its trace id (if it has one) the cause of the next cycle.
fn note_signal(ev: &TransportEvents, seen: &mut u64, cause: &mut Option<TraceId>) {
    if ev.signals != *seen {
        *seen = ev.signals;
        if ev.trace.is_some() {
            cause.clone_from(&ev.trace);
        }
    }
}

fn interval(secs: u64) -> Duration {
    Duration::from_secs(secs).max(MIN_INTERVAL)
}

/// Parses `config_to_apply`: a multi-document YAML stream, empty documents skipped.
pub fn parse_objects(yaml: &str) -> Result<Vec<serde_json::Value>, serde_yaml::Error> {
    use serde::Deserialize;
    let mut out = vec![];
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value = serde_json::Value::deserialize(doc)?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

fn resource_version(deployment: &Option<serde_json::Value>) -> Option<&str> {
    deployment
        .as_ref()?
        .pointer("/metadata/resourceVersion")?
        .as_str()
}

impl Reconciler {
    pub fn new(
        transport: Arc<dyn ReconcileTransport>,
        runtime: Arc<dyn WorkspaceRuntime>,
        config: ReconcilerConfig,
    ) -> Self {
        Reconciler {
            transport,
            runtime,
            config,
            tracked: BTreeMap::new(),
            settings: ReconcileSettings::default(),
            error_seq: 0,
            status: watch::channel(ReconcilerStatus::default()).0,
            url_mounts: Default::default(),
            meter: Default::default(),
        }
    }

    /// Shares the URL mounts with the relay connection that dials them.
    pub fn with_url_mounts(mut self, mounts: crate::url_mounts::UrlMounts) -> Self {
        self.url_mounts = mounts;
        self
    }

    /// Follows the loop's progress.
    pub fn status(&self) -> watch::Receiver<ReconcilerStatus> {
        self.status.subscribe()
    }

    /// Runs until `shutdown` fires. Never returns early: every error is logged and retried.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut events = self.transport.events();
        let mut changes = self.runtime.changes();
        let mut changes_open = true;
        let mut events_open = true;
        let mut seen_connection = events.borrow_and_update().connection;
        // The trace id of the signal that made the next cycle due, if one did.
        let mut cause: Option<TraceId> = None;
        let mut seen_signals = events.borrow().signals;
        let mut backoff = Backoff {
            initial: self.config.initial_backoff,
            max: self.config.max_backoff,
            failures: 0,
        };
        // At start: a full reconcile at once.
        let mut full_due = true;
        let mut partial_due = false;
        let mut last_full = Instant::now();
        let mut next_partial =
            Instant::now() + interval(self.settings.partial_reconciliation_interval_seconds);
        let mut retry_at: Option<Instant> = None;
        // The runtime announced a change since the last cycle: unfinished deletions may be
        // able to progress, whatever their retry timers say.
        let mut runtime_changed = false;

        loop {
            let now = Instant::now();
            let next_full =
                last_full + interval(self.settings.full_reconciliation_interval_seconds);
            if now >= next_full {
                full_due = true;
            }
            if now >= next_partial || self.next_delete_retry().is_some_and(|t| now >= t) {
                partial_due = true;
            }
            let may_run = retry_at.is_none_or(|t| now >= t);
            if may_run && (full_due || partial_due) {
                // Everything announced until now is covered by this cycle (it lists the
                // runtime and calls the server afterwards), so mark it seen; only what
                // happens during the cycle wakes the loop again.
                changes.borrow_and_update();
                if events_open {
                    let ev = events.borrow_and_update().clone();
                    note_signal(&ev, &mut seen_signals, &mut cause);
                    if ev.connection != seen_connection {
                        seen_connection = ev.connection;
                        full_due = true;
                    }
                }
                let kind = if full_due {
                    UpdateType::Full
                } else {
                    UpdateType::Partial
                };
                let all_deletions =
                    kind == UpdateType::Full || std::mem::take(&mut runtime_changed);
                let started = Instant::now();
                let span = match cause.take() {
                    Some(trace) => {
                        let span = tracing::info_span!("reconcile", %trace);
                        span.in_scope(
                            || tracing::info!(kind = ?kind, "reconciling after a signal"),
                        );
                        span
                    }
                    None => tracing::debug_span!("reconcile"),
                };
                let result = tokio::select! {
                    // Cancel-safe: a cycle may stop at any await; every runtime call is
                    // idempotent and the next start rebuilds everything with a full reconcile.
                    r = self.cycle(kind, all_deletions).instrument(span) => r,
                    // Cancel-safe: cancellation is level-triggered.
                    _ = shutdown.cancelled() => return,
                };
                let kind_label = match kind {
                    UpdateType::Full => "full",
                    UpdateType::Partial => "partial",
                };
                metrics::histogram!("warren_agent_reconcile_seconds", "update_type" => kind_label)
                    .record(started.elapsed().as_secs_f64());
                match result {
                    Ok(follow_up) => {
                        metrics::counter!("warren_agent_reconciles_total", "update_type" => kind_label, "result" => "ok").increment(1);
                        backoff.reset();
                        retry_at = None;
                        if kind == UpdateType::Full {
                            full_due = false;
                            last_full = Instant::now();
                        }
                        // A full covers a pending partial; an apply or delete that just
                        // happened is reported by a partial at once.
                        partial_due = follow_up;
                        next_partial = Instant::now()
                            + interval(self.settings.partial_reconciliation_interval_seconds);
                    }
                    Err(e) => {
                        let delay = backoff.next();
                        // A failed call may have reached the server: ask again in full.
                        full_due |= self.failed_cycle(&e, kind, kind_label, delay);
                        retry_at = Some(Instant::now() + delay);
                    }
                }
                continue;
            }
            let mut deadline = retry_at.unwrap_or_else(|| next_full.min(next_partial));
            if retry_at.is_none() {
                if let Some(t) = self.next_delete_retry() {
                    deadline = deadline.min(t);
                }
            }
            tokio::select! {
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => return,
                // Cancel-safe: a sleep holds no state; the loop top re-derives what is due.
                _ = tokio::time::sleep_until(deadline) => {}
                // Cancel-safe: `changed` only marks the value seen when it completes.
                r = events.changed(), if events_open => match r {
                    Ok(()) => {
                        let ev = events.borrow_and_update().clone();
                        note_signal(&ev, &mut seen_signals, &mut cause);
                        if ev.connection != seen_connection {
                            // A new connection: the relay or server may have restarted, so
                            // rebuild everything at once, whatever the backoff says.
                            seen_connection = ev.connection;
                            full_due = true;
                            retry_at = None;
                            backoff.reset();
                        } else {
                            partial_due = true;
                        }
                    }
                    Err(_) => events_open = false,
                },
                // Cancel-safe: as above.
                r = changes.changed(), if changes_open => match r {
                    Ok(()) => {
                        partial_due = true;
                        runtime_changed = true;
                    }
                    Err(_) => changes_open = false,
                },
            }
        }
    }

    /// Counts, logs and reports a failed cycle, retried after `delay`; returns whether the
    /// retry must be a full reconcile.
    fn failed_cycle(
        &self,
        e: &CycleError,
        kind: UpdateType,
        kind_label: &'static str,
        delay: Duration,
    ) -> bool {
        let not_connected = matches!(e, CycleError::Transport(TransportError::NotConnected));
        let result = if not_connected {
            "not_connected"
        } else {
            "error"
        };
        metrics::counter!("warren_agent_reconciles_total", "update_type" => kind_label, "result" => result).increment(1);
        let message = error_chain(e);
        if not_connected {
            // Not a fault: the connection (re)starts, and its arrival wakes the loop for a
            // full reconcile anyway.
            tracing::info!(retry_in = ?delay, kind = ?kind, "reconcile waits for the relay connection");
        } else {
            tracing::warn!(error = %message, retry_in = ?delay, kind = ?kind, "reconcile failed");
        }
        self.status.send_modify(|s| {
            s.failed_cycles += 1;
            s.last_error = Some(message);
        });
        // The server may have committed the answer it could not deliver (killed between its
        // commit and its reply, or the reply lost on the way) and marked the workspaces in
        // it as sent; a partial would never name them again. Only a full is sure to (CI
        // lost a start this way when the server was killed mid-answer).
        matches!(e, CycleError::Transport(_)) && !not_connected
    }

    /// One reconcile; returns whether something was applied or deleted (report it at once).
    async fn cycle(&mut self, kind: UpdateType, all_deletions: bool) -> Result<bool, CycleError> {
        self.advance_terminations(all_deletions).await;
        if kind == UpdateType::Full {
            // A full reconcile trusts nothing the runtime kept from its events.
            self.runtime.resync();
        }
        let observed = match self.runtime.list().await {
            Ok(o) => o,
            Err(e) => {
                // Say so, or the server goes on showing the last states as if they were
                // current; best effort (the cycle fails and is retried either way).
                let fault = ReconcileRequest {
                    update_type: kind,
                    workspace_agent_infos: vec![],
                    capacity: None,
                    runtime_fault: Some(error_chain(&e)),
                    isolation_warning: None,
                    connector: None,
                    // A URL has nothing to do with the runtime: its probes still count.
                    mounts: self.url_mounts.reports(),
                    used: vec![],
                };
                if let Err(t) = self.transport.reconcile(&fault).await {
                    tracing::debug!(error = %error_chain(&t), "reporting the runtime fault failed");
                }
                return Err(CycleError::List(e));
            }
        };
        if kind == UpdateType::Full {
            // Rebuild the view: a workspace no longer in the runtime and with nothing to
            // report is the server's business to mention again.
            let present: std::collections::BTreeSet<_> =
                observed.iter().map(|o| o.key.clone()).collect();
            self.tracked.retain(|k, t| {
                present.contains(k)
                    || t.has_pending()
                    || t.desired == Some(DesiredState::Terminated)
            });
        }
        let (infos, sent_errors) = self.report(kind, observed);
        let (capacity, isolation_warning) = match kind {
            UpdateType::Full => (
                self.runtime.capacity().await,
                self.runtime.isolation_warning(),
            ),
            UpdateType::Partial => (None, None),
        };
        let request = ReconcileRequest {
            update_type: kind,
            workspace_agent_infos: infos,
            capacity,
            runtime_fault: None,
            isolation_warning,
            connector: None,
            mounts: self.url_mounts.reports(),
            used: self.meter.take(self.runtime.as_ref()).await,
        };
        let response = self.transport.reconcile(&request).await?;
        self.meter.reported();
        self.url_mounts.set(&response.mounts);
        tracing::debug!(kind = ?kind, reported = request.workspace_agent_infos.len(), returned = response.workspace_rails_infos.len(), "reconciled");

        // Acknowledged: clear exactly the errors this call carried (a newer one stays).
        for (key, seq) in sent_errors {
            if let Some(t) = self.tracked.get_mut(&key) {
                if t.error.as_ref().is_some_and(|e| e.seq == seq) {
                    t.error = None;
                }
            }
        }
        for info in &request.workspace_agent_infos {
            let key = WorkspaceKey {
                name: info.name.clone(),
                namespace: info.namespace.clone(),
            };
            if let Some(t) = self.tracked.get_mut(&key) {
                t.reported_pod_failure = info.pod_failure.clone();
                t.reported_pod_waiting = info.pod_waiting.clone();
            }
        }
        self.settings = response.settings;
        let sources = response.gitops_sources;
        let follow_up = self.act(response.workspace_rails_infos).await;
        self.status.send_modify(|s| {
            if s.gitops_sources != sources {
                s.gitops_sources = sources;
            }
            match kind {
                UpdateType::Full => s.full_cycles += 1,
                UpdateType::Partial => s.partial_cycles += 1,
            }
            s.settings = self.settings;
        });
        Ok(follow_up)
    }

    /// Moves deletions that are under way forward so their progress is current: all of them
    /// when `all` (the runtime changed, or a full cycle), else those whose retry is due.
    async fn advance_terminations(&mut self, all: bool) {
        let now = Instant::now();
        let deleting: Vec<WorkspaceKey> = self
            .tracked
            .iter()
            .filter(|(_, t)| {
                t.desired == Some(DesiredState::Terminated)
                    && t.termination != Some(TerminationProgress::Terminated)
                    && (all || t.delete_retry.is_none_or(|(at, _)| at <= now))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in deleting {
            self.delete(&key).await;
        }
    }

    /// When the earliest unfinished deletion is to be tried again.
    fn next_delete_retry(&self) -> Option<Instant> {
        self.tracked
            .values()
            .filter(|t| {
                t.desired == Some(DesiredState::Terminated)
                    && t.termination != Some(TerminationProgress::Terminated)
            })
            .filter_map(|t| t.delete_retry.map(|(at, _)| at))
            .min()
    }

    async fn delete(&mut self, key: &WorkspaceKey) {
        let result = self.runtime.delete(key).await;
        let (initial, max) = (self.config.initial_backoff, self.config.max_backoff);
        let t = self.tracked.entry(key.clone()).or_default();
        let blocked = match result {
            Ok(TerminationProgress::Terminated) => {
                t.termination = Some(TerminationProgress::Terminated);
                t.delete_retry = None;
                return;
            }
            Ok(TerminationProgress::Terminating) => {
                // Moving again: a blocker that comes back is worth saying again.
                t.termination = Some(TerminationProgress::Terminating);
                t.delete_blocked = None;
                None
            }
            Err(e) => {
                t.termination
                    .get_or_insert(TerminationProgress::Terminating);
                let message = error_chain(&e);
                if t.delete_blocked.as_ref() != Some(&message) {
                    tracing::warn!(workspace = %key, error = %message, "deleting a workspace cannot finish yet");
                }
                Some(message)
            }
        };
        // Unfinished: try again later, sooner if the runtime changes meanwhile (the loop
        // then runs every deletion), so a deletion that cannot progress costs nothing.
        let failures = t.delete_retry.map_or(0, |(_, n)| n.saturating_add(1));
        let delay = crate::backoff::jittered(initial, max, failures);
        t.delete_retry = Some((Instant::now() + delay, failures));
        if let Some(message) = blocked {
            if t.delete_blocked.as_ref() != Some(&message) {
                t.delete_blocked = Some(message.clone());
                self.record_error(key, ErrorType::Runtime, message);
            }
        }
    }

    /// Builds the request's workspace list; returns it with the errors it carries.
    fn report(
        &mut self,
        kind: UpdateType,
        observed: Vec<ObservedWorkspace>,
    ) -> (Vec<WorkspaceAgentInfo>, Vec<(WorkspaceKey, u64)>) {
        let mut infos = vec![];
        let mut sent_errors = vec![];
        let mut seen = std::collections::BTreeSet::new();
        for o in observed {
            seen.insert(o.key.clone());
            let t = self.tracked.get(&o.key);
            let changed = t.is_none_or(|t| {
                t.echoed_version.as_deref() != resource_version(&o.deployment)
                    || t.reported_pod_failure != o.pod_failure
                    || t.reported_pod_waiting != o.pod_waiting
                    || t.has_pending()
            });
            if kind == UpdateType::Partial && !changed && !o.terminating {
                continue;
            }
            let termination = t
                .and_then(|t| t.termination)
                .or(o.terminating.then_some(TerminationProgress::Terminating));
            let error = t.and_then(|t| t.error.clone());
            if let Some(e) = &error {
                sent_errors.push((o.key.clone(), e.seq));
            }
            self.tracked.entry(o.key.clone()).or_default();
            infos.push(WorkspaceAgentInfo {
                name: o.key.name,
                namespace: o.key.namespace,
                latest_k8s_deployment_info: o.deployment,
                termination_progress: termination,
                error_details: error.map(|e| e.details),
                pod_failure: o.pod_failure,
                pod_waiting: o.pod_waiting,
            });
        }
        // Workspaces the runtime no longer shows but that still have something to say
        // (a finished deletion, an apply error before anything existed).
        for (key, t) in &self.tracked {
            if seen.contains(key) || !t.has_pending() {
                continue;
            }
            if let Some(e) = &t.error {
                sent_errors.push((key.clone(), e.seq));
            }
            infos.push(WorkspaceAgentInfo {
                name: key.name.clone(),
                namespace: key.namespace.clone(),
                latest_k8s_deployment_info: None,
                termination_progress: t.termination,
                error_details: t.error.as_ref().map(|e| e.details.clone()),
                pod_failure: None,
                pod_waiting: None,
            });
        }
        (infos, sent_errors)
    }

    fn record_error(&mut self, key: &WorkspaceKey, error_type: ErrorType, message: String) {
        self.error_seq += 1;
        let seq = self.error_seq;
        self.tracked.entry(key.clone()).or_default().error = Some(PendingError {
            details: ErrorDetails {
                error_type,
                error_message: message,
            },
            seq,
        });
    }

    /// Acts on the server's answer: remember echoes, apply, delete, forget.
    async fn act(&mut self, infos: Vec<WorkspaceRailsInfo>) -> bool {
        let mut follow_up = false;
        let mut to_apply = vec![];
        for info in infos {
            let key = WorkspaceKey {
                name: info.name.clone(),
                namespace: info.namespace.clone(),
            };
            if info.actual_state == ActualState::Terminated {
                // The server has recorded the end; nothing more to say about it.
                self.tracked.remove(&key);
                continue;
            }
            let t = self.tracked.entry(key.clone()).or_default();
            if let Some(v) = info.deployment_resource_version {
                t.echoed_version = Some(v);
            }
            t.desired = Some(info.desired_state);
            if info.desired_state == DesiredState::Terminated {
                // Start deleting once; `advance_terminations` drives it later (on runtime
                // changes and on its backoff timer), so an unfinished deletion cannot turn
                // into a tight loop of follow-ups.
                if t.termination.is_none() {
                    self.delete(&key).await;
                    follow_up = true;
                }
                continue;
            }
            if let Some(yaml) = info.config_to_apply {
                match parse_objects(&yaml) {
                    Ok(objects) => to_apply.push((key, objects)),
                    Err(e) => {
                        self.record_error(
                            &key,
                            ErrorType::Applier,
                            format!("config_to_apply is not valid YAML: {e}"),
                        );
                        follow_up = true;
                    }
                }
            }
        }
        if to_apply.is_empty() {
            return follow_up;
        }
        let runtime = self.runtime.clone();
        let results: Vec<(WorkspaceKey, Result<(), RuntimeError>)> =
            futures::stream::iter(to_apply)
                .map(|(key, objects)| {
                    let runtime = runtime.clone();
                    async move {
                        let r = runtime.apply(&key, &objects).await;
                        (key, r)
                    }
                })
                .buffer_unordered(self.config.apply_concurrency.max(1))
                .collect()
                .await;
        for (key, result) in results {
            if let Err(e) = result {
                let (error_type, message) = match &e {
                    RuntimeError::Apply { .. } => (ErrorType::Applier, e.to_string()),
                    _ => (ErrorType::Runtime, error_chain(&e)),
                };
                tracing::warn!(workspace = %key, error = %message, "apply failed");
                metrics::counter!("warren_agent_apply_errors_total").increment(1);
                self.record_error(&key, error_type, message);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_yaml() {
        let objs = parse_objects("---\nkind: A\n---\n\n---\nkind: B\n").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1]["kind"], "B");
        assert!(parse_objects("kind: [").is_err());
    }

    #[test]
    fn backoff_grows_and_is_bounded() {
        let mut b = Backoff {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            failures: 0,
        };
        let first = b.next();
        assert!(first >= Duration::from_millis(500) && first <= Duration::from_secs(1));
        for _ in 0..30 {
            let d = b.next();
            assert!(d <= Duration::from_secs(60));
        }
        assert!(b.next() >= Duration::from_secs(30));
        b.reset();
        assert!(b.next() <= Duration::from_secs(1));
    }
}
