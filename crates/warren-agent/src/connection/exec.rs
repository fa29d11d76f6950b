//! Exec sessions the relay opens into a workspace: a command (a terminal, `warren ws run`,
//! a devfile command) and an image build streamed from the workspace to the engine.

use super::*;

impl RelayConnection {
    /// Runs a process for the relay: the reply, then [`ExecFrame`]s both ways until the
    /// process ended (an `Exit` frame, then the stream closes) or the client went away (the
    /// stream ended or broke before `Exit`), which drops the session and so ends or detaches
    /// from the process.
    pub(super) async fn serve_exec(&self, mut stream: TunnelStream, target: ExecTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let task = target.task.clone();
        // A terminal or SSH shell in the main container: a session attaching.
        let attaching = target.tty && task.is_none() && target.container.is_none();
        let started = if target.command.is_empty() {
            Err(DialReply::Failed {
                code: DialErrorCode::ExecFailed,
                message: "the command is empty".into(),
            })
        } else {
            let spec = ExecSpec {
                container: target.container,
                command: target.command,
                env: target.env.into_iter().map(|e| (e.name, e.value)).collect(),
                tty: target.tty,
                size: target.size,
            };
            self.inner.runtime.exec(&key, spec).await.map_err(|e| {
                let code = match e {
                    RuntimeError::NotFound(_) => DialErrorCode::WorkspaceNotFound,
                    _ => DialErrorCode::ExecFailed,
                };
                DialReply::Failed {
                    code,
                    message: error_chain(&e),
                }
            })
        };
        let session = match started {
            Ok(session) => session,
            Err(reply) => {
                tracing::info!(workspace = %key, reply = ?reply, "exec failed");
                let _ = write_json(&mut stream, &reply).await;
                let _ = stream.shutdown().await;
                return;
            }
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(error = %error_chain(&e), "relay went away before the exec started");
            return;
        }
        match task {
            Some(ExecTask::BuildImage(build)) => {
                return self.serve_build(stream, key, session, build).await
            }
            Some(ExecTask::ApplyComponent { component }) => {
                return self.serve_apply(stream, key, session, component).await
            }
            None => {}
        }
        if attaching {
            post_attach(self.inner.runtime.clone(), key.clone());
        }
        let ExecSession {
            stdin,
            mut output,
            resize,
            exit,
        } = session;
        let (mut from_client, mut to_client) = tokio::io::split(stream);
        let input = async move {
            let mut stdin = Some(stdin);
            loop {
                match tunnel::read_exec_frame(&mut from_client).await {
                    Ok(Some(ExecFrame::Stdin(bytes))) => {
                        // A process that closed its stdin just stops getting input; resizes
                        // still apply.
                        if let Some(s) = stdin.as_mut() {
                            if s.write_all(&bytes).await.is_err() || s.flush().await.is_err() {
                                stdin = None;
                            }
                        }
                    }
                    Ok(Some(ExecFrame::StdinEof)) => {
                        if let Some(mut s) = stdin.take() {
                            let _ = s.shutdown().await;
                        }
                    }
                    Ok(Some(ExecFrame::Resize(size))) => {
                        // A runtime that has finished no longer takes sizes; harmless.
                        let _ = resize.send(size).await;
                    }
                    Ok(Some(other)) => {
                        return format!("the client sent an agent-to-client frame: {other:?}")
                    }
                    Ok(None) => return "the client closed the session".to_owned(),
                    Err(e) => return error_chain(&e),
                }
            }
        };
        let pump = async move {
            while let Some(item) = output.next().await {
                let frame = match item {
                    Ok(ExecOutput::Stdout(b)) => ExecFrame::Stdout(b.to_vec()),
                    Ok(ExecOutput::Stderr(b)) => ExecFrame::Stderr(b.to_vec()),
                    Err(e) => {
                        tracing::info!(workspace = %key, error = %error_chain(&e), "exec output failed");
                        break;
                    }
                };
                tunnel::write_exec_frame(&mut to_client, &frame).await?;
            }
            let status = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        tokio::select! {
            // Cancel-safe: both arms are dropped together with the session; nothing of the
            // stream is reused afterwards.
            why = input => tracing::debug!(reason = %why, "exec client gone; ending the process"),
            // Cancel-safe: as above.
            r = pump => if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "exec client gone before the exit");
            },
        }
    }

    /// An image build: the exec'd process writes the build context (a tar archive), which
    /// streams into the runtime's builder; the client gets the build's progress as stdout
    /// and, at the end, the outcome as the exit (the process's own code when the context
    /// could not be read).
    pub(super) async fn serve_build(
        &self,
        stream: TunnelStream,
        key: WorkspaceKey,
        session: ExecSession,
        build: warren_types::relay::BuildImageTask,
    ) {
        /// Most of the archiver's stderr kept to explain a failure.
        const MAX_STDERR: usize = 4096;
        let ExecSession {
            mut stdin,
            output,
            exit,
            ..
        } = session;
        // The archiver reads nothing.
        let _ = stdin.shutdown().await;
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = stderr.clone();
        let context = output
            .filter_map(move |item| {
                let out = match item {
                    Ok(ExecOutput::Stdout(b)) => Some(Ok(b)),
                    Ok(ExecOutput::Stderr(b)) => {
                        let mut e = kept.lock().unwrap_or_else(|p| p.into_inner());
                        let room = MAX_STDERR.saturating_sub(e.len());
                        e.extend_from_slice(&b[..b.len().min(room)]);
                        None
                    }
                    Err(e) => Some(Err(std::io::Error::other(error_chain(&e)))),
                };
                std::future::ready(out)
            })
            .boxed();
        let (from_client, mut to_client) = tokio::io::split(stream);
        let runtime = self.inner.runtime.clone();
        let image = build.image.clone();
        let pump = async move {
            let mut failure = None;
            let mut refused = None;
            match runtime.build_image(&key, &build, context).await {
                Ok(mut progress) => {
                    while let Some(line) = progress.next().await {
                        match line {
                            Ok(text) => {
                                tunnel::write_exec_frame(
                                    &mut to_client,
                                    &ExecFrame::Stdout(text.into_bytes()),
                                )
                                .await?
                            }
                            Err(e) => {
                                failure = Some(error_chain(&e));
                                break;
                            }
                        }
                    }
                }
                Err(e) => refused = Some(error_chain(&e)),
            }
            let archiver = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            let why = String::from_utf8_lossy(&stderr.lock().unwrap_or_else(|p| p.into_inner()))
                .trim()
                .to_owned();
            let status = match (archiver.code, failure.or(refused.clone())) {
                // Refused before reading anything: what the archiver did does not matter.
                (_, Some(r)) if refused.is_some() => ExecExit {
                    code: Some(1),
                    message: Some(r),
                },
                (Some(c), _) if c != 0 => ExecExit {
                    code: Some(c),
                    message: Some(format!("reading the build context failed: {why}")),
                },
                (_, Some(f)) => ExecExit {
                    code: Some(1),
                    message: Some(f),
                },
                (Some(0), None) => ExecExit {
                    code: Some(0),
                    message: Some(format!("built {image}")),
                },
                (_, None) => archiver,
            };
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        until_client_gone(from_client, pump, "build").await;
    }
}

/// Runs `work` (an agent task answering an exec session) until it ends or the client goes
/// away, whichever is first: the client only ever closes its side, so reading tells.
pub(super) async fn until_client_gone<R, F>(mut from_client: R, work: F, what: &str)
where
    R: tokio::io::AsyncRead + Unpin,
    F: std::future::Future<Output = Result<(), TunnelError>>,
{
    let gone = async move {
        loop {
            match tunnel::read_exec_frame(&mut from_client).await {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
    };
    tokio::select! {
        // Cancel-safe: dropping `work` drops its exec session and the runtime's request
        // (an engine build stops; an apply stops between API calls, its inventory written
        // first so the next apply prunes whatever was made).
        () = gone => tracing::debug!(task = what, "client gone; stopping"),
        // Cancel-safe: as above.
        r = work => if let Err(e) = r {
            tracing::debug!(task = what, error = %error_chain(&e), "client gone before the end");
        },
    }
}

/// Runs the workspace's post-attach commands ([`warren_types::config::POST_ATTACH_SCRIPT`], a dev
/// container's `postAttachCommand`) beside a session that attached, in its main container:
/// in the background, so the session never waits for them, and to their end (dropping the
/// exec would hang them up). A workspace without such commands costs one exec that finds no
/// script.
fn post_attach(runtime: Arc<dyn WorkspaceRuntime>, key: WorkspaceKey) {
    tokio::spawn(async move {
        let script = warren_types::config::POST_ATTACH_SCRIPT;
        let spec = ExecSpec {
            container: None,
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("[ -f {script} ] || exit 0; exec /bin/sh {script}"),
            ],
            env: vec![],
            tty: false,
            size: None,
        };
        match runtime.exec(&key, spec).await {
            Ok(ExecSession {
                mut stdin,
                mut output,
                exit,
                ..
            }) => {
                let _ = stdin.shutdown().await;
                while output.next().await.is_some() {}
                if let Ok(e) = exit.await {
                    tracing::debug!(workspace = %key, code = ?e.code, "post-attach commands ended");
                }
            }
            Err(e) => {
                tracing::info!(workspace = %key, error = %error_chain(&e), "running the post-attach commands failed")
            }
        }
    });
}
