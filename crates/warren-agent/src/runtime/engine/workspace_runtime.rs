//! The engine runtime behind the [`WorkspaceRuntime`] trait the reconciler drives: each
//! call handed to the module that does it.

use super::*;

#[async_trait]
impl WorkspaceRuntime for EngineRuntime {
    fn use_build_contexts(&self, contexts: Arc<dyn crate::runtime::BuildContexts>) {
        self.set_build_contexts(contexts);
    }

    async fn logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        self.logs_of(workspace, container, tail).await
    }

    async fn follow_logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        self.log_stream(workspace, container, tail, true).await
    }

    async fn exec(
        &self,
        workspace: &WorkspaceKey,
        spec: crate::runtime::ExecSpec,
    ) -> Result<crate::runtime::ExecSession, RuntimeError> {
        self.exec_in(workspace, spec).await
    }

    async fn build_image(
        &self,
        workspace: &WorkspaceKey,
        task: &warren_types::relay::BuildImageTask,
        context: crate::runtime::BuildContext,
    ) -> Result<crate::runtime::BuildProgress, RuntimeError> {
        self.build(workspace, task, context, None).await
    }

    async fn apply(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        self.apply_with(workspace, objects, &ApplyOptions::default())
            .await
    }

    async fn sync_gitops(
        &self,
        sync: &crate::runtime::GitopsSync<'_>,
    ) -> Result<crate::runtime::GitopsOutcome, RuntimeError> {
        self.sync_gitops_objects(sync).await
    }

    async fn delete(&self, workspace: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError> {
        let name = &workspace.name;
        if !is_dns_label(name) {
            return Err(RuntimeError::NotFound(format!("workspace {name:?}")));
        }
        let _guard = self.lock_workspace(name).await;
        self.forget_prober(name);
        let mut moved = false;
        if let Some(mut record) = self.read_record(name) {
            if !record.deleting {
                record.deleting = true;
                self.write_record(&record)?;
                moved = true;
            }
        }
        let progress = self.delete_locked(name, &mut moved).await;
        if moved {
            // The workspace's network may be gone: its rules go too, off the deletion's
            // path. Nothing waits on it: rules of a removed network refer to no container,
            // and an apply brings the rules up to date before it creates anything.
            let runtime = self.clone();
            tokio::spawn(async move {
                if let Err(e) = runtime.sync_firewall().await {
                    tracing::warn!(error = %warren_types::error_chain(&e), "updating the firewall rules after a deletion failed; retried at the next change");
                }
            });
            // Only a deletion that changed something tells the reconciler to look again; one
            // that could not (blocked, failed) waits for its retry timer instead of waking
            // itself in a loop.
            self.changed(name);
        }
        progress
    }

    fn isolation_warning(&self) -> Option<String> {
        self.inner.isolation_warning.clone()
    }

    async fn capacity(&self) -> Option<warren_types::reconcile::HostCapacity> {
        let info = self.inner.docker.info().await.ok()?;
        let cpus = u64::try_from(info.ncpu?).ok().filter(|n| *n > 0)?;
        let memory = u64::try_from(info.mem_total?).ok().filter(|n| *n > 0)?;
        Some(warren_types::reconcile::HostCapacity {
            cpu_millis: cpus * 1000,
            memory_bytes: memory,
        })
    }

    async fn usage(&self) -> Result<Vec<crate::runtime::WorkspaceUsage>, RuntimeError> {
        // The engine's statistics of each running app container (one sample each, a few at a
        // time); init containers come and go, so they are left out.
        let running: Vec<(WorkspaceKey, String, String)> = self
            .containers(&self.selector())
            .await?
            .into_iter()
            .filter(|c| c.state.map(|s| s.to_string()).as_deref() == Some("running"))
            .filter(|c| label(c, ROLE_LABEL) != Some(Role::Init.label()))
            .filter_map(|c| {
                let key = WorkspaceKey {
                    name: label(&c, WORKSPACE_NAME_LABEL)?.to_owned(),
                    namespace: label(&c, WORKSPACE_NAMESPACE_LABEL)
                        .unwrap_or_default()
                        .to_owned(),
                };
                let container = label(&c, CONTAINER_LABEL)?.to_owned();
                Some((key, container, c.id?))
            })
            .collect();
        let docker = self.inner.docker.clone();
        let samples: Vec<Option<crate::runtime::WorkspaceUsage>> = futures::stream::iter(running)
            .map(|(workspace, container, id)| {
                let docker = docker.clone();
                async move {
                    let options = bollard::query_parameters::StatsOptions {
                        stream: false,
                        one_shot: true,
                    };
                    let mut stats = docker.stats(&id, Some(options));
                    // A container that stopped meanwhile, or says nothing in time, is left
                    // out of this scrape (its series is missing, not zero).
                    let s = match tokio::time::timeout(STATS_TIMEOUT, stats.next()).await {
                        Ok(Some(Ok(s))) => s,
                        _ => return None,
                    };
                    let cpu_ns = s.cpu_stats?.cpu_usage?.total_usage?;
                    let memory = s.memory_stats?;
                    // The working set: page cache the kernel can drop is not in use.
                    let inactive = memory
                        .stats
                        .as_ref()
                        .and_then(|m| m.get("total_inactive_file").or(m.get("inactive_file")))
                        .copied()
                        .unwrap_or(0);
                    Some(crate::runtime::WorkspaceUsage {
                        workspace,
                        container,
                        cpu_seconds: cpu_ns as f64 / 1e9,
                        memory_bytes: memory.usage?.saturating_sub(inactive),
                    })
                }
            })
            .buffer_unordered(4)
            .collect()
            .await;
        let mut usage: Vec<crate::runtime::WorkspaceUsage> =
            samples.into_iter().flatten().collect();
        usage.sort_by(|a, b| (&a.workspace, &a.container).cmp(&(&b.workspace, &b.container)));
        Ok(usage)
    }

    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        self.observed().await
    }

    fn resync(&self) {
        self.look_again_at_all();
        // The firewall's networks are listed afresh too, at the next update.
        *lock(&self.inner.subnets) = None;
        if let Some(gitops) = self.inner.gitops.get() {
            *lock(&gitops.inner.subnets) = None;
        }
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    async fn dial(
        &self,
        workspace: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let name = &workspace.name;
        let hash = self.read_record(name).map(|r| r.pod_hash);
        let owner = self
            .workspace_containers(name)
            .await?
            .into_iter()
            .filter(|c| summary_role(c) == Role::App && summary_order(c) == 0)
            .find(|c| {
                hash.as_deref()
                    .is_none_or(|h| label(c, POD_HASH_LABEL) == Some(h))
            })
            .ok_or_else(|| RuntimeError::NotFound(format!("workspace {workspace}")))?;
        let key = format!("{port}/tcp");
        let declared = label(&owner, PORTS_LABEL)
            .unwrap_or("")
            .split(',')
            .any(|p| p == key);
        if !declared {
            return self.dial_unpublished(workspace, &owner, port).await;
        }
        let id = owner.id.clone().unwrap_or_default();
        let inspect = self
            .inspect(&id)
            .await
            .map_err(|e| runtime_err(format!("inspecting the pod of {workspace}"), e))?;
        let host_port = inspect
            .network_settings
            .and_then(|n| n.ports)
            .and_then(|p| p.get(&key).cloned().flatten())
            .and_then(|bindings| bindings.into_iter().find_map(|b| b.host_port))
            .and_then(|p| p.parse::<u16>().ok())
            .ok_or_else(|| {
                RuntimeError::NotFound(format!(
                    "a published port {port} of workspace {workspace} (is it running?)"
                ))
            })?;
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", host_port))
            .await
            .map_err(|e| {
                runtime_err(
                    format!("connecting to port {port} of workspace {workspace}"),
                    e,
                )
            })?;
        Ok(Box::new(stream))
    }
}
