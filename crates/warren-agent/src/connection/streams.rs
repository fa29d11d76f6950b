//! The streams the relay opens to a workspace besides exec: a dial to one of its ports,
//! its logs (once or followed), and an apply of a devfile component's manifests.

use super::exec::until_client_gone;
use super::*;

impl RelayConnection {
    pub(super) async fn serve_dial(&self, mut stream: TunnelStream, target: DialTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let mount = match target.namespace.is_empty() {
            true => self.inner.url_mounts.dial(&target.workspace).await,
            false => None,
        };
        let dialled = match mount {
            Some(d) => d,
            None => self.inner.runtime.dial(&key, target.port).await,
        };
        let mut endpoint = match dialled {
            Ok(endpoint) => endpoint,
            Err(e) => return refuse(stream, &key, "dial", e).await,
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(error = %error_chain(&e), "relay went away before the stream started");
            return;
        }
        // Larger buffers than copy's 8 KiB: fewer wake-ups per megabyte on bulk transfers.
        let copy = tokio::io::copy_bidirectional_with_sizes(
            &mut stream,
            &mut endpoint,
            warren_tunnel::COPY_BUFFER,
            warren_tunnel::COPY_BUFFER,
        );
        if let Err(e) = copy.await {
            tracing::debug!(workspace = %key, port = target.port, error = %e, "stream ended");
        }
    }

    /// A container's recent output for the relay: the reply, the text, then the end.
    pub(super) async fn serve_logs(&self, mut stream: TunnelStream, target: LogsTarget) {
        let key = WorkspaceKey {
            name: target.workspace.clone(),
            namespace: target.namespace.clone(),
        };
        let tail = target.tail.min(warren_types::relay::MAX_LOG_TAIL);
        if target.follow {
            return self.follow_logs(stream, key, target.container, tail).await;
        }
        let text = match self
            .inner
            .runtime
            .logs(&key, target.container.as_deref(), tail)
            .await
        {
            Ok(text) => text,
            Err(e) => return refuse(stream, &key, "reading logs", e).await,
        };
        if let Err(e) = write_json(&mut stream, &DialReply::Connected).await {
            tracing::info!(workspace = %key, error = %error_chain(&e), "relay went away before the logs");
            return;
        }
        let sent = async {
            stream.write_all(&text).await?;
            stream.shutdown().await
        };
        if let Err(e) = sent.await {
            tracing::info!(workspace = %key, error = %e, "relay went away while logs were sent");
        }
    }

    /// Following: the reply, then chunks as the container writes them, until it stops (the
    /// stream ends) or the relay closes its side (the client went away).
    pub(super) async fn follow_logs(
        &self,
        mut stream: TunnelStream,
        key: WorkspaceKey,
        container: Option<String>,
        tail: u32,
    ) {
        let chunks = self
            .inner
            .runtime
            .follow_logs(&key, container.as_deref(), tail)
            .await;
        let mut chunks = match chunks {
            Ok(c) => c,
            Err(e) => return refuse(stream, &key, "following logs", e).await,
        };
        if write_json(&mut stream, &DialReply::Connected)
            .await
            .is_err()
        {
            return;
        }
        use futures::StreamExt;
        use tokio::io::AsyncReadExt;
        let (mut from_relay, mut to_relay) = tokio::io::split(stream);
        let mut scratch = [0u8; 64];
        loop {
            tokio::select! {
                // Cancel-safe: a chunk not yet taken stays in the stream.
                chunk = chunks.next() => match chunk {
                    Some(Ok(bytes)) => {
                        if to_relay.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => {
                        tracing::info!(workspace = %key, error = %error_chain(&e), "following logs ended");
                        break;
                    }
                    None => break,
                },
                // Cancel-safe: nothing is expected from the relay; any end of its side means
                // the client went away, and dropping `chunks` stops following.
                r = from_relay.read(&mut scratch) => {
                    if !matches!(r, Ok(n) if n > 0) {
                        return;
                    }
                }
            }
        }
        let _ = to_relay.shutdown().await;
    }

    /// A devfile component's objects: the exec'd process writes the manifest, the agent
    /// applies what it holds and reports each object, then the outcome as the exit.
    pub(super) async fn serve_apply(
        &self,
        stream: TunnelStream,
        key: WorkspaceKey,
        session: ExecSession,
        component: String,
    ) {
        use warren_types::relay::MAX_MANIFEST_BYTES;
        let ExecSession {
            mut stdin,
            mut output,
            exit,
            ..
        } = session;
        let _ = stdin.shutdown().await;
        let (from_client, mut to_client) = tokio::io::split(stream);
        let runtime = self.inner.runtime.clone();
        let pump = async move {
            let (mut text, mut errors, mut too_big) = (Vec::new(), Vec::new(), false);
            while let Some(item) = output.next().await {
                match item {
                    Ok(ExecOutput::Stdout(b)) => {
                        if text.len() + b.len() > MAX_MANIFEST_BYTES {
                            too_big = true;
                        } else {
                            text.extend_from_slice(&b);
                        }
                    }
                    Ok(ExecOutput::Stderr(b)) => errors.extend_from_slice(
                        &b[..b.len().min(4096usize.saturating_sub(errors.len()))],
                    ),
                    Err(_) => break,
                }
            }
            let reader = exit.await.unwrap_or_else(|e| ExecExit {
                code: None,
                message: Some(error_chain(&e)),
            });
            let status = if reader.code != Some(0) {
                ExecExit {
                    code: reader.code.or(Some(1)),
                    message: Some(format!(
                        "reading the manifest of component {component} failed: {}",
                        String::from_utf8_lossy(&errors).trim()
                    )),
                }
            } else if too_big {
                ExecExit {
                    code: Some(1),
                    message: Some(format!(
                        "the manifest of component {component} is larger than {} KiB",
                        MAX_MANIFEST_BYTES >> 10
                    )),
                }
            } else {
                match manifest_objects(&String::from_utf8_lossy(&text)) {
                    Err(why) => ExecExit {
                        code: Some(1),
                        message: Some(format!("the manifest of component {component}: {why}")),
                    },
                    Ok(objects) => {
                        match runtime.apply_component(&key, &component, &objects).await {
                            Ok(lines) => {
                                for l in lines {
                                    tunnel::write_exec_frame(
                                        &mut to_client,
                                        &ExecFrame::Stdout(format!("{l}\n").into_bytes()),
                                    )
                                    .await?;
                                }
                                ExecExit {
                                    code: Some(0),
                                    message: Some(format!("applied component {component}")),
                                }
                            }
                            Err(e) => ExecExit {
                                code: Some(1),
                                message: Some(error_chain(&e)),
                            },
                        }
                    }
                }
            };
            tunnel::write_exec_frame(&mut to_client, &ExecFrame::Exit(status)).await?;
            to_client.shutdown().await.map_err(TunnelError::Write)
        };
        until_client_gone(from_client, pump, "apply").await;
    }
}

/// The objects of a manifest: every YAML or JSON document, `List`s opened; each must be a
/// mapping with `apiVersion`, `kind` and `metadata.name`.
fn manifest_objects(text: &str) -> Result<Vec<serde_json::Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v = serde_json::Value::deserialize(doc)
            .map_err(|e| format!("document {}: not YAML: {e}", i + 1))?;
        if v.is_null() {
            continue;
        }
        let items = if v["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
            v["items"].as_array().cloned().unwrap_or_default()
        } else {
            vec![v]
        };
        for o in items {
            if !o.is_object() || o["apiVersion"].as_str().is_none() || o["kind"].as_str().is_none()
            {
                return Err(format!(
                    "document {}: an object needs apiVersion and kind",
                    i + 1
                ));
            }
            if o["metadata"]["name"].as_str().is_none_or(str::is_empty) {
                return Err(format!("document {}: an object needs metadata.name", i + 1));
            }
            out.push(o);
        }
    }
    if out.is_empty() {
        return Err("it holds no object".into());
    }
    Ok(out)
}

/// Answers a stream the runtime could not serve: the failure (its code and the whole error
/// chain), then the end.
pub(super) async fn refuse(
    mut stream: TunnelStream,
    key: &WorkspaceKey,
    what: &str,
    e: RuntimeError,
) {
    let code = match e {
        RuntimeError::NotFound(_) => DialErrorCode::WorkspaceNotFound,
        _ => DialErrorCode::Unreachable,
    };
    let message = error_chain(&e);
    tracing::info!(workspace = %key, error = %message, "{what} failed");
    let _ = write_json(&mut stream, &DialReply::Failed { code, message }).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod manifest_tests {
    use super::manifest_objects;

    #[test]
    fn manifests_are_documents_and_lists_of_named_objects() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [{\"apiVersion\": \"v1\", \"kind\": \"Service\", \"metadata\": {\"name\": \"b\"}}]}\n";
        let names: Vec<String> = manifest_objects(text)
            .unwrap()
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["name"].as_str().unwrap()
                )
            })
            .collect();
        assert_eq!(names, ["ConfigMap a", "Service b"]);
        assert!(manifest_objects("kind: ConfigMap\nmetadata: {name: a}\n")
            .unwrap_err()
            .contains("apiVersion and kind"));
        assert!(manifest_objects("apiVersion: v1\nkind: ConfigMap\n")
            .unwrap_err()
            .contains("metadata.name"));
        assert!(manifest_objects("a: [")
            .unwrap_err()
            .contains("document 1: not YAML"));
        assert!(manifest_objects("").unwrap_err().contains("no object"));
    }
}
