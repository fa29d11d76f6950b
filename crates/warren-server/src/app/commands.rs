//! Running a workspace's devfile commands on demand (`warren ws run`): exec commands run in
//! their container through the relay (as the web terminal does, without a terminal),
//! composites run their commands one after another or at once, and the events — each step
//! starting, its output, its end, then the whole command's end — go to the caller as they
//! happen.

use super::render::{self, ApplyTarget, CommandPlan};
use super::rights::{member_right, visible, Right};
use super::{AppError, AppState, Principal};
use crate::relay::logs::RelayLogsError;
use crate::store::workspaces::WorkspaceRow;
use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::mpsc;
use warren_types::api::{CommandRunEvent, OutputStream};
use warren_types::relay::{BuildImageTask, ExecFrame, ExecTarget, ExecTask};
use warren_types::ActualState;

/// Events buffered between the running command and a slow reader; the command waits
/// (backpressure) rather than buffering without bound.
const EVENT_BUFFER: usize = 64;

/// Starts command `id` of workspace `key` and returns its events; the command stops (its
/// processes hung up) when the receiver is dropped or the server shuts down.
pub async fn run(
    state: &AppState,
    who: &Principal,
    key: &str,
    id: &str,
) -> Result<mpsc::Receiver<CommandRunEvent>, AppError> {
    // Running a command is reaching into the workspace, as its terminal is: admins see and
    // manage every workspace but only its users may do this (access.md).
    let w = visible(state, who, key).await?;
    if member_right(state, who.user.id, &w).await? < Some(Right::Use) {
        return Err(AppError::forbidden(format!(
            "running commands in {} needs its ownership or the developer or owner role on its \
             space",
            w.name
        )));
    }
    let plan = render::command_plan(&w.devfile, &w.name, id)?;
    if w.actual_state != ActualState::Running {
        return Err(AppError::conflict(
            "invalid_state",
            format!(
                "workspace {} is {}: commands run in a Running workspace (start it with `warren ws start {}`)",
                w.name, w.actual_state, w.name
            ),
        ));
    }
    let (tx, rx) = mpsc::channel(EVENT_BUFFER);
    let state = state.clone();
    tokio::spawn(async move {
        let run = Runner {
            state: &state,
            w: &w,
            tx: &tx,
        };
        let closing = state.closing.clone();
        tokio::select! {
            // Dropping `step` drops its exec sessions, which makes the agents hang the
            // processes up: cancel-safe by construction.
            outcome = run.step(&plan) => {
                let (exit_code, failed) = match outcome {
                    Outcome::Ok => (0, None),
                    Outcome::Failed { command, code } => (code, Some(command)),
                    Outcome::Gone => return,
                };
                let _ = tx.send(CommandRunEvent::Done { exit_code, failed }).await;
            }
            // The server is shutting down: the caller sees the stream end without `done`.
            () = closing.cancelled() => {}
            // The caller left (a silent command would not notice until its next output).
            () = tx.closed() => {}
        }
    });
    Ok(rx)
}

/// How a step ended.
enum Outcome {
    Ok,
    /// `command` failed with `code` (1 when it gave none).
    Failed {
        command: String,
        code: i32,
    },
    /// Nobody listens any more: stop everything.
    Gone,
}

struct Runner<'a> {
    state: &'a AppState,
    w: &'a WorkspaceRow,
    tx: &'a mpsc::Sender<CommandRunEvent>,
}

impl Runner<'_> {
    async fn emit(&self, event: CommandRunEvent) -> bool {
        self.tx.send(event).await.is_ok()
    }

    fn step<'s>(&'s self, plan: &'s CommandPlan) -> BoxFuture<'s, Outcome> {
        async move {
            match plan {
                CommandPlan::Exec {
                    id,
                    component,
                    script,
                } => self.exec(id, component, script).await,
                CommandPlan::Apply {
                    id,
                    component,
                    target,
                } => self.apply(id, component, target).await,
                CommandPlan::Group {
                    parallel: false,
                    steps,
                    ..
                } => {
                    for s in steps {
                        match self.step(s).await {
                            Outcome::Ok => {}
                            other => return other,
                        }
                    }
                    Outcome::Ok
                }
                CommandPlan::Group {
                    parallel: true,
                    steps,
                    ..
                } => {
                    let outcomes =
                        futures::future::join_all(steps.iter().map(|s| self.step(s))).await;
                    let mut first_failure = None;
                    for o in outcomes {
                        match o {
                            Outcome::Ok => {}
                            Outcome::Gone => return Outcome::Gone,
                            failed => {
                                first_failure.get_or_insert(failed);
                            }
                        }
                    }
                    first_failure.unwrap_or(Outcome::Ok)
                }
            }
        }
        .boxed()
    }

    async fn finished(&self, id: &str, exit_code: Option<i32>, message: Option<String>) -> Outcome {
        let ok = exit_code == Some(0);
        if !self
            .emit(CommandRunEvent::Finished {
                command: id.into(),
                exit_code,
                message,
            })
            .await
        {
            return Outcome::Gone;
        }
        if ok {
            Outcome::Ok
        } else {
            Outcome::Failed {
                command: id.into(),
                code: exit_code.filter(|c| *c != 0).unwrap_or(1),
            }
        }
    }

    async fn apply(&self, id: &str, component: &str, target: &ApplyTarget) -> Outcome {
        if !self
            .emit(CommandRunEvent::Started {
                command: id.into(),
                kind: "apply".into(),
                component: component.into(),
            })
            .await
        {
            return Outcome::Gone;
        }
        match target {
            ApplyTarget::Container => {
                self.finished(
                    id,
                    Some(0),
                    Some(format!("container {component} runs with the workspace")),
                )
                .await
            }
            ApplyTarget::Image {
                image_name,
                context,
                dockerfile,
                args,
                target,
            } => {
                // The main container has the sources; it archives the context for the agent.
                let script = format!(
                    "cd \"$PROJECT_SOURCE\" && cd {} && exec tar -cf - .",
                    sh_quote(context)
                );
                let task = ExecTask::BuildImage(BuildImageTask {
                    image: image_name.clone(),
                    dockerfile: dockerfile.clone(),
                    args: args.clone(),
                    target: target.clone(),
                    features: None,
                });
                self.session(id, None, script, Some(task)).await
            }
            ApplyTarget::Unavailable { why } => self.finished(id, None, Some(why.clone())).await,
            ApplyTarget::Manifest { script, .. } => {
                let task = ExecTask::ApplyComponent {
                    component: component.into(),
                };
                self.session(id, None, script.clone(), Some(task)).await
            }
        }
    }

    async fn exec(&self, id: &str, component: &str, script: &str) -> Outcome {
        if !self
            .emit(CommandRunEvent::Started {
                command: id.into(),
                kind: "exec".into(),
                component: component.into(),
            })
            .await
        {
            return Outcome::Gone;
        }
        self.session(id, Some(component.into()), script.into(), None)
            .await
    }

    /// Runs `script` in `container` (the main one for `None`), or has the agent do `task`
    /// with its output; streams what comes back and ends with the step's outcome.
    async fn session(
        &self,
        id: &str,
        container: Option<String>,
        script: String,
        task: Option<ExecTask>,
    ) -> Outcome {
        let target = ExecTarget {
            workspace: self.w.name.clone(),
            namespace: self.w.namespace.clone(),
            container,
            command: vec!["/bin/sh".into(), "-c".into(), script],
            env: vec![],
            tty: false,
            size: None,
            task,
        };
        let st = self.state;
        let mut session = match crate::relay::exec::open(
            &st.relay_urls,
            &st.relay_secret,
            self.w.agent_id,
            &target,
        )
        .await
        {
            Ok(s) => s,
            Err(e) => {
                let message = match &e {
                    RelayLogsError::Refused { message, .. } => message.clone(),
                    other => {
                        tracing::warn!(workspace = %self.w.name, command = id, error = %warren_types::error_chain(other), "starting a command failed");
                        format!("the command could not be started: {other}")
                    }
                };
                return self.finished(id, None, Some(message)).await;
            }
        };
        // Commands read nothing: their stdin is closed at once.
        if let Err(e) = session.send(&ExecFrame::StdinEof).await {
            return self
                .finished(
                    id,
                    None,
                    Some(format!(
                        "the command could not be started: {}",
                        warren_types::error_chain(&e)
                    )),
                )
                .await;
        }
        let mut out = Utf8Stream::default();
        let mut err = Utf8Stream::default();
        loop {
            let (stream, text) =
                match session.next().await {
                    Ok(Some(ExecFrame::Stdout(b))) => (OutputStream::Stdout, out.push(&b)),
                    Ok(Some(ExecFrame::Stderr(b))) => (OutputStream::Stderr, err.push(&b)),
                    Ok(Some(ExecFrame::Exit(exit))) => {
                        for (stream, rest) in [
                            (OutputStream::Stdout, out.finish()),
                            (OutputStream::Stderr, err.finish()),
                        ] {
                            if !rest.is_empty()
                                && !self
                                    .emit(CommandRunEvent::Output {
                                        command: id.into(),
                                        stream,
                                        data: rest,
                                    })
                                    .await
                            {
                                return Outcome::Gone;
                            }
                        }
                        return self.finished(id, exit.code, exit.message).await;
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => return self
                        .finished(
                            id,
                            None,
                            Some(
                                "the session ended before the command did (agent or relay gone)"
                                    .into(),
                            ),
                        )
                        .await,
                    Err(e) => {
                        return self
                            .finished(
                                id,
                                None,
                                Some(format!(
                                    "the session broke: {}",
                                    warren_types::error_chain(&e)
                                )),
                            )
                            .await
                    }
                };
            if !text.is_empty()
                && !self
                    .emit(CommandRunEvent::Output {
                        command: id.into(),
                        stream,
                        data: text,
                    })
                    .await
            {
                return Outcome::Gone;
            }
        }
    }
}

/// `s` as one single-quoted shell word.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Bytes → text across chunk boundaries: a UTF-8 sequence split between two chunks is kept
/// until its end arrives; bytes that can never be UTF-8 become U+FFFD.
#[derive(Default)]
struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Checked valid just above.
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        // An incomplete sequence at the end: wait for the rest.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Stream;

    #[test]
    fn utf8_split_across_chunks_is_kept_whole() {
        let mut s = Utf8Stream::default();
        let bytes = "é€".as_bytes();
        assert_eq!(s.push(&bytes[..1]), "");
        assert_eq!(s.push(&bytes[1..3]), "é");
        assert_eq!(s.push(&bytes[3..]), "€");
        assert_eq!(s.push(b"a\xffb"), "a\u{FFFD}b");
        assert_eq!(s.push(b"\xe2\x82"), "");
        assert_eq!(s.finish(), "\u{FFFD}");
    }
}
