//! Image builds from devfile `image` components: the build context (a tar archive streamed
//! out of the workspace's container) goes to the engine's `/build`, and its progress comes
//! back line by line. Intermediate containers are removed; the image is labelled with the
//! agent and workspace that built it.

use super::{error_message, EngineRuntime};
use crate::runtime::{BuildContext, BuildProgress, RuntimeError, WorkspaceKey, AGENT_ID_LABEL};
use bollard::query_parameters::BuildImageOptionsBuilder;
use futures::StreamExt;
use std::collections::HashMap;
use warren_types::relay::BuildImageTask;

impl EngineRuntime {
    pub(super) async fn build(
        &self,
        workspace: &WorkspaceKey,
        task: &BuildImageTask,
        context: BuildContext,
    ) -> Result<BuildProgress, RuntimeError> {
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
            ("warren.dev/built-for".to_owned(), workspace.name.clone()),
        ]);
        let options = BuildImageOptionsBuilder::default()
            .dockerfile(&task.dockerfile)
            .t(&task.image)
            .rm(true)
            .forcerm(true)
            .buildargs(&args)
            .labels(&labels)
            .build();
        let docker = self.inner.docker.clone();
        let image = task.image.clone();
        Ok(progress(docker, options, context, image))
    }
}

/// The engine's build answers as lines: `stream` text split at newlines, `error` as the end.
fn progress(
    docker: bollard::Docker,
    options: bollard::query_parameters::BuildImageOptions,
    context: BuildContext,
    image: String,
) -> BuildProgress {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<String, RuntimeError>>(64);
    tokio::spawn(async move {
        let mut answers =
            docker.build_image(options, None, Some(bollard::body_try_stream(context)));
        let mut partial = String::new();
        while let Some(item) = answers.next().await {
            let line = match item {
                Ok(info) => {
                    if let Some(e) = info.error_detail.and_then(|d| d.message) {
                        Err(RuntimeError::NotAvailable(format!(
                            "building {image}: {}",
                            e.trim()
                        )))
                    } else {
                        partial.push_str(info.stream.as_deref().unwrap_or_default());
                        let mut lines = Vec::new();
                        while let Some(i) = partial.find('\n') {
                            lines.push(partial.drain(..=i).collect::<String>());
                        }
                        for l in lines {
                            if tx.send(Ok(l)).await.is_err() {
                                return;
                            }
                        }
                        continue;
                    }
                }
                Err(e) => Err(RuntimeError::NotAvailable(format!(
                    "building {image}: {}",
                    error_message(&e)
                ))),
            };
            let _ = tx.send(line).await;
            return;
        }
        if !partial.is_empty() {
            let _ = tx.send(Ok(partial)).await;
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) }).boxed()
}
