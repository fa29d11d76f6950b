//! The relay's wire protocols: the agent tunnel (agent ⇄ relay) and the relay's internal endpoints.
//!
//! **Agent tunnel.** The agent dials the relay's agent listener and sends an HTTP/1.1 request
//! `GET /v1/agent/connect` with `Connection: upgrade`, `Upgrade: warren-tunnel/1` and
//! `Authorization: Bearer <agent token>`. The relay checks the token with the server before
//! answering: 401 with an [`crate::api::ApiError`] body when it is refused, `101 Switching
//! Protocols` when it is accepted. After the 101 the raw connection carries yamux (the agent
//! is the yamux client, the relay the server); either side opens streams.
//!
//! Every yamux stream starts with one frame (a big-endian `u32` length, then that many bytes)
//! holding a JSON [`StreamOpen`]; what follows depends on the kind:
//! - `reconcile` (agent → relay): one frame with the request body, unchanged JSON bytes of a
//!   `ReconcileRequest`; the relay answers with a JSON [`ReconcileReply`] frame and then one
//!   frame with the server's response body, unchanged.
//! - `signal` (relay → agent): nothing more; the stream is closed. "Reconcile now".
//! - `ping` (agent → relay, every [`HEARTBEAT_INTERVAL_SECS`]): the relay answers with one
//!   empty frame; no answer in time and the agent reconnects.
//! - `dial` (relay → agent): the agent dials the workspace endpoint and answers with a JSON
//!   [`DialReply`] frame; on success raw bytes follow in both directions until either side
//!   closes.
//! - `exec` (relay → agent): the agent starts a process in the workspace through the
//!   runtime's exec (engine exec, Kubernetes exec) and answers with a [`DialReply`] frame;
//!   on success both directions carry [`ExecFrame`]s (each in one length-prefixed frame)
//!   until the agent has sent [`ExecFrame::Exit`] and closed the stream. Stdin is closed with
//!   [`ExecFrame::StdinEof`], never by closing the stream: a client whose side of the stream
//!   ends before the `Exit` has gone away, and the agent ends (or, where the runtime cannot,
//!   detaches from) the process.
//!
//! **Internal listener** (server and proxy; `Authorization: Bearer <JWT>`, HS256 with the
//! relay↔server shared secret, audience [`RELAY_JWT_AUDIENCE`], at most 30 s of validity):
//! - `POST /internal/agents/{agent_id}/signal` → 200 [`SignalResponse`];
//! - `GET /internal/agents/{agent_id}/tunnel?workspace=&namespace=&port=` with the same
//!   `Upgrade: warren-tunnel/1` → 101 and then raw bytes to the workspace endpoint, or 404
//!   (agent not connected) / 502 (the agent could not dial) with an `ApiError` body.
//! - `GET /internal/agents/{agent_id}/exec?request=<JSON of ExecTarget>` with the same
//!   upgrade → 101 and then [`ExecFrame`]s in both directions, or the same errors.

use crate::ids::AgentId;
use serde::{Deserialize, Serialize};

/// Value of the `Upgrade` header on both the agent connection and internal tunnels.
pub const TUNNEL_PROTOCOL: &str = "warren-tunnel/1";
/// Path agents dial on the relay's agent listener.
pub const AGENT_CONNECT_PATH: &str = "/v1/agent/connect";
/// Route (axum syntax) of the "reconcile now" signal on the relay's internal listener.
pub const SIGNAL_ROUTE: &str = "/internal/agents/{agent_id}/signal";
/// Route (axum syntax) of a byte stream to a workspace endpoint on the internal listener.
pub const TUNNEL_ROUTE: &str = "/internal/agents/{agent_id}/tunnel";
/// Route (axum syntax) of an exec session in a workspace on the internal listener.
pub const EXEC_ROUTE: &str = "/internal/agents/{agent_id}/exec";
/// Route (axum syntax) of a workspace container's recent output on the internal listener.
pub const LOGS_ROUTE: &str = "/internal/agents/{agent_id}/logs";
/// Path of the server's endpoint that checks an agent token; the relay calls it.
pub const AUTHENTICATE_PATH: &str = "/internal/agents/authenticate";
/// Response header on the agent connection's 101 naming the authenticated agent.
pub const AGENT_ID_RESPONSE_HEADER: &str = "x-warren-agent-id";

/// Issuers, audience and the longest validity of the JWTs on the relay's internal endpoints:
/// the same constants as the server's.
pub use crate::internal::{
    INTERNAL_JWT_MAX_VALIDITY_SECS, PROXY_JWT_ISSUER, RELAY_JWT_AUDIENCE, SERVER_JWT_ISSUER,
};

/// The agent pings the relay this often; a ping unanswered within the timeout makes it
/// reconnect (a vanished relay host sends no TCP reset).
pub const HEARTBEAT_INTERVAL_SECS: u64 = 15;
pub const HEARTBEAT_TIMEOUT_SECS: u64 = 10;
/// The relay closes an agent connection that opened no stream (not even a ping) for this long.
pub const AGENT_IDLE_TIMEOUT_SECS: u64 = 60;

/// Largest frame either side accepts; bigger frames are a protocol error, never an allocation.
pub const MAX_FRAME_LEN: u32 = 64 * 1024 * 1024;

/// The path of the signal endpoint for one agent.
pub fn signal_path(agent: AgentId) -> String {
    format!("/internal/agents/{agent}/signal")
}

/// The path of the tunnel endpoint for one agent (add [`TunnelQuery`] as the query string).
pub fn tunnel_path(agent: AgentId) -> String {
    format!("/internal/agents/{agent}/tunnel")
}

/// The path of the exec endpoint for one agent (add [`ExecQuery`] as the query string).
pub fn exec_path(agent: AgentId) -> String {
    format!("/internal/agents/{agent}/exec")
}

/// Prefixes `payload` with its length, the framing of every message on a tunnel stream.
pub fn encode_frame(payload: &[u8]) -> Result<Vec<u8>, FrameTooLarge> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l <= MAX_FRAME_LEN)
        .ok_or(FrameTooLarge { len: payload.len() })?;
    let mut out = Vec::with_capacity(4 + payload.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    Ok(out)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
pub struct FrameTooLarge {
    pub len: usize,
}

/// Body of `POST /internal/agents/authenticate` (relay → server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthenticateRequest {
    pub token: String,
}

/// 200 answer of `POST /internal/agents/authenticate`; a refused token is a 401.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthenticateResponse {
    pub agent_id: AgentId,
    pub agent_name: String,
}

/// The first frame of every tunnel stream: what the stream is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum StreamOpen {
    /// Agent → relay: a reconcile call; the request body follows in the next frame.
    Reconcile,
    /// Relay → agent: reconcile now (a desired state changed on the server).
    Signal,
    /// Relay → agent: open a byte stream to a workspace endpoint.
    Dial(DialTarget),
    /// Agent → relay: liveness check; the relay answers with one empty frame.
    Ping,
    /// Relay → agent: run a process in the workspace; [`ExecFrame`]s follow the reply.
    Exec(ExecTarget),
    /// Relay → agent: the recent output of a workspace's container; after the reply the
    /// agent writes the text and closes the stream (when following: once the container
    /// stopped or the relay closed its side).
    Logs(LogsTarget),
    /// Agent → relay: keep this GitOps source in sync; [`crate::gitops::GitopsFrame`]s
    /// follow in both directions until either side closes.
    Gitops { source: String },
    /// Agent → relay: the build context of an image a workspace builds before it starts
    /// ([`IMAGE_BUILDS_ANNOTATION`]); the relay answers with a [`BuildContextReply`], then
    /// (on 200) the tar archive in frames, ended by an empty frame.
    BuildContext(BuildContextRequest),
}

/// Pod template annotation of a workspace whose images are built before its containers
/// start (devfile `image` components with `autoBuild`, a dev container's `build`): a JSON
/// list of [`BuildImageTask`]s. The runtime builds each one its workspace does not have yet,
/// from the context the server archives out of the project's repository.
pub const IMAGE_BUILDS_ANNOTATION: &str = "warren.dev/image-builds";

/// Server endpoint (relay → server, JWT naming the agent) answering a
/// [`BuildContextRequest`] with the context as a tar archive (`application/x-tar`), the
/// commit it was archived from in [`BUILD_COMMIT_HEADER`].
pub const BUILD_CONTEXT_PATH: &str = "/internal/agents/build-context";
/// Response header of [`BUILD_CONTEXT_PATH`]: the commit the context was archived from.
pub const BUILD_COMMIT_HEADER: &str = "warren-build-commit";
/// Response header of [`BUILD_CONTEXT_PATH`]: the build's key, a digest of everything the
/// build is made of (the context's contents, the Dockerfile's path, the arguments, the
/// target). Two builds with one key build the same thing, so an agent may reuse the image
/// of one for the other instead of building again.
pub const BUILD_KEY_HEADER: &str = "warren-build-key";

/// Which build context an agent wants: the one of image `image` of its workspace
/// `workspace`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildContextRequest {
    pub workspace: String,
    pub image: String,
    /// A local Feature of the image's dev container (its folder, from the repository's
    /// root, as [`crate::features::FeatureSource::Local`] names it): that folder is the
    /// context instead of the image's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feature: Option<String>,
}

/// The relay's first answer on a [`StreamOpen::BuildContext`] stream: the server's status,
/// and its commit and key (200) or its message (otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildContextReply {
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The build's key ([`BUILD_KEY_HEADER`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Most lines of output a logs request may ask for.
pub const MAX_LOG_TAIL: u32 = 10_000;
/// Most bytes of output a logs answer carries (the end is kept when there is more).
pub const MAX_LOG_BYTES: usize = 2 << 20;

/// Whose output to fetch; also the query string of the internal logs endpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsTarget {
    /// Workspace name.
    pub workspace: String,
    pub namespace: String,
    /// The container; `None` means the workspace's main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// The last this many lines (at most [`MAX_LOG_TAIL`]).
    pub tail: u32,
    /// Keep sending what the container writes after the tail until the container stops or
    /// the client goes away.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub follow: bool,
}

/// A process to run in a workspace (the web terminal, SSH sessions, `sftp`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecTarget {
    /// Workspace name.
    pub workspace: String,
    pub namespace: String,
    /// The container; `None` means the workspace's main container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// argv; never empty. An interactive shell is `["/bin/sh", "-l"]` or a wrapper
    /// that prefers a better shell when the image has one.
    pub command: Vec<String>,
    /// Extra environment variables for the process (SSH `env` requests, `TERM`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<EnvVar>,
    /// Allocate a pseudo-terminal (stdout and stderr are then one stream).
    #[serde(default)]
    pub tty: bool,
    /// Initial terminal size when `tty`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<TerminalSize>,
    /// What the agent does with the process's output instead of streaming it: `None` for
    /// an ordinary exec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<ExecTask>,
}

/// Work the agent does for a workspace with an exec'd process's output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ExecTask {
    /// The process writes a build context as a tar archive to stdout (`tar -cf - .` in the
    /// project's sources); the agent builds an image from it with its runtime, the build's
    /// progress sent as stdout, the end as the exit.
    BuildImage(BuildImageTask),
    /// The process writes a devfile `kubernetes`/`openshift` component's manifest (YAML or
    /// JSON, several documents, `List`s) to stdout; the agent applies its objects for the
    /// workspace, what it did sent as stdout, the end as the exit.
    ApplyComponent { component: String },
}

/// Most bytes of a component manifest the agent reads.
pub const MAX_MANIFEST_BYTES: usize = 1 << 20;

/// An image build from a devfile's `image` component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildImageTask {
    /// The name (and tag) the image gets.
    pub image: String,
    /// The Dockerfile's path inside the build context; empty when a dev container's image
    /// is the base ([`crate::features::FeatureBuild::base_image`]).
    #[serde(default)]
    pub dockerfile: String,
    /// `--build-arg`s, `NAME=value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// The Dockerfile stage to build (`--target`); the last when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// A dev container's Features, installed on top of what the Dockerfile (or the base
    /// image) makes. Only builds at start have them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Box<crate::features::FeatureBuild>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvVar {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalSize {
    pub cols: u16,
    pub rows: u16,
}

/// Query string of the internal exec endpoint: `request` is the JSON of an [`ExecTarget`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecQuery {
    pub request: String,
}

/// How an exec'd process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecExit {
    /// The exit code; `None` when the runtime could not tell (killed, connection lost).
    pub code: Option<i32>,
    /// Why the code is missing or what went wrong, for the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl ExecExit {
    /// How a local process ended: its code, or the signal that killed it.
    pub fn of_process(status: std::process::ExitStatus) -> ExecExit {
        match status.code() {
            Some(code) => ExecExit {
                code: Some(code),
                message: None,
            },
            None => ExecExit {
                code: None,
                message: Some(format!("the process was killed ({status})")),
            },
        }
    }
}

/// One message of an exec session, after the [`DialReply`]. On the wire: one
/// length-prefixed frame whose first byte is the tag, then the payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFrame {
    /// Client → agent (tag 0): bytes for the process's stdin.
    Stdin(Vec<u8>),
    /// Client → agent (tag 1): stdin is closed.
    StdinEof,
    /// Client → agent (tag 2): the terminal was resized (`cols`, `rows` as big-endian u16).
    Resize(TerminalSize),
    /// Agent → client (tag 3): bytes the process wrote to stdout (or the terminal).
    Stdout(Vec<u8>),
    /// Agent → client (tag 4): bytes the process wrote to stderr (never with a tty).
    Stderr(Vec<u8>),
    /// Agent → client (tag 5, JSON payload): the process ended; the agent closes the stream
    /// after this frame.
    Exit(ExecExit),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecFrameError {
    #[error("empty exec frame")]
    Empty,
    #[error("unknown exec frame tag {0}")]
    UnknownTag(u8),
    #[error("exec frame with tag {tag}: {message}")]
    Malformed { tag: u8, message: String },
}

impl ExecFrame {
    /// The payload of this message (without the length prefix).
    pub fn encode(&self) -> Vec<u8> {
        let (tag, body): (u8, std::borrow::Cow<'_, [u8]>) = match self {
            ExecFrame::Stdin(b) => (0, b.as_slice().into()),
            ExecFrame::StdinEof => (1, (&[][..]).into()),
            ExecFrame::Resize(s) => {
                let mut v = Vec::with_capacity(4);
                v.extend_from_slice(&s.cols.to_be_bytes());
                v.extend_from_slice(&s.rows.to_be_bytes());
                (2, v.into())
            }
            ExecFrame::Stdout(b) => (3, b.as_slice().into()),
            ExecFrame::Stderr(b) => (4, b.as_slice().into()),
            ExecFrame::Exit(e) => (
                5,
                serde_json::to_vec(e)
                    .expect("an exit status always serialises")
                    .into(),
            ),
        };
        let mut out = Vec::with_capacity(1 + body.len());
        out.push(tag);
        out.extend_from_slice(&body);
        out
    }

    /// Parses one payload (without the length prefix).
    pub fn decode(payload: &[u8]) -> Result<Self, ExecFrameError> {
        let (&tag, body) = payload.split_first().ok_or(ExecFrameError::Empty)?;
        let malformed = |message: String| ExecFrameError::Malformed { tag, message };
        Ok(match tag {
            0 => ExecFrame::Stdin(body.to_vec()),
            1 if body.is_empty() => ExecFrame::StdinEof,
            2 if body.len() == 4 => ExecFrame::Resize(TerminalSize {
                cols: u16::from_be_bytes([body[0], body[1]]),
                rows: u16::from_be_bytes([body[2], body[3]]),
            }),
            3 => ExecFrame::Stdout(body.to_vec()),
            4 => ExecFrame::Stderr(body.to_vec()),
            5 => {
                ExecFrame::Exit(serde_json::from_slice(body).map_err(|e| malformed(e.to_string()))?)
            }
            1 | 2 => return Err(malformed(format!("unexpected length {}", body.len()))),
            other => return Err(ExecFrameError::UnknownTag(other)),
        })
    }
}

/// A workspace endpoint the agent dials on the relay's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DialTarget {
    /// Workspace name.
    pub workspace: String,
    pub namespace: String,
    pub port: u16,
}

/// Query string of the internal tunnel endpoint.
pub type TunnelQuery = DialTarget;

/// The relay's answer to a `reconcile` stream: the server's status; its body follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconcileReply {
    pub status: u16,
}

/// The agent's answer to a `dial` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum DialReply {
    /// Connected; raw bytes follow.
    Connected,
    /// The endpoint could not be reached; the stream is closed after this frame.
    Failed {
        code: DialErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DialErrorCode {
    /// No such workspace on this agent's runtime.
    WorkspaceNotFound,
    /// The workspace exists but its endpoint did not accept the connection.
    Unreachable,
    /// The runtime refused or failed to start the process (no such container, not running).
    ExecFailed,
}

/// 200 answer of the signal endpoint: how many connections of the agent were signalled
/// (0 when the agent is not connected; it reconciles fully when it connects anyway).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalResponse {
    pub connections: usize,
}

/// Claims of the short-lived HS256 JWTs between relay, server and proxy (one type, defined
/// with the server's internal endpoints).
pub use crate::internal::InternalClaims;

// ---- relay↔relay (several relay instances) ----

/// Private relay↔relay endpoint: deliver a signal to this instance's own connections only.
pub const PEER_SIGNAL_ROUTE: &str = "/peer/agents/{agent_id}/signal";
/// Private relay↔relay endpoint: open a tunnel through this instance's own connection only.
pub const PEER_TUNNEL_ROUTE: &str = "/peer/agents/{agent_id}/tunnel";
/// Private relay↔relay endpoint: open an exec session through this instance's own connection.
pub const PEER_EXEC_ROUTE: &str = "/peer/agents/{agent_id}/exec";
/// Private relay↔relay endpoint: fetch container output through this instance's connection.
pub const PEER_LOGS_ROUTE: &str = "/peer/agents/{agent_id}/logs";
/// Issuer and audience of relay↔relay JWTs (signed with a secret only relays share).
pub const PEER_JWT_ISSUER: &str = "warren-relay";
/// Longest validity a relay accepts on a relay↔relay JWT.
pub const PEER_JWT_MAX_VALIDITY_SECS: i64 = 30;
/// Error code a gateway instance answers (404) when it holds no connection of the agent.
pub const AGENT_NOT_HERE: &str = "agent_not_here";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_open_wire_form() {
        let open = StreamOpen::Dial(DialTarget {
            workspace: "w".into(),
            namespace: "n".into(),
            port: 8080,
        });
        let json = serde_json::to_string(&open).unwrap();
        assert_eq!(
            json,
            r#"{"type":"dial","workspace":"w","namespace":"n","port":8080}"#
        );
        assert_eq!(serde_json::from_str::<StreamOpen>(&json).unwrap(), open);
        assert_eq!(
            serde_json::to_string(&StreamOpen::Reconcile).unwrap(),
            r#"{"type":"reconcile"}"#
        );
        let failed = DialReply::Failed {
            code: DialErrorCode::Unreachable,
            message: "refused".into(),
        };
        let json = serde_json::to_string(&failed).unwrap();
        assert_eq!(
            json,
            r#"{"result":"failed","code":"unreachable","message":"refused"}"#
        );
        assert!(serde_json::from_str::<StreamOpen>(r#"{"type":"exec"}"#).is_err());
        assert!(serde_json::from_str::<StreamOpen>(
            r#"{"type":"exec","workspace":"w","namespace":"n","command":["sh"]}"#
        )
        .is_ok());
    }

    #[test]
    fn exec_frames_round_trip_and_reject_garbage() {
        let frames = [
            ExecFrame::Stdin(b"ls\n".to_vec()),
            ExecFrame::StdinEof,
            ExecFrame::Resize(TerminalSize { cols: 300, rows: 2 }),
            ExecFrame::Stdout(vec![0, 255]),
            ExecFrame::Stderr(vec![]),
            ExecFrame::Exit(ExecExit {
                code: Some(3),
                message: None,
            }),
        ];
        for f in frames {
            assert_eq!(ExecFrame::decode(&f.encode()).unwrap(), f);
        }
        assert_eq!(ExecFrame::decode(&[]), Err(ExecFrameError::Empty));
        assert_eq!(ExecFrame::decode(&[9]), Err(ExecFrameError::UnknownTag(9)));
        assert!(ExecFrame::decode(&[2, 0, 1]).is_err());
        assert!(ExecFrame::decode(&[1, 0]).is_err());
        assert!(ExecFrame::decode(&[5, b'{']).is_err());
    }

    #[test]
    fn frames_are_length_prefixed_and_bounded() {
        assert_eq!(encode_frame(b"ab").unwrap(), vec![0, 0, 0, 2, b'a', b'b']);
        assert_eq!(signal_path(AgentId(7)), "/internal/agents/7/signal");
    }
}
