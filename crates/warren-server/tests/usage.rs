//! Usage (issue 44, item 3), on SQLite and PostgreSQL, with the server's clock moved by
//! hand: the minute samples add up to what ran — hours, weighted hours, and the CPU, memory
//! and storage of each workspace's machine class — by workspace, user, space and class; a
//! stopped workspace stops counting; a long silence counts only the longest gap; each user
//! reads only their share; the CSV says the same; bad queries are refused by name.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_server::app::usage;

fn classes() -> Value {
    json!({
        "machine_classes": [
            {"name": "small", "cpu": "1", "memory": "2Gi", "storage": "10Gi"},
            {"name": "big", "cpu": "4", "memory": "8Gi", "storage": "20Gi", "weight": 3}
        ],
        "default_machine_class": "small"
    })
}

/// Rows of a report by key: (workspaces, running, weighted, cpu, memory, storage).
fn rows(b: &Value) -> Vec<(String, i64, [f64; 5])> {
    b["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("a report: {b}"))
        .iter()
        .map(|r| {
            let f = |k: &str| r[k].as_f64().unwrap();
            (
                r["key"].as_str().unwrap().to_owned(),
                r["workspaces"].as_i64().unwrap(),
                [
                    f("running_hours"),
                    f("weighted_hours"),
                    f("cpu_core_hours"),
                    f("memory_gib_hours"),
                    f("storage_gib_hours"),
                ],
            )
        })
        .collect()
}

fn close(got: &[(String, i64, [f64; 5])], want: &[(&str, i64, [f64; 5])], l: &str) {
    assert_eq!(got.len(), want.len(), "[{l}] {got:?}");
    for (g, w) in got.iter().zip(want) {
        assert_eq!((g.0.as_str(), g.1), (w.0, w.1), "[{l}] {got:?}");
        for (a, b) in g.2.iter().zip(w.2) {
            // The reports' own milliseconds (each report to the server moves the clock 1 ms).
            assert!((a - b).abs() < 1e-4, "[{l}] {} {:?} vs {:?}", g.0, g.2, w.2);
        }
    }
}

/// Creates the admin's workspace `adm` in space `team`.
async fn admins_workspace(s: &TestServer) -> (u16, Value) {
    let body = json!({"name": "adm", "space": "team", "devfile": WEB_DEVFILE});
    s.admin(Method::POST, "/api/v1/workspaces", Some(body))
        .await
}

/// Sets the budget of space `team` as an admin.
async fn budget(s: &TestServer, body: Value) -> (u16, Value) {
    s.admin(Method::PUT, "/api/v1/spaces/team/budget", Some(body))
        .await
}

async fn sample_every_5_minutes(s: &TestServer, times: usize) {
    for _ in 0..times {
        s.clock.advance_ms(5 * 60_000);
        usage::sample(&s.state).await.expect("sample");
    }
}

#[tokio::test]
async fn usage_adds_up_to_what_ran_and_each_reads_their_share() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", classes()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let olga = s.user("olga", &["api", "workspace"]).await;
        s.space_with("acme", "ann").await;
        s.member("acme", "olga", "owner").await;
        s.workspace(
            &ann,
            json!({"name": "a-small", "space": "acme", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.workspace(
            &bob,
            json!({"name": "b-big", "devfile": WEB_DEVFILE, "resources": {"class": "big"}}),
        )
        .await;
        s.workspace(&bob, json!({"name": "b-never", "devfile": WEB_DEVFILE}))
            .await;

        // The first sample starts the count; nothing ran before it.
        assert_eq!(usage::sample(&s.state).await.expect("sample"), 0, "[{l}]");
        s.reconcile_ok(
            agent,
            "full",
            json!([running("a-small", "1"), running("b-big", "1")]),
        )
        .await;
        sample_every_5_minutes(&s, 12).await;
        // b-big stops; a-small runs on for half an hour.
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/workspaces/b-big/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        s.reconcile_ok(
            agent,
            "full",
            json!([running("a-small", "1"), stopped("b-big", "2")]),
        )
        .await;
        sample_every_5_minutes(&s, 6).await;
        // Two hours when no server counted: only the longest gap (5 minutes) is.
        s.clock.advance_ms(2 * 3_600_000);
        usage::sample(&s.state).await.expect("sample");

        let a = 1.5 + 5.0 / 60.0;
        let small = [a, a, a, 2.0 * a, 10.0 * a];
        let big = [1.0, 3.0, 4.0, 8.0, 20.0];
        let report = |token: String, q: &'static str| {
            let s = &s;
            async move {
                let (st, b) = s.get(&token, &format!("/api/v1/usage?{q}")).await;
                assert_eq!(st, 200, "{q}: {b}");
                rows(&b)
            }
        };
        let admin = s.admin_token.clone();
        close(
            &report(admin.clone(), "by=workspace").await,
            &[("a-small", 1, small), ("b-big", 1, big)],
            l,
        );
        close(
            &report(admin.clone(), "by=user").await,
            &[("ann", 1, small), ("bob", 1, big)],
            l,
        );
        close(
            &report(admin.clone(), "").await,
            &[("acme", 1, small), ("users/bob", 1, big)],
            l,
        );
        close(
            &report(admin.clone(), "by=class").await,
            &[("small", 1, small), ("big", 1, big)],
            l,
        );
        close(
            &report(admin.clone(), "by=user&space=users").await,
            &[("bob", 1, big)],
            l,
        );
        // Each reads their own workspaces, and an owner what ran in their spaces.
        close(
            &report(bob.clone(), "by=workspace").await,
            &[("b-big", 1, big)],
            l,
        );
        close(
            &report(ann.clone(), "by=workspace").await,
            &[("a-small", 1, small)],
            l,
        );
        close(
            &report(olga.clone(), "by=user").await,
            &[("ann", 1, small)],
            l,
        );
        // A filter by space does not widen what one reads.
        close(&report(bob.clone(), "space=acme").await, &[], l);
        // A range before anything ran is empty.
        close(
            &report(admin.clone(), "until=2020-01-01T00:00:00Z").await,
            &[],
            l,
        );

        // The same as CSV.
        let resp = s
            .http
            .get(format!("{}/api/v1/usage?by=class&format=csv", s.base))
            .bearer_auth(&s.admin_token)
            .send()
            .await
            .expect("csv");
        assert_eq!(resp.status().as_u16(), 200, "[{l}]");
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/csv"),
            "[{l}]"
        );
        let csv = resp.text().await.expect("text");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "class,workspaces,running_hours,weighted_hours,cpu_core_hours,memory_gib_hours,storage_gib_hours,\
             cpu_used_core_hours,memory_used_gib_hours",
            "[{l}]"
        );
        assert!(
            lines[1].starts_with("small,1,1.583,1.583,1.583,3.167,15.833"),
            "[{l}] {csv}"
        );
        assert_eq!(
            lines[2], "big,1,1.000,3.000,4.000,8.000,20.000,0.000,0.000",
            "[{l}] {csv}"
        );

        // Bad queries are refused, naming the field.
        for (q, field) in [
            ("format=xml", "format"),
            ("by=team", "team"),
            (
                "since=2026-12-01T00:00:00Z&until=2026-11-01T00:00:00Z",
                "since",
            ),
            ("since=2000-01-01T00:00:00Z", "since"),
        ] {
            let (st, b) = s.get(&s.admin_token, &format!("/api/v1/usage?{q}")).await;
            assert_eq!(st, 400, "[{l}] {q}: {b}");
            assert!(msg(&b).contains(field), "[{l}] {q}: {b}");
        }

        // The web UI's page and its CSV show a signed-in user their share.
        let mut b = crate::ui::signed_in(&s, "bob", "password-123").await;
        let page = b.get("/usage?by=workspace").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.contains("b-big") && !page.body.contains("a-small"),
            "[{l}] {}",
            page.body
        );
        let page = b.get("/usage?by=workspace&since=someday").await;
        assert_eq!(page.status, 400, "[{l}] {}", page.body);
        assert!(page.body.contains("YYYY-MM-DD"), "[{l}] {}", page.body);
        let page = b.get("/usage.csv?by=class").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.starts_with("class,workspaces"),
            "[{l}] {}",
            page.body
        );
        assert!(
            page.body.contains("\nbig,1,1.000,3.000"),
            "[{l}] {}",
            page.body
        );
        assert!(!page.body.contains("small"), "[{l}] {}", page.body);
        s.stop().await;
    }
}

#[tokio::test]
async fn past_its_budget_nothing_in_a_space_starts_until_it_is_raised() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", classes()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        s.space_with("team", "ann").await;
        s.space("team/sub").await;
        // Only admins set budgets; the number is checked.
        let (st, b) = s
            .put(
                &ann,
                "/api/v1/spaces/team/budget",
                json!({"weighted_hours": 99}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = budget(&s, json!({"weighted_hours": -1})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        let (st, b) = budget(&s, json!({"weighted_hours": 1})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["remaining_hours"], 1.0, "[{l}] {b}");

        // An hour of one small workspace spends it.
        usage::sample(&s.state).await.expect("sample");
        s.workspace(
            &ann,
            json!({"name": "w1", "space": "team", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        sample_every_5_minutes(&s, 12).await;
        let (st, b) = s.get(&ann, "/api/v1/spaces/team%2Fsub/budget").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b[0]["space"], "team", "[{l}] the budget above applies: {b}");
        assert!(b[0]["used_hours"].as_f64().unwrap() >= 1.0, "[{l}] {b}");
        assert_eq!(b[0]["remaining_hours"], 0.0, "[{l}] {b}");

        // Nothing new starts in the space or below it, and what stops stays stopped.
        for space in ["team", "team/sub"] {
            let (st, b) = s
                .post(
                    &ann,
                    "/api/v1/workspaces",
                    json!({"name": format!("more-{}", space.len()), "space": space, "devfile": WEB_DEVFILE}),
                )
                .await;
            assert_eq!(st, 403, "[{l}] {space}: {b}");
            assert_eq!(b["error"]["code"], "budget_exhausted", "[{l}] {b}");
            assert!(
                msg(&b).contains("\"team\" has used its budget of 1 weighted hours"),
                "[{l}] {b}"
            );
        }
        let desired = |d: &'static str| {
            let s = &s;
            let ann = ann.clone();
            async move {
                s.put(
                    &ann,
                    "/api/v1/workspaces/w1/desired_state",
                    json!({ "desired_state": d }),
                )
                .await
            }
        };
        assert_eq!(desired("Stopped").await.0, 200, "[{l}]");
        s.reconcile_ok(agent, "full", json!([stopped("w1", "2")]))
            .await;
        let (st, b) = desired("Running").await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "budget_exhausted", "[{l}] {b}");
        // The stopped page's button too.
        let (_, me) = s.get(&ann, "/api/v1/users/me").await;
        let (_, w) = s.get(&ann, "/api/v1/workspaces/w1").await;
        let (st, b) = s
            .post(
                &proxy_jwt(),
                "/internal/workspaces/start",
                json!({"workspace_id": w["id"], "user_id": me["id"]}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        // Admins are not exempt unless the budget says so.
        let (st, b) = admins_workspace(&s).await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = budget(&s, json!({"weighted_hours": 1, "admins_exempt": true})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = admins_workspace(&s).await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(desired("Running").await.0, 403, "[{l}] ann is no admin");

        // Raised, it starts again; removed, nothing limits it.
        let (st, b) = budget(&s, json!({"weighted_hours": 10})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(desired("Running").await.0, 200, "[{l}]");
        let (st, _) = s
            .admin(Method::DELETE, "/api/v1/spaces/team/budget", None)
            .await;
        assert_eq!(st, 204, "[{l}]");
        let (st, b) = s.get(&ann, "/api/v1/spaces/team/budget").await;
        assert_eq!((st, b), (200, json!([])), "[{l}]");
        let (_, log) = s
            .admin(Method::GET, "/api/v1/audit?action=space.*&limit=1000", None)
            .await;
        let budget_changes = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["action"].as_str().unwrap().ends_with("_budget"))
            .count();
        assert_eq!(budget_changes, 6, "[{l}] the refused ones too: {log:#}");
        s.stop().await;
    }
}

/// Moves the clock a day into the next month when the month ends within six hours: what a
/// test counts this month must not cross into the next.
fn away_from_a_month_end(s: &TestServer) {
    use warren_server::clock::Clock;
    let now = s.clock.now_ms();
    let (_, next) = warren_server::app::budgets::month_of(now);
    if next.timestamp_millis() - now < 6 * 3_600_000 {
        s.clock.set_ms(next.timestamp_millis() + 86_400_000);
    }
}

#[tokio::test]
async fn past_its_budget_what_runs_is_warned_of_then_stopped() {
    use warren_server::app::{budgets, lifecycle};
    use warren_server::clock::Clock;
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        away_from_a_month_end(&s);
        let agent = s.agent("a1", classes()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        s.space_with("team", "ann").await;
        let (st, b) = budget(&s, json!({"weighted_hours": 1, "admins_exempt": true})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        usage::sample(&s.state).await.expect("sample");
        s.workspace(
            &ann,
            json!({"name": "w1", "space": "team", "devfile": WEB_DEVFILE}),
        )
        .await;
        let (st, b) = admins_workspace(&s).await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.reconcile_ok(
            agent,
            "full",
            json!([running("w1", "1"), running("adm", "1")]),
        )
        .await;
        let server = &s;
        let planned = |name: &'static str| async move {
            let (st, w) = server
                .admin(Method::GET, &format!("/api/v1/workspaces/{name}"), None)
                .await;
            assert_eq!(st, 200, "[{l}] {w}");
            (w["desired_state"].clone(), w["planned"].clone())
        };
        // Within the budget, nothing is planned for it.
        budgets::mark_spent(&s.state).await.expect("budgets");
        let (_, p) = planned("w1").await;
        assert!(!p.to_string().contains("budget"), "[{l}] {p}");

        // Half an hour of two workspaces spends the hour: the sampler marks it, and w1's next
        // change is its stop, half an hour on, told by the API and to its terminals.
        sample_every_5_minutes(&s, 6).await;
        budgets::mark_spent(&s.state).await.expect("budgets");
        let spent_at = s.clock.now_ms();
        let (_, p) = planned("w1").await;
        assert_eq!(p["desired_state"], "Stopped", "[{l}] {p}");
        assert!(
            p["reason"].as_str().unwrap().contains("budget"),
            "[{l}] {p}"
        );
        let at = chrono::DateTime::parse_from_rfc3339(p["at"].as_str().unwrap()).unwrap();
        assert_eq!(
            at.timestamp_millis(),
            spent_at + budgets::GRACE_MS,
            "[{l}] {p}"
        );
        let (_, me) = s.get(&ann, "/api/v1/users/me").await;
        let (st, a) = s
            .get(
                &proxy_jwt(),
                &format!(
                    "/internal/workspaces/access?host=w1&port=8080&user={}",
                    me["id"]
                ),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {a}");
        assert_eq!(
            a["planned_stop"]["at_ms"],
            spent_at + budgets::GRACE_MS,
            "[{l}] {a}"
        );
        // The admin's workspace is exempt: the budget plans nothing for it.
        let (_, p) = planned("adm").await;
        assert!(!p.to_string().contains("budget"), "[{l}] {p}");

        // Marking again keeps the time; before it, the timers leave w1 running.
        sample_every_5_minutes(&s, 5).await;
        budgets::mark_spent(&s.state).await.expect("budgets");
        lifecycle::run_timers_once(&s.state).await.expect("timers");
        assert_eq!(planned("w1").await.0, "Running", "[{l}]");
        s.clock.advance_ms(5 * 60_000);
        lifecycle::run_timers_once(&s.state).await.expect("timers");
        assert_eq!(planned("w1").await.0, "Stopped", "[{l}]");
        assert_eq!(planned("adm").await.0, "Running", "[{l}] exempt");
        lifecycle::run_timers_once(&s.state).await.expect("timers");

        // Once each: the mark, and the stop, by the system.
        let (_, log) = s.admin(Method::GET, "/api/v1/audit?limit=1000", None).await;
        let items = log["items"].as_array().unwrap();
        let marks: Vec<_> = items
            .iter()
            .filter(|e| e["action"] == "space.budget_spent")
            .collect();
        assert_eq!(marks.len(), 1, "[{l}] {log:#}");
        let stops: Vec<_> = items
            .iter()
            .filter(|e| e["action"] == "workspace.stop" && e["target"] == "w1")
            .collect();
        assert_eq!(stops.len(), 1, "[{l}] {log:#}");
        assert!(
            stops[0]["detail"].as_str().unwrap().contains("budget"),
            "[{l}] {log:#}"
        );

        // Raised, the mark is lifted at once; a new month's hours start from nothing.
        let (st, b) = budget(&s, json!({"weighted_hours": 5, "admins_exempt": true})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = s
            .put(
                &ann,
                "/api/v1/workspaces/w1/desired_state",
                json!({"desired_state": "Running"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (_, p) = planned("w1").await;
        assert!(!p.to_string().contains("budget"), "[{l}] {p}");
        s.stop().await;
    }
}

#[tokio::test]
async fn what_agents_measure_adds_to_their_own_workspaces_usage() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let a1 = s.agent("a1", classes()).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        s.workspace(&ann, json!({"name": "w1", "devfile": WEB_DEVFILE}))
            .await;
        s.reconcile_ok(a1, "full", json!([running("w1", "1")]))
            .await;
        let a2 = s.agent("a2", classes()).await;
        let server = &s;
        let used = |agent: i64, name: &'static str, cpu_ms: u64, memory_mib_s: u64| async move {
            let (st, b) = server
                .reconcile(
                    agent,
                    json!({"update_type": "partial", "workspace_agent_infos": [],
                           "used": [{"name": name, "namespace": "whatever",
                                     "cpu_ms": cpu_ms, "memory_mib_s": memory_mib_s}]}),
                )
                .await;
            assert_eq!(st, 201, "[{l}] {b}");
        };
        // Half a core-hour and a GiB-hour, in two reports; another agent's word about w1,
        // and one about a workspace that does not exist, count nothing.
        used(a1, "w1", 900_000, 1024 * 1800).await;
        used(a1, "w1", 900_000, 1024 * 1800).await;
        used(a2, "w1", 3_600_000, 1024 * 3600).await;
        used(a1, "nope", 3_600_000, 1024 * 3600).await;
        let (st, b) = s.get(&ann, "/api/v1/usage?by=workspace").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["rows"].as_array().unwrap().len(), 1, "[{l}] {b}");
        let row = &b["rows"][0];
        assert_eq!(row["key"], "w1", "[{l}] {b}");
        assert_eq!(row["cpu_used_core_hours"], 0.5, "[{l}] {b}");
        assert_eq!(row["memory_used_gib_hours"], 1.0, "[{l}] {b}");
        // What it asked for is the sampler's, not the agent's.
        assert_eq!(row["cpu_core_hours"], 0.0, "[{l}] {b}");
        // And on /metrics, by space and class.
        let text = s.http.get(format!("{}/metrics", s.base)).send().await;
        let text = text.expect("metrics").text().await.expect("metrics text");
        for name in [
            "warren_usage_cpu_used_milliseconds_total",
            "warren_usage_memory_used_mib_seconds_total",
        ] {
            assert!(text.contains(name), "[{l}] no {name} in {text}");
        }

        // A claim past what one report can hold counts up to that (1,024 cores for ten
        // minutes); a malformed one is refused whole.
        used(a1, "w1", u64::MAX, 0).await;
        let (_, b) = s.get(&ann, "/api/v1/usage?by=workspace").await;
        let cpu = b["rows"][0]["cpu_used_core_hours"].as_f64().unwrap();
        assert!((cpu - (0.5 + 1024.0 / 6.0)).abs() < 1e-6, "[{l}] {b}");
        let (st, b) = s
            .reconcile(
                a1,
                json!({"update_type": "partial", "workspace_agent_infos": [],
                       "used": [{"name": "w1", "namespace": "x", "cpu_ms": -1, "memory_mib_s": 0}]}),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn the_usage_page_shows_a_spaces_budgets_and_admins_set_them_there() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.user("ann", &["api", "workspace"]).await;
        s.space_with("team", "ann").await;
        s.space("team/sub").await;
        let mut admin = crate::ui::signed_in(&s, "admin", &s.admin_password).await;
        let page = admin.get("/usage?space=team%2Fsub").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.contains("No budget applies"),
            "[{l}] {}",
            page.body
        );
        let csrf = crate::ui::csrf_of(&page);
        let form = |pairs: &[(&str, &str)]| crate::ui::form_with(&csrf, pairs);
        // A number is asked for, by name.
        let p = admin
            .post_form(
                "/usage/budget",
                &form(&[("space", "team"), ("hours", "lots")]),
            )
            .await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        assert!(p.body.contains("whole number of hours"), "[{l}] {}", p.body);
        let p = admin
            .post_form(
                "/usage/budget",
                &form(&[("space", "team"), ("hours", "40"), ("admins_exempt", "1")]),
            )
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, b) = s
            .admin(Method::GET, "/api/v1/spaces/team/budget", None)
            .await;
        assert_eq!(b[0]["weighted_hours"], 40, "[{l}] {b}");
        assert_eq!(b[0]["admins_exempt"], true, "[{l}] {b}");

        // Ann sees what remains of the budget above her space, without the admins' forms.
        let mut ann = crate::ui::signed_in(&s, "ann", "password-123").await;
        let page = ann.get("/usage?space=team%2Fsub").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.contains("<th scope=\"row\">team</th><td>40</td>"),
            "[{l}] {}",
            page.body
        );
        assert!(!page.body.contains("/usage/budget"), "[{l}] {}", page.body);
        let csrf_ann = crate::ui::csrf_of(&page);
        let p = ann
            .post_form(
                "/usage/budget",
                &crate::ui::form_with(&csrf_ann, &[("space", "team"), ("hours", "9999")]),
            )
            .await;
        assert_eq!(p.status, 403, "[{l}] {}", p.body);

        // Removed from the page.
        let p = admin
            .post_form("/usage/budget/remove", &form(&[("space", "team")]))
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let (_, b) = s
            .admin(Method::GET, "/api/v1/spaces/team/budget", None)
            .await;
        assert_eq!(b, json!([]), "[{l}]");
        s.stop().await;
    }
}
