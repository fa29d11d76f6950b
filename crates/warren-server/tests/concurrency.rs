//! Concurrent writes to one workspace never lose one (optimistic `version`), on both databases.

use crate::common;
use warren_server::store::workspaces::ChangedBy;

use common::*;
use reqwest::Method;
use serde_json::json;
use std::sync::Arc;
use warren_types::DesiredState;

/// Many writers toggle one workspace's desired state with read-modify-write while the agent
/// reconciles; an even number of toggles must leave it where it started.
#[tokio::test]
async fn parallel_read_modify_writes_all_land() {
    for db in databases() {
        let s = Arc::new(TestServer::start(&db).await);
        let agent = s.agent("a1", json!({})).await;
        let w = s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        let id = warren_types::WorkspaceId(w["id"].as_i64().unwrap());
        const WRITERS: usize = 8;
        const TOGGLES: usize = 6;
        let mut tasks = vec![];
        for _ in 0..WRITERS {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                for _ in 0..TOGGLES {
                    loop {
                        let row = s.state.store.workspace_by_id(id).await.unwrap().unwrap();
                        let next = match row.desired_state {
                            DesiredState::Running => DesiredState::Stopped,
                            _ => DesiredState::Running,
                        };
                        let now = s.state.clock.now_ms();
                        if s.state
                            .store
                            .set_desired_state(id, row.version, next, now, ChangedBy::Other)
                            .await
                            .unwrap()
                            .is_some()
                        {
                            break;
                        }
                    }
                }
            }));
        }
        // The agent keeps reporting meanwhile (its writes bump the version too).
        let reconciler = {
            let s = s.clone();
            tokio::spawn(async move {
                for i in 0..20 {
                    let report = if i % 2 == 0 {
                        running("w1", &i.to_string())
                    } else {
                        stopped("w1", &i.to_string())
                    };
                    s.reconcile_ok(agent, "partial", json!([report])).await;
                }
            })
        };
        for t in tasks {
            t.await.unwrap();
        }
        reconciler.await.unwrap();
        let row = s.state.store.workspace_by_id(id).await.unwrap().unwrap();
        assert_eq!(
            row.desired_state,
            DesiredState::Running,
            "[{}] {} toggles, none lost",
            s.label,
            WRITERS * TOGGLES
        );
        match Arc::try_unwrap(s) {
            Ok(s) => s.stop().await,
            Err(_) => panic!("server still shared"),
        }
    }
}

/// A resize and a stop racing through the API both take effect.
#[tokio::test]
async fn parallel_api_requests_both_take_effect() {
    for db in databases() {
        let s = Arc::new(TestServer::start(&db).await);
        s.agent("a1", json!({})).await;
        for round in 0..6 {
            let name = format!("w{round}");
            s.workspace(&s.admin_token, json!({"name": name})).await;
            let (rp, dp) = (
                format!("/api/v1/workspaces/{name}/resources"),
                format!("/api/v1/workspaces/{name}/desired_state"),
            );
            let (a, b) = tokio::join!(
                s.admin(Method::PUT, &rp, Some(json!({"resources": {"cpu": "2"}}))),
                s.admin(Method::PUT, &dp, Some(json!({"desired_state": "Stopped"}))),
            );
            assert_eq!((a.0, b.0), (200, 200), "[{}] {a:?} {b:?}", s.label);
            let (_, w) = s
                .admin(Method::GET, &format!("/api/v1/workspaces/{name}"), None)
                .await;
            assert_eq!(w["resources"]["cpu"], "2", "[{}] resize kept: {w}", s.label);
            // Stop after resize → Stopped; resize after stop keeps Stopped. Never RestartRequested
            // left over from a resize that overwrote the stop.
            assert_eq!(
                w["desired_state"], "Stopped",
                "[{}] stop kept: {w}",
                s.label
            );
        }
        match Arc::try_unwrap(s) {
            Ok(s) => s.stop().await,
            Err(_) => panic!("server still shared"),
        }
    }
}

/// A desired-state change committed while a reconcile is between reading the rows it sends
/// and marking them sent stays flagged for the next answer. (PostgreSQL only: SQLite's
/// reconcile holds the write lock throughout, so no write can commit in between.) Found by
/// the high-availability test, where a change's only wake-up is the signal.
#[tokio::test]
async fn a_change_committed_during_a_reconcile_is_not_marked_sent() {
    for db in databases() {
        if matches!(db, DbChoice::Sqlite) {
            continue;
        }
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let agent_id = warren_types::AgentId(agent);
        let sent = s.workspace(&s.admin_token, json!({"name": "sent"})).await;
        let late = s.workspace(&s.admin_token, json!({"name": "late"})).await;
        // Both are answered once, so neither waits to be sent.
        s.reconcile_ok(agent, "full", json!([])).await;
        assert!(!s.state.store.has_pending_response(agent_id).await.unwrap());
        let set = |w: &serde_json::Value| {
            let id = warren_types::WorkspaceId(w["id"].as_i64().unwrap());
            let store = s.state.store.clone();
            let now = s.state.clock.now_ms();
            async move {
                let row = store.workspace_by_id(id).await.unwrap().unwrap();
                store
                    .set_desired_state(
                        id,
                        row.version,
                        DesiredState::Stopped,
                        now,
                        ChangedBy::Other,
                    )
                    .await
                    .unwrap()
                    .expect("written");
            }
        };
        set(&sent).await;

        let mut tx = s.state.store.begin_reconcile().await.unwrap();
        let rows = tx
            .response_rows(
                agent_id,
                warren_server::store::reconcile::Selection::Partial { reported: &[] },
            )
            .await
            .unwrap();
        assert_eq!(
            rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["sent"]
        );
        // Another request commits a change now, before the reconcile marks what it sent.
        set(&late).await;
        let ids: Vec<_> = rows.iter().map(|r| r.id).collect();
        tx.mark_responded(agent_id, &ids, s.state.clock.now_ms())
            .await
            .unwrap();
        tx.commit().await.unwrap();

        let next = s.reconcile_ok(agent, "partial", json!([])).await;
        assert!(
            next.contains_key("late"),
            "[{}] the late change is in the next answer: {next:?}",
            s.label
        );
        assert!(!next.contains_key("sent"), "[{}] {next:?}", s.label);
        s.stop().await;
    }
}
