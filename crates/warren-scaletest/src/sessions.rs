//! Terminal load: web terminals and SSH sessions through the proxy to the run's workspaces on
//! simulated agents (whose every session writes back what it reads), each writing a chunk of
//! bytes every tick at a given rate and timing when each chunk comes back — the keystroke echo
//! a user feels, under the load of every other session.
//!
//! The loop is open, as the API workload's: a chunk is due at its tick whether or not earlier
//! ones came back, and its echo is timed from when it was due, so a stalled session shows as
//! latency rather than as less load. What comes back is checked byte for byte.

use super::stats::Recorder;
use super::{short, RunUser};
use futures::{SinkExt, StreamExt};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;
use warren_types::api::SshEndpoint;

/// How often each session writes.
const TICK: Duration = Duration::from_millis(100);
/// How long a session's last chunks may take to come back once its time is up.
const DRAIN: Duration = Duration::from_secs(10);
/// What sessions write, over and over: printable, so a real terminal would show it as is.
const PATTERN: &[u8] = b"warren scaletest keystrokes 0123456789 abcdefghijklmnopqrstuvwxyz ";

/// Which kind of session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Web,
    Ssh,
}

impl Kind {
    fn open_op(self) -> &'static str {
        match self {
            Kind::Web => "terminal.open",
            Kind::Ssh => "ssh.open",
        }
    }

    fn echo_op(self) -> &'static str {
        match self {
            Kind::Web => "terminal.echo",
            Kind::Ssh => "ssh.echo",
        }
    }
}

/// One session to open: as the workspace's owner, to its terminal (`terminal_url`) or SSH.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) kind: Kind,
    pub(crate) owner: RunUser,
    pub(crate) workspace: String,
    pub(crate) terminal_url: String,
}

/// What the sessions carried.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    /// Bytes written and echoed back intact, over all sessions.
    pub(crate) echoed_bytes: u64,
}

/// Runs every session in `targets` until `until` (or `shutdown`), recording into `rec`.
pub(crate) async fn drive(
    targets: Vec<Target>,
    ssh: Option<SshEndpoint>,
    rate: u64,
    until: Instant,
    rec: Arc<Recorder>,
    shutdown: CancellationToken,
) -> Carried {
    let chunk = usize::try_from((rate / 10).max(1)).unwrap_or(usize::MAX);
    let ssh = ssh.map(Arc::new);
    let echoed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut set = JoinSet::new();
    for target in targets {
        let (rec, shutdown, ssh, echoed) =
            (rec.clone(), shutdown.clone(), ssh.clone(), echoed.clone());
        set.spawn(async move {
            let t = Instant::now();
            let opened = match target.kind {
                Kind::Web => open_web(&target).await,
                Kind::Ssh => match ssh.as_deref() {
                    Some(endpoint) => open_ssh(&target, endpoint).await,
                    None => Err("the installation offers no SSH".to_owned()),
                },
            };
            rec.record(
                target.kind.open_op(),
                t.elapsed(),
                opened.as_ref().err().cloned(),
            );
            if let Ok((sink, source)) = opened {
                let n = session(target.kind, sink, source, chunk, until, &rec, &shutdown).await;
                echoed.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    while set.join_next().await.is_some() {}
    Carried {
        echoed_bytes: echoed.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// Where a session writes.
enum Sink {
    Web(futures::stream::SplitSink<warren_client::TerminalSocket, Message>),
    Ssh(russh::ChannelWriteHalf<russh::client::Msg>),
}

/// Where a session reads.
enum Source {
    Web(futures::stream::SplitStream<warren_client::TerminalSocket>),
    Ssh(russh::ChannelReadHalf),
}

impl Sink {
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), String> {
        match self {
            Sink::Web(ws) => ws
                .send(Message::Binary(bytes.into()))
                .await
                .map_err(|e| e.to_string()),
            Sink::Ssh(ch) => ch.data(&bytes[..]).await.map_err(|e| e.to_string()),
        }
    }

    async fn close(&mut self) {
        match self {
            Sink::Web(ws) => {
                let _ = ws.send(Message::Close(None)).await;
            }
            Sink::Ssh(ch) => {
                let _ = ch.eof().await;
                let _ = ch.close().await;
            }
        }
    }
}

impl Source {
    /// The next bytes that came back; `Err` when the session ended or failed.
    async fn read(&mut self) -> Result<Vec<u8>, String> {
        match self {
            Source::Web(ws) => loop {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => return Ok(b.to_vec()),
                    Some(Ok(Message::Text(t))) => {
                        return Err(format!("the terminal ended: {}", t.as_str()))
                    }
                    Some(Ok(Message::Close(_))) | None => {
                        return Err("the terminal closed".to_owned())
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.to_string()),
                }
            },
            Source::Ssh(ch) => loop {
                match ch.wait().await {
                    Some(russh::ChannelMsg::Data { data }) => return Ok(data.to_vec()),
                    Some(russh::ChannelMsg::ExtendedData { data, .. }) => return Ok(data.to_vec()),
                    Some(russh::ChannelMsg::ExitStatus { exit_status }) => {
                        return Err(format!("the session exited with {exit_status}"))
                    }
                    Some(russh::ChannelMsg::Eof | russh::ChannelMsg::Close) | None => {
                        return Err("the session closed".to_owned())
                    }
                    Some(_) => continue,
                }
            },
        }
    }
}

async fn open_web(target: &Target) -> Result<(Sink, Source), String> {
    let ws = target
        .owner
        .client
        .open_terminal(&target.terminal_url, 80, 24)
        .await
        .map_err(|e| short(&e))?;
    let (sink, source) = ws.split();
    Ok((Sink::Web(sink), Source::Web(source)))
}

/// Checks the server's key against the installation's published host keys (none published:
/// any key, as a first connection would).
struct Pinned(Arc<Vec<russh::keys::PublicKey>>);

impl russh::client::Handler for Pinned {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            return Ok(false);
        };
        Ok(self.0.is_empty() || self.0.iter().any(|k| k.key_data() == key.key_data()))
    }
}

async fn open_ssh(target: &Target, endpoint: &SshEndpoint) -> Result<(Sink, Source), String> {
    let keys: Vec<russh::keys::PublicKey> = endpoint
        .host_keys
        .iter()
        .filter_map(|k| russh::keys::PublicKey::from_openssh(k).ok())
        .collect();
    let addr = resolve(&endpoint.host, endpoint.port).await?;
    let config = Arc::new(russh::client::Config {
        inactivity_timeout: Some(Duration::from_secs(120)),
        ..Default::default()
    });
    let mut session = russh::client::connect(config, addr, Pinned(Arc::new(keys)))
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    // The password is the user's token (it has the `workspace` scope).
    let auth = session
        .authenticate_password(target.workspace.clone(), target.owner.token.clone())
        .await
        .map_err(|e| format!("signing in: {e}"))?;
    if !auth.success() {
        return Err("the proxy refused the token".to_owned());
    }
    let channel = session
        .channel_open_session()
        .await
        .map_err(|e| format!("opening a session: {e}"))?;
    channel
        .request_pty(true, "xterm", 80, 24, 0, 0, &[])
        .await
        .map_err(|e| format!("asking for a terminal: {e}"))?;
    channel
        .request_shell(true)
        .await
        .map_err(|e| format!("starting the shell: {e}"))?;
    // The connection's handle may go: the channel keeps the connection open.
    drop(session);
    let (read, write) = channel.split();
    Ok((Sink::Ssh(write), Source::Ssh(read)))
}

/// `host`'s address; `*.localhost` is loopback (RFC 6761) where the resolver does not say so.
async fn resolve(host: &str, port: u16) -> Result<std::net::SocketAddr, String> {
    if host == "localhost" || host.ends_with(".localhost") {
        return Ok(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
    }
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| format!("resolving {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host} has no address"))
}

/// One session's life once open: writes a chunk each tick until `until`, times each chunk's
/// echo, then waits a little for the last ones. Returns the bytes echoed intact.
async fn session(
    kind: Kind,
    mut sink: Sink,
    mut source: Source,
    chunk: usize,
    until: Instant,
    rec: &Recorder,
    shutdown: &CancellationToken,
) -> u64 {
    // (offset one past the chunk's last byte, when it was due), oldest first.
    let pending: Mutex<VecDeque<(u64, Instant)>> = Mutex::default();
    let sent = std::sync::atomic::AtomicU64::new(0);
    let done_writing = CancellationToken::new();
    let done_reading = CancellationToken::new();
    let writer = async {
        let mut tick = tokio::time::interval(TICK);
        // Open loop: ticks missed while a write waited are all written, late.
        tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let mut offset = 0u64;
        let result = loop {
            let due = tokio::select! {
                // Cancel-safe: `Interval::tick` and the tokens lose nothing when dropped.
                due = tick.tick() => due,
                () = shutdown.cancelled() => break Ok(()),
                // The reader failed: its error is the session's.
                () = done_reading.cancelled() => break Ok(()),
            };
            if due >= until {
                break Ok(());
            }
            let bytes: Vec<u8> = (0..chunk as u64).map(|i| pattern_at(offset + i)).collect();
            offset += chunk as u64;
            lock(&pending).push_back((offset, due));
            sent.store(offset, std::sync::atomic::Ordering::Relaxed);
            if let Err(e) = sink.write(bytes).await {
                break Err(e);
            }
        };
        done_writing.cancel();
        result
    };
    let reader = async {
        let mut received = 0u64;
        // Set once writing is over: the last chunks may take this long to come back.
        let mut deadline: Option<Instant> = None;
        let result = loop {
            if done_writing.is_cancelled() {
                if received >= sent.load(std::sync::atomic::Ordering::Relaxed) {
                    break Ok(());
                }
                deadline.get_or_insert_with(|| Instant::now() + DRAIN);
            }
            let read = tokio::select! {
                // Cancel-safe: a WebSocket's `next` and a channel's `wait` lose nothing
                // when dropped.
                r = source.read() => r,
                // Writing ended: look again whether everything came back.
                () = done_writing.cancelled(), if deadline.is_none() => continue,
                () = tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now)), if deadline.is_some() => {
                    break Err(format!("not echoed within {DRAIN:?} of the end"))
                }
            };
            let bytes = match read {
                Ok(b) => b,
                Err(e) => break Err(e),
            };
            if let Some(i) = bytes
                .iter()
                .enumerate()
                .position(|(i, b)| *b != pattern_at(received + i as u64))
            {
                break Err(format!("the echo differs at byte {}", received + i as u64));
            }
            received += bytes.len() as u64;
            let now = Instant::now();
            let mut p = lock(&pending);
            while p.front().is_some_and(|(end, _)| *end <= received) {
                if let Some((_, due)) = p.pop_front() {
                    rec.record(kind.echo_op(), now - due, None);
                }
            }
            drop(p);
        };
        done_reading.cancel();
        (received, result)
    };
    let (written, (received, read)) = tokio::join!(writer, reader);
    sink.close().await;
    let failure = written.err().or(read.err());
    if let Some(why) = failure {
        // Every chunk that did not come back is an error of the echo, with the reason.
        let left = lock(&pending).len().max(1);
        for _ in 0..left {
            rec.record(kind.echo_op(), Duration::ZERO, Some(why.clone()));
        }
    }
    received
}

/// The byte a session writes at `offset` of its stream.
fn pattern_at(offset: u64) -> u8 {
    PATTERN[(offset % PATTERN.len() as u64) as usize]
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
