//! The agent ⇄ relay tunnel, shared by both ends: a yamux session driven by one task, plus
//! the framing every tunnel stream starts with (`warren_types::relay`).
//!
//! yamux only makes progress while its `Connection` is polled, so one driver task owns it,
//! accepts inbound streams and opens outbound ones on request. Flow control is yamux's: every
//! stream has its own receive window, so a stream whose reader stalls stops only its sender.
//! It is a wire-protocol library, like `warren-types`: the relay and the agent both depend on
//! it, and neither depends on the other.

use futures::future::poll_fn;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::VecDeque;
use std::future::Future;
use std::task::Poll;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{Compat, FuturesAsyncReadCompatExt, TokioAsyncReadCompatExt};
use tokio_util::sync::CancellationToken;
use warren_types::relay::{encode_frame, MAX_FRAME_LEN};

mod coalesce;
use coalesce::Coalesced;

/// Buffer size of each direction when a tunnel stream is spliced to a socket: larger than
/// tokio's 8 KiB default, so bulk transfers cost fewer wake-ups and yamux frames per byte.
pub const COPY_BUFFER: usize = 64 * 1024;

/// A tunnel stream as a tokio byte stream.
pub type TunnelStream = Compat<yamux::Stream>;

#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error("the agent connection is closed")]
    Closed,
    #[error("opening a stream on the agent connection")]
    Open(#[source] yamux::ConnectionError),
    #[error("reading a frame")]
    Read(#[source] std::io::Error),
    #[error("writing a frame")]
    Write(#[source] std::io::Error),
    #[error("frame of {len} bytes exceeds the limit of {MAX_FRAME_LEN} bytes")]
    FrameTooLarge { len: usize },
    #[error("malformed frame")]
    Malformed(#[source] serde_json::Error),
    #[error("malformed exec frame")]
    MalformedExec(#[source] warren_types::relay::ExecFrameError),
}

type OpenReply = oneshot::Sender<Result<yamux::Stream, TunnelError>>;

/// A handle that opens streams on a running session; cheap to clone.
#[derive(Clone, Debug)]
pub struct Session {
    open_tx: mpsc::Sender<OpenReply>,
}

impl Session {
    /// Opens a new stream to the peer.
    pub async fn open(&self) -> Result<TunnelStream, TunnelError> {
        let (tx, rx) = oneshot::channel();
        self.open_tx
            .send(tx)
            .await
            .map_err(|_| TunnelError::Closed)?;
        let stream = rx.await.map_err(|_| TunnelError::Closed)??;
        Ok(stream.compat())
    }

    /// Whether the driver has stopped.
    pub fn is_closed(&self) -> bool {
        self.open_tx.is_closed()
    }

    /// Completes when the driver has stopped (the connection is gone).
    pub async fn closed(&self) {
        self.open_tx.closed().await
    }
}

/// Starts driving a yamux session over `io`. Inbound streams are handed to `on_inbound`
/// (which must not block: spawn). The returned future finishes when the connection is
/// closed by the peer, fails, or `shutdown` fires (then it closes the session cleanly).
pub fn start<T>(
    io: T,
    mode: yamux::Mode,
    shutdown: CancellationToken,
    mut on_inbound: impl FnMut(TunnelStream) + Send + 'static,
) -> (
    Session,
    impl std::future::Future<Output = Result<(), yamux::ConnectionError>> + Send,
)
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (open_tx, mut open_rx) = mpsc::channel::<OpenReply>(64);
    let mut conn = yamux::Connection::new(Coalesced::new(io).compat(), config(), mode);
    let driver = async move {
        let mut waiting: VecDeque<OpenReply> = VecDeque::new();
        // Checked on every wake-up, and checking locks the token: one of this session's own
        // rather than the service's, which its other tasks check as often.
        let shutdown = shutdown.child_token();
        let cancelled = shutdown.cancelled();
        tokio::pin!(cancelled);
        let result = poll_fn(|cx| {
            if cancelled.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            while let Poll::Ready(Some(reply)) = open_rx.poll_recv(cx) {
                waiting.push_back(reply);
            }
            while !waiting.is_empty() {
                match conn.poll_new_outbound(cx) {
                    Poll::Ready(Ok(stream)) => {
                        if let Some(reply) = waiting.pop_front() {
                            let _ = reply.send(Ok(stream));
                        }
                    }
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => break,
                }
            }
            loop {
                match conn.poll_next_inbound(cx) {
                    Poll::Ready(Some(Ok(stream))) => on_inbound(stream.compat()),
                    Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e)),
                    Poll::Ready(None) => return Poll::Ready(Ok(())),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        for reply in waiting.drain(..) {
            let _ = reply.send(Err(TunnelError::Closed));
        }
        open_rx.close();
        if result.is_ok() && shutdown.is_cancelled() {
            // Tell the peer we are going (a GoAway) rather than letting the socket drop; bounded
            // so a peer that stopped reading cannot hold the shutdown.
            let close = poll_fn(|cx| conn.poll_close(cx));
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), close).await;
        }
        result
    };
    (Session { open_tx }, driver)
}

fn config() -> yamux::Config {
    // The defaults: 256 KiB initial stream window auto-tuned towards the bandwidth-delay
    // product, 1 GiB per connection across 512 streams, 16 KiB data frames (64 KiB and 256 KiB
    // frames measured worse in `benches/tunnel.rs`).
    yamux::Config::default()
}

/// Writes one length-prefixed frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    payload: &[u8],
) -> Result<(), TunnelError> {
    let frame = encode_frame(payload).map_err(|e| TunnelError::FrameTooLarge { len: e.len })?;
    w.write_all(&frame).await.map_err(TunnelError::Write)?;
    w.flush().await.map_err(TunnelError::Write)
}

/// Reads one length-prefixed frame, refusing frames over `MAX_FRAME_LEN` before allocating.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Vec<u8>, TunnelError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await.map_err(TunnelError::Read)?;
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME_LEN {
        return Err(TunnelError::FrameTooLarge { len: len as usize });
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await.map_err(TunnelError::Read)?;
    Ok(buf)
}

pub async fn write_json<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> Result<(), TunnelError> {
    let bytes = serde_json::to_vec(value).map_err(TunnelError::Malformed)?;
    write_frame(w, &bytes).await
}

pub async fn read_json<R: AsyncRead + Unpin, T: DeserializeOwned>(
    r: &mut R,
) -> Result<T, TunnelError> {
    let bytes = read_frame(r).await?;
    serde_json::from_slice(&bytes).map_err(TunnelError::Malformed)
}

/// Writes one exec-session message ([`ExecFrame`](warren_types::relay::ExecFrame)).
pub async fn write_exec_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    frame: &warren_types::relay::ExecFrame,
) -> Result<(), TunnelError> {
    write_frame(w, &frame.encode()).await
}

/// Reads one exec-session message; `None` when the peer closed the stream cleanly between
/// messages.
pub async fn read_exec_frame<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Option<warren_types::relay::ExecFrame>, TunnelError> {
    let mut len = [0u8; 4];
    // A clean end of stream before a length prefix is the peer closing, not an error.
    let mut got = 0;
    while got < len.len() {
        let n = r.read(&mut len[got..]).await.map_err(TunnelError::Read)?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(TunnelError::Read(std::io::ErrorKind::UnexpectedEof.into()));
        }
        got += n;
    }
    let len = u32::from_be_bytes(len);
    if len > MAX_FRAME_LEN {
        return Err(TunnelError::FrameTooLarge { len: len as usize });
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await.map_err(TunnelError::Read)?;
    warren_types::relay::ExecFrame::decode(&buf)
        .map(Some)
        .map_err(TunnelError::MalformedExec)
}
