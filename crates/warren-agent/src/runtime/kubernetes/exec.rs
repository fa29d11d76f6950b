//! Kubernetes exec (`pods/exec` over a WebSocket, `v4`/`v5.channel.k8s.io`, through kube-rs)
//! in the workspace's running pod: the main container (the pod template's first container)
//! unless another is named. The exec API has no environment, so variables (and, with a
//! terminal, the initial size, which would otherwise race with the process reading it) are
//! set by a `/bin/sh` wrapper ([`shell_wrapped`]). The exit code comes from the status
//! channel: `Success`, or a `Failure` with reason `NonZeroExitCode` whose `details.causes`
//! hold an `ExitCode`.
//!
//! Closing the WebSocket does not end every process (one that does not read stdin keeps
//! running), so as with engine exec ([`HANG_UP_SCRIPT`]) a session dropped before its exit
//! status arrived is hung up by a second exec that finds the process by its marker.
//!
//! The end of stdin reaches the process only where the API server speaks
//! `v5.channel.k8s.io` (Kubernetes 1.30 and later). Over `v4` the only way to say it is to close
//! the WebSocket, which loses the output still on its way and the exit status (seen on a real
//! 1.20 node: `ssh ws 'read l; echo $l'` printed nothing and had no exit code). So there the
//! end of stdin is held back ([`HeldStdin`]): the process keeps its stdin open and its output
//! and status arrive; a command that waits for the end of its input ends when the session does.

use super::{status, KubernetesRuntime};
use crate::runtime::{
    exec_marker, shell_wrapped, ExecOutput, ExecSession, ExecSpec, RuntimeError, WorkspaceKey,
    EXEC_MARKER_ENV, HANG_UP_SCRIPT,
};
use futures::{FutureExt, SinkExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use warren_types::relay::{ExecExit, TerminalSize};

fn failure(context: String, message: impl Into<String>) -> RuntimeError {
    RuntimeError::failed(context, message)
}

/// Aborts kube-rs's message loop when the session is dropped, which closes the WebSocket
/// (the kubelet then closes the process's terminal or stdin).
struct AbortOnDrop(AttachedProcess);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The exec's stdin on an API server that cannot be told where stdin ends (`v4`): shutting
/// it down (or dropping it) does not close the writer, which lives on in the session's exit
/// future until the process has ended, since kube-rs would otherwise close the WebSocket.
struct HeldStdin<W> {
    writer: Arc<Mutex<Option<W>>>,
    shut: bool,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for HeldStdin<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.shut {
            return Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into()));
        }
        let mut guard = this.writer.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(w) => Pin::new(w).poll_write(cx, buf),
            None => Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let mut guard = this.writer.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(w) => Pin::new(w).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // Flushed, never closed: see the module's documentation.
        let this = self.get_mut();
        this.shut = true;
        let mut guard = this.writer.lock().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(w) => Pin::new(w).poll_flush(cx),
            None => Poll::Ready(Ok(())),
        }
    }
}

/// Whether the API server's exec tells the process where stdin ends (`v5.channel.k8s.io`,
/// on by default from Kubernetes 1.30); an unreadable version counts as no.
pub(super) fn version_closes_stdin(major: &str, minor: &str) -> bool {
    let number = |s: &str| {
        s.trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
            .ok()
    };
    match (number(major), number(minor)) {
        (Some(major), Some(minor)) => (major, minor) >= (1, 30),
        _ => false,
    }
}

/// How an exec ended, from the status channel's `Status`.
pub fn exit_from_status(status: Option<Status>) -> ExecExit {
    let Some(status) = status else {
        return ExecExit {
            code: None,
            message: Some("the exec ended without a status".into()),
        };
    };
    if status.status.as_deref() == Some("Success") {
        return ExecExit {
            code: Some(0),
            message: None,
        };
    }
    let code = status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message.as_deref()?.trim().parse::<i32>().ok());
    ExecExit {
        code,
        message: match code {
            Some(_) => None,
            None => Some(
                status
                    .message
                    .unwrap_or_else(|| "the exec failed without a message".into()),
            ),
        },
    }
}

/// Runs [`HANG_UP_SCRIPT`] for `marker` in the container and waits for it to finish.
async fn hang_up(pods: &Api<Pod>, pod: &str, container: &str, marker: &str) {
    let params = AttachParams {
        container: Some(container.to_owned()),
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
        ..Default::default()
    };
    let command = ["/bin/sh", "-c", HANG_UP_SCRIPT, "warren-hang-up", marker];
    match pods.exec(pod, command, &params).await {
        Ok(mut attached) => {
            if let Some(status) = attached.take_status() {
                let _ = status.await;
            }
        }
        Err(e) => tracing::debug!(error = %e, "hanging up an exec failed"),
    }
}

/// The workspace's main container: the one the Deployment names
/// ([`warren_types::config::MAIN_CONTAINER_ANNOTATION`]), else the pod template's first.
fn main_container(deployment: &Deployment) -> Option<String> {
    let named = deployment
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(warren_types::config::MAIN_CONTAINER_ANNOTATION))
        .cloned();
    named.or_else(|| {
        deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone())
    })
}

impl KubernetesRuntime {
    /// The last `tail` lines of a container of the workspace's newest pod (running or not:
    /// a pod whose container keeps crashing is when they are wanted).
    pub(super) async fn logs_of(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        let (pods, pod, params) = self.log_request(workspace, container, tail).await?;
        let text = pods.logs(&pod, &params).await.map_err(|e| {
            super::runtime_error(format!("reading the output of workspace {workspace}"), e)
        })?;
        Ok(crate::runtime::log_tail(text.into_bytes()))
    }

    /// The tail, then what the container writes next (`follow`), until it stops.
    pub(super) async fn follow_logs_of(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        let (pods, pod, mut params) = self.log_request(workspace, container, tail).await?;
        params.follow = true;
        params.limit_bytes = None;
        let context = format!("following the output of workspace {workspace}");
        let reader = pods
            .log_stream(&pod, &params)
            .await
            .map_err(|e| super::runtime_error(context.clone(), e))?;
        // Chunks as they arrive; a read error is reported and ends the stream.
        use futures::StreamExt;
        use tokio_util::compat::FuturesAsyncReadCompatExt;
        let stream = tokio_util::io::ReaderStream::new(reader.compat())
            .map(move |chunk| chunk.map_err(|e| failure(context.clone(), e.to_string())));
        Ok(Box::pin(stream))
    }

    /// Which pod and container to read, and how.
    async fn log_request(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<(Api<Pod>, String, kube::api::LogParams), RuntimeError> {
        let deployment = self.deployment_of(workspace).await?;
        let pod = self
            .pods
            .state()
            .into_iter()
            .filter(|p| status::selects(&deployment, p))
            .max_by_key(|p| p.metadata.creation_timestamp.clone());
        let Some(pod) = pod else {
            return Err(failure(
                format!("reading the output of workspace {workspace}"),
                "the workspace has no pod (it is stopped)",
            ));
        };
        let main = main_container(&deployment);
        let params = kube::api::LogParams {
            container: container.map(str::to_owned).or(main),
            tail_lines: Some(i64::from(tail)),
            limit_bytes: Some(warren_types::relay::MAX_LOG_BYTES as i64),
            ..Default::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &workspace.namespace);
        Ok((pods, pod.metadata.name.clone().unwrap_or_default(), params))
    }

    pub(super) async fn exec_in(
        &self,
        workspace: &WorkspaceKey,
        spec: ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        let context = spec.context_in(workspace)?;
        let deployment = self.deployment_of(workspace).await?;
        let pod = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| status::selects(&deployment, p))
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"));
        let Some(pod) = pod else {
            return Err(failure(context, "the workspace is not running"));
        };
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let main = main_container(&deployment);
        let container = match spec.container.clone().or(main) {
            Some(c) => c,
            None => return Err(failure(context, "the workspace has no container")),
        };
        let size = spec.size.filter(|_| spec.tty);
        let marker = exec_marker();
        let mut env = spec.env.clone();
        env.push((EXEC_MARKER_ENV.to_owned(), marker.clone()));
        let command =
            shell_wrapped(&spec.command, &env, size).map_err(|m| failure(context.clone(), m))?;
        let params = AttachParams {
            container: Some(container.clone()),
            stdin: true,
            stdout: true,
            // Kubernetes refuses stderr with a tty: the terminal carries both.
            stderr: !spec.tty,
            tty: spec.tty,
            ..Default::default()
        };
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &workspace.namespace);
        let mut attached = pods
            .exec(&pod_name, command, &params)
            .await
            .map_err(|e| super::runtime_error(context.clone(), e))?;
        let stdin = attached
            .stdin()
            .ok_or_else(|| failure(context.clone(), "no stdin"))?;
        // Kept by the exit future where the end of stdin cannot be told (module docs).
        let (stdin, held): (Pin<Box<dyn AsyncWrite + Send>>, _) = if self.exec_closes_stdin().await
        {
            (Box::pin(stdin), None)
        } else {
            let writer = Arc::new(Mutex::new(Some(stdin)));
            let stdin = HeldStdin {
                writer: writer.clone(),
                shut: false,
            };
            (Box::pin(stdin), Some(writer))
        };
        let stdout = attached
            .stdout()
            .ok_or_else(|| failure(context.clone(), "no stdout"))?;
        let stderr = attached.stderr();
        let status = attached
            .take_status()
            .ok_or_else(|| failure(context.clone(), "no status channel"))?;
        let terminal = attached.terminal_size();
        let guard = AbortOnDrop(attached);

        let read_err = |e: std::io::Error| RuntimeError::Runtime {
            context: "reading the output of an exec".into(),
            source: Box::new(e),
        };
        let out = tokio_util::io::ReaderStream::new(stdout)
            .map(move |r| r.map(ExecOutput::Stdout).map_err(read_err));
        let output = match stderr {
            Some(stderr) => {
                let err = tokio_util::io::ReaderStream::new(stderr)
                    .map(move |r| r.map(ExecOutput::Stderr).map_err(read_err));
                futures::stream::select(out, err).boxed()
            }
            None => out.boxed(),
        };
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        let ended = Arc::new(AtomicBool::new(false));
        let hang_up = {
            let ended = ended.clone();
            async move {
                if !ended.load(Ordering::SeqCst) {
                    crate::runtime::bounded_hang_up(hang_up(&pods, &pod_name, &container, &marker))
                        .await;
                }
            }
        };
        // Drained at once so sizes never hold up stdin; ends when the session is dropped,
        // after hanging up a process that is still running.
        tokio::spawn(async move {
            let mut terminal = terminal;
            while let Some(size) = sizes.recv().await {
                if let Some(t) = terminal.as_mut() {
                    let size = kube::api::TerminalSize {
                        width: size.cols,
                        height: size.rows,
                    };
                    if t.send(size).await.is_err() {
                        terminal = None;
                    }
                }
            }
            hang_up.await;
        });
        if let Some(size) = size {
            let _ = resize.try_send(size);
        }
        let exit = async move {
            let _guard = guard;
            let _held = held;
            let status = status.await;
            ended.store(true, Ordering::SeqCst);
            Ok(exit_from_status(status))
        }
        .boxed();
        Ok(ExecSession {
            stdin,
            output,
            resize,
            exit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn stdin_is_closed_from_kubernetes_1_30() {
        for (major, minor, closes) in [
            ("1", "20", false),
            ("1", "29", false),
            ("1", "30", true),
            ("1", "33+", true),
            ("2", "0", true),
            ("", "", false),
            ("1", "x", false),
        ] {
            assert_eq!(
                version_closes_stdin(major, minor),
                closes,
                "{major}.{minor}"
            );
        }
    }

    // Paused time: the timeout below elapses as soon as nothing else can run.
    #[tokio::test(start_paused = true)]
    async fn held_stdin_passes_bytes_and_keeps_the_writer_open_after_shutdown() {
        let (writer, mut reader) = tokio::io::duplex(64);
        let shared = Arc::new(Mutex::new(Some(writer)));
        let mut held = HeldStdin {
            writer: shared.clone(),
            shut: false,
        };
        held.write_all(b"line\n").await.unwrap();
        held.shutdown().await.unwrap();
        assert!(
            held.write_all(b"more").await.is_err(),
            "no writes after shutdown"
        );
        drop(held);
        let mut buf = [0u8; 16];
        let n = reader.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"line\n");
        // Still open: a read waits instead of seeing the end.
        let pending =
            tokio::time::timeout(std::time::Duration::from_millis(50), reader.read(&mut buf)).await;
        assert!(pending.is_err(), "the end of stdin was passed on");
        drop(shared);
        assert_eq!(
            reader.read(&mut buf).await.unwrap(),
            0,
            "closed with the session"
        );
    }
}
