//! A static HTTP server for tests: paths → bodies, on port 0, counting requests. Serves a
//! devfile registry (`/index`, `/devfiles/{stack}/{version}`) or parent devfiles by URI, or
//! redirects (an attacker's server bouncing a fetch somewhere else).

use anyhow::Result;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Response, StatusCode};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// A running file server; stops when dropped.
#[derive(Debug)]
pub struct FilesHttpServer {
    pub addr: SocketAddr,
    files: Arc<Mutex<BTreeMap<String, String>>>,
    redirects: Arc<Mutex<BTreeMap<String, String>>>,
    requests: Arc<Mutex<Vec<String>>>,
    shutdown: CancellationToken,
}

impl Drop for FilesHttpServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl FilesHttpServer {
    pub async fn start() -> Result<FilesHttpServer> {
        Self::start_on("127.0.0.1:0".parse()?).await
    }

    /// [`FilesHttpServer::start`] on a chosen address (e.g. `127.0.0.2:0`: a service only
    /// the machine itself reaches).
    pub async fn start_on(bind: SocketAddr) -> Result<FilesHttpServer> {
        let listener = TcpListener::bind(bind).await?;
        let addr = listener.local_addr()?;
        let files: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let redirects: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let shutdown = CancellationToken::new();
        let (f, r, stop) = (files.clone(), requests.clone(), shutdown.clone());
        let moved = redirects.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = tokio::select! {
                    // Cancel-safe: cancellation only flips a flag.
                    _ = stop.cancelled() => return,
                    // Cancel-safe: an accept not taken stays in the backlog.
                    a = listener.accept() => match a {
                        Ok(s) => s,
                        Err(_) => continue,
                    },
                };
                let (f, r, stop) = (f.clone(), r.clone(), stop.clone());
                let moved = moved.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let path = req.uri().path().to_owned();
                            r.lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .push(path.clone());
                            let body = f
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get(&path)
                                .cloned();
                            let location = moved
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get(&path)
                                .cloned();
                            async move {
                                let resp = match (location, body) {
                                    (Some(to), _) => {
                                        let mut r = Response::new(Full::new(Bytes::new()));
                                        *r.status_mut() = StatusCode::FOUND;
                                        if let Ok(v) = hyper::header::HeaderValue::from_str(&to) {
                                            r.headers_mut().insert(hyper::header::LOCATION, v);
                                        }
                                        r
                                    }
                                    (None, Some(b)) => Response::new(Full::new(Bytes::from(b))),
                                    (None, None) => {
                                        let mut r = Response::new(Full::new(Bytes::from_static(
                                            b"not found",
                                        )));
                                        *r.status_mut() = StatusCode::NOT_FOUND;
                                        r
                                    }
                                };
                                Ok::<_, std::convert::Infallible>(resp)
                            }
                        },
                    );
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc);
                    tokio::select! {
                        // Cancel-safe: dropping the connection is the point.
                        _ = stop.cancelled() => {}
                        // Cancel-safe: as above.
                        _ = conn => {}
                    }
                });
            }
        });
        Ok(FilesHttpServer {
            addr,
            files,
            redirects,
            requests,
            shutdown,
        })
    }

    /// Answers `path` with `302 Found` to `location` (from now on).
    pub fn redirect(&self, path: &str, location: &str) {
        self.redirects
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_owned(), location.to_owned());
    }

    /// How many requests it has had, for any path.
    pub fn total_hits(&self) -> usize {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }

    /// Serves `body` at `path` (from now on).
    pub fn put(&self, path: &str, body: &str) {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_owned(), body.to_owned());
    }

    /// `http://ADDRESS:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// How many requests asked for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}
