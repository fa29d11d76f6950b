//! The SSH server (russh): user = workspace name; public key or personal access token;
//! sessions, `direct-tcpip` and `sftp` through the relay (access.md).
//!
//! Module map: `host_key` (the persistent ed25519 host key), `handler` (authentication and
//! the per-connection russh handler), `session` (a session channel ⇄ an exec in the
//! workspace), `forward` (`direct-tcpip` ⇄ a relay tunnel).
//!
//! The proxy crosses no privilege boundary inside a workspace: whoever passes
//! authentication is the workspace's owner and could do anything there from a shell. That
//! is why every syntactically valid `env` request is passed on (see `handler`) and any port
//! may be forwarded to.

mod forward;
mod handler;
mod host_key;
mod session;

use crate::{ProxyError, Shared};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

pub use host_key::HostKeyError;

/// A client that has not authenticated within this time is disconnected.
const AUTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Failed authentication attempts answered with a server call, per connection.
pub(crate) const MAX_AUTH_ATTEMPTS: u32 = 6;
/// Every refusal takes at least this long (russh pads rejections to it).
const AUTH_REJECTION_DELAY: Duration = Duration::from_millis(400);

#[derive(Debug, thiserror::Error)]
pub enum SshError {
    #[error(transparent)]
    HostKey(#[from] HostKeyError),
    #[error("accepting SSH connections")]
    Accept(#[source] std::io::Error),
}

fn host_key_error(e: HostKeyError) -> ProxyError {
    ProxyError::Serve {
        what: "ssh",
        source: Box::new(SshError::HostKey(e)),
    }
}

/// The host key this proxy offers the server to share with every replica, when no host key
/// file is configured: the key it kept in its state directory before keys were shared (so
/// clients' `known_hosts` stay valid), else a new one (nothing is written).
pub(crate) fn offered_host_key(
    config: &crate::ProxyConfig,
) -> Result<Option<warren_types::internal::OfferedHostKey>, ProxyError> {
    if config.ssh_host_key_file.is_some() {
        return Ok(None);
    }
    let mut key = host_key::load_existing(&config.ssh_host_key_path())
        .map_err(host_key_error)?
        .unwrap_or_else(host_key::generate_ed25519);
    key.set_comment("warren proxy host key");
    let private_key = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .map_err(|e| host_key_error(HostKeyError::Generate(e)))?
        .to_string();
    let mut public = key.public_key().clone();
    public.set_comment("");
    let public_key = public
        .to_openssh()
        .map_err(|e| host_key_error(HostKeyError::Generate(e)))?;
    Ok(Some(warren_types::internal::OfferedHostKey {
        private_key,
        public_key,
    }))
}

/// The host key to serve with: the configured file's (generated there on first use), else the
/// one the server shares among replicas.
pub(crate) fn host_key(
    config: &crate::ProxyConfig,
    shared_key: Option<&str>,
) -> Result<russh::keys::PrivateKey, ProxyError> {
    if let Some(path) = &config.ssh_host_key_file {
        return host_key::load_or_create(path).map_err(host_key_error);
    }
    let pem = shared_key.ok_or_else(|| host_key_error(HostKeyError::NotShared))?;
    host_key::parse(
        std::path::Path::new("(the server's shared host key)"),
        pem.as_bytes(),
    )
    .map_err(host_key_error)
}

/// The public half of the host key (`ssh-ed25519 AAAA…`, no comment), generating the key on
/// first use: what the server publishes so clients can pin it instead of trusting on first use.
pub fn host_public_key(path: &std::path::Path) -> Result<String, SshError> {
    let key = host_key::load_or_create(path)?;
    let mut public = key.public_key().clone();
    public.set_comment("");
    public
        .to_openssh()
        .map_err(|e| SshError::HostKey(HostKeyError::Generate(e)))
}

/// Serves SSH on `listener` until `shutdown`.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    key: russh::keys::PrivateKey,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    tracing::info!(
        address = ?listener.local_addr().ok(),
        fingerprint = %key.fingerprint(russh::keys::HashAlg::Sha256),
        "ssh server listening"
    );
    let config = Arc::new(server_config(key));
    let tasks = tokio_util::task::TaskTracker::new();
    let limits = shared.config.limits;
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_ssh_connections));
    let result = loop {
        let accepted = tokio::select! {
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => break Ok(()),
            // Cancel-safe: `accept` loses no connection when dropped before completing.
            r = listener.accept() => r,
        };
        match accepted {
            Ok((socket, peer)) => {
                let _ = socket.set_nodelay(true);
                // Past the cap, close at once: the sessions already open keep running.
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, max = limits.max_ssh_connections, "too many SSH connections; refusing one");
                    metrics::counter!("warren_proxy_refused_connections_total", "protocol" => "ssh").increment(1);
                    continue;
                };
                let handshake = Duration::from_secs(limits.ssh_handshake_timeout_secs);
                let conn = connection(
                    shared.clone(),
                    config.clone(),
                    socket,
                    peer,
                    handshake,
                    shutdown.clone(),
                );
                metrics::counter!("warren_proxy_connections_total", "protocol" => "ssh")
                    .increment(1);
                tasks.spawn(async move {
                    let _permit = permit;
                    let _open = warren_metrics::Open::new(
                        metrics::gauge!("warren_proxy_open_connections", "protocol" => "ssh"),
                    );
                    conn.await
                });
            }
            // Per-connection failures (reset before accept, too many open files) must not
            // stop the server; back off briefly so a persistent one does not spin.
            Err(e) if is_transient_accept_error(&e) => {
                tracing::warn!(error = %e, "ssh accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => {
                break Err(ProxyError::Serve {
                    what: "ssh",
                    source: Box::new(SshError::Accept(e)),
                })
            }
        }
    };
    // Closed at once so new connections are refused (and go to another replica).
    drop(listener);
    tasks.close();
    // Connections end with `shutdown` (each one watches it); wait briefly for their goodbyes.
    let _ = tokio::time::timeout(Duration::from_secs(5), tasks.wait()).await;
    result
}

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || e.raw_os_error().is_some_and(|c| c == 24 || c == 23) // EMFILE, ENFILE
}

fn server_config(key: russh::keys::PrivateKey) -> russh::server::Config {
    use russh::MethodKind;
    russh::server::Config {
        server_id: russh::SshId::Standard(
            format!("SSH-2.0-warren_{}", env!("CARGO_PKG_VERSION")).into(),
        ),
        methods: russh::MethodSet::from(&[MethodKind::PublicKey, MethodKind::Password][..]),
        auth_rejection_time: AUTH_REJECTION_DELAY,
        // OpenSSH probes with "none" first to learn the methods; that is not a failure.
        auth_rejection_time_initial: Some(Duration::ZERO),
        keys: vec![key],
        // Our own limit (MAX_AUTH_ATTEMPTS) counts server calls; this one also counts
        // offered keys and the "none" probe.
        max_auth_attempts: 20,
        // An idle shell is legitimate; dead peers are found by keepalives instead.
        inactivity_timeout: None,
        keepalive_interval: Some(Duration::from_secs(30)),
        keepalive_max: 4,
        nodelay: true,
        ..Default::default()
    }
}

async fn connection(
    shared: Arc<Shared>,
    config: Arc<russh::server::Config>,
    socket: TcpStream,
    peer: SocketAddr,
    handshake_timeout: Duration,
    shutdown: CancellationToken,
) {
    // Everything this connection starts (sessions, tunnels) watches `stop`; it is cancelled
    // when the connection ends for any reason (the handler holds a drop guard) or on shutdown.
    let stop = shutdown.child_token();
    let authenticated = Arc::new(AtomicBool::new(false));
    let handler = handler::Handler::new(shared, stop.clone(), authenticated.clone(), peer);
    let session = match tokio::time::timeout(
        handshake_timeout,
        russh::server::run_stream(config, socket, handler),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "ssh handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "ssh handshake timed out");
            return;
        }
    };
    let handle = session.handle();
    tokio::pin!(session);
    let auth_deadline = tokio::time::sleep(AUTH_TIMEOUT);
    tokio::pin!(auth_deadline);
    let reason = loop {
        tokio::select! {
            // Cancel-safe: polling the session future by reference; it keeps running.
            r = &mut session => {
                if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "ssh connection ended with an error");
                }
                stop.cancel();
                return;
            }
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => break "the proxy is shutting down",
            // Cancel-safe: a pinned sleep keeps its deadline across polls.
            _ = &mut auth_deadline, if !authenticated.load(Ordering::Acquire) => {
                // The flag may have flipped while this branch was waiting.
                if authenticated.load(Ordering::Acquire) {
                    continue;
                }
                break "authentication timed out";
            }
        }
    };
    let _ = handle
        .disconnect(
            russh::Disconnect::ByApplication,
            reason.to_owned(),
            String::new(),
        )
        .await;
    stop.cancel();
    // Give the session a moment to send the disconnect and end.
    let _ = tokio::time::timeout(Duration::from_secs(2), session).await;
}
