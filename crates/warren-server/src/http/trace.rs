//! Every request runs under a trace id: the caller's `X-Request-Id` when it is a plain short
//! id, else a new one. It names the request's log span, is answered in `X-Request-Id`, and
//! travels with the changes the request makes (see `crate::trace`).

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::HeaderValue;
use tracing::Instrument;
use warren_types::trace::{TraceId, TRACE_HEADER};

pub async fn layer(req: Request, next: Next) -> Response {
    let trace = req
        .headers()
        .get(TRACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceId::parse)
        .unwrap_or_else(crate::trace::fresh);
    let span = tracing::info_span!("request", trace = %trace);
    let mut resp = crate::trace::scope(trace.clone(), next.run(req).instrument(span)).await;
    if let Ok(v) = HeaderValue::from_str(trace.as_str()) {
        resp.headers_mut().insert(TRACE_HEADER, v);
    }
    resp
}
