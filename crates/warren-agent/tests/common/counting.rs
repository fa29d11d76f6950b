//! A counting proxy in front of the engine's API socket: the runtime under test talks to it
//! as to the engine, and each request it forwards is recorded (method, path and query), so
//! a test can assert which engine calls an operation made, not how long it took.
//!
//! It forwards HTTP/1.1 requests one by one over fresh upstream connections, streaming
//! bodies both ways (event streams included) and splicing upgraded connections (attach,
//! exec) once both sides have switched protocols.

use anyhow::{Context, Result};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::sync::CancellationToken;

/// The proxy; stops accepting when dropped.
pub struct CountingProxy {
    /// Where the runtime connects (`unix://` + this).
    pub socket: PathBuf,
    calls: Arc<Mutex<Vec<String>>>,
    stop: CancellationToken,
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl CountingProxy {
    /// Listens on `dir/engine.sock`, forwarding to the engine socket `upstream`.
    pub async fn start(upstream: &Path, dir: &Path) -> Result<CountingProxy> {
        let socket = dir.join("engine.sock");
        let listener = UnixListener::bind(&socket).context("binding the counting proxy")?;
        let calls = Arc::new(Mutex::new(Vec::new()));
        let stop = CancellationToken::new();
        let upstream = upstream.to_path_buf();
        let (log, token) = (calls.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let stream = tokio::select! {
                    // Cancel-safe: level-triggered.
                    _ = token.cancelled() => return,
                    // Cancel-safe: an accept not completed loses nothing.
                    r = listener.accept() => match r {
                        Ok((s, _)) => s,
                        Err(_) => return,
                    },
                };
                let (upstream, log) = (upstream.clone(), log.clone());
                tokio::spawn(async move {
                    let service =
                        service_fn(move |req| forward(req, upstream.clone(), log.clone()));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Ok(CountingProxy {
            socket,
            calls,
            stop,
        })
    }

    /// The engine host to configure the runtime with.
    pub fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Every call so far, `METHOD /path?query`, API version prefix removed.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Forgets the calls so far.
    pub fn reset(&self) {
        self.calls.lock().unwrap().clear();
    }
}

/// `/v1.41/containers/json` → `/containers/json`.
fn without_version(path: &str) -> &str {
    let rest = path.trim_start_matches('/');
    match rest.split_once('/') {
        Some((v, tail))
            if v.starts_with('v') && v[1..].starts_with(|c: char| c.is_ascii_digit()) =>
        {
            &path[path.len() - tail.len() - 1..]
        }
        _ => path,
    }
}

async fn forward(
    mut req: Request<Incoming>,
    upstream: PathBuf,
    log: Arc<Mutex<Vec<String>>>,
) -> Result<Response<Incoming>> {
    let uri = req.uri().clone();
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    log.lock().unwrap().push(format!(
        "{} {}{}",
        req.method(),
        without_version(uri.path()),
        percent_decoded(&query)
    ));
    let client_upgrade = req
        .headers()
        .contains_key(hyper::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let stream = UnixStream::connect(&upstream)
        .await
        .context("connecting to the engine")?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    let mut response = sender.send_request(req).await?;
    if response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_upgrade) = client_upgrade {
            let server_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                if let (Ok(client), Ok(server)) = (client_upgrade.await, server_upgrade.await) {
                    let _ = tokio::io::copy_bidirectional(
                        &mut TokioIo::new(client),
                        &mut TokioIo::new(server),
                    )
                    .await;
                }
            });
        }
    }
    Ok(response)
}

/// Enough decoding to read label filters in a query (`%3D` → `=`, …).
fn percent_decoded(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
