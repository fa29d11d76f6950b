//! An apply of a workspace's objects under its pod's lock: the plan, its networks, volumes
//! and files, the containers made again where the pod spec or an image changed, the start;
//! and the look at the result.

use super::snapshot::is_prebuild;
use super::*;

/// What an apply leaves to do after it, out of the reconcile loop's way.
pub(super) enum Next {
    /// Nothing: the pod is as it should be, or stopped, or failed.
    Nothing,
    /// Start the pod's containers.
    Start(Box<PodPlan>),
    /// Build these images, then apply again (`autobuild`).
    Build(Vec<warren_types::relay::BuildImageTask>),
    /// Save these volumes of the stopped prebuild pod as its snapshots (`snapshot`).
    Save(Box<PodPlan>, Vec<String>, BTreeMap<String, String>),
}

impl EngineRuntime {
    pub(super) async fn apply_locked(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
        options: &ApplyOptions,
    ) -> Result<Next, RuntimeError> {
        let shared = &options.shared;
        let name = &workspace.name;
        let apply_err = |message: String| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        };
        if !is_dns_label(name) {
            return Err(apply_err(format!(
                "workspace name {name:?} is not a DNS label"
            )));
        }
        let mut parsed = plan::parse_objects(objects).map_err(|e| apply_err(e.to_string()))?;
        parsed.claim_volumes = shared
            .iter()
            .map(|(claim, (volume, _))| (claim.clone(), volume.clone()))
            .collect();
        let shared_labels: BTreeMap<String, BTreeMap<String, String>> = shared
            .values()
            .map(|(volume, labels)| (volume.clone(), labels.clone()))
            .collect();
        let previous = self.read_record(name);
        let kept = kept(&parsed, previous.as_ref(), options.complete);
        let pull_secrets = kept.pull_secrets.clone();
        let labels = self.base_labels(workspace, &parsed.deployment_json);
        let files_dir = self.workspace_dir(name).join("files");
        let cx = plan::PlanContext {
            workspace,
            files_dir: &files_dir,
            labels: &labels,
            kubernetes: self.inner.kubernetes_pods,
            cdi: &plan::CdiDevices::read(&self.inner.config.cdi_spec_dirs)
                .on_engine(self.inner.engine_cdi.clone()),
        };
        let mut plan = plan::plan(&parsed, &kept.secrets, &kept.config_maps, &cx)
            .map_err(|e| apply_err(e.to_string()))?;
        // After the hash: a build changes what a name runs at the pod's next start, as a
        // rebuilt tag does (`outdated_images`), never a running pod.
        let scope = self.build_scope(name, &parsed.deployment_json);
        self.use_own_builds(&mut plan, &scope).await?;
        tracing::debug!(workspace = %workspace, replicas = plan.replicas, hash = %plan.hash, "applying");

        let mut record = self.record_for(workspace, &plan, &parsed, previous.as_ref(), kept);
        // Known before anything is written, so that a look between this apply's steps never
        // reports a prebuild stopped whose snapshots are still to be saved.
        let unsaved = if plan.replicas == 0 && !record.save_failed {
            self.unsaved_snapshots(&record.volumes, &labels).await
        } else {
            vec![]
        };
        record.saving = !unsaved.is_empty();
        self.write_record(&record)?;
        write_files(&files_dir, &plan).map_err(|e| {
            runtime_err(
                format!("writing the Secret and ConfigMap files of {name}"),
                e,
            )
        })?;
        self.ensure_network(&plan, &labels).await?;
        // Before any container exists: a workspace never runs without its rules.
        self.sync_firewall().await?;
        let new_volumes = self.ensure_volumes(&plan, &labels, &shared_labels).await?;
        self.note_seeds(&mut record, &plan, &new_volumes)?;

        let current = self.remove_stale(workspace, &plan).await?;
        // A pod from Git that ran with this spec and has exited is the supervisor's to
        // restart, after its back-off (`restarts`): a sync's apply must not restart a
        // crash-looping pod at every interval.
        let ran = self.inner.kubernetes_pods.is_some()
            && current.recreated == 0
            && previous.as_ref().is_some_and(|p| {
                // A start that failed (the containers never ran) is tried again here.
                p.pod_hash == plan.hash
                    && p.replicas == 1
                    && !p.starting
                    && !p.deleting
                    && p.failure.is_none()
            });
        let current = current.kept;
        let present = present_containers(&current);
        if let Some(tools) = plan.tools.as_ref().filter(|_| plan.replicas == 1) {
            self.ensure_tools(tools, &pull_secrets).await;
        }
        if plan.replicas == 1 && present.is_empty() {
            let missing = self.missing_builds(workspace, &parsed.deployment_json, &scope);
            if let Some(tasks) = missing.await? {
                return Ok(Next::Build(tasks));
            }
        }
        let mut created = false;
        for c in &plan.containers {
            if present.contains(&format!("{}/{}", c.role.label(), c.name)) {
                continue;
            }
            created = true;
            if let Err(failure) = self.create(c, &pull_secrets, name, &scope).await? {
                tracing::info!(workspace = %workspace, reason = %failure.reason, "pod failure while creating containers");
                record.failure = Some(failure);
                record.starting = false;
                self.write_record(&record)?;
                return Ok(Next::Nothing);
            }
        }

        // After the creates: the image is pulled by now; before anything starts. The volumes
        // are the pod user's first: the prebuild's copy runs as that user.
        self.give_volumes_to_pod_user(&plan, &new_volumes, &labels)
            .await;
        self.fill_seeds(&mut record, &plan, &labels).await?;

        let containers = self.workspace_containers(name).await?;
        if plan.replicas == 0 {
            self.stop_running(&containers).await?;
            // A stopped prebuild not measured yet is measured after any saving, off the
            // apply's path.
            if !unsaved.is_empty() || (is_prebuild(&labels) && record.stored_bytes.is_none()) {
                return Ok(Next::Save(Box::new(plan), unsaved, labels));
            }
            return Ok(Next::Nothing);
        }
        if apps_all_running(&containers) || (ran && !created) {
            record.starting = false;
            self.write_record(&record)?;
            return Ok(Next::Nothing);
        }
        Ok(Next::Start(Box::new(plan)))
    }

    /// The record an apply writes first: what the plan asks for, with what carries over
    /// from the previous record (seeds still to fill, a failed save while still stopped).
    fn record_for(
        &self,
        workspace: &WorkspaceKey,
        plan: &PodPlan,
        parsed: &plan::Objects,
        previous: Option<&Record>,
        kept: Kept,
    ) -> Record {
        Record {
            agent_id: self.inner.config.agent_id,
            name: workspace.name.clone(),
            namespace: workspace.namespace.clone(),
            replicas: plan.replicas,
            pod_hash: plan.hash.clone(),
            deployment: parsed.deployment_json.clone(),
            volumes: plan
                .volumes
                .keys()
                .filter(|v| !plan.shared_volumes.contains(*v))
                .cloned()
                .collect(),
            // Set until the pod is known to run, so `list` never mistakes containers not
            // created or started yet for missing or exited ones.
            starting: plan.replicas == 1,
            failure: None,
            deleting: false,
            secrets: kept.secrets,
            config_maps: kept.config_maps,
            egress: kept.egress,
            pull_secrets: kept.pull_secrets,
            pending_seeds: previous.map_or(vec![], |p| p.pending_seeds.clone()),
            saving: false,
            // Kept while the pod stays stopped: a failed save is not tried at every apply.
            save_failed: plan.replicas == 0 && previous.is_some_and(|p| p.save_failed),
            // Measured once per stop: what a stopped prebuild keeps does not change.
            stored_bytes: previous
                .filter(|p| plan.replicas == 0 && p.replicas == 0)
                .and_then(|p| p.stored_bytes),
        }
    }

    /// Removes the pod's containers that do not belong to the plan: any of another pod hash
    /// (volumes stay), and all of them when a stopped pod about to start has a container
    /// whose image reference now names another image (rebuilt under the same tag) — a start
    /// runs what the reference names now, as a new pod would on Kubernetes. A running pod is
    /// not restarted behind its user's back.
    async fn remove_stale(
        &self,
        workspace: &WorkspaceKey,
        plan: &PodPlan,
    ) -> Result<Current, RuntimeError> {
        let existing = self.workspace_containers(&workspace.name).await?;
        let pod_running = existing
            .iter()
            .any(|c| summary_role(c) == Role::App && summary_running(c));
        let starting = plan.replicas == 1 && !pod_running;
        let outdated = if starting {
            self.outdated_images(plan, &existing).await
        } else {
            BTreeSet::new()
        };
        // A start takes the environment's values from the objects as they are now.
        let env_changed = starting
            && existing
                .iter()
                .any(|c| label(c, OBJECTS_ENV_LABEL) != Some(plan.env_hash.as_str()));
        // One outdated container recreates the whole pod, as Kubernetes would: the others
        // may join its namespaces.
        let (kept, stale): (Vec<_>, Vec<_>) = existing.into_iter().partition(|c| {
            label(c, POD_HASH_LABEL) == Some(plan.hash.as_str())
                && outdated.is_empty()
                && !env_changed
        });
        let recreated = stale.len();
        if !stale.is_empty() {
            tracing::info!(workspace = %workspace, images_changed = outdated.len(), "pod spec or images changed: recreating its containers");
            self.stop_running(&stale).await?;
            self.remove_all(stale).await?;
        }
        Ok(Current { kept, recreated })
    }

    /// `apply`, with the options GitOps needs (see `gitops`).
    pub(super) async fn apply_with(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
        options: &ApplyOptions,
    ) -> Result<(), RuntimeError> {
        let digest = autobuild::objects_digest(objects);
        if self.building_for(&workspace.name, &digest) {
            // The build under way applies these very objects when it ends.
            return Ok(());
        }
        let guard = self.lock_workspace(&workspace.name).await;
        let result = self.apply_locked(workspace, objects, options).await;
        self.changed(&workspace.name);
        let next = result?;
        if matches!(next, Next::Nothing) {
            return Ok(());
        }
        let token = self.inner.shutdown.child_token();
        let generation = self
            .inner
            .next_starter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        lock(&self.inner.starters).insert(workspace.name.clone(), (generation, token.clone()));
        let this = self.clone();
        let key = workspace.clone();
        let again = match &next {
            Next::Build(_) => {
                self.mark_building(&workspace.name, &digest, true);
                Some((objects.to_vec(), options.clone()))
            }
            _ => None,
        };
        tokio::spawn(async move {
            let _guard = guard;
            let plan = match next {
                Next::Start(plan) => Some(*plan),
                Next::Build(tasks) => {
                    let (objects, options) = again.unwrap_or_default();
                    let plan = this
                        .build_then_apply(&key, &tasks, &objects, &options, &token)
                        .await;
                    this.mark_building(&key.name, &digest, false);
                    plan
                }
                Next::Save(plan, volumes, labels) => {
                    this.save_then_record(&key.name, &plan, &volumes, &labels, &token)
                        .await;
                    None
                }
                Next::Nothing => None,
            };
            if let Some(plan) = plan {
                this.start_sequence(key.name.clone(), plan, token).await;
            }
            let mut starters = lock(&this.inner.starters);
            if starters
                .get(&key.name)
                .is_some_and(|(g, _)| *g == generation)
            {
                starters.remove(&key.name);
            }
        });
        Ok(())
    }

    /// Saves the stopped prebuild's snapshots (holding its lock), measures what it keeps, then
    /// records that it is stopped; cancelled, it leaves the record saying it saves, for the
    /// next apply to judge.
    async fn save_then_record(
        &self,
        name: &str,
        plan: &PodPlan,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
        cancel: &CancellationToken,
    ) {
        let saved = self.save_snapshots(plan, volumes, labels, cancel).await;
        if cancel.is_cancelled() {
            return;
        }
        if let Some(mut record) = self.read_record(name) {
            let space = self.prebuild_space(&record.volumes, labels).await;
            record.saving = false;
            // Nothing to save: only measured, and a failed save stays failed.
            if !volumes.is_empty() {
                record.save_failed = !saved;
            }
            record.stored_bytes = space;
            if let Err(e) = self.write_record(&record) {
                tracing::warn!(workspace = name, error = %warren_types::error_chain(&e), "recording the saved snapshots failed");
            }
        }
        self.changed(name);
    }

    /// The builds an apply left (`autobuild`), then the same apply again; the plan to start,
    /// if any. A failed build is the workspace's failure; cancelling (the next apply or
    /// delete) drops the build.
    async fn build_then_apply(
        &self,
        workspace: &WorkspaceKey,
        tasks: &[warren_types::relay::BuildImageTask],
        objects: &[serde_json::Value],
        options: &ApplyOptions,
        cancel: &CancellationToken,
    ) -> Option<PodPlan> {
        let built = tokio::select! {
            // Cancel-safe: a dropped build leaves no container; the next apply builds again.
            _ = cancel.cancelled() => return None,
            r = self.build_at_start(workspace, tasks) => r,
        };
        let failure = match built {
            Ok(()) => match self.apply_locked(workspace, objects, options).await {
                Ok(Next::Start(plan)) => return Some(*plan),
                Ok(Next::Nothing) => None,
                // Not after a build (only a pod to start builds), but never left unsaved.
                Ok(Next::Save(plan, volumes, labels)) => {
                    self.save_then_record(&workspace.name, &plan, &volumes, &labels, cancel)
                        .await;
                    None
                }
                Ok(Next::Build(left)) => Some(PodFailure {
                    reason: autobuild::BUILD_FAILED_REASON.into(),
                    message: format!(
                        "image {} was built but is not found among this workspace's images",
                        left.first().map(|t| t.image.as_str()).unwrap_or_default()
                    ),
                }),
                Err(e) => Some(PodFailure {
                    reason: "RunContainerError".into(),
                    message: warren_types::error_chain(&e),
                }),
            },
            Err(failure) => Some(failure),
        };
        if let Some(failure) = failure {
            tracing::info!(workspace = %workspace, reason = %failure.reason, message = %failure.message, "the workspace's images could not be built");
            if let Some(mut record) = self.read_record(&workspace.name) {
                record.failure = Some(failure);
                record.starting = false;
                if let Err(e) = self.write_record(&record) {
                    tracing::warn!(workspace = %workspace, error = %warren_types::error_chain(&e), "cannot record a failed build");
                }
            }
        }
        self.changed(&workspace.name);
        None
    }

    /// The containers of the current pod. Exit codes and log tails are read only when the
    /// pod should run (`details`): a stopped pod's exited containers are no failure, and a
    /// list of many stopped workspaces stays one engine call.
    pub(super) async fn observe(
        &self,
        containers: &[ContainerSummary],
        record: Option<&Record>,
        details: bool,
    ) -> Vec<ContainerObservation> {
        let mut out = Vec::new();
        let mut sorted: Vec<&ContainerSummary> = containers
            .iter()
            .filter(|c| {
                record.is_none_or(|r| label(c, POD_HASH_LABEL) == Some(r.pod_hash.as_str()))
            })
            .collect();
        sorted.sort_by_key(|c| (summary_role(c), summary_order(c)));
        for c in sorted {
            let id = c.id.clone().unwrap_or_default();
            let status = c.state.map(|s| s.to_string()).unwrap_or_default();
            let mut obs = ContainerObservation {
                role: summary_role(c),
                name: label(c, CONTAINER_LABEL).unwrap_or("").to_owned(),
                status: status.clone(),
                exit_code: 0,
                oom_killed: false,
                error: String::new(),
                log_tail: String::new(),
            };
            if details
                && matches!(
                    status.as_str(),
                    "exited" | "dead" | "restarting" | "stopped"
                )
            {
                match self.inspect(&id).await.map(|i| i.state) {
                    Ok(Some(s)) if s.exit_code.is_some() => {
                        obs.exit_code = s.exit_code.unwrap_or_default();
                        obs.oom_killed = s.oom_killed.unwrap_or(false);
                        obs.error = s.error.unwrap_or_default();
                        // Possibly Podman's blip right after a start afresh, which the
                        // watch undoes (`start::watch_restart`): not known yet.
                        if obs.exit_code == 0
                            && obs.role == Role::App
                            && record.is_some_and(|r| self.restart_watched(&r.name))
                        {
                            obs.status = status::UNKNOWN.to_owned();
                            out.push(obs);
                            continue;
                        }
                    }
                    // How it ended is not known yet: never guessed (a default of 0 once
                    // reported "exited with code 0" for `exit 3`); the pod is reported as
                    // not ready, with no failure, until a later look knows.
                    _ => {
                        obs.status = status::UNKNOWN.to_owned();
                        out.push(obs);
                        continue;
                    }
                }
                if obs.exit_code != 0 || obs.role != Role::Init {
                    obs.log_tail = self.log_tail(&id).await;
                }
            }
            out.push(obs);
        }
        out
    }

    pub(super) async fn log_tail(&self, id: &str) -> String {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: "5".into(),
            ..Default::default()
        };
        let mut stream = self.inner.docker.logs(id, Some(options));
        let mut text = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            if text.len() > 4096 {
                break;
            }
        }
        // Only short logs go into the message; a user reads long ones with `warren ws logs`.
        if text.len() > 1000 {
            let cut = text.len() - 1000;
            let cut = (cut..text.len())
                .find(|i| text.is_char_boundary(*i))
                .unwrap_or(text.len());
            text = format!("…{}", &text[cut..]);
        }
        text
    }
}

/// The pod's containers an apply keeps, and how many it removed to make again.
struct Current {
    kept: Vec<ContainerSummary>,
    recreated: usize,
}

/// What an apply carries over from the pod's previous record.
struct Kept {
    egress: Option<firewall::Egress>,
    pull_secrets: Vec<String>,
    secrets: DataSets,
    config_maps: DataSets,
}

/// A set of Deployments only is a partial reconcile's: the policy stays as it was and the
/// pull secrets it names are added to the earlier ones. An apply that is not `complete`
/// keeps the Secrets and ConfigMaps it does not name.
fn kept(parsed: &plan::Objects, previous: Option<&Record>, complete: bool) -> Kept {
    let egress = match &parsed.network_policy {
        Some(p) => firewall::Egress::from_policy(p),
        None if parsed.only_deployments => previous.and_then(|r| r.egress.clone()),
        None => None,
    };
    let pull_secrets = if parsed.only_deployments {
        let mut names = previous.map(|r| r.pull_secrets.clone()).unwrap_or_default();
        for n in &parsed.pull_secrets {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    } else {
        parsed.pull_secrets.clone()
    };
    let kept = previous.filter(|_| !complete);
    let mut secrets = kept.map(|r| r.secrets.clone()).unwrap_or_default();
    secrets.extend(parsed.secrets.clone());
    let mut config_maps = kept.map(|r| r.config_maps.clone()).unwrap_or_default();
    config_maps.extend(parsed.config_maps.clone());
    Kept {
        egress,
        pull_secrets,
        secrets,
        config_maps,
    }
}

/// Whether the pod's app containers are listed and all run: none listed is not running,
/// whatever `all` says of an empty list.
fn apps_all_running(containers: &[ContainerSummary]) -> bool {
    let mut apps = containers
        .iter()
        .filter(|c| summary_role(c) != Role::Init)
        .peekable();
    apps.peek().is_some() && apps.all(summary_running)
}

/// The role and name (`app/dev`) of each container present.
fn present_containers(current: &[ContainerSummary]) -> BTreeSet<String> {
    current
        .iter()
        .filter_map(|c| {
            label(c, CONTAINER_LABEL).map(|n| format!("{}/{n}", label(c, ROLE_LABEL).unwrap_or("")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(role: Role, state: bollard::models::ContainerSummaryStateEnum) -> ContainerSummary {
        ContainerSummary {
            labels: Some(HashMap::from([(
                ROLE_LABEL.to_owned(),
                role.label().to_owned(),
            )])),
            state: Some(state),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_with_no_app_container_listed_is_not_running() {
        use bollard::models::ContainerSummaryStateEnum::{CREATED, RUNNING};
        assert!(!apps_all_running(&[]));
        // The init container alone: the app containers are not created yet.
        assert!(!apps_all_running(&[summary(Role::Init, CREATED)]));
        assert!(!apps_all_running(&[
            summary(Role::Init, CREATED),
            summary(Role::App, CREATED)
        ]));
        assert!(apps_all_running(&[
            summary(Role::Init, CREATED),
            summary(Role::App, RUNNING)
        ]));
    }
}
