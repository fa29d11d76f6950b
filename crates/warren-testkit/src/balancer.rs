//! A TCP balancer in front of several relays' agent listeners or proxy replicas: each new
//! connection goes to the first upstream that accepts it — a load balancer's health check
//! reduced to "does it connect", so a stopped instance's clients land on another. Relays'
//! agents start from the upstream used last; proxies' clients take turns (no stickiness), or
//! go where a test points them ([`Balancer::prefer`]).

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

/// Where new connections go first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The upstream used last.
    Sticky,
    /// The one after the upstream used last.
    RoundRobin,
}

/// What the balancer shares between its connections.
#[derive(Debug, Default)]
struct Steering {
    /// The upstream used last.
    last: usize,
    /// Round robin's next turn, taken when a connection arrives.
    turn: usize,
    /// Where a test points new connections.
    preferred: Option<usize>,
    /// Connections each upstream took.
    taken: Vec<usize>,
}

/// Steers a running balancer and tells where connections went.
#[derive(Debug, Clone)]
pub struct Balancer {
    steering: Arc<Mutex<Steering>>,
}

impl Balancer {
    fn lock(&self) -> std::sync::MutexGuard<'_, Steering> {
        self.steering.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// New connections go to upstream `index` first (the next ones if it does not accept);
    /// `None` goes back to the balancer's mode.
    pub fn prefer(&self, index: Option<usize>) {
        self.lock().preferred = index;
    }

    /// How many connections each upstream took so far.
    pub fn connections(&self) -> Vec<usize> {
        self.lock().taken.clone()
    }
}

/// Starts the balancer on a port-0 listener; its task (abort it to stop) and address.
pub async fn start(
    upstreams: Vec<SocketAddr>,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr)> {
    let (task, addr, _) = start_with(upstreams, Mode::Sticky).await?;
    Ok((task, addr))
}

/// Starts a balancer of `mode`; its task (abort it to stop), address and steering handle.
pub async fn start_with(
    upstreams: Vec<SocketAddr>,
    mode: Mode,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr, Balancer)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the balancer")?;
    let addr = listener.local_addr()?;
    let handle = Balancer {
        steering: Arc::new(Mutex::new(Steering {
            taken: vec![0; upstreams.len()],
            ..Steering::default()
        })),
    };
    let steer = handle.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let upstreams = upstreams.clone();
            let steer = steer.clone();
            tokio::spawn(async move {
                let start = {
                    let mut s = steer.lock();
                    match (s.preferred, mode) {
                        (Some(p), _) => p,
                        (None, Mode::RoundRobin) => {
                            s.turn += 1;
                            s.turn - 1
                        }
                        (None, Mode::Sticky) => s.last,
                    }
                };
                for i in 0..upstreams.len() {
                    let idx = (start + i) % upstreams.len();
                    if let Ok(mut up) = TcpStream::connect(upstreams[idx]).await {
                        {
                            let mut s = steer.lock();
                            s.last = idx;
                            s.taken[idx] += 1;
                        }
                        let _ = up.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut up).await;
                        return;
                    }
                }
            });
        }
    });
    Ok((task, addr, handle))
}
