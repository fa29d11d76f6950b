//! Prometheus metrics for every Warren service. One recorder per process (the `metrics`
//! facade allows one), so `warren up`, which runs every service in one process, renders
//! every recorded metric on each `/metrics`; the `service` label tells them apart where names
//! are shared. (Metrics read at scrape time — a `Collector` — are on the listener that has
//! it only: the agent's per-workspace usage is served by `warren agent --metrics-listen`.)
//!
//! Latencies are histograms with fixed buckets (not client-side summaries) so replicas can
//! be aggregated: `histogram_quantile(0.99, sum by (le) (rate(..._bucket[5m])))`.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use tokio_util::sync::CancellationToken;

static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Seconds: from a cached authorisation (sub-millisecond) to a slow workspace start.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Seconds from a Git push to its apply: polls and webhooks take seconds to minutes.
const LAG_BUCKETS: &[f64] = &[
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Installs the process-wide recorder on first use; later calls share it. `None` when
/// another recorder was installed first (then `/metrics` is empty, and says why in the log).
pub fn handle() -> Option<&'static PrometheusHandle> {
    HANDLE
        .get_or_init(|| {
            // GitOps lag is minutes, not milliseconds: buckets of its own.
            let builder = PrometheusBuilder::new()
                .set_buckets(LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        metrics_exporter_prometheus::Matcher::Full(
                            "warren_gitops_apply_lag_seconds".into(),
                        ),
                        LAG_BUCKETS,
                    )
                });
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics buckets refused; latencies as summaries");
                    PrometheusBuilder::new().build_recorder()
                }
            };
            let handle = recorder.handle();
            match metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    start_upkeep(handle.clone());
                    Some(handle)
                }
                Err(_) => {
                    tracing::warn!("another metrics recorder is installed; /metrics will be empty");
                    None
                }
            }
        })
        .as_ref()
}

/// How often recorded histogram samples are folded into their buckets.
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Upkeeps done since the recorder was installed (tests).
static UPKEEPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Folds recorded histogram samples into their buckets every [`UPKEEP_EVERY`], for the life
/// of the process. The recorder keeps every sample of a histogram (each request's duration,
/// 8 bytes and more) until it is folded, and without this it is folded only when someone
/// scrapes `/metrics`: a service nobody scrapes, `warren up` by default, would grow by every
/// request it ever served.
///
/// A thread of its own rather than a task: the recorder outlives any one runtime (tests
/// start one per test, and the first to install the recorder may end first).
fn start_upkeep(handle: PrometheusHandle) {
    let started = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            // Not an executor thread: sleeping blocks nothing but this loop.
            #[allow(clippy::disallowed_methods)]
            std::thread::sleep(UPKEEP_EVERY);
            handle.run_upkeep();
            UPKEEPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
    if let Err(e) = started {
        tracing::warn!(error = %e, "starting the metrics upkeep failed; histograms are folded only when /metrics is scraped");
    }
}

/// The Prometheus text exposition of every metric recorded in this process.
pub fn render() -> String {
    handle().map(|h| h.render()).unwrap_or_default()
}

/// `GET /metrics`.
pub async fn metrics_page() -> Response {
    (
        [(
            http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        render(),
    )
        .into_response()
}

/// Middleware counting and timing every request of a router by service, method, route
/// template (never the raw path: bounded label values) and status:
/// `warren_http_requests_total` and `warren_http_request_duration_seconds`.
/// Use with `axum::middleware::from_fn_with_state("relay", track)`.
pub async fn track(State(service): State<&'static str>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".into());
    let method = method_label(req.method());
    let started = tokio::time::Instant::now();
    let resp = next.run(req).await;
    let status = status_label(resp.status());
    metrics::counter!("warren_http_requests_total", "service" => service, "method" => method, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!("warren_http_request_duration_seconds", "service" => service, "method" => method, "route" => route)
        .record(started.elapsed().as_secs_f64());
    resp
}

/// The `status` label: the code's three digits, without an allocation for the codes most
/// answers have (this runs on every request the proxy forwards).
pub fn status_label(status: http::StatusCode) -> metrics::SharedString {
    const COMMON: [(u16, &str); 20] = [
        (200, "200"),
        (201, "201"),
        (204, "204"),
        (206, "206"),
        (301, "301"),
        (302, "302"),
        (303, "303"),
        (304, "304"),
        (307, "307"),
        (308, "308"),
        (400, "400"),
        (401, "401"),
        (403, "403"),
        (404, "404"),
        (409, "409"),
        (429, "429"),
        (500, "500"),
        (502, "502"),
        (503, "503"),
        (504, "504"),
    ];
    let code = status.as_u16();
    match COMMON.iter().find(|(c, _)| *c == code) {
        Some((_, label)) => metrics::SharedString::const_str(label),
        None => code.to_string().into(),
    }
}

/// The `method` label: a standard method's name, else `other` (any token is a valid method,
/// and each distinct label value is a new series held for the life of the process).
pub fn method_label(method: &http::Method) -> &'static str {
    match *method {
        http::Method::GET => "GET",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        http::Method::HEAD => "HEAD",
        http::Method::OPTIONS => "OPTIONS",
        http::Method::CONNECT => "CONNECT",
        http::Method::TRACE => "TRACE",
        _ => "other",
    }
}

/// Metrics read at scrape time rather than recorded (a workspace's CPU and memory): what it
/// renders, in the Prometheus text format, follows the recorded ones on `/metrics`.
pub type Collector = std::sync::Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>> + Send + Sync,
>;

/// A listener of its own for services without an HTTP API of their own to put `/metrics`
/// on (the agent; the proxy, whose HTTP listener is the public one): `GET /metrics`, and
/// `GET /healthz` answering 200 while the process serves. Runs until `shutdown`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    serve_with(listener, None, shutdown).await
}

/// [`serve`], with `collector`'s metrics added to each scrape.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    collector: Option<Collector>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    handle();
    let page = move || {
        let collector = collector.clone();
        async move {
            let mut text = render();
            if let Some(c) = collector {
                text.push_str(&c().await);
            }
            (
                [(
                    http::header::CONTENT_TYPE,
                    "text/plain; version=0.0.4; charset=utf-8",
                )],
                text,
            )
        }
    };
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(page))
        .route("/healthz", axum::routing::get(|| async { "ok" }));
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

/// Keeps a gauge counting something open: up by one now, down by one when dropped (also on
/// a panic or a cancelled future, so the gauge cannot drift).
#[derive(Debug)]
pub struct Open {
    gauge: metrics::Gauge,
}

impl Open {
    pub fn new(gauge: metrics::Gauge) -> Open {
        gauge.increment(1.0);
        Open { gauge }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.gauge.decrement(1.0);
    }
}

/// A byte stream whose reads and writes are counted as they happen (not when it closes: a
/// tunnel may stay open for days).
#[derive(Debug)]
pub struct CountingIo<S> {
    inner: S,
    read: metrics::Counter,
    written: metrics::Counter,
}

impl<S> CountingIo<S> {
    /// Counts bytes read from `inner` on `read` and bytes written to it on `written`.
    pub fn new(inner: S, read: metrics::Counter, written: metrics::Counter) -> Self {
        CountingIo {
            inner,
            read,
            written,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CountingIo<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if n > 0 {
            self.read.increment(n as u64);
        }
        poll
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for CountingIo<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let poll = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if let std::task::Poll::Ready(Ok(n)) = &poll {
            self.written.increment(*n as u64);
        }
        poll
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    // The upkeep runs on the real clock in a thread of its own; this waits on that clock.
    #[allow(clippy::disallowed_methods)]
    fn recorded_samples_are_folded_without_a_scrape_and_kept() {
        handle().expect("the first recorder of this test process");
        for _ in 0..1000 {
            metrics::histogram!("warren_test_upkeep_seconds").record(0.002);
        }
        let before = UPKEEPS.load(std::sync::atomic::Ordering::Relaxed);
        // Waits for the condition (the next upkeep), polling; the upkeep's own clock is the
        // real one, so no paused time here.
        let deadline = std::time::Instant::now() + UPKEEP_EVERY * 4;
        while UPKEEPS.load(std::sync::atomic::Ordering::Relaxed) == before {
            assert!(
                std::time::Instant::now() < deadline,
                "no upkeep within {:?}",
                UPKEEP_EVERY * 4
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let text = render();
        assert!(
            text.contains("warren_test_upkeep_seconds_count 1000"),
            "folded samples are still counted: {text}"
        );
    }

    #[test]
    fn a_status_label_is_its_three_digits() {
        for code in [200, 204, 404, 418, 503, 599] {
            let status = http::StatusCode::from_u16(code).unwrap();
            assert_eq!(&*status_label(status), code.to_string());
        }
    }

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label(&http::Method::GET), "GET");
        let odd = http::Method::from_bytes(b"FOO1").unwrap();
        assert_eq!(method_label(&odd), "other");
    }

    #[tokio::test]
    async fn bytes_are_counted_as_they_pass_and_gauges_fall_on_drop() {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _guard = metrics::set_default_local_recorder(&recorder);
        let (a, mut b) = tokio::io::duplex(64);
        let mut io = CountingIo::new(
            a,
            metrics::counter!("read_total"),
            metrics::counter!("written_total"),
        );
        let open = Open::new(metrics::gauge!("open"));
        io.write_all(b"hello").await.unwrap();
        b.write_all(b"abc").await.unwrap();
        let mut buf = [0u8; 3];
        io.read_exact(&mut buf).await.unwrap();
        // One snapshot for all: this recorder reports what changed since the last one.
        let values = |snapshot: metrics_util::debugging::Snapshot| {
            snapshot
                .into_vec()
                .into_iter()
                .map(|(k, _, _, v)| (k.key().name().to_owned(), v))
                .collect::<std::collections::HashMap<_, _>>()
        };
        use metrics_util::debugging::DebugValue;
        let now = values(snapshotter.snapshot());
        assert_eq!(now["written_total"], DebugValue::Counter(5));
        assert_eq!(now["read_total"], DebugValue::Counter(3));
        assert_eq!(now["open"], DebugValue::Gauge(1.0.into()));
        drop(open);
        let after = values(snapshotter.snapshot());
        assert_eq!(
            after["open"],
            DebugValue::Gauge((-1.0).into()),
            "down by one"
        );
    }
}
