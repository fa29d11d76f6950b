//! Every request runs under a trace id: the caller's `X-Request-Id` when it is a plain short
//! id, else a new one. It names the request's log span, is answered in `X-Request-Id`, and
//! travels with the changes the request makes (see `crate::trace`). The request's origin (the
//! client's address, the API or the web UI) is set beside it for the audit log.

use crate::trace::{Channel, Origin};
use axum::extract::Request;
use axum::extract::State;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use std::sync::Arc;
use tracing::Instrument;
use warren_types::api::API_PREFIX;
use warren_types::trace::{TraceId, TRACE_HEADER};

pub async fn layer(
    State(trusted): State<Arc<Vec<ipnet::IpNet>>>,
    req: Request,
    next: Next,
) -> Response {
    let trace = req
        .headers()
        .get(TRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceId::parse)
        .unwrap_or_else(crate::trace::fresh);
    let span = tracing::info_span!("request", trace = %trace);
    let origin = origin(&req, &trusted);
    let work = crate::trace::with_origin(origin, next.run(req).instrument(span));
    let mut resp = crate::trace::scope(trace.clone(), work).await;
    if let Ok(v) = HeaderValue::from_str(trace.as_str()) {
        resp.headers_mut().insert(TRACE_HEADER, v);
    }
    resp
}

/// The client's address and door: internal endpoints are the relays' and proxies' (which say
/// for whom they ask where it matters), `/api` the JSON API, the rest the web UI's pages.
fn origin(req: &Request, trusted: &[ipnet::IpNet]) -> Origin {
    let addr = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| super::client_addr::client_address(c.0.ip(), req.headers(), trusted));
    let path = req.uri().path();
    let channel = if path.starts_with("/internal/") {
        Channel::System
    } else if path.starts_with(API_PREFIX) {
        Channel::Api
    } else {
        Channel::Web
    };
    Origin { addr, channel }
}
