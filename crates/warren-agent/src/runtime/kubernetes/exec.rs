//! Kubernetes exec (`pods/exec` over a WebSocket, `v4`/`v5.channel.k8s.io`, through kube-rs)
//! in the workspace's running pod: the main container (the pod template's first container)
//! unless another is named. The exec API has no environment, so variables (and, with a
//! terminal, the initial size, which would otherwise race with the process reading it) are
//! set by a `/bin/sh` wrapper ([`shell_wrapped`]). The exit code comes from the status
//! channel: `Success`, or a `Failure` with reason `NonZeroExitCode` whose `details.causes`
//! hold an `ExitCode`.

use super::{objects, status, KubernetesRuntime};
use crate::runtime::{
    shell_wrapped, ExecOutput, ExecSession, ExecSpec, RuntimeError, WorkspaceKey,
};
use futures::{FutureExt, SinkExt, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Status;
use kube::api::{Api, AttachParams, AttachedProcess};
use kube::runtime::reflector::ObjectRef as StoreRef;
use warren_types::relay::{ExecExit, TerminalSize};

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct ExecFailure(String);

fn failure(context: String, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Runtime {
        context,
        source: Box::new(ExecFailure(message.into())),
    }
}

/// Aborts kube-rs's message loop when the session is dropped, which closes the WebSocket
/// (the kubelet then closes the process's terminal or stdin).
struct AbortOnDrop(AttachedProcess);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

impl KubernetesRuntime {
    pub(super) async fn exec_in(
        &self,
        workspace: &WorkspaceKey,
        spec: ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        objects::check_key(workspace)
            .map_err(|m| RuntimeError::NotFound(format!("workspace {workspace:?} ({m})")))?;
        let context = format!("exec in workspace {workspace}");
        if spec.command.is_empty() {
            return Err(failure(context, "the command is empty"));
        }
        self.ready().await?;
        let reference = StoreRef::<Deployment>::new(&workspace.name).within(&workspace.namespace);
        let Some(deployment) = self.deployments.get(&reference) else {
            return Err(RuntimeError::NotFound(format!("workspace {workspace}")));
        };
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
        let main = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone());
        let container = match spec.container.clone().or(main) {
            Some(c) => c,
            None => return Err(failure(context, "the workspace has no container")),
        };
        let size = spec.size.filter(|_| spec.tty);
        let command = shell_wrapped(&spec.command, &spec.env, size)
            .map_err(|m| failure(context.clone(), m))?;
        let params = AttachParams {
            container: Some(container),
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
        // Drained at once so sizes never hold up stdin; ends when the session is dropped.
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
        });
        if let Some(size) = size {
            let _ = resize.try_send(size);
        }
        let exit = async move {
            let _guard = guard;
            Ok(exit_from_status(status.await))
        }
        .boxed();
        Ok(ExecSession {
            stdin: Box::pin(stdin),
            output,
            resize,
            exit,
        })
    }
}
