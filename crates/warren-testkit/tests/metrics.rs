//! Every service exports Prometheus metrics: the server on its API port, the relay on its
//! internal port, the proxy (and the agent) on a listener of their own. Traffic through the
//! stack shows up in them, latencies are histograms, and every metric the Grafana dashboard
//! in `deploy/grafana` queries is one Warren records.

use anyhow::{Context, Result};
use std::collections::BTreeSet;
use std::path::Path;
use warren_testkit::{wait_for, Stack};

async fn page(url: &str) -> Result<String> {
    let r = reqwest::get(url).await?;
    anyhow::ensure!(r.status().is_success(), "{url}: {}", r.status());
    let content_type = r
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(
        content_type.starts_with("text/plain"),
        "{url}: {content_type}"
    );
    Ok(r.text().await?)
}

/// The value of the sample whose line starts with `prefix` (name and labels).
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn every_service_exports_its_metrics() -> Result<()> {
    let stack = Stack::start().await?;
    let alice = stack.user("alice").await?;
    let ws = stack.workspace(&alice, "alice-metrics").await?;
    stack.set_endpoint(&ws, 8080, warren_testkit::text_upstream("measured").await?);
    let client = stack.client_for(&[stack.host(8080, "alice-metrics")]);
    let url = stack.url(8080, "alice-metrics", "/");
    let r = client.get(&url).bearer_auth(&alice.token).send().await?;
    assert_eq!(r.text().await?, "measured");

    let server = format!("{}/metrics", stack.api_url);
    let relay = format!("{}/metrics", stack.relay_internal_url);
    let proxy = format!("{}/metrics", stack.proxy_metrics_url);
    wait_for("the tunnelled bytes to be counted", 30, || async {
        page(&relay).await.is_ok_and(|t| {
            sample(
                &t,
                "warren_relay_stream_bytes_total{kind=\"tunnel\",direction=\"from_agent\"}",
            )
            .is_some_and(|n| n > 0.0)
        })
    })
    .await?;
    let server_text = page(&server).await?;
    let relay_text = page(&relay).await?;
    let proxy_text = page(&proxy).await?;
    let health = reqwest::get(format!("{}/healthz", stack.proxy_metrics_url)).await?;
    assert!(health.status().is_success());

    // Requests by service, latencies as histograms with buckets.
    for service in ["server", "relay", "proxy"] {
        let requests = format!("warren_http_requests_total{{service=\"{service}\"");
        assert!(
            server_text.contains(&requests),
            "{requests} in\n{server_text}"
        );
        let bucket = format!("warren_http_request_duration_seconds_bucket{{service=\"{service}\"");
        assert!(server_text.contains(&bucket), "{bucket} in\n{server_text}");
    }
    assert!(
        proxy_text.contains(
            "warren_http_requests_total{service=\"proxy\",method=\"GET\",route=\"endpoint\",status=\"200\"}"
        ),
        "{proxy_text}"
    );
    // Relay: the agent's connection and the stream it carried.
    assert_eq!(
        sample(&relay_text, "warren_relay_agent_connections "),
        Some(1.0),
        "{relay_text}"
    );
    assert!(
        sample(&relay_text, "warren_relay_streams_total{kind=\"tunnel\"}")
            .is_some_and(|n| n >= 1.0),
        "{relay_text}"
    );
    assert!(relay_text.contains("warren_relay_reconcile_forward_seconds_bucket{outcome=\"ok\""));
    // Proxy: its connections.
    assert!(
        sample(
            &proxy_text,
            "warren_proxy_connections_total{protocol=\"http\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{proxy_text}"
    );
    // Agent: connected, its reconcile cycles timed.
    assert_eq!(
        sample(&server_text, "warren_agent_relay_connected "),
        Some(1.0)
    );
    assert!(server_text.contains("warren_agent_reconcile_seconds_bucket{update_type=\"full\""));
    assert!(
        sample(
            &server_text,
            "warren_agent_reconciles_total{update_type=\"full\",result=\"ok\"}"
        )
        .is_some_and(|n| n >= 1.0),
        "{server_text}"
    );
    // Server: workspaces by state.
    assert_eq!(
        sample(
            &server_text,
            "warren_workspaces{desired_state=\"Running\",actual_state=\"Running\"}"
        ),
        Some(1.0)
    );
    Ok(())
}

/// Every metric the dashboard queries is recorded somewhere in Warren's sources (a renamed
/// metric would otherwise leave an empty panel), and the dashboard is valid JSON with the
/// data source as a variable.
#[test]
fn the_grafana_dashboard_queries_only_metrics_warren_records() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = std::fs::read_to_string(root.join("deploy/grafana/warren-dashboard.json"))?;
    let dashboard: serde_json::Value = serde_json::from_str(&text)?;
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().context("panels")? {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().context("an expr")?.to_owned());
            assert_eq!(target["datasource"]["uid"], "${datasource}");
        }
    }
    assert!(exprs.len() >= 15, "{exprs:?}");
    let queried: BTreeSet<String> = exprs
        .iter()
        .flat_map(|e| metric_names(e))
        .map(|n| {
            for suffix in ["_bucket", "_sum", "_count"] {
                if let Some(base) = n.strip_suffix(suffix) {
                    return base.to_owned();
                }
            }
            n
        })
        .collect();
    let mut recorded = BTreeSet::new();
    collect_recorded(&root.join("crates"), &mut recorded)?;
    let missing: Vec<_> = queried.difference(&recorded).collect();
    assert!(
        missing.is_empty(),
        "queried but never recorded: {missing:?}"
    );
    Ok(())
}

fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("warren_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Names given to `metrics::counter!`, `gauge!` and `histogram!`, or declared on a `# TYPE`
/// line of metrics rendered at scrape time, in every crate's sources.
fn collect_recorded(dir: &Path, out: &mut BTreeSet<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            // Sources only: a test's string naming a metric records nothing.
            if !path.ends_with("target") && !path.ends_with("tests") && !path.ends_with("benches") {
                collect_recorded(&path, out)?;
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            // Recorded through the macros, or rendered at scrape time (a `# TYPE` line).
            for mac in ["counter!(\"", "gauge!(\"", "histogram!(\"", "# TYPE "] {
                for (i, _) in text.match_indices(mac) {
                    let name = &text[i + mac.len()..];
                    if let Some(end) = name.find(['"', ' ']) {
                        out.insert(name[..end].to_owned());
                    }
                }
            }
        }
    }
    Ok(())
}
