//! What the access benches share: a keep-alive HTTP/1.1 upstream (with a WebSocket echo on
//! `/ws`), a client connection that checks every answer, and the latency and requests/s
//! measurement with its one-line report.

use anyhow::{bail, Result};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

pub const BODY: &[u8] = b"hello from the workspace\n";
pub const CONNECTIONS: usize = 32;

/// A minimal HTTP/1.1 upstream (keep-alive) that also echoes WebSocket messages on `/ws`.
pub async fn upstream() -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let _ = sock.set_nodelay(true);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(|mut req: Request<Incoming>| async move {
                    if req.uri().path() == "/ws" {
                        let key = req
                            .headers()
                            .get("sec-websocket-key")
                            .cloned()
                            .unwrap_or(http::HeaderValue::from_static(""));
                        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
                            key.as_bytes(),
                        );
                        let on_upgrade = hyper::upgrade::on(&mut req);
                        tokio::spawn(async move {
                            let Ok(up) = on_upgrade.await else { return };
                            let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                                TokioIo::new(up),
                                tokio_tungstenite::tungstenite::protocol::Role::Server,
                                None,
                            )
                            .await;
                            while let Some(Ok(m)) = ws.next().await {
                                if (m.is_binary() || m.is_text()) && ws.send(m).await.is_err() {
                                    return;
                                }
                            }
                        });
                        return Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .status(101)
                                .header("connection", "upgrade")
                                .header("upgrade", "websocket")
                                .header("sec-websocket-accept", accept)
                                .body(Full::new(Bytes::new()))
                                .expect("response"),
                        );
                    }
                    Ok(Response::new(Full::new(Bytes::from_static(BODY))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok(addr)
}

/// One keep-alive HTTP/1.1 connection to `addr` that sends requests for `host`.
pub struct Conn {
    send: hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    host: String,
    token: Option<String>,
}

impl Conn {
    pub async fn open(addr: SocketAddr, host: &str, token: Option<&str>) -> Result<Conn> {
        let sock = TcpStream::connect(addr).await?;
        sock.set_nodelay(true)?;
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(sock)).await?;
        tokio::spawn(conn);
        Ok(Conn {
            send,
            host: host.to_owned(),
            token: token.map(str::to_owned),
        })
    }

    pub async fn get(&mut self) -> Result<()> {
        let mut req = Request::get("/").header("host", &self.host);
        if let Some(t) = &self.token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        self.send.ready().await?;
        let resp = self.send.send_request(req.body(Empty::new())?).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        if status != 200 || body.as_ref() != BODY {
            bail!(
                "unexpected answer {status}: {:?}",
                String::from_utf8_lossy(&body)
            );
        }
        Ok(())
    }
}

pub struct Figures {
    pub rps: f64,
    pub p50: Duration,
    pub p99: Duration,
}

/// Latency of sequential requests on one connection, then requests/s with `CONNECTIONS`.
pub async fn measure(
    addr: SocketAddr,
    host: &str,
    token: Option<&str>,
    secs: u64,
) -> Result<Figures> {
    let mut one = Conn::open(addr, host, token).await?;
    for _ in 0..200 {
        one.get().await?;
    }
    let mut samples = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        one.get().await?;
        samples.push(t.elapsed());
    }
    samples.sort();
    let (p50, p99) = (
        samples[samples.len() / 2],
        samples[samples.len() * 99 / 100],
    );

    let mut conns = vec![];
    for _ in 0..CONNECTIONS {
        conns.push(Conn::open(addr, host, token).await?);
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut c in conns {
        tasks.spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                c.get().await?;
                n += 1;
            }
            Ok::<_, anyhow::Error>(n)
        });
    }
    let mut total = 0;
    while let Some(r) = tasks.join_next().await {
        total += r??;
    }
    Ok(Figures {
        rps: total as f64 / start.elapsed().as_secs_f64(),
        p50,
        p99,
    })
}

pub async fn wait_ok(addr: SocketAddr, host: &str, token: Option<&str>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ok = async {
            let mut c = Conn::open(addr, host, token).await?;
            c.get().await
        }
        .await;
        match ok {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(format!("{host} never answered")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn line(name: &str, f: &Figures, base: &Figures) {
    println!(
        "{name:<28} {:>9.0} req/s ({:>4.2}×)   p50 {:>6.3} ms (+{:.3})   p99 {:>6.3} ms (+{:.3})",
        f.rps,
        f.rps / base.rps,
        ms(f.p50),
        ms(f.p50) - ms(base.p50),
        ms(f.p99),
        ms(f.p99) - ms(base.p99),
    );
}

/// The devfile of the bench workspace: its endpoint is the upstream's real port, so direct
/// mode (`127.0.0.1:{port}`) reaches the same server.
pub fn devfile(port: u16) -> String {
    format!(
        "schemaVersion: 2.2.0
metadata:
  name: bench
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      endpoints:
        - name: web
          targetPort: {port}
          exposure: public
"
    )
}
