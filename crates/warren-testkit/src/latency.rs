//! A TCP link with added one-way latency, standing in for the distance between regions:
//! this machine's kernel has no `netem` queueing discipline (`tc qdisc … netem` answers
//! "Specified qdisc kind is unknown"), so the delay is added in user space, as toxiproxy does.
//! Each chunk read on one side is written on the other `delay` later, in order, so a round
//! trip through the link costs twice `delay` on top of what it cost before.

use anyhow::{Context, Result};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Chunks on their way in one direction: enough to keep a link busy, bounded so a fast
/// sender meets back-pressure instead of filling memory.
const IN_FLIGHT: usize = 256;

/// Starts a link to `upstream` on a port-0 listener: its task (abort it to stop) and
/// address.
pub async fn start(
    upstream: SocketAddr,
    delay: Duration,
) -> Result<(tokio::task::JoinHandle<()>, SocketAddr)> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .context("binding the latency link")?;
    let addr = listener.local_addr()?;
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::join!(pipe(cr, sw, delay), pipe(sr, cw, delay));
            });
        }
    });
    Ok((task, addr))
}

/// Copies `from` to `to`, each chunk `delay` after it was read; closes `to`'s writing side
/// when `from` ends.
async fn pipe(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, delay: Duration) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(IN_FLIGHT);
    let reader = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if tx
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bytes_arrive_in_order_after_the_delay_and_the_end_passes_through() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut buf = vec![0; 1024];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                s.write_all(&buf[..n]).await.unwrap();
            }
        });
        let (_task, addr) = start(echo_addr, Duration::from_millis(40)).await.unwrap();
        let mut c = TcpStream::connect(addr).await.unwrap();
        let start = Instant::now();
        c.write_all(b"one ").await.unwrap();
        c.write_all(b"two").await.unwrap();
        let mut got = Vec::new();
        while got.len() < 7 {
            let mut buf = [0; 16];
            let n = c.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"one two");
        // Paused clock: the two one-way delays passed (a reply split in two chunks read at
        // different times could add one more delay, never less).
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(80) && took <= Duration::from_millis(120),
            "{took:?}"
        );
        c.shutdown().await.unwrap();
        let mut rest = Vec::new();
        c.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
}
