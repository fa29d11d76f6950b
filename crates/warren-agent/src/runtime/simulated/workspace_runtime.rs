//! The simulated runtime behind the [`WorkspaceRuntime`] trait: each call acts on the
//! in-memory state, with the failures a test injected.

use super::*;

#[async_trait]
impl WorkspaceRuntime for SimulatedRuntime {
    async fn sync_gitops(
        &self,
        sync: &crate::runtime::GitopsSync<'_>,
    ) -> Result<crate::runtime::GitopsOutcome, RuntimeError> {
        Ok(self.gitops_sync(sync))
    }

    async fn follow_logs(
        &self,
        key: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<crate::runtime::LogStream, RuntimeError> {
        // Subscribed before the tail is read: text appended in between may come twice, but is
        // never lost (a test appends after it has seen the tail anyway).
        let appends = self.log_appends.subscribe();
        let first = self.logs(key, container, tail).await?;
        let id = (key.clone(), container.map(str::to_owned));
        let later = futures::stream::unfold((appends, id), |(mut appends, id)| async move {
            loop {
                match appends.recv().await {
                    Ok((k, text)) if k == id => {
                        return Some((Ok(bytes::Bytes::from(text)), (appends, id)))
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        let head =
            futures::stream::iter((!first.is_empty()).then(|| Ok(bytes::Bytes::from(first))));
        Ok(Box::pin(head.chain(later)))
    }

    async fn logs(
        &self,
        key: &WorkspaceKey,
        container: Option<&str>,
        tail: u32,
    ) -> Result<Vec<u8>, RuntimeError> {
        let st = self.lock();
        if !st.workspaces.contains_key(key) {
            return Err(RuntimeError::NotFound(format!("workspace {key}")));
        }
        let Some(text) = st.logs.get(&(key.clone(), container.map(str::to_owned))) else {
            return match container {
                None => Ok(Vec::new()),
                Some(c) => Err(RuntimeError::NotFound(format!(
                    "container {c} of workspace {key}"
                ))),
            };
        };
        let lines: Vec<&str> = text.lines().collect();
        let keep = lines.len().saturating_sub(tail as usize);
        let mut out = lines[keep..].join("\n");
        if !out.is_empty() {
            out.push('\n');
        }
        Ok(crate::runtime::log_tail(out.into_bytes()))
    }

    async fn apply_component(
        &self,
        key: &WorkspaceKey,
        component: &str,
        objects: &[serde_json::Value],
    ) -> Result<Vec<String>, RuntimeError> {
        let mut st = self.lock();
        if !st.workspaces.contains_key(key) {
            return Err(RuntimeError::NotFound(format!("workspace {key}")));
        }
        let lines = objects
            .iter()
            .map(|o| {
                format!(
                    "applied {} {}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect();
        st.components
            .insert((key.clone(), component.to_owned()), objects.to_vec());
        Ok(lines)
    }

    async fn exec(&self, key: &WorkspaceKey, spec: ExecSpec) -> Result<ExecSession, RuntimeError> {
        let dir = {
            let st = self.lock();
            let running = match st.workspaces.get(key) {
                None => return Err(RuntimeError::NotFound(format!("workspace {key}"))),
                Some(w) => w.replicas > 0 && !w.terminating,
            };
            if !running {
                return Err(exec_error(key, "the workspace is not running".into()));
            }
            if st.exec_echo {
                drop(st);
                return Ok(self.echo_session(&spec));
            }
            if st.exec_disabled {
                return Err(exec_error(
                    key,
                    "exec is disabled on this simulated runtime".into(),
                ));
            }
            st.exec_dir.clone().unwrap_or_else(std::env::temp_dir)
        };
        let Some((program, args)) = spec.command.split_first() else {
            return Err(exec_error(key, "the command is empty".into()));
        };
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(dir)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            // Dropping the session ends the process, as closing a terminal would.
            .kill_on_drop(true);
        if let Some(size) = spec.size.filter(|_| spec.tty) {
            // No PTY here; the size is visible to the process the way shells publish it.
            cmd.env("COLUMNS", size.cols.to_string())
                .env("LINES", size.rows.to_string());
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| exec_error(key, format!("starting {program}: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(exec_error(key, "the child has no pipes".into()));
        };
        let tty = spec.tty;
        let resizes = self.resizes.clone();
        let record = move |size: TerminalSize| {
            resizes.lock().unwrap_or_else(|p| p.into_inner()).push(size);
        };
        if let Some(size) = spec.size.filter(|_| tty) {
            record(size);
        }
        let read_err = |e: std::io::Error| RuntimeError::Runtime {
            context: "reading the output of a simulated exec".into(),
            source: Box::new(e),
        };
        let onlcr = move |b: bytes::Bytes| -> bytes::Bytes {
            if tty && b.contains(&b'\n') {
                let mut v = Vec::with_capacity(b.len() + 16);
                for &c in b.iter() {
                    if c == b'\n' {
                        v.push(b'\r');
                    }
                    v.push(c);
                }
                v.into()
            } else {
                b
            }
        };
        let out = tokio_util::io::ReaderStream::new(stdout)
            .map(move |r| r.map(|b| ExecOutput::Stdout(onlcr(b))).map_err(read_err));
        // With a "tty" both streams are one, as they would be on a terminal (but read from
        // two pipes, so their relative order is not kept).
        let err = tokio_util::io::ReaderStream::new(stderr).map(move |r| {
            r.map(|b| {
                if tty {
                    ExecOutput::Stdout(onlcr(b))
                } else {
                    ExecOutput::Stderr(b)
                }
            })
            .map_err(read_err)
        });
        let output = futures::stream::select(out, err).boxed();
        let (resize, mut sizes) = tokio::sync::mpsc::channel::<TerminalSize>(16);
        // Drained at once so sizes never hold up stdin; ends when the session is dropped.
        tokio::spawn(async move {
            while let Some(size) = sizes.recv().await {
                if tty {
                    record(size);
                }
            }
        });
        let exit = async move {
            let status = child.wait().await.map_err(|e| RuntimeError::Runtime {
                context: "waiting for a simulated exec".into(),
                source: Box::new(e),
            })?;
            Ok(ExecExit::of_process(status))
        };
        let stdin: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>> = if tty {
            // A terminal's Enter is CR; the line discipline hands the program LF.
            let (writer, mut reader) = tokio::io::duplex(64 * 1024);
            let mut stdin = stdin;
            tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let mut buf = vec![0u8; 8192];
                while let Ok(n) = reader.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    for c in &mut buf[..n] {
                        if *c == b'\r' {
                            *c = b'\n';
                        }
                    }
                    if stdin.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                let _ = stdin.shutdown().await;
            });
            Box::pin(writer)
        } else {
            Box::pin(stdin)
        };
        Ok(ExecSession {
            stdin,
            output,
            resize,
            exit: exit.boxed(),
        })
    }

    async fn apply(&self, key: &WorkspaceKey, objects: &[Value]) -> Result<(), RuntimeError> {
        for o in objects {
            if o.get("kind").and_then(Value::as_str).is_none()
                || o.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_none()
            {
                return Err(apply_error(key, "an object lacks kind or metadata.name"));
            }
        }
        let deployment = objects
            .iter()
            .find(|o| o.get("kind").and_then(Value::as_str) == Some("Deployment"))
            .ok_or_else(|| apply_error(key, "the objects contain no Deployment"))?;
        let replicas = deployment
            .pointer("/spec/replicas")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        {
            let mut st = self.lock();
            if let Some(message) = st.fail_next_apply.remove(key) {
                return Err(apply_error(key, message));
            }
            if st.workspaces.get(key).is_some_and(|w| w.terminating) {
                return Err(apply_error(key, "the workspace is being deleted"));
            }
            let auto_settle = st.auto_settle;
            st.next_version += 1;
            let v = st.next_version;
            let ws = st
                .workspaces
                .entry(key.clone())
                .or_insert_with(|| SimulatedWorkspace {
                    objects: vec![],
                    replicas,
                    settled: false,
                    pod_failure: None,
                    deadline_exceeded: false,
                    terminating: false,
                    apply_count: 0,
                    resource_version: v,
                });
            let unchanged = ws.objects == objects;
            ws.apply_count += 1;
            if !unchanged {
                // A new spec starts a rollout; an identical apply is a no-op, as with
                // server-side apply.
                ws.objects = objects.to_vec();
                ws.replicas = replicas;
                ws.settled = auto_settle;
                ws.pod_failure = None;
                ws.deadline_exceeded = false;
                ws.resource_version = v;
            } else {
                return Ok(());
            }
        }
        self.changes.send_modify(|c| *c += 1);
        Ok(())
    }

    async fn delete(&self, key: &WorkspaceKey) -> Result<TerminationProgress, RuntimeError> {
        let progress = {
            let mut st = self.lock();
            st.delete_calls += 1;
            if let Some(reason) = st.delete_blocked.get(key).cloned() {
                if let Some(w) = st.workspaces.get_mut(key) {
                    w.terminating = true;
                }
                return Err(RuntimeError::Blocked {
                    workspace: key.name.clone(),
                    reason,
                });
            }
            let auto_delete = st.auto_delete;
            match st.workspaces.get_mut(key) {
                None => return Ok(TerminationProgress::Terminated),
                Some(_) if auto_delete => {
                    st.workspaces.remove(key);
                    TerminationProgress::Terminated
                }
                Some(w) if w.terminating => return Ok(TerminationProgress::Terminating),
                Some(w) => {
                    w.terminating = true;
                    TerminationProgress::Terminating
                }
            }
        };
        self.changes.send_modify(|c| *c += 1);
        Ok(progress)
    }

    async fn capacity(&self) -> Option<warren_types::reconcile::HostCapacity> {
        self.lock().capacity
    }

    async fn list(&self) -> Result<Vec<ObservedWorkspace>, RuntimeError> {
        let st = self.lock();
        if let Some(message) = &st.fail_list {
            return Err(RuntimeError::Runtime {
                context: "listing simulated workspaces".into(),
                source: Box::new(SimulatedFailure(message.clone())),
            });
        }
        Ok(st
            .workspaces
            .iter()
            .map(|(key, w)| ObservedWorkspace {
                key: key.clone(),
                deployment: Some(Self::deployment(key, w)),
                pod_failure: w.pod_failure.clone(),
                pod_waiting: None,
                terminating: w.terminating,
            })
            .collect())
    }

    async fn usage(&self) -> Result<Vec<crate::runtime::WorkspaceUsage>, RuntimeError> {
        Ok(self.usage_now())
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    async fn dial(
        &self,
        key: &WorkspaceKey,
        port: u16,
    ) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let addr = {
            let st = self.lock();
            if !st.workspaces.contains_key(key) {
                return Err(RuntimeError::NotFound(format!("workspace {key}")));
            }
            st.endpoints.get(&(key.clone(), port)).copied()
        };
        let Some(addr) = addr else {
            return Err(RuntimeError::Runtime {
                context: format!("dialling port {port} of {key}"),
                source: Box::new(SimulatedFailure("connection refused".into())),
            });
        };
        let stream =
            tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| RuntimeError::Runtime {
                    context: format!("dialling port {port} of {key}"),
                    source: Box::new(e),
                })?;
        // Interactive traffic: no Nagle delay on the last hop either.
        let _ = stream.set_nodelay(true);
        Ok(Box::new(stream))
    }
}
