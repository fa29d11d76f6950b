//! A TCP listener that hands axum finished TLS connections. Handshakes run concurrently
//! off the accept loop, so a client that connects and stalls holds up only itself.

use crate::ServerCert;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;

/// A handshake must finish within this: a client that connects and sends nothing is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once; past it, new connections wait in the kernel's backlog.
const MAX_HANDSHAKES: usize = 1024;
/// Handshakes in progress at once from one address once three quarters of all slots are
/// taken: past it, that address's new connections are closed, so one client holding silent
/// connections cannot take every slot. Not applied before that: many users may share one
/// address (a NAT, a load balancer, an ingress).
const MAX_HANDSHAKES_PER_PEER: usize = 64;

/// Serves TLS on a bound TCP listener; pass it to `axum::serve` in place of the
/// `TcpListener`. Its background task stops when this is dropped.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for TlsListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsListener")
            .field("local", &self.local)
            .finish()
    }
}

impl TlsListener {
    /// Starts accepting on `listener` with `cert`, offering `alpn`. Must be called inside
    /// a Tokio runtime.
    pub fn new(listener: TcpListener, cert: &ServerCert, alpn: &[&[u8]]) -> std::io::Result<Self> {
        let local = listener.local_addr()?;
        let acceptor = cert.acceptor(alpn);
        let (tx, ready) = mpsc::channel(64);
        let task = tokio::spawn(accept_loop(listener, acceptor, tx));
        Ok(TlsListener { local, ready, task })
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // Cancel-safe: mpsc::Receiver::recv loses nothing when dropped before it resolves.
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    ready: mpsc::Sender<(TlsStream<TcpStream>, SocketAddr)>,
) {
    let permits = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let per_peer: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>> = Arc::default();
    let mut handshakes = tokio::task::JoinSet::new();
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = tokio::select! {
            // Cancel-safe: `accept` loses no connection when the other arm wins.
            x = accept(&listener) => x,
            // Cancel-safe: only reports that the listener is gone.
            _ = ready.closed() => return,
        };
        let crowded = permits.available_permits() < MAX_HANDSHAKES / 4;
        let Some(slot) = PeerSlot::take(&per_peer, peer.ip(), crowded) else {
            tracing::debug!(%peer, "too many TLS handshakes from one address; closing");
            continue;
        };
        // Interactive traffic (terminals, tunnels) is many small writes.
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let ready = ready.clone();
        handshakes.spawn(async move {
            let _permit = permit;
            let _slot = slot;
            match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => {
                    let _ = ready.send((tls, peer)).await;
                }
                Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
            }
        });
        while handshakes.try_join_next().is_some() {}
    }
}

/// One handshake in progress from an address; counted while held.
struct PeerSlot {
    counts: Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
    ip: IpAddr,
}

impl PeerSlot {
    /// A slot for `ip`; `None` when slots are `crowded` and `ip` holds its share already.
    fn take(
        counts: &Arc<std::sync::Mutex<HashMap<IpAddr, usize>>>,
        ip: IpAddr,
        crowded: bool,
    ) -> Option<Self> {
        let mut map = counts.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_default();
        if crowded && *n >= MAX_HANDSHAKES_PER_PEER {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            counts: counts.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// The next connection. A failure to accept (out of file descriptors and the like) is
/// logged and tried again after a moment: the connections already open keep being served.
/// Cancel-safe: a connection is taken only when this returns it.
pub async fn accept(listener: &TcpListener) -> (TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(x) => return x,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
