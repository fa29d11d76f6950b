//! A workspace's networks and volumes: created with its labels, handed to the pod's user,
//! and removed with the workspace (only its own; see `select`), as are the images it built
//! (`scope`).

use super::helpers::Helper;
use super::*;

impl EngineRuntime {
    pub(super) async fn ensure_network(
        &self,
        plan: &PodPlan,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        let workspace = labels
            .get(WORKSPACE_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        if let Some(network) = self.network(&plan.network).await? {
            self.set_subnet(&workspace, firewall::ipv4_subnet(&network.subnets));
            return Ok(());
        }
        let docker = &self.inner.docker;
        // Podman's bridges reach each other unless isolated (Docker's never do); the agent's
        // firewall isolates them too, where it can (`firewall`).
        let options = self
            .inner
            .is_podman
            .then(|| HashMap::from([("isolate".to_owned(), "true".to_owned())]));
        let request = NetworkCreateRequest {
            name: plan.network.clone(),
            driver: Some("bridge".into()),
            labels: Some(labels.clone().into_iter().collect()),
            options,
            ..Default::default()
        };
        match docker.create_network(request).await {
            Err(e) if status_of(&e) == Some(409) => {}
            Err(e) => return Err(runtime_err(format!("creating network {}", plan.network), e)),
            Ok(_) => {}
        }
        // The subnet the engine chose, for the firewall's rules.
        let subnet = self
            .network(&plan.network)
            .await?
            .and_then(|n| firewall::ipv4_subnet(&n.subnets));
        self.set_subnet(&workspace, subnet);
        Ok(())
    }

    /// Creates the pod's volumes that do not exist yet; returns their names.
    ///
    /// A volume of `plan.shared_volumes` is created with its own labels from `shared` (it
    /// belongs to no pod) and must carry them.
    pub(super) async fn ensure_volumes(
        &self,
        plan: &PodPlan,
        labels: &BTreeMap<String, String>,
        shared: &BTreeMap<String, BTreeMap<String, String>>,
    ) -> Result<Vec<String>, RuntimeError> {
        let docker = &self.inner.docker;
        let mut created = Vec::new();
        for name in plan.volumes.keys() {
            let labels = match shared.get(name) {
                Some(own) if plan.shared_volumes.contains(name) => own,
                _ => labels,
            };
            let workspace = labels
                .get(WORKSPACE_NAME_LABEL)
                .cloned()
                .unwrap_or_default();
            let selector = self.selector().workspace(&workspace);
            match docker.inspect_volume(name).await {
                // Volume names are `warren-<workspace>-<volume>`, which two workspaces can
                // share ("a" with "b-data", "a-b" with "data"): never use another's.
                Ok(v) if selector.matches_map(&v.labels) => continue,
                Ok(v) => return Err(foreign_volume(&workspace, name, &v.labels)),
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => return Err(runtime_err(format!("inspecting volume {name}"), e)),
            }
            // A volume that starts from a prebuild is a clone of its snapshot where there is
            // one (`snapshot`); otherwise it is made empty and copied into (`seed`).
            let clone_of = match plan.seeds.get(name) {
                Some(seed) => self.clone_source(seed, labels).await,
                None => None,
            };
            let made = match &clone_of {
                Some(image) => self.create_cloned_volume(name, labels, image).await,
                None => {
                    let request = VolumeCreateRequest {
                        name: Some(name.clone()),
                        labels: Some(labels.clone().into_iter().collect()),
                        ..Default::default()
                    };
                    docker.create_volume(request).await.map(|_| ())
                }
            };
            let fresh = match made {
                Err(e) if status_of(&e) == Some(409) => false,
                Err(e) => return Err(runtime_err(format!("creating volume {name}"), e)),
                Ok(_) => true,
            };
            // Created meanwhile by someone else (a 409, or Docker answering a create of an
            // existing name with that volume): check whose it is, as above.
            match docker.inspect_volume(name).await {
                Ok(v) if selector.matches_map(&v.labels) => {}
                Ok(v) => return Err(foreign_volume(&workspace, name, &v.labels)),
                Err(e) => return Err(runtime_err(format!("inspecting volume {name}"), e)),
            }
            if fresh {
                created.push(name.clone());
            }
        }
        Ok(created)
    }

    /// Docker creates a new named volume owned by root (or by the owner of the image's
    /// directory), which the pod's non-root user cannot write; Podman hands an empty volume to
    /// the container's user by itself. On Docker, a short-lived container of the pod's own
    /// image (root, only `CAP_CHOWN`, no network) gives new volumes to the pod's user. A
    /// failure is logged, not fatal: images that prepare their directories still work.
    pub(super) async fn give_volumes_to_pod_user(
        &self,
        plan: &PodPlan,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
    ) {
        // A pod from Git finds its volumes as Kubernetes gives them (root's); its fsGroup
        // is what makes them its user's.
        if self.inner.is_podman || volumes.is_empty() || plan.kubernetes {
            return;
        }
        let mut command = vec!["chown".to_owned(), format!("{}:{}", plan.uid, plan.gid)];
        let mut mounts = Vec::new();
        for (i, v) in volumes.iter().enumerate() {
            command.push(format!("/v/{i}"));
            mounts.push((v.clone(), format!("/v/{i}"), false));
        }
        let helper = Helper {
            suffix: "volume-owner",
            user: "0:0".into(),
            cap_add: vec!["CHOWN".into()],
            command,
            mounts,
            labels,
        };
        match self
            .run_helper(plan, &helper, super::helpers::HELPER_TIMEOUT)
            .await
        {
            Ok(0) => {}
            Ok(code) => {
                tracing::warn!(volumes = ?volumes, code, "could not give new volumes to the pod's user")
            }
            Err(e) => {
                tracing::warn!(volumes = ?volumes, error = %e, "could not give new volumes to the pod's user")
            }
        }
    }

    /// Removes what is left of workspace `name`: containers, then networks and volumes.
    ///
    /// Invariant: only objects whose labels name this installation *and this workspace*
    /// are removed, whatever the engine's filters returned ([`Selector::matches`] on every
    /// candidate, the record's volume names included). An object still in use is left for
    /// a later call and named in the `Blocked` error.
    /// `moved` is set when something was removed.
    pub(super) async fn delete_locked(
        &self,
        name: &str,
        moved: &mut bool,
    ) -> Result<TerminationProgress, RuntimeError> {
        let selector = self.selector().workspace(name);
        let containers = self.containers(&selector).await?;
        if !containers.is_empty() {
            *moved = true;
            if let Err(e) = self.remove_all(containers).await {
                // A container that cannot go (yet) holds everything else back.
                return Err(RuntimeError::Blocked {
                    workspace: name.to_owned(),
                    reason: warren_types::error_chain(&e),
                });
            }
        }
        let mut blocked = Vec::new();
        for (network, _) in self.labelled_networks(&selector).await? {
            match self.inner.docker.remove_network(&network).await {
                Ok(()) => *moved = true,
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) if status_of(&e).is_some() => {
                    blocked.push(error_message(&e));
                }
                Err(e) => return Err(runtime_err(format!("removing network {network}"), e)),
            }
        }
        if blocked.is_empty() {
            // No network of the workspace is left: its rules go at the next update.
            self.set_subnet(name, None);
        }
        let mut volumes: BTreeSet<String> = self
            .labelled_volumes(&selector)
            .await?
            .into_iter()
            .map(|(v, _)| v)
            .collect();
        for volume in self
            .read_record(name)
            .map(|r| r.volumes)
            .unwrap_or_default()
        {
            if volumes.contains(&volume) {
                continue;
            }
            // Recorded but not listed: remove it only if it is this workspace's after all.
            match self.inner.docker.inspect_volume(&volume).await {
                Ok(v) if selector.matches_map(&v.labels) => {
                    volumes.insert(volume);
                }
                Ok(_) => {
                    tracing::warn!(
                        workspace = name,
                        volume,
                        "a recorded volume is not labelled as this workspace's; left alone"
                    );
                }
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => return Err(runtime_err(format!("inspecting volume {volume}"), e)),
            }
        }
        for volume in volumes {
            let options = RemoveVolumeOptions { force: true };
            match self
                .inner
                .docker
                .remove_volume(&volume, Some(options))
                .await
            {
                Ok(()) => *moved = true,
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) if status_of(&e).is_some() => {
                    blocked.push(error_message(&e));
                }
                Err(e) => return Err(runtime_err(format!("removing volume {volume}"), e)),
            }
        }
        if !blocked.is_empty() {
            return Err(RuntimeError::Blocked {
                workspace: name.to_owned(),
                reason: blocked.join("; "),
            });
        }
        if let Some(record) = self.read_record(name) {
            self.remove_builds(name, &record.deployment).await;
        }
        lock(&self.inner.egress).remove(name);
        match std::fs::remove_dir_all(self.workspace_dir(name)) {
            Ok(()) => *moved = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(runtime_err(format!("removing the state of {name}"), e)),
        }
        // Every container, network and volume listed is gone (each removal succeeded or
        // found it gone; anything else returned above), and none can have been added: the
        // caller holds the workspace's lock, and only this runtime makes a workspace's
        // objects.
        // Its volumes are gone: a snapshot of it, or one only its volumes still cloned, may
        // go now.
        self.prune_snapshots(name).await;
        Ok(TerminationProgress::Terminated)
    }
}

impl EngineRuntime {
    /// Untags the images the workspace built (its own names only, so an image also tagged
    /// elsewhere stays); best effort, as an image is not the workspace's state.
    pub(super) async fn remove_builds(&self, name: &str, deployment: &serde_json::Value) {
        let scope = self.build_scope(name, deployment);
        let options = bollard::query_parameters::ListImagesOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![format!("{}={}", scope::BUILD_SCOPE_LABEL, scope.label())],
            )])),
            ..Default::default()
        };
        let docker = &self.inner.docker;
        let images = match retry_transient(|| docker.list_images(Some(options.clone()))).await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(workspace = name, error = %error_message(&e), "listing the images the workspace built failed; they stay");
                return;
            }
        };
        for tag in images
            .iter()
            .flat_map(|i| &i.repo_tags)
            .filter(|t| scope.owns(t))
        {
            let removed = self
                .inner
                .docker
                .remove_image(
                    tag,
                    None::<bollard::query_parameters::RemoveImageOptions>,
                    None,
                )
                .await;
            match removed {
                Ok(_) => {
                    tracing::info!(workspace = name, image = %tag, "removed an image the workspace built")
                }
                Err(e) if status_of(&e) == Some(404) => {}
                Err(e) => {
                    tracing::warn!(workspace = name, image = %tag, error = %error_message(&e), "removing an image the workspace built failed")
                }
            }
        }
    }
}

/// The apply error for volume `name`, which exists with labels that are not `workspace`'s.
pub(super) fn foreign_volume<S: std::hash::BuildHasher>(
    workspace: &str,
    name: &str,
    labels: &HashMap<String, String, S>,
) -> RuntimeError {
    let holder = match labels.get(WORKSPACE_NAME_LABEL) {
        Some(w) if w != workspace => format!("workspace {w}"),
        Some(_) => "another agent or Warren installation".to_owned(),
        None => "something other than Warren".to_owned(),
    };
    RuntimeError::Apply {
        workspace: workspace.to_owned(),
        message: format!(
            "volume {name} already exists and belongs to {holder}; rename the devfile volume"
        ),
    }
}
