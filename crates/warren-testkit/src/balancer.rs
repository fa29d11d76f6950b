//! A TCP balancer in front of several relays' agent listeners: each new connection goes to
//! the first upstream that accepts it, starting from the one used last — a load balancer's
//! health check reduced to "does it connect", so a stopped relay's agents land on another.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

/// Starts the balancer on a port-0 listener; its task (abort it to stop) and address.
pub async fn start(
    upstreams: Vec<SocketAddr>,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the balancer")?;
    let addr = listener.local_addr()?;
    let last = Arc::new(Mutex::new(0usize));
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstreams = upstreams.clone();
            let last = last.clone();
            tokio::spawn(async move {
                let start = *last.lock().unwrap_or_else(|p| p.into_inner());
                for i in 0..upstreams.len() {
                    let idx = (start + i) % upstreams.len();
                    if let Ok(mut up) = TcpStream::connect(upstreams[idx]).await {
                        *last.lock().unwrap_or_else(|p| p.into_inner()) = idx;
                        let _ = up.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                        return;
                    }
                }
            });
        }
    });
    Ok((task, addr))
}
