//! The audit log on SQLite and PostgreSQL: every audited action recorded exactly once with its
//! actor, credential, target, source address, request id and outcome; refused sign-ins and
//! tokens recorded (bad tokens once per source and minute); the filters and pages of the list;
//! admins reading everything and owners only their spaces; the JSON-lines stream matching the
//! database; the database refusing updates and early deletes; a tampered entry found by the
//! check, through the API and straight from the database; retention keeping what is left
//! verifiable.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_server::ServerConfig;

/// Every entry matching `query`, newest first, as the admin reads them.
async fn entries(s: &TestServer, query: &str) -> Vec<Value> {
    let (st, b) = s
        .admin(Method::GET, &format!("/api/v1/audit?{query}"), None)
        .await;
    assert_eq!(st, 200, "[{}] {query}: {b}", s.label);
    b["items"].as_array().expect("items").clone()
}

fn actions(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|e| e["action"].as_str().unwrap_or("?").to_owned())
        .collect()
}

async fn raw(url: &str) -> sqlx::AnyConnection {
    sqlx::any::install_default_drivers();
    <sqlx::AnyConnection as sqlx::Connection>::connect(url)
        .await
        .expect("connect to the test database")
}

#[tokio::test]
async fn every_action_is_recorded_once_with_who_what_where_and_how_it_ended() {
    for db in databases() {
        let stream_dir = tempfile::tempdir().expect("tempdir");
        let stream = stream_dir.path().join("audit.jsonl");
        let file = stream.clone();
        let syslog = tokio::net::UdpSocket::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let syslog_at = format!("udp://{}", syslog.local_addr().unwrap());
        let s = TestServer::start_with(&db, move |c| {
            c.audit_file = Some(file);
            c.audit_syslog = Some(syslog_at);
        })
        .await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let eve = s.user("eve", &["api", "workspace"]).await;

        // A sign-in with a wrong password: denied, by nobody known, naming the account tried.
        let (st, _) = s
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": "ann", "password": "not-her-password"})),
            )
            .await;
        assert_eq!(st, 401, "[{l}]");
        // Bad tokens: denied, recorded once per source and minute.
        for _ in 0..3 {
            let (st, _) = s.get("wrn_pat_not-a-real-token", "/api/v1/users/me").await;
            assert_eq!(st, 401, "[{l}]");
        }

        // Ann's workspace, created under a request id of hers, stopped, started, deleted.
        let resp = s
            .http
            .post(format!("{}/api/v1/workspaces", s.base))
            .bearer_auth(&ann)
            .header("x-request-id", "req-ann-create-1")
            .json(&json!({"name": "ann-ws"}))
            .send()
            .await
            .expect("create");
        assert_eq!(resp.status().as_u16(), 201, "[{l}]");
        for desired in ["Stopped", "Running"] {
            let (st, b) = s
                .put(
                    &ann,
                    "/api/v1/workspaces/ann-ws/desired_state",
                    json!({ "desired_state": desired }),
                )
                .await;
            assert_eq!(st, 200, "[{l}] {b}");
        }
        // Eve may not even see it: a failure, recorded as hers.
        let (st, _) = s
            .put(
                &eve,
                "/api/v1/workspaces/ann-ws/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 404, "[{l}]");
        let (st, b) = s
            .post(
                &ann,
                "/api/v1/users/me/tokens",
                json!({"name": "ci", "scopes": ["read_api"]}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        let token_id = b["token"]["id"].as_i64().expect("token id");
        let (st, _) = s
            .delete(&ann, &format!("/api/v1/users/me/tokens/{token_id}"))
            .await;
        assert_eq!(st, 204, "[{l}]");
        let (st, _) = s.delete(&ann, "/api/v1/workspaces/ann-ws").await;
        assert_eq!(st, 200, "[{l}]");

        let all = entries(&s, "limit=1000").await;
        let expected = [
            "workspace.delete",
            "token.revoke",
            "token.create",
            "workspace.stop",
            "workspace.start",
            "workspace.stop",
            "workspace.create",
            "token.use",
            "session.sign_in",
            "session.sign_in",
            "user.create",
            "session.sign_in",
            "user.create",
            "agent.create",
            "session.sign_in",
        ];
        assert_eq!(actions(&all), expected, "[{l}] {all:#?}");
        // Numbered from 1 without gaps, newest first.
        let seqs: Vec<i64> = all.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
        assert_eq!(
            seqs,
            (1..=expected.len() as i64).rev().collect::<Vec<_>>(),
            "[{l}]"
        );

        let create = &all[6];
        assert_eq!(create["actor"], "ann", "[{l}] {create}");
        assert_eq!(create["actor_kind"], "user");
        assert!(
            create["credential"].as_str().unwrap().starts_with("token "),
            "[{l}] {create}"
        );
        assert_eq!(create["target_kind"], "workspace");
        assert_eq!(create["target"], "ann-ws");
        assert_eq!(create["space"], "users/ann");
        assert_eq!(create["source"], "127.0.0.1");
        assert_eq!(create["request_id"], "req-ann-create-1");
        assert_eq!(create["channel"], "api");
        assert_eq!(create["outcome"], "success");

        let eves = &all[3];
        assert_eq!(
            (&eves["actor"], &eves["outcome"], &eves["target"]),
            (&json!("eve"), &json!("failure"), &json!("ann-ws")),
            "[{l}] {eves}"
        );
        assert!(
            eves["detail"].as_str().unwrap().contains("not found"),
            "[{l}] {eves}"
        );
        let bad_token = &all[7];
        assert_eq!(bad_token["actor_kind"], "anonymous", "[{l}] {bad_token}");
        assert_eq!(bad_token["outcome"], "denied");
        let wrong_password = &all[8];
        assert_eq!(
            (
                &wrong_password["actor_kind"],
                &wrong_password["actor"],
                &wrong_password["outcome"]
            ),
            (&json!("anonymous"), &json!("ann"), &json!("denied")),
            "[{l}] {wrong_password}"
        );
        assert_eq!(wrong_password["credential"], "password");
        let signed_in = &all[9];
        assert_eq!(
            (&signed_in["actor"], &signed_in["outcome"]),
            (&json!("eve"), &json!("success")),
            "[{l}] {signed_in}"
        );
        // No secret is ever recorded.
        let text = serde_json::to_string(&all).unwrap();
        assert!(
            !text.contains("not-her-password") && !text.contains(&ann),
            "[{l}]"
        );

        // Filters: actor, action kinds, target, outcome, time, and pages.
        let anns = entries(&s, "actor=ann").await;
        assert!(anns.iter().all(|e| e["actor"] == "ann"), "[{l}] {anns:#?}");
        assert_eq!(anns.len(), 8, "[{l}] {anns:#?}");
        let ws = entries(&s, "action=workspace.*&target=ann-ws").await;
        assert_eq!(ws.len(), 5, "[{l}] {ws:#?}");
        let denied = entries(&s, "outcome=denied").await;
        assert_eq!(actions(&denied), ["token.use", "session.sign_in"], "[{l}]");
        let future = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
        let none = entries(&s, &format!("since={}", urlencoding(&future))).await;
        assert!(none.is_empty(), "[{l}] {none:#?}");
        let (st, page) = s.admin(Method::GET, "/api/v1/audit?limit=4", None).await;
        assert_eq!(st, 200);
        let cursor = page["next_cursor"]
            .as_str()
            .expect("a next page")
            .to_owned();
        let (_, next) = s
            .admin(
                Method::GET,
                &format!("/api/v1/audit?limit=4&cursor={cursor}"),
                None,
            )
            .await;
        assert_eq!(next["items"][0]["seq"], all[4]["seq"], "[{l}] {next}");
        let (st, b) = s.admin(Method::GET, "/api/v1/audit?limit=0", None).await;
        assert_eq!(st, 400, "[{l}] {b}");
        let (st, b) = s
            .admin(Method::GET, "/api/v1/audit?outcome=maybe", None)
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("outcome"), "[{l}] {b}");

        // Owners read what happened in their spaces, and nothing else.
        let (st, b) = s.get(&ann, "/api/v1/audit?limit=1000").await;
        assert_eq!(st, 200, "[{l}] {b}");
        let hers = b["items"].as_array().unwrap();
        assert!(!hers.is_empty(), "[{l}]");
        assert!(hers.iter().all(|e| e["space"] == "users/ann"), "[{l}] {b}");
        let (st, b) = s.get(&eve, "/api/v1/audit?space=users/ann").await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s.post(&ann, "/api/v1/audit/verify", json!({})).await;
        assert_eq!(st, 403, "[{l}] {b}");

        // The stream holds the same entries, chained the same way.
        let lines = std::fs::read_to_string(&stream).expect("audit stream");
        let streamed: Vec<warren_types::api::AuditEntry> = lines
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert_eq!(streamed.len(), expected.len(), "[{l}] {lines}");
        warren_types::api::verify_chain(warren_types::api::AUDIT_GENESIS, 0, &streamed)
            .expect("the streamed copy verifies");

        // And so does the syslog receiver, one RFC 5424 message per entry.
        let mut got = vec![];
        let mut buf = vec![0u8; 65536];
        while got.len() < expected.len() {
            let n = tokio::time::timeout(std::time::Duration::from_secs(10), syslog.recv(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("[{l}] only {} syslog messages", got.len()))
                .expect("recv");
            let text = String::from_utf8(buf[..n].to_vec()).expect("utf-8");
            assert!(text.starts_with("<86>1 "), "[{l}] {text}");
            let json = text.split_once(" warren - audit - ").expect("the entry").1;
            got.push(serde_json::from_str::<warren_types::api::AuditEntry>(json).expect("JSON"));
        }
        assert_eq!(got, streamed, "[{l}]");

        let (st, v) = s.admin(Method::POST, "/api/v1/audit/verify", None).await;
        assert_eq!(st, 200, "[{l}] {v}");
        assert_eq!(v["entries"], expected.len(), "[{l}] {v}");
        assert!(v["broken"].is_null(), "[{l}] {v}");
        s.stop().await;
    }
}

#[tokio::test]
async fn a_flood_of_held_back_sign_ins_is_recorded_once_and_names_cannot_steer_a_terminal() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        // A guessing run against one account: the first wrong passwords are each recorded,
        // then the throttle holds the rest back, and those are recorded once for the minute.
        let mut held_back = 0;
        for _ in 0..30 {
            let (st, b) = s
                .call(
                    Method::POST,
                    "/api/v1/session",
                    None,
                    Some(json!({"username": "ann\u{1b}]0;owned\u{7}", "password": "guess"})),
                )
                .await;
            match st {
                401 => {}
                429 => held_back += 1,
                _ => panic!("[{l}] {st} {b}"),
            }
        }
        assert!(held_back > 0, "[{l}] the throttle held nothing back");
        // The admin's own sign-in (the test's token) aside.
        let tries: Vec<Value> = entries(&s, "action=session.sign_in")
            .await
            .into_iter()
            .filter(|e| e["actor_kind"] == "anonymous")
            .collect();
        let (throttled, wrong): (Vec<&Value>, Vec<&Value>) = tries.iter().partition(|e| {
            e["detail"]
                .as_str()
                .is_some_and(|d| d.contains("too many failed"))
        });
        assert_eq!(throttled.len(), 1, "[{l}] {tries:#?}");
        assert_eq!(wrong.len(), 30 - held_back, "[{l}] {tries:#?}");
        assert!(tries.iter().all(|e| e["outcome"] == "denied"), "[{l}]");
        // The name tried is kept, with its control characters written out.
        for e in &tries {
            let actor = e["actor"].as_str().expect("the name tried");
            assert_eq!(actor, "ann\\u{1b}]0;owned\\u{7}", "[{l}] {e}");
        }
        s.stop().await;
    }
}

/// Percent-encodes what a query value may not hold as is.
fn urlencoding(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

/// The server's configuration for `warren admin audit verify` on the test's database.
fn config_of(s: &TestServer) -> ServerConfig {
    let mut c = ServerConfig::new(s.db.dir.path().join("home"));
    c.database_url = Some(s.db.url.clone());
    c.relay_secret = Some("unused-but-long-enough-for-the-check".into());
    c
}

#[tokio::test]
async fn the_database_refuses_to_rewrite_the_log_and_a_rewrite_is_found() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        s.user("ann", &["api", "workspace"]).await;
        s.state.audit.flush().await;
        let before = warren_server::verify_audit(&config_of(&s))
            .await
            .expect("verify");
        assert!(before.broken.is_none(), "[{l}] {before:?}");
        assert_eq!(before.entries, 4, "[{l}] {before:?}");

        let mut conn = raw(&s.db.url).await;
        let row = sqlx::query("SELECT actor FROM audit_log WHERE seq = 2")
            .fetch_one(&mut conn)
            .await
            .expect("entry 2");
        let original: String = sqlx::Row::get(&row, "actor");
        for attack in [
            "UPDATE audit_log SET actor = 'mallory' WHERE seq = 2",
            "DELETE FROM audit_log WHERE seq = 4",
        ] {
            let e = sqlx::query(attack)
                .execute(&mut conn)
                .await
                .expect_err("the database refuses");
            assert!(e.to_string().contains("append-only"), "[{l}] {attack}: {e}");
        }
        // Someone who owns the database can drop the guards; the chain then tells.
        let drop = if l == "postgres" {
            vec!["DROP TRIGGER audit_log_guard ON audit_log"]
        } else {
            vec![
                "DROP TRIGGER audit_log_no_update",
                "DROP TRIGGER audit_log_no_delete",
            ]
        };
        for d in drop {
            sqlx::query(d).execute(&mut conn).await.expect("drop guard");
        }
        sqlx::query("UPDATE audit_log SET actor = 'mallory' WHERE seq = 2")
            .execute(&mut conn)
            .await
            .expect("rewrite");
        let (st, v) = s.admin(Method::POST, "/api/v1/audit/verify", None).await;
        assert_eq!(st, 200, "[{l}] {v}");
        assert_eq!(v["broken"]["seq"], 2, "[{l}] {v}");
        assert_eq!(v["entries"], 1, "[{l}] {v}");
        let direct = warren_server::verify_audit(&config_of(&s))
            .await
            .expect("verify");
        assert_eq!(direct.broken.map(|b| b.seq), Some(2), "[{l}]");

        // Removing the newest entries leaves an intact chain that ends too early.
        sqlx::query("UPDATE audit_log SET actor = $1 WHERE seq = 2")
            .bind(&original)
            .execute(&mut conn)
            .await
            .expect("undo");
        let head = sqlx::query("SELECT MAX(seq) AS n FROM audit_log")
            .fetch_one(&mut conn)
            .await
            .expect("max");
        let n: i64 = sqlx::Row::get(&head, "n");
        sqlx::query(&format!("DELETE FROM audit_log WHERE seq = {n}"))
            .execute(&mut conn)
            .await
            .expect("remove the newest");
        let v = warren_server::verify_audit(&config_of(&s))
            .await
            .expect("verify");
        let b = v.broken.expect("a truncated log is found");
        assert!(
            b.reason.contains("newest were removed"),
            "[{l}] {}",
            b.reason
        );
        drop_conn(conn).await;
        s.stop().await;
    }
}

async fn drop_conn(conn: sqlx::AnyConnection) {
    let _ = sqlx::Connection::close(conn).await;
}

#[tokio::test]
async fn retention_removes_the_oldest_and_what_is_left_still_verifies() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        s.agent("a2", json!({})).await;
        s.clock.advance_ms(3 * 86_400_000);
        s.agent("a3", json!({})).await;
        let gone = warren_server::app::audit::prune(&s.state, 2)
            .await
            .expect("prune");
        assert_eq!(gone, 3, "[{l}]");
        let left = entries(&s, "").await;
        assert_eq!(actions(&left), ["agent.create"], "[{l}] {left:#?}");
        assert_eq!(left[0]["target"], "a3");
        // The database lets retention's deletes through, and no others.
        let mut conn = raw(&s.db.url).await;
        let e = sqlx::query("DELETE FROM audit_log")
            .execute(&mut conn)
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("append-only"), "[{l}] {e}");
        drop_conn(conn).await;
        s.agent("a4", json!({})).await;
        let (_, v) = s.admin(Method::POST, "/api/v1/audit/verify", None).await;
        assert!(v["broken"].is_null(), "[{l}] {v}");
        assert_eq!(
            (&v["first_seq"], &v["entries"]),
            (&json!(4), &json!(2)),
            "[{l}] {v}"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn projects_spaces_secrets_and_regions_changes_are_each_recorded_once() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let start = entries(&s, "limit=1").await[0]["seq"].as_i64().unwrap();
        let steps: Vec<(&str, Method, String, Value, u16)> = vec![
            (
                "project.create",
                Method::POST,
                "/api/v1/projects".into(),
                json!({"name": "p1", "git_url": "https://example.com/r.git", "devfile": WEB_DEVFILE}),
                201,
            ),
            (
                "project.set_member",
                Method::PUT,
                "/api/v1/projects/p1/members/bob".into(),
                json!({"role": "developer"}),
                200,
            ),
            (
                "space.create",
                Method::POST,
                "/api/v1/spaces".into(),
                json!({"path": "acme"}),
                201,
            ),
            (
                "space.set_member",
                Method::PUT,
                "/api/v1/spaces/acme/members/bob".into(),
                json!({"role": "owner"}),
                200,
            ),
            (
                "secret.set",
                Method::PUT,
                "/api/v1/users/me/secrets/API_TOKEN".into(),
                json!({"value": "tok-s3cret-value"}),
                201,
            ),
            (
                "secret.remove",
                Method::DELETE,
                "/api/v1/users/me/secrets/API_TOKEN".into(),
                Value::Null,
                204,
            ),
            (
                "project.delete",
                Method::DELETE,
                "/api/v1/projects/p1".into(),
                Value::Null,
                204,
            ),
        ];
        for (action, method, path, body, want) in &steps {
            let body = (!body.is_null()).then(|| body.clone());
            let (st, b) = s.admin(method.clone(), path, body).await;
            assert_eq!(st, *want, "[{l}] {action}: {b}");
        }
        let got = entries(&s, "limit=1000").await;
        let new: Vec<String> = got
            .iter()
            .filter(|e| e["seq"].as_i64().unwrap() > start)
            .rev()
            .map(|e| e["action"].as_str().unwrap().to_owned())
            .collect();
        let want: Vec<&str> = steps.iter().map(|s| s.0).collect();
        assert_eq!(new, want, "[{l}] {got:#?}");
        let text = serde_json::to_string(&got).unwrap();
        assert!(
            !text.contains("tok-s3cret-value"),
            "[{l}] a secret's value was recorded"
        );
        // Bob, made an owner of acme, now reads acme's entries: the role he was given there.
        let (st, b) = s.get(&bob, "/api/v1/audit?space=acme").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            actions(b["items"].as_array().unwrap()),
            ["space.set_member", "space.create"],
            "[{l}] {b}"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn terminals_and_ssh_sessions_a_proxy_reports_are_recorded_with_who_where_and_how_long() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let w = s.workspace(&ann, json!({"name": "ann-ws"})).await;
        let (ws_id, user_id) = (w["id"].as_i64().unwrap(), w["owner"].as_i64().unwrap());
        let t0 = chrono::Utc::now().timestamp_millis() - 600_000;
        let event = |kind: &str, closed: Option<i64>, what: Option<&str>| {
            let mut e = json!({"kind": kind, "workspace_id": ws_id, "user_id": user_id,
                "source": "203.0.113.9", "opened_at_ms": t0});
            if let Some(c) = closed {
                e["closed_at_ms"] = json!(c);
            }
            if let Some(w) = what {
                e["what"] = json!(w);
            }
            e
        };
        let report = json!({"events": [
            event("terminal", None, None),
            event("ssh", None, Some("shell")),
            event("terminal", Some(t0 + 303_000), None),
            event("editor", None, None),
            event("editor", Some(t0 + 60_000), None),
        ]});
        // Only a proxy reports sessions.
        let (st, _) = s.post(&ann, "/internal/sessions", report.clone()).await;
        assert_eq!(st, 401, "[{l}]");
        let (st, b) = s.post(&proxy_jwt(), "/internal/sessions", report).await;
        assert_eq!(st, 204, "[{l}] {b}");

        let terminal = entries(&s, "target=ann-ws&action=terminal.*").await;
        assert_eq!(
            actions(&terminal),
            ["terminal.close", "terminal.open"],
            "[{l}]"
        );
        let closed = &terminal[0];
        assert_eq!(
            (&closed["actor"], &closed["source"], &closed["channel"]),
            (&json!("ann"), &json!("203.0.113.9"), &json!("proxy")),
            "[{l}] {closed}"
        );
        assert_eq!(closed["detail"], "lasted 5 min 3 s", "[{l}] {closed}");
        assert_eq!(closed["space"], "users/ann");
        let at = chrono::DateTime::parse_from_rfc3339(closed["at"].as_str().unwrap()).unwrap();
        assert_eq!(
            at.timestamp_millis(),
            t0 + 303_000,
            "[{l}] recorded when it happened"
        );
        let ssh = entries(&s, "action=ssh.open").await;
        assert_eq!(ssh.len(), 1, "[{l}] {ssh:#?}");
        assert_eq!(
            (&ssh[0]["channel"], &ssh[0]["detail"]),
            (&json!("ssh"), &json!("shell"))
        );
        let editor = entries(&s, "target=ann-ws&action=editor.*").await;
        assert_eq!(actions(&editor), ["editor.close", "editor.open"], "[{l}]");
        assert_eq!(
            (
                &editor[0]["actor"],
                &editor[0]["channel"],
                &editor[0]["detail"]
            ),
            (&json!("ann"), &json!("proxy"), &json!("lasted 1 min 0 s")),
            "[{l}] {editor:#?}"
        );
        // "Who opened a terminal in ann-ws in the last hour?"
        let since = (chrono::Utc::now() - chrono::Duration::hours(1)).to_rfc3339();
        let who = entries(
            &s,
            &format!(
                "target=ann-ws&action=terminal.open&since={}",
                urlencoding(&since)
            ),
        )
        .await;
        assert_eq!(who.len(), 1, "[{l}] {who:#?}");
        assert_eq!(who[0]["actor"], "ann");

        let flood: Vec<Value> = (0..1001).map(|_| event("terminal", None, None)).collect();
        let (st, b) = s
            .post(
                &proxy_jwt(),
                "/internal/sessions",
                json!({ "events": flood }),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        s.stop().await;
    }
}

/// SSH keys no account has and tokens that are not valid, tried at the proxy's SSH door or
/// on a workspace's URL, are recorded as refused from the client's address (which the proxy
/// names), once per address and minute however many keys a client tries.
#[tokio::test]
async fn refused_credentials_at_the_proxy_are_recorded_from_its_client_once_a_minute() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        s.workspace(&ann, json!({"name": "ann-ws"})).await;
        let try_ssh = |q: String| {
            let s = &s;
            async move {
                let path = format!("/internal/ssh/authorize?username=ann-ws&{q}");
                s.get(&proxy_jwt(), &path).await.0
            }
        };
        for q in [
            "public_key_fingerprint=SHA256:nokey&source=198.51.100.7",
            "token=wrt_not_a_token&source=198.51.100.7",
            "public_key_fingerprint=SHA256:another&source=198.51.100.7",
            "public_key_fingerprint=SHA256:nokey&source=198.51.100.8",
        ] {
            assert_eq!(try_ssh(q.to_owned()).await, 404, "[{l}] {q}");
        }
        // The account's own token opens it, and is no refusal.
        assert_eq!(
            try_ssh(format!("token={ann}&source=198.51.100.7")).await,
            200
        );
        let got = entries(&s, "action=ssh.sign_in").await;
        let sources: Vec<&str> = got.iter().map(|e| e["source"].as_str().unwrap()).collect();
        assert_eq!(sources, ["198.51.100.8", "198.51.100.7"], "[{l}] {got:#?}");
        for e in &got {
            assert_eq!(
                (&e["outcome"], &e["channel"], &e["actor"]),
                (&json!("denied"), &json!("ssh"), &Value::Null),
                "[{l}] {e}"
            );
        }
        // A workspace URL with a token that is not valid.
        for _ in 0..3 {
            let path =
                "/internal/workspaces/access?host=ann-ws&bearer=wrt_nothing&source=203.0.113.50";
            assert_eq!(s.get(&proxy_jwt(), path).await.0, 404, "[{l}]");
        }
        let got = entries(&s, "action=token.use").await;
        assert_eq!(got.len(), 1, "[{l}] {got:#?}");
        assert_eq!(
            (&got[0]["source"], &got[0]["channel"], &got[0]["outcome"]),
            (&json!("203.0.113.50"), &json!("proxy"), &json!("denied")),
            "[{l}] {got:#?}"
        );
        s.stop().await;
    }
}
