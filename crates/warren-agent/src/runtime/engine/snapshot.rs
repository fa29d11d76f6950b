//! Prebuild snapshots on Podman: when a prebuild's pod has stopped, each of its volumes is
//! saved once as a local image, and a new workspace's volume that starts from that prebuild
//! is created with Podman's `image` volume driver from it: a copy-on-write overlay made in
//! constant time whatever the prebuild's size, which Podman keeps the image for as long as
//! any such volume exists.
//!
//! The prebuild reports Stopping until its snapshots are saved, so the server marks it ready
//! only once a workspace can start from it at once. A snapshot that cannot be saved (no `tar`
//! in the image, a file its user cannot read) leaves the prebuild's volume to be copied, as
//! on Docker, which has no such driver (`seed`).
//!
//! The tar is made by a helper of the pod's image as the pod's user, with no capability and
//! no network, and is streamed into the engine's import: nothing of it is kept by the agent.
//! Only the volumes of a workspace marked as a prebuild by the server, not from a GitOps
//! source, are ever saved; a snapshot is used only when its labels name that very prebuild
//! (installation, workspace name and id) and the prebuild's volume is still there.

use bytes::Bytes;
use futures::StreamExt;
use std::path::Path;

use super::helpers::Helper;
use super::plan::{PodPlan, VolumeSeed};
use super::*;
use warren_types::prebuild::PREBUILD_LABEL;

/// On a snapshot image: the prebuild volume it was saved from.
pub(super) const SNAPSHOT_OF_LABEL: &str = "warren.dev/snapshot-of";
/// Where snapshot images are kept (never pushed anywhere).
const SNAPSHOT_REPOSITORY: &str = "localhost/warren-snapshot";
/// How long saving one volume may take (many gigabytes on a slow disk).
const SAVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// Of what the saving helper writes to its standard error, what is kept for the log.
const STDERR_KEPT: usize = 2048;
/// The saving's reason when the import stopped reading (the import says why).
const IMPORT_STOPPED: &str = "the import stopped reading";
/// The mode a cloned volume's root gets: Podman gives an image volume's root to root at
/// every mount (its owner cannot be kept), so it is opened to every user of the pod, with
/// the sticky bit so that none removes another's entries. Everything below keeps the owners
/// and modes the prebuild gave it.
const CLONED_ROOT_MODE: &str = "1777";

/// The image a snapshot of prebuild volume `volume` of workspace id `workspace_id` is kept as.
pub(super) fn snapshot_reference(volume: &str, workspace_id: &str) -> String {
    let tag: String = workspace_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
    format!("{SNAPSHOT_REPOSITORY}/{volume}:id-{tag}")
}

/// A Containerfile `LABEL` instruction for one label (values quoted as JSON strings are).
fn label_instruction(key: &str, value: &str) -> String {
    let quoted = serde_json::Value::String(value.to_owned()).to_string();
    format!("LABEL {key}={quoted}")
}

/// Whether a workspace of `labels` is a prebuild's own (marked by the server, not from a
/// GitOps source, which never is one).
pub(super) fn is_prebuild(labels: &BTreeMap<String, String>) -> bool {
    labels.get(PREBUILD_LABEL).map(String::as_str) == Some("true")
        && !labels.contains_key(super::super::GITOPS_SOURCE_LABEL)
}

/// Each of `volumes` as a seed of the workspace `labels` name (its name and id): how its
/// snapshot is found. `None` without both labels.
fn own_seeds(volumes: &[String], labels: &BTreeMap<String, String>) -> Option<Vec<VolumeSeed>> {
    let name = labels.get(WORKSPACE_NAME_LABEL)?;
    let id = labels.get(WORKSPACE_ID_LABEL)?;
    let seed = |volume: &String| VolumeSeed {
        source: volume.clone(),
        workspace: name.clone(),
        workspace_id: id.clone(),
    };
    Some(volumes.iter().map(seed).collect())
}

impl EngineRuntime {
    /// What a stopped prebuild keeps on this machine: its volumes (their blocks on disk,
    /// walked where the agent can read the engine's volume directories) and the snapshots
    /// saved of them. `None` when any part cannot be measured: a partial figure would
    /// understate what the prebuild costs.
    pub(super) async fn prebuild_space(
        &self,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
    ) -> Option<u64> {
        let mut total = 0u64;
        for seed in own_seeds(volumes, labels)? {
            let volume = &seed.source;
            let mountpoint = self
                .inner
                .docker
                .inspect_volume(volume)
                .await
                .ok()?
                .mountpoint;
            let used = tokio::task::spawn_blocking(move || disk_usage(Path::new(&mountpoint)))
                .await
                .ok()?;
            let Some(used) = used else {
                tracing::debug!(volume = %volume, "the volume's directory cannot be read: its space is not known");
                return None;
            };
            total = total.saturating_add(used);
            if let Some(image) = self.snapshot_of(&seed).await {
                let size = self.inner.docker.inspect_image(&image).await.ok()?.size?;
                total = total.saturating_add(u64::try_from(size).unwrap_or(0));
            }
        }
        Some(total)
    }

    /// Whether prebuilds are kept as snapshots here: on Podman, for workspaces (not for
    /// GitOps units, which never are prebuilds).
    pub(super) fn keeps_snapshots(&self) -> bool {
        self.inner.is_podman && self.inner.kubernetes_pods.is_none()
    }

    /// Of `volumes` of workspace `labels` (stopped), those to be saved: none unless it is a
    /// prebuild not from a GitOps source on an engine that keeps snapshots.
    pub(super) async fn unsaved_snapshots(
        &self,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
    ) -> Vec<String> {
        if !is_prebuild(labels) || !self.keeps_snapshots() {
            return vec![];
        }
        let mut unsaved = Vec::new();
        for seed in own_seeds(volumes, labels).unwrap_or_default() {
            if self.snapshot_of(&seed).await.is_none() {
                unsaved.push(seed.source);
            }
        }
        unsaved
    }

    /// The image id of the snapshot of the prebuild volume `seed` names, when this
    /// installation saved one for that very prebuild.
    pub(super) async fn snapshot_of(&self, seed: &VolumeSeed) -> Option<String> {
        let reference = snapshot_reference(&seed.source, &seed.workspace_id);
        let image = self.inner.docker.inspect_image(&reference).await.ok()?;
        let labels = image.config.and_then(|c| c.labels).unwrap_or_default();
        let selector = self.selector().workspace(&seed.workspace);
        let ours = selector.matches_map(&labels)
            && labels.get(WORKSPACE_ID_LABEL) == Some(&seed.workspace_id)
            && labels.get(PREBUILD_LABEL).map(String::as_str) == Some("true")
            && labels.get(SNAPSHOT_OF_LABEL) == Some(&seed.source)
            && !labels.contains_key(super::super::GITOPS_SOURCE_LABEL);
        if !ours {
            tracing::warn!(image = %reference, "an image named as a prebuild's snapshot is not this installation's: not used");
            return None;
        }
        image.id
    }

    /// Saves each of `volumes` (of a stopped prebuild pod) as its snapshot; whether all were
    /// saved. Stops early when `cancel` fires (a new apply or the workspace's removal).
    pub(super) async fn save_snapshots(
        &self,
        plan: &PodPlan,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
        cancel: &CancellationToken,
    ) -> bool {
        let workspace = labels
            .get(WORKSPACE_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        let id = labels.get(WORKSPACE_ID_LABEL).cloned().unwrap_or_default();
        let mut all = true;
        for volume in volumes {
            let started = tokio::time::Instant::now();
            let outcome = tokio::select! {
                // Cancel-safe: the import reads a body that ends with the saving helper;
                // dropped, the engine keeps no image of a tar cut short. The helper goes
                // below.
                _ = cancel.cancelled() => Err("cancelled".to_owned()),
                // Cancel-safe: see above.
                r = self.save_snapshot(plan, volume, &id, labels) => r,
            };
            let _ = self.remove(&format!("{}.snapshot", plan.network)).await;
            match outcome {
                Ok(()) => {
                    tracing::info!(workspace = %workspace, volume = %volume, seconds = started.elapsed().as_secs_f64(), "prebuild volume saved as a snapshot")
                }
                Err(reason) => {
                    all = false;
                    tracing::warn!(workspace = %workspace, volume = %volume, reason = %reason, "prebuild volume not saved as a snapshot: workspaces starting from it copy it instead");
                }
            }
            if cancel.is_cancelled() {
                return false;
            }
        }
        all
    }

    async fn save_snapshot(
        &self,
        plan: &PodPlan,
        volume: &str,
        workspace_id: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let docker = &self.inner.docker;
        let source = docker
            .inspect_volume(volume)
            .await
            .map_err(|e| format!("inspecting volume {volume}: {}", error_message(&e)))?;
        let helper = Helper {
            suffix: "snapshot",
            user: format!("{}:{}", plan.uid, plan.gid),
            cap_add: vec![],
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                "cd /from && exec tar -cf - .".into(),
            ],
            mounts: vec![(volume.to_owned(), "/from".into(), true)],
            labels,
        };
        let name = self.create_helper(plan, &helper).await?;
        let attach = bollard::query_parameters::AttachContainerOptions {
            stream: true,
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let attached = docker
            .attach_container(&name, Some(attach))
            .await
            .map_err(|e| format!("attaching to {name}: {}", error_message(&e)))?;
        docker
            .start_container(&name, None)
            .await
            .map_err(|e| format!("starting {name}: {}", error_message(&e)))?;

        // The helper's standard output is the import's body; a tar that did not end well
        // (exit code, error) ends the body with an error, so no image is made of it.
        let (body_tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
        let mut output = attached.output;
        let forward = async move {
            let mut stderr = String::new();
            while let Some(item) = output.next().await {
                match item {
                    Ok(bollard::container::LogOutput::StdOut { message }) => {
                        if body_tx.send(Ok(message)).await.is_err() {
                            return Err(IMPORT_STOPPED.to_owned());
                        }
                    }
                    Ok(bollard::container::LogOutput::StdErr { message }) => {
                        if stderr.len() < STDERR_KEPT {
                            stderr.push_str(&String::from_utf8_lossy(&message));
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        let reason = format!("reading the tar: {}", error_message(&e));
                        let _ = body_tx
                            .send(Err(std::io::Error::other(reason.clone())))
                            .await;
                        return Err(reason);
                    }
                }
            }
            let code = self.helper_exit(&name, SAVE_TIMEOUT).await;
            if code != Ok(0) {
                let reason = match code {
                    Ok(c) => format!("tar exited with code {c}: {}", stderr.trim()),
                    Err(e) => e,
                };
                let _ = body_tx
                    .send(Err(std::io::Error::other(reason.clone())))
                    .await;
                return Err(reason);
            }
            Ok(())
        };

        // Podman's own import: its Docker-compatible one takes one instruction in all
        // (Docker parses the newline-joined `changes` as lines) and ignores the tag.
        let mut query: Vec<(&str, String)> = source
            .labels
            .iter()
            .map(|(k, v)| ("changes", label_instruction(k, v)))
            .collect();
        query.push(("changes", label_instruction(SNAPSHOT_OF_LABEL, volume)));
        let reference = snapshot_reference(volume, workspace_id);
        query.push(("reference", reference.clone()));
        let body_stream = futures::stream::unfold(body_rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let (client, base) = self.libpod().map_err(|e| e.to_string())?;
        let import = async {
            let response = client
                .post(format!("{base}{}/images/import", super::networks::LIBPOD))
                .query(&query)
                .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
                .body(reqwest::Body::wrap_stream(body_stream))
                .send()
                .await
                .map_err(|e| format!("importing the tar: {e}"))?;
            let status = response.status();
            if !status.is_success() {
                let text = response.text().await.unwrap_or_default();
                return Err(format!(
                    "importing the tar: Podman answered {status}: {}",
                    text.trim()
                ));
            }
            Ok(())
        };
        let (forwarded, imported) = tokio::join!(forward, import);
        match (forwarded, imported) {
            (Ok(()), Ok(())) => {}
            (Err(reason), Ok(())) | (Ok(()), Err(reason)) => return Err(reason),
            // The import's own reason when it stopped reading first; the tar's otherwise.
            (Err(tar), Err(import)) => {
                return Err(if tar == IMPORT_STOPPED { import } else { tar });
            }
        }
        // The import answered; the labels it was given are checked as any user of it will.
        let seed = VolumeSeed {
            source: volume.to_owned(),
            workspace: labels
                .get(WORKSPACE_NAME_LABEL)
                .cloned()
                .unwrap_or_default(),
            workspace_id: workspace_id.to_owned(),
        };
        if self.snapshot_of(&seed).await.is_none() {
            return Err(format!(
                "the imported image {reference} is not found as saved"
            ));
        }
        Ok(())
    }

    /// Creates volume `name` with `labels` as a copy-on-write clone of snapshot `image`.
    pub(super) async fn create_cloned_volume(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        image: &str,
    ) -> Result<(), bollard::errors::Error> {
        let request = VolumeCreateRequest {
            name: Some(name.to_owned()),
            driver: Some("image".into()),
            driver_opts: Some(HashMap::from([("image".to_owned(), image.to_owned())])),
            labels: Some(labels.clone().into_iter().collect()),
            ..Default::default()
        };
        self.inner.docker.create_volume(request).await.map(|_| ())
    }

    /// The snapshot a new volume with `seed` is cloned from, if one can be: the prebuild's
    /// volume is still there and its snapshot was saved.
    pub(super) async fn clone_source(
        &self,
        seed: &VolumeSeed,
        labels: &BTreeMap<String, String>,
    ) -> Option<String> {
        if !self.keeps_snapshots() || labels.contains_key(super::super::GITOPS_SOURCE_LABEL) {
            return None;
        }
        self.check_seed_source(seed).await.ok()?;
        self.snapshot_of(seed).await
    }

    /// Opens the root of cloned volume `volume` to the pod's users (see `CLONED_ROOT_MODE`),
    /// as root without a capability (the root's owner may change its mode).
    pub(super) async fn open_cloned_volume(
        &self,
        plan: &PodPlan,
        volume: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        let helper = Helper {
            suffix: "seed",
            user: "0:0".into(),
            cap_add: vec![],
            command: vec!["chmod".into(), CLONED_ROOT_MODE.into(), "/v".into()],
            mounts: vec![(volume.to_owned(), "/v".into(), false)],
            labels,
        };
        match self
            .run_helper(plan, &helper, super::helpers::HELPER_TIMEOUT)
            .await
        {
            Ok(0) => Ok(()),
            Ok(code) => Err(format!(
                "opening the clone's root failed (exit code {code})"
            )),
            Err(e) => Err(format!("opening the clone's root: {e}")),
        }
    }

    /// Removes the snapshots of prebuilds this agent no longer has (their workspace gone)
    /// or of `removed` (`""` for none); one still cloned by a volume stays (the engine
    /// refuses) until a later removal, or the agent's next start, finds it unused.
    pub(super) async fn prune_snapshots(&self, removed: &str) {
        if !self.keeps_snapshots() {
            return;
        }
        // Every image, checked here: Podman 4.3's Docker-compatible list answered none for
        // these label filters.
        let options = bollard::query_parameters::ListImagesOptions::default();
        let images = match self.inner.docker.list_images(Some(options)).await {
            Ok(images) => images,
            Err(e) => {
                tracing::debug!(error = %error_message(&e), "listing snapshots failed");
                return;
            }
        };
        for image in images {
            let Some(workspace) = image.labels.get(WORKSPACE_NAME_LABEL) else {
                continue;
            };
            if !image.labels.contains_key(SNAPSHOT_OF_LABEL) {
                continue;
            }
            if !self
                .selector()
                .workspace(workspace)
                .matches_map(&image.labels)
            {
                continue;
            }
            if workspace != removed && self.read_record(workspace).is_some() {
                continue;
            }
            // By id: the image goes whatever tags it has (its one, or none if it lost it).
            let reference = image.id.clone();
            match self
                .inner
                .docker
                .remove_image(
                    &reference,
                    None::<bollard::query_parameters::RemoveImageOptions>,
                    None,
                )
                .await
            {
                Ok(_) => tracing::info!(image = %reference, "prebuild snapshot removed"),
                Err(e) if status_of(&e) == Some(409) => {
                    tracing::debug!(image = %reference, error = %error_message(&e), "prebuild snapshot kept (still cloned)")
                }
                Err(e) => {
                    tracing::warn!(image = %reference, error = %error_message(&e), "removing a prebuild snapshot failed; tried again at the next removal")
                }
            }
        }
    }
}

/// The blocks on disk of everything under `root`, without following links or leaving its
/// file system; `None` when any of it cannot be read.
fn disk_usage(root: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let top = std::fs::symlink_metadata(root).ok()?;
    let mut total = top.blocks().saturating_mul(512);
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            let path = entry.ok()?.path();
            let meta = std::fs::symlink_metadata(&path).ok()?;
            total = total.saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() && meta.dev() == top.dev() {
                pending.push(path);
            }
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_usage_counts_every_file_below_once_and_follows_no_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let empty = disk_usage(dir.path()).expect("readable");
        std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("sub/data"), vec![7u8; 256 * 1024]).expect("write");
        std::os::unix::fs::symlink("/usr", dir.path().join("link")).expect("symlink");
        let used = disk_usage(dir.path()).expect("readable");
        assert!(used >= empty + 256 * 1024, "{used} after {empty}");
        assert!(
            used < empty + 1024 * 1024,
            "the link's target is not counted: {used}"
        );
        assert_eq!(disk_usage(&dir.path().join("missing")), None);
    }
}
