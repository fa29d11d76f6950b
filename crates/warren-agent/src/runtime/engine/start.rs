//! The start sequence of a pod: its init containers to completion in order, then its app
//! containers, the namespace owner first; in the background, holding the workspace's lock.

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
        match outcome {
            Ok(failure) => record.failure = failure,
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
        self.changed(&name);
    }

    /// `Ok(Some(failure))` for a pod failure found while starting.
    pub(super) async fn run_start(
        &self,
        order: &StartOrder,
    ) -> Result<Option<PodFailure>, RuntimeError> {
        let docker = &self.inner.docker;
        let Some(owner) = order.apps.first() else {
            return Ok(None);
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
                    Err(e) if status_of(&e) == Some(304) => Ok(()),
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
                    Ok(()) => Ok(()),
                };
            }
        };
        macro_rules! start_or_fail {
            ($name:expr) => {
                match start($name).await {
                    Ok(()) => {}
                    Err(Ok(failure)) => return Ok(Some(failure)),
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
            let options = WaitContainerOptions {
                condition: "not-running".into(),
            };
            // The stream reports a non-zero exit as an error; the exit code is read below.
            let _ = docker.wait_container(c, Some(options)).next().await;
            let code = self
                .inspect(c)
                .await
                .map_err(|e| runtime_err(format!("inspecting {c}"), e))?
                .state
                .and_then(|s| s.exit_code)
                .unwrap_or(0);
            if code != 0 {
                // Reported by `list` from the container's state, with its log.
                return Ok(None);
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
                Ok(()) => {}
                // A joiner cannot start once the owner has exited: the owner's exit (with its
                // log, reported by `list`) is the failure the user needs to see.
                Err(Ok(_)) if c != owner && !running(owner).await? => return Ok(None),
                Err(Ok(failure)) => return Ok(Some(failure)),
                Err(Err(e)) => return Err(e),
            }
        }
        if !owner_running && ran_before {
            // Podman 4.3 now and then stops a container it has just started again after a
            // stop (a late clean-up of the previous run: exit code 0, no stop from us). A pod
            // started afresh is watched briefly, and started once more if its owner went
            // that way; a container that really exits does so again and is reported.
            let options = WaitContainerOptions {
                condition: "not-running".into(),
            };
            let mut waited = docker.wait_container(owner, Some(options));
            let exited = tokio::time::timeout(RESTART_GRACE, waited.next())
                .await
                .is_ok();
            if exited && !running(owner).await? {
                tracing::info!(container = %owner, "started again after an early exit");
                for c in &order.apps {
                    start_or_fail!(c.clone());
                }
            }
        }
        Ok(None)
    }
}
