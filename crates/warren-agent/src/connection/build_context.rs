//! Build contexts through the relay: the agent asks for the context of an image one of its
//! workspaces builds at start, and the relay passes on the server's answer — its status,
//! then the tar archive in frames ended by an empty one. A stream that ends without that
//! frame was cut short, and the build fails instead of running on part of its sources.

use super::*;
use crate::runtime::{BuildContexts, FetchedContext};
use warren_types::relay::{BuildContextReply, BuildContextRequest};

/// How long the relay may take to answer (the server resolves the ref, fetches and archives
/// before its first byte); the archive itself then streams without a deadline.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5 * 60);

impl RelayConnection {
    /// This connection as the runtime's source of build contexts. It holds the connection
    /// weakly: the connection holds the runtime, and neither should keep the other alive.
    pub fn build_contexts(&self) -> Arc<dyn BuildContexts> {
        Arc::new(ThroughRelay(Arc::downgrade(&self.inner)))
    }
}

struct ThroughRelay(std::sync::Weak<Inner>);

#[async_trait]
impl BuildContexts for ThroughRelay {
    async fn fetch(
        &self,
        workspace: &str,
        image: &str,
        feature: Option<&str>,
    ) -> Result<FetchedContext, String> {
        let Some(inner) = self.0.upgrade() else {
            return Err("the agent is shutting down".into());
        };
        let connection = RelayConnection { inner };
        connection
            .fetch_build_context(workspace, image, feature)
            .await
    }
}

impl RelayConnection {
    async fn fetch_build_context(
        &self,
        workspace: &str,
        image: &str,
        feature: Option<&str>,
    ) -> Result<FetchedContext, String> {
        let header = StreamOpen::BuildContext(BuildContextRequest {
            workspace: workspace.to_owned(),
            image: image.to_owned(),
            feature: feature.map(str::to_owned),
        });
        let opened = async {
            let mut stream = self.open(&header).await?;
            let reply: BuildContextReply = read_json(&mut stream).await?;
            Ok::<_, TunnelError>((stream, reply))
        };
        let (stream, reply) = tokio::time::timeout(REPLY_TIMEOUT, opened)
            .await
            .map_err(|_| {
                format!(
                    "the relay did not answer the request for its build context within {} s",
                    REPLY_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("fetching its build context: {}", error_chain(&e)))?;
        if reply.status != 200 {
            return Err(reply
                .message
                .unwrap_or_else(|| format!("the server answered {}", reply.status)));
        }
        let archive = futures::stream::try_unfold(Some(stream), |stream| async move {
            let Some(mut stream) = stream else {
                return Ok(None);
            };
            let frame = read_frame(&mut stream).await.map_err(|e| {
                std::io::Error::other(format!(
                    "the build context was cut short: {}",
                    error_chain(&e)
                ))
            })?;
            if frame.is_empty() {
                return Ok(None);
            }
            Ok(Some((bytes::Bytes::from(frame), Some(stream))))
        })
        .boxed();
        Ok(FetchedContext {
            commit: reply.commit.unwrap_or_default(),
            key: reply.key,
            archive,
        })
    }
}
