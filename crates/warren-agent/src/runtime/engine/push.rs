//! Builds for a runtime that has no engine of its own (Kubernetes): an engine connected with
//! [`EngineRuntime::connect_builder`] builds a workspace's images as it builds them for its
//! own workspaces (`autobuild`: the contexts from the server, Features, reuse by key, the
//! build log) and pushes each to a registry the cluster pulls from.
//!
//! The builder keeps a record per workspace as the runtime does (the Deployment, for the
//! workspace's build scope, and the pull secrets its base images and Features are fetched
//! with), and its images under the workspace's scoped names (`scope`), so a second start
//! finds them built and only pushes again.
//!
//! A pushed name is the scoped one moved to the registry,
//! `<registry>/warren-ws/<requested name>/<workspace>.<id>.<key>:sha-<image id>`: the last
//! path component ends in the workspace's unguessable key (another tenant cannot name it in
//! a devfile by guessing), and the tag is the image's id, so a rebuild is a new reference —
//! a node that has the old one cached never runs it in its place.

use super::autobuild::{failure, requested_builds, BUILD_FAILED_REASON};
use super::scope::{is_domain, is_path_component, MAX_NAME_LEN, SCOPE_ROOT};
use super::*;
use bollard::auth::DockerCredentials;
use std::io::Write;

/// What `building_for` holds while a build for a registry runs (its log is followed).
const PUSHING: &str = "push";

/// Where built images go.
#[derive(Clone)]
pub struct PushTarget {
    /// `host[:port][/path]`, checked by [`check_registry`].
    pub registry: String,
    /// Credentials for pushing there; `None` pushes anonymously.
    pub credentials: Option<DockerCredentials>,
}

impl std::fmt::Debug for PushTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PushTarget")
            .field("registry", &self.registry)
            .field("credentials", &self.credentials.is_some())
            .finish()
    }
}

/// Checks a registry location for pushes: `host[:port]` and an optional path of lowercase
/// repository components, with no scheme, tag or digest.
pub fn check_registry(registry: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("build registry {registry:?}: {why}"));
    if registry.contains("://") {
        return bad("give host[:port][/path], without a scheme");
    }
    let mut parts = registry.split('/');
    let host = parts.next().unwrap_or_default();
    if !is_domain(host) {
        return bad("the host is not a lowercase host name or IPv4 address with an optional port");
    }
    if host
        .split_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().map_or(true, |p| p == 0))
    {
        return bad("the port is not a number from 1 to 65535");
    }
    // Without a `.`, `:` or `localhost`, engines read the first part as a Docker Hub user.
    if !host.contains(['.', ':']) && host != "localhost" {
        return bad("the host must contain a '.' or a port, or be localhost");
    }
    if !parts.all(is_path_component) {
        return bad("a path component is not a lowercase repository name");
    }
    Ok(())
}

/// The pushed name of the scoped image `local` (`localhost/warren-ws/…:tag`) with image id
/// `id`, in `registry`.
pub fn pushed_name(registry: &str, local: &str, id: &str) -> Result<(String, String), String> {
    let name = match local.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => n,
        _ => local,
    };
    let rest = name
        .strip_prefix(SCOPE_ROOT)
        .ok_or_else(|| format!("{local} is not a workspace's build"))?;
    let repository = format!("{registry}/warren-ws{rest}");
    if repository.len() > MAX_NAME_LEN {
        return Err(format!(
            "its name in the build registry would have {} characters, more than the \
             {MAX_NAME_LEN} a registry accepts; use a shorter build registry path or image name",
            repository.len()
        ));
    }
    let id = id.trim_start_matches("sha256:");
    Ok((repository, format!("sha-{id}")))
}

impl EngineRuntime {
    /// Builds the images the pod template of `deployment` asks for at start that this
    /// workspace has not built yet (as a workspace of this engine would), then pushes each
    /// to `target`; the requested names → their pushed references. `pull_secrets` name
    /// files of the pull-secrets directory the base images and Features are fetched with.
    pub async fn build_and_push(
        &self,
        workspace: &WorkspaceKey,
        deployment: &serde_json::Value,
        pull_secrets: Vec<String>,
        target: &PushTarget,
    ) -> Result<BTreeMap<String, String>, PodFailure> {
        let as_failure = |message: String| PodFailure {
            reason: BUILD_FAILED_REASON.into(),
            message,
        };
        let tasks = requested_builds(deployment).map_err(as_failure)?;
        let name = &workspace.name;
        if !is_dns_label(name) {
            return Err(as_failure(format!(
                "workspace name {name:?} is not a DNS label"
            )));
        }
        let record = Record {
            agent_id: self.inner.config.agent_id,
            name: name.clone(),
            namespace: workspace.namespace.clone(),
            replicas: 0,
            pod_hash: String::new(),
            deployment: deployment.clone(),
            volumes: vec![],
            starting: false,
            failure: None,
            deleting: false,
            secrets: DataSets::default(),
            config_maps: DataSets::default(),
            egress: None,
            pull_secrets,
            pending_seeds: Vec::new(),
            saving: false,
            stored_bytes: None,
            save_failed: false,
        };
        self.write_record(&record)
            .map_err(|e| as_failure(warren_types::error_chain(&e)))?;
        let scope = self.build_scope(name, deployment);
        let mut missing = vec![];
        for task in &tasks {
            let own = self
                .own_build(&scope, &task.image)
                .await
                .map_err(|e| failure(task, warren_types::error_chain(&e)))?;
            if own.is_none() {
                missing.push(task.clone());
            }
        }
        self.mark_building(name, PUSHING, true);
        let result = self
            .build_missing_then_push(workspace, &scope, &tasks, &missing, target)
            .await;
        self.mark_building(name, PUSHING, false);
        result
    }

    async fn build_missing_then_push(
        &self,
        workspace: &WorkspaceKey,
        scope: &scope::BuildScope,
        tasks: &[warren_types::relay::BuildImageTask],
        missing: &[warren_types::relay::BuildImageTask],
        target: &PushTarget,
    ) -> Result<BTreeMap<String, String>, PodFailure> {
        if !missing.is_empty() {
            self.build_at_start(workspace, missing).await?;
        }
        let path = self.workspace_dir(&workspace.name).join("build.log");
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| PodFailure {
                reason: BUILD_FAILED_REASON.into(),
                message: format!("opening the build log {}: {e}", path.display()),
            })?;
        let mut pushed = BTreeMap::new();
        for task in tasks {
            let local = self
                .own_build(scope, &task.image)
                .await
                .map_err(|e| failure(task, warren_types::error_chain(&e)))?
                .ok_or_else(|| failure(task, "the image was built but is gone"))?;
            let reference = self.push(task, &local, target, &mut log).await?;
            pushed.insert(task.image.clone(), reference);
        }
        Ok(pushed)
    }

    /// Pushes the scoped image `local` to `target` under its pushed name; the reference.
    async fn push(
        &self,
        task: &warren_types::relay::BuildImageTask,
        local: &str,
        target: &PushTarget,
        log: &mut std::fs::File,
    ) -> Result<String, PodFailure> {
        let docker = &self.inner.docker;
        let id = docker
            .inspect_image(local)
            .await
            .map_err(|e| failure(task, error_message(&e)))?
            .id
            .unwrap_or_default();
        let (repository, tag) =
            pushed_name(&target.registry, local, &id).map_err(|e| failure(task, e))?;
        let reference = format!("{repository}:{tag}");
        let _ = writeln!(log, "warren: pushing {} as {reference}", task.image);
        docker
            .tag_image(
                local,
                Some(bollard::query_parameters::TagImageOptions {
                    repo: Some(repository.clone()),
                    tag: Some(tag.clone()),
                }),
            )
            .await
            .map_err(|e| failure(task, format!("tagging {reference}: {}", error_message(&e))))?;
        let options = bollard::query_parameters::PushImageOptions {
            tag: Some(tag.clone()),
            ..Default::default()
        };
        let mut stream = docker.push_image(&repository, Some(options), target.credentials.clone());
        let mut outcome = Ok(());
        while let Some(item) = stream.next().await {
            match item {
                Ok(info) => {
                    if let Some(e) = info.error_detail.and_then(|d| d.message) {
                        outcome = Err(e);
                        break;
                    }
                    if let Some(status) = info.status {
                        let _ = writeln!(log, "{status}");
                    }
                }
                Err(e) => {
                    outcome = Err(error_message(&e));
                    break;
                }
            }
        }
        // The registry's name only served the push; the scoped name keeps the image.
        let _ = docker
            .remove_image(
                &reference,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await;
        outcome.map_err(|e| {
            let _ = writeln!(log, "warren: pushing {reference} failed: {e}");
            failure(
                task,
                format!("pushing it to the build registry {}: {e}", target.registry),
            )
        })?;
        tracing::info!(image = %task.image, pushed = %reference, "image pushed to the build registry");
        Ok(reference)
    }

    /// The last `tail` lines of the builds for `workspace` and, following, what they write
    /// next while they run.
    pub fn builds_log(
        &self,
        workspace: &WorkspaceKey,
        tail: u32,
        follow: bool,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        self.build_log_stream(workspace, tail, follow)
    }

    /// Removes what the builder keeps for `workspace`: its images (their scoped names) and
    /// its record. What was pushed stays in the registry (its garbage collection is the
    /// registry's).
    pub async fn forget_builds(&self, workspace: &WorkspaceKey) -> Result<(), RuntimeError> {
        let name = &workspace.name;
        if !is_dns_label(name) {
            return Ok(());
        }
        if let Some(record) = self.read_record(name) {
            self.remove_builds(name, &record.deployment).await;
        }
        match std::fs::remove_dir_all(self.workspace_dir(name)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(runtime_err(
                format!("removing the build state of {name}"),
                e,
            )),
        }
    }

    /// The pull-secrets directory: where [`EngineRuntime::build_and_push`]'s `pull_secrets`
    /// are looked up.
    pub fn pull_secrets_dir(&self) -> PathBuf {
        self.inner.config.pull_secrets_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_registries_are_checked() {
        for ok in [
            "registry.example.com",
            "127.0.0.1:5000",
            "localhost:5000/warren",
            "registry.example.com/team/builds",
            "localhost",
        ] {
            assert!(check_registry(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "https://registry.example.com",
            "builds",
            "registry.example.com:0",
            "registry.example.com:x",
            "registry.example.com/Team",
            "registry.example.com//x",
            "registry.example.com/x:tag",
            "-bad.example.com",
        ] {
            assert!(check_registry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pushed_names_keep_the_scope_and_name_the_image_id() {
        let local = "localhost/warren-ws/docker.io/library/app/ws1.7.0123456789abcdef:dev";
        let (repository, tag) =
            pushed_name("127.0.0.1:5000/builds", local, "sha256:abc123").unwrap();
        assert_eq!(
            repository,
            "127.0.0.1:5000/builds/warren-ws/docker.io/library/app/ws1.7.0123456789abcdef"
        );
        assert_eq!(tag, "sha-abc123");
        assert!(pushed_name("r.example.com", "docker.io/library/app:dev", "x").is_err());
        let long = format!("localhost/warren-ws/{}/ws.1.k:dev", "a".repeat(240));
        assert!(pushed_name("r.example.com", &long, "x")
            .unwrap_err()
            .contains("255"));
    }
}
