//! User administration on SQLite and (when configured) PostgreSQL: an admin disables a
//! leaver (tokens, sign-in and workspace access all end; workspaces stop; enabling restores
//! it), grants and revokes admin rights (never the last active admin), resets a password,
//! deletes an account (its workspaces terminated first, on request); users change their own
//! password, keeping or revoking their other sessions.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_types::internal::PROXY_JWT_ISSUER;
use warren_types::reconcile::SERVER_JWT_AUDIENCE;

fn code(b: &Value) -> &str {
    b["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an API error: {b}"))
}

fn msg(b: &Value) -> &str {
    b["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an API error: {b}"))
}

fn proxy_jwt() -> String {
    warren_server::relay::jwt::mint(
        RELAY_SECRET.as_bytes(),
        PROXY_JWT_ISSUER,
        SERVER_JWT_AUDIENCE,
        None,
        chrono::Utc::now().timestamp(),
        30,
    )
}

async fn login(s: &TestServer, name: &str, password: &str) -> (u16, Value) {
    s.call(
        Method::POST,
        "/api/v1/session",
        None,
        Some(json!({"username": name, "password": password})),
    )
    .await
}

async fn me(s: &TestServer, token: &str) -> u16 {
    s.get(token, "/api/v1/users/me").await.0
}

/// May `token`'s user reach the workspace `host` through the proxy (by token)?
async fn reaches(s: &TestServer, host: &str, token: &str) -> u16 {
    let q = format!("/internal/workspaces/access?host={host}&port=8080&bearer={token}");
    s.get(&proxy_jwt(), &q).await.0
}

async fn patch(s: &TestServer, who: &str, user: &str, body: Value) -> (u16, Value) {
    s.patch(who, &format!("/api/v1/users/{user}"), body).await
}

#[tokio::test]
async fn admin_disables_a_leaver_and_enables_again() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        s.workspace(&bob, json!({"name": "bob-ws", "devfile": WEB_DEVFILE}))
            .await;
        s.reconcile_ok(agent, "full", json!([running("bob-ws", "1")]))
            .await;
        assert_eq!(reaches(&s, "bob-ws", &bob).await, 200, "[{l}]");

        // Only admins administer accounts.
        for (m, body) in [
            (Method::GET, None),
            (Method::PATCH, Some(json!({"disabled": true}))),
            (Method::DELETE, None),
        ] {
            let (st, b) = s.call(m, "/api/v1/users/bob", Some(&carol), body).await;
            assert_eq!(st, 403, "[{l}] {b}");
        }
        let (st, b) = patch(&s, &s.admin_token, "nobody", json!({"disabled": true})).await;
        assert_eq!((st, code(&b)), (404, "not_found"), "[{l}] {b}");
        let (st, b) = patch(&s, &s.admin_token, "bob", json!({"disabled": "yes"})).await;
        assert_eq!(st, 400, "[{l}] {b}");

        let (st, b) = patch(&s, &s.admin_token, "bob", json!({"disabled": true})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b["disabled_at"].is_string(), "[{l}] {b}");
        // Everything bob holds stops working: API token, sign-in, workspace access.
        assert_eq!(me(&s, &bob).await, 401, "[{l}]");
        let (st, b) = login(&s, "bob", "password-123").await;
        assert_eq!((st, code(&b)), (403, "account_disabled"), "[{l}] {b}");
        let (st, b) = login(&s, "bob", "wrong-password").await;
        assert_eq!(st, 401, "[{l}] a wrong password says nothing more: {b}");
        assert_eq!(reaches(&s, "bob-ws", &bob).await, 404, "[{l}]");
        // …and the running workspace is asked to stop.
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/bob-ws", None)
            .await;
        assert_eq!(w["desired_state"], "Stopped", "[{l}] {w}");
        let (_, list) = s.admin(Method::GET, "/api/v1/users", None).await;
        let listed = list
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["username"] == "bob")
            .cloned()
            .unwrap();
        assert!(listed["disabled_at"].is_string(), "[{l}] {listed}");

        // Enabling restores the same tokens; nothing was deleted.
        let (st, b) = patch(&s, &s.admin_token, "bob", json!({"disabled": false})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b.get("disabled_at").is_none(), "[{l}] {b}");
        assert_eq!(me(&s, &bob).await, 200, "[{l}]");
        assert_eq!(reaches(&s, "bob-ws", &bob).await, 200, "[{l}]");
        s.stop().await;
    }
}

#[tokio::test]
async fn admin_rights_never_leave_the_server_without_an_active_admin() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let carol = s.user("carol", &["api", "workspace"]).await;

        // The only admin can neither demote, disable nor delete itself.
        let (st, b) = patch(&s, &s.admin_token, "admin", json!({"is_admin": false})).await;
        assert_eq!((st, code(&b)), (409, "last_admin"), "[{l}] {b}");
        let (st, b) = patch(&s, &s.admin_token, "admin", json!({"disabled": true})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("own account"), "[{l}] {b}");
        let (st, b) = s.admin(Method::DELETE, "/api/v1/users/admin", None).await;
        assert_eq!(st, 400, "[{l}] {b}");

        // Promote carol: she administers; then the first admin may step down.
        let (st, b) = patch(&s, &s.admin_token, "carol", json!({"is_admin": true})).await;
        assert_eq!(
            (st, b["is_admin"].as_bool()),
            (200, Some(true)),
            "[{l}] {b}"
        );
        let (st, _) = s.get(&carol, "/api/v1/users").await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = patch(&s, &s.admin_token, "admin", json!({"is_admin": false})).await;
        assert_eq!(
            (st, b["is_admin"].as_bool()),
            (200, Some(false)),
            "[{l}] {b}"
        );
        let (st, _) = s.admin(Method::GET, "/api/v1/users", None).await;
        assert_eq!(st, 403, "[{l}] no longer an admin");
        // Carol is now the last one.
        let (st, b) = patch(&s, &carol, "carol", json!({"is_admin": false})).await;
        assert_eq!((st, code(&b)), (409, "last_admin"), "[{l}] {b}");
        // A disabled admin does not count as one.
        let (st, _) = patch(
            &s,
            &carol,
            "admin",
            json!({"is_admin": true, "disabled": true}),
        )
        .await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = patch(&s, &carol, "carol", json!({"is_admin": false})).await;
        assert_eq!((st, code(&b)), (409, "last_admin"), "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn users_change_their_password_keeping_or_revoking_sessions() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let (_, b) = login(&s, "bob", "password-123").await;
        let other = b["secret"].as_str().unwrap().to_owned();
        let change = |current: &str, new: &str, revoke: bool| json!({"current_password": current, "new_password": new, "revoke_sessions": revoke});
        let path = "/api/v1/users/me/password";

        let (st, b) = s
            .post(&bob, path, change("nope-nope", "new-password-1", false))
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("current_password:"), "[{l}] {b}");
        let (st, b) = s
            .post(&bob, path, change("password-123", "short", false))
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("new_password:"), "[{l}] {b}");

        // Kept: the other session still works; only the new password signs in.
        let (st, b) = s
            .post(&bob, path, change("password-123", "new-password-1", false))
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        assert_eq!(me(&s, &other).await, 200, "[{l}]");
        assert_eq!(login(&s, "bob", "password-123").await.0, 401, "[{l}]");
        assert_eq!(login(&s, "bob", "new-password-1").await.0, 201, "[{l}]");

        // Revoked: every other token ends, the one asking is kept.
        let (st, b) = s
            .post(&bob, path, change("new-password-1", "new-password-2", true))
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        assert_eq!(me(&s, &other).await, 401, "[{l}]");
        assert_eq!(me(&s, &bob).await, 200, "[{l}]");

        // An admin's reset revokes everything the account holds.
        let (st, b) = patch(
            &s,
            &s.admin_token,
            "bob",
            json!({"password": "reset-password"}),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(me(&s, &bob).await, 401, "[{l}]");
        assert_eq!(login(&s, "bob", "reset-password").await.0, 201, "[{l}]");
        let (st, b) = patch(&s, &s.admin_token, "bob", json!({"password": "x"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("password:"), "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn deleting_an_account_terminates_its_workspaces_first() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        s.user("dave", &["api", "workspace"]).await;
        s.workspace(&bob, json!({"name": "bob-ws", "devfile": WEB_DEVFILE}))
            .await;
        s.reconcile_ok(agent, "full", json!([running("bob-ws", "1")]))
            .await;

        // Without workspaces: gone at once.
        let (st, b) = s.admin(Method::DELETE, "/api/v1/users/dave", None).await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, _) = s.admin(Method::GET, "/api/v1/users/dave", None).await;
        assert_eq!(st, 404, "[{l}]");

        // With workspaces: refused, naming them, unless asked to terminate them.
        let (st, b) = s.admin(Method::DELETE, "/api/v1/users/bob", None).await;
        assert_eq!((st, code(&b)), (409, "user_has_workspaces"), "[{l}] {b}");
        assert!(msg(&b).contains("bob-ws"), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/users/bob?terminate_workspaces=maybe",
                None,
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/users/bob?terminate_workspaces=true",
                None,
            )
            .await;
        assert_eq!(st, 202, "[{l}] {b}");
        assert!(b["deletion_requested_at"].is_string(), "[{l}] {b}");
        assert!(b["disabled_at"].is_string(), "[{l}] {b}");
        assert_eq!(me(&s, &bob).await, 401, "[{l}] disabled meanwhile");
        let (_, w) = s
            .admin(Method::GET, "/api/v1/workspaces/bob-ws", None)
            .await;
        assert_eq!(w["desired_state"], "Terminated", "[{l}] {w}");
        let (st, b) = patch(&s, &s.admin_token, "bob", json!({"disabled": false})).await;
        assert_eq!((st, code(&b)), (409, "user_being_deleted"), "[{l}] {b}");

        // The agent reports the workspace gone: the account follows.
        s.reconcile_ok(
            agent,
            "partial",
            json!([{"name": "bob-ws", "namespace": "warren-ws-bob-ws", "termination_progress": "Terminated"}]),
        )
        .await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (st, b) = s.admin(Method::GET, "/api/v1/users/bob", None).await;
            if st == 404 {
                break;
            }
            assert_eq!(st, 200, "[{l}] {b}");
            assert!(
                std::time::Instant::now() < deadline,
                "[{l}] the account was not deleted after its workspace terminated: {b}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let (st, _) = s
            .admin(Method::GET, "/api/v1/workspaces/bob-ws", None)
            .await;
        assert_eq!(st, 404, "[{l}] the terminated workspace went with it");
        // The name can be used again.
        s.user("bob", &["api"]).await;
        s.stop().await;
    }
}
