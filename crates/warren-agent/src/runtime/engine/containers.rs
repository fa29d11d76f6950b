//! Single-container operations of the engine runtime: stop, remove, create (tolerating one
//! left by an interrupted apply, refusing an image another workspace built), and images
//! (pull, which running ones are outdated, and which names are the workspace's own builds).

use super::scope::{BuildScope, BUILD_SCOPE_LABEL};
use super::*;

/// Removals tried again while the engine's own clean-up holds a container (see `remove`).
const BUSY_RETRIES: u64 = 5;

impl EngineRuntime {
    pub(super) async fn stop(&self, name: &str) -> Result<(), bollard::errors::Error> {
        tracing::debug!(container = name, "stopping");
        let options = StopContainerOptions {
            t: Some(self.inner.config.stop_timeout_secs as i32),
            signal: None,
        };
        match self.inner.docker.stop_container(name, Some(options)).await {
            Err(e) if status_of(&e) == Some(304) || status_of(&e) == Some(404) => Ok(()),
            other => other,
        }
    }

    pub(super) async fn remove(&self, name: &str) -> Result<(), bollard::errors::Error> {
        let options = RemoveContainerOptions {
            force: true,
            v: false,
            link: false,
        };
        let mut attempt = 0u64;
        loop {
            match self
                .inner
                .docker
                .remove_container(name, Some(options.clone()))
                .await
            {
                Ok(())
                | Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {
                    lock(&self.inner.index).remove(name);
                    self.release_host_ports(name);
                    return Ok(());
                }
                // Podman 4.3 removes a container that ran in a user namespace while its own
                // clean-up of the container's /dev/shm may still hold it ("unlinkat …/shm:
                // device or resource busy"); the clean-up ends within moments, and the
                // removal then goes through.
                Err(e)
                    if attempt < BUSY_RETRIES
                        && status_of(&e) == Some(500)
                        && error_message(&e).contains("device or resource busy") =>
                {
                    attempt += 1;
                    tracing::debug!(
                        container = name,
                        attempt,
                        "removal raced the engine's clean-up; removing again"
                    );
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                other => return other,
            }
        }
    }

    /// Waits until container `name` no longer runs, or is gone.
    ///
    /// On Podman through its own API, looking every 50 ms: its Docker-compatible wait saw a
    /// container that exited 0.3 s after its start only 1 to 2 s later, which every init
    /// container and the watch after a restart (`start`) waited out.
    pub(super) async fn wait_stopped(&self, name: &str) {
        if self.inner.is_podman {
            if let Ok((client, base)) = self.libpod() {
                let url = format!("{base}{}/containers/{name}/wait", networks::LIBPOD);
                let conditions = [
                    ("condition", "stopped"),
                    ("condition", "exited"),
                    ("interval", "50ms"),
                ];
                // An answer of any status ends the wait (404: the container is gone); only
                // a request that did not reach the service falls back to the other wait.
                if let Ok(response) = client.post(url).query(&conditions).send().await {
                    let _ = response.bytes().await;
                    return;
                }
            }
        }
        let options = WaitContainerOptions {
            condition: "not-running".into(),
        };
        // A non-zero exit arrives as an error item; callers read the exit code themselves.
        let _ = self
            .inner
            .docker
            .wait_container(name, Some(options))
            .next()
            .await;
    }

    /// Stops the running ones of `containers` joiners first, the namespace owner (first app
    /// container) last: the reverse of their start order.
    pub(super) async fn stop_running(
        &self,
        containers: &[ContainerSummary],
    ) -> Result<(), RuntimeError> {
        let mut running: Vec<&ContainerSummary> =
            containers.iter().filter(|c| summary_running(c)).collect();
        running.sort_by_key(|c| std::cmp::Reverse((summary_role(c), summary_order(c))));
        for c in running {
            let id = c.id.clone().unwrap_or_default();
            self.stop(&id)
                .await
                .map_err(|e| runtime_err(format!("stopping container {id}"), e))?;
        }
        Ok(())
    }

    /// Removes containers joiners first, the namespace owner (first app container) last.
    pub(super) async fn remove_all(
        &self,
        mut containers: Vec<ContainerSummary>,
    ) -> Result<(), RuntimeError> {
        containers.sort_by_key(|c| std::cmp::Reverse((summary_role(c), summary_order(c))));
        for c in containers {
            let id = c.id.clone().unwrap_or_default();
            self.remove(&id)
                .await
                .map_err(|e| runtime_err(format!("removing container {id}"), e))?;
            // Removed by id: the index and the host ports know it by name.
            if let Some(name) = index::summary_name(&c) {
                lock(&self.inner.index).remove(name);
                self.release_host_ports(name);
            }
        }
        Ok(())
    }

    /// Creates one container; a missing image is pulled once. `Ok(Err(failure))` is a pod
    /// failure (image missing, configuration refused), `Err` an unreachable engine.
    ///
    /// The image the container was created from is checked, not its name: an engine may
    /// resolve a name loosely (Podman's `myapp:dev` finds any local `…/myapp:dev`), and one
    /// another workspace built (`scope`) must not run here. Such a container goes again; the
    /// name is pulled, as for a missing image, and the check made once more.
    pub(super) async fn create(
        &self,
        c: &ContainerPlan,
        pull_secrets: &[String],
        workspace: &str,
        scope: &BuildScope,
    ) -> Result<Result<(), PodFailure>, RuntimeError> {
        let docker = &self.inner.docker;
        let image = c.body.image.clone().unwrap_or_default();
        let options = || CreateContainerOptions {
            name: Some(c.engine_name.clone()),
            ..Default::default()
        };
        let mut body = c.body.clone();
        self.assign_host_ports(&c.engine_name, &mut body);
        let mut pulled = false;
        loop {
            match docker.create_container(Some(options()), body.clone()).await {
                Ok(_) => self.indexed(workspace, &c.engine_name),
                // Created by an earlier, interrupted apply: the name carries the pod hash in
                // its labels, checked by the caller; its image is checked below as a new one's.
                Err(e) if status_of(&e) == Some(409) => {
                    // It holds the host ports it was made with (learnt at the next full
                    // listing), not those just chosen.
                    self.release_host_ports(&c.engine_name);
                    self.indexed(workspace, &c.engine_name)
                }
                Err(e) if status_of(&e) == Some(404) && c.pull_policy == "Never" => {
                    return Ok(Err(PodFailure {
                        reason: "ErrImageNeverPull".into(),
                        message: format!(
                            "image {image:?} of container {} is not present and its \
                             imagePullPolicy is Never",
                            c.name
                        ),
                    }))
                }
                Err(e) if status_of(&e) == Some(404) && !pulled => {
                    pulled = true;
                    if let Err(message) = self.pull(&image, pull_secrets).await {
                        return Ok(Err(PodFailure {
                            reason: "ErrImagePull".into(),
                            message: format!(
                                "image {image:?} of container {} is not available locally and \
                                 could not be pulled: {message}",
                                c.name
                            ),
                        }));
                    }
                    continue;
                }
                Err(e) if status_of(&e) == Some(404) => {
                    return Ok(Err(PodFailure {
                        reason: "ErrImagePull".into(),
                        message: format!(
                            "image {image:?} of container {} not found: {}",
                            c.name,
                            error_message(&e)
                        ),
                    }))
                }
                Err(e) if status_of(&e).is_some() => {
                    let mut message = format!("container {}: {}", c.name, error_message(&e));
                    if message.contains("subuid") || message.contains("subgid") {
                        message.push_str(
                            " (pods from Git run in a user namespace of their own, which Podman \
                             allocates from the ranges of user `containers` in /etc/subuid and \
                             /etc/subgid: add `containers:2147483647:2147483648` to both)",
                        );
                    }
                    return Ok(Err(PodFailure {
                        reason: "CreateContainerError".into(),
                        message,
                    }));
                }
                Err(e) => {
                    return Err(runtime_err(
                        format!("creating container {}", c.engine_name),
                        e,
                    ))
                }
            }
            let Some(why) = self
                .built_elsewhere(&c.engine_name, workspace, scope)
                .await?
            else {
                return self.check_image_user(c).await;
            };
            tracing::info!(container = %c.engine_name, image = %image, reason = %why, "refusing an image another workspace built");
            self.remove(&c.engine_name)
                .await
                .map_err(|e| runtime_err(format!("removing container {}", c.engine_name), e))?;
            let refused = |more: &str| PodFailure {
                reason: if c.pull_policy == "Never" {
                    "ErrImageNeverPull".into()
                } else {
                    "ErrImagePull".into()
                },
                message: format!(
                    "image {image:?} of container {} names on this engine only an image this \
                     workspace may not run ({why}){more}",
                    c.name
                ),
            };
            if c.pull_policy == "Never" {
                return Ok(Err(refused(", and its imagePullPolicy is Never")));
            }
            if pulled {
                return Ok(Err(refused(", even after pulling it")));
            }
            pulled = true;
            if let Err(message) = self.pull(&image, pull_secrets).await {
                return Ok(Err(refused(&format!(
                    ", and it could not be pulled: {message}"
                ))));
            }
        }
    }

    /// A container running as its image's user (`ContainerPlan::image_user`), created: that
    /// user is read from the image and the container refused, and removed, where the kubelet
    /// would refuse it (`runAsNonRoot` and root, or a user named, not numbered), or where it
    /// would be root on the host (no user namespace). `runAsGroup` without `runAsUser` is
    /// applied to that user here, by creating the container again.
    async fn check_image_user(
        &self,
        c: &ContainerPlan,
    ) -> Result<Result<(), PodFailure>, RuntimeError> {
        let Some(wanted) = c.image_user else {
            return Ok(Ok(()));
        };
        let name = &c.engine_name;
        let user = match self.image_config_of(name).await {
            Ok(Some(config)) => config.user.unwrap_or_default(),
            // Gone meanwhile: unchecked, the container must not stay either.
            Ok(None) => {
                let _ = self.remove(name).await;
                return Ok(Err(PodFailure {
                    reason: "CreateContainerError".into(),
                    message: format!(
                        "container {}: its image went away while it was created",
                        c.name
                    ),
                }));
            }
            Err(e) => {
                // Unchecked, it must not stay: the next apply would find it and start it.
                let _ = self.remove(name).await;
                return Err(e);
            }
        };
        let user_part = user.split(':').next().unwrap_or_default().to_owned();
        // Read as the engine reads it (Go's `Atoi`: a sign is allowed, "-0" is 0).
        let numeric = user_part.parse::<i64>().ok();
        let root = user_part.is_empty() || user_part == "root" || numeric.is_some_and(|n| n <= 0);
        let refuse = |message: String| PodFailure {
            reason: "CreateContainerConfigError".into(),
            message: format!("container {}: {message}", c.name),
        };
        let failure = if wanted.non_root && root {
            Some(refuse(
                "runAsNonRoot is set and its image runs as root; set runAsUser to a non-root \
                 user"
                    .into(),
            ))
        } else if wanted.non_root && numeric.is_none() {
            Some(refuse(format!(
                "runAsNonRoot is set and its image's user {user_part:?} is a name, which \
                 cannot be verified to be non-root; set runAsUser"
            )))
        } else if root && !wanted.root_allowed {
            Some(refuse(
                "its image runs as root, and this engine cannot run it in a user namespace \
                 (Docker without userns-remap): root in the container would be root on the \
                 host; set runAsUser to a non-root user, or enable userns-remap"
                    .into(),
            ))
        } else if numeric.is_none() && !wanted.root_allowed {
            Some(refuse(format!(
                "its image's user {user_part:?} is a name, which may be root, and this engine \
                 cannot run it in a user namespace (Docker without userns-remap); set runAsUser"
            )))
        } else {
            None
        };
        if let Some(failure) = failure {
            self.remove(name)
                .await
                .map_err(|e| runtime_err(format!("removing container {name}"), e))?;
            return Ok(Err(failure));
        }
        if let Some(gid) = wanted.group {
            let current = self
                .inspect(name)
                .await
                .map_err(|e| runtime_err(format!("inspecting container {name}"), e))?
                .config
                .and_then(|c| c.user)
                .unwrap_or_default();
            let target = format!(
                "{}:{gid}",
                if user_part.is_empty() {
                    "0"
                } else {
                    &user_part
                }
            );
            if current != target {
                self.remove(name)
                    .await
                    .map_err(|e| runtime_err(format!("removing container {name}"), e))?;
                let mut body = c.body.clone();
                body.user = Some(target);
                let options = CreateContainerOptions {
                    name: Some(name.clone()),
                    ..Default::default()
                };
                if let Err(e) = self
                    .inner
                    .docker
                    .create_container(Some(options), body)
                    .await
                {
                    return Ok(Err(refuse(error_message(&e))));
                }
            }
        }
        Ok(Ok(()))
    }

    /// Why the container `name` must not run in `workspace`: its image is another
    /// workspace's build (see `scope`).
    async fn built_elsewhere(
        &self,
        name: &str,
        workspace: &str,
        scope: &BuildScope,
    ) -> Result<Option<String>, RuntimeError> {
        // Gone already: the container cannot start, and says so.
        let Some(config) = self.image_config_of(name).await? else {
            return Ok(None);
        };
        let labels = config.labels.unwrap_or_default();
        Ok(scope.foreign(workspace, |k| labels.get(k).map(String::as_str)))
    }

    /// The configuration of the image container `name` was created from (what it runs,
    /// whatever name it was asked by); `None` when that image is gone.
    async fn image_config_of(
        &self,
        name: &str,
    ) -> Result<Option<bollard::models::ImageConfig>, RuntimeError> {
        let id = self
            .inspect(name)
            .await
            .map_err(|e| runtime_err(format!("inspecting container {name}"), e))?
            .image
            .unwrap_or_default();
        match self.inner.docker.inspect_image(&id).await {
            Ok(i) => Ok(Some(i.config.unwrap_or_default())),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(runtime_err(format!("inspecting image {id}"), e)),
        }
    }

    /// Points the plan's containers whose image this workspace built at its build: a build
    /// is tagged inside the workspace's namespace (`scope`), not with the name the devfile
    /// gave it. Other names stay as they are, so a workspace that never built an image gets
    /// the usual pull, or the failure naming it.
    pub(super) async fn use_own_builds(
        &self,
        plan: &mut PodPlan,
        scope: &BuildScope,
    ) -> Result<(), RuntimeError> {
        let mut known: HashMap<String, Option<String>> = HashMap::new();
        for c in &mut plan.containers {
            let Some(image) = c.body.image.clone() else {
                continue;
            };
            if !known.contains_key(&image) {
                let own = self.own_build(scope, &image).await?;
                known.insert(image.clone(), own);
            }
            if let Some(Some(own)) = known.get(&image) {
                c.body.image = Some(own.clone());
            }
        }
        Ok(())
    }

    /// This workspace's build of `image`, when it has one: the scoped name, checked to be
    /// labelled as the workspace's.
    pub(super) async fn own_build(
        &self,
        scope: &BuildScope,
        image: &str,
    ) -> Result<Option<String>, RuntimeError> {
        // No build could have a name without a scoped form (a digest, an image id).
        let Ok(candidate) = scope.image_for(image) else {
            return Ok(None);
        };
        match self.inner.docker.inspect_image(&candidate).await {
            Ok(i) => {
                let labels = i.config.and_then(|c| c.labels).unwrap_or_default();
                Ok(
                    (labels.get(BUILD_SCOPE_LABEL).map(String::as_str) == Some(scope.label()))
                        .then_some(candidate),
                )
            }
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            // Unsure: running the name as it stands could pull a stranger's image of that
            // name instead of this workspace's build.
            Err(e) => Err(runtime_err(format!("inspecting image {candidate}"), e)),
        }
    }

    /// Ids of the stopped containers in `existing` whose planned image reference now
    /// resolves to another image than the one they were created from (or to none).
    pub(super) async fn outdated_images(
        &self,
        plan: &PodPlan,
        existing: &[ContainerSummary],
    ) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for c in existing.iter().filter(|c| !summary_running(c)) {
            let planned = plan.containers.iter().find(|p| {
                label(c, CONTAINER_LABEL) == Some(p.name.as_str())
                    && label(c, ROLE_LABEL) == Some(p.role.label())
            });
            let (Some(planned), Some(id), Some(created_from)) =
                (planned, c.id.as_ref(), c.image_id.as_deref())
            else {
                continue;
            };
            let Some(image) = planned.body.image.as_deref() else {
                continue;
            };
            let now = match self.inner.docker.inspect_image(image).await {
                Ok(i) => i.id,
                // Gone: recreating pulls it or reports the failure by name.
                Err(e) if status_of(&e) == Some(404) => None,
                // Cannot tell: keep the container rather than guess.
                Err(_) => continue,
            };
            // Podman's listing may leave out the `sha256:` its inspection has.
            let bare = |id: &str| id.trim_start_matches("sha256:").to_owned();
            if now.as_deref().map(bare) != Some(bare(created_from)) {
                out.insert(id.clone());
            }
        }
        out
    }

    /// Pulls `image` with the credentials its registry has among `pull_secrets`; the error
    /// carries the registry's refusal and what was wrong with the secrets.
    pub(super) async fn pull(&self, image: &str, pull_secrets: &[String]) -> Result<(), String> {
        let auth = super::registry_auth::lookup(
            &self.inner.config.pull_secrets_dir(),
            pull_secrets,
            image,
        );
        let mut notes = Vec::new();
        if !auth.missing.is_empty() {
            notes.push(format!(
                "image pull secret(s) {} not found in {}",
                auth.missing.join(", "),
                self.inner.config.pull_secrets_dir().display()
            ));
        }
        notes.extend(
            auth.unreadable
                .iter()
                .map(|u| format!("unreadable pull secret {u}")),
        );
        let with_notes = |message: String| {
            if notes.is_empty() {
                message
            } else {
                format!("{message} ({})", notes.join("; "))
            }
        };
        self.pull_with(image, auth.credentials)
            .await
            .map_err(with_notes)
    }

    async fn pull_with(
        &self,
        image: &str,
        credentials: Option<bollard::auth::DockerCredentials>,
    ) -> Result<(), String> {
        // Without a tag, the engine would pull every tag of the repository.
        let last = image.rsplit('/').next().unwrap_or(image);
        let reference = if image.contains('@') || last.contains(':') {
            image.to_owned()
        } else {
            format!("{image}:latest")
        };
        let options = CreateImageOptions {
            from_image: Some(reference),
            ..Default::default()
        };
        let mut stream = self
            .inner
            .docker
            .create_image(Some(options), None, credentials);
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                        return Err(detail);
                    }
                }
                Err(e) => return Err(error_message(&e)),
            }
        }
        match self.inner.docker.inspect_image(image).await {
            Ok(_) => Ok(()),
            Err(e) => Err(error_message(&e)),
        }
    }
}
