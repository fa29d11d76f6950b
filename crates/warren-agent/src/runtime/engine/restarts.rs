//! Pods from Git restarted when their containers exit, as the kubelet restarts a Deployment's
//! pods (`restartPolicy: Always`, the only policy a Deployment allows): at once the first
//! time, then after 10 s, 20 s, 40 s … up to five minutes (`CrashLoopBackOff`), the delay
//! forgotten once a run has lasted ten minutes. A container stopped by hand is restarted the
//! same way, as the kubelet would.
//!
//! Only the GitOps sibling supervises (`Inner::kubernetes_pods`): a workspace whose command
//! exits is reported `Failed` with its exit code and log, for its user to act on. The
//! supervisor is woken by the sibling's engine events (a reconnect of their stream wakes it
//! too: events may have been missed) and by the due time of the next restart, never by a
//! timer of its own — an agent without GitOps pods makes no call for them; each pass is one
//! container listing of the sibling, and looks closer (an inspection) only at pods with a
//! container that has exited.

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::models::ContainerSummary;
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::start::StartOrder;
use super::{
    label, lock, runtime_err, summary_order, summary_role, EngineRuntime, Inner, Role,
    CONTAINER_LABEL, POD_HASH_LABEL, WORKSPACE_NAME_LABEL,
};
use crate::runtime::RuntimeError;

/// The first delay after the first restart, doubled at each crash after it.
const FIRST_DELAY: Duration = Duration::from_secs(10);
/// The longest delay between two restarts.
const MAX_DELAY: Duration = Duration::from_secs(300);
/// A run this long forgets the delay: the next crash is restarted at once.
const RESET_AFTER: Duration = Duration::from_secs(600);
/// When a look at a pod failed, or its restart could not take the pod's lock: looked at
/// again this soon.
const RETRY_LOOK: Duration = Duration::from_secs(2);

/// The restarts of one pod (of one pod spec: a new spec starts afresh).
#[derive(Debug, Clone, Default)]
pub(super) struct Crashes {
    /// The pod hash these restarts are of.
    hash: String,
    /// How many times the pod's containers were restarted.
    pub restarts: u32,
    /// The delay before the next restart after this one.
    delay: Duration,
    /// When the restart of the exit being handled is due; `None` when none is pending.
    due: Option<Instant>,
    /// The exit being handled (its container, and when that run started and ended), so one
    /// exit is counted once. The start time tells runs apart: Podman 4.3 may keep the old
    /// end time for a run that exits before it records the run's start.
    handled: Option<(String, String)>,
    /// When the pod was last restarted.
    restarted_at: Option<Instant>,
    /// The last exit seen: which container, its code, whether the kernel killed it for memory.
    pub last: Option<Exit>,
    /// A probe stopped this container, for this reason (`probes`): the cause of its next
    /// exit.
    probe_kill: Option<(String, String)>,
}

/// One exit of a container of a pod from Git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Exit {
    pub container: String,
    pub code: i64,
    pub oom_killed: bool,
    /// What stopped it, when Warren did (a failed liveness or startup probe).
    pub cause: Option<String>,
}

impl Crashes {
    /// Counts an exit of pod `name` once, `finished` telling its run apart: its back-off
    /// taken, the next one doubled. `None` when the exit was restarted already and the
    /// engine has not recorded the new run's end yet (Podman lists a container exited
    /// before it records when): a later look tells. Else when its restart is due, and
    /// whether the exit is new. An exit whose restart failed (recorded on the pod) counts
    /// again, with the back-off, so a start that fails never spins.
    fn note_exit(
        &mut self,
        name: &str,
        record: &super::Record,
        finished: String,
        exit: Exit,
        now: Instant,
    ) -> Option<(Instant, bool)> {
        if self.hash != record.pod_hash {
            // Another pod spec: its restarts and back-off start afresh.
            *self = Crashes {
                hash: record.pod_hash.clone(),
                probe_kill: self.probe_kill.take(),
                ..Crashes::default()
            };
        }
        let this = (exit.container.clone(), finished);
        let restarted = self.handled.as_ref() == Some(&this) && self.due.is_none();
        if restarted && record.failure.is_none() {
            return None;
        }
        let mut new_exit = false;
        if self.handled.as_ref() != Some(&this) || restarted {
            if self
                .restarted_at
                .is_some_and(|at| now.duration_since(at) >= RESET_AFTER)
            {
                self.delay = Duration::ZERO;
            }
            self.handled = Some(this);
            new_exit = true;
            self.due = Some(now + self.delay);
            self.delay = if self.delay.is_zero() {
                FIRST_DELAY
            } else {
                (self.delay * 2).min(MAX_DELAY)
            };
            let cause = match self.probe_kill.take() {
                Some((c, reason)) if c == exit.container => Some(reason),
                _ => None,
            };
            tracing::info!(pod = %name, container = %exit.container, code = exit.code, restarts = self.restarts, "a GitOps pod's container exited; restarting it after its back-off");
            self.last = Some(Exit { cause, ..exit });
        }
        Some((self.due.unwrap_or(now), new_exit))
    }

    /// Why the pod is not ready, as far as its restarts tell: `None` when it never exited.
    pub fn describe(&self, now: Instant) -> Option<String> {
        let last = self.last.as_ref()?;
        let how = if let Some(cause) = &last.cause {
            format!("was stopped: {cause} (exit code {})", last.code)
        } else if last.oom_killed {
            format!(
                "was killed for using too much memory (exit code {})",
                last.code
            )
        } else {
            format!("exited with code {}", last.code)
        };
        let mut text = format!(
            "container {} {how}; restarted {} time{}",
            last.container,
            self.restarts,
            if self.restarts == 1 { "" } else { "s" }
        );
        if let Some(due) = self.due.filter(|d| *d > now) {
            let wait = due - now;
            text.push_str(&format!(
                "; back-off {}s before the next restart (CrashLoopBackOff)",
                wait.as_secs().max(1)
            ));
        }
        Some(text)
    }
}

/// The supervisor of the sibling (see the module docs); ends with the runtime.
pub(super) async fn supervise(inner: std::sync::Weak<Inner>, shutdown: CancellationToken) {
    let mut changes = match inner.upgrade() {
        Some(strong) => strong.changes.subscribe(),
        None => return,
    };
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let runtime = EngineRuntime { inner: strong };
        let due = match runtime.restart_pass().await {
            Ok(due) => due,
            // A listing that failed (Podman's may, when a container goes while it is made)
            // is made again soon: no event need come to wake the supervisor.
            Err(e) => {
                tracing::warn!(error = %warren_types::error_chain(&e), "looking for exited GitOps pods failed; looking again soon");
                Some(Instant::now() + RETRY_LOOK)
            }
        };
        drop(runtime);
        tokio::select! {
            // Cancel-safe: nothing is half-done between passes.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: `changed` only marks the value seen.
            r = changes.changed() => if r.is_err() { return },
            // Cancel-safe: a sleep holds nothing.
            _ = sleep_until_due(due) => {}
        }
    }
}

/// Until `due`; forever when nothing is.
async fn sleep_until_due(due: Option<Instant>) {
    match due {
        Some(due) => tokio::time::sleep_until(due).await,
        None => std::future::pending().await,
    }
}

impl EngineRuntime {
    /// One pass: exits found and scheduled, due restarts made. The earliest restart still
    /// due, if any.
    async fn restart_pass(&self) -> Result<Option<Instant>, RuntimeError> {
        let containers = self.containers(&self.selector()).await?;
        let mut pods: BTreeMap<String, Vec<ContainerSummary>> = BTreeMap::new();
        for c in containers {
            if let Some(name) = label(&c, WORKSPACE_NAME_LABEL) {
                pods.entry(name.to_owned()).or_default().push(c);
            }
        }
        // Pods gone take their restarts with them.
        lock(&self.inner.crashes).retain(|name, _| pods.contains_key(name));
        let mut earliest: Option<Instant> = None;
        for (name, containers) in pods {
            // One pod's trouble (a container gone between the listing and its
            // inspection) is that pod's: looked at again soon, the others go on.
            let due = match self.restart_pod(&name, containers).await {
                Ok(due) => due,
                Err(e) => {
                    tracing::debug!(pod = %name, error = %warren_types::error_chain(&e), "looking at an exited GitOps pod failed; looking again soon");
                    Some(Instant::now() + RETRY_LOOK)
                }
            };
            if let Some(due) = due {
                earliest = Some(earliest.map_or(due, |e| e.min(due)));
            }
        }
        Ok(earliest)
    }

    /// Looks at one pod: when a container of its current pod has exited, schedules the
    /// restart and makes it when due. The time a restart is still due, if any.
    async fn restart_pod(
        &self,
        name: &str,
        mut containers: Vec<ContainerSummary>,
    ) -> Result<Option<Instant>, RuntimeError> {
        let Some(record) = self.read_record(name) else {
            return Ok(None);
        };
        // Stopped, going, or still starting: nothing to restart (the start sequence owns
        // a starting pod; an apply's own start would race with this one).
        if record.replicas != 1 || record.deleting || record.starting {
            return Ok(None);
        }
        // A restart of it under way ends with a look of its own.
        if lock(&self.inner.starters).contains_key(name) {
            return Ok(None);
        }
        containers.retain(|c| label(c, POD_HASH_LABEL) == Some(record.pod_hash.as_str()));
        containers.sort_by_key(|c| (summary_role(c), summary_order(c)));
        let state = |c: &ContainerSummary| c.state.map(|s| s.to_string()).unwrap_or_default();
        let apps: Vec<&ContainerSummary> = containers
            .iter()
            .filter(|c| summary_role(c) == Role::App)
            .collect();
        let inits: Vec<&ContainerSummary> = containers
            .iter()
            .filter(|c| summary_role(c) == Role::Init)
            .collect();
        let now = Instant::now();
        // The container whose end is the pod's: an app container that ran and ended, or an
        // init container that failed, leaving the app containers never started.
        let ended = apps
            .iter()
            .find(|c| matches!(state(c).as_str(), "exited" | "dead" | "stopped"))
            .copied();
        let init_failed =
            if ended.is_none() && !apps.is_empty() && apps.iter().all(|c| state(c) == "created") {
                self.failed_init(&inits).await
            } else {
                None
            };
        let Some(ended) = ended.or(init_failed) else {
            // Running: a run long enough forgets the delay.
            if let Some(crashes) = lock(&self.inner.crashes).get_mut(name) {
                if crashes
                    .restarted_at
                    .is_some_and(|at| now.duration_since(at) >= RESET_AFTER)
                {
                    crashes.delay = Duration::ZERO;
                }
            }
            return Ok(None);
        };
        let id = ended.id.clone().unwrap_or_default();
        let container = label(ended, CONTAINER_LABEL).unwrap_or_default().to_owned();
        let inspected = self
            .inspect(&id)
            .await
            .map_err(|e| runtime_err(format!("inspecting container {id}"), e))?;
        let st = inspected.state.unwrap_or_default();
        let Some(code) = st.exit_code else {
            // How it ended is not known yet; an event or the next look tells.
            return Ok(Some(now + Duration::from_secs(1)));
        };
        let finished = format!(
            "{} {}",
            st.started_at.as_deref().unwrap_or_default(),
            st.finished_at.as_deref().unwrap_or_default()
        );
        let exit = Exit {
            container: container.clone(),
            code,
            oom_killed: st.oom_killed.unwrap_or(false),
            cause: None,
        };
        let noted = lock(&self.inner.crashes)
            .entry(name.to_owned())
            .or_default()
            .note_exit(name, &record, finished, exit, now);
        let Some((due, new_exit)) = noted else {
            return Ok(Some(now + RETRY_LOOK));
        };
        if due > now {
            if new_exit {
                // The report says so (back-off) at once, not at the restart.
                self.changed(name);
            }
            return Ok(Some(due));
        }
        // An apply or delete under way owns the pod now; the next pass looks again.
        let Ok(guard) = self.lock_workspace_now(name) else {
            return Ok(Some(now + RETRY_LOOK));
        };
        // Read again under the lock: a delete or apply may have come between the look and it.
        let Some(current) = self.read_record(name) else {
            return Ok(None);
        };
        if current.pod_hash != record.pod_hash
            || current.replicas != 1
            || current.deleting
            || current.starting
        {
            return Ok(None);
        }
        let order = StartOrder {
            // The init containers run again only when one of them failed: an app
            // container's restart is the container's alone, as on Kubernetes.
            init: if init_failed.is_some() {
                inits.iter().filter_map(|c| c.id.clone()).collect()
            } else {
                Vec::new()
            },
            apps: apps.iter().filter_map(|c| c.id.clone()).collect(),
            // A restarted container's postStart hook is not run again: the hooks hold the
            // first start of a pod in order (Compose's healthy dependencies), and a restart
            // is one container's alone.
            hooks: BTreeMap::new(),
        };
        // The restarted containers start unready, probed afresh.
        self.forget_prober(name);
        {
            let mut all = lock(&self.inner.crashes);
            let crashes = all.entry(name.to_owned()).or_default();
            crashes.restarts += 1;
            crashes.due = None;
            crashes.restarted_at = Some(now);
        }
        let started = st.started_at.clone().unwrap_or_default();
        self.spawn_restart(name, guard, order, record.pod_hash.clone(), id, started);
        Ok(None)
    }

    /// The init container of `inits` that ended with a non-zero code, if any.
    async fn failed_init<'c>(
        &self,
        inits: &[&'c ContainerSummary],
    ) -> Option<&'c ContainerSummary> {
        for c in inits {
            if c.state.map(|s| s.to_string()).unwrap_or_default() != "exited" {
                continue;
            }
            let id = c.id.clone().unwrap_or_default();
            let inspected = self.inspect(&id).await.ok();
            let code = inspected.and_then(|i| i.state).and_then(|s| s.exit_code);
            if code.is_some_and(|c| c != 0) {
                return Some(*c);
            }
        }
        None
    }

    /// Restarts pod `name` (spec `hash`) in a task of its own, registered as the pod's start
    /// sequence: an init container that runs long holds this pod only (never the
    /// supervisor's other pods), and an apply or delete of the pod cancels it as it cancels
    /// any start sequence. `id` is the container whose exit this is, in the run that started
    /// at `started`.
    fn spawn_restart(
        &self,
        name: &str,
        guard: OwnedMutexGuard<()>,
        order: StartOrder,
        hash: String,
        id: String,
        started: String,
    ) {
        let token = self.inner.shutdown.child_token();
        let generation = self
            .inner
            .next_starter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.inner.starters).insert(name.to_owned(), (generation, token.clone()));
        let this = self.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let _guard = guard;
            let outcome = tokio::select! {
                // Cancel-safe: the containers are left as they are; the apply or delete
                // that cancelled the restart converges from there.
                _ = token.cancelled() => None,
                outcome = this.run_start(&order) => Some(outcome),
            };
            {
                let mut starters = lock(&this.inner.starters);
                if starters.get(&name).is_some_and(|(g, _)| *g == generation) {
                    starters.remove(&name);
                }
            }
            let Some(outcome) = outcome else {
                this.restart_cancelled(&name, &hash, &id, &started).await;
                return;
            };
            if let Some(mut record) = this.read_record(&name).filter(|r| r.pod_hash == hash) {
                record.failure = super::start::Started::failure_of(outcome);
                if let Err(e) = this.write_record(&record) {
                    tracing::warn!(pod = %name, error = %warren_types::error_chain(&e), "recording a GitOps pod's restart failed");
                }
            }
            this.changed(&name);
        });
    }

    /// The restart of pod `name` (spec `hash`), for the exit of container `id` in its run
    /// that started at `started`, was cancelled by an apply or a delete. A delete or a new
    /// spec ends the pod's restarts anyway; but an apply of the same spec leaves a pod that
    /// ran to the supervisor, so a restart cancelled before it started the container is
    /// still due (not counted, its back-off already taken), and the supervisor is woken
    /// for it. One that got as far as the start stands: the container ran again.
    async fn restart_cancelled(&self, name: &str, hash: &str, id: &str, started: &str) {
        let ran_again = match self.inspect(id).await {
            Ok(i) => i.state.and_then(|s| s.started_at).unwrap_or_default() != started,
            // Gone (deleted) or not answering: the next pass looks for itself.
            Err(_) => false,
        };
        if !ran_again {
            if let Some(crashes) = lock(&self.inner.crashes)
                .get_mut(name)
                .filter(|c| c.hash == hash)
            {
                crashes.restarts = crashes.restarts.saturating_sub(1);
                crashes.due = Some(Instant::now());
            }
            tracing::debug!(pod = %name, "a GitOps pod's restart was cancelled before it started; still due");
        }
        self.changed(name);
    }

    /// Records that a probe stops `container` of pod `name`, so its exit names the cause.
    pub(super) fn note_probe_kill(&self, name: &str, container: &str, reason: &str) {
        lock(&self.inner.crashes)
            .entry(name.to_owned())
            .or_default()
            .probe_kill = Some((container.to_owned(), reason.to_owned()));
    }

    /// Why pod `name` is not ready, as its restarts tell (see [`Crashes::describe`]).
    pub(super) fn crash_report(&self, name: &str) -> Option<String> {
        lock(&self.inner.crashes)
            .get(name)
            .and_then(|c| c.describe(Instant::now()))
    }
}
