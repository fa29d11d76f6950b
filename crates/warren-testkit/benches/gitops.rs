//! What GitOps costs, in one run on loopback (issue 20's figures), each printed as a ratio to
//! a baseline measured in the same run:
//!
//! - push → objects applied, with a webhook and with polling (interval 1 s), through the
//!   whole stack (server, relay, agent connection; the simulated runtime as the cluster),
//!   against the Git work alone (list the ref, fetch the commit, read its files) done
//!   directly with the same library;
//! - a poll that finds no change (listing the ref over `git://`) against opening and closing
//!   a TCP connection to the same Git server.
//!
//! Applying 1,000 objects into the real API server against `kubectl apply --server-side` is
//! not here yet (the test control plane has no kubectl).
//!
//! `cargo bench -p warren-testkit --bench gitops` (`GITOPS_BENCH_PUSHES`, default 10).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

use anyhow::{Context, Result};
use reqwest::Method;
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use warren_git::snapshot::{Snapshots, Want};
use warren_testkit::git_daemon::GitDaemon;
use warren_testkit::git_http::{bare_repo as bare, commit_files};
use warren_testkit::{wait_for, Stack};

/// One commit on `main` with a ConfigMap whose value is `value`; returns the commit.
fn push(bare: &Path, value: &str) -> Result<String> {
    commit_files(
        bare,
        &[(
            "cm.yaml",
            &format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bench\ndata:\n  value: \"{value}\"\n"
            ),
        )],
    )
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn applied(stack: &Stack, source: &str, commit: &str) -> bool {
    let Ok(all) = stack
        .api(
            Method::GET,
            "/api/v1/agents/local/gitops/status",
            &stack.admin.token,
            None,
        )
        .await
    else {
        return false;
    };
    all.as_array()
        .into_iter()
        .flatten()
        .any(|s| s["source"] == source && s["commit"] == commit)
}

fn hmac_sha256(secret: &[u8], body: &[u8]) -> String {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pushes: usize = std::env::var("GITOPS_BENCH_PUSHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let stack = Stack::start().await?;
    let root = tempfile::tempdir()?;
    let hooked = bare(root.path(), "hooked")?;
    let polled = bare(root.path(), "polled")?;
    let direct = bare(root.path(), "direct")?;
    for r in [&hooked, &polled, &direct] {
        push(r, "0")?;
    }
    let daemon = GitDaemon::start(root.path())?;
    const SECRET: &str = "bench-webhook-secret-0123456789";
    for (name, secret) in [("hooked", Some(SECRET)), ("polled", None)] {
        let mut body = json!({"name": name, "url": daemon.url(name)});
        if let Some(s) = secret {
            body["webhook_secret"] = json!(s);
        }
        stack.gitops_repository(body).await?;
    }
    stack
        .gitops_sources(
            "local",
            json!({"sources": [
                {"name": "hooked", "repository": "hooked", "namespace": "bench", "interval": "1h"},
                {"name": "polled", "repository": "polled", "namespace": "bench", "interval": "1s"}
            ]}),
        )
        .await?;
    let first = push(&hooked, "0")?;
    let _ = first;

    // Baseline: the Git work alone, directly.
    let cache = tempfile::tempdir()?;
    let snapshots = Snapshots::new(cache.path());
    let url = daemon.url("direct");
    let mut git_alone = Vec::new();
    for i in 0..pushes {
        push(&direct, &format!("d{i}"))?;
        let (s, u) = (snapshots.clone(), url.clone());
        let t = Instant::now();
        tokio::task::spawn_blocking(move || -> Result<()> {
            let want = Want {
                url: &u,
                credential: None,
                git_ref: "main",
            };
            s.resolve(&want)?;
            let f = s.fetch(&want)?;
            s.read(&u, &f, &|p: &str| p.ends_with(".yaml"), 1 << 20)?;
            Ok(())
        })
        .await??;
        git_alone.push(t.elapsed());
    }

    // Push → applied with the webhook.
    let hook = format!("{}/api/v1/gitops/webhooks/hooked", stack.api_url);
    let http = reqwest::Client::new();
    let mut webhook = Vec::new();
    for i in 0..pushes {
        let commit = push(&hooked, &format!("h{i}"))?;
        let body = format!("{{\"after\":\"{commit}\"}}");
        let t = Instant::now();
        let r = http
            .post(&hook)
            .header(
                "X-Hub-Signature-256",
                format!("sha256={}", hmac_sha256(SECRET.as_bytes(), body.as_bytes())),
            )
            .body(body)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 202, "webhook answered {}", r.status());
        wait_for("the pushed commit applied", 60, || {
            applied(&stack, "hooked", &commit)
        })
        .await?;
        webhook.push(t.elapsed());
    }

    // Push → applied by polling every second.
    let mut polling = Vec::new();
    for i in 0..pushes {
        let commit = push(&polled, &format!("p{i}"))?;
        let t = Instant::now();
        wait_for("the polled commit applied", 60, || {
            applied(&stack, "polled", &commit)
        })
        .await?;
        polling.push(t.elapsed());
    }

    // A poll that finds no change, against a TCP round trip to the same server.
    let mut no_change = Vec::new();
    let mut tcp = Vec::new();
    for _ in 0..(pushes * 5) {
        let (s, u) = (snapshots.clone(), url.clone());
        let t = Instant::now();
        tokio::task::spawn_blocking(move || {
            s.resolve(&Want {
                url: &u,
                credential: None,
                git_ref: "main",
            })
        })
        .await??;
        no_change.push(t.elapsed());
        let t = Instant::now();
        let c = tokio::net::TcpStream::connect(daemon.addr)
            .await
            .context("connect")?;
        drop(c);
        tcp.push(t.elapsed());
    }

    let base = median(git_alone);
    let rows = [
        (
            "push → applied, webhook",
            median(webhook),
            base,
            "the Git work alone",
        ),
        (
            "push → applied, polling every 1 s",
            median(polling),
            base,
            "the Git work alone",
        ),
        (
            "no-change poll (list the ref)",
            median(no_change),
            median(tcp),
            "a TCP connect to the same server",
        ),
    ];
    println!("GitOps, {pushes} pushes per row (medians):");
    for (what, figure, baseline, against) in rows {
        println!(
            "  {what}: {} = {:.1}× {against} ({})",
            ms(figure),
            figure.as_secs_f64() / baseline.as_secs_f64().max(1e-9),
            ms(baseline)
        );
    }
    Ok(())
}
