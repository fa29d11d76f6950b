//! The start sequence of a pod: its init containers to completion in order, then its app
//! containers, the namespace owner first, each one's `postStart` exec hook run to its end
//! before the next starts (as the kubelet does: a Compose dev container's healthy dependency
//! holds the dev container so); in the background, holding the workspace's lock.

use super::*;

/// How long a pod started afresh is watched for an early exit the engine caused.
const RESTART_GRACE: Duration = Duration::from_secs(1);

/// Starts retried when a published host port is taken for a moment (see `run_start`).
const PORT_RETRIES: u64 = 4;

/// The engine names of a pod's containers in start order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct StartOrder {
    /// Init containers, run to completion in order before any app container.
    pub init: Vec<String>,
    /// App containers; the first owns the pod's network namespace.
    pub apps: Vec<String>,
    /// The `postStart` exec hooks of app containers, by engine name: run after the container
    /// starts and before the next one does, as the kubelet runs them.
    pub hooks: BTreeMap<String, Vec<String>>,
}

impl StartOrder {
    pub fn of(plan: &PodPlan) -> StartOrder {
        let named = |role: Role| {
            plan.containers
                .iter()
                .filter(|c| c.role == role)
                .map(|c| c.engine_name.clone())
                .collect()
        };
        StartOrder {
            init: named(Role::Init),
            apps: named(Role::App),
            hooks: plan
                .containers
                .iter()
                .filter(|c| c.role == Role::App)
                .filter_map(|c| Some((c.engine_name.clone(), c.post_start.clone()?)))
                .collect(),
        }
    }
}

/// What starting a pod came to.
#[derive(Debug, Default)]
pub(super) struct Started {
    /// A pod failure found while starting.
    pub failure: Option<PodFailure>,
    /// The pod ran before and was started afresh: Podman may stop it again at once
    /// (see [`EngineRuntime::watch_restart`]).
    pub again: bool,
}

impl Started {
    fn failed(failure: PodFailure) -> Started {
        Started {
            failure: Some(failure),
            again: false,
        }
    }

    /// The pod failure a start came to; an engine that could not be reached is one too.
    pub fn failure_of(outcome: Result<Started, RuntimeError>) -> Option<PodFailure> {
        match outcome {
            Ok(started) => started.failure,
            Err(e) => Some(PodFailure {
                reason: "RunContainerError".into(),
                message: warren_types::error_chain(&e),
            }),
        }
    }
}

impl EngineRuntime {
    /// Starts the pod: each init container to completion in order, then the app containers,
    /// the namespace owner first. Runs in the background, holding the workspace's lock.
    pub(super) async fn start_sequence(
        &self,
        name: String,
        plan: PodPlan,
        cancel: CancellationToken,
    ) {
        let order = StartOrder::of(&plan);
        let outcome = tokio::select! {
            // Cancel-safe: dropping the sequence leaves containers in a state the next apply
            // converges from (it starts whatever is not running).
            _ = cancel.cancelled() => return,
            r = self.run_start(&order) => r,
        };
        let Some(mut record) = self.read_record(&name) else {
            return;
        };
        if record.pod_hash != plan.hash {
            return;
        }
        record.starting = false;
        let mut again = false;
        match outcome {
            Ok(started) => {
                again = started.again && started.failure.is_none();
                record.failure = started.failure;
            }
            Err(e) => {
                tracing::warn!(workspace = %name, error = %e, "starting the workspace failed");
                record.failure = Some(PodFailure {
                    reason: "RunContainerError".into(),
                    message: warren_types::error_chain(&e),
                });
            }
        }
        if let Err(e) = self.write_record(&record) {
            tracing::warn!(workspace = %name, error = %e, "recording the start outcome failed");
        }
        if again {
            // Off the start's path: the pod is reported as soon as it runs, not a grace later.
            self.watch_restart(name.clone(), plan.hash.clone(), order);
        }
        self.changed(&name);
    }

    /// Watches a pod started afresh after a stop for [`RESTART_GRACE`], and starts it once
    /// more if its owner exited meanwhile with code 0 and nothing else changed.
    ///
    /// Podman 4.3 now and then stops a container it has just started again after a stop
    /// (a late clean-up of the previous run: exit code 0, no stop from the runtime). Until
    /// the watch ends, `observe` takes an app container's exit with code 0 for not known
    /// yet rather than a failure, so the blip is never reported, and the watch starts the
    /// pod once more after such an exit; a command that really exits with 0 does so again
    /// and is reported. Any other exit is the command's own and is left alone. An apply or
    /// delete of the workspace ends the watch (`lock_workspace`), so a stop right after a
    /// start stays a stop.
    fn watch_restart(&self, name: String, hash: String, order: StartOrder) {
        let Some(owner) = order.apps.first().cloned() else {
            return;
        };
        let generation = self
            .inner
            .next_starter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.inner.restarted).insert(name.clone(), generation);
        let this = self.clone();
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(async move {
            let exited = tokio::select! {
                // Cancel-safe: cancellation is level-triggered; the watch just ends.
                _ = shutdown.cancelled() => false,
                // Cancel-safe: dropping the wait leaves nothing behind on the engine.
                r = tokio::time::timeout(RESTART_GRACE, this.wait_stopped(&owner)) => r.is_ok(),
            };
            let ours =
                |this: &EngineRuntime| lock(&this.inner.restarted).get(&name) == Some(&generation);
            if exited && ours(&this) {
                // The workspace's lock without cancelling anything: an apply or delete that
                // holds it ends this watch, and one that came first has ended it already.
                let _guard = this.workspace_mutex(&name).lock_owned().await;
                let unchanged = ours(&this)
                    && this.read_record(&name).is_some_and(|r| {
                        r.pod_hash == hash
                            && r.replicas == 1
                            && !r.starting
                            && !r.deleting
                            && r.failure.is_none()
                    });
                // Podman's early stop ends the run with code 0 and nothing else; any other
                // exit is the command's own, reported as it is and never run again behind
                // the user's back.
                let blip = this
                    .inspect(&owner)
                    .await
                    .ok()
                    .and_then(|i| i.state)
                    .is_some_and(|s| s.running == Some(false) && s.exit_code == Some(0));
                if unchanged && blip {
                    tracing::info!(container = %owner, "started again after an early exit");
                    let failure = Started::failure_of(this.run_start(&order).await);
                    if let Some(mut record) = this.read_record(&name) {
                        if failure.is_some() {
                            record.failure = failure;
                            if let Err(e) = this.write_record(&record) {
                                tracing::warn!(workspace = %name, error = %e, "recording the start outcome failed");
                            }
                        }
                    }
                }
            }
            {
                let mut restarted = lock(&this.inner.restarted);
                if restarted.get(&name) == Some(&generation) {
                    restarted.remove(&name);
                }
            }
            this.changed(&name);
        });
    }

    /// Whether workspace `name` was started afresh a moment ago and is still watched
    /// (`watch_restart`).
    pub(super) fn restart_watched(&self, name: &str) -> bool {
        lock(&self.inner.restarted).contains_key(name)
    }

    /// Runs container `c`'s `postStart` hook, if it has one, to its end; the pod's failure
    /// when the hook fails (the container is stopped, as the kubelet kills it).
    async fn post_start_hook(&self, c: &str, order: &StartOrder) -> Option<PodFailure> {
        let command = order.hooks.get(c)?;
        tracing::debug!(container = %c, "running its postStart hook");
        let why = match self.run_exec(c, command).await {
            Ok((0, _)) => return None,
            Ok((code, text)) if text.is_empty() => format!("exited with code {code}"),
            Ok((code, text)) => format!("exited with code {code}: {text}"),
            Err(e) => format!("could not run: {e}"),
        };
        if let Err(e) = self.stop(c).await {
            tracing::warn!(container = %c, error = %e, "stopping a container whose postStart hook failed");
        }
        Some(PodFailure {
            reason: "PostStartHookError".into(),
            message: format!("container {c}: its postStart hook {why}"),
        })
    }

    /// Starts the pod's containers in order; a pod failure found while starting is in
    /// the answer, an unreachable engine the error.
    pub(super) async fn run_start(&self, order: &StartOrder) -> Result<Started, RuntimeError> {
        let docker = &self.inner.docker;
        let Some(owner) = order.apps.first() else {
            return Ok(Started::default());
        };
        let running = |name: &str| {
            let name = name.to_owned();
            async move {
                self.inspect(&name)
                    .await
                    .map(|i| i.state.and_then(|s| s.running) == Some(true))
                    .map_err(|e| runtime_err(format!("inspecting {name}"), e))
            }
        };
        let owner_running = running(owner).await?;
        if !owner_running {
            // A fresh start of the pod: containers still running in the old namespace of a
            // stopped owner would stay cut off from it, so they restart with the pod.
            for c in order.apps.iter().rev() {
                if c != owner && running(c).await? {
                    self.stop(c)
                        .await
                        .map_err(|e| runtime_err(format!("stopping {c}"), e))?;
                }
            }
        }
        let start = |name: String| async move {
            tracing::debug!(container = %name, "starting");
            let mut retries = 0u64;
            loop {
                return match docker.start_container(&name, None).await {
                    Err(e) if status_of(&e) == Some(304) => Ok(false),
                    // Podman picks a published port's host port at create; by the start,
                    // another socket (a client's ephemeral port, most often) may hold it for
                    // a moment. Tried again a few times before it is the pod's failure.
                    Err(e)
                        if retries < PORT_RETRIES
                            && error_message(&e).contains("address already in use") =>
                    {
                        retries += 1;
                        tracing::info!(container = %name, retries, "a published port was taken; starting again");
                        tokio::time::sleep(Duration::from_millis(300 * retries)).await;
                        continue;
                    }
                    Err(e) if status_of(&e).is_some() => Err(Ok(PodFailure {
                        reason: "RunContainerError".into(),
                        message: format!("starting {name}: {}", error_message(&e)),
                    })),
                    Err(e) => Err(Err(runtime_err(format!("starting {name}"), e))),
                    Ok(()) => Ok(true),
                };
            }
        };
        macro_rules! start_or_fail {
            ($name:expr) => {
                match start($name).await {
                    Ok(_) => {}
                    Err(Ok(failure)) => return Ok(Started::failed(failure)),
                    Err(Err(e)) => return Err(e),
                }
            };
        }
        for c in &order.init {
            let state = self
                .inspect(c)
                .await
                .map_err(|e| runtime_err(format!("inspecting {c}"), e))?
                .state
                .unwrap_or_default();
            // Init containers run again whenever the pod starts afresh, as in a new pod.
            let done = state.status.map(|s| s.to_string()) == Some("exited".into())
                && state.exit_code == Some(0)
                && owner_running;
            if done {
                continue;
            }
            start_or_fail!(c.clone());
            self.wait_stopped(c).await;
            let code = self
                .inspect(c)
                .await
                .map_err(|e| runtime_err(format!("inspecting {c}"), e))?
                .state
                .and_then(|s| s.exit_code)
                .unwrap_or(0);
            if code != 0 {
                // Reported by `list` from the container's state, with its log.
                return Ok(Started::default());
            }
        }
        // Whether the owner ran before (a restart), not a container created just now.
        let ran_before = self
            .inspect(owner)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.finished_at)
            .is_some_and(|f| !f.is_empty() && !f.starts_with("0001-"));
        for c in &order.apps {
            match start(c.clone()).await {
                // Started now: its hook runs before the next container starts.
                Ok(true) => {
                    if let Some(failure) = self.post_start_hook(c, order).await {
                        return Ok(Started::failed(failure));
                    }
                }
                Ok(false) => {}
                // A joiner cannot start once the owner has exited: the owner's exit (with its
                // log, reported by `list`) is the failure the user needs to see.
                Err(Ok(_)) if c != owner && !running(owner).await? => return Ok(Started::default()),
                Err(Ok(failure)) => return Ok(Started::failed(failure)),
                Err(Err(e)) => return Err(e),
            }
        }
        Ok(Started {
            failure: None,
            again: !owner_running && ran_before,
        })
    }
}
