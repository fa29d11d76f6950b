//! The seam between the agent's reconciler and a workspace runtime (engine, Kubernetes, simulated).
//!
//! A runtime receives the same Kubernetes objects whichever runtime it is, and reports a
//! Deployment-shaped object back, so the server never needs to know which runtime runs a
//! workspace (architecture.md). Every method is idempotent: the reconciler may call it again
//! after any failure or restart, and a runtime rebuilds everything it knows from the runtime
//! itself (labels), never from memory alone.

pub mod engine;
pub mod host;
pub mod kubernetes;

use async_trait::async_trait;
use std::fmt;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncWrite};
use warren_types::reconcile::{PodFailure, PodWaiting, TerminationProgress};

/// Label every object and container of a workspace carries: the owning agent.
pub const AGENT_ID_LABEL: &str = "warren.dev/agent-id";
/// Label every object and container of a workspace carries: the workspace id.
pub const WORKSPACE_ID_LABEL: &str = "warren.dev/workspace-id";

/// What one running container of a workspace uses. One series per container, not a sum:
/// a sum would fall when one container restarts, which Prometheus reads as a counter reset.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkspaceUsage {
    pub workspace: WorkspaceKey,
    /// The container's name in the pod spec.
    pub container: String,
    /// CPU time used since the container started.
    pub cpu_seconds: f64,
    /// Memory in use now, page cache that can be dropped excluded (the working set).
    pub memory_bytes: u64,
}

/// The Prometheus text of `usage`: `warren_workspace_cpu_seconds_total` and
/// `warren_workspace_memory_bytes` by namespace, workspace and container. Rendered at each
/// scrape, so a workspace that is gone leaves no stale series behind.
pub fn usage_metrics(usage: &[WorkspaceUsage]) -> String {
    fn escape(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }
    let mut out = String::new();
    if usage.is_empty() {
        return out;
    }
    let labels = |u: &WorkspaceUsage| {
        format!(
            "namespace=\"{}\",workspace=\"{}\",container=\"{}\"",
            escape(&u.workspace.namespace),
            escape(&u.workspace.name),
            escape(&u.container)
        )
    };
    type Value = fn(&WorkspaceUsage) -> String;
    // Each family's header written out whole: the metrics test finds recorded names by their
    // `# TYPE` lines.
    let families: [(&str, &str, Value); 2] = [
        (
            "warren_workspace_cpu_seconds_total",
            "# HELP warren_workspace_cpu_seconds_total CPU time used by the workspace's containers.\n\
             # TYPE warren_workspace_cpu_seconds_total counter\n",
            |u| u.cpu_seconds.to_string(),
        ),
        (
            "warren_workspace_memory_bytes",
            "# HELP warren_workspace_memory_bytes Memory the workspace's containers use.\n\
             # TYPE warren_workspace_memory_bytes gauge\n",
            |u| u.memory_bytes.to_string(),
        ),
    ];
    for (name, header, value) in families {
        out.push_str(header);
        for u in usage {
            out.push_str(&format!("{name}{{{}}} {}\n", labels(u), value(u)));
        }
    }
    out
}

/// Identifies one workspace on a runtime.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkspaceKey {
    pub name: String,
    pub namespace: String,
}

impl fmt::Display for WorkspaceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// What a runtime holds of one workspace right now.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedWorkspace {
    pub key: WorkspaceKey,
    /// The whole Deployment object (metadata with `resourceVersion`, spec, status): the real
    /// one on Kubernetes, a faithful synthesised one on an engine; `None` when it is gone.
    pub deployment: Option<serde_json::Value>,
    /// A pod-level failure the Deployment status alone would hide.
    pub pod_failure: Option<PodFailure>,
    /// Why its pod waits without having failed (no node can take it).
    pub pod_waiting: Option<PodWaiting>,
    /// Set while the runtime still deletes the workspace's objects.
    pub terminating: bool,
}

/// A bidirectional byte stream to a workspace endpoint.
pub trait ByteStream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> ByteStream for T {}

/// A process to start in a workspace (the web terminal, SSH sessions, `sftp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// The container; `None` means the workspace's main container.
    pub container: Option<String>,
    /// argv; never empty.
    pub command: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Allocate a pseudo-terminal (stdout and stderr are then one stream).
    pub tty: bool,
    pub size: Option<warren_types::relay::TerminalSize>,
}

/// Environment variable carrying an exec's marker: when a session is dropped while its
/// process runs, a second exec finds the process by it and hangs it up (engine and
/// Kubernetes exec; see `engine/exec.rs`).
pub const EXEC_MARKER_ENV: &str = "WARREN_EXEC_SESSION";
/// Finds the process an exec started by its marker (`$1`) and sends `SIGHUP` to its process
/// group (runc makes it a group and session leader), as a terminal hangup does. Needs only
/// `/bin/sh`, `tr`, `grep` and `/proc`; where they are missing it does nothing.
pub const HANG_UP_SCRIPT: &str = r#"for d in /proc/[0-9]*; do
  tr '\0' '\n' < "$d/environ" 2>/dev/null | grep -qx "WARREN_EXEC_SESSION=$1" || continue
  grep -q '^PPid:[[:space:]]*0$' "$d/status" 2>/dev/null || continue
  kill -HUP "-${d#/proc/}" 2>/dev/null
done
exit 0"#;
/// Runs a runtime's hang-up (see [`HANG_UP_SCRIPT`]) for at most 10 s: it is best effort, and
/// a stuck engine or API server must not keep the task forever.
pub(crate) async fn bounded_hang_up(hang_up: impl std::future::Future<Output = ()>) {
    if tokio::time::timeout(std::time::Duration::from_secs(10), hang_up)
        .await
        .is_err()
    {
        tracing::debug!("hanging up an exec timed out");
    }
}
/// A fresh marker for one exec session.
pub fn exec_marker() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// argv that sets `env` and, with a size, the terminal size before it runs `command`, for
/// exec APIs that lack them (Kubernetes has no exec environment; Podman ignores the initial
/// console size and a process that asks at once would see 0×0). Needs only `/bin/sh` in the
/// image; a missing `stty` loses just the early size. `command` is run with `exec`, unchanged.
/// Environment names must be shell variable names.
pub fn shell_wrapped(
    command: &[String],
    env: &[(String, String)],
    size: Option<warren_types::relay::TerminalSize>,
) -> Result<Vec<String>, String> {
    if env.is_empty() && size.is_none() {
        return Ok(command.to_vec());
    }
    for (name, _) in env {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("`{name}` is not a valid environment variable name"));
        }
    }
    let mut script = String::new();
    if let Some(size) = size {
        script.push_str(&format!(
            "stty rows {} cols {} 2>/dev/null; ",
            size.rows, size.cols
        ));
    }
    // The variables come as arguments up to `--`, so no value is ever parsed by the shell.
    script.push_str(r#"while [ "$1" != -- ]; do export "$1"; shift; done; shift; exec "$@""#);
    let mut argv = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        script,
        "warren-exec".to_owned(),
    ];
    argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.push("--".to_owned());
    argv.extend(command.iter().cloned());
    Ok(argv)
}

/// Output of an exec'd process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecOutput {
    Stdout(bytes::Bytes),
    Stderr(bytes::Bytes),
}

/// A build context: the bytes of a tar archive as they come.
pub type BuildContext = futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>;
/// An image build's progress: lines of text, then the end (or the error).
pub type BuildProgress = futures::stream::BoxStream<'static, Result<String, RuntimeError>>;

/// A build context fetched for an image a workspace builds before it starts.
pub struct FetchedContext {
    /// The commit of the project it was archived from.
    pub commit: String,
    /// The build's key (`warren_types::relay::BUILD_KEY_HEADER`), when the server gave one:
    /// an image built with the same key may be used instead of building again.
    pub key: Option<String>,
    pub archive: BuildContext,
}

/// Where the build contexts of images built at start come from: the server, which archives
/// them out of the workspace's project, through the relay.
#[async_trait]
pub trait BuildContexts: Send + Sync + 'static {
    /// The context of image `image` of workspace `workspace` — or, given `feature`, the
    /// folder of that local Feature of the image's dev container; the error says why there is
    /// none, for the user.
    async fn fetch(
        &self,
        workspace: &str,
        image: &str,
        feature: Option<&str>,
    ) -> Result<FetchedContext, String>;
}

/// A running exec'd process. Dropping it detaches from (and, where the runtime allows,
/// ends) the process.
pub struct ExecSession {
    /// The process's stdin; shutting it down closes stdin.
    pub stdin: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    /// Everything the process writes; ends when the process closed its output.
    pub output: futures::stream::BoxStream<'static, Result<ExecOutput, RuntimeError>>,
    /// Terminal size changes; the runtime applies them in order (ignored without a tty).
    pub resize: tokio::sync::mpsc::Sender<warren_types::relay::TerminalSize>,
    /// Resolves once the process has ended, with its exit status.
    pub exit:
        futures::future::BoxFuture<'static, Result<warren_types::relay::ExecExit, RuntimeError>>,
}

impl fmt::Debug for ExecSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecSession").finish_non_exhaustive()
    }
}

/// Why a runtime call failed; the reconciler reports `Apply` as an `applier` error and the
/// others as `runtime` errors.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The objects could not be applied (invalid object, refused by the runtime).
    #[error("applying {workspace}: {message}")]
    Apply { workspace: String, message: String },
    /// The runtime could not be reached or answered with an error.
    #[error("{context}")]
    Runtime {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The workspace or endpoint does not exist on this runtime.
    #[error("{0} not found")]
    NotFound(String),
    /// The runtime cannot do this (an image build without a builder).
    #[error("{0}")]
    NotAvailable(String),
    /// Deleting the workspace cannot progress for now (an object of it is still in use);
    /// retried later, and reported to the user meanwhile.
    #[error("deleting {workspace} is blocked: {reason}")]
    Blocked { workspace: String, reason: String },
}

/// A failure the runtime found itself, with no error of the engine's to carry.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(String);

impl RuntimeError {
    /// `context` failed because of `message` (the runtime's own finding).
    pub fn failed(context: String, message: impl Into<String>) -> RuntimeError {
        RuntimeError::Runtime {
            context,
            source: Box::new(Refused(message.into())),
        }
    }
}

impl ExecSpec {
    /// What every failure of this exec in `workspace` names; an empty command is refused
    /// here, before any runtime is asked.
    pub fn context_in(&self, workspace: &WorkspaceKey) -> Result<String, RuntimeError> {
        let context = format!("exec in workspace {workspace}");
        if self.command.is_empty() {
            return Err(RuntimeError::failed(context, "the command is empty"));
        }
        Ok(context)
    }
}

/// One GitOps sync of one source, as the agent hands it to its runtime.
#[derive(Debug, Clone)]
pub struct GitopsSync<'a> {
    /// The agent's name, labelled on every object it applies.
    pub agent: &'a str,
    pub source: &'a warren_types::gitops::Source,
    pub policy: &'a warren_types::gitops::Policy,
    pub commit: &'a str,
    pub objects: &'a [warren_gitops::Manifest],
    /// Whether to delete what left Git: the source prunes and the commit was read without
    /// errors (an unreadable file must not look like deleted objects).
    pub prune: bool,
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GitopsOutcome {
    pub applied: u32,
    pub unchanged: u32,
    pub pruned: u32,
    pub errors: Vec<warren_types::gitops::SyncError>,
    pub health: Vec<warren_types::gitops::ObjectHealth>,
}

/// The status error of an object that left Git and could not be pruned (it stays in the
/// source's inventory and is tried again at the next sync).
pub(crate) fn prune_error(object: String, message: &str) -> warren_types::gitops::SyncError {
    warren_types::gitops::SyncError {
        file: None,
        object: Some(object),
        message: format!("pruning it: {message}"),
    }
}

/// Label naming the agent on every object GitOps applies.
pub const GITOPS_AGENT_LABEL: &str = "warren.dev/gitops-agent";
/// Label naming the source on every object GitOps applies.
pub const GITOPS_SOURCE_LABEL: &str = "warren.dev/gitops-source";

#[async_trait]
pub trait WorkspaceRuntime: Send + Sync + 'static {
    /// Creates or updates every object of the workspace so that the runtime matches
    /// `objects` (the complete set, parsed from `config_to_apply`), and removes objects of
    /// that workspace that are no longer in the set.
    async fn apply(
        &self,
        workspace: &WorkspaceKey,
        objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError>;

    /// Gives the runtime where to fetch the contexts of images built at start (devfile
    /// `autoBuild`, a dev container's `build`). Runtimes without a builder ignore it.
    fn use_build_contexts(&self, contexts: Arc<dyn BuildContexts>) {
        let _ = contexts;
    }

    /// Starts or continues deleting everything of the workspace, volumes included.
    /// Returns `Terminated` once nothing remains, `Terminating` while something does, and
    /// `RuntimeError::Blocked` when what remains cannot be removed yet. Touches nothing of
    /// any other workspace.
    async fn delete(&self, workspace: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError>;

    /// The most one workspace can use here (the host's CPUs and memory), when the runtime
    /// knows it; reported so the server refuses sizes this agent cannot give.
    async fn capacity(&self) -> Option<warren_types::reconcile::HostCapacity> {
        None
    }

    /// Why this runtime cannot isolate workspaces as their NetworkPolicies ask, if it cannot
    /// (reported with full reconciles, shown with every workspace).
    fn isolation_warning(&self) -> Option<String> {
        None
    }

    /// Every workspace of this agent the runtime holds, rebuilt from the runtime itself. A
    /// runtime may answer from what it observed before, looking again only at what its own
    /// events say changed (the engine runtime does); see [`WorkspaceRuntime::resync`].
    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError>;

    /// The next `list` looks at everything afresh, whatever the runtime's events said: the
    /// reconciler calls it before each full reconcile, so a change whose event was lost is
    /// reported within one full interval.
    fn resync(&self) {}

    /// What the running workspaces use now, where the runtime reports it (the container
    /// engine's statistics); empty where it does not. Read when metrics are scraped, and once a
    /// minute for the server's usage (`crate::meter`).
    async fn usage(&self) -> Result<Vec<WorkspaceUsage>, RuntimeError> {
        Ok(Vec::new())
    }

    /// A receiver whose value changes whenever something of this agent's workspaces
    /// changed in the runtime (container or pod events), so the reconciler reports at once.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64>;

    /// Opens a byte stream to `port` (a declared endpoint's target port) of the workspace.
    async fn dial(
        &self,
        workspace: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError>;

    /// Starts a process in a running workspace (engine exec, Kubernetes exec). Needs nothing
    /// in the image beyond the command itself.
    async fn exec(
        &self,
        workspace: &WorkspaceKey,
        spec: ExecSpec,
    ) -> Result<ExecSession, RuntimeError>;

    /// Applies the objects of devfile component `component` (a `kubernetes`/`openshift`
    /// component) for `workspace`, pruning what an earlier apply of it made and this one
    /// does not; what was done, one line per object. Runtimes that cannot run such objects
    /// name the kinds.
    async fn apply_component(
        &self,
        workspace: &WorkspaceKey,
        component: &str,
        objects: &[serde_json::Value],
    ) -> Result<Vec<String>, RuntimeError> {
        let mut kinds: Vec<String> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap_or("?").to_owned())
            .collect();
        kinds.sort();
        kinds.dedup();
        Err(RuntimeError::NotAvailable(format!(
            "applying component {component} of {workspace}: this runtime does not run objects of \
             kubernetes components ({}); an agent on Kubernetes applies them",
            kinds.join(", ")
        )))
    }

    /// GitOps: makes the runtime hold `sync.objects` for `sync.source` — each checked again
    /// against the source's rights (the relay's check is not trusted alone), applied with
    /// the source's label, and (when the source prunes) what an earlier sync of it applied
    /// and this one does not deleted. Never touches an object the source did not apply.
    /// Runtimes that do not realise these objects report each as an error naming its kind.
    async fn sync_gitops(&self, sync: &GitopsSync<'_>) -> Result<GitopsOutcome, RuntimeError> {
        Ok(GitopsOutcome {
            errors: sync
                .objects
                .iter()
                .map(|m| warren_types::gitops::SyncError {
                    file: Some(m.file.clone()),
                    object: Some(m.display()),
                    message: format!(
                        "this runtime does not realise {} objects from Git",
                        m.kind()
                    ),
                })
                .collect(),
            ..GitopsOutcome::default()
        })
    }

    /// Builds an image for `workspace` from `context` (a tar archive, streamed) as `task`
    /// says; the build's progress, line by line, ends with the image built or the error.
    /// Runtimes without a builder refuse, saying what is missing.
    async fn build_image(
        &self,
        workspace: &WorkspaceKey,
        task: &warren_types::relay::BuildImageTask,
        context: BuildContext,
    ) -> Result<BuildProgress, RuntimeError> {
        let _ = context;
        Err(RuntimeError::NotAvailable(format!(
            "building image {} for {workspace}: this runtime has no image builder (agents on \
             Podman or Docker build; for Kubernetes, build the image elsewhere and push it to \
             a registry the cluster pulls from)",
            task.image
        )))
    }

    /// The last `tail` lines a container of the workspace wrote (stdout and stderr; `None`:
    /// the main container), also when it has stopped or keeps failing to start: that is when
    /// they are wanted. At most [`warren_types::relay::MAX_LOG_BYTES`], the end kept.
    async fn logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError>;

    /// As [`WorkspaceRuntime::logs`], then whatever the container writes next, until it stops
    /// (the stream ends) or the stream is dropped.
    async fn follow_logs(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<LogStream, RuntimeError>;
}

/// A container's output as it comes.
pub type LogStream = futures::stream::BoxStream<'static, Result<bytes::Bytes, RuntimeError>>;

/// Keeps the end of `bytes` within [`warren_types::relay::MAX_LOG_BYTES`], from a line start.
pub(crate) fn log_tail(mut bytes: Vec<u8>) -> Vec<u8> {
    let max = warren_types::relay::MAX_LOG_BYTES;
    if bytes.len() <= max {
        return bytes;
    }
    let mut cut = bytes.len() - max;
    if let Some(nl) = bytes[cut..].iter().position(|&b| b == b'\n') {
        cut += nl + 1;
    }
    bytes.drain(..cut);
    bytes
}

/// The steppable in-memory runtime for tests.
pub mod simulated;

#[cfg(test)]
mod tests {
    use super::log_tail;
    use warren_types::relay::MAX_LOG_BYTES;

    #[test]
    fn log_tail_keeps_the_end_from_a_line_start() {
        assert_eq!(log_tail(b"a\nb\n".to_vec()), b"a\nb\n");
        let line = b"0123456789abcde\n";
        let many: Vec<u8> = line.repeat(MAX_LOG_BYTES / line.len() + 10);
        let kept = log_tail(many.clone());
        assert!(kept.len() <= MAX_LOG_BYTES);
        assert!(kept.starts_with(line), "cut at a line start");
        assert!(many.ends_with(&kept));
        // One endless line: cut anyway, within the bound.
        let endless = vec![b'x'; MAX_LOG_BYTES * 2];
        assert_eq!(log_tail(endless).len(), MAX_LOG_BYTES);
    }

    #[test]
    fn usage_is_rendered_with_escaped_labels() {
        use super::{usage_metrics, WorkspaceKey, WorkspaceUsage};
        assert_eq!(usage_metrics(&[]), "");
        let text = usage_metrics(&[WorkspaceUsage {
            workspace: WorkspaceKey {
                name: "a\"b".into(),
                namespace: "ns\\x\ny".into(),
            },
            container: "dev".into(),
            cpu_seconds: 1.5,
            memory_bytes: 42,
        }]);
        assert!(text.contains("# TYPE warren_workspace_cpu_seconds_total counter\n"));
        assert!(
            text.contains(
                r#"warren_workspace_cpu_seconds_total{namespace="ns\\x\ny",workspace="a\"b",container="dev"} 1.5"#
            ),
            "{text}"
        );
        assert!(text.contains("} 42\n"), "{text}");
    }
}
