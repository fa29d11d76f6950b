//! The Kubernetes runtime behind the [`WorkspaceRuntime`] trait the reconciler drives: each
//! call handed to the module that does it.

use super::*;

#[async_trait]
impl WorkspaceRuntime for KubernetesRuntime {
    async fn logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        if let Some(stream) = self.build_log(workspace, container, tail, false) {
            let mut stream = stream?;
            let mut out = Vec::new();
            while let Some(chunk) = stream.next().await {
                out.extend_from_slice(&chunk?);
            }
            return Ok(crate::runtime::log_tail(out));
        }
        self.logs_of(workspace, container, tail).await
    }

    async fn follow_logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        if let Some(stream) = self.build_log(workspace, container, tail, true) {
            return stream;
        }
        self.follow_logs_of(workspace, container, tail).await
    }

    fn use_build_contexts(&self, contexts: Arc<dyn crate::runtime::BuildContexts>) {
        self.builder_contexts(contexts);
    }

    async fn exec(
        &self,
        workspace: &WorkspaceKey,
        spec: crate::runtime::ExecSpec,
    ) -> Result<crate::runtime::ExecSession, RuntimeError> {
        self.exec_in(workspace, spec).await
    }

    async fn apply_component(
        &self,
        workspace: &WorkspaceKey,
        component: &str,
        objects: &[serde_json::Value],
    ) -> Result<Vec<String>, RuntimeError> {
        self.apply_component_objects(workspace, component, objects)
            .await
    }

    async fn sync_gitops(
        &self,
        sync: &crate::runtime::GitopsSync<'_>,
    ) -> Result<crate::runtime::GitopsOutcome, RuntimeError> {
        self.sync_gitops_objects(sync).await
    }

    async fn apply(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        objects::check_key(workspace).map_err(|message| RuntimeError::Apply {
            workspace: workspace.to_string(),
            message,
        })?;
        // Before anything exists: a pod naming an image never built would pull whatever a
        // registry has under that name; its images are built and pushed first (`builds`).
        let objects = match self.with_builds(workspace, objects)? {
            builds::Prepared::Apply(objects) => objects,
            builds::Prepared::Building => return Ok(()),
        };
        self.apply_objects(workspace, &objects).await
    }

    async fn delete(&self, workspace: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError> {
        // A malformed key names nothing Warren could have created (and an empty namespace
        // would address the whole cluster).
        objects::check_key(workspace)
            .map_err(|m| RuntimeError::NotFound(format!("workspace {workspace:?} ({m})")))?;
        self.delete_builds(workspace).await?;
        if let Some(progress) = self.delete_namespace(workspace).await? {
            return Ok(progress);
        }
        // A shared namespace: the devfile components' objects first, then the workspace's.
        self.delete_component_objects(workspace).await?;
        // A shared namespace: delete what the inventory names, the Deployment first (its pods
        // go with it) and the volumes last; the inventory itself goes once nothing remains.
        let mut entries: Vec<ObjectRef> = self
            .read_inventory(workspace)
            .await?
            .unwrap_or_default()
            .into_iter()
            .collect();
        let deployment = ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: workspace.name.clone(),
        };
        if !entries.contains(&deployment) {
            entries.push(deployment);
        }
        entries.sort_by_key(|e| std::cmp::Reverse(objects::rank_of(&e.kind)));
        for entry in &entries {
            self.delete_object(workspace, entry).await?;
        }
        for entry in &entries {
            if self.exists(workspace, entry).await? {
                return Ok(TerminationProgress::Terminating);
            }
        }
        let inventory = inventory_name(&workspace.name);
        match self
            .inventory_api(workspace)
            .delete(&inventory, &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(TerminationProgress::Terminated),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(TerminationProgress::Terminated),
            Err(e) => Err(runtime_error(
                format!("deleting inventory of {workspace}"),
                e,
            )),
        }
    }

    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        self.ready().await?;
        let namespaces: BTreeMap<String, Arc<Namespace>> = self
            .namespaces
            .state()
            .into_iter()
            .filter_map(|ns| Some((ns.metadata.name.clone()?, ns)))
            .collect();
        let ns_terminating = |name: &str| {
            namespaces
                .get(name)
                .is_some_and(|ns| ns.metadata.deletion_timestamp.is_some())
        };
        // Pods by namespace, so matching stays linear in the number of workspaces.
        let mut pods: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
        for pod in self.pods.state() {
            if pod.metadata.deletion_timestamp.is_none() {
                let ns = pod.metadata.namespace.clone().unwrap_or_default();
                pods.entry(ns).or_default().push(pod);
            }
        }
        let mut seen = BTreeSet::new();
        let mut observed = Vec::new();
        for deployment in self.deployments.state() {
            let (Some(name), Some(namespace)) = (
                deployment.metadata.name.clone(),
                deployment.metadata.namespace.clone(),
            ) else {
                continue;
            };
            let own: Vec<_> = pods
                .get(&namespace)
                .into_iter()
                .flatten()
                .filter(|p| status::selects(&deployment, p))
                .collect();
            let pod_failure = own.iter().find_map(|p| pod_failure(p));
            // Only while every pod of it waits: during a rollout the old pod still serves.
            let waits: Vec<_> = own.iter().map(|p| status::pod_waiting(p)).collect();
            let pod_waiting = if waits.iter().all(Option::is_some) {
                waits.into_iter().flatten().next()
            } else {
                None
            };
            let terminating =
                deployment.metadata.deletion_timestamp.is_some() || ns_terminating(&namespace);
            let key = WorkspaceKey { name, namespace };
            seen.insert(key.clone());
            observed.push(ObservedWorkspace {
                key,
                deployment: status::deployment_json(&deployment),
                pod_failure,
                pod_waiting,
                terminating,
            });
        }
        // A workspace namespace still being deleted after its Deployment went.
        for (ns_name, ns) in &namespaces {
            let labels = ns.metadata.labels.clone().unwrap_or_default();
            let Some(name) = labels.get(WORKSPACE_NAME_LABEL) else {
                continue;
            };
            let key = WorkspaceKey {
                name: name.clone(),
                namespace: ns_name.clone(),
            };
            if ns.metadata.deletion_timestamp.is_some()
                && owns_namespace(&key)
                && !seen.contains(&key)
            {
                observed.push(ObservedWorkspace {
                    key,
                    deployment: None,
                    pod_failure: None,
                    pod_waiting: None,
                    terminating: true,
                });
            }
        }
        self.overlay_builds(&mut observed);
        self.report_stored_bytes(&mut observed).await;
        // Pods waiting for a prebuild's files get them (`seed`).
        self.start_seeding();
        Ok(observed)
    }

    async fn usage(&self) -> Result<Vec<crate::runtime::WorkspaceUsage>, RuntimeError> {
        self.metrics_usage().await
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.clone()
    }

    async fn dial(
        &self,
        workspace: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let deployment = self.deployment_of(workspace).await?;
        // Ports no endpoint declares are dialled too (SSH port forwarding to an editor's
        // server); which ports browsers may reach is the proxy's check, with the server.
        let pod = self
            .pods
            .state()
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| status::selects(&deployment, p))
            .find_map(|p| {
                let s = p.status.as_ref()?;
                if s.phase.as_deref() != Some("Running") {
                    return None;
                }
                let ip = s.pod_ip.as_deref()?.parse::<IpAddr>().ok()?;
                Some((p.metadata.name.clone()?, ip))
            });
        let Some((pod, ip)) = pod else {
            return Err(RuntimeError::Runtime {
                context: format!("dialing port {port} of workspace {workspace}"),
                source: "the workspace has no running pod with an IP".into(),
            });
        };
        let editor_port = deployment
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(EDITOR_PORT_ANNOTATION))
            .and_then(|p| p.parse::<u16>().ok());
        if editor_port == Some(port) {
            return self.forward(workspace, &pod, port).await;
        }
        let connect = TcpStream::connect((ip, port));
        let dial_error = |source: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Runtime {
            context: format!("dialing {ip}:{port} of workspace {workspace}"),
            source,
        };
        match tokio::time::timeout(self.options.dial_timeout, connect).await {
            Ok(Ok(stream)) => Ok(Box::new(stream)),
            Ok(Err(e)) => Err(dial_error(Box::new(e))),
            Err(_) => Err(dial_error("timed out".into())),
        }
    }
}

impl KubernetesRuntime {
    /// Applies a workspace's objects as they are (their builds done): namespace, pull
    /// secrets, inventory, server-side apply, prune.
    pub(super) async fn apply_objects(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        let live = self.deployments.get(
            &kube::runtime::reflector::ObjectRef::<k8s_openapi::api::apps::v1::Deployment>::new(
                &workspace.name,
            )
            .within(&workspace.namespace),
        );
        let objects = &seed::with_seed_containers(objects, live.as_deref());
        let prepared = objects::prepare(workspace, &self.agent_id, objects)?;
        // The strongest Pod Security level the workspace's own pod meets is the namespace's:
        // `restricted`, unless the agent's configuration allows privilege escalation
        // (`baseline`) or its admin allowed the workspace a capability or an unconfined
        // profile (`privileged`: the server renders no exception the admin did not allow).
        use warren_admission::{pod_security, Level};
        let level = match objects.iter().find(|o| o["kind"] == "Deployment") {
            Some(d) if !pod_security(d, Level::Restricted).is_empty() => {
                if pod_security(d, Level::Baseline).is_empty() {
                    Level::Baseline.as_str()
                } else {
                    "privileged"
                }
            }
            _ => Level::Restricted.as_str(),
        };
        self.ensure_namespace(workspace, level).await?;
        self.copy_pull_secrets(workspace, objects).await?;
        let previous = self.read_inventory(workspace).await?;
        let current: BTreeSet<ObjectRef> = prepared.iter().map(|p| p.reference.clone()).collect();
        // Record the union before applying: if the agent dies half-way, the next apply still
        // knows every object that may exist and prunes what is not wanted.
        let previous_set = previous.clone().unwrap_or_default();
        let union: BTreeSet<ObjectRef> = previous_set.union(&current).cloned().collect();
        if previous.as_ref() != Some(&union) {
            self.write_inventory(workspace, &union).await?;
        }
        let params = self.patch_params();
        for object in &prepared {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &workspace.namespace, &object.resource);
            api.patch(&object.reference.name, &params, &Patch::Apply(&object.body))
                .await
                .map_err(|e| apply_error(workspace, &object.reference.to_string(), e))?;
        }
        if objects::is_partial(&prepared) {
            // Only the Deployment: a partial response leaves out the objects that do not
            // change with desired state (reconcile.md; the renderer's `is_static_object`),
            // and those must not be pruned; the volumes among them hold the user's files.
            return Ok(());
        }
        for stale in previous_set.difference(&current) {
            self.delete_object(workspace, stale).await?;
        }
        if union != current {
            self.write_inventory(workspace, &current).await?;
        }
        Ok(())
    }
}
