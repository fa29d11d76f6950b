//! Desired-state change → runtime action through the signal path: the server double changes a
//! workspace's desired state and POSTs the relay's signal endpoint (as the server does); the
//! relay signals the agent over its connection; the agent runs a partial reconcile through the
//! relay to the server and applies the answer to the (simulated) runtime. Measured until the
//! runtime holds the new replica count. The baseline is the 10 s partial timer the signal
//! replaces (a change waits for the next tick: uniform over the interval).
//!
//! `cargo bench -p warren-relay --bench signal_latency`

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::time::{Duration, Instant};
use warren_agent::runtime::WorkspaceRuntime;
use warren_types::reconcile::ReconcileSettings;
use warren_types::{ActualState, DesiredState};

fn main() {
    block_on(run());
}

async fn run() {
    let rounds = 200;
    let server = TestServer::start(ReconcileSettings {
        full_reconciliation_interval_seconds: 3600,
        partial_reconciliation_interval_seconds: 10,
    })
    .await;
    server.with(|s| s.model.create("bench"));
    let relay = TestRelay::start(&server.url).await;
    let agent = TestAgent::start(relay.agent_url(), GOOD_TOKEN);
    wait_for("the workspace to run", 30, || async {
        server.with(|s| s.model.actual("bench")) == Some(ActualState::Running)
    })
    .await;
    let http = reqwest::Client::new();
    let signal_url = relay.internal_url(&format!("/internal/agents/{AGENT}/signal"));
    let mut changes = agent.runtime.changes();
    let mut samples = Vec::with_capacity(rounds);
    for i in 0..rounds {
        let (desired, replicas) = if i % 2 == 0 {
            (DesiredState::Stopped, 0)
        } else {
            (DesiredState::Running, 1)
        };
        let start = Instant::now();
        server.with(|s| s.model.set_desired("bench", desired));
        let resp = http
            .post(&signal_url)
            .bearer_auth(internal_jwt("warren-server"))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_success());
        loop {
            if agent.runtime.workspace(&key("bench")).map(|w| w.replicas) == Some(replicas) {
                break;
            }
            tokio::time::timeout(Duration::from_secs(30), changes.changed())
                .await
                .expect("the runtime acts within 30 s")
                .unwrap();
        }
        samples.push(start.elapsed());
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let p50 = ms(samples[rounds / 2]);
    let p95 = ms(samples[rounds * 95 / 100]);
    let timer_p50 = 5000.0;
    let timer_p95 = 9500.0;
    println!("desired-state change → runtime action ({rounds} changes, signal path, loopback)");
    println!(
        "p50 {p50:>8.2} ms   10 s timer {timer_p50:>7.0} ms   ratio {:.5}",
        p50 / timer_p50
    );
    println!(
        "p95 {p95:>8.2} ms   10 s timer {timer_p95:>7.0} ms   ratio {:.5}   (target ≤ 100 ms)",
        p95 / timer_p95
    );
}
