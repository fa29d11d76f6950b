//! Synthesises a Deployment-shaped object from the containers of a workspace, so that
//! lifecycle.md's rules derive the actual state unchanged, and detects pod failures.
//!
//! Pure: the engine runtime gathers what it observed into [`PodObservation`]; the rules here
//! are unit-tested against `warren_types::lifecycle::derive_actual_state`.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use warren_types::prebuild::STORED_BYTES_ANNOTATION;
use warren_types::reconcile::PodFailure;

use super::plan::{canonical_json, Role};

/// The status of a container that has ended in a way not known yet (its inspection failed
/// or named no exit code): neither running nor finished.
pub const UNKNOWN: &str = "unknown";

/// What the engine shows of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerObservation {
    pub role: Role,
    pub name: String,
    /// The engine's status: `created`, `running`, `paused`, `restarting`, `exited`, `dead`, …
    pub status: String,
    pub exit_code: i64,
    pub oom_killed: bool,
    /// The engine's error for a container that could not start (e.g. an OCI runtime error).
    pub error: String,
    /// The last lines of the container's log when it is not running (empty otherwise).
    pub log_tail: String,
}

impl ContainerObservation {
    fn running(&self) -> bool {
        matches!(
            self.status.as_str(),
            "running" | "paused" | "restarting" | "stopping"
        )
    }
    fn finished(&self) -> bool {
        matches!(self.status.as_str(), "exited" | "dead" | "stopped")
    }
}

/// Everything known of one workspace's pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodObservation {
    pub name: String,
    pub namespace: String,
    /// The desired replicas last applied (0 or 1).
    pub replicas: i32,
    /// The Deployment last applied (metadata and spec are reported back from it).
    pub applied: Option<Value>,
    /// Containers of the current pod hash, in start order (init…, app…).
    pub containers: Vec<ContainerObservation>,
    /// The start sequence (init containers, then the app containers) is under way.
    pub starting: bool,
    /// A failure recorded while applying (image missing, container could not be created).
    pub recorded_failure: Option<PodFailure>,
    /// Every app container runs, but the pod is not usable yet: why (see `ready`).
    pub waiting: Option<String>,
    /// A stopped prebuild's volumes are being saved (`snapshot`): still stopping.
    pub saving: bool,
    /// What a stopped prebuild keeps, once measured: reported as the Deployment's
    /// `warren.dev/stored-bytes` annotation.
    pub stored_bytes: Option<u64>,
}

/// The result of synthesis.
#[derive(Debug, Clone, PartialEq)]
pub struct Synthesised {
    pub deployment: Value,
    pub pod_failure: Option<PodFailure>,
}

/// Sets what a stopped pod keeps (`snapshot::prebuild_space`) as the metadata's
/// [`STORED_BYTES_ANNOTATION`]: the agent's measure only, never one the applied objects claim.
fn stored_bytes_annotation(metadata: &mut Value, pod: &PodObservation) {
    if let Some(annotations) = metadata
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.remove(STORED_BYTES_ANNOTATION);
    }
    if let Some(bytes) = pod
        .stored_bytes
        .filter(|_| pod.replicas == 0 && !pod.saving)
    {
        if !metadata["annotations"].is_object() {
            metadata["annotations"] = json!({});
        }
        metadata["annotations"][STORED_BYTES_ANNOTATION] = json!(bytes.to_string());
    }
}

/// The rules (first match wins), desired replicas R:
///
/// - *ready*: every app container runs, and the pod is usable (`waiting` is `None`).
/// - R=1, ready → status replicas/ready/available/updated 1; `Progressing`
///   `NewReplicaSetAvailable`, `Available` `MinimumReplicasAvailable` → **Running**.
/// - R=1, not ready → replicas 1, unavailable 1; `Progressing` `ReplicaSetUpdated`,
///   `Available` (False) `MinimumReplicasUnavailable` → **Starting** (or **Failed** with a
///   pod failure).
/// - R=0, some container still runs, or a prebuild's volumes are being saved → replicas 1 (available 1 when ready);
///   `Progressing` `ReplicaSetUpdated`, `Available` `MinimumReplicasAvailable` → **Stopping**.
/// - R=0, nothing runs → replicas 0; `Progressing` `NewReplicaSetAvailable`, `Available`
///   `MinimumReplicasAvailable` → **Stopped**.
///
/// `metadata.resourceVersion` is a hash of spec, status, labels and the pod failure, so it
/// changes when, and only when, what is reported changes.
pub fn synthesise(pod: &PodObservation) -> Synthesised {
    // Ready: the app containers exist and all run. An init container alone is a pod whose
    // app containers are not created yet (a look between the creates once said Running).
    let mut apps = pod
        .containers
        .iter()
        .filter(|c| c.role != Role::Init)
        .peekable();
    let ready =
        apps.peek().is_some() && apps.all(|c| c.status == "running") && pod.waiting.is_none();
    let any_running = pod.containers.iter().any(ContainerObservation::running)
        || (pod.replicas == 0 && pod.saving);
    let pod_failure = if pod.replicas == 1 {
        detect_failure(pod, ready)
    } else {
        None
    };

    let condition = |kind: &str, status: &str, reason: &str, message: &str| json!({"type": kind, "status": status, "reason": reason, "message": message});
    let deployment_name = &pod.name;
    let (status, progressing, available) = match (pod.replicas, ready, any_running) {
        (1, true, _) => (
            json!({"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1}),
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &format!("pod of {deployment_name} has successfully progressed"),
            ),
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "the pod is running",
            ),
        ),
        (1, false, _) => (
            json!({"replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1}),
            condition(
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &format!("pod of {deployment_name} is starting"),
            ),
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                pod.waiting
                    .as_deref()
                    .map_or("the pod is not running yet", |w| w),
            ),
        ),
        (_, _, true) => {
            let mut status = json!({"replicas": 1, "updatedReplicas": 1});
            if ready {
                status["readyReplicas"] = json!(1);
                status["availableReplicas"] = json!(1);
            } else {
                status["unavailableReplicas"] = json!(1);
            }
            (
                status,
                condition(
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    &format!("pod of {deployment_name} is stopping"),
                ),
                condition(
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    if pod.saving {
                        "saving the prebuild's volumes"
                    } else {
                        "scaling to zero"
                    },
                ),
            )
        }
        (_, _, false) => (
            json!({"replicas": 0}),
            condition(
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &format!("{deployment_name} is scaled to zero"),
            ),
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "no replicas wanted",
            ),
        ),
    };
    let mut status = status;
    status["observedGeneration"] = json!(1);
    status["conditions"] = json!([available, progressing]);

    let applied = pod.applied.clone().unwrap_or(Value::Null);
    let mut spec = applied.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec.is_object() {
        spec = json!({});
    }
    spec["replicas"] = json!(pod.replicas);
    if spec.get("strategy").is_none() {
        spec["strategy"] = json!({"type": "Recreate"});
    }
    let mut metadata = json!({"name": pod.name, "namespace": pod.namespace, "generation": 1});
    for field in ["labels", "annotations"] {
        if let Some(v) = applied.pointer(&format!("/metadata/{field}")) {
            metadata[field] = v.clone();
        }
    }
    stored_bytes_annotation(&mut metadata, pod);

    metadata["resourceVersion"] = json!(resource_version(&metadata, &spec, &status, &pod_failure));

    let deployment = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": spec,
        "status": status,
    });
    Synthesised {
        deployment,
        pod_failure,
    }
}

/// A version that changes whenever what the Deployment says changes (its metadata, spec and
/// status, and the pod's failure), as the API server's does.
fn resource_version(
    metadata: &Value,
    spec: &Value,
    status: &Value,
    failure: &Option<PodFailure>,
) -> String {
    let mut hasher = Sha256::new();
    for part in [metadata, spec, status] {
        hasher.update(canonical_json(part));
        hasher.update([0]);
    }
    if let Some(f) = failure {
        hasher.update(&f.reason);
        hasher.update([0]);
        hasher.update(&f.message);
    }
    hex::encode(&hasher.finalize()[..8])
}

/// Pod failures, most specific first: a failure recorded while applying (missing image,
/// container could not be created or started), a failed init container, an OOM kill, a
/// restarting container, then any container that exited while the pod should run.
fn detect_failure(pod: &PodObservation, ready: bool) -> Option<PodFailure> {
    if let Some(f) = &pod.recorded_failure {
        return Some(f.clone());
    }
    if ready {
        return None;
    }
    let with_logs = |mut message: String, c: &ContainerObservation| {
        if !c.error.is_empty() {
            message.push_str(&format!(": {}", c.error));
        }
        if !c.log_tail.trim().is_empty() {
            message.push_str(&format!("; last log lines:\n{}", c.log_tail.trim_end()));
        }
        message
    };
    for c in pod.containers.iter().filter(|c| c.role == Role::Init) {
        if c.finished() && c.exit_code != 0 {
            return Some(PodFailure {
                reason: "InitContainerFailed".into(),
                message: with_logs(
                    format!("init container {} exited with code {}", c.name, c.exit_code),
                    c,
                ),
            });
        }
    }
    let apps = || pod.containers.iter().filter(|c| c.role != Role::Init);
    if let Some(c) = apps().find(|c| c.oom_killed) {
        return Some(PodFailure {
            reason: "OOMKilled".into(),
            message: with_logs(
                format!("container {} ran out of memory and was killed", c.name),
                c,
            ),
        });
    }
    if let Some(c) = apps().find(|c| c.status == "restarting") {
        return Some(PodFailure {
            reason: "CrashLoopBackOff".into(),
            message: with_logs(
                format!("container {} keeps exiting and restarting", c.name),
                c,
            ),
        });
    }
    // While the start sequence runs, containers left exited by an earlier stop are about to
    // be started again: not a failure.
    if pod.starting {
        return None;
    }
    if apps().next().is_none() {
        return Some(PodFailure {
            reason: "ContainersMissing".into(),
            message: "the workspace's containers were removed outside Warren; the next full \
                      reconcile creates them again"
                .into(),
        });
    }
    if let Some(c) = apps().find(|c| c.finished()) {
        let reason = if c.exit_code == 0 {
            "ContainerExited"
        } else {
            "Error"
        };
        return Some(PodFailure {
            reason: reason.into(),
            message: with_logs(
                format!(
                    "container {} exited {} while the workspace should run",
                    c.name,
                    exit_words(c.exit_code)
                ),
                c,
            ),
        });
    }
    None
}

/// How a container's exit is told. Podman records -1 when the OCI runtime no longer knows
/// the container and the exit file of its monitor is missing: no code of the command's.
fn exit_words(code: i64) -> String {
    if code < 0 {
        "without an exit code (the engine lost it)".to_owned()
    } else {
        format!("with code {code}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::lifecycle::derive_actual_state;
    use warren_types::reconcile::WorkspaceAgentInfo;
    use warren_types::state::ActualState;

    fn container(role: Role, name: &str, status: &str, exit_code: i64) -> ContainerObservation {
        ContainerObservation {
            role,
            name: name.into(),
            status: status.into(),
            exit_code,
            oom_killed: false,
            error: String::new(),
            log_tail: String::new(),
        }
    }

    fn pod(replicas: i32, statuses: [&str; 3], init_exit: i64) -> PodObservation {
        PodObservation {
            name: "calm-otter-x1".into(),
            namespace: "warren-ws-calm-otter-x1".into(),
            replicas,
            applied: Some(json!({
                "metadata": {"name": "calm-otter-x1", "labels": {"warren.dev/agent-id": "7"}},
                "spec": {"replicas": 1, "strategy": {"type": "Recreate"}}
            })),
            containers: vec![
                container(Role::Init, "clone", statuses[1], init_exit),
                container(Role::App, "dev", statuses[0], 0),
                container(Role::App, "tools", statuses[2], 0),
            ],
            starting: false,
            recorded_failure: None,
            waiting: None,
            saving: false,
            stored_bytes: None,
        }
    }

    fn derive(s: &Synthesised) -> ActualState {
        derive_actual_state(&WorkspaceAgentInfo {
            name: "calm-otter-x1".into(),
            namespace: "n".into(),
            latest_k8s_deployment_info: Some(s.deployment.clone()),
            termination_progress: None,
            error_details: None,
            pod_failure: s.pod_failure.clone(),
            pod_waiting: None,
        })
    }

    #[test]
    fn a_stopped_pod_reports_only_the_space_the_agent_measured() {
        let annotation = |p: &PodObservation| {
            synthesise(p)
                .deployment
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(STORED_BYTES_ANNOTATION))
                .cloned()
        };
        let mut stopped = pod(0, ["exited", "exited", "exited"], 0);
        // The applied objects' own claim is never reported.
        stopped.applied.as_mut().unwrap()["metadata"]["annotations"] =
            json!({ STORED_BYTES_ANNOTATION: "1", "other": "kept" });
        assert_eq!(annotation(&stopped), None);
        stopped.stored_bytes = Some(1 << 30);
        assert_eq!(annotation(&stopped), Some(json!("1073741824")));
        let other = synthesise(&stopped).deployment["metadata"]["annotations"]["other"].clone();
        assert_eq!(other, json!("kept"));
        // Not while its snapshots are saved, nor once it runs again.
        stopped.saving = true;
        assert_eq!(annotation(&stopped), None);
        let mut running = pod(1, ["running", "exited", "running"], 0);
        running.stored_bytes = Some(1 << 30);
        assert_eq!(annotation(&running), None);
    }

    #[test]
    fn each_situation_derives_the_expected_state() {
        use ActualState::*;
        let mut starting = pod(1, ["running", "running", "created"], 0);
        starting.starting = true;
        let mut restarting_after_stop = pod(1, ["running", "exited", "exited"], 0);
        restarting_after_stop.starting = true;
        let mut image_missing = pod(1, ["created", "created", "created"], 0);
        image_missing.containers.clear();
        image_missing.recorded_failure = Some(PodFailure {
            reason: "ErrImagePull".into(),
            message: "image x".into(),
        });
        let mut oom = pod(1, ["running", "exited", "exited"], 0);
        oom.containers[2].oom_killed = true;
        oom.containers[2].exit_code = 137;
        let mut crashed = pod(1, ["running", "exited", "exited"], 0);
        crashed.containers[2].exit_code = 3;
        crashed.containers[2].log_tail = "boom\n".into();
        let cases = [
            (
                "running",
                pod(1, ["running", "exited", "running"], 0),
                Running,
                None,
            ),
            ("starting", starting, Starting, None),
            (
                // The init container created, the app containers not yet: a look between
                // the creates once said Running.
                "only the init container created",
                {
                    let mut p = pod(1, ["created", "created", "created"], 0);
                    p.starting = true;
                    p.containers.retain(|c| c.role == Role::Init);
                    p
                },
                Starting,
                None,
            ),
            (
                "just created",
                {
                    let mut p = pod(1, ["created", "created", "created"], 0);
                    p.starting = true;
                    p
                },
                Starting,
                None,
            ),
            ("start after stop", restarting_after_stop, Starting, None),
            (
                "stopping",
                pod(0, ["running", "exited", "running"], 0),
                Stopping,
                None,
            ),
            (
                "stopping, app gone",
                pod(0, ["running", "exited", "exited"], 0),
                Stopping,
                None,
            ),
            (
                "stopped",
                pod(0, ["exited", "exited", "exited"], 0),
                Stopped,
                None,
            ),
            (
                // The server marks a prebuild ready once it is stopped: not before its
                // volumes are saved.
                "stopped, a prebuild's volumes being saved",
                {
                    let mut p = pod(0, ["exited", "exited", "exited"], 0);
                    p.saving = true;
                    p
                },
                Stopping,
                None,
            ),
            (
                "stopped with exit codes",
                pod(0, ["exited", "exited", "exited"], 137),
                Stopped,
                None,
            ),
            (
                "init failed",
                pod(1, ["running", "exited", "created"], 2),
                Failed,
                Some("InitContainerFailed"),
            ),
            ("crashed", crashed, Failed, Some("Error")),
            (
                "exited cleanly",
                pod(1, ["running", "exited", "exited"], 0),
                Failed,
                Some("ContainerExited"),
            ),
            (
                "restarting",
                pod(1, ["running", "exited", "restarting"], 0),
                Failed,
                Some("CrashLoopBackOff"),
            ),
            ("oom", oom, Failed, Some("OOMKilled")),
            ("image missing", image_missing, Failed, Some("ErrImagePull")),
            (
                "containers removed",
                {
                    let mut p = pod(1, ["running", "exited", "running"], 0);
                    p.containers.clear();
                    p
                },
                Failed,
                Some("ContainersMissing"),
            ),
            (
                "not created yet",
                {
                    let mut p = pod(1, ["running", "exited", "running"], 0);
                    p.containers.clear();
                    p.starting = true;
                    p
                },
                Starting,
                None,
            ),
        ];
        for (label, p, want, reason) in cases {
            let s = synthesise(&p);
            assert_eq!(derive(&s), want, "{label}: {:#}", s.deployment);
            assert_eq!(
                s.pod_failure.as_ref().map(|f| f.reason.as_str()),
                reason,
                "{label}"
            );
            assert_eq!(
                s.deployment["spec"]["replicas"],
                json!(p.replicas),
                "{label}"
            );
            assert_eq!(
                s.deployment["metadata"]["labels"]["warren.dev/agent-id"], "7",
                "{label}"
            );
        }
    }

    #[test]
    fn an_exit_code_the_engine_lost_is_not_told_as_the_commands() {
        let mut p = pod(1, ["running", "exited", "exited"], 0);
        p.containers[2].exit_code = -1;
        let f = synthesise(&p).pod_failure.expect("a failure");
        assert!(
            f.message
                .contains("container tools exited without an exit code (the engine lost it)"),
            "{}",
            f.message
        );
    }

    #[test]
    fn failure_messages_carry_the_log_tail() {
        let mut p = pod(1, ["running", "exited", "exited"], 0);
        p.containers[2].exit_code = 3;
        p.containers[2].log_tail = "cannot open /projects/x\n".into();
        let f = synthesise(&p).pod_failure.expect("a failure");
        assert_eq!(f.reason, "Error");
        assert!(
            f.message.contains("container tools exited with code 3"),
            "{}",
            f.message
        );
        assert!(
            f.message.contains("cannot open /projects/x"),
            "{}",
            f.message
        );
    }

    #[test]
    fn resource_version_changes_when_and_only_when_the_report_changes() {
        let running = synthesise(&pod(1, ["running", "exited", "running"], 0));
        let again = synthesise(&pod(1, ["running", "exited", "running"], 0));
        assert_eq!(running, again);
        let stopping = synthesise(&pod(0, ["running", "exited", "running"], 0));
        let stopped = synthesise(&pod(0, ["exited", "exited", "exited"], 0));
        let rv = |s: &Synthesised| s.deployment["metadata"]["resourceVersion"].clone();
        assert_ne!(rv(&running), rv(&stopping));
        assert_ne!(rv(&stopping), rv(&stopped));
        // Same Deployment status, but a pod failure appears: the report changes.
        let mut starting = pod(1, ["running", "running", "created"], 0);
        starting.starting = true;
        let failed = pod(1, ["running", "exited", "created"], 1);
        let (a, b) = (synthesise(&starting), synthesise(&failed));
        assert_eq!(a.deployment["status"], b.deployment["status"]);
        assert_ne!(rv(&a), rv(&b));
    }
}
