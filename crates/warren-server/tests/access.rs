//! The proxy's internal endpoints on SQLite and (when configured) PostgreSQL: workspace
//! access (owner only, declared ports only, 404 for everything else), SSH authorisation,
//! activity reports and the idle-timeout policy they feed.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_server::clock::Clock;
use warren_server::relay::jwt;
use warren_types::internal::PROXY_JWT_ISSUER;
use warren_types::reconcile::{RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE};

fn proxy_jwt_with(iss: &str, aud: &str, now: i64) -> String {
    jwt::mint(RELAY_SECRET.as_bytes(), iss, aud, None, now, 30)
}

async fn proxy_get(s: &TestServer, path_and_query: &str) -> (u16, Value) {
    s.get(&proxy_jwt(), path_and_query).await
}

fn access_q(host: &str, port: u16, who: &str) -> String {
    format!("/internal/workspaces/access?host={host}&port={port}&{who}")
}

async fn user_id(s: &TestServer, token: &str) -> i64 {
    let (st, b) = s.get(token, "/api/v1/users/me").await;
    assert_eq!(st, 200, "{b}");
    b["id"].as_i64().unwrap()
}

#[tokio::test]
async fn access_matrix() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let alice_id = user_id(&s, &alice).await;
        let bob_id = user_id(&s, &bob).await;
        let admin_id = user_id(&s, &s.admin_token).await;
        let w = s
            .workspace(&alice, json!({"name": "ws-one", "devfile": WEB_DEVFILE}))
            .await;
        let wid = w["id"].as_i64().unwrap();

        // The owner on a declared port.
        let (st, mut b) =
            proxy_get(&s, &access_q("ws-one", 8080, &format!("user={alice_id}"))).await;
        assert_eq!(st, 200, "[{l}] {b}");
        // The next timer (the agent's 36 hours of running), for the terminal's warning.
        let planned = b.as_object_mut().unwrap().remove("planned_stop").unwrap();
        assert_eq!(planned["terminated"], false, "[{l}] {planned}");
        assert!(
            planned["reason"].as_str().unwrap().contains("36 hours"),
            "[{l}] {planned}"
        );
        assert_eq!(
            b,
            json!({"allowed": true, "workspace_id": wid, "workspace_name": "ws-one",
                   "agent_id": w["agent"], "namespace": w["namespace"], "port": 8080,
                   "desired_state": "Running", "actual_state": w["actual_state"], "user_id": alice_id,
                   "wake_on_request": false, "may_start": true}),
            "[{l}]"
        );

        // Everything else is the same 404.
        let not_found = [
            access_q("ws-one", 8080, &format!("user={bob_id}")),
            access_q("ws-one", 8080, &format!("user={admin_id}")),
            access_q("ws-one", 8080, "user=999999"),
            access_q("no-such-ws", 8080, &format!("user={alice_id}")),
            access_q("ws-one", 5005, &format!("user={alice_id}")),
            access_q("ws-one", 9999, &format!("user={alice_id}")),
        ];
        let mut bodies = vec![];
        for q in &not_found {
            let (st, b) = proxy_get(&s, q).await;
            assert_eq!(st, 404, "[{l}] {q}: {b}");
            bodies.push(b);
        }
        assert!(
            bodies.windows(2).all(|w| w[0] == w[1]),
            "[{l}] identical 404s: {bodies:?}"
        );

        // Personal access tokens: the workspace scope is needed; revoked/expired fail.
        let (st, b) = proxy_get(&s, &access_q("ws-one", 8080, &format!("bearer={alice}"))).await;
        assert_eq!(
            (st, b["user_id"].as_i64()),
            (200, Some(alice_id)),
            "[{l}] {b}"
        );
        let (st, tb) = s
            .post(
                &alice,
                "/api/v1/users/me/tokens",
                json!({"name": "api-only", "scopes": ["api"]}),
            )
            .await;
        assert_eq!(st, 201);
        let api_only = tb["secret"].as_str().unwrap().to_owned();
        // A valid token of the wrong scope is told what to do, the same for any workspace
        // name (nothing learnt about which exist).
        for host in ["ws-one", "no-such-workspace"] {
            let (st, b) = proxy_get(&s, &access_q(host, 8080, &format!("bearer={api_only}"))).await;
            assert_eq!(st, 403, "[{l}] token without the workspace scope: {b}");
            assert_eq!(b["error"]["code"], "insufficient_scope", "[{l}] {b}");
            assert!(
                b["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("--scope workspace")),
                "[{l}] {b}"
            );
        }
        let (st, _) = proxy_get(&s, &access_q("ws-one", 8080, &format!("bearer={bob}"))).await;
        assert_eq!(st, 404, "[{l}] another user's token");
        let (st, _) = proxy_get(&s, &access_q("ws-one", 8080, "bearer=wrn_pat_garbage")).await;
        assert_eq!(st, 404, "[{l}] garbage token");
        let (st, tb) = s
            .post(
                &alice,
                "/api/v1/users/me/tokens",
                json!({"name": "short", "scopes": ["workspace"], "expires_in_days": 1}),
            )
            .await;
        assert_eq!(st, 201, "{tb}");
        let short = tb["secret"].as_str().unwrap().to_owned();
        let short_id = tb["token"]["id"].as_i64().unwrap();
        let (st, _) = proxy_get(&s, &access_q("ws-one", 8080, &format!("bearer={short}"))).await;
        assert_eq!(st, 200, "[{l}]");
        let (st, _) = s
            .delete(&alice, &format!("/api/v1/users/me/tokens/{short_id}"))
            .await;
        assert!(st == 204 || st == 200, "[{l}] revoke {st}");
        let (st, _) = proxy_get(&s, &access_q("ws-one", 8080, &format!("bearer={short}"))).await;
        assert_eq!(st, 404, "[{l}] revoked token");

        // An expired token.
        let (st, tb) = s
            .post(
                &alice,
                "/api/v1/users/me/tokens",
                json!({"name": "day", "scopes": ["workspace"], "expires_in_days": 1}),
            )
            .await;
        assert_eq!(st, 201, "{tb}");
        let day = tb["secret"].as_str().unwrap().to_owned();
        s.clock.advance_ms(25 * 3_600_000);
        let (st, _) = proxy_get(&s, &access_q("ws-one", 8080, &format!("bearer={day}"))).await;
        assert_eq!(st, 404, "[{l}] expired token");

        // At most one of user, bearer and share; none asks for anyone (a public port only).
        let (st, _) = proxy_get(
            &s,
            &access_q("ws-one", 8080, &format!("user={alice_id}&bearer={alice}")),
        )
        .await;
        assert_eq!(st, 400, "[{l}]");
        let (st, _) = proxy_get(&s, "/internal/workspaces/access?host=ws-one&port=8080").await;
        assert_eq!(st, 404, "[{l}] not public");

        // The proxy's JWT: missing, wrong audience, wrong issuer, expired, wrong secret → 401.
        let q = access_q("ws-one", 8080, &format!("user={alice_id}"));
        let now = chrono::Utc::now().timestamp();
        for (what, token) in [
            (
                "wrong audience",
                Some(proxy_jwt_with(PROXY_JWT_ISSUER, "warren-relay", now)),
            ),
            (
                "relay issuer",
                Some(proxy_jwt_with(RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now)),
            ),
            (
                "expired",
                Some(proxy_jwt_with(
                    PROXY_JWT_ISSUER,
                    SERVER_JWT_AUDIENCE,
                    now - 120,
                )),
            ),
            (
                "other secret",
                Some(jwt::mint(
                    b"another-secret-another-secret-xx",
                    PROXY_JWT_ISSUER,
                    SERVER_JWT_AUDIENCE,
                    None,
                    now,
                    30,
                )),
            ),
            ("a personal access token", Some(alice.clone())),
            ("missing", None),
        ] {
            let (st, b) = s.call(Method::GET, &q, token.as_deref(), None).await;
            assert_eq!(st, 401, "[{l}] {what}: {b}");
        }

        // Terminated: 404 at once.
        let (st, _) = s.delete(&alice, "/api/v1/workspaces/ws-one").await;
        assert!(st < 300, "[{l}] terminate {st}");
        let (st, _) = proxy_get(&s, &q).await;
        assert_eq!(st, 404, "[{l}] terminated workspace");
        s.stop().await;
    }
}

#[tokio::test]
async fn ssh_authorize_by_key_or_token() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        s.workspace(&alice, json!({"name": "ws-ssh", "devfile": WEB_DEVFILE}))
            .await;
        let (st, k) = s
            .post(
                &alice,
                "/api/v1/users/me/ssh-keys",
                json!({"name": "laptop", "public_key": ED25519}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {k}");
        let fp = k["fingerprint"].as_str().unwrap().to_owned();
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();

        let (st, b) = proxy_get(
            &s,
            &format!(
                "/internal/ssh/authorize?username=ws-ssh&public_key_fingerprint={}",
                enc(&fp)
            ),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["username"], "alice");
        assert_eq!(b["workspace_name"], "ws-ssh");
        assert_eq!(b["desired_state"], "Running");

        for q in [
            format!(
                "username=ws-ssh&public_key_fingerprint={}",
                enc("SHA256:unregisteredkeyAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
            ),
            format!("username=no-such&public_key_fingerprint={}", enc(&fp)),
            format!("username=ws-ssh&token={bob}"),
            "username=ws-ssh&token=wrn_pat_nope".to_string(),
        ] {
            let (st, b) = proxy_get(&s, &format!("/internal/ssh/authorize?{q}")).await;
            assert_eq!(st, 404, "[{l}] {q}: {b}");
        }
        let (st, b) = proxy_get(
            &s,
            &format!("/internal/ssh/authorize?username=ws-ssh&token={alice}"),
        )
        .await;
        assert_eq!(
            (st, b["username"].as_str()),
            (200, Some("alice")),
            "[{l}] password = token"
        );

        // Bob registers the key? It is alice's: unique fingerprints keep it hers.
        let (st, _) = s
            .post(
                &bob,
                "/api/v1/users/me/ssh-keys",
                json!({"name": "stolen", "public_key": ED25519}),
            )
            .await;
        assert_ne!(st, 201, "[{l}]");
        let (st, _) = s
            .get(
                &bob,
                &format!(
                    "/internal/ssh/authorize?username=ws-ssh&public_key_fingerprint={}",
                    enc(&fp)
                ),
            )
            .await;
        assert_eq!(st, 401, "[{l}] a PAT is not the proxy's JWT");
        s.stop().await;
    }
}

async fn desired(s: &TestServer, token: &str, name: &str) -> String {
    let (st, b) = s.get(token, &format!("/api/v1/workspaces/{name}")).await;
    assert_eq!(st, 200, "{b}");
    b["desired_state"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn idle_timeout_stops_and_activity_postpones() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("idle", json!({"lifecycle": {"idle_timeout_minutes": 30}}))
            .await;
        s.agent("never", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let w = s
            .workspace(
                &alice,
                json!({"name": "ws-idle", "agent": "idle", "devfile": WEB_DEVFILE}),
            )
            .await;
        s.workspace(
            &alice,
            json!({"name": "ws-busy", "agent": "never", "devfile": WEB_DEVFILE}),
        )
        .await;
        let wid = w["id"].as_i64().unwrap();

        let report = |ms: i64| {
            let s = &s;
            async move {
                s.post(&proxy_jwt(), "/internal/workspaces/activity", json!({"workspaces": [{"workspace_id": wid, "last_activity_ms": ms},
                                                   {"workspace_id": 999999, "last_activity_ms": ms}]}))
                    .await
            }
        };

        // 20 minutes in, activity is reported; 40 minutes in it is still running.
        s.clock.advance_ms(20 * 60_000);
        let (st, b) = report(s.clock.now_ms()).await;
        assert_eq!(st, 204, "[{l}] {b}");
        // An older report does not move the time back.
        let (st, _) = report(s.clock.now_ms() - 15 * 60_000).await;
        assert_eq!(st, 204);
        s.clock.advance_ms(20 * 60_000);
        warren_server::app::lifecycle::run_timers_once(&s.state)
            .await
            .unwrap();
        assert_eq!(
            desired(&s, &alice, "ws-idle").await,
            "Running",
            "[{l}] activity postpones"
        );

        // 31 minutes after the last activity it is stopped; the policy-less agent's is not.
        s.clock.advance_ms(11 * 60_000);
        warren_server::app::lifecycle::run_timers_once(&s.state)
            .await
            .unwrap();
        assert_eq!(
            desired(&s, &alice, "ws-idle").await,
            "Stopped",
            "[{l}] idle stop"
        );
        assert_eq!(
            desired(&s, &alice, "ws-busy").await,
            "Running",
            "[{l}] off by default"
        );
        // The proxy learns it may wake it (the agent's policy allows by default).
        let alice_id = user_id(&s, &alice).await;
        let (st, b) = proxy_get(&s, &access_q("ws-idle", 8080, &format!("user={alice_id}"))).await;
        assert_eq!(
            (st, b["wake_on_request"].as_bool()),
            (200, Some(true)),
            "[{l}] {b}"
        );

        // A fresh start counts as activity: no immediate stop after restarting.
        let (st, _) = s
            .put(
                &alice,
                "/api/v1/workspaces/ws-idle/desired_state",
                json!({"desired_state": "Running"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let (_, b) = proxy_get(&s, &access_q("ws-idle", 8080, &format!("user={alice_id}"))).await;
        assert_eq!(
            b["wake_on_request"], false,
            "[{l}] a start clears the mark: {b}"
        );
        warren_server::app::lifecycle::run_timers_once(&s.state)
            .await
            .unwrap();
        assert_eq!(
            desired(&s, &alice, "ws-idle").await,
            "Running",
            "[{l}] just started"
        );

        // A time in the future is clamped to the server's now.
        let (st, _) = report(s.clock.now_ms() + 86_400_000).await;
        assert_eq!(st, 204);
        let last = s
            .state
            .store
            .last_activity(warren_types::WorkspaceId(wid))
            .await
            .unwrap();
        assert_eq!(last, Some(s.clock.now_ms()), "[{l}] clamped");

        // Bad reports are refused with a reason; unauthenticated ones with 401.
        let (st, _) = s
            .call(
                Method::POST,
                "/internal/workspaces/activity",
                None,
                Some(json!({"workspaces": []})),
            )
            .await;
        assert_eq!(st, 401);
        let (st, b) = s
            .post(
                &proxy_jwt(),
                "/internal/workspaces/activity",
                json!({"workspace": []}),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn start_button_owner_only_and_lifecycle_rules() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let alice_id = user_id(&s, &alice).await;
        let bob_id = user_id(&s, &bob).await;
        let admin_id = user_id(&s, &s.admin_token).await;
        let w = s
            .workspace(&alice, json!({"name": "ws-start", "devfile": WEB_DEVFILE}))
            .await;
        let wid = w["id"].as_i64().unwrap();
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/ws-start/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(desired(&s, &alice, "ws-start").await, "Stopped", "[{l}]");

        let start = |user: i64| {
            let body = json!({"workspace_id": wid, "user_id": user});
            let s = &s;
            async move {
                s.post(&proxy_jwt(), "/internal/workspaces/start", body)
                    .await
            }
        };
        // Without the proxy's JWT: 401.
        let (st, _) = s
            .post(
                &alice,
                "/internal/workspaces/start",
                json!({"workspace_id": wid, "user_id": alice_id}),
            )
            .await;
        assert_eq!(st, 401, "[{l}] a personal access token is not the proxy");
        // Other users and admins: the same 404 as an unknown workspace.
        let (st_bob, b_bob) = start(bob_id).await;
        let (st_admin, b_admin) = start(admin_id).await;
        let (st_unknown, b_unknown) = s
            .post(
                &proxy_jwt(),
                "/internal/workspaces/start",
                json!({"workspace_id": 999_999, "user_id": alice_id}),
            )
            .await;
        assert_eq!((st_bob, st_admin, st_unknown), (404, 404, 404), "[{l}]");
        assert!(
            b_bob == b_admin && b_admin == b_unknown,
            "[{l}] identical 404s"
        );
        assert_eq!(desired(&s, &alice, "ws-start").await, "Stopped", "[{l}]");

        // The owner: desired Running, answered with the new states.
        let (st, b) = start(alice_id).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["workspace_id"], json!(wid), "[{l}]");
        assert_eq!(b["workspace_name"], "ws-start", "[{l}]");
        assert_eq!(b["desired_state"], "Running", "[{l}]");
        assert_eq!(b["user_id"], json!(alice_id), "[{l}]");
        assert_eq!(desired(&s, &alice, "ws-start").await, "Running", "[{l}]");
        // Again: harmless.
        let (st, b) = start(alice_id).await;
        assert_eq!(
            (st, b["desired_state"].as_str()),
            (200, Some("Running")),
            "[{l}]"
        );

        // Terminated: 409 naming the state.
        let (st, _) = s.delete(&alice, "/api/v1/workspaces/ws-start").await;
        assert!(st < 300, "[{l}] terminate {st}");
        let (st, b) = start(alice_id).await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "invalid_state_transition", "[{l}]");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Terminated"),
            "[{l}] {b}"
        );
        s.stop().await;
    }
}

const PEM_A: &str =
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n";
const PUBLIC_A: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0";

fn key_b64(byte: u8) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([byte; 32])
}

/// The keys proxy replicas share: the first offer is adopted and every later replica gets
/// it; only proxies read them; a rotation (admins only) is published before it signs and
/// three generations are kept; a hand-off is used once.
#[tokio::test]
async fn proxy_keys_are_adopted_once_shared_and_rotated_by_admins() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let proxy = proxy_jwt();
        const KEYS: &str = "/internal/proxy/keys";
        const HANDOFFS: &str = "/internal/proxy/handoffs";

        let (st, b) = s.get(&proxy, KEYS).await;
        assert_eq!((st, &b["cookie_keys"]), (200, &json!([])), "[{l}] {b}");

        let offer = |cookie: &str, private: &str, public: &str| {
            json!({"cookie_key": cookie,
                   "ssh_host_key": {"private_key": private, "public_key": public}})
        };
        let (st, first) = s
            .post(&proxy, KEYS, offer(&key_b64(1), PEM_A, PUBLIC_A))
            .await;
        assert_eq!(st, 200, "[{l}] {first}");
        assert_eq!(first["cookie_keys"][0]["secret"], key_b64(1), "[{l}]");
        assert_eq!(first["cookie_keys"][0]["generation"], 1, "[{l}]");
        assert_eq!(first["ssh_host_key"], PEM_A, "[{l}]");
        // A second replica's offer changes nothing: it gets the first one's keys.
        let pem_b = PEM_A.replace("AAAAA", "BBBBB");
        let (st, second) = s
            .post(
                &proxy,
                KEYS,
                offer(
                    &key_b64(2),
                    &pem_b,
                    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5BBBBBBBB",
                ),
            )
            .await;
        assert_eq!((st, &second), (200, &first), "[{l}]");
        let (_, polled) = s.get(&proxy, KEYS).await;
        assert_eq!(polled["cookie_keys"], first["cookie_keys"], "[{l}]");
        assert!(
            polled.get("ssh_host_key").is_none(),
            "[{l}] polls carry no host key"
        );

        // Malformed offers name their field.
        for (body, field) in [
            (json!({"cookie_key": "c2hvcnQ"}), "cookie_key"),
            (
                offer(&key_b64(3), "not a key", PUBLIC_A),
                "ssh_host_key.private_key",
            ),
            (
                offer(&key_b64(3), PEM_A, "garbage"),
                "ssh_host_key.public_key",
            ),
            (json!({"cookie_key": key_b64(3), "extra": 1}), "extra"),
        ] {
            let (st, b) = s.post(&proxy, KEYS, body).await;
            assert_eq!(st, 400, "[{l}] {field}: {b}");
            assert!(b.to_string().contains(field), "[{l}] {field}: {b}");
        }

        // Only the proxies' JWT reads or uses them.
        let now = chrono::Utc::now().timestamp();
        let relay = proxy_jwt_with(RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE, now);
        for token in [
            None,
            Some(relay.as_str()),
            Some(alice.as_str()),
            Some(s.admin_token.as_str()),
        ] {
            let (st, b) = s.call(Method::GET, KEYS, token, None).await;
            assert_eq!(st, 401, "[{l}] {token:?}: {b}");
            let (st, _) = s.call(Method::POST, KEYS, token, Some(json!({}))).await;
            assert_eq!(st, 401, "[{l}]");
            let body = json!({"jti": "x", "expires_at": now + 60});
            let (st, _) = s.call(Method::POST, HANDOFFS, token, Some(body)).await;
            assert_eq!(st, 401, "[{l}]");
        }

        // Rotation: admins only; published before it signs; three generations kept.
        const ROTATE: &str = "/api/v1/proxy/cookie-keys/rotate";
        let (st, b) = s.post(&alice, ROTATE, json!({})).await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, r) = s.admin(Method::POST, ROTATE, None).await;
        assert_eq!(st, 200, "[{l}] {r}");
        assert_eq!(r["generation"], 2, "[{l}]");
        let (_, polled) = s.get(&proxy, KEYS).await;
        let keys = polled["cookie_keys"].as_array().unwrap();
        assert_eq!(keys.len(), 2, "[{l}]");
        assert_eq!(keys[1]["signing_from"], r["signing_from"], "[{l}]");
        assert!(
            keys[1]["signing_from"].as_i64().unwrap()
                >= keys[0]["signing_from"].as_i64().unwrap() + 15,
            "[{l}] published ahead: {polled}"
        );
        assert_ne!(keys[1]["secret"], keys[0]["secret"], "[{l}]");
        for _ in 0..2 {
            let (st, _) = s.admin(Method::POST, ROTATE, None).await;
            assert_eq!(st, 200, "[{l}]");
        }
        let (_, polled) = s.get(&proxy, KEYS).await;
        let generations: Vec<i64> = polled["cookie_keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["generation"].as_i64().unwrap())
            .collect();
        assert_eq!(generations, [2, 3, 4], "[{l}]");

        // A hand-off is used once, whichever replica asks.
        let use_once = |jti: &str| json!({"jti": jti, "expires_at": now + 60});
        for (jti, want) in [("h1", 204), ("h1", 409), ("h2", 204), ("h1", 409)] {
            let (st, _) = s.post(&proxy, HANDOFFS, use_once(jti)).await;
            assert_eq!(st, want, "[{l}] {jti}");
        }
        let (st, b) = s.post(&proxy, HANDOFFS, use_once("")).await;
        assert_eq!(st, 400, "[{l}] {b}");
        s.stop().await;
    }
}
