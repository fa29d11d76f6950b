//! The connector's runtime: the machine `warren connect` runs on (spec/mounts.md). It runs no
//! workspaces; it serves the one mount the connector backs — byte streams to the machine's
//! declared ports on its loopback interface, and processes started as the user who runs the
//! connector, on a real pseudo-terminal when one is asked for — so the agent's relay
//! connection serves a connector unchanged.

use super::{
    ByteStream, ExecOutput, ExecSession, ExecSpec, LogStream, ObservedWorkspace, RuntimeError,
    WorkspaceKey, WorkspaceRuntime,
};
use async_trait::async_trait;
use futures::StreamExt;
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_types::reconcile::TerminationProgress;
use warren_types::relay::{ExecExit, TerminalSize};

/// What the connector serves.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The mount it backs: the only "workspace" it answers for.
    pub mount: String,
    /// The ports it lets through, on 127.0.0.1.
    pub ports: Vec<u16>,
}

/// This machine, as a runtime with one entry.
#[derive(Debug)]
pub struct HostRuntime {
    config: HostConfig,
    home: PathBuf,
    changes: tokio::sync::watch::Sender<u64>,
}

impl HostRuntime {
    pub fn new(config: HostConfig) -> Self {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| PathBuf::from("/"));
        HostRuntime {
            config,
            home,
            changes: tokio::sync::watch::channel(0).0,
        }
    }

    fn check(&self, key: &WorkspaceKey) -> Result<(), RuntimeError> {
        if key.name == self.config.mount {
            Ok(())
        } else {
            Err(RuntimeError::NotFound(format!(
                "{} (this connector backs mount {})",
                key.name, self.config.mount
            )))
        }
    }

    /// The environment of a process started here: the connector's own basics (never its
    /// token: `WARREN_CONNECTOR_TOKEN` is not passed on), then what the session asked for.
    fn env(&self, spec: &ExecSpec) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = ["PATH", "USER", "LOGNAME", "SHELL", "LANG", "TZ"]
            .iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| ((*k).to_owned(), v)))
            .collect();
        env.push(("HOME".into(), self.home.display().to_string()));
        if spec.tty {
            env.push(("TERM".into(), "xterm-256color".into()));
        }
        env.extend(spec.env.iter().cloned());
        env
    }
}

fn exec_error(what: String, source: std::io::Error) -> RuntimeError {
    RuntimeError::Runtime {
        context: what,
        source: Box::new(source),
    }
}

/// Resolves with how `child` ended.
fn exit_of(
    mut child: tokio::process::Child,
) -> futures::future::BoxFuture<'static, Result<ExecExit, RuntimeError>> {
    Box::pin(async move {
        let status = child
            .wait()
            .await
            .map_err(|e| exec_error("waiting for a process".into(), e))?;
        Ok(ExecExit::of_process(status))
    })
}

fn no_logs(key: &WorkspaceKey) -> RuntimeError {
    RuntimeError::NotAvailable(format!(
        "{}: a machine attached with `warren connect` has no container logs; use the terminal \
         or `warren ws ssh`",
        key.name
    ))
}

#[async_trait]
impl WorkspaceRuntime for HostRuntime {
    async fn apply(
        &self,
        workspace: &WorkspaceKey,
        _objects: &[serde_json::Value],
    ) -> Result<(), RuntimeError> {
        Err(RuntimeError::NotAvailable(format!(
            "{workspace}: a connector runs no workspaces"
        )))
    }

    async fn delete(&self, _workspace: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError> {
        Ok(TerminationProgress::Terminated)
    }

    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        Ok(vec![])
    }

    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn dial(
        &self,
        workspace: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        self.check(workspace)?;
        if !self.config.ports.contains(&port) {
            return Err(RuntimeError::NotFound(format!(
                "port {port} of {} (this connector serves {})",
                workspace.name,
                ports_list(&self.config.ports)
            )));
        }
        let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| exec_error(format!("connecting to 127.0.0.1:{port}"), e))?;
        let _ = stream.set_nodelay(true);
        Ok(Box::new(stream))
    }

    async fn exec(
        &self,
        workspace: &WorkspaceKey,
        spec: ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        self.check(workspace)?;
        let Some((program, args)) = spec.command.split_first() else {
            return Err(RuntimeError::NotAvailable("the command is empty".into()));
        };
        if spec.tty {
            self.exec_pty(program, args, &spec)
        } else {
            self.exec_pipes(program, args, &spec)
        }
    }

    async fn logs(
        &self,
        workspace: &WorkspaceKey,
        _container: Option<&str>,
        _tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        Err(no_logs(workspace))
    }

    async fn follow_logs(
        &self,
        workspace: &WorkspaceKey,
        _container: Option<&str>,
        _tail: u32,
    ) -> Result<LogStream, RuntimeError> {
        Err(no_logs(workspace))
    }
}

fn ports_list(ports: &[u16]) -> String {
    if ports.is_empty() {
        return "no ports".into();
    }
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!("ports {}", list.join(", "))
}

impl HostRuntime {
    fn exec_pipes(
        &self,
        program: &str,
        args: &[String],
        spec: &ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env_clear()
            .envs(self.env(spec))
            .current_dir(&self.home)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Dropping the session ends the process, as closing the channel would.
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| exec_error(format!("starting {program}"), e))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(RuntimeError::NotAvailable(
                "the child process has no pipes".into(),
            ));
        };
        let read_err = |e: std::io::Error| exec_error("reading a process's output".into(), e);
        let out = tokio_util::io::ReaderStream::new(stdout)
            .map(move |r| r.map(ExecOutput::Stdout).map_err(read_err));
        let err = tokio_util::io::ReaderStream::new(stderr)
            .map(move |r| r.map(ExecOutput::Stderr).map_err(read_err));
        // No terminal: sizes are accepted and dropped.
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        tokio::spawn(async move { while sizes.recv().await.is_some() {} });
        let exit = exit_of(child);
        Ok(ExecSession {
            stdin: Box::pin(stdin),
            output: futures::stream::select(out, err).boxed(),
            resize,
            exit,
        })
    }

    fn exec_pty(
        &self,
        program: &str,
        args: &[String],
        spec: &ExecSpec,
    ) -> Result<ExecSession, RuntimeError> {
        let pty_err = |what: &str, e: pty_process::Error| RuntimeError::Runtime {
            context: what.to_owned(),
            source: Box::new(e),
        };
        let (pty, pts) = pty_process::open().map_err(|e| pty_err("opening a terminal", e))?;
        if let Some(size) = spec.size {
            pty.resize(pty_process::Size::new(size.rows, size.cols))
                .map_err(|e| pty_err("sizing the terminal", e))?;
        }
        let child = pty_process::Command::new(program)
            .args(args)
            .env_clear()
            .envs(self.env(spec))
            .current_dir(&self.home)
            .kill_on_drop(true)
            .spawn(pts)
            .map_err(|e| pty_err(&format!("starting {program} on a terminal"), e))?;
        let (reader, mut writer) = pty.into_split();
        // Once the process and its children closed the terminal, reading it fails with EIO:
        // that is the end of the output, not an error.
        let output = tokio_util::io::ReaderStream::new(reader)
            .take_while(|r| {
                let more = !matches!(r, Err(e) if e.raw_os_error() == Some(5));
                futures::future::ready(more)
            })
            .map(|r| {
                r.map(ExecOutput::Stdout)
                    .map_err(|e| exec_error("reading the terminal".into(), e))
            })
            .boxed();
        // One task owns the terminal's writing side: it writes stdin and applies sizes in the
        // order they come. It ends when the session drops both senders.
        let (stdin, mut input) = tokio::io::duplex(64 * 1024);
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 8192];
            let mut input_open = true;
            loop {
                tokio::select! {
                    // Cancel-safe: a read that loses the race has taken no bytes.
                    n = input.read(&mut buf), if input_open => match n {
                        Ok(0) | Err(_) => input_open = false,
                        Ok(n) => {
                            if writer.write_all(&buf[..n]).await.is_err() {
                                input_open = false;
                            }
                        }
                    },
                    // Cancel-safe: `recv` loses no message when cancelled.
                    size = sizes.recv() => match size {
                        Some(s) => {
                            let _ = writer.resize(pty_process::Size::new(s.rows, s.cols));
                        }
                        None => break,
                    },
                }
            }
        });
        let exit = exit_of(child);
        Ok(ExecSession {
            stdin: Box::pin(stdin),
            output,
            resize,
            exit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn runtime() -> HostRuntime {
        HostRuntime::new(HostConfig {
            mount: "gpu-box".into(),
            ports: vec![],
        })
    }

    fn key(name: &str) -> WorkspaceKey {
        WorkspaceKey {
            name: name.into(),
            namespace: String::new(),
        }
    }

    async fn run(spec: ExecSpec) -> (String, ExecExit) {
        let mut s = runtime().exec(&key("gpu-box"), spec).await.unwrap();
        s.stdin.shutdown().await.unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = s.output.next().await {
            match chunk.unwrap() {
                ExecOutput::Stdout(b) | ExecOutput::Stderr(b) => out.extend_from_slice(&b),
            }
        }
        (
            String::from_utf8_lossy(&out).into_owned(),
            s.exit.await.unwrap(),
        )
    }

    #[tokio::test]
    async fn a_terminal_is_a_real_one_with_the_size_asked_for() {
        let (out, exit) = run(ExecSpec {
            container: None,
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                "test -t 0 && stty size; exit 3".into(),
            ],
            env: vec![],
            tty: true,
            size: Some(TerminalSize { cols: 91, rows: 17 }),
        })
        .await;
        assert!(out.contains("17 91"), "{out:?}");
        assert_eq!(exit.code, Some(3));
    }

    #[tokio::test]
    async fn without_a_terminal_streams_stay_apart_and_the_token_is_not_passed_on() {
        let (out, exit) = run(ExecSpec {
            container: None,
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                "test -t 0 || echo no-tty; echo \"${WARREN_CONNECTOR_TOKEN:-none} $X\"".into(),
            ],
            env: vec![("X".into(), "y".into())],
            tty: false,
            size: None,
        })
        .await;
        assert_eq!(out, "no-tty\nnone y\n");
        assert_eq!(exit.code, Some(0));
    }

    #[tokio::test]
    async fn other_entries_and_undeclared_ports_are_not_found() {
        let r = runtime();
        let e = r.dial(&key("other"), 22).await.err().unwrap();
        assert!(e.to_string().contains("backs mount gpu-box"), "{e}");
        let e = r.dial(&key("gpu-box"), 22).await.err().unwrap();
        assert!(e.to_string().contains("serves no ports"), "{e}");
    }
}
