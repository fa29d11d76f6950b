//! Short-lived helper containers that work on a pod's volumes before it starts or after it
//! stopped (giving new volumes to the pod's user, copying or saving a prebuild's): each runs
//! the pod's own image with no network, no new privileges and only the capabilities named,
//! under the workspace's labels so that its removal goes with the workspace's.

use super::plan::PodPlan;
use super::*;

/// How long a helper that only changes owners or modes may take.
pub(super) const HELPER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// What one helper runs, as whom and on which volumes.
pub(super) struct Helper<'a> {
    /// Appended to the pod's network name: one helper of a kind per pod at a time.
    pub suffix: &'static str,
    pub user: String,
    pub cap_add: Vec<String>,
    pub command: Vec<String>,
    /// (volume, mount path, read-only)
    pub mounts: Vec<(String, String, bool)>,
    pub labels: &'a BTreeMap<String, String>,
}

impl Helper<'_> {
    /// The helper's name for `plan`.
    pub fn name(&self, plan: &PodPlan) -> String {
        format!("{}.{}", plan.network, self.suffix)
    }

    /// The container to create, of the pod's own image (pulled by the time its containers
    /// exist; any image a workspace runs has a shell).
    pub fn body(&self, plan: &PodPlan) -> Result<bollard::models::ContainerCreateBody, String> {
        let image = plan
            .owner()
            .and_then(|o| o.body.image.clone())
            .ok_or("the pod has no image to run a helper with")?;
        let mounts = self
            .mounts
            .iter()
            .map(|(source, target, read_only)| bollard::models::Mount {
                target: Some(target.clone()),
                source: Some(source.clone()),
                typ: Some(bollard::models::MountType::VOLUME),
                read_only: Some(*read_only),
                ..Default::default()
            })
            .collect();
        Ok(bollard::models::ContainerCreateBody {
            image: Some(image),
            entrypoint: Some(self.command.clone()),
            cmd: Some(vec![]),
            user: Some(self.user.clone()),
            labels: Some(self.labels.clone().into_iter().collect()),
            host_config: Some(bollard::models::HostConfig {
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: (!self.cap_add.is_empty()).then(|| self.cap_add.clone()),
                security_opt: Some(vec!["no-new-privileges".into()]),
                network_mode: Some("none".into()),
                mounts: Some(mounts),
                ..Default::default()
            }),
            ..Default::default()
        })
    }
}

impl EngineRuntime {
    /// Creates `helper` for `plan` (replacing a leftover of an earlier run); its name.
    pub(super) async fn create_helper(
        &self,
        plan: &PodPlan,
        helper: &Helper<'_>,
    ) -> Result<String, String> {
        let body = helper.body(plan)?;
        let name = helper.name(plan);
        let _ = self.remove(&name).await;
        let options = CreateContainerOptions {
            name: Some(name.clone()),
            ..Default::default()
        };
        self.inner
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| format!("creating helper container {name}: {}", error_message(&e)))?;
        Ok(name)
    }

    /// The exit code of helper `name`, once it stopped within `timeout`.
    pub(super) async fn helper_exit(
        &self,
        name: &str,
        timeout: std::time::Duration,
    ) -> Result<i64, String> {
        if tokio::time::timeout(timeout, self.wait_stopped(name))
            .await
            .is_err()
        {
            return Err(format!(
                "it took longer than {} minutes",
                timeout.as_secs().div_ceil(60)
            ));
        }
        self.inspect(name)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.exit_code)
            .ok_or_else(|| format!("the end of helper container {name} is unknown"))
    }

    /// Runs `helper` to its end (at most `timeout`), then removes it; its exit code.
    pub(super) async fn run_helper(
        &self,
        plan: &PodPlan,
        helper: &Helper<'_>,
        timeout: std::time::Duration,
    ) -> Result<i64, String> {
        let name = self.create_helper(plan, helper).await?;
        let outcome = async {
            self.inner
                .docker
                .start_container(&name, None)
                .await
                .map_err(|e| format!("starting helper container {name}: {}", error_message(&e)))?;
            self.helper_exit(&name, timeout).await
        }
        .await;
        let _ = self.remove(&name).await;
        outcome
    }
}
