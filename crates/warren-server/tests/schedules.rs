//! When a workspace will be stopped, and working hours (issue 41, item 7), on SQLite and
//! (when configured) PostgreSQL: the API tells the next timer's change and why (the agent's
//! limits, the idle timeout, the owner's working hours) as the timers then make it; working
//! hours stop running workspaces in the evening and start again in the morning only those
//! they stopped, after the agent's limits; bad working hours are refused by name.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_server::app::lifecycle::run_timers_once;
use warren_server::clock::Clock;

async fn show(s: &TestServer, token: &str, name: &str) -> Value {
    let (st, b) = s
        .call(
            Method::GET,
            &format!("/api/v1/workspaces/{name}"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(st, 200, "[{}] {b}", s.label);
    b
}

/// Unix ms of the last midnight (UTC) at or before `ms`.
fn midnight(ms: i64) -> i64 {
    ms - ms.rem_euclid(86_400_000)
}

#[tokio::test]
async fn the_next_stop_is_told_and_working_hours_stop_and_start_workspaces() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({"lifecycle": {"idle_timeout_minutes": 30}}))
            .await;
        s.agent("a2", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;

        // Bad working hours are refused, naming what is wrong.
        for (body, field) in [
            (
                json!({"timezone": "Mars/Olympus", "days": ["mon"], "stop": "18:00"}),
                "timezone",
            ),
            (
                json!({"timezone": "UTC", "days": [], "stop": "18:00"}),
                "days",
            ),
            (
                json!({"timezone": "UTC", "days": ["mon"], "stop": "6pm"}),
                "stop",
            ),
            (
                json!({"timezone": "UTC", "days": ["mon"], "stop": "18:00", "start": "18:00"}),
                "start",
            ),
        ] {
            let (st, b) = s
                .put(&alice, "/api/v1/users/me/working-hours", body.clone())
                .await;
            assert_eq!(st, 400, "[{l}] {body}: {b}");
            assert!(
                msg(&b).starts_with(&format!("{field}: ")),
                "[{l}] {body}: {b}"
            );
        }
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/users/me/working-hours",
                json!({"timezone": "UTC", "days": ["funday"], "stop": "18:00"}),
            )
            .await;
        assert!((400..500).contains(&st), "[{l}] {b}");

        // Stops at 18:00 UTC every day, starts again at 08:00.
        let hours = json!({"timezone": "UTC", "days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                           "start": "08:00", "stop": "18:00"});
        let (st, me) = s
            .put(&alice, "/api/v1/users/me/working-hours", hours.clone())
            .await;
        assert_eq!(st, 200, "[{l}] {me}");
        assert_eq!(me["working_hours"], hours, "[{l}] {me}");

        // The clock at 09:00 of a day: unused, alice's workspace would stop first by the idle
        // timeout, 30 minutes after its start.
        let day = midnight(s.clock.now_ms()) + 86_400_000;
        s.clock.advance_ms(day + 9 * 3_600_000 - s.clock.now_ms());
        s.workspace(
            &alice,
            json!({"name": "aw", "devfile": WEB_DEVFILE, "agent": "a1"}),
        )
        .await;
        s.workspace(
            &bob,
            json!({"name": "bw", "devfile": WEB_DEVFILE, "agent": "a2"}),
        )
        .await;
        let w = show(&s, &alice, "aw").await;
        let planned = &w["planned"];
        assert_eq!(planned["desired_state"], "Stopped", "[{l}] {w}");
        assert_eq!(
            planned["postponed_by_use"], true,
            "[{l}] the idle timeout first: {w}"
        );
        assert!(
            msg_of(&planned["reason"]).contains("unused for 30 minutes"),
            "[{l}] {w}"
        );

        // Used all day (the proxy reports activity): the working hours' stop is next.
        let wid = w["id"].as_i64().unwrap();
        let active = |at: i64| {
            let s = &s;
            async move {
                let (st, b) = s
                    .post(
                        &proxy_jwt(),
                        "/internal/workspaces/activity",
                        json!({"workspaces": [{"workspace_id": wid, "last_activity_ms": at}]}),
                    )
                    .await;
                assert_eq!(st, 204, "{b}");
            }
        };
        s.clock
            .advance_ms(17 * 3_600_000 + 45 * 60_000 - 9 * 3_600_000);
        active(s.clock.now_ms()).await;
        let w = show(&s, &alice, "aw").await;
        let at = chrono::DateTime::parse_from_rfc3339(w["planned"]["at"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
        assert_eq!(at, day + 18 * 3_600_000, "[{l}] {w}");
        assert!(
            msg_of(&w["planned"]["reason"]).contains("working hours"),
            "[{l}] {w}"
        );
        run_timers_once(&s.state).await.unwrap();
        assert_eq!(
            show(&s, &alice, "aw").await["desired_state"],
            "Running",
            "[{l}]"
        );

        // 18:00: alice's stops (she has working hours), bob's runs on (he has none).
        s.clock.advance_ms(15 * 60_000);
        active(s.clock.now_ms()).await;
        run_timers_once(&s.state).await.unwrap();
        assert_eq!(
            show(&s, &alice, "aw").await["desired_state"],
            "Stopped",
            "[{l}]"
        );
        assert_eq!(
            show(&s, &bob, "bw").await["desired_state"],
            "Running",
            "[{l}]"
        );

        // Her second workspace, which she stopped herself, stays stopped in the morning;
        // the one the working hours stopped starts at 08:00.
        s.workspace(
            &alice,
            json!({"name": "aw2", "devfile": WEB_DEVFILE, "agent": "a1"}),
        )
        .await;
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/aw2/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        s.clock.advance_ms(13 * 3_600_000 + 59 * 60_000);
        run_timers_once(&s.state).await.unwrap();
        assert_eq!(
            show(&s, &alice, "aw").await["desired_state"],
            "Stopped",
            "[{l}] 07:59"
        );
        s.clock.advance_ms(60_000);
        run_timers_once(&s.state).await.unwrap();
        assert_eq!(
            show(&s, &alice, "aw").await["desired_state"],
            "Running",
            "[{l}] 08:00"
        );
        assert_eq!(
            show(&s, &alice, "aw2").await["desired_state"],
            "Stopped",
            "[{l}]"
        );
        // A stopped workspace is told when the agent's limit terminates it.
        let w = show(&s, &alice, "aw2").await;
        assert_eq!(w["planned"]["desired_state"], "Terminated", "[{l}] {w}");

        // Cleared: nothing more of them.
        let (st, me) = s
            .call(
                Method::DELETE,
                "/api/v1/users/me/working-hours",
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(st, 200, "[{l}] {me}");
        assert!(me.get("working_hours").is_none(), "[{l}] {me}");
        s.stop().await;
    }
}

fn msg_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// The web UI: working hours set on the account page (a bad time shown beside the form), the
/// workspace page's banner of the next stop.
#[tokio::test]
async fn the_web_ui_sets_working_hours_and_shows_the_next_stop() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        s.workspace(&alice, json!({"name": "aw", "devfile": WEB_DEVFILE}))
            .await;
        let mut b = crate::ui::signed_in(&s, "alice", "password-123").await;
        let page = b.get("/account").await;
        assert!(page.body.contains("Working hours"), "[{l}] {}", page.body);
        let csrf = crate::ui::csrf_of(&page);
        let form = |stop: &str| {
            vec![
                ("day".to_owned(), "mon".to_owned()),
                ("day".to_owned(), "fri".to_owned()),
                ("start".to_owned(), "08:30".to_owned()),
                ("stop".to_owned(), stop.to_owned()),
                ("timezone".to_owned(), "Europe/Paris".to_owned()),
                ("csrf_token".to_owned(), csrf.clone()),
            ]
        };
        let p = b.post_form("/account/working-hours", &form("6pm")).await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        assert!(p.body.contains("is not a time of day"), "[{l}] {}", p.body);
        let p = b.post_form("/account/working-hours", &form("18:00")).await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, me) = s.get(&alice, "/api/v1/users/me").await;
        assert_eq!(
            me["working_hours"],
            json!({"timezone": "Europe/Paris", "days": ["mon", "fri"], "start": "08:30", "stop": "18:00"}),
            "[{l}] {me}"
        );
        let page = b.get("/account").await;
        assert!(
            page.body.contains("mon,fri 08:30–18:00 Europe/Paris"),
            "[{l}] {}",
            page.body
        );
        // The workspace page tells its next stop (the agent's 36 hours, or the working
        // hours' next end of day, whichever comes first).
        let page = b.get("/workspaces/aw").await;
        let banner = page
            .body
            .split("id=\"planned\"")
            .nth(1)
            .unwrap_or_else(|| panic!("[{l}] a banner: {}", page.body));
        assert!(banner.contains("Stops "), "[{l}] {banner}");
        s.stop().await;
    }
}
