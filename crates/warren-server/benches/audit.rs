//! The audit log's cost (issue 44, item 6), on SQLite and (when `WARREN_TEST_DATABASE_URL` is
//! set) PostgreSQL, with 1,000,000 entries in the log:
//!
//! - what recording costs an audited action: workspace create's p50 beside the p50 of the one
//!   append it makes (goal: the append < 5 % of the create);
//! - what it costs the proxy's check of each connection: nothing for a signed-in caller, and
//!   for a refused token the p50 of recording it beside the check's;
//! - the admin's queries (newest page; by actor; by target; "who opened a terminal in X that
//!   day"; by action kind and time; by space), each p50 beside a `SELECT 1` baseline on the
//!   same pool (goal: < 100 ms on PostgreSQL).
//!
//! The million entries are written in one statement, not chained: the queries do not read the
//! chain. Run: `cargo bench -p warren-server --bench audit`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use warren_server::app::{access, audit, workspaces, Principal};
use warren_server::db::DbKind;
use warren_server::store::audit::NewAuditEntry;
use warren_server::{Server, ServerConfig};
use warren_testkit::bench::{env_or, median, ms};
use warren_types::api::{AuditActorKind, AuditOutcome, AuditQuery, CreateWorkspaceRequest};
use warren_types::internal::WorkspaceAccessQuery;

/// Generates `n` entries: 2,000 users, 20,000 workspaces in 50 spaces, five actions, over the
/// last 100 days.
fn bulk_sql(kind: DbKind, n: i64, now: i64) -> String {
    let span = 100 * 86_400_000 / n.max(1);
    let cols = "seq, at, actor_kind, actor_id, actor, credential, action, target_kind, target_id, \
                target, space, source, request_id, channel, outcome, detail, hash";
    let values = |x: &str, hash: &str| {
        format!(
            "{x}, {now} - ({n} - {x}) * {span}, 'user', 1000 + {x} % 2000, 'user' || ({x} % 2000), \
             'session', CASE {x} % 5 WHEN 0 THEN 'workspace.create' WHEN 1 THEN 'workspace.start' \
             WHEN 2 THEN 'workspace.stop' WHEN 3 THEN 'terminal.open' ELSE 'session.sign_in' END, \
             'workspace', CAST({x} % 20000 AS TEXT), 'ws' || ({x} % 20000), 'team' || ({x} % 50), \
             '10.0.0.' || ({x} % 250), NULL, 'api', 'success', NULL, {hash}"
        )
    };
    match kind {
        DbKind::Postgres => format!(
            "INSERT INTO audit_log ({cols}) SELECT {} FROM generate_series(1::bigint, {n}) AS g(x)",
            values("x", "md5(x::text)")
        ),
        DbKind::Sqlite => format!(
            "WITH RECURSIVE g(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM g WHERE x < {n}) \
             INSERT INTO audit_log ({cols}) SELECT {} FROM g",
            values("x", "printf('%064d', x)")
        ),
    }
}

async fn p50<F, Fut>(runs: usize, mut f: F) -> Duration
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut v = Vec::with_capacity(runs);
    for i in 0..runs {
        let t = Instant::now();
        f(i).await;
        v.push(t.elapsed());
    }
    median(v)
}

async fn bench(label: &str, url: String, home: &std::path::Path) {
    let entries: i64 = env_or("WARREN_BENCH_AUDIT_ENTRIES", 1_000_000);
    let runs: usize = env_or("WARREN_BENCH_RUNS", 30);
    let mut config = ServerConfig::new(home);
    config.database_url = Some(url);
    config.relay_secret = Some("bench-relay-secret-0123456789abcdef".into());
    let server = Server::prepare(config).await.expect("prepare");
    let state = server.state().clone();
    server
        .create_agent("bench", &Default::default())
        .await
        .expect("agent");
    let admin = state.store.user_by_name("admin").await.unwrap().unwrap();
    let who = Principal {
        user: admin,
        token: None,
    };
    let now = chrono::Utc::now().timestamp_millis();
    let t = Instant::now();
    sqlx::query(&bulk_sql(state.store.db.kind, entries, now))
        .execute(&state.store.db.pool)
        .await
        .expect("bulk insert");
    sqlx::query("UPDATE audit_head SET seq = (SELECT MAX(seq) FROM audit_log) WHERE id = 1")
        .execute(&state.store.db.pool)
        .await
        .expect("head");
    if state.store.db.kind == DbKind::Postgres {
        sqlx::query("ANALYZE audit_log")
            .execute(&state.store.db.pool)
            .await
            .expect("analyze");
    }
    println!(
        "audit log ({label}; {entries} entries written in {:.1} s; {runs} runs each, medians)",
        t.elapsed().as_secs_f64()
    );

    let baseline = p50(runs, |_| async { state.store.db.ping().await.unwrap() }).await;
    println!("  baseline SELECT 1: {:.2} ms", ms(baseline));

    // Recording's share of an audited action: the request queues its entry (what it waits
    // for); the server's writer appends it (a burst in one transaction).
    let create = p50(runs, |i| {
        let state = state.clone();
        let who = who.clone();
        async move {
            let req: CreateWorkspaceRequest =
                serde_json::from_value(json!({"name": format!("bench-{i}"), "agent": "bench"}))
                    .unwrap();
            workspaces::create(&state, &who, &req)
                .await
                .expect("create");
        }
    })
    .await;
    let queue = p50(runs, |_| async {
        audit::record(
            &state,
            audit::Actor::of(&who),
            "bench.append",
            Some(audit::Target::named("workspace", "bench")),
            AuditOutcome::Success,
            None,
        )
        .await
    })
    .await;
    state.audit.flush().await;
    let entry = || NewAuditEntry {
        at_ms: now,
        actor_kind: AuditActorKind::User,
        actor_id: Some(who.user.id),
        actor: Some(who.user.username.clone()),
        credential: Some("session".into()),
        action: "bench.append".into(),
        target_kind: Some("workspace".into()),
        target_id: None,
        target: Some("bench".into()),
        space: None,
        source: None,
        request_id: None,
        channel: "api".into(),
        outcome: AuditOutcome::Success,
        detail: None,
    };
    let one = p50(runs, |_| async {
        state
            .store
            .append_audit(vec![entry()])
            .await
            .expect("append");
    })
    .await;
    let hundred = p50(runs, |_| async {
        state
            .store
            .append_audit((0..100).map(|_| entry()).collect())
            .await
            .expect("append");
    })
    .await;
    println!(
        "  workspace create: {:.2} ms, of which queueing its entry {:.3} ms = {:.2} % (goal < 5 %)",
        ms(create),
        ms(queue),
        100.0 * queue.as_secs_f64() / create.as_secs_f64()
    );
    println!(
        "  the writer's append: one entry {:.2} ms ({:.1} % of a create), 100 in one \
         transaction {:.2} ms",
        ms(one),
        100.0 * one.as_secs_f64() / create.as_secs_f64(),
        ms(hundred)
    );

    // The proxy's check of each connection: a signed-in caller's records nothing; a refused
    // token is recorded once per address and minute, and otherwise only counted.
    let allowed = WorkspaceAccessQuery {
        host: "bench-0".into(),
        port: None,
        user: Some(who.user.id),
        bearer: None,
        share: None,
        source: None,
    };
    let check = p50(runs, |_| async {
        access::workspace(&state, &allowed).await.expect("allowed");
    })
    .await;
    let refused_query = WorkspaceAccessQuery {
        user: None,
        bearer: Some(format!(
            "{}bench-not-a-token",
            warren_server::crypto::PAT_PREFIX
        )),
        ..allowed.clone()
    };
    let refused = p50(runs, |_| async {
        access::workspace(&state, &refused_query)
            .await
            .expect_err("refused");
    })
    .await;
    let recording = p50(runs, |_| async {
        audit::refused_credential(&state, "token.use", "token", "bench").await
    })
    .await;
    println!(
        "  the proxy's check per connection: signed in {:.2} ms (records nothing: 0 %); a \
         refused token {:.2} ms, of which recording it {:.3} ms = {:.2} % (goal < 5 %)",
        ms(check),
        ms(refused),
        ms(recording),
        100.0 * recording.as_secs_f64() / refused.as_secs_f64()
    );

    let day = chrono::DateTime::from_timestamp_millis(now - 3 * 86_400_000).unwrap();
    let queries: Vec<(&str, AuditQuery)> = vec![
        ("newest 100", AuditQuery::default()),
        (
            "by actor",
            AuditQuery {
                actor: Some("user17".into()),
                ..Default::default()
            },
        ),
        (
            "by target",
            AuditQuery {
                target: Some("ws1234".into()),
                ..Default::default()
            },
        ),
        (
            "terminals opened in a workspace one day",
            AuditQuery {
                target: Some("ws1234".into()),
                action: Some("terminal.open".into()),
                since: Some(day),
                until: Some(day + chrono::Duration::days(1)),
                ..Default::default()
            },
        ),
        (
            "an action kind in the last week",
            AuditQuery {
                action: Some("workspace.*".into()),
                since: Some(day - chrono::Duration::days(4)),
                ..Default::default()
            },
        ),
        (
            "by space",
            AuditQuery {
                space: Some("team7".into()),
                ..Default::default()
            },
        ),
        (
            "denied, none there (a full scan's worst case)",
            AuditQuery {
                outcome: Some("denied".into()),
                ..Default::default()
            },
        ),
    ];
    for (name, q) in &queries {
        let found = audit::list(&state, &who, q)
            .await
            .expect("list")
            .items
            .len();
        let took = p50(runs, |_| {
            let (state, who) = (state.clone(), who.clone());
            let q = q.clone();
            async move {
                audit::list(&state, &who, &q).await.expect("list");
            }
        })
        .await;
        println!(
            "  query {name}: {:.2} ms ({found} entries)  ratio {:.1}x  (goal < 100 ms)",
            ms(took),
            took.as_secs_f64() / baseline.as_secs_f64()
        );
    }
}

fn main() {
    support::on_each_database(|label, url, home| async move { bench(label, url, &home).await });
}
