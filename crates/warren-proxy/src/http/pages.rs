//! What the proxy itself answers: error pages for browsers, JSON errors for other clients
//! (`{"error":{"code","message"}}`), the stopped-workspace page with its start button.

use axum::body::Body;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use warren_types::internal::WorkspaceAccess;
use warren_types::{ActualState, DesiredState};

pub(crate) fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// Does the client want HTML (a browser navigating) rather than JSON?
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
        || headers
            .get("sec-fetch-mode")
            .is_some_and(|v| v.as_bytes() == b"navigate")
}

fn no_store(mut r: Response<Body>) -> Response<Body> {
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// An HTML page; `body` is already escaped HTML.
pub(crate) fn html(
    status: StatusCode,
    title: &str,
    body: &str,
    head_extra: &str,
) -> Response<Body> {
    let page = format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title>{head_extra}\
         <style>body{{font-family:system-ui,sans-serif;max-width:40em;margin:4em auto;padding:0 1em;color:#222}}\
         button{{font-size:1em;padding:.4em 1.2em}}</style></head>\
         <body><h1>{t}</h1>{body}</body></html>\n",
        t = escape(title),
    );
    let mut r = Response::new(Body::from(page));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    no_store(r)
}

/// A JSON error.
pub(crate) fn json_error(status: StatusCode, code: &str, message: &str) -> Response<Body> {
    let body = serde_json::json!({"error": {"code": code, "message": message}});
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    no_store(r)
}

/// An error as the client prefers it.
pub(crate) fn error(
    headers: &HeaderMap,
    status: StatusCode,
    code: &str,
    title: &str,
    message: &str,
) -> Response<Body> {
    if wants_html(headers) {
        html(status, title, &format!("<p>{}</p>", escape(message)), "")
    } else {
        json_error(status, code, message)
    }
}

/// The one answer for every host or workspace the caller may not see: never a hint.
pub(crate) fn not_found(headers: &HeaderMap) -> Response<Body> {
    error(
        headers,
        StatusCode::NOT_FOUND,
        "not_found",
        "404 Not found",
        "There is nothing here.",
    )
}

pub(crate) fn bad_request(headers: &HeaderMap, message: &str) -> Response<Body> {
    error(
        headers,
        StatusCode::BAD_REQUEST,
        "bad_request",
        "Bad request",
        message,
    )
}

/// The server could not answer the authorisation question.
pub(crate) fn server_unavailable(headers: &HeaderMap) -> Response<Body> {
    error(
        headers,
        StatusCode::BAD_GATEWAY,
        "server_unavailable",
        "Warren is unavailable",
        "The proxy could not reach the Warren server to check access. Try again in a moment.",
    )
}

/// The workspace (or its agent) could not be reached although it should be running.
pub(crate) fn unreachable(
    headers: &HeaderMap,
    workspace: &str,
    what: &str,
    detail: &str,
) -> Response<Body> {
    let msg = format!("Could not reach {what} of workspace {workspace}: {detail}");
    if wants_html(headers) {
        html(
            StatusCode::BAD_GATEWAY,
            "Workspace unreachable",
            &format!(
                "<p>{}</p><p>If the workspace was just started or its agent restarted, \
                 <a href=\"\">try again</a> in a few seconds.</p>",
                escape(&msg)
            ),
            "",
        )
    } else {
        json_error(StatusCode::BAD_GATEWAY, "workspace_unreachable", &msg)
    }
}

/// A mount whose backing is down or silent (spec/mounts.md): 503 naming the reason, with a
/// page that tries again by itself.
pub(crate) fn entry_unavailable(headers: &HeaderMap, entry: &str, reason: &str) -> Response<Body> {
    let mut r = if wants_html(headers) {
        html(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            &format!(
                "<p>{} cannot be reached right now.</p><p>{}</p><p>This page tries again every \
                 {UNAVAILABLE_RETRY_SECS} seconds.</p>",
                escape(entry),
                escape(reason)
            ),
            &format!("<meta http-equiv=\"refresh\" content=\"{UNAVAILABLE_RETRY_SECS}\">"),
        )
    } else {
        json_error(StatusCode::SERVICE_UNAVAILABLE, "entry_unavailable", reason)
    };
    r.headers_mut().insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from(UNAVAILABLE_RETRY_SECS),
    );
    r
}

/// Seconds a client is asked to wait before trying an unavailable mount again.
const UNAVAILABLE_RETRY_SECS: u64 = 10;

/// Seconds a client is asked to wait before trying a starting workspace again.
pub(crate) const STARTING_RETRY_SECS: u64 = 3;

/// Whether the workspace is meant to run and has not failed: it is starting (or its agent
/// has not picked the request up yet).
fn on_its_way_up(a: &WorkspaceAccess) -> bool {
    a.desired_state == DesiredState::Running
        && !matches!(a.actual_state, ActualState::Failed | ActualState::Error)
}

/// A workspace that is not running: 503 with a start button (for those who may start it),
/// or, while it starts, a page that reloads itself until it runs (and so continues to the
/// workspace); other clients get 503 with `Retry-After` while it starts.
pub(crate) fn not_running(
    headers: &HeaderMap,
    a: &WorkspaceAccess,
    csrf: Option<&str>,
) -> Response<Body> {
    let name = escape(&a.workspace_name);
    let state = format!("{} (desired {})", a.actual_state, a.desired_state);
    if on_its_way_up(a) {
        if !wants_html(headers) {
            let mut r = json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "workspace_starting",
                &format!("workspace {} is not running: {state}", a.workspace_name),
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(STARTING_RETRY_SECS));
            return r;
        }
        return starting(headers, &a.workspace_name, &state);
    }
    if !wants_html(headers) {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "workspace_not_running",
            &format!("workspace {} is not running: {state}", a.workspace_name),
        );
    }
    let form = match (a.may_start, csrf) {
        (true, Some(token)) => format!(
            "<form method=\"post\" action=\"/.warren/start\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\">\
             <button type=\"submit\">Start {name}</button></form>",
            escape(token)
        ),
        (true, None) => "<p>Start it with <code>warren ws start</code>.</p>".into(),
        (false, _) => {
            format!("<p>Only those who use <b>{name}</b> itself may start it: ask its owner.</p>")
        }
    };
    html(
        StatusCode::SERVICE_UNAVAILABLE,
        &format!("Workspace {} is not running", a.workspace_name),
        &format!(
            "<p>Workspace <b>{name}</b> is {}.</p>{form}",
            escape(&state)
        ),
        "",
    )
}

/// The page of a workspace on its way up: 503 that reloads itself (browsers) or says when to
/// retry (others).
pub(crate) fn starting(headers: &HeaderMap, workspace: &str, state: &str) -> Response<Body> {
    let mut r = if wants_html(headers) {
        html(
            StatusCode::SERVICE_UNAVAILABLE,
            &format!("Workspace {workspace} is starting"),
            &format!(
                "<p>Workspace <b>{}</b> is {}. This page reloads until it is running, then \
                 shows it.</p>",
                escape(workspace),
                escape(state)
            ),
            &format!("<meta http-equiv=\"refresh\" content=\"{STARTING_RETRY_SECS}\">"),
        )
    } else {
        json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "workspace_starting",
            &format!("workspace {workspace} is starting ({state}); retry in a few seconds"),
        )
    };
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(STARTING_RETRY_SECS));
    r
}
