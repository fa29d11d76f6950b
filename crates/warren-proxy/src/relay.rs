//! The proxy's calls to a relay's internal listener: byte tunnels to workspace endpoints and
//! exec sessions (relay.md). Both are HTTP/1.1 upgrades; what follows is raw bytes (tunnel)
//! or [`ExecFrame`]s (exec).

use crate::jwt::InternalKeys;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadHalf, WriteHalf};
use warren_types::api::ApiError;
use warren_types::ids::AgentId;
use warren_types::relay::{
    exec_path, tunnel_path, DialTarget, ExecFrame, ExecQuery, ExecTarget, RELAY_JWT_AUDIENCE,
    TUNNEL_PROTOCOL,
};

/// The relay itself waits up to 20 s for a late agent and then for the dial; a little more
/// here so its own answer arrives first.
const OPEN_TIMEOUT: Duration = Duration::from_secs(45);

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("signing the internal token")]
    Sign(#[source] warren_jwt::JwtError),
    #[error("calling the relay at {url}")]
    Unavailable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The relay answered with an error (`agent_not_connected`, `workspace_unreachable`, …).
    #[error("the relay answered {status} {code}: {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("encoding the exec request")]
    Encode(#[source] serde_json::Error),
    #[error("exec session")]
    Exec(#[source] warren_tunnel::TunnelError),
}

impl RelayError {
    /// True when the workspace (or its agent) is simply not there right now, as opposed to
    /// a fault of the relay.
    pub fn is_unreachable_workspace(&self) -> bool {
        matches!(self, RelayError::Refused { status, .. } if *status == 404 || *status == 502 || *status == 504)
    }
}

/// A bidirectional byte stream through the relay.
pub type Tunnel = reqwest::Upgraded;

/// Client of a relay's internal listener; cheap to clone.
#[derive(Debug, Clone)]
pub struct RelayClient {
    base: url::Url,
    http: reqwest::Client,
    keys: InternalKeys,
}

impl RelayClient {
    pub fn new(base: url::Url, shared_secret: &[u8]) -> Self {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .http1_only()
            .build()
            .expect("a plain reqwest client always builds");
        Self {
            base,
            http,
            keys: InternalKeys::new(shared_secret),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}", self.base.as_str().trim_end_matches('/'), path)
    }

    async fn upgrade(
        &self,
        url: String,
        query: &impl serde::Serialize,
    ) -> Result<Tunnel, RelayError> {
        let token = self
            .keys
            .mint(RELAY_JWT_AUDIENCE)
            .map_err(RelayError::Sign)?;
        let resp = self
            .http
            .get(&url)
            .query(query)
            .bearer_auth(token)
            .header(reqwest::header::CONNECTION, "upgrade")
            .header(reqwest::header::UPGRADE, TUNNEL_PROTOCOL)
            .timeout(OPEN_TIMEOUT)
            .send()
            .await
            .map_err(|source| RelayError::Unavailable {
                url: url.clone(),
                source,
            })?;
        let status = resp.status();
        if status == reqwest::StatusCode::SWITCHING_PROTOCOLS {
            return resp
                .upgrade()
                .await
                .map_err(|source| RelayError::Unavailable { url, source });
        }
        let body = resp.bytes().await.unwrap_or_default();
        let (code, message) = ApiError::parts_of(&body);
        Err(RelayError::Refused {
            status: status.as_u16(),
            code,
            message,
        })
    }

    /// A byte stream to `target` through `agent`'s connection (any relay instance routes).
    pub async fn open_tunnel(
        &self,
        agent: AgentId,
        target: &DialTarget,
    ) -> Result<Tunnel, RelayError> {
        self.upgrade(self.url(&tunnel_path(agent)), target).await
    }

    /// Starts a process in a workspace; the session speaks [`ExecFrame`]s.
    pub async fn open_exec(
        &self,
        agent: AgentId,
        target: &ExecTarget,
    ) -> Result<ExecSession, RelayError> {
        let query = ExecQuery {
            request: serde_json::to_string(target).map_err(RelayError::Encode)?,
        };
        let io = self.upgrade(self.url(&exec_path(agent)), &query).await?;
        let (r, w) = tokio::io::split(io);
        Ok(ExecSession {
            reader: ExecReader { io: r },
            writer: ExecWriter { io: w },
        })
    }
}

/// Both halves of an exec session.
pub struct ExecSession {
    pub reader: ExecReader<Tunnel>,
    pub writer: ExecWriter<Tunnel>,
}

/// Receives what the process writes and how it ended.
pub struct ExecReader<T> {
    io: ReadHalf<T>,
}

impl<T: AsyncRead> ExecReader<T> {
    /// The next message; `None` once the agent closed the session (after `Exit`, or on a
    /// lost connection when no `Exit` came).
    pub async fn next(&mut self) -> Result<Option<ExecFrame>, RelayError> {
        warren_tunnel::read_exec_frame(&mut self.io)
            .await
            .map_err(RelayError::Exec)
    }
}

/// Sends stdin, stdin EOF and terminal sizes.
pub struct ExecWriter<T> {
    io: WriteHalf<T>,
}

impl<T: AsyncWrite> ExecWriter<T> {
    pub async fn send(&mut self, frame: &ExecFrame) -> Result<(), RelayError> {
        warren_tunnel::write_exec_frame(&mut self.io, frame)
            .await
            .map_err(RelayError::Exec)
    }
}
