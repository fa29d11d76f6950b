//! The web terminal: a page hosting xterm.js and the WebSocket ⇄ exec bridge behind it.
//!
//! `GET /` is the page, `/assets/…` its scripts and styles (embedded in the binary), and
//! `GET /ws?cols=&rows=` the WebSocket. The WebSocket runs a login shell in the workspace's
//! main container through the relay (`open_exec`, with a PTY) and carries, page ⇄ proxy:
//! binary messages = terminal bytes both ways; text messages = JSON,
//! `{"type":"resize","cols":C,"rows":R}` from the page, and from the proxy
//! `{"type":"exit","code":N|null,"message"?:M}` when the process ended or
//! `{"type":"error","message":M}` when it could not start, each followed by a close. Ten
//! minutes before a lifecycle timer stops the workspace, a warning line is written into the
//! terminal (`stop_warning`).

use crate::relay::ExecSession;
use crate::Shared;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::FromRequestParts;
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use warren_types::api::{ApiError, ApiErrorBody};
use warren_types::internal::WorkspaceAccess;
use warren_types::relay::{EnvVar, ExecExit, ExecFrame, ExecTarget, TerminalSize};

/// argv of an interactive login shell that needs nothing but `/bin/sh` in the image and
/// prefers bash where the image has it (used by the web terminal and SSH shells).
pub(crate) fn login_shell() -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        "if command -v bash >/dev/null 2>&1; then exec bash -l; fi; exec /bin/sh -l".into(),
    ]
}

/// `TERM` of the xterm.js terminal.
const TERM: &str = "xterm-256color";
/// Terminal sizes outside this range are clamped (a page cannot ask for absurd buffers).
const MAX_DIMENSION: u16 = 1000;
const DEFAULT_SIZE: TerminalSize = TerminalSize { cols: 80, rows: 24 };
/// Longest text message accepted from the page (a resize is a few dozen bytes).
const MAX_TEXT_MESSAGE: usize = 1024;

struct Asset {
    path: &'static str,
    content_type: &'static str,
    body: &'static [u8],
    /// Versioned paths never change content; our own files are revalidated.
    immutable: bool,
}

impl Asset {
    const fn vendored(
        path: &'static str,
        content_type: &'static str,
        body: &'static [u8],
    ) -> Asset {
        Asset {
            path,
            content_type,
            body,
            immutable: true,
        }
    }

    const fn own(path: &'static str, content_type: &'static str, body: &'static [u8]) -> Asset {
        let vendored = Asset::vendored(path, content_type, body);
        Asset {
            immutable: false,
            ..vendored
        }
    }
}

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";

/// The vendored xterm.js and its fit addon (versioned paths: cached for good), then our own
/// page script and style (revalidated).
const ASSETS: &[Asset] = &[
    Asset::vendored(
        "/assets/xterm-6.0.0/xterm.js",
        JS,
        include_bytes!("../assets/xterm-6.0.0/xterm.js"),
    ),
    Asset::vendored(
        "/assets/xterm-6.0.0/xterm.css",
        CSS,
        include_bytes!("../assets/xterm-6.0.0/xterm.css"),
    ),
    Asset::vendored(
        "/assets/xterm-6.0.0/LICENSE",
        TEXT,
        include_bytes!("../assets/xterm-6.0.0/LICENSE"),
    ),
    Asset::vendored(
        "/assets/addon-fit-0.11.0/addon-fit.js",
        JS,
        include_bytes!("../assets/addon-fit-0.11.0/addon-fit.js"),
    ),
    Asset::vendored(
        "/assets/addon-fit-0.11.0/LICENSE",
        TEXT,
        include_bytes!("../assets/addon-fit-0.11.0/LICENSE"),
    ),
    Asset::own(
        "/assets/terminal.js",
        JS,
        include_bytes!("../assets/terminal.js"),
    ),
    Asset::own(
        "/assets/terminal.css",
        CSS,
        include_bytes!("../assets/terminal.css"),
    ),
];

const PAGE: &str = include_str!("../assets/terminal.html");

/// Serves every request to `terminal-{workspace}.{domain}` once the HTTP front door has
/// authenticated the user and the server has allowed access to the workspace itself
/// (`access.port` is `None`): the page, its assets, and the WebSocket at `/ws`.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    access: Arc<WorkspaceAccess>,
    req: axum::extract::Request,
    peer: Option<std::net::IpAddr>,
) -> Response {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    if path == "/ws" {
        if method != Method::GET {
            return error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "the terminal WebSocket takes GET",
            );
        }
        return websocket(shared, access, req, peer).await;
    }
    if method != Method::GET && method != Method::HEAD {
        return error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "the terminal page takes GET",
        );
    }
    if path == "/" {
        shared.activity.touch(access.workspace_id);
        return page(&access, req.headers());
    }
    match ASSETS.iter().find(|a| a.path == path) {
        Some(asset) => serve_asset(asset),
        None => error(StatusCode::NOT_FOUND, "not_found", "no such page"),
    }
}

/// A JSON error in the API's shape.
pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = ApiError {
        error: ApiErrorBody {
            code: code.into(),
            message: message.into(),
        },
    };
    (status, axum::Json(body)).into_response()
}

fn serve_asset(asset: &Asset) -> Response {
    let cache = if asset.immutable {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    (
        [
            (header::CONTENT_TYPE, asset.content_type),
            (header::CACHE_CONTROL, cache),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        asset.body,
    )
        .into_response()
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The request's host (`Host`, or the authority of an HTTP/2 request), as sent.
fn request_host(headers: &HeaderMap, uri: Option<&http::Uri>) -> Option<String> {
    headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| uri.and_then(|u| u.authority()).map(|a| a.to_string()))
}

fn page(access: &WorkspaceAccess, headers: &HeaderMap) -> Response {
    let body = PAGE.replace("{{WORKSPACE}}", &html_escape(&access.workspace_name));
    // Scripts only from this host; the WebSocket only back to it. xterm.js sets inline
    // styles, hence 'unsafe-inline' for styles alone.
    let mut connect = "'self'".to_owned();
    if let Some(host) = request_host(headers, None).filter(|h| {
        h.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
    }) {
        connect.push_str(&format!(" ws://{host} wss://{host}"));
    }
    let csp = format!(
        "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
         font-src 'self'; img-src 'self' data:; connect-src {connect}; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    );
    let mut resp = (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&csp) {
        resp.headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, v);
    }
    resp
}

/// The page's initial terminal size (`/ws?cols=&rows=`), clamped; missing or malformed
/// values fall back to 80×24.
fn initial_size(query: Option<&str>) -> TerminalSize {
    let mut size = DEFAULT_SIZE;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match (&*k, v.parse::<u16>()) {
            ("cols", Ok(cols)) => size.cols = cols,
            ("rows", Ok(rows)) => size.rows = rows,
            _ => {}
        }
    }
    clamp(size)
}

fn clamp(size: TerminalSize) -> TerminalSize {
    TerminalSize {
        cols: size.cols.clamp(1, MAX_DIMENSION),
        rows: size.rows.clamp(1, MAX_DIMENSION),
    }
}

/// A browser's WebSocket must come from this very host: without the check any site the
/// user visits could open a shell with the user's cookie (cross-site WebSocket hijacking).
/// Clients that send no `Origin` are not browsers and cannot be tricked that way.
fn same_origin(headers: &HeaderMap, host: Option<&str>) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let (Some(origin), Some(host)) = (
        origin.to_str().ok().and_then(|o| url::Url::parse(o).ok()),
        host,
    ) else {
        return false;
    };
    let Some(origin_host) = origin.host_str() else {
        return false;
    };
    let default_port = match origin.scheme() {
        "http" => 80,
        "https" => 443,
        _ => return false,
    };
    let Ok(authority) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    origin_host.eq_ignore_ascii_case(authority.host())
        && origin.port().unwrap_or(default_port) == authority.port_u16().unwrap_or(default_port)
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum PageMessage {
    Resize { cols: u16, rows: u16 },
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ProxyMessage {
    Exit {
        code: Option<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    Error {
        message: String,
    },
}

/// The WebSocket upgrade of a workspace-host request, refusing pages of other sites (a
/// browser would send its session cookie with their WebSocket too): `refusal` says why.
pub(crate) async fn same_origin_upgrade(
    req: axum::extract::Request,
    refusal: &str,
) -> Result<(WebSocketUpgrade, http::request::Parts), Response> {
    let (mut parts, _body) = req.into_parts();
    let host = request_host(&parts.headers, Some(&parts.uri));
    if !same_origin(&parts.headers, host.as_deref()) {
        return Err(error(StatusCode::FORBIDDEN, "cross_origin", refusal));
    }
    match WebSocketUpgrade::from_request_parts(&mut parts, &()).await {
        Ok(u) => Ok((u, parts)),
        Err(rejection) => Err(rejection.into_response()),
    }
}

async fn websocket(
    shared: Arc<Shared>,
    access: Arc<WorkspaceAccess>,
    req: axum::extract::Request,
    peer: Option<std::net::IpAddr>,
) -> Response {
    let (upgrade, parts) = match same_origin_upgrade(
        req,
        "the terminal WebSocket only accepts connections from its own page",
    )
    .await
    {
        Ok(u) => u,
        Err(r) => return r,
    };
    let size = initial_size(parts.uri.query());
    shared.activity.touch(access.workspace_id);
    upgrade
        .max_message_size(1 << 20)
        .on_upgrade(move |socket| async move {
            let closing = shared.closing.clone();
            tokio::select! {
                // Not resumed when the other arm wins: dropping it closes the page's socket
                // and the exec session, which is the intent.
                _ = bridge(shared, access, size, socket, peer) => {}
                // Cancel-safe: level-triggered. The proxy stops; the page reconnects to
                // another replica.
                _ = closing.cancelled() => {}
            }
        })
}

async fn send_json(
    socket: &mut futures::stream::SplitSink<WebSocket, Message>,
    msg: &ProxyMessage,
) {
    if let Ok(text) = serde_json::to_string(msg) {
        let _ = socket.send(Message::Text(text.into())).await;
    }
}

async fn close(socket: &mut futures::stream::SplitSink<WebSocket, Message>, code: u16) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: "".into(),
        })))
        .await;
    let _ = socket.close().await;
}

/// Runs the shell and copies between the WebSocket and the exec session until the process
/// ends (exit message, then close) or the page goes away (the session is dropped, which
/// closes the relay stream and ends the process).
async fn bridge(
    shared: Arc<Shared>,
    access: Arc<WorkspaceAccess>,
    size: TerminalSize,
    socket: WebSocket,
    peer: Option<std::net::IpAddr>,
) {
    let (to_page, mut from_page) = socket.split();
    // Written by the output copy and by the stop warnings, one message at a time.
    let to_page = tokio::sync::Mutex::new(to_page);
    let target = ExecTarget {
        workspace: access.workspace_name.clone(),
        namespace: access.namespace.clone(),
        container: None,
        command: login_shell(),
        env: vec![EnvVar {
            name: "TERM".into(),
            value: TERM.into(),
        }],
        tty: true,
        size: Some(size),
        task: None,
    };
    let session = match shared.relay.open_exec(access.agent_id, &target).await {
        Ok(s) => s,
        Err(e) => {
            let message = match &e {
                crate::relay::RelayError::Refused { message, .. } => {
                    format!(
                        "cannot start a shell in {}: {message}",
                        access.workspace_name
                    )
                }
                other => format!(
                    "cannot start a shell in {}: {}",
                    access.workspace_name,
                    crate::error_chain(other)
                ),
            };
            tracing::info!(workspace = %access.workspace_name, error = %crate::error_chain(&e), "terminal exec failed");
            let mut to_page = to_page.lock().await;
            send_json(&mut to_page, &ProxyMessage::Error { message }).await;
            close(&mut to_page, 1011).await;
            return;
        }
    };
    let ExecSession {
        mut reader,
        mut writer,
    } = session;
    // Recorded as opened now, and as closed when this returns, however the session ends.
    let _audited = shared.sessions.open(
        warren_types::internal::SessionKind::Terminal,
        access.workspace_id,
        access.user_id,
        peer,
        None,
    );
    let workspace = access.workspace_id;
    let activity = shared.activity.clone();
    let input = async {
        while let Some(msg) = from_page.next().await {
            let frame = match msg {
                Ok(Message::Binary(bytes)) => ExecFrame::Stdin(bytes.to_vec()),
                Ok(Message::Text(text)) if text.len() <= MAX_TEXT_MESSAGE => {
                    match serde_json::from_str::<PageMessage>(&text) {
                        Ok(PageMessage::Resize { cols, rows }) => {
                            ExecFrame::Resize(clamp(TerminalSize { cols, rows }))
                        }
                        // Unknown messages are ignored: newer pages may send more.
                        Err(_) => continue,
                    }
                }
                Ok(Message::Text(_)) => continue,
                Ok(Message::Ping(_) | Message::Pong(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => return,
            };
            activity.touch(workspace);
            if writer.send(&frame).await.is_err() {
                // The session is closing; the output side reports how it ended.
                futures::future::pending::<()>().await;
            }
        }
    };
    let output = async {
        let exit = loop {
            match reader.next().await {
                Ok(Some(ExecFrame::Stdout(b) | ExecFrame::Stderr(b))) => {
                    activity.touch(workspace);
                    if to_page
                        .lock()
                        .await
                        .send(Message::Binary(b.into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
                Ok(Some(ExecFrame::Exit(exit))) => break exit,
                Ok(Some(_)) => continue,
                Ok(None) => {
                    break ExecExit {
                        code: None,
                        message: Some("the connection to the workspace was lost".into()),
                    }
                }
                Err(e) => {
                    break ExecExit {
                        code: None,
                        message: Some(format!(
                            "the connection to the workspace failed: {}",
                            crate::error_chain(&e)
                        )),
                    }
                }
            }
        };
        let mut to_page = to_page.lock().await;
        send_json(
            &mut to_page,
            &ProxyMessage::Exit {
                code: exit.code,
                message: exit.message,
            },
        )
        .await;
        close(&mut to_page, 1000).await;
    };
    let warnings = warn_of_stops(&shared, &access, &to_page);
    tokio::select! {
        // Cancel-safe: when the page is gone the whole session is dropped; the half-read
        // exec frame of the other arm is never needed.
        _ = input => tracing::debug!(workspace = %access.workspace_name, "terminal page gone"),
        // Cancel-safe: as above, the page side is dropped with it.
        _ = output => {}
        // Cancel-safe: a warning is a whole message sent under the lock, or not at all; it
        // ends only when the page is gone.
        _ = warnings => {}
    }
}

type PageSink = futures::stream::SplitSink<WebSocket, Message>;

/// Writes a line into the page's terminal ten minutes before each planned stop, until the
/// page is gone.
async fn warn_of_stops(
    shared: &Shared,
    access: &WorkspaceAccess,
    to_page: &tokio::sync::Mutex<PageSink>,
) {
    let mut warnings = crate::stop_warning::StopWarnings::new(
        shared,
        access.user_id,
        &access.workspace_name,
        access.planned_stop.clone(),
    );
    loop {
        let line = warnings.next().await;
        tracing::info!(workspace = %access.workspace_name, "warned a terminal of the planned stop");
        if to_page
            .lock()
            .await
            .send(Message::Binary(line.into_bytes().into()))
            .await
            .is_err()
        {
            return;
        }
    }
}

#[cfg(test)]
mod tests;
