//! The relay's HTTP handlers: the agent connection upgrade, and the internal signal, tunnel and
//! exec endpoints; plus serving the streams an agent opens. Tunnels and exec sessions share
//! one path (wait for the agent, route across instances, splice the upgraded connection);
//! they differ only in the [`StreamOpen`] the agent receives.

mod agent;
mod internal;
mod peer;

pub(crate) use agent::agent_router;
use agent::*;
pub(crate) use internal::internal_router;
use internal::*;
pub(crate) use peer::peer_router;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::time::Duration;
use warren_types::api::{ApiError, ApiErrorBody};
use warren_types::relay::TUNNEL_PROTOCOL;

/// Time an agent has to send a stream's first frames.
const STREAM_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed to deliver a signal to one connection.
const SIGNAL_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = ApiError {
        error: ApiErrorBody {
            code: code.into(),
            message: message.into(),
        },
    };
    (status, Json(body)).into_response()
}

fn wants_tunnel(headers: &HeaderMap) -> bool {
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(TUNNEL_PROTOCOL));
    let connection = headers
        .get(header::CONNECTION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        });
    upgrade && connection
}

fn upgrade_required() -> Response {
    error(
        StatusCode::UPGRADE_REQUIRED,
        "upgrade_required",
        format!("this endpoint needs `Connection: upgrade` and `Upgrade: {TUNNEL_PROTOCOL}`"),
    )
}

fn switching_protocols(extra: Option<(&'static str, String)>) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(TUNNEL_PROTOCOL));
    if let Some((name, value)) = extra {
        if let Ok(v) = HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
    resp
}
