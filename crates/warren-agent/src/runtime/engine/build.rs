//! Image builds from devfile `image` components: the build context (a tar archive streamed
//! out of the workspace's container) goes to the engine's `/build`, and its progress comes
//! back line by line. Intermediate containers are removed.
//!
//! The engine is shared by every workspace of the agent (and may be by other agents), so a
//! build never gets the name it asks for: it is tagged with a name of its workspace's own
//! (`scope`), labelled with it, and only that workspace's containers naming the requested
//! image run it (`apply_locked`, `create`). A build cannot replace an image another
//! workspace or the editor's shared tools volume uses.
//!
//! Network: `RUN` steps get a network namespace of their own on the engine's default bridge
//! network — never the host's, whose loopback reaches every workspace's published ports and
//! the agent's own listeners. Builds fetch packages, so not `none`; the default bridge is
//! outside every workspace's NetworkPolicy (the agent's firewall covers workspace networks),
//! which is why an agent can turn builds off (`EngineConfig::image_builds`). Docker takes
//! this as `networkmode=bridge`; Podman's Docker-compatible `/build` ignores `networkmode` and
//! runs `RUN` in the host's namespace unless told otherwise with its own `nsoptions`, which
//! bollard cannot send — so the request is made here directly, with both.
//!
//! The Dockerfile's path must stay inside the context: Podman joins it to the context
//! directory unchecked (and takes a JSON list as absolute paths), which would read a file of
//! the engine's host.

use super::scope::{BUILD_KEY_LABEL, BUILD_SCOPE_LABEL, BUILT_FOR_LABEL};
use super::{EngineRuntime, OWNER_LABEL};
use crate::runtime::{BuildContext, BuildProgress, RuntimeError, WorkspaceKey, AGENT_ID_LABEL};
use futures::StreamExt;
use std::collections::HashMap;
use std::time::Duration;
use warren_types::relay::BuildImageTask;

/// How long connecting to the engine may take (the build itself is streamed, not bounded).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of the engine's answer held while waiting for the end of one message.
const MAX_PENDING: usize = 1 << 20;
/// Podman's own namespace options for `RUN`: a private network namespace (on the default
/// network) instead of the host's.
const PODMAN_PRIVATE_NETWORK: &str = r#"[{"Name":"network","Host":false}]"#;

impl EngineRuntime {
    pub(super) async fn build(
        &self,
        workspace: &WorkspaceKey,
        task: &BuildImageTask,
        context: BuildContext,
        key: Option<&str>,
    ) -> Result<BuildProgress, RuntimeError> {
        let refused = |why: String| {
            RuntimeError::NotAvailable(format!("building image {}: {why}", task.image))
        };
        if !self.inner.config.image_builds {
            return Err(refused(
                "image builds are turned off on this agent (its engine setting `image_builds` \
                 is false); build the image elsewhere and push it to a registry the agent \
                 pulls from"
                    .into(),
            ));
        }
        check_dockerfile(&task.dockerfile).map_err(refused)?;
        let name = &workspace.name;
        let record = super::is_dns_label(name)
            .then(|| self.read_record(name))
            .flatten()
            .ok_or_else(|| RuntimeError::NotFound(format!("workspace {workspace}")))?;
        let scope = self.build_scope(name, &record.deployment);
        let tag = scope
            .image_for(&task.image)
            .map_err(|e| refused(e.to_string()))?;
        let mut args = HashMap::new();
        for a in &task.args {
            let (k, v) = a.split_once('=').unwrap_or((a.as_str(), ""));
            args.insert(k.to_owned(), v.to_owned());
        }
        let labels = HashMap::from([
            (
                AGENT_ID_LABEL.to_owned(),
                self.inner.config.agent_id.to_string(),
            ),
            (OWNER_LABEL.to_owned(), self.inner.owner.clone()),
            (BUILT_FOR_LABEL.to_owned(), name.clone()),
            (BUILD_SCOPE_LABEL.to_owned(), scope.label().to_owned()),
            (
                BUILD_KEY_LABEL.to_owned(),
                key.unwrap_or_default().to_owned(),
            ),
        ]);
        let json = |v: &HashMap<String, String>| serde_json::to_string(v).unwrap_or_default();
        let mut query = vec![
            ("t", tag.clone()),
            ("dockerfile", task.dockerfile.clone()),
            ("rm", "1".to_owned()),
            ("forcerm", "1".to_owned()),
            ("buildargs", json(&args)),
            ("labels", json(&labels)),
            ("networkmode", "bridge".to_owned()),
            ("nsoptions", PODMAN_PRIVATE_NETWORK.to_owned()),
        ];
        if let Some(target) = &task.target {
            query.push(("target", target.clone()));
        }
        let (client, base) = endpoint(&self.inner.host).map_err(refused)?;
        let version = self.inner.docker.client_version();
        let url = format!(
            "{base}/v{}.{}/build",
            version.major_version, version.minor_version
        );
        let request = client
            .post(url)
            .query(&query)
            .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
            .body(reqwest::Body::wrap_stream(context));
        tracing::info!(workspace = %workspace, requested = %task.image, image = %tag, "building an image");
        let first = format!(
            "warren: building {} as {tag}, which only this workspace's containers run\n",
            task.image
        );
        Ok(progress(request, task.image.clone(), first))
    }
}

/// A Dockerfile path inside the build context.
fn check_dockerfile(path: &str) -> Result<(), String> {
    let inside = !path.is_empty()
        && !path.starts_with(['/', '['])
        && !path.contains(['\\', '\0'])
        && path.split('/').all(|part| part != "..");
    if inside {
        Ok(())
    } else {
        Err(format!(
            "the Dockerfile path {path:?} must be relative and stay inside the build context"
        ))
    }
}

/// A client for the engine at `host` (`unix://`, `tcp://` or `http://`, as `EngineConfig`
/// allows) and the base URL of its API.
pub(super) fn endpoint(host: &str) -> Result<(reqwest::Client, String), String> {
    let builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        // An engine's API is never reached through an HTTP proxy of the environment.
        .no_proxy();
    let (builder, base) = if let Some(path) = host.strip_prefix("unix://") {
        (builder.unix_socket(path), "http://engine".to_owned())
    } else if host.starts_with('/') {
        (builder.unix_socket(host), "http://engine".to_owned())
    } else if let Some(rest) = host.strip_prefix("tcp://") {
        (builder, format!("http://{}", rest.trim_end_matches('/')))
    } else if host.starts_with("http://") {
        (builder, host.trim_end_matches('/').to_owned())
    } else {
        return Err(format!(
            "the engine at {host} cannot be reached for a build"
        ));
    };
    let client = builder
        .build()
        .map_err(|e| format!("preparing a client for the engine at {host}: {e}"))?;
    Ok((client, base))
}

/// One message of the engine's build answer.
#[derive(Debug, Default, serde::Deserialize)]
struct BuildMessage {
    #[serde(default)]
    stream: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default, rename = "errorDetail")]
    error_detail: Option<ErrorDetail>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct ErrorDetail {
    #[serde(default)]
    message: Option<String>,
}

impl BuildMessage {
    fn error(&self) -> Option<String> {
        self.error_detail
            .as_ref()
            .and_then(|d| d.message.clone())
            .or_else(|| self.error.clone())
            .map(|e| e.trim().to_owned())
    }
}

/// The engine's build answers as JSON messages: `stream` text split at newlines, an error as
/// the end.
fn progress(request: reqwest::RequestBuilder, image: String, first: String) -> BuildProgress {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, RuntimeError>>(64);
    tokio::spawn(async move {
        let failed = |message: String| {
            Err(RuntimeError::NotAvailable(format!(
                "building {image}: {message}"
            )))
        };
        if tx.send(Ok(first)).await.is_err() {
            return;
        }
        let response = match request.send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let _ = tx
                    .send(failed(format!(
                        "the engine answered {status}: {}",
                        body.trim()
                    )))
                    .await;
                return;
            }
            Err(e) => {
                let _ = tx.send(failed(warren_types::error_chain(&e))).await;
                return;
            }
        };
        let mut answers = response.bytes_stream();
        let (mut pending, mut partial) = (Vec::new(), String::new());
        while let Some(chunk) = answers.next().await {
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => {
                    let _ = tx.send(failed(warren_types::error_chain(&e))).await;
                    return;
                }
            };
            pending.extend_from_slice(&chunk);
            let mut messages =
                serde_json::Deserializer::from_slice(&pending).into_iter::<BuildMessage>();
            let mut parsed = Vec::new();
            let mut broken = None;
            for m in messages.by_ref() {
                match m {
                    Ok(m) => parsed.push(m),
                    // The rest of the message is in a later chunk.
                    Err(e) if e.is_eof() => break,
                    Err(e) => {
                        broken = Some(e.to_string());
                        break;
                    }
                }
            }
            let used = messages.byte_offset();
            pending.drain(..used);
            for m in parsed {
                if let Some(e) = m.error() {
                    let _ = tx.send(failed(e)).await;
                    return;
                }
                partial.push_str(m.stream.as_deref().unwrap_or_default());
                while let Some(i) = partial.find('\n') {
                    let line: String = partial.drain(..=i).collect();
                    if tx.send(Ok(line)).await.is_err() {
                        return;
                    }
                }
            }
            if let Some(e) = broken {
                let _ = tx
                    .send(failed(format!("the engine's answer is not readable: {e}")))
                    .await;
                return;
            }
            if pending.len() > MAX_PENDING {
                let _ = tx
                    .send(failed("the engine sent an oversized message".into()))
                    .await;
                return;
            }
        }
        if !partial.is_empty() {
            let _ = tx.send(Ok(partial)).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) }).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dockerfile_must_stay_in_the_context() {
        for ok in [
            "Dockerfile",
            "docker/Dockerfile.dev",
            "./Dockerfile",
            "a/./b",
        ] {
            assert!(check_dockerfile(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "../../etc/passwd",
            "a/../../b",
            "[\"/etc/passwd\"]",
            "a\\..\\b",
        ] {
            assert!(check_dockerfile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn engine_addresses_map_to_urls() {
        assert_eq!(
            endpoint("unix:///run/podman/podman.sock").unwrap().1,
            "http://engine"
        );
        assert_eq!(
            endpoint("tcp://127.0.0.1:2375").unwrap().1,
            "http://127.0.0.1:2375"
        );
        assert_eq!(
            endpoint("http://engine.example:2375/").unwrap().1,
            "http://engine.example:2375"
        );
        assert!(endpoint("npipe:////./pipe/docker_engine").is_err());
    }
}
