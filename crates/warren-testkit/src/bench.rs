//! Test-only: what every benchmark of the repository needs besides its own measurement: its
//! knobs from the environment, medians, a runtime to drive it, and the JSON API's whole
//! workspace listing, the baseline several benchmarks measure against.

// Benchmarks measure wall time with the standard clock; clippy.toml's tokio-clock rule is for
// product code.
#![allow(clippy::disallowed_methods)]

use anyhow::Result;
use serde_json::Value;
use std::time::{Duration, Instant};

/// The number in variable `name`, else `default` (a benchmark's size or rounds).
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The middle value of `v` (the upper one of an even count). A benchmark has at least one
/// round, so none is its bug.
pub fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> T {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    *v.get(v.len() / 2).expect("a median of no samples")
}

/// Runs `bench` to its end on a multi-threaded runtime, as `main` of a benchmark.
pub fn block_on<F: std::future::Future<Output = Result<()>>>(bench: F) -> Result<()> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench)
}

/// What fetching every page of `GET /api/v1/workspaces` took and gave.
#[derive(Debug, Clone, Copy)]
pub struct Listing {
    /// From the first request to the first page's headers.
    pub first_headers: Duration,
    /// Spent waiting for the pages, each from its request to its last byte (the client's
    /// parsing left out, so it is the server's time plus loopback transfer).
    pub fetching: Duration,
    /// From the first request to the last page parsed.
    pub total: Duration,
    /// Bytes of JSON received.
    pub bytes: usize,
    pub items: usize,
}

/// Every page of the JSON API's workspace list as `token` sees it (500 a page, its maximum):
/// what a client without the tree or the web UI does to show them all.
pub async fn list_workspaces(http: &reqwest::Client, base: &str, token: &str) -> Result<Listing> {
    let start = Instant::now();
    let mut listing = Listing {
        first_headers: Duration::ZERO,
        fetching: Duration::ZERO,
        total: Duration::ZERO,
        bytes: 0,
        items: 0,
    };
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{base}/api/v1/workspaces?limit=500");
        if let Some(c) = &cursor {
            url.push_str(&format!("&cursor={c}"));
        }
        let asked = Instant::now();
        let resp = http.get(url).bearer_auth(token).send().await?;
        if cursor.is_none() {
            listing.first_headers = start.elapsed();
        }
        let body = resp.error_for_status()?.bytes().await?;
        listing.fetching += asked.elapsed();
        listing.bytes += body.len();
        let page: Value = serde_json::from_slice(&body)?;
        listing.items += page["items"].as_array().map_or(0, Vec::len);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    listing.total = start.elapsed();
    Ok(listing)
}

/// Milliseconds, as the benchmarks print them.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
