//! An in-memory runtime whose transitions a test steps: a workspace becomes ready, crashes,
//! fails to apply, finishes deleting. It synthesises Deployment objects whose status follows
//! lifecycle.md's derivation rules, so the server derives the same states it would from a
//! real cluster. `dial` connects to TCP addresses a test registers per endpoint; `exec` runs
//! the command as a local child process (no PTY; with `tty`, CR in the input becomes LF and
//! LF in the output CR LF, as a terminal's line discipline would do) in the system's
//! temporary directory, or where [`SimulatedRuntime::enable_exec`] says, unless a test
//! turned it off with [`SimulatedRuntime::disable_exec`] or made every session an echo with
//! [`SimulatedRuntime::echo_exec`].

use super::{
    ByteStream, ExecOutput, ExecSession, ExecSpec, ObservedWorkspace, RuntimeError, WorkspaceKey,
    WorkspaceRuntime,
};
use async_trait::async_trait;
use futures::{FutureExt, StreamExt};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use warren_types::reconcile::{PodFailure, TerminationProgress};
use warren_types::relay::{ExecExit, TerminalSize};

mod workspace_runtime;

/// A test's view of one simulated workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedWorkspace {
    pub objects: Vec<Value>,
    pub replicas: i64,
    /// Whether the pods match `replicas` (a finished rollout).
    pub settled: bool,
    pub pod_failure: Option<PodFailure>,
    pub deadline_exceeded: bool,
    pub terminating: bool,
    pub apply_count: u64,
    pub resource_version: u64,
}

#[derive(Debug, Default)]
struct State {
    workspaces: BTreeMap<WorkspaceKey, SimulatedWorkspace>,
    next_version: u64,
    fail_next_apply: HashMap<WorkspaceKey, String>,
    endpoints: HashMap<(WorkspaceKey, u16), SocketAddr>,
    auto_settle: bool,
    auto_delete: bool,
    fail_list: Option<String>,
    delete_calls: u64,
    /// What `capacity` answers.
    capacity: Option<warren_types::reconcile::HostCapacity>,
    /// Deletions of these workspaces cannot progress, for this reason.
    delete_blocked: HashMap<WorkspaceKey, String>,
    /// Working directory of exec'd processes (default: the temporary directory).
    exec_dir: Option<std::path::PathBuf>,
    exec_disabled: bool,
    /// Every exec is a terminal that writes back what it reads (`echo_exec`).
    exec_echo: bool,
    /// What `logs` answers, per workspace and container (`None`: the main one).
    logs: HashMap<(WorkspaceKey, Option<String>), String>,
    /// Objects of devfile components, as last applied.
    components: BTreeMap<(WorkspaceKey, String), Vec<serde_json::Value>>,
    /// GitOps objects by identity (group, kind, namespace, name), as a cluster would hold
    /// them; each carries its source's label.
    gitops: BTreeMap<(String, String, String, String), serde_json::Value>,
    /// What `usage` answers.
    usage: Vec<crate::runtime::WorkspaceUsage>,
}

#[derive(Debug)]
pub struct SimulatedRuntime {
    state: Mutex<State>,
    /// What `append_logs` adds, for followers.
    log_appends: tokio::sync::broadcast::Sender<((WorkspaceKey, Option<String>), String)>,
    /// Shared with running exec sessions, which outlive any borrow of the runtime.
    resizes: Arc<Mutex<Vec<TerminalSize>>>,
    changes: watch::Sender<u64>,
}

impl Default for SimulatedRuntime {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SimulatedFailure(String);

impl SimulatedRuntime {
    /// A runtime where nothing happens until the test steps it.
    pub fn new() -> Self {
        SimulatedRuntime {
            state: Mutex::new(State::default()),
            log_appends: tokio::sync::broadcast::channel(256).0,
            resizes: Arc::default(),
            changes: watch::channel(0).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes a workspace and announces it, with a new resource version.
    fn mutate(&self, key: &WorkspaceKey, f: impl FnOnce(&mut SimulatedWorkspace)) -> bool {
        let mut st = self.lock();
        st.next_version += 1;
        let v = st.next_version;
        let Some(ws) = st.workspaces.get_mut(key) else {
            return false;
        };
        f(ws);
        ws.resource_version = v;
        drop(st);
        self.changes.send_modify(|c| *c += 1);
        true
    }

    /// What the workspaces' containers use from now on, as `usage` reports it.
    pub fn set_usage(&self, usage: Vec<crate::runtime::WorkspaceUsage>) {
        self.lock().usage = usage;
    }

    pub(crate) fn usage_now(&self) -> Vec<crate::runtime::WorkspaceUsage> {
        self.lock().usage.clone()
    }

    /// Rollouts finish as soon as they start.
    pub fn set_auto_settle(&self, on: bool) {
        self.lock().auto_settle = on;
    }

    /// Deletions finish as soon as they start.
    pub fn set_auto_delete(&self, on: bool) {
        self.lock().auto_delete = on;
    }

    /// The rollout finishes: the pods match the wanted replicas (Running or Stopped).
    pub fn settle(&self, key: &WorkspaceKey) -> bool {
        self.mutate(key, |w| {
            w.settled = true;
            w.pod_failure = None;
            w.deadline_exceeded = false;
        })
    }

    /// The workspace's container crashes and keeps restarting.
    pub fn crash(&self, key: &WorkspaceKey, reason: &str, message: &str) -> bool {
        let failure = PodFailure {
            reason: reason.into(),
            message: message.into(),
        };
        self.mutate(key, |w| {
            w.settled = false;
            w.pod_failure = Some(failure);
        })
    }

    /// The rollout exceeds its progress deadline.
    pub fn exceed_deadline(&self, key: &WorkspaceKey) -> bool {
        self.mutate(key, |w| w.deadline_exceeded = true)
    }

    /// The next `apply` of this workspace fails with `message`.
    pub fn fail_next_apply(&self, key: &WorkspaceKey, message: &str) {
        self.lock()
            .fail_next_apply
            .insert(key.clone(), message.into());
    }

    /// `list` fails until cleared (the runtime is unreachable).
    pub fn set_list_failure(&self, message: Option<&str>) {
        self.lock().fail_list = message.map(Into::into);
    }

    /// What the runtime says one workspace can use at most (`None`: unknown).
    pub fn set_capacity(&self, capacity: Option<warren_types::reconcile::HostCapacity>) {
        self.lock().capacity = capacity;
    }

    /// Deleting the workspace cannot progress (`Some(reason)`), or can again (`None`, which
    /// is announced as a change, like the engine's event when the blocker goes away).
    pub fn block_deletion(&self, key: &WorkspaceKey, reason: Option<&str>) {
        match reason {
            Some(r) => {
                self.lock().delete_blocked.insert(key.clone(), r.into());
            }
            None => {
                self.lock().delete_blocked.remove(key);
                self.changes.send_modify(|c| *c += 1);
            }
        }
    }

    /// A deletion under way finishes: the workspace is gone.
    pub fn finish_deleting(&self, key: &WorkspaceKey) -> bool {
        let removed = {
            let mut st = self.lock();
            match st.workspaces.get(key) {
                Some(w) if w.terminating => st.workspaces.remove(key).is_some(),
                _ => false,
            }
        };
        if removed {
            self.changes.send_modify(|c| *c += 1);
        }
        removed
    }

    /// What the workspace's `container` (`None`: the main one) has written, for `logs`.
    pub fn set_logs(&self, key: &WorkspaceKey, container: Option<&str>, text: &str) {
        self.lock()
            .logs
            .insert((key.clone(), container.map(str::to_owned)), text.to_owned());
    }

    /// The container writes `text` now: appended, and sent to whoever follows.
    pub fn append_logs(&self, key: &WorkspaceKey, container: Option<&str>, text: &str) {
        let id = (key.clone(), container.map(str::to_owned));
        let mut st = self.lock();
        st.logs.entry(id.clone()).or_default().push_str(text);
        // Sent under the lock, so a follower subscribed under it misses nothing.
        let _ = self.log_appends.send((id, text.to_owned()));
    }

    /// `dial(key, port)` connects to `addr`.
    pub fn set_endpoint(&self, key: &WorkspaceKey, port: u16, addr: SocketAddr) {
        self.lock().endpoints.insert((key.clone(), port), addr);
    }

    /// The objects last applied for devfile component `component` of `key`.
    /// The GitOps objects of `source`, as applied (labels included).
    pub fn gitops_objects(&self, source: &str) -> Vec<serde_json::Value> {
        self.lock()
            .gitops
            .values()
            .filter(|o| {
                o.pointer(&format!(
                    "/metadata/labels/{}",
                    json_pointer(super::GITOPS_SOURCE_LABEL)
                ))
                .and_then(serde_json::Value::as_str)
                    == Some(source)
            })
            .cloned()
            .collect()
    }

    /// Any object of the simulated cluster by kind and name.
    pub fn gitops_object(&self, kind: &str, name: &str) -> Option<serde_json::Value> {
        self.lock()
            .gitops
            .iter()
            .find(|((_, k, _, n), _)| k == kind && n == name)
            .map(|(_, o)| o.clone())
    }

    /// Changes an object by hand, as an operator with kubectl would (drift).
    pub fn edit_gitops_object(
        &self,
        kind: &str,
        name: &str,
        edit: impl FnOnce(&mut serde_json::Value),
    ) {
        let mut state = self.lock();
        if let Some(o) = state
            .gitops
            .iter_mut()
            .find(|((_, k, _, n), _)| k == kind && n == name)
            .map(|(_, o)| o)
        {
            edit(o);
        }
    }

    /// Puts an object no source made (GitOps must never touch it).
    pub fn put_foreign_object(&self, object: serde_json::Value) {
        let key = identity(
            &object,
            object
                .pointer("/metadata/namespace")
                .and_then(serde_json::Value::as_str),
        );
        self.lock().gitops.insert(key, object);
    }

    pub fn component_objects(
        &self,
        key: &WorkspaceKey,
        component: &str,
    ) -> Option<Vec<serde_json::Value>> {
        self.lock()
            .components
            .get(&(key.clone(), component.to_owned()))
            .cloned()
    }

    /// Lets `exec` run commands as local child processes in `dir` (a test's temporary
    /// directory).
    pub fn enable_exec(&self, dir: impl Into<std::path::PathBuf>) {
        let mut st = self.lock();
        st.exec_dir = Some(dir.into());
        st.exec_disabled = false;
    }

    /// `exec` fails from now on, as on a runtime that refuses it.
    pub fn disable_exec(&self) {
        self.lock().exec_disabled = true;
    }

    /// Every `exec` from now on, whatever its command, is a terminal that writes back each
    /// byte it reads and ends when its input does: terminals and SSH sessions to simulated
    /// workspaces carry load and measure echo without anything running on the host (a scale
    /// test's agents, `warren scaletest`).
    pub fn echo_exec(&self) {
        let mut st = self.lock();
        st.exec_echo = true;
        st.exec_disabled = false;
    }

    /// Every terminal size exec sessions asked for, initial sizes and resizes, in order.
    pub fn exec_resizes(&self) -> Vec<TerminalSize> {
        self.resizes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn workspace(&self, key: &WorkspaceKey) -> Option<SimulatedWorkspace> {
        self.lock().workspaces.get(key).cloned()
    }

    pub fn keys(&self) -> Vec<WorkspaceKey> {
        self.lock().workspaces.keys().cloned().collect()
    }

    pub fn delete_calls(&self) -> u64 {
        self.lock().delete_calls
    }

    /// A Deployment as the cluster would return it, status per lifecycle.md's rules.
    fn deployment(key: &WorkspaceKey, w: &SimulatedWorkspace) -> Value {
        let mut dep = w
            .objects
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some("Deployment"))
            .cloned()
            .unwrap_or_else(|| json!({"apiVersion": "apps/v1", "kind": "Deployment"}));
        dep["metadata"]["name"] = json!(key.name);
        dep["metadata"]["namespace"] = json!(key.namespace);
        dep["metadata"]["resourceVersion"] = json!(w.resource_version.to_string());
        dep["spec"]["replicas"] = json!(w.replicas);
        let (progressing, available, avail, unavail) = if w.deadline_exceeded {
            (
                "ProgressDeadlineExceeded",
                "MinimumReplicasUnavailable",
                0,
                w.replicas,
            )
        } else if w.pod_failure.is_some() {
            (
                "NewReplicaSetAvailable",
                "MinimumReplicasUnavailable",
                0,
                w.replicas,
            )
        } else if w.settled {
            (
                "NewReplicaSetAvailable",
                "MinimumReplicasAvailable",
                w.replicas,
                0,
            )
        } else {
            (
                "ReplicaSetUpdated",
                "MinimumReplicasUnavailable",
                0,
                w.replicas,
            )
        };
        dep["status"] = json!({
            "observedGeneration": 1,
            "replicas": w.replicas,
            "availableReplicas": avail,
            "unavailableReplicas": unavail,
            "readyReplicas": avail,
            "conditions": [
                {"type": "Available", "status": if avail == w.replicas { "True" } else { "False" }, "reason": available},
                {"type": "Progressing", "status": if progressing == "ProgressDeadlineExceeded" { "False" } else { "True" }, "reason": progressing},
            ],
        });
        dep
    }
}

impl SimulatedRuntime {
    /// An exec session that writes back what it reads ([`SimulatedRuntime::echo_exec`]). Its
    /// input and output are one bounded pipe, so a client that stops reading holds up its own
    /// writes (back-pressure through the relay), never the agent's memory.
    fn echo_session(&self, spec: &ExecSpec) -> ExecSession {
        let (writer, reader) = tokio::io::duplex(64 * 1024);
        let resizes = self.resizes.clone();
        let record = move |size: TerminalSize| {
            resizes.lock().unwrap_or_else(|p| p.into_inner()).push(size);
        };
        if let Some(size) = spec.size.filter(|_| spec.tty) {
            record(size);
        }
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        // Drained at once so sizes never hold up the input; ends with the session.
        tokio::spawn(async move {
            while let Some(size) = sizes.recv().await {
                record(size);
            }
        });
        let output = tokio_util::io::ReaderStream::new(reader)
            .map(|r| {
                r.map(ExecOutput::Stdout)
                    .map_err(|e| RuntimeError::Runtime {
                        context: "reading a simulated echo session".into(),
                        source: Box::new(e),
                    })
            })
            .boxed();
        ExecSession {
            stdin: Box::pin(writer),
            output,
            resize,
            // The output ends when the input does; the session then exits cleanly.
            exit: futures::future::ready(Ok(ExecExit {
                code: Some(0),
                message: None,
            }))
            .boxed(),
        }
    }
}

fn exec_error(key: &WorkspaceKey, message: String) -> RuntimeError {
    RuntimeError::Runtime {
        context: format!("exec in workspace {key}"),
        source: Box::new(SimulatedFailure(message)),
    }
}

fn apply_error(key: &WorkspaceKey, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Apply {
        workspace: key.to_string(),
        message: message.into(),
    }
}

/// `~` and `/` escaped for a JSON pointer segment.
fn json_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// An object's identity in the simulated cluster.
fn identity(o: &serde_json::Value, namespace: Option<&str>) -> (String, String, String, String) {
    let s = |p: &str| {
        o.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let api = s("/apiVersion");
    let (group, _) = warren_gitops::kinds::split_api_version(&api);
    (
        group.to_owned(),
        s("/kind"),
        namespace.unwrap_or_default().to_owned(),
        s("/metadata/name"),
    )
}

impl SimulatedRuntime {
    /// The simulated cluster's GitOps sync: rights, labels, unchanged detection, prune of
    /// exactly what this source applied before.
    fn gitops_sync(&self, sync: &super::GitopsSync<'_>) -> super::GitopsOutcome {
        let rights = warren_gitops::Rights::new(sync.source, sync.policy);
        let mut out = super::GitopsOutcome::default();
        let mut state = self.lock();
        let mut wanted = std::collections::BTreeSet::new();
        for m in sync.objects {
            let namespace = match rights.admit(m, None) {
                Ok(ns) => ns,
                Err(message) => {
                    out.errors.push(warren_types::gitops::SyncError {
                        file: Some(m.file.clone()),
                        object: Some(m.display()),
                        message,
                    });
                    // Refused now, but not deleted because of it.
                    wanted.insert(identity(&m.object, m.namespace()));
                    continue;
                }
            };
            let mut object = m.object.clone();
            if let Some(ns) = &namespace {
                object["metadata"]["namespace"] = serde_json::json!(ns);
            }
            let labels = object["metadata"].as_object_mut().map(|meta| {
                meta.entry("labels")
                    .or_insert_with(|| serde_json::json!({}))
            });
            if let Some(labels) = labels {
                labels[super::GITOPS_AGENT_LABEL] = serde_json::json!(sync.agent);
                labels[super::GITOPS_SOURCE_LABEL] = serde_json::json!(sync.source.name);
            }
            let key = identity(&object, namespace.as_deref());
            match state.gitops.get(&key) {
                Some(existing) if *existing == object => out.unchanged += 1,
                Some(existing)
                    if existing
                        .pointer(&format!(
                            "/metadata/labels/{}",
                            json_pointer(super::GITOPS_SOURCE_LABEL)
                        ))
                        .and_then(serde_json::Value::as_str)
                        .is_some_and(|s| s != sync.source.name) =>
                {
                    out.errors.push(warren_types::gitops::SyncError {
                        file: Some(m.file.clone()),
                        object: Some(m.display()),
                        message: "another source manages this object".into(),
                    });
                    continue;
                }
                _ => {
                    state.gitops.insert(key.clone(), object);
                    out.applied += 1;
                }
            }
            out.health.push(warren_types::gitops::ObjectHealth {
                object: m.display(),
                ready: true,
                message: String::new(),
            });
            wanted.insert(key);
        }
        if sync.prune {
            let pointer = format!(
                "/metadata/labels/{}",
                json_pointer(super::GITOPS_SOURCE_LABEL)
            );
            let gone: Vec<_> = state
                .gitops
                .iter()
                .filter(|(k, o)| {
                    !wanted.contains(*k)
                        && o.pointer(&pointer).and_then(serde_json::Value::as_str)
                            == Some(sync.source.name.as_str())
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                state.gitops.remove(&k);
                out.pruned += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::lifecycle::derive_from_deployment;
    use warren_types::ActualState;

    fn key() -> WorkspaceKey {
        WorkspaceKey {
            name: "w".into(),
            namespace: "n".into(),
        }
    }

    fn objects(replicas: i64) -> Vec<Value> {
        vec![
            json!({"kind": "Deployment", "metadata": {"name": "w"}, "spec": {"replicas": replicas}}),
        ]
    }

    async fn state(rt: &SimulatedRuntime) -> ActualState {
        let list = rt.list().await.unwrap();
        derive_from_deployment(list[0].deployment.as_ref().unwrap())
    }

    #[tokio::test]
    async fn steps_drive_the_derived_state() {
        let rt = SimulatedRuntime::new();
        rt.apply(&key(), &objects(1)).await.unwrap();
        assert_eq!(state(&rt).await, ActualState::Starting);
        rt.settle(&key());
        assert_eq!(state(&rt).await, ActualState::Running);
        rt.apply(&key(), &objects(0)).await.unwrap();
        assert_eq!(state(&rt).await, ActualState::Stopping);
        rt.settle(&key());
        assert_eq!(state(&rt).await, ActualState::Stopped);
        rt.exceed_deadline(&key());
        assert_eq!(state(&rt).await, ActualState::Failed);
        rt.fail_next_apply(&key(), "bad object");
        assert!(matches!(
            rt.apply(&key(), &objects(1)).await,
            Err(RuntimeError::Apply { .. })
        ));
        assert_eq!(
            rt.delete(&key()).await.unwrap(),
            TerminationProgress::Terminating
        );
        assert_eq!(
            rt.delete(&key()).await.unwrap(),
            TerminationProgress::Terminating
        );
        assert!(rt.finish_deleting(&key()));
        assert_eq!(
            rt.delete(&key()).await.unwrap(),
            TerminationProgress::Terminated
        );
        assert!(rt.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn an_echo_session_writes_back_what_it_reads_and_runs_nothing() {
        use tokio::io::AsyncWriteExt;
        let rt = SimulatedRuntime::new();
        rt.set_auto_settle(true);
        rt.echo_exec();
        rt.apply(&key(), &objects(1)).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let spec = ExecSpec {
            container: None,
            command: vec!["touch".into(), marker.display().to_string()],
            env: vec![],
            tty: true,
            size: Some(TerminalSize { cols: 80, rows: 24 }),
        };
        let mut session = rt.exec(&key(), spec).await.unwrap();
        session.stdin.write_all(b"typed\r").await.unwrap();
        session.stdin.shutdown().await.unwrap();
        let mut out = vec![];
        while let Some(chunk) = session.output.next().await {
            match chunk.unwrap() {
                ExecOutput::Stdout(b) | ExecOutput::Stderr(b) => out.extend_from_slice(&b),
            }
        }
        assert_eq!(out, b"typed\r", "byte for byte, no line discipline");
        assert_eq!(session.exit.await.unwrap().code, Some(0));
        assert!(!marker.exists(), "the command never ran");
        assert_eq!(rt.exec_resizes(), [TerminalSize { cols: 80, rows: 24 }]);
    }

    #[tokio::test]
    async fn resource_version_changes_only_with_state() {
        let rt = SimulatedRuntime::new();
        let mut changes = rt.changes();
        rt.apply(&key(), &objects(1)).await.unwrap();
        assert!(changes.has_changed().unwrap());
        changes.borrow_and_update();
        let v1 = rt.workspace(&key()).unwrap().resource_version;
        rt.apply(&key(), &objects(1)).await.unwrap();
        assert!(!changes.has_changed().unwrap());
        assert_eq!(rt.workspace(&key()).unwrap().resource_version, v1);
        rt.crash(&key(), "CrashLoopBackOff", "exit 1");
        assert!(rt.workspace(&key()).unwrap().resource_version > v1);
        assert!(rt.list().await.unwrap()[0].pod_failure.is_some());
    }
}
