//! Engine exec (`docker exec` / `podman exec` through the Docker API) and dialling ports that
//! are not published, for the web terminal, SSH sessions and SSH port forwarding.
//!
//! An exec runs in the workspace's main container (the pod's first app container, which owns
//! the pod's network) or a named one, as that container runs: its user, environment and
//! working directory, plus the requested environment. Measured on Podman 4.3 (Docker API
//! compat): the attach is a hijacked HTTP connection that bollard handles; `ConsoleSize` on
//! create is ignored and a resize before start fails ("exec session state improper"), and a
//! resize right after start comes too late for a process that reads its size at once (see
//! [`EngineRuntime::command_with_size`]); a resize of an exec that ended fails harmlessly.
//!
//! The engine API cannot kill an exec, and dropping a session (the browser tab closed, the SSH
//! client gone) only closes the attach connection: a process that does not read stdin
//! (`sleep`, a build, even a shell under a tty, as conmon keeps the terminal open) would keep
//! running, detached, forever. So every exec carries a random marker in its environment, and
//! when a session is dropped while its process still runs, a second exec hangs it up the way
//! a terminal would: `SIGHUP` to the process group of the process the exec started (the one
//! with the marker whose parent is outside the container), which also reaches its foreground
//! children, and which a shell passes on to its jobs. Processes the user detached on purpose
//! (`nohup`, daemons in a session of their own) keep running.

use super::plan::{Role, CONTAINER_LABEL, POD_HASH_LABEL};
use super::{label, runtime_err, summary_order, summary_role, summary_running, EngineRuntime};
use crate::runtime::{
    shell_wrapped, ByteStream, ExecOutput, ExecSession, ExecSpec, RuntimeError, WorkspaceKey,
    EXEC_MARKER_ENV, HANG_UP_SCRIPT,
};
use bollard::container::LogOutput;
use bollard::exec::{ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerSummary, ExecConfig};
use futures::{FutureExt, StreamExt};
use std::time::Duration;
use warren_types::relay::{ExecExit, TerminalSize};

/// How long the engine may keep reporting an exec as running after its output ended.
const EXIT_SETTLE: Duration = Duration::from_secs(10);
/// How long a connection to an unpublished port may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

fn failure(context: String, message: impl Into<String>) -> RuntimeError {
    RuntimeError::failed(context, message)
}

/// Sends `SIGHUP` to the process of exec `exec_id` if it still runs (see the module comment).
async fn hang_up(docker: &bollard::Docker, container: &str, exec_id: &str, marker: &str) {
    match docker.inspect_exec(exec_id).await {
        Ok(i) if i.running == Some(true) => {}
        Ok(_) => return,
        Err(e) => {
            tracing::debug!(error = %e, "inspecting an exec to hang it up failed");
            return;
        }
    }
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(
            ["/bin/sh", "-c", HANG_UP_SCRIPT, "warren-hang-up", marker]
                .map(str::to_owned)
                .to_vec(),
        ),
        ..Default::default()
    };
    let started = match docker.create_exec(container, config).await {
        Ok(created) => docker.start_exec(&created.id, None).await,
        Err(e) => Err(e),
    };
    match started {
        // Waits for the script to finish: its output ends when it exits.
        Ok(StartExecResults::Attached { mut output, .. }) => while output.next().await.is_some() {},
        Ok(StartExecResults::Detached) => {}
        Err(e) => tracing::debug!(error = %e, "hanging up an exec failed"),
    }
}

/// The main app container (`None`: the one `main` names, else the first) or the one the
/// devfile names `container`.
fn pick<'a>(
    containers: &'a [ContainerSummary],
    container: Option<&str>,
    main: Option<&str>,
) -> Option<&'a ContainerSummary> {
    let named = |name: &str| {
        containers
            .iter()
            .find(|c| label(c, CONTAINER_LABEL) == Some(name))
    };
    match container.or(main) {
        Some(name) => named(name),
        None => containers.iter().find(|c| summary_order(c) == 0),
    }
}

impl EngineRuntime {
    /// The main container the workspace's Deployment names, if it names one.
    fn main_container(&self, workspace: &WorkspaceKey) -> Option<String> {
        let record = self.read_record(&workspace.name)?;
        record
            .deployment
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(warren_types::config::MAIN_CONTAINER_ANNOTATION))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    }

    /// The app containers of the workspace's current pod.
    async fn app_containers(
        &self,
        workspace: &WorkspaceKey,
    ) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let name = &workspace.name;
        let hash = self.read_record(name).map(|r| r.pod_hash);
        let containers = self
            .workspace_containers(name)
            .await?
            .into_iter()
            .filter(|c| summary_role(c) == Role::App)
            .filter(|c| {
                hash.as_deref()
                    .is_none_or(|h| label(c, POD_HASH_LABEL) == Some(h))
            })
            .collect::<Vec<_>>();
        if containers.is_empty() {
            return Err(RuntimeError::NotFound(format!("workspace {workspace}")));
        }
        Ok(containers)
    }

    /// The id of the workspace's `container` (`None`: the main one), running or not.
    async fn log_container(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
    ) -> Result<String, RuntimeError> {
        let containers = self.app_containers(workspace).await?;
        let main = self.main_container(workspace);
        let Some(target) = pick(&containers, container, main.as_deref()) else {
            return Err(RuntimeError::NotFound(format!(
                "container {} of workspace {workspace}",
                container.unwrap_or("(main)")
            )));
        };
        Ok(target.id.clone().unwrap_or_default())
    }

    /// The last `tail` lines of a container's stdout and stderr (running or not).
    pub(super) async fn logs_of(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        let mut stream = self.log_stream(workspace, container, tail, false).await?;
        let mut out = Vec::new();
        while let Some(chunk) = stream.next().await {
            out.extend_from_slice(&chunk?);
            // Bounded while reading too: a tail of long lines must not fill the memory.
            if out.len() > 2 * warren_types::relay::MAX_LOG_BYTES {
                out = crate::runtime::log_tail(out);
            }
        }
        Ok(crate::runtime::log_tail(out))
    }

    /// The tail, then (`follow`) what the container writes next, until it stops.
    pub(super) async fn log_stream(
        &self,
        workspace: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
        follow: bool,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        if container == Some(super::autobuild::BUILD_LOG) {
            // A file, not a container.
            return self.build_log_stream(workspace, tail, follow);
        }
        let context = format!("reading the output of workspace {workspace}");
        let id = self.log_container(workspace, container).await?;
        // A running container's output is that of its current run, as Kubernetes gives it: a
        // restarted container keeps its earlier runs' output, whose startup is not this one's.
        // Those runs ended by the time the last one finished, which the current run's first
        // lines may precede the recorded start of; the engine's `since` counts whole seconds,
        // so each line's own time decides. A container that is not running shows all it wrote.
        let after = match self.inspect(&id).await {
            Ok(inspect) => inspect
                .state
                .filter(|s| s.running == Some(true))
                .and_then(|s| s.finished_at)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(&t).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
                .filter(|t| t.timestamp() > 0),
            Err(e) => return Err(runtime_err(context, e)),
        };
        let options = bollard::query_parameters::LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            tail: tail.to_string(),
            since: after.map_or(0, |t| i32::try_from(t.timestamp()).unwrap_or(0)),
            timestamps: true,
            ..Default::default()
        };
        let docker = self.inner.docker.clone();
        let stream = docker.logs(&id, Some(options)).map(move |chunk| {
            chunk
                .map(|c| current_run(&c.into_bytes(), after))
                .map_err(|e| runtime_err(context.clone(), e))
        });
        Ok(Box::pin(stream))
    }

    /// Podman ignores `ConsoleSize` and refuses a resize before start, and a resize right
    /// after start races with the process reading its size: a process that asks at once
    /// (`stty size`, a full-screen program) would see 0×0. So on Podman a terminal's command
    /// is wrapped to set the size on its terminal first ([`shell_wrapped`]).
    fn command_with_size(&self, spec: &ExecSpec) -> Vec<String> {
        match spec.size {
            Some(size) if spec.tty && self.inner.is_podman => {
                shell_wrapped(&spec.command, &[], Some(size))
                    .unwrap_or_else(|_| spec.command.clone())
            }
            _ => spec.command.clone(),
        }
    }

    pub(super) async fn exec_in(
        &self,
        workspace: &WorkspaceKey,
        spec: ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        let context = spec.context_in(workspace)?;
        let containers = self.app_containers(workspace).await?;
        let main = self.main_container(workspace);
        let Some(target) = pick(&containers, spec.container.as_deref(), main.as_deref()) else {
            return Err(failure(
                context,
                format!(
                    "the workspace has no container {}",
                    spec.container.as_deref().unwrap_or("(main)")
                ),
            ));
        };
        if !summary_running(target) {
            return Err(failure(context, "the workspace is not running"));
        }
        let id = target.id.clone().unwrap_or_default();
        let docker = self.inner.docker.clone();
        let marker = crate::runtime::exec_marker();
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(spec.tty),
            console_size: spec
                .size
                .filter(|_| spec.tty)
                .map(|s| vec![usize::from(s.rows), usize::from(s.cols)]),
            env: Some(
                spec.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .chain([format!("{EXEC_MARKER_ENV}={marker}")])
                    .collect(),
            ),
            cmd: Some(self.command_with_size(&spec)),
            ..Default::default()
        };
        let created = docker
            .create_exec(&id, config)
            .await
            .map_err(|e| runtime_err(context.clone(), e))?;
        let exec_id = created.id;
        let started = docker
            .start_exec(
                &exec_id,
                Some(StartExecOptions {
                    detach: false,
                    tty: spec.tty,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| runtime_err(format!("starting the {context}"), e))?;
        let StartExecResults::Attached { output, input } = started else {
            return Err(failure(context, "the engine detached the exec"));
        };
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        if let (true, Some(size)) = (spec.tty, spec.size) {
            // Queued first, so it is applied before any later resize (engines that honour
            // `ConsoleSize` already have it; a repeat is harmless).
            let _ = resize.try_send(size);
        }
        let resizer = {
            let docker = docker.clone();
            let exec_id = exec_id.clone();
            let tty = spec.tty;
            let container = id.clone();
            async move {
                while let Some(size) = sizes.recv().await {
                    if !tty {
                        continue;
                    }
                    let options = ResizeExecOptions {
                        height: size.rows,
                        width: size.cols,
                    };
                    if let Err(e) = docker.resize_exec(&exec_id, options).await {
                        tracing::debug!(error = %e, "resizing an exec failed");
                    }
                }
                // The session is gone: its process must not outlive it.
                crate::runtime::bounded_hang_up(hang_up(&docker, &container, &exec_id, &marker))
                    .await;
            }
        };
        // Ends when the session (its sender) is dropped, after hanging up its process.
        tokio::spawn(resizer);
        let output = output
            .filter_map(|item| async move {
                match item {
                    Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                        Some(Ok(ExecOutput::Stdout(message)))
                    }
                    Ok(LogOutput::StdErr { message }) => Some(Ok(ExecOutput::Stderr(message))),
                    Ok(LogOutput::StdIn { .. }) => None,
                    Err(e) => Some(Err(runtime_err("reading the output of an exec".into(), e))),
                }
            })
            .boxed();
        let exit = async move {
            // The output has ended when this is awaited; the engine may still need a moment
            // to record the exit code.
            let deadline = tokio::time::Instant::now() + EXIT_SETTLE;
            let mut delay = Duration::from_millis(10);
            loop {
                let inspect = docker
                    .inspect_exec(&exec_id)
                    .await
                    .map_err(|e| runtime_err("inspecting an exec".into(), e))?;
                if inspect.running != Some(true) {
                    return Ok(ExecExit {
                        code: inspect.exit_code.and_then(|c| i32::try_from(c).ok()),
                        message: inspect
                            .exit_code
                            .is_none()
                            .then(|| "the engine reported no exit code".to_owned()),
                    });
                }
                if tokio::time::Instant::now() >= deadline {
                    return Ok(ExecExit {
                        code: None,
                        message: Some(
                            "the process closed its output but is still running".to_owned(),
                        ),
                    });
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_millis(500));
            }
        }
        .boxed();
        Ok(ExecSession {
            stdin: input,
            output,
            resize,
            exit,
        })
    }

    /// A port no endpoint declares (SSH `direct-tcpip`, an editor's server port): dialled at
    /// the pod's address on its network, which works wherever the agent can route to
    /// container networks (Linux hosts with rootful engines).
    pub(super) async fn dial_unpublished(
        &self,
        workspace: &WorkspaceKey,
        owner: &ContainerSummary,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let context = format!("connecting to port {port} of workspace {workspace}");
        if !summary_running(owner) {
            return Err(failure(context, "the workspace is not running"));
        }
        let id = owner.id.clone().unwrap_or_default();
        let inspect = self
            .inspect(&id)
            .await
            .map_err(|e| runtime_err(format!("inspecting the pod of {workspace}"), e))?;
        let addresses = pod_addresses(inspect);
        if addresses.is_empty() {
            return Err(failure(context, "the pod has no network address"));
        }
        let mut last = None;
        for ip in addresses {
            match tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect((ip, port)))
                .await
            {
                Ok(Ok(stream)) => {
                    let _ = stream.set_nodelay(true);
                    return Ok(Box::new(stream));
                }
                Ok(Err(e)) => last = Some(e.to_string()),
                Err(_) => last = Some(format!("{ip}:{port} did not answer in time")),
            }
        }
        Err(failure(context, last.unwrap_or_default()))
    }
}

/// The pod's addresses on its networks, from the inspection of its owner container.
pub(super) fn pod_addresses(
    inspect: bollard::models::ContainerInspectResponse,
) -> Vec<std::net::IpAddr> {
    inspect
        .network_settings
        .and_then(|n| n.networks)
        .unwrap_or_default()
        .into_values()
        .filter_map(|n| n.ip_address)
        .filter_map(|ip| ip.parse().ok())
        .collect()
}

/// `chunk` of a log read with timestamps, without them and without the lines written by
/// `after` (an earlier run's). A line whose time cannot be read is kept as it is, and so is
/// one stamped in `after`'s own second by an engine that stamps whole seconds (Podman 4):
/// either run may have written it, and the current run's lines are never dropped.
fn current_run(chunk: &[u8], after: Option<chrono::DateTime<chrono::Utc>>) -> bytes::Bytes {
    let mut out = Vec::with_capacity(chunk.len());
    for line in chunk.split_inclusive(|b| *b == b'\n') {
        let stamped = line
            .iter()
            .position(|b| *b == b' ')
            .filter(|at| *at <= 40)
            .and_then(|at| {
                let text = std::str::from_utf8(&line[..at]).ok()?;
                let time = chrono::DateTime::parse_from_rfc3339(text).ok()?;
                Some((
                    time.with_timezone(&chrono::Utc),
                    text.contains('.'),
                    &line[at + 1..],
                ))
            });
        match stamped {
            Some((time, precise, _)) if after.is_some_and(|a| earlier(time, precise, a)) => {}
            Some((_, _, text)) => out.extend_from_slice(text),
            None => out.extend_from_slice(line),
        }
    }
    bytes::Bytes::from(out)
}

/// Whether a line stamped `time` was written by `after`: surely so, for a stamp of whole
/// seconds only when its second is before `after`'s.
fn earlier(
    time: chrono::DateTime<chrono::Utc>,
    precise: bool,
    after: chrono::DateTime<chrono::Utc>,
) -> bool {
    if precise {
        time <= after
    } else {
        time.timestamp() < after.timestamp()
    }
}

#[cfg(test)]
mod tests {
    use super::current_run;

    #[test]
    fn a_log_keeps_the_current_runs_lines_without_their_times() {
        let chunk = b"2026-11-30T10:00:00.100000000Z old run\n\
2026-11-30T10:00:01.500000000+00:00 still the old run\n\
2026-11-30T10:00:01.500000001Z new run\n\
no time at all\n";
        let after = "2026-11-30T10:00:01.5Z".parse().ok();
        assert_eq!(&current_run(chunk, after)[..], b"new run\nno time at all\n");
        // Whole seconds (Podman 4): only a second before `after`'s is surely an earlier run's.
        let whole = b"2026-11-30T10:00:00Z old run\n2026-11-30T10:00:01Z either run\n2026-11-30T10:00:02Z new run\n";
        assert_eq!(&current_run(whole, after)[..], b"either run\nnew run\n");
        // Never restarted: everything, the times taken off.
        assert_eq!(
            &current_run(b"2026-11-30T10:00:00Z a\n2026-11-30T10:00:00Z b", None)[..],
            b"a\nb"
        );
    }
}
