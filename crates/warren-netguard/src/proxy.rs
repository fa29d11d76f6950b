//! A forward proxy on loopback that holds a library to the [`Guard`] when the library lets
//! Warren choose only its proxy, not its resolver (oci-client's: a registry's token realm
//! and its redirects are URLs the *registry* chooses, fetched by a client Warren does not
//! build).
//!
//! Each use is a [`Session`]: a proxy on a loopback port of its own, told to the library as
//! `http://127.0.0.1:<port>` for both schemes, gone when the session is dropped. HTTPS
//! arrives as `CONNECT host:port`, plain HTTP as an absolute-form request; either way the
//! proxy resolves the host through the guard and connects to exactly the addresses it
//! checked, so a realm of `http://169.254.169.254/…`, a redirect to a loopback service or a
//! name that rebinds reaches nothing. Hosts the operator named for the session (a plain-HTTP
//! mirror, a registry with certificates in `certs.d`) are trusted by name, at the port named
//! or any port when none is. The session keeps the refusal it met for the caller, whose
//! client only learns "unsuccessful tunnel" or a 403.
//!
//! There are no proxy credentials: the proxy grants nothing a process of the agent's host
//! could not do itself (public addresses, the registries the operator configured), and
//! reqwest drops a proxy's credentials from a plain-HTTP redirect it follows, so they could
//! not be relied on anyway.

use crate::{bare, Guard, GuardError};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

type Body = BoxBody<Bytes, hyper::Error>;

/// How long a connection to a destination may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Headers of one hop, never forwarded (RFC 9110 §7.6.1), with the proxy's own.
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
];

/// One use of the proxy: its own loopback port, the hosts it trusts by name, the refusal it
/// met. The proxy stops when the session is dropped.
pub struct Session {
    addr: SocketAddr,
    inner: Arc<Inner>,
    _task: Task,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Aborts the accept loop when dropped.
struct Task(tokio::task::AbortHandle);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    guard: Guard,
    trusted: Vec<Trusted>,
    refusal: Mutex<Option<GuardError>>,
}

/// A host trusted by name: `host`, at `port` or at any port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trusted {
    host: String,
    port: Option<u16>,
}

impl Trusted {
    /// `host`, `host:port`, `[v6]` or `[v6]:port`, as registries are named.
    fn parse(entry: &str) -> Option<Trusted> {
        let entry = entry.trim();
        let (host, port) = if let Some(rest) = entry.strip_prefix('[') {
            let (host, after) = rest.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p.parse().ok()?),
                None if after.is_empty() => None,
                None => return None,
            };
            (host, port)
        } else {
            match entry.rsplit_once(':') {
                Some((h, p)) => (h, Some(p.parse().ok()?)),
                None => (entry, None),
            }
        };
        if host.is_empty() {
            return None;
        }
        Some(Trusted {
            host: host.to_ascii_lowercase(),
            port,
        })
    }

    fn admits(&self, host: &str, port: u16) -> bool {
        self.host == bare(host).to_ascii_lowercase() && self.port.is_none_or(|p| p == port)
    }
}

impl Session {
    /// Starts a proxy holding every destination to `guard`, trusting `trusted`
    /// (`host[:port]` each; entries that are not are ignored) besides.
    pub async fn start(guard: Guard, trusted: &[String]) -> std::io::Result<Session> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            guard,
            trusted: trusted.iter().filter_map(|t| Trusted::parse(t)).collect(),
            refusal: Mutex::new(None),
        });
        let task = tokio::spawn(accept(listener, inner.clone()));
        Ok(Session {
            addr,
            inner,
            _task: Task(task.abort_handle()),
        })
    }

    /// The proxy URL to give the client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The first destination refused in this session, if any.
    pub fn refusal(&self) -> Option<GuardError> {
        lock(&self.inner.refusal).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

async fn accept(listener: TcpListener, inner: Arc<Inner>) {
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: the next accept may succeed.
                tracing::warn!(error = %e, "the outbound guard's proxy could not accept");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let inner = inner.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let inner = inner.clone();
                async move { Ok::<_, std::convert::Infallible>(handle(&inner, req).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await
            {
                tracing::debug!(error = %e, "a connection to the outbound guard's proxy failed");
            }
        });
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(message.into()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

impl Inner {
    /// A connection to `host:port`, or the answer saying why not.
    async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, Response<Body>> {
        let trusted = self.trusted.iter().any(|t| t.admits(host, port));
        let connecting = if trusted {
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect((bare(host), port))).await
        } else {
            let addrs = match self.guard.resolve(host, port).await {
                Ok(addrs) => addrs,
                Err(refusal) => {
                    let message = refusal.to_string();
                    lock(&self.refusal).get_or_insert(refusal);
                    return Err(text(StatusCode::FORBIDDEN, message));
                }
            };
            tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addrs[..])).await
        };
        match connecting {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => {
                tracing::info!(host, port, error = %e, "the outbound guard's proxy could not connect");
                Err(text(
                    StatusCode::BAD_GATEWAY,
                    format!("cannot connect to {host}"),
                ))
            }
            Err(_) => Err(text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("{host} did not answer in time"),
            )),
        }
    }
}

async fn handle(inner: &Inner, req: Request<Incoming>) -> Response<Body> {
    if req.method() == Method::CONNECT {
        tunnel(inner, req).await
    } else {
        forward(inner, req).await
    }
}

/// `CONNECT host:port`: a byte tunnel to the checked destination.
async fn tunnel(inner: &Inner, req: Request<Incoming>) -> Response<Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let Some(port) = authority.port_u16() else {
        return text(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let mut upstream = match inner.connect(authority.host(), port).await {
        Ok(stream) => stream,
        Err(response) => return response,
    };
    tokio::spawn(async move {
        match hyper::upgrade::on(req).await {
            Ok(upgraded) => {
                let mut client = TokioIo::new(upgraded);
                // Either side's end or error ends the tunnel; nothing is left to do then.
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            }
            Err(e) => {
                tracing::debug!(error = %e, "a CONNECT to the outbound guard's proxy was not upgraded")
            }
        }
    });
    Response::new(
        http_body_util::Empty::new()
            .map_err(|never| match never {})
            .boxed(),
    )
}

/// Removes the hop-by-hop headers, those the `Connection` header names among them.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// An absolute-form `http://` request: sent on to the checked destination in origin form.
async fn forward(inner: &Inner, req: Request<Incoming>) -> Response<Body> {
    let uri = req.uri().clone();
    if uri.scheme_str() != Some("http") {
        return text(
            StatusCode::BAD_REQUEST,
            "only CONNECT and absolute http:// requests are proxied",
        );
    }
    let Some(authority) = uri.authority().cloned() else {
        return text(StatusCode::BAD_REQUEST, "the request names no host");
    };
    let port = authority.port_u16().unwrap_or(80);
    let upstream = match inner.connect(authority.host(), port).await {
        Ok(stream) => stream,
        Err(response) => return response,
    };
    let (mut sender, connection) = match hyper::client::conn::http1::handshake(TokioIo::new(
        upstream,
    ))
    .await
    {
        Ok(pair) => pair,
        Err(e) => {
            tracing::info!(error = %e, "the outbound guard's proxy could not speak HTTP upstream");
            return text(
                StatusCode::BAD_GATEWAY,
                format!("cannot connect to {}", authority.host()),
            );
        }
    };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "an upstream connection of the outbound guard's proxy failed");
        }
    });
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(hyper::header::HOST) {
        if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
            parts.headers.insert(hyper::header::HOST, host);
        }
    }
    parts.uri = match uri.path_and_query() {
        Some(pq) => pq
            .as_str()
            .parse()
            .unwrap_or_else(|_| "/".parse().expect("a path")),
        None => "/".parse().expect("a path"),
    };
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            Response::from_parts(parts, body.boxed())
        }
        Err(e) => {
            tracing::info!(error = %e, "the outbound guard's proxy's upstream request failed");
            text(
                StatusCode::BAD_GATEWAY,
                format!("the request to {} failed", authority.host()),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_hosts_are_read_as_registries_are_named() {
        let t = |s: &str| Trusted::parse(s);
        assert_eq!(
            t("Mirror.internal:5000"),
            Some(Trusted {
                host: "mirror.internal".into(),
                port: Some(5000)
            })
        );
        assert_eq!(
            t("[::1]:5000"),
            Some(Trusted {
                host: "::1".into(),
                port: Some(5000)
            })
        );
        assert_eq!(
            t("registry.internal"),
            Some(Trusted {
                host: "registry.internal".into(),
                port: None
            })
        );
        assert_eq!(t("host:port"), None);
        assert_eq!(t("[::1]x"), None);
        assert_eq!(t(":5000"), None);
        let m = t("127.0.0.1:5000").unwrap();
        assert!(m.admits("127.0.0.1", 5000));
        assert!(!m.admits("127.0.0.1", 5001));
        let any = t("[::1]").unwrap();
        assert!(any.admits("[::1]", 443));
        assert!(!any.admits("127.0.0.1", 443));
    }
    /// A service only the agent's network reaches: it records each request's head and
    /// answers `ok`.
    async fn internal_service() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(vec![]));
        let log = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut head = vec![];
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    lock(&log).push(String::from_utf8_lossy(&head).into_owned());
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        )
                        .await;
                });
            }
        });
        (addr, seen)
    }

    /// A GET of `url` through `session`'s proxy.
    async fn get(session: &Session, url: &str) -> reqwest::Result<reqwest::Response> {
        reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(session.url()).unwrap())
            .build()
            .unwrap()
            .get(url)
            .send()
            .await
    }

    /// Raw `CONNECT` to `target` through `session`'s proxy: the answer's status line, and
    /// the connection.
    async fn connect_raw(session: &Session, target: SocketAddr) -> (String, TcpStream) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = TcpStream::connect(session.addr).await.unwrap();
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut head = vec![];
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        (head.lines().next().unwrap().to_owned(), s)
    }

    #[tokio::test]
    async fn attack_a_loopback_service_is_not_reached_through_the_proxy() {
        let (service, seen) = internal_service().await;
        let session = Session::start(Guard::default(), &[]).await.unwrap();
        // Plain HTTP: the proxy answers in the service's place.
        let answer = get(&session, &format!("http://{service}/latest/meta-data/"))
            .await
            .unwrap();
        assert_eq!(answer.status(), 403);
        let body = answer.text().await.unwrap();
        assert!(
            body.contains("does not resolve to a public address"),
            "{body}"
        );
        assert_eq!(
            session.refusal(),
            Some(GuardError::NotPublic {
                host: "127.0.0.1".into()
            })
        );
        // HTTPS: the tunnel is refused.
        let err = get(&session, &format!("https://{service}/"))
            .await
            .unwrap_err();
        assert!(err.is_connect() || err.is_request(), "{err:?}");
        let (status, _) = connect_raw(&session, service).await;
        assert!(status.contains(" 403 "), "{status}");
        // A name that resolves to loopback.
        let answer = get(&session, &format!("http://localhost:{}/", service.port()))
            .await
            .unwrap();
        assert_eq!(answer.status(), 403);
        assert!(
            lock(&seen).is_empty(),
            "the service was asked: {:?}",
            lock(&seen)
        );
    }

    #[tokio::test]
    async fn a_trusted_host_is_reached_in_origin_form_at_its_port_only() {
        let (service, seen) = internal_service().await;
        let session = Session::start(Guard::default(), &[service.to_string()])
            .await
            .unwrap();
        let answer = get(&session, &format!("http://{service}/v2/?x=1"))
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        assert_eq!(answer.text().await.unwrap(), "ok");
        let head = lock(&seen).pop().unwrap();
        assert!(head.starts_with("GET /v2/?x=1 HTTP/1.1\r\n"), "{head}");
        assert!(!head.to_ascii_lowercase().contains("proxy-"), "{head}");
        assert_eq!(session.refusal(), None);
        // Another port of the same host is not trusted.
        let (other, other_seen) = internal_service().await;
        let answer = get(&session, &format!("http://{other}/")).await.unwrap();
        assert_eq!(answer.status(), 403);
        assert!(lock(&other_seen).is_empty());
        // Another session does not inherit the trust.
        let stranger = Session::start(Guard::default(), &[]).await.unwrap();
        let answer = get(&stranger, &format!("http://{service}/")).await.unwrap();
        assert_eq!(answer.status(), 403);
    }

    #[tokio::test]
    async fn a_trusted_tunnel_carries_bytes_both_ways() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let (mut r, mut w) = s.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        });
        let trusted = [format!("127.0.0.1:{}", target.port())];
        let session = Session::start(Guard::default(), &trusted).await.unwrap();
        let (status, mut s) = connect_raw(&session, target).await;
        assert!(status.contains(" 200 "), "{status}");
        s.write_all(b"hello").await.unwrap();
        let mut back = [0u8; 5];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"hello");
    }
}
