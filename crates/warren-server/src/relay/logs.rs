//! Server → relay: a workspace container's recent output, fetched through whichever relay
//! routes to the workspace's agent (the relay's internal logs endpoint, an upgrade whose
//! bytes are the text).

use super::jwt;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use warren_types::api::ApiError;
use warren_types::relay::{LogsTarget, LOGS_ROUTE, MAX_LOG_BYTES, TUNNEL_PROTOCOL};
use warren_types::AgentId;

/// Longest wait for the relay and the agent (the relay itself waits a bounded time for a
/// late agent).
const TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum RelayLogsError {
    #[error("no relay is configured (relay_urls)")]
    NoRelay,
    #[error("no relay answered (last tried {url})")]
    Unavailable {
        url: String,
        #[source]
        source: BoxError,
    },
    /// The relay answered with an error: its status, code and message.
    #[error("the relay refused: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

/// Reads `target`'s output through the first of `relay_urls` that answers.
pub async fn fetch(
    relay_urls: &[String],
    secret: &[u8],
    agent: AgentId,
    target: &LogsTarget,
) -> Result<Vec<u8>, RelayLogsError> {
    let (io, url) = open(relay_urls, secret, agent, target).await?;
    // The agent sends at most MAX_LOG_BYTES; a little more is tolerated, never unbounded.
    let mut text = Vec::new();
    bounded(io.take(MAX_LOG_BYTES as u64 + 1024).read_to_end(&mut text))
        .await
        .map_err(|source| RelayLogsError::Unavailable { url, source })?;
    Ok(text)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `fut` within [`TIMEOUT`]; its error and the timeout alike as the cause.
async fn bounded<T, E: Into<BoxError>>(
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, BoxError> {
    tokio::time::timeout(TIMEOUT, fut)
        .await
        .map_err(BoxError::from)?
        .map_err(Into::into)
}

/// The byte stream of `target`'s output (for following: it lasts as long as the container
/// writes and the reader reads), and the relay it comes from.
pub async fn open(
    relay_urls: &[String],
    secret: &[u8],
    agent: AgentId,
    target: &LogsTarget,
) -> Result<(reqwest::Upgraded, String), RelayLogsError> {
    upgrade(relay_urls, secret, agent, LOGS_ROUTE, target).await
}

/// An upgraded stream to `route` (an internal relay route with `{agent_id}`) of the first of
/// `relay_urls` that answers, with `query` as its query string.
pub(super) async fn upgrade<Q: serde::Serialize + ?Sized>(
    relay_urls: &[String],
    secret: &[u8],
    agent: AgentId,
    route: &str,
    query: &Q,
) -> Result<(reqwest::Upgraded, String), RelayLogsError> {
    // No whole-request timeout: a followed stream has no end; the opening is bounded below.
    let client = reqwest::Client::builder()
        .http1_only()
        .connect_timeout(TIMEOUT)
        .build()
        .map_err(|e| RelayLogsError::Unavailable {
            url: String::new(),
            source: Box::new(e),
        })?;
    let token = jwt::mint_for_relay(secret, agent, warren_jwt::now_secs()).map_err(|e| {
        RelayLogsError::Unavailable {
            url: String::new(),
            source: Box::new(e),
        }
    })?;
    let path = route.replace("{agent_id}", &agent.to_string());
    let mut last = RelayLogsError::NoRelay;
    for base in relay_urls {
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let unavailable =
            |e: Box<dyn std::error::Error + Send + Sync>| RelayLogsError::Unavailable {
                url: url.clone(),
                source: e,
            };
        let sent = client
            .get(&url)
            .query(query)
            .bearer_auth(&token)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, TUNNEL_PROTOCOL)
            .send();
        let resp = match bounded(sent).await {
            Ok(r) => r,
            // Try the next relay.
            Err(e) => {
                last = unavailable(e);
                continue;
            }
        };
        if resp.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
            let status = resp.status().as_u16();
            let body = resp.bytes().await.unwrap_or_default();
            let (code, message) = ApiError::parts_of(&body);
            return Err(RelayLogsError::Refused {
                status,
                code,
                message,
            });
        }
        let io = resp.upgrade().await.map_err(|e| unavailable(Box::new(e)))?;
        return Ok((io, url));
    }
    Err(last)
}
