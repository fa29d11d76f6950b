//! Forwarding to a workspace endpoint: proxy → relay → the agent's connection → endpoint
//! (or straight to the endpoint in direct mode), over HTTP/1.1 connections that are kept
//! and reused per endpoint, so a request usually costs no new tunnel.
//!
//! The request is rewritten for the upstream: origin-form URI, `Host` as the client wrote
//! it, hop-by-hop headers (and the ones `Connection` names) removed, `X-Forwarded-*` set,
//! the proxy's cookies stripped. WebSocket (any `Upgrade`) is passed through: once both
//! sides switched protocols, bytes are copied both ways. The answer's `Set-Cookie`s lose any
//! of the proxy's names and every `Domain` (`cookies::filter_upstream_set_cookies`).

use super::cookies;
use crate::relay::RelayError;
use crate::Shared;
use axum::body::Body;
use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Request, Response, StatusCode, Version};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite};
use warren_types::ids::{AgentId, UserId, WorkspaceId};
use warren_types::internal::WorkspaceAccess;
use warren_types::relay::DialTarget;

/// Idle connections kept per endpoint.
const MAX_IDLE_PER_UPSTREAM: usize = 64;

#[derive(Debug, thiserror::Error)]
pub(crate) enum ForwardError {
    #[error(transparent)]
    Relay(#[from] RelayError),
    #[error("connecting to {addr}")]
    Direct {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the endpoint did not speak HTTP/1.1")]
    Handshake(#[source] hyper::Error),
    #[error("the endpoint failed the request")]
    Request(#[source] hyper::Error),
}

/// One workspace endpoint: `port` of the workspace the (cached) access answer names.
/// Cloning it is cheap; two keys are the same endpoint when agent, namespace, workspace
/// name and port agree, whichever answer they came from.
#[derive(Debug, Clone)]
pub(crate) struct Upstream {
    pub access: Arc<WorkspaceAccess>,
    pub port: u16,
}

impl Upstream {
    fn parts(&self) -> (AgentId, &str, &str, u16) {
        let a = &self.access;
        (a.agent_id, &a.namespace, &a.workspace_name, self.port)
    }
}

impl PartialEq for Upstream {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for Upstream {}

impl std::hash::Hash for Upstream {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.parts().hash(state)
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

type UpstreamConn = hyper::client::conn::http1::Connection<TokioIo<Box<dyn Io>>, Body>;

/// A kept HTTP/1.1 connection to an endpoint: the request handle and the connection itself.
///
/// The connection is not a task of its own: whoever sends a request on it drives it (while
/// waiting for the answer, then from the answer's body), so a request costs no hand-over
/// between tasks or threads on the way out and back. It goes back to the pool when its
/// answer has been read to the end.
struct Kept {
    sender: SendRequest<Body>,
    conn: Pin<Box<UpstreamConn>>,
    idle_since: tokio::time::Instant,
}

impl Kept {
    /// Drives the connection once; `false` when it has ended.
    fn poll_conn(&mut self, cx: &mut Context<'_>) -> bool {
        match self.conn.as_mut().poll(cx) {
            Poll::Pending => true,
            Poll::Ready(Ok(())) => false,
            Poll::Ready(Err(e)) => {
                tracing::debug!(error = %e, "upstream connection ended");
                false
            }
        }
    }

    /// Whether a request can go out now (driving the connection to find out).
    fn ready_now(&mut self) -> bool {
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        self.poll_conn(&mut cx) && matches!(self.sender.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }
}

/// Kept HTTP/1.1 connections, per endpoint.
#[derive(Default)]
pub(crate) struct Upstreams {
    idle: Mutex<HashMap<Upstream, Vec<Kept>>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Upstreams(..)")
    }
}

/// Kept connections unused for this long are closed (each may hold a relay tunnel open).
const IDLE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(90);

impl Upstreams {
    /// A kept connection that can take a request now, if any.
    fn take_idle(&self, key: &Upstream) -> Option<Kept> {
        let mut idle = self.idle.lock().expect("pool lock poisoned");
        let list = idle.get_mut(key)?;
        let now = tokio::time::Instant::now();
        while let Some(mut k) = list.pop() {
            if now.duration_since(k.idle_since) < IDLE_LIFETIME && k.ready_now() {
                return Some(k);
            }
        }
        None
    }

    fn put_back(&self, key: Upstream, mut k: Kept) {
        if k.sender.is_closed() {
            return;
        }
        let now = tokio::time::Instant::now();
        k.idle_since = now;
        let mut idle = self.idle.lock().expect("pool lock poisoned");
        let list = idle.entry(key).or_default();
        list.retain(|k| !k.sender.is_closed() && now.duration_since(k.idle_since) < IDLE_LIFETIME);
        if list.len() < MAX_IDLE_PER_UPSTREAM {
            list.push(k);
        }
    }

    async fn connect(&self, shared: &Shared, key: &Upstream) -> Result<Kept, ForwardError> {
        let io: Box<dyn Io> = match &shared.config.direct_upstream {
            Some(template) => {
                let addr = template
                    .replace("{workspace}", &key.access.workspace_name)
                    .replace("{namespace}", &key.access.namespace)
                    .replace("{port}", &key.port.to_string());
                let s = tokio::net::TcpStream::connect(&addr)
                    .await
                    .map_err(|source| ForwardError::Direct { addr, source })?;
                let _ = s.set_nodelay(true);
                Box::new(s)
            }
            None => {
                let target = DialTarget {
                    workspace: key.access.workspace_name.clone(),
                    namespace: key.access.namespace.clone(),
                    port: key.port,
                };
                Box::new(
                    shared
                        .relay
                        .open_tunnel(key.access.agent_id, &target)
                        .await?,
                )
            }
        };
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake::<_, Body>(TokioIo::new(io))
            .await
            .map_err(ForwardError::Handshake)?;
        Ok(Kept {
            sender,
            conn: Box::pin(conn),
            idle_since: tokio::time::Instant::now(),
        })
    }

    /// Sends `req` on `kept`, driving the connection until the answer's head arrives.
    async fn exchange(
        kept: &mut Kept,
        req: Request<Body>,
    ) -> Result<Response<hyper::body::Incoming>, hyper::client::conn::TrySendError<Request<Body>>>
    {
        let answer = kept.sender.try_send_request(req);
        tokio::pin!(answer);
        let mut open = true;
        std::future::poll_fn(|cx| {
            // Once the connection has ended, the answer resolves with its error.
            if open {
                open = kept.poll_conn(cx);
            }
            answer.as_mut().poll(cx)
        })
        .await
    }

    /// Sends `req` to the endpoint on a kept connection or a new one.
    ///
    /// A kept connection the endpoint closed while idle (many dev servers drop keep-alive
    /// connections after a few seconds) must not surface as an error: a request it never
    /// took is sent elsewhere, and a bodiless GET/HEAD/OPTIONS it took but never answered
    /// is repeated once on a new connection.
    pub(crate) async fn send(
        &self,
        shared: &Arc<Shared>,
        key: &Upstream,
        mut req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, ForwardError> {
        if req.headers().contains_key(header::UPGRADE) {
            // A protocol switch keeps the connection for itself: it runs as its own task.
            let Kept {
                mut sender, conn, ..
            } = self.connect(shared, key).await?;
            tokio::spawn(async move {
                if let Err(e) = Pin::into_inner(conn).with_upgrades().await {
                    tracing::debug!(error = %e, "upstream connection ended");
                }
            });
            sender.ready().await.map_err(ForwardError::Handshake)?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(ForwardError::Request)?;
            return Ok(resp.map(|body| UpstreamBody::new(body, None)));
        }
        while let Some(mut kept) = self.take_idle(key) {
            let replay = replayable(&req);
            match Self::exchange(&mut kept, req).await {
                Ok(resp) => return Ok(self.driven(shared, key, kept, resp)),
                Err(mut e) => match (e.take_message(), replay) {
                    // The kept connection closed before taking the request: try another.
                    (Some(r), _) => req = r,
                    (None, Some(r)) => {
                        tracing::debug!(error = %e.error(), "kept connection failed; repeating the request");
                        req = r;
                    }
                    (None, None) => return Err(ForwardError::Request(e.into_error())),
                },
            }
        }
        let mut kept = self.connect(shared, key).await?;
        let resp = Self::exchange(&mut kept, req)
            .await
            .map_err(|e| ForwardError::Request(e.into_error()))?;
        Ok(self.driven(shared, key, kept, resp))
    }

    fn driven(
        &self,
        shared: &Arc<Shared>,
        key: &Upstream,
        kept: Kept,
        resp: Response<hyper::body::Incoming>,
    ) -> Response<UpstreamBody> {
        let home = Home {
            shared: shared.clone(),
            key: key.clone(),
            kept,
        };
        resp.map(|body| UpstreamBody::new(body, Some(home)))
    }
}

/// Where a kept connection goes back to.
struct Home {
    shared: Arc<Shared>,
    key: Upstream,
    kept: Kept,
}

/// An endpoint's answer body that also drives the connection it arrives on, and returns that
/// connection to the pool once the body has been read to the end (dropped early, the
/// connection is closed: it is in the middle of a message).
pub(crate) struct UpstreamBody {
    body: hyper::body::Incoming,
    home: Option<Home>,
    /// The body said it has no more frames (a chunked body never counts as `is_end_stream`).
    ended: bool,
}

impl UpstreamBody {
    fn new(body: hyper::body::Incoming, home: Option<Home>) -> Self {
        UpstreamBody {
            body,
            home,
            ended: false,
        }
    }
}

impl hyper::body::Body for UpstreamBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(home) = &mut this.home {
            if !home.kept.poll_conn(cx) {
                this.home = None;
            }
        }
        let frame = Pin::new(&mut this.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            this.ended = true;
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            if self.ended || hyper::body::Body::is_end_stream(&self.body) {
                home.shared.front.upstreams.put_back(home.key, home.kept);
            }
        }
    }
}

/// A copy of a request that is safe to send twice: idempotent and without a body.
fn replayable(req: &Request<Body>) -> Option<Request<Body>> {
    use hyper::body::Body as HttpBody;
    let idempotent = matches!(
        *req.method(),
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    );
    if !idempotent || HttpBody::size_hint(req.body()).exact() != Some(0) {
        return None;
    }
    let mut copy = Request::new(Body::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus the legacy ones proxies still see. Names, not
/// strings: removing by a string parses it first, twice per request for each of the nine.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Removes hop-by-hop headers and those `Connection` lists; returns the `Upgrade` value
/// when the message asks for (or agrees to) a protocol switch.
fn remove_hop_by_hop(h: &mut HeaderMap) -> Option<HeaderValue> {
    let upgrade = h.get(header::UPGRADE).cloned();
    let mut listed_upgrade = false;
    let listed: Vec<HeaderName> = h
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| {
            let n = n.trim();
            if n.eq_ignore_ascii_case("upgrade") {
                listed_upgrade = true;
            }
            HeaderName::from_bytes(n.as_bytes()).ok()
        })
        .collect();
    for n in listed {
        h.remove(n);
    }
    for n in &HOP_BY_HOP {
        h.remove(n);
    }
    upgrade.filter(|_| listed_upgrade)
}

/// Everything about the client the upstream is told.
pub(crate) struct ClientInfo {
    pub peer: SocketAddr,
    pub scheme: &'static str,
    /// `host[:port]` as the client wrote it.
    pub authority: String,
    /// A personal access token was used: `Authorization` is the proxy's, not the app's.
    pub strip_authorization: bool,
}

/// Rewrites a client request into one for the upstream; returns it with the client side's
/// pending upgrade, if the client asked for one.
pub(crate) fn prepare_request(
    mut req: Request<Body>,
    client: &ClientInfo,
) -> (Request<Body>, Option<hyper::upgrade::OnUpgrade>) {
    let on_upgrade = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>();
    let h = req.headers_mut();
    let upgrade = remove_hop_by_hop(h);
    cookies::strip_ours(h);
    if client.strip_authorization {
        h.remove(header::AUTHORIZATION);
    }
    if let Ok(v) = HeaderValue::from_str(&client.authority) {
        h.insert(header::HOST, v.clone());
        h.insert(HeaderName::from_static("x-forwarded-host"), v);
    }
    h.insert(
        HeaderName::from_static("x-forwarded-proto"),
        HeaderValue::from_static(client.scheme),
    );
    let xff = HeaderName::from_static("x-forwarded-for");
    let ip = client.peer.ip().to_string();
    let forwarded_for = match h.get(&xff).and_then(|v| v.to_str().ok()) {
        Some(prev) => format!("{prev}, {ip}"),
        None => ip,
    };
    if let Ok(v) = HeaderValue::from_str(&forwarded_for) {
        h.insert(xff, v);
    }
    let upgrade = upgrade.filter(|_| req.version() == Version::HTTP_11);
    if let Some(u) = &upgrade {
        let h = req.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        h.insert(header::UPGRADE, u.clone());
    }
    // Origin form, from the parsed path and query as they are (no copy, no second parse).
    let pq = req
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    *req.uri_mut() = http::Uri::from(pq);
    *req.version_mut() = Version::HTTP_11;
    let on_upgrade = if upgrade.is_some() { on_upgrade } else { None };
    (req, on_upgrade)
}

/// Aims a prepared request at a `proxy` mount's URL (spec/mounts.md): `Host` is the URL's
/// host (the server behind it knows itself by that name; `X-Forwarded-Host` keeps the
/// client's), and the URL's path goes before the request's.
pub(crate) fn aim_at_url(req: &mut Request<Body>, mount_url: &str) {
    let Ok(url) = url::Url::parse(mount_url) else {
        return;
    };
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => return,
    };
    if let Ok(v) = HeaderValue::from_str(&host) {
        req.headers_mut().insert(header::HOST, v);
    }
    let base = url.path().trim_end_matches('/');
    if base.is_empty() {
        return;
    }
    let pq = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    if let Ok(uri) = format!("{base}{pq}").parse() {
        *req.uri_mut() = uri;
    }
}

/// Rewrites the upstream's answer for the client; a switch of protocols is wired up here.
/// `editor` names the caller and their address when the port is the workspace's editor:
/// its WebSockets are an editor session for the audit log.
pub(crate) fn finish_response(
    shared: &std::sync::Arc<Shared>,
    workspace: WorkspaceId,
    mut resp: Response<UpstreamBody>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
    editor: Option<(UserId, std::net::IpAddr)>,
) -> Response<Body> {
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        let Some(client_upgrade) = client_upgrade else {
            // The upstream switched although nobody asked: refuse rather than hang.
            return super::pages::json_error(
                StatusCode::BAD_GATEWAY,
                "bad_upstream",
                "the endpoint switched protocols unasked",
            );
        };
        let upstream_upgrade = hyper::upgrade::on(&mut resp);
        let shared = shared.clone();
        tokio::spawn(async move {
            let (c, u) = tokio::join!(client_upgrade, upstream_upgrade);
            let (Ok(c), Ok(u)) = (c, u) else {
                return;
            };
            let _session =
                editor.map(|(user, ip)| shared.sessions.editor(workspace, user, Some(ip)));
            let mut c = shared.activity.touching(TokioIo::new(c), workspace);
            let mut u = shared.activity.touching(TokioIo::new(u), workspace);
            tokio::select! {
                // Not resumed when the other arm wins: bytes it holds are lost with the
                // connection, which is closing anyway.
                _ = tokio::io::copy_bidirectional(&mut c, &mut u) => {}
                // Cancel-safe: level-triggered. The proxy stops; both sides close when the
                // copy is dropped, and the client reconnects to another replica.
                _ = shared.closing.cancelled() => {}
            }
        });
        let upgrade = resp.headers().get(header::UPGRADE).cloned();
        let (mut parts, _) = resp.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        cookies::filter_upstream_set_cookies(&mut parts.headers);
        if let Some(u) = upgrade {
            parts
                .headers
                .insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, u);
        }
        return Response::from_parts(parts, Body::empty());
    }
    let (mut parts, body) = resp.into_parts();
    remove_hop_by_hop(&mut parts.headers);
    // Every workspace host shares one domain: a workspace may only set cookies on itself.
    cookies::filter_upstream_set_cookies(&mut parts.headers);
    Response::from_parts(parts, Body::new(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_rewrite() {
        let req = Request::get("http://8080-a.ws.example.com:7080/p?q=1")
            .version(Version::HTTP_2)
            .header("connection", "keep-alive, x-private")
            .header("x-private", "1")
            .header("keep-alive", "timeout=5")
            .header("te", "trailers")
            .header("cookie", "warren_session=s; app=1")
            .header("authorization", "Bearer wrn_pat_x")
            .header("x-forwarded-for", "10.0.0.1")
            .header("x-kept", "yes")
            .body(Body::empty())
            .unwrap();
        let info = ClientInfo {
            peer: "127.0.0.2:5555".parse().unwrap(),
            scheme: "http",
            authority: "8080-a.ws.example.com:7080".into(),
            strip_authorization: true,
        };
        let (r, up) = prepare_request(req, &info);
        assert!(up.is_none());
        assert_eq!(r.uri(), "/p?q=1");
        assert_eq!(r.version(), Version::HTTP_11);
        let h = r.headers();
        for gone in [
            "connection",
            "x-private",
            "keep-alive",
            "te",
            "authorization",
        ] {
            assert!(h.get(gone).is_none(), "{gone}");
        }
        assert_eq!(h["host"], "8080-a.ws.example.com:7080");
        assert_eq!(h["x-forwarded-host"], "8080-a.ws.example.com:7080");
        assert_eq!(h["x-forwarded-proto"], "http");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.2");
        assert_eq!(h["cookie"], "app=1");
        assert_eq!(h["x-kept"], "yes");
    }

    #[test]
    fn only_bodiless_idempotent_requests_are_replayed() {
        let get = Request::get("/x")
            .header("a", "1")
            .body(Body::empty())
            .unwrap();
        let copy = replayable(&get).unwrap();
        assert_eq!(
            (copy.method(), copy.uri(), &copy.headers()["a"]),
            (
                &http::Method::GET,
                &http::Uri::from_static("/x"),
                &HeaderValue::from_static("1")
            )
        );
        let post = Request::post("/x").body(Body::empty()).unwrap();
        assert!(replayable(&post).is_none());
        let get_body = Request::get("/x").body(Body::from("data")).unwrap();
        assert!(replayable(&get_body).is_none());
    }

    #[test]
    fn upgrade_kept() {
        let req = Request::get("/ws")
            .header("connection", "Upgrade")
            .header("upgrade", "websocket")
            .body(Body::empty())
            .unwrap();
        let info = ClientInfo {
            peer: "127.0.0.2:5555".parse().unwrap(),
            scheme: "https",
            authority: "x".into(),
            strip_authorization: false,
        };
        let (r, _) = prepare_request(req, &info);
        assert_eq!(r.headers()["connection"], "upgrade");
        assert_eq!(r.headers()["upgrade"], "websocket");
    }
}
