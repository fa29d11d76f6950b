//! Single-container operations of the engine runtime: stop, remove, create (tolerating one
//! left by an interrupted apply), and images (pull, and which running ones are outdated).

use super::*;

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
        match self
            .inner
            .docker
            .remove_container(name, Some(options))
            .await
        {
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            other => other,
        }
    }

    /// Removes containers joiners first, the namespace owner (first app container) last.
    pub(super) async fn remove_all(
        &self,
        mut containers: Vec<ContainerSummary>,
    ) -> Result<(), RuntimeError> {
        containers.sort_by_key(|c| std::cmp::Reverse((summary_role(c), summary_order(c))));
        for c in containers {
            let id = c.id.unwrap_or_default();
            self.remove(&id)
                .await
                .map_err(|e| runtime_err(format!("removing container {id}"), e))?;
        }
        Ok(())
    }

    /// Creates one container; a missing image is pulled once. `Ok(Err(failure))` is a pod
    /// failure (image missing, configuration refused), `Err` an unreachable engine.
    pub(super) async fn create(
        &self,
        c: &ContainerPlan,
        pull_secrets: &[String],
    ) -> Result<Result<(), PodFailure>, RuntimeError> {
        let docker = &self.inner.docker;
        let image = c.body.image.clone().unwrap_or_default();
        let options = || CreateContainerOptions {
            name: Some(c.engine_name.clone()),
            ..Default::default()
        };
        let mut pulled = false;
        loop {
            match docker
                .create_container(Some(options()), c.body.clone())
                .await
            {
                Ok(_) => return Ok(Ok(())),
                Err(e) if status_of(&e) == Some(409) => {
                    // Created by an earlier, interrupted apply: the name carries the pod hash
                    // in its labels, checked by the caller.
                    return Ok(Ok(()));
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
                    return Ok(Err(PodFailure {
                        reason: "CreateContainerError".into(),
                        message: format!("container {}: {}", c.name, error_message(&e)),
                    }))
                }
                Err(e) => {
                    return Err(runtime_err(
                        format!("creating container {}", c.engine_name),
                        e,
                    ))
                }
            }
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
