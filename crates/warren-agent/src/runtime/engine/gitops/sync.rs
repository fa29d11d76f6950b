//! One sync of a GitOps source on the engine, phase by phase: admit each object, record the
//! inventory before anything is applied, apply each Deployment's unit, count the data kinds,
//! prune what left Git, and report the units' health.

use super::*;

/// What a sync builds up as it goes: its outcome, and what the inventory keeps.
struct Pass<'p> {
    /// The inventory before the sync.
    previous: &'p BTreeMap<Entry, String>,
    out: GitopsOutcome,
    /// Applied now, or refused now but not deleted because of it.
    keep: BTreeMap<Entry, String>,
}

impl Pass<'_> {
    /// An object this sync did not apply keeps what it was: its earlier digest stays in the
    /// inventory, so it is neither pruned nor counted as new.
    fn keep_previous(&mut self, entry: &Entry) {
        if let Some(digest) = self.previous.get(entry) {
            self.keep.insert(entry.clone(), digest.clone());
        }
    }

    fn error(&mut self, m: &Manifest, message: String) {
        self.out.errors.push(SyncError {
            file: Some(m.file.clone()),
            object: Some(m.display()),
            message,
        });
    }
}

impl EngineRuntime {
    /// See the module docs.
    pub(in crate::runtime::engine) async fn sync_gitops_objects(
        &self,
        sync: &GitopsSync<'_>,
    ) -> Result<GitopsOutcome, RuntimeError> {
        // The name becomes a file name; the relay's word is not trusted alone.
        warren_types::check_name(&sync.source.name).map_err(|e| RuntimeError::Apply {
            workspace: format!("GitOps source {:?}", sync.source.name),
            message: e,
        })?;
        let gitops = self.gitops_engine();
        let (previous, prune) = match self.read_inventory(&sync.source.name) {
            Some(p) => (p, sync.prune),
            None => (BTreeMap::new(), false),
        };
        let mut pass = Pass {
            previous: &previous,
            out: GitopsOutcome::default(),
            keep: BTreeMap::new(),
        };
        let admitted = admit(sync, &mut pass);

        // Recorded before anything is applied: a crash in the middle must not leave a unit
        // the inventory does not know (it could never be pruned).
        let mut early = previous.clone();
        for a in &admitted {
            early.entry(a.entry.clone()).or_default();
        }
        self.write_inventory(&sync.source.name, &early)?;

        for d in admitted.iter().filter(|a| a.entry.kind == "Deployment") {
            apply_unit(&gitops, sync, d, &admitted, &mut pass).await;
        }
        // The data kinds: applied is recorded (their effect is in the units that use them).
        for a in admitted.iter().filter(|a| a.entry.kind != "Deployment") {
            let d = digest(&[&a.body]);
            if previous.get(&a.entry) == Some(&d) {
                pass.out.unchanged += 1;
            } else {
                pass.out.applied += 1;
            }
            pass.keep.insert(a.entry.clone(), d);
        }
        if prune {
            self.prune_gone(&gitops, sync, &mut pass).await;
        } else {
            for (e, d) in &previous {
                pass.keep.entry(e.clone()).or_insert_with(|| d.clone());
            }
        }
        self.write_inventory(&sync.source.name, &pass.keep)?;
        let Pass { mut out, keep, .. } = pass;
        out.health = health(&gitops, sync, &keep).await;
        Ok(out)
    }

    /// Deletes what the inventory had and this sync keeps not: workloads before the claims
    /// they mount. What cannot be deleted now stays in the inventory for the next sync.
    async fn prune_gone(&self, gitops: &EngineRuntime, sync: &GitopsSync<'_>, pass: &mut Pass<'_>) {
        let mut gone: Vec<Entry> = pass
            .previous
            .keys()
            .filter(|e| !pass.keep.contains_key(*e))
            .cloned()
            .collect();
        gone.sort_by_key(|e| e.kind == "PersistentVolumeClaim");
        for e in gone {
            match self.prune_unit_object(gitops, sync, &e).await {
                Ok(true) => pass.out.pruned += 1,
                Ok(false) => {}
                Err(message) => {
                    let error = crate::runtime::prune_error(e.to_string(), &message);
                    pass.out.errors.push(error);
                    pass.keep_previous(&e);
                }
            }
        }
    }
}

/// The source's objects this runtime realises and the source may apply, each placed in its
/// namespace and labelled as the source's; every other one is an error naming why.
fn admit<'m>(sync: &GitopsSync<'m>, pass: &mut Pass<'_>) -> Vec<Admitted<'m>> {
    let rights = Rights::new(sync.source, sync.policy);
    let mut admitted: Vec<Admitted<'_>> = Vec::new();
    let mut seen: BTreeSet<Entry> = BTreeSet::new();
    for m in sync.objects {
        if !REALISED.contains(&(m.api_version(), m.kind())) {
            let message = format!(
                "this runtime does not realise {} {} objects from Git (a container engine \
                 realises apps/v1 Deployment and v1 Service, ConfigMap, Secret and \
                 PersistentVolumeClaim)",
                m.api_version(),
                m.kind()
            );
            pass.error(m, message);
            continue;
        }
        let namespace = match rights.admit(m, Some(true)) {
            Ok(ns) => ns.unwrap_or_else(|| "default".into()),
            Err(message) => {
                pass.error(m, message);
                // Where it would have gone (as `admit` places it), so what it was is kept.
                let namespace = m.namespace().or(sync.source.namespace.as_deref());
                pass.keep_previous(&entry_of(m, namespace.unwrap_or("default")));
                continue;
            }
        };
        if !is_dns_label(m.name()) && m.kind() != "ConfigMap" && m.kind() != "Secret" {
            let message = format!(
                "name {:?} is not a DNS label (lowercase letters, digits and '-', at most 63)",
                m.name()
            );
            pass.error(m, message);
            continue;
        }
        let entry = entry_of(m, &namespace);
        if !seen.insert(entry.clone()) {
            pass.error(
                m,
                format!("{entry} is defined twice; the first definition is applied"),
            );
            continue;
        }
        admitted.push(Admitted {
            manifest: m,
            entry,
            body: labelled(&m.object, &namespace, sync),
        });
    }
    admitted
}

/// The inventory's name of a manifest placed in `namespace`.
fn entry_of(m: &Manifest, namespace: &str) -> Entry {
    Entry {
        api_version: m.api_version().to_owned(),
        kind: m.kind().to_owned(),
        namespace: namespace.to_owned(),
        name: m.name().to_owned(),
    }
}

/// An object as applied: in `namespace`, labelled with the agent and source. Warren's own
/// labels are not Git's to set (a workspace id would make the unit look like a workspace).
fn labelled(object: &Value, namespace: &str, sync: &GitopsSync<'_>) -> Value {
    let mut body = object.clone();
    if let Some(meta) = body["metadata"].as_object_mut() {
        meta.insert("namespace".into(), Value::from(namespace));
        let labels = meta
            .entry("labels")
            .or_insert_with(|| serde_json::json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.remove(WORKSPACE_ID_LABEL);
            labels.insert(GITOPS_AGENT_LABEL.into(), Value::from(sync.agent));
            let source = Value::from(sync.source.name.as_str());
            labels.insert(GITOPS_SOURCE_LABEL.into(), source);
        }
    }
    body
}

/// Applies Deployment `d`'s unit: its pod, the one Service that selects it, and what the pod
/// uses from its namespace (ConfigMaps, Secrets, claims — a change elsewhere in the namespace
/// leaves it alone). A unit that cannot run as the source defines it is not started.
async fn apply_unit(
    gitops: &EngineRuntime,
    sync: &GitopsSync<'_>,
    d: &Admitted<'_>,
    admitted: &[Admitted<'_>],
    pass: &mut Pass<'_>,
) {
    let ns = &d.entry.namespace;
    if let Err(message) = baseline(&d.body) {
        pass.error(d.manifest, message);
        pass.keep_previous(&d.entry);
        return;
    }
    let template_labels = d
        .body
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    let mut services = admitted.iter().filter(|a| {
        a.entry.kind == "Service" && &a.entry.namespace == ns && selects(&a.body, &template_labels)
    });
    let service = services.next();
    for other in services {
        let message = format!(
            "selects Deployment {ns}/{} whose ports Service {} already publishes; a container \
             engine publishes one Service per Deployment",
            d.entry.name,
            service.map(|s| s.entry.name.as_str()).unwrap_or_default()
        );
        pass.error(other.manifest, message);
    }
    let shared = match claims(gitops, sync, d, admitted) {
        Ok(shared) => shared,
        Err(missing) => {
            let message = format!(
                "mounts PersistentVolumeClaim {} that the source does not define in namespace \
                 {ns}; it is not started",
                missing.join(", ")
            );
            pass.error(d.manifest, message);
            pass.keep_previous(&d.entry);
            return;
        }
    };
    let mut objects: Vec<Value> = vec![d.body.clone()];
    objects.extend(service.map(|s| s.body.clone()));
    let (config_maps, secrets) = references(&d.body);
    let used = admitted.iter().filter(|a| {
        &a.entry.namespace == ns
            && match a.entry.kind.as_str() {
                "ConfigMap" => config_maps.contains(&a.entry.name),
                "Secret" => secrets.contains(&a.entry.name),
                "PersistentVolumeClaim" => shared.contains_key(&a.entry.name),
                _ => false,
            }
    });
    objects.extend(used.map(|a| a.body.clone()));
    let volumes: BTreeMap<_, _> = shared
        .iter()
        .map(|(c, (v, _))| (c.clone(), v.clone()))
        .collect();
    let shared_json = serde_json::to_value(volumes).unwrap_or_default();
    let mut parts: Vec<&Value> = objects.iter().collect();
    parts.push(&shared_json);
    let unit_digest = digest(&parts);
    let key = WorkspaceKey {
        namespace: ns.clone(),
        name: engine_name(sync, "Deployment", ns, &d.entry.name),
    };
    let existed = gitops.read_record(&key.name).is_some();
    let options = ApplyOptions {
        shared,
        complete: true,
    };
    match gitops.apply_with(&key, &objects, &options).await {
        Ok(()) => {
            if existed && pass.previous.get(&d.entry) == Some(&unit_digest) {
                pass.out.unchanged += 1;
            } else {
                pass.out.applied += 1;
            }
            pass.keep.insert(d.entry.clone(), unit_digest);
        }
        Err(e) => {
            pass.error(d.manifest, warren_types::error_chain(&e));
            pass.keep_previous(&d.entry);
        }
    }
}

/// The claims Deployment `d` mounts, each as the volume it shares; the names of those the
/// source does not define in its namespace when any is missing.
fn claims(
    gitops: &EngineRuntime,
    sync: &GitopsSync<'_>,
    d: &Admitted<'_>,
    admitted: &[Admitted<'_>],
) -> Result<SharedClaims, Vec<String>> {
    let ns = &d.entry.namespace;
    let defined = |claim: &str| {
        admitted.iter().any(|a| {
            a.entry.kind == "PersistentVolumeClaim"
                && &a.entry.namespace == ns
                && a.entry.name == claim
        })
    };
    let mut shared = SharedClaims::new();
    let mut missing = Vec::new();
    for claim in claims_of(&d.body) {
        if !defined(&claim) {
            missing.push(claim);
            continue;
        }
        let volume = engine_name(sync, "PersistentVolumeClaim", ns, &claim);
        let labels = EngineRuntime::claim_labels(gitops, sync, ns, &volume);
        shared.insert(claim, (volume, labels));
    }
    if missing.is_empty() {
        Ok(shared)
    } else {
        Err(missing)
    }
}

/// The health of the units the inventory keeps, as the engine reports them now: no engine
/// events reach the units' runtime, so it looks at all of them.
async fn health(
    gitops: &EngineRuntime,
    sync: &GitopsSync<'_>,
    keep: &BTreeMap<Entry, String>,
) -> Vec<ObjectHealth> {
    gitops.look_again_at_all();
    let observed = gitops.list().await.unwrap_or_default();
    let mut health = Vec::new();
    for e in keep.keys().filter(|e| e.kind == "Deployment") {
        let unit = engine_name(sync, "Deployment", &e.namespace, &e.name);
        let Some(o) = observed.iter().find(|o| o.key.name == unit) else {
            continue;
        };
        let Some(d) = o.deployment.as_ref() else {
            continue;
        };
        let count = |pointer: &str, default: i64| {
            d.pointer(pointer)
                .and_then(Value::as_i64)
                .unwrap_or(default)
        };
        let want = count("/spec/replicas", 1);
        let have = count("/status/readyReplicas", 0);
        let mut message = format!("{have}/{want} replicas ready");
        if have < want {
            message.push_str(&not_ready_because(o, gitops.crash_report(&unit)));
        } else if let Some(restarts) = gitops.crash_report(&unit) {
            // Ready again after restarts: what restarted it stays in view, as a pod's restart
            // count and last state do on Kubernetes.
            message.push_str(&format!("; {restarts}"));
        }
        health.push(ObjectHealth {
            object: format!("{} {} {}/{}", e.api_version, e.kind, e.namespace, e.name),
            ready: have >= want,
            message,
        });
    }
    health
}
