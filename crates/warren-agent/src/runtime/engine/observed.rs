//! The runtime's view of its workspaces, kept current one workspace at a time.
//!
//! `list` is called on every reconcile cycle, and every engine event of this agent starts
//! one. Listing every container, volume, network and record each time made one change cost
//! work in proportion to all the workspaces on the agent (issue 38: `ws create --wait` grew
//! by ~110 ms per workspace present). Instead the view keeps each workspace's last
//! observation and looks again only at the workspaces something happened to:
//!
//! - an engine event names its workspace by label (`background::watch_events`);
//! - the runtime's own applies, deletions, start sequences and readiness probes name theirs;
//! - everything is looked at again when the view cannot know what it missed: at start, when
//!   the event stream (re)connects or the engine service restarts, and before each full
//!   reconcile (`WorkspaceRuntime::resync`), so a lost event costs at most one full interval.
//!
//! A workspace is looked at with engine calls scoped to it (an inspection of each of its
//! containers, known by name from `index`, or a listing filtered by its name while the index
//! is not complete; its record), never with calls about the others.

use super::*;

/// When a workspace is looked at again after a look that could not tell everything.
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// What the runtime last saw, and what it must look at again.
#[derive(Debug, Default)]
pub(super) struct View {
    /// Everything must be looked at again.
    all: bool,
    /// Workspaces changed since they were last looked at.
    dirty: BTreeSet<String>,
    /// The last observation of each workspace, by name.
    workspaces: BTreeMap<String, ObservedWorkspace>,
}

impl View {
    /// A view that looks at everything first.
    pub(super) fn stale() -> View {
        View {
            all: true,
            ..View::default()
        }
    }
}

impl EngineRuntime {
    /// Marks workspace `name` for a fresh look at the next `list`, and wakes the reconciler.
    pub(super) fn changed(&self, name: &str) {
        lock(&self.inner.view).dirty.insert(name.to_owned());
        self.bump();
    }

    /// Marks every workspace for a fresh look, and wakes the reconciler.
    pub(super) fn changed_all(&self) {
        self.look_again_at_all();
        self.bump();
    }

    /// Looks at workspace `name` again in a moment: what a look could not tell (how a
    /// container ended) is no engine event's news, so no event would bring it.
    fn look_again_soon(&self, name: &str) {
        let runtime = self.clone();
        let name = name.to_owned();
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => {}
                // Cancel-safe: a sleep holds nothing.
                _ = tokio::time::sleep(LOOK_AGAIN) => runtime.changed(&name),
            }
        });
    }

    /// Marks every workspace for a fresh look at the next `list`.
    pub(super) fn look_again_at_all(&self) {
        lock(&self.inner.view).all = true;
    }

    /// The workspaces as last seen, after looking again at those marked changed.
    pub(super) async fn observed(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        // One look at a time: two would race to store what they saw.
        let _looking = self.inner.looking.lock().await;
        // Taken before looking: a change announced while the engine answers is looked at by
        // the next call.
        let (all, dirty) = {
            let mut view = lock(&self.inner.view);
            (
                std::mem::take(&mut view.all),
                std::mem::take(&mut view.dirty),
            )
        };
        if !all && dirty.is_empty() {
            // Nothing to look at: the engine is still asked whether it answers, so a view
            // kept while it is unreachable is never passed off as current (the reconciler
            // reports the fault instead).
            if let Err(e) = self.inner.docker.ping().await {
                return Err(runtime_err("asking the container engine".into(), e));
            }
        }
        if all {
            match self.scan_all().await {
                Ok(workspaces) => lock(&self.inner.view).workspaces = workspaces,
                Err(e) => {
                    lock(&self.inner.view).all = true;
                    return Err(e);
                }
            }
        } else {
            let mut pending: Vec<String> = dirty.into_iter().collect();
            while let Some(name) = pending.pop() {
                match self.scan_one(&name).await {
                    Ok(Some(o)) => {
                        lock(&self.inner.view).workspaces.insert(name, o);
                    }
                    Ok(None) => {
                        lock(&self.inner.view).workspaces.remove(&name);
                    }
                    Err(e) => {
                        let mut view = lock(&self.inner.view);
                        view.dirty.insert(name);
                        view.dirty.extend(pending);
                        return Err(e);
                    }
                }
            }
        }
        Ok(lock(&self.inner.view)
            .workspaces
            .values()
            .cloned()
            .collect())
    }

    /// One workspace, with engine calls about it alone; `None` when nothing of it is left.
    async fn scan_one(&self, name: &str) -> Result<Option<ObservedWorkspace>, RuntimeError> {
        let containers = self.workspace_containers(name).await?;
        let record = self.read_record(name);
        let namespace = containers
            .iter()
            .find_map(|c| label(c, WORKSPACE_NAMESPACE_LABEL))
            .map(str::to_owned);
        if containers.is_empty() && record.is_none() {
            // Nothing left that a look at one workspace needs to report: a deletion removes
            // the record last. (A volume or network left without a record — the state
            // directory lost — is found by the full look before a full reconcile.)
            return Ok(None);
        }
        Ok(Some(
            self.observe_workspace(name.to_owned(), containers, namespace, record)
                .await,
        ))
    }

    /// Every workspace of this installation, from a listing of all its containers, volumes,
    /// networks and records.
    async fn scan_all(&self) -> Result<BTreeMap<String, ObservedWorkspace>, RuntimeError> {
        let all = self.selector();
        let containers = self.containers(&all).await?;
        let mut by_workspace: BTreeMap<String, Vec<ContainerSummary>> = BTreeMap::new();
        let mut namespaces: BTreeMap<String, String> = BTreeMap::new();
        for c in containers {
            let Some(name) = label(&c, WORKSPACE_NAME_LABEL).map(str::to_owned) else {
                continue;
            };
            if let Some(ns) = label(&c, WORKSPACE_NAMESPACE_LABEL) {
                namespaces.insert(name.clone(), ns.to_owned());
            }
            by_workspace.entry(name).or_default().push(c);
        }
        for (_, labels) in self
            .labelled_volumes(&all)
            .await?
            .into_iter()
            .chain(self.labelled_networks(&all).await?)
        {
            if let Some(name) = labels.get(WORKSPACE_NAME_LABEL) {
                by_workspace.entry(name.clone()).or_default();
                if let Some(ns) = labels.get(WORKSPACE_NAMESPACE_LABEL) {
                    namespaces.entry(name.clone()).or_insert_with(|| ns.clone());
                }
            }
        }
        let mut records = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(self.inner.config.state_dir.join("workspaces")) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(record) = self.read_record(&name) {
                    by_workspace.entry(name.clone()).or_default();
                    records.insert(name, record);
                }
            }
        }
        let mut out = BTreeMap::new();
        for (name, containers) in by_workspace {
            let record = records.remove(&name);
            let namespace = namespaces.remove(&name);
            let observed = self
                .observe_workspace(name.clone(), containers, namespace, record)
                .await;
            out.insert(name, observed);
        }
        Ok(out)
    }

    /// What the containers and the record of one workspace add up to.
    async fn observe_workspace(
        &self,
        name: String,
        containers: Vec<ContainerSummary>,
        namespace: Option<String>,
        record: Option<Record>,
    ) -> ObservedWorkspace {
        let namespace = record
            .as_ref()
            .map(|r| r.namespace.clone())
            .or(namespace)
            .unwrap_or_default();
        let key = WorkspaceKey {
            name: name.clone(),
            namespace: namespace.clone(),
        };
        let Some(record) = record else {
            // Left-overs without a record (the state directory was lost): report what
            // runs; the next full reconcile applies or deletes it.
            let observed = self.observe(&containers, None, true).await;
            let replicas = i32::from(observed.iter().any(|c| c.status == "running"));
            let pod = PodObservation {
                name,
                namespace,
                replicas,
                applied: None,
                containers: observed,
                starting: false,
                recorded_failure: None,
                waiting: None,
                saving: false,
                stored_bytes: None,
            };
            let s = status::synthesise(&pod);
            return ObservedWorkspace {
                key,
                deployment: Some(s.deployment),
                pod_failure: s.pod_failure,
                pod_waiting: None,
                terminating: false,
            };
        };
        if record.deleting {
            return ObservedWorkspace {
                key,
                deployment: None,
                pod_failure: None,
                pod_waiting: None,
                terminating: true,
            };
        }
        let observed = self
            .observe(&containers, Some(&record), record.replicas == 1)
            .await;
        if observed.iter().any(|c| c.status == status::UNKNOWN) {
            self.look_again_soon(&name);
        }
        let apps_run = observed.iter().any(|c| c.role != Role::Init)
            && observed
                .iter()
                .filter(|c| c.role != Role::Init)
                .all(|c| c.status == "running");
        // Running only once usable (`ready`); a pod that is not all running is judged
        // afresh when it runs again. Never while its start sequence runs: the engine may
        // list a container as running before it records when it started, and a command
        // that exits at once was reported `Running` that way (issue 38); the end of the
        // sequence looks again.
        let waiting = if record.replicas == 1 && record.starting && apps_run {
            Some("its containers are being started".to_owned())
        } else if record.replicas == 1 && apps_run && self.inner.kubernetes_pods.is_some() {
            // A pod from Git is ready as its probes say, as on Kubernetes (`probes`).
            self.probe_verdict(&record, &containers)
        } else if record.replicas == 1 && apps_run {
            match self.usable(&record, &containers).await {
                ready::Usable::Yes => None,
                ready::Usable::WithoutPorts(note) => {
                    tracing::info!(workspace = %name, "{note}; reporting it running anyway");
                    None
                }
                ready::Usable::No(why) => Some(why),
            }
        } else {
            self.forget_usable(&name);
            self.forget_prober(&name);
            None
        };
        let pod = PodObservation {
            name,
            namespace,
            replicas: record.replicas,
            applied: Some(record.deployment.clone()),
            containers: observed,
            starting: record.starting,
            recorded_failure: record.failure.clone(),
            waiting,
            saving: record.saving,
            stored_bytes: record.stored_bytes,
        };
        let s = status::synthesise(&pod);
        ObservedWorkspace {
            key,
            deployment: Some(s.deployment),
            pod_failure: s.pod_failure,
            pod_waiting: None,
            terminating: false,
        }
    }
}
