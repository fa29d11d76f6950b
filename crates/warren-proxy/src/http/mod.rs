//! Workspace hosts over HTTP/1.1 and HTTP/2 (h2c with prior knowledge): host routing,
//! sign-in, authorisation and forwarding (access.md).
//!
//! Module map: `host` (which host is this), `keys` + `cookies` (signed cookies, rotation),
//! `signin` (the OAuth dance and the session hand-off), `fetch_site` (a session cookie's
//! state-changing and upgrade requests only from this workspace's own pages), `authz` (the
//! server's answers, cached), `forward` (to the endpoint and back, WebSocket included),
//! `pages` (what the proxy answers itself). TLS (with ALPN, certificates reloaded) comes
//! from `warren-tls`.
//!
//! Answers: unknown hosts, unknown or other people's workspaces, undeclared ports and
//! refused tokens are all the same 404. No credentials: browsers are redirected to sign
//! in, API clients get 401 — unless the port is shared with anyone, or a share link opened on
//! this host (`share`) lets them in. Reserved paths on workspace hosts: `/.warren/session`
//! (the sign-in hand-off), `/.warren/share` (a share link) and `POST /.warren/start` (the
//! stopped page's button); everything else goes to the workspace. WebSocket over HTTP/2 (RFC 8441) is not offered; browsers
//! fall back to HTTP/1.1 for it.

pub(crate) mod authz;
pub(crate) mod cookies;
pub(crate) mod fetch_site;
pub(crate) mod forward;
pub(crate) mod host;
pub mod keys;
pub(crate) mod pages;
pub(crate) mod share;
pub(crate) mod signin;

use crate::server_api::ServerApiError;
use crate::{ProxyError, Shared};
use authz::{AuthzCache, Principal};
use axum::body::Body;
use host::{Route, Target};
use http::header::LOCATION;
use http::request::Parts;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Reserved path on workspace hosts: the stopped page's start button posts here.
pub(crate) const START_PATH: &str = "/.warren/start";
/// Reserved path on endpoint hosts: a share link is opened here (`?token=`).
use warren_types::sharing::SHARE_PATH;
/// Longest wait for open connections to finish after shutdown.
const DRAIN: Duration = Duration::from_secs(5);
/// Longest TLS handshake before the connection is dropped.
const TLS_HANDSHAKE: Duration = Duration::from_secs(10);
/// What a connection past the cap is told before it is closed.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: 40\r\nretry-after: 5\r\n\r\nthe proxy has too many connections open\n";

/// The front door's own state, part of [`Shared`].
#[derive(Debug)]
pub(crate) struct Front {
    pub keys: keys::CookieKeys,
    pub authz: AuthzCache,
    pub upstreams: forward::Upstreams,
}

impl Front {
    pub(crate) fn new(config: &crate::ProxyConfig, keys: keys::CookieKeys) -> Self {
        Front {
            keys,
            authz: AuthzCache::new(config.authorization_cache_secs),
            upstreams: forward::Upstreams::default(),
        }
    }
}

/// Serves the HTTP listener until `shutdown`.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    listener: TcpListener,
    tls: Option<warren_tls::ServerCert>,
    shutdown: CancellationToken,
) -> Result<(), ProxyError> {
    // HTTP/2 and HTTP/1.1 offered by ALPN; each handshake gets the current certificate.
    let tls = tls.map(|cert| cert.acceptor(&[b"h2", b"http/1.1"]));
    let mut conns = tokio::task::JoinSet::new();
    let limits = shared.config.limits;
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_http_connections));
    let first_byte = Duration::from_secs(limits.header_timeout_secs);
    loop {
        let (stream, peer) = tokio::select! {
            // Cancel-safe: `accept` loses no connection when the other arm wins.
            x = warren_tls::accept(&listener) => x,
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        // Past the cap, say so and close: the connections already open keep being served.
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max = limits.max_http_connections, "too many HTTP connections; refusing one");
            metrics::counter!("warren_proxy_refused_connections_total", "protocol" => "http")
                .increment(1);
            let _ = stream.try_write(OVER_CAPACITY);
            continue;
        };
        let shared = shared.clone();
        // A token of its own, cancelled with the proxy's: the connection checks it each time
        // it is polled, and checking locks the token, which every connection would share.
        let shutdown = shutdown.child_token();
        let tls = tls.clone();
        metrics::counter!("warren_proxy_connections_total", "protocol" => "http").increment(1);
        conns.spawn(async move {
            let _permit = permit;
            let _open = warren_metrics::Open::new(
                metrics::gauge!("warren_proxy_open_connections", "protocol" => "http"),
            );
            // A client that connects and sends nothing holds a connection for free: it gets
            // the header timeout for its first byte (TLS has its handshake timeout).
            if tls.is_none() {
                let mut byte = [0u8; 1];
                match tokio::time::timeout(first_byte, stream.peek(&mut byte)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        tracing::debug!(%peer, "no request within the header timeout; closing");
                        return;
                    }
                }
            }
            match tls {
                None => serve_connection(shared, stream, peer, shutdown).await,
                Some(acceptor) => {
                    match tokio::time::timeout(TLS_HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => serve_connection(shared, s, peer, shutdown).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, %peer, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
        // Reap finished connections so the set does not grow forever.
        while conns.try_join_next().is_some() {}
    }
    // Closed before draining: a new connection is refused at once (the load balancer sends
    // it to another replica) instead of waiting in the backlog of a socket nobody accepts.
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    Ok(())
}

/// HTTP/1.1 (with upgrades) or HTTP/2 (by ALPN or prior knowledge) on one connection,
/// drained gracefully on shutdown.
async fn serve_connection<I>(
    shared: Arc<Shared>,
    io: I,
    peer: SocketAddr,
    shutdown: CancellationToken,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let shared_header_timeout = shared.config.limits.header_timeout_secs;
    let svc = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req, peer).await) }
    });
    let header_timeout = Duration::from_secs(shared_header_timeout);
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    // Slowloris: each request's headers must arrive within the timeout (hyper needs a timer
    // for it), and HTTP/2 peers that stop answering pings are dropped.
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(header_timeout);
    builder
        .http2()
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(header_timeout);
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        // Cancel-safe: the connection future is pinned and polled again below.
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "client connection ended");
            }
            return;
        }
        // Cancel-safe: cancellation is level-triggered.
        _ = shutdown.cancelled() => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(DRAIN, conn).await;
}

async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    let req = req.map(Body::new);
    let method = warren_metrics::method_label(req.method());
    let started = tokio::time::Instant::now();
    let target = host::request_host(&req).and_then(|h| host::parse(&shared.config, &h));
    // The kind of host, never the host itself: label values stay few.
    let (kind, resp) = match target {
        None => ("unknown", pages::not_found(req.headers())),
        Some(target) => match target.route {
            Route::Auth => ("auth", signin::auth_host(&shared, req).await),
            Route::Endpoint { .. } => ("endpoint", workspace_host(shared, target, req, peer).await),
            Route::Terminal { .. } => ("terminal", workspace_host(shared, target, req, peer).await),
        },
    };
    let status = warren_metrics::status_label(resp.status());
    metrics::counter!("warren_http_requests_total", "service" => "proxy", "method" => method, "route" => kind, "status" => status)
        .increment(1);
    metrics::histogram!("warren_http_request_duration_seconds", "service" => "proxy", "method" => method, "route" => kind)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// Who the request comes from: a session on this host, else a personal access token, else
/// the holder of a share link opened on this host, else someone who has not signed in.
enum Caller {
    Session {
        claims: signin::SessionClaims,
        raw: String,
    },
    Token(String),
    Share(share::ShareClaims),
    Anyone,
}

impl Caller {
    fn principal(&self) -> Principal<'_> {
        match self {
            Caller::Session { claims, .. } => Principal::User(claims.sub),
            Caller::Token(t) => Principal::Token(t),
            Caller::Share(c) => Principal::Share(c.link),
            Caller::Anyone => Principal::Anyone,
        }
    }
}

fn bearer(req: &Parts) -> Option<String> {
    warren_jwt::bearer(&req.headers).map(str::to_owned)
}

async fn workspace_host(
    shared: Arc<Shared>,
    target: Target,
    req: Request<Body>,
    peer: SocketAddr,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    if parts.uri.path() == signin::HANDOFF_PATH {
        return signin::complete_handoff(&shared, &target, &parts).await;
    }
    let endpoint = matches!(target.route, Route::Endpoint { .. });
    if endpoint && parts.uri.path() == SHARE_PATH && parts.method == Method::GET {
        return share::redeem(&shared, &target, &parts).await;
    }
    let workspace = target.workspace().unwrap_or_default();
    let caller = match signin::session(&shared, &target, &parts.headers) {
        Some((claims, raw)) => Caller::Session { claims, raw },
        None => match bearer(&parts) {
            Some(t) => Caller::Token(t),
            // A terminal is never shared: signing in is the only way.
            None if !endpoint => return signin::anonymous(&shared, &parts),
            None => match share::cookie(&shared, &target, &parts.headers) {
                Some(c) => Caller::Share(c),
                None => Caller::Anyone,
            },
        },
    };
    if let Caller::Session { .. } = &caller {
        if let Some(reason) = fetch_site::refusal(&shared.config, &parts, &target) {
            tracing::info!(host = %target.host, method = %parts.method, "cross-site request with a session cookie refused");
            return pages::error(
                &parts.headers,
                StatusCode::FORBIDDEN,
                "cross_site",
                "Request refused",
                reason,
            );
        }
    }
    let principal = caller.principal();
    let access = match authorize(&shared, &target, &principal, &parts, peer).await {
        Ok(access) => access,
        Err(answer) => return answer,
    };
    let bound_to = match &caller {
        Caller::Session { claims, .. } => Some(claims.ws),
        Caller::Share(c) => Some(c.ws),
        Caller::Token(_) | Caller::Anyone => None,
    };
    // The name now belongs to another workspace (terminated and re-created): sign in anew.
    if bound_to.is_some_and(|ws| ws != access.workspace_id) {
        return signin::anonymous(&shared, &parts);
    }
    let authority = signin::request_authority(&parts).unwrap_or_else(|| target.host.clone());
    let req = Request::from_parts(parts, body);
    if let Some(reason) = &access.unavailable {
        return pages::entry_unavailable(req.headers(), &access.workspace_name, reason);
    }
    if !access.mount {
        shared.activity.touch(access.workspace_id);
    }
    if req.uri().path() == START_PATH && req.method() == Method::POST {
        if !access.may_start {
            return pages::not_found(req.headers());
        }
        return start(&shared, &caller, &access, req).await;
    }
    if access.actual_state != warren_types::ActualState::Running {
        if access.wake_on_request {
            return wake(&shared, &access, req.headers()).await;
        }
        let csrf = match &caller {
            Caller::Session { raw, .. } => Some(signin::csrf_token(raw)),
            Caller::Token(_) | Caller::Share(_) | Caller::Anyone => None,
        };
        return pages::not_running(req.headers(), &access, csrf.as_deref());
    }
    match target.route {
        Route::Terminal { .. } => match crate::port_forward::port_of(req.uri().path()) {
            Some(port) => crate::port_forward::handle(shared.clone(), access, port, req).await,
            None => crate::terminal::handle(shared.clone(), access, req, Some(peer.ip())).await,
        },
        Route::Endpoint { port, .. } => {
            let client = forward::ClientInfo {
                peer,
                scheme: if shared.config.public_scheme == "https" {
                    "https"
                } else {
                    "http"
                },
                authority,
                strip_authorization: matches!(caller, Caller::Token(_)),
            };
            // Only what the error page looks at (`pages::wants_html`), not every header.
            let mut headers = http::HeaderMap::new();
            for name in [
                http::header::ACCEPT,
                http::HeaderName::from_static("sec-fetch-mode"),
            ] {
                if let Some(v) = req.headers().get(&name) {
                    headers.insert(name, v.clone());
                }
            }
            let (mut req, client_upgrade) = forward::prepare_request(req, &client);
            if let Some(url) = &access.mount_url {
                forward::aim_at_url(&mut req, url);
            }
            let workspace_id = access.workspace_id;
            let mount = access.mount;
            let editor = access.editor.then_some((access.user_id, peer.ip()));
            let key = forward::Upstream { access, port };
            match shared.front.upstreams.send(&shared, &key, req).await {
                Ok(resp) => {
                    forward::finish_response(&shared, workspace_id, resp, client_upgrade, editor)
                }
                Err(e) => {
                    tracing::info!(workspace = %workspace, port, error = %crate::error_chain(&e), "forwarding failed");
                    shared.front.authz.forget(&principal, workspace, Some(port));
                    let detail = match &e {
                        forward::ForwardError::Relay(crate::relay::RelayError::Refused {
                            message,
                            ..
                        }) => message.clone(),
                        other => crate::error_chain(other),
                    };
                    if mount {
                        // A connector or agent that just went away, or a service behind it
                        // that is down: the server says `Unknown` once the heartbeat deadline
                        // passes; until then, the same 503 with what failed.
                        return pages::entry_unavailable(
                            &headers,
                            workspace,
                            &format!("port {port} of {workspace} cannot be reached: {detail}"),
                        );
                    }
                    pages::unreachable(&headers, workspace, &format!("port {port}"), &detail)
                }
            }
        }
        Route::Auth => pages::not_found(&http::HeaderMap::new()),
    }
}

/// What the server says `principal` may do at `target`, or the answer the request gets
/// instead: a redirect mount's redirect or a 404 when it may not reach it (someone not signed
/// in, or whose share link stopped working, is sent to sign in instead), a 403 for a token of
/// the wrong kind (said before any workspace was looked at), a 503 when the server cannot
/// answer.
async fn authorize(
    shared: &Arc<Shared>,
    target: &Target,
    principal: &Principal<'_>,
    parts: &Parts,
    peer: SocketAddr,
) -> Result<Arc<warren_types::internal::WorkspaceAccess>, Response<Body>> {
    let workspace = target.workspace().unwrap_or_default();
    let source = Some(peer.ip());
    let checked = shared
        .front
        .authz
        .check(&shared.server, principal, workspace, target.port(), source)
        .await;
    match checked {
        Ok(a) if a.allowed => Ok(a),
        Ok(_) | Err(ServerApiError::Denied)
            if matches!(principal, Principal::Share(_) | Principal::Anyone) =>
        {
            Err(signin::anonymous(shared, parts))
        }
        Ok(_) | Err(ServerApiError::Denied) => {
            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            Err(redirect_or_not_found(shared, target, principal, parts, path).await)
        }
        Err(ServerApiError::Status {
            status: 403,
            message,
        }) => Err(pages::error(
            &parts.headers,
            StatusCode::FORBIDDEN,
            "insufficient_scope",
            "Token not usable here",
            &message,
        )),
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "authorisation check failed");
            Err(pages::server_unavailable(&parts.headers))
        }
    }
}

/// A host that is no workspace the caller may reach may be a redirect mount they may see
/// (spec/mounts.md): `308` to where it leads — the same port (or terminal) and path on the
/// final entry's host, or the external URL with the path appended. A chain that breaks is a
/// 503 page naming where; anything else the usual 404.
pub(crate) async fn redirect_or_not_found(
    shared: &Shared,
    target: &Target,
    principal: &Principal<'_>,
    parts: &Parts,
    path_and_query: &str,
) -> Response<Body> {
    let Some(name) = target.workspace() else {
        return pages::not_found(&parts.headers);
    };
    match shared.server.redirect(&principal.query(name, None)).await {
        Ok(r) => {
            let location = match (r.entry, r.url) {
                (Some(entry), _) => target.host_for(&entry).map(|host| {
                    // The port the client used, kept: the target is served by this proxy.
                    let port = signin::request_authority(parts)
                        .and_then(|a| a.rsplit_once(':').map(|(_, p)| format!(":{p}")))
                        .unwrap_or_default();
                    let scheme = &shared.config.public_scheme;
                    format!("{scheme}://{host}{port}{path_and_query}")
                }),
                (None, Some(url)) => Some(format!("{}{path_and_query}", url.trim_end_matches('/'))),
                (None, None) => None,
            };
            match location {
                Some(l) => {
                    tracing::debug!(mount = %name, location = %l, "redirected");
                    signin::redirect(StatusCode::PERMANENT_REDIRECT, &l)
                }
                None => pages::not_found(&parts.headers),
            }
        }
        Err(ServerApiError::Status {
            status: 503,
            message,
        }) => pages::error(
            &parts.headers,
            StatusCode::SERVICE_UNAVAILABLE,
            "redirect_broken",
            "This redirect leads nowhere",
            &message,
        ),
        Err(ServerApiError::Denied) | Err(ServerApiError::Status { .. }) => {
            pages::not_found(&parts.headers)
        }
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "redirect lookup failed");
            pages::server_unavailable(&parts.headers)
        }
    }
}

/// Largest start form accepted.
const START_FORM_LIMIT: usize = 4096;

/// `POST /.warren/start`: the stopped page's button. With a session cookie the request
/// must come from this very origin (Origin / Sec-Fetch-Site) and carry the CSRF token
/// derived from the session; a personal access token is not ambient, so needs neither.
/// A request reached a workspace the idle timeout stopped, and its agent's policy wakes it:
/// ask for `Running` on the owner's behalf (the caller was just authorised as the owner),
/// then answer "starting" (a page that reloads into the workspace, or 503 `Retry-After`).
async fn wake(
    shared: &Shared,
    access: &warren_types::internal::WorkspaceAccess,
    headers: &http::HeaderMap,
) -> Response<Body> {
    let request = warren_types::internal::WorkspaceStartRequest {
        workspace_id: access.workspace_id,
        user_id: access.user_id,
    };
    match shared.server.start(&request).await {
        Ok(a) => {
            tracing::info!(workspace = %access.workspace_name, "woken by a request");
            let state = format!("{} (desired {})", a.actual_state, a.desired_state);
            pages::starting(headers, &access.workspace_name, &state)
        }
        Err(e) => {
            tracing::warn!(workspace = %access.workspace_name, error = %crate::error_chain(&e), "waking the workspace failed");
            pages::server_unavailable(headers)
        }
    }
}

async fn start(
    shared: &Shared,
    caller: &Caller,
    access: &warren_types::internal::WorkspaceAccess,
    req: Request<Body>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let headers = parts.headers.clone();
    if let Caller::Session { raw, .. } = caller {
        let scheme = &shared.config.public_scheme;
        let origin_ok = match headers.get(http::header::ORIGIN) {
            Some(o) => signin::request_authority(&parts)
                .is_some_and(|a| o.as_bytes() == format!("{scheme}://{a}").as_bytes()),
            None => true,
        };
        let site_ok = headers
            .get("sec-fetch-site")
            .is_none_or(|s| s.as_bytes() == b"same-origin");
        let body = match http_body_util::Limited::new(body, START_FORM_LIMIT)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => return pages::bad_request(&headers, "The start form is too large."),
        };
        let token_ok = url::form_urlencoded::parse(&body)
            .find(|(k, _)| k == "csrf")
            .is_some_and(|(_, v)| signin::csrf_ok(raw, &v));
        if !(origin_ok && site_ok && token_ok) {
            return pages::error(
                &headers,
                StatusCode::FORBIDDEN,
                "csrf",
                "Not started",
                "This start request did not come from the workspace's own page. Reload the page and press Start again.",
            );
        }
    }
    let request = warren_types::internal::WorkspaceStartRequest {
        workspace_id: access.workspace_id,
        user_id: access.user_id,
    };
    match shared.server.start(&request).await {
        Ok(_) => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::SEE_OTHER;
            r.headers_mut()
                .insert(LOCATION, HeaderValue::from_static("/"));
            r
        }
        Err(ServerApiError::Denied) => pages::not_found(&headers),
        Err(ServerApiError::Status {
            status: 409,
            message,
        }) => pages::error(
            &headers,
            StatusCode::CONFLICT,
            "invalid_state_transition",
            "Cannot start",
            &message,
        ),
        Err(e) => {
            tracing::warn!(error = %crate::error_chain(&e), "starting a workspace failed");
            pages::server_unavailable(&headers)
        }
    }
}
