//! Starting a new workspace's volumes as copies of a prebuild's: the server names the
//! prebuild workspace on the claims (`warren_types::prebuild`), and before the pod first
//! starts a short-lived container copies that workspace's same-named volume into each one.
//! Where the prebuild was saved as a snapshot (`snapshot`: Podman), the volume was made as
//! a clone of it instead, and only its root is opened to the pod's user here.
//!
//! Only a volume this installation made for that very prebuild (its workspace's name and id,
//! the prebuild mark, no GitOps source) is ever read: a claim cannot name another tenant's
//! volume, nor can a GitOps unit's objects make a volume look like a prebuild's. A copy that
//! cannot be made leaves the volume empty, and the workspace starts cold and says so (its
//! startup script tells that the prebuild was not copied). The copy runs as the pod's user
//! with no capability, after the new volumes were given to that user.

use super::helpers::Helper;
use super::plan::{PodPlan, VolumeSeed};
use super::*;
use warren_types::prebuild::{PREBUILD_LABEL, SEEDING_MARKER};

/// How long a copy may take (a prebuild of many gigabytes on a slow disk).
const COPY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// The copy, run as the pod's user in the helper: a failure empties the volume again (it was
/// new, so nothing of anyone's is lost), so the workspace starts cold rather than from part of
/// it.
fn copy_script() -> String {
    format!(
        "touch /to/{SEEDING_MARKER} && cp -a /from/. /to/ && rm -f /to/{SEEDING_MARKER} \
         || {{ find /to -mindepth 1 -delete; exit 1; }}"
    )
}

impl EngineRuntime {
    /// Records which of the volumes just made start as copies (kept until copied, across a
    /// build's wait and an agent restart).
    pub(super) fn note_seeds(
        &self,
        record: &mut Record,
        plan: &PodPlan,
        new_volumes: &[String],
    ) -> Result<(), RuntimeError> {
        let to_seed = new_volumes.iter().filter(|v| plan.seeds.contains_key(*v));
        let to_seed: Vec<String> = to_seed.cloned().collect();
        if to_seed.is_empty() {
            return Ok(());
        }
        record.pending_seeds.extend(to_seed);
        self.write_record(record)
    }

    /// Fills the volumes still to be copied, once: a copy that failed is not tried again.
    pub(super) async fn fill_seeds(
        &self,
        record: &mut Record,
        plan: &PodPlan,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), RuntimeError> {
        if record.pending_seeds.is_empty() {
            return Ok(());
        }
        self.seed_volumes(plan, &record.pending_seeds, labels).await;
        record.pending_seeds.clear();
        self.write_record(record)
    }

    /// Fills each of `volumes` (new volumes of the pod that start from a prebuild) from its
    /// seed. Never fails the apply: a volume not filled leaves the workspace a cold start.
    async fn seed_volumes(
        &self,
        plan: &PodPlan,
        volumes: &[String],
        labels: &BTreeMap<String, String>,
    ) {
        let workspace = labels
            .get(WORKSPACE_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        if labels.contains_key(super::super::GITOPS_SOURCE_LABEL) {
            tracing::warn!(workspace = %workspace, "a GitOps unit's claims name a prebuild: not copied");
            return;
        }
        for volume in volumes {
            let Some(seed) = plan.seeds.get(volume) else {
                continue;
            };
            match self.seed_volume(plan, volume, seed, labels).await {
                Ok(()) => {
                    tracing::info!(workspace = %workspace, volume = %volume, from = %seed.source, "volume started from the prebuild")
                }
                Err(reason) => {
                    tracing::warn!(workspace = %workspace, volume = %volume, from = %seed.source, reason = %reason, "volume not copied from the prebuild: the workspace starts without it")
                }
            }
        }
    }

    /// Whether `source` is the prebuild volume `seed` names, made by this installation.
    pub(super) async fn check_seed_source(&self, seed: &VolumeSeed) -> Result<(), String> {
        let v = match self.inner.docker.inspect_volume(&seed.source).await {
            Ok(v) => v,
            Err(e) if status_of(&e) == Some(404) => {
                return Err(format!("the prebuild's volume {} is gone", seed.source))
            }
            Err(e) => return Err(format!("inspecting volume {}: {e}", seed.source)),
        };
        let selector = self.selector().workspace(&seed.workspace);
        let is_prebuilds = selector.matches_map(&v.labels)
            && v.labels.get(WORKSPACE_ID_LABEL) == Some(&seed.workspace_id)
            && v.labels.get(PREBUILD_LABEL).map(String::as_str) == Some("true")
            && !v.labels.contains_key(super::super::GITOPS_SOURCE_LABEL);
        if !is_prebuilds {
            return Err(format!(
                "volume {} is not prebuild workspace {}'s (id {}) on this installation",
                seed.source, seed.workspace, seed.workspace_id
            ));
        }
        Ok(())
    }

    async fn seed_volume(
        &self,
        plan: &PodPlan,
        volume: &str,
        seed: &VolumeSeed,
        labels: &BTreeMap<String, String>,
    ) -> Result<(), String> {
        self.check_seed_source(seed).await?;
        let target = self
            .inner
            .docker
            .inspect_volume(volume)
            .await
            .map_err(|e| format!("inspecting volume {volume}: {}", error_message(&e)))?;
        if target.driver == "image" {
            // Made as a clone of the prebuild's snapshot (`snapshot`): filled already.
            return self.open_cloned_volume(plan, volume, labels).await;
        }
        // The pod's own user, without a capability: the project's image runs no more
        // privileged here than in the workspace. The prebuild's files are that user's (the
        // prebuild ran as it); a file it cannot read fails the copy, a cold start.
        let helper = Helper {
            suffix: "seed",
            user: format!("{}:{}", plan.uid, plan.gid),
            cap_add: vec![],
            command: vec!["/bin/sh".into(), "-c".into(), copy_script()],
            mounts: vec![
                (seed.source.clone(), "/from".into(), true),
                (volume.to_owned(), "/to".into(), false),
            ],
            labels,
        };
        // A copy that hangs (a shell of the image that never ends) is cut short: the marker
        // it leaves fails the workspace's start by name.
        match self.run_helper(plan, &helper, COPY_TIMEOUT).await {
            Ok(0) => Ok(()),
            Ok(code) => Err(format!("the copy failed (exit code {code})")),
            Err(e) => Err(format!("copying: {e}")),
        }
    }
}
