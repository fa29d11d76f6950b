//! The REST API through HTTP on SQLite and (when configured) PostgreSQL: authentication and
//! scopes, JSON errors, users, tokens, SSH keys, agents, projects and workspaces.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

#[tokio::test]
async fn authentication_scopes_and_json_errors() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let (st, b) = s.call(Method::GET, "/api/v1/users/me", None, None).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (401, Some("unauthorized")),
            "[{l}] {b}"
        );
        let (st, _) = s.get("wrn_pat_nonsense", "/api/v1/users/me").await;
        assert_eq!(st, 401);
        let (st, b) = s.admin(Method::GET, "/api/v1/users/me", None).await;
        assert_eq!(
            (st, b["username"].as_str(), b["is_admin"].as_bool()),
            (200, Some("admin"), Some(true))
        );

        // Scopes: read_api reads but cannot write; workspace-only cannot use the API.
        let reader = s.user("reader", &["read_api"]).await;
        let (st, _) = s.get(&reader, "/api/v1/workspaces").await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = s.post(&reader, "/api/v1/workspaces", json!({})).await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(msg(&b).contains("api"), "{b}");
        let ws_only = s.user("wsonly", &["workspace"]).await;
        let (st, _) = s.get(&ws_only, "/api/v1/users/me").await;
        assert_eq!(st, 403);

        // axum's own rejections come back in the one JSON error shape.
        let url = format!("{}/api/v1/agents", s.base);
        let r = s
            .http
            .post(&url)
            .bearer_auth(&s.admin_token)
            .header("content-type", "application/json")
            .body("{not json")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "invalid_json", "{b}");
        let (st, b) = s
            .admin(Method::POST, "/api/v1/agents", Some(json!({})))
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).contains("missing field `name`"), "{b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "a", "colour": "red"})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).contains("unknown field `colour`"), "{b}");
        let r = s
            .http
            .post(&url)
            .bearer_auth(&s.admin_token)
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 415);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "unsupported_media_type");
        let big = "x".repeat(5 * 1024 * 1024);
        let r = s
            .http
            .post(&url)
            .bearer_auth(&s.admin_token)
            .header("content-type", "application/json")
            .body(format!("{{\"name\": \"{big}\"}}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 413);
        let b: Value = r.json().await.unwrap();
        assert_eq!(b["error"]["code"], "body_too_large", "{b}");
        // Says what the caller can act on, and nothing of how the server is built.
        assert_eq!(
            b["error"]["message"],
            "the request body is too large: the API accepts at most 4 MiB"
        );
        let (st, b) = s.admin(Method::GET, "/api/v1/nothing-here", None).await;
        assert_eq!((st, b["error"]["code"].as_str()), (404, Some("not_found")));
        let (st, b) = s.admin(Method::PATCH, "/api/v1/agents", None).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (405, Some("method_not_allowed"))
        );
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?limit=abc", None)
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).contains("limit"), "{b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn users_sessions_and_tokens() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": "admin", "password": "wrong-password"})),
            )
            .await;
        assert_eq!(st, 401, "[{l}] {b}");
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/session",
                None,
                Some(json!({"username": "ghost", "password": "wrong-password"})),
            )
            .await;
        assert_eq!(st, 401, "{b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/users",
                Some(json!({"username": "Bad Name", "password": "password-123"})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("username"), "{b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/users",
                Some(json!({"username": "bob", "password": "short"})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("password"), "{b}");
        let bob = s.user("bob", &["api", "workspace"]).await;
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/users",
                Some(json!({"username": "bob", "password": "password-123"})),
            )
            .await;
        assert_eq!(st, 409, "{b}");
        let (st, _) = s.get(&bob, "/api/v1/users").await;
        assert_eq!(st, 403, "[{l}] users list is for admins");
        let (st, b) = s.admin(Method::GET, "/api/v1/users", None).await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(2)));

        // Tokens: shown once, listed without the secret, expire, revoke.
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/users/me/tokens",
                json!({"name": "ci", "scopes": ["read_api"], "expires_in_days": 1}),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        let ci = b["secret"].as_str().unwrap().to_owned();
        let ci_id = b["token"]["id"].as_i64().unwrap();
        assert!(ci.starts_with("wrn_pat_"));
        let (st, b) = s.get(&bob, "/api/v1/users/me/tokens").await;
        assert_eq!(st, 200);
        assert!(!b.to_string().contains(&ci), "secrets are never listed");
        assert_eq!(b.as_array().unwrap().len(), 2);
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/users/me/tokens",
                json!({"name": "x", "scopes": [], "expires_in_days": 1}),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("scopes"), "{b}");
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/users/me/tokens",
                json!({"name": "x", "scopes": ["api"], "expires_in_days": 999}),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("expires_in_days"), "{b}");
        let (st, _) = s.get(&ci, "/api/v1/users/me").await;
        assert_eq!(st, 200);
        // Another user cannot revoke bob's token.
        let (st, _) = s
            .admin(
                Method::DELETE,
                &format!("/api/v1/users/me/tokens/{ci_id}"),
                None,
            )
            .await;
        assert_eq!(st, 404);
        s.clock.advance_ms(86_400_000 + 1);
        let (st, _) = s.get(&ci, "/api/v1/users/me").await;
        assert_eq!(st, 401, "[{l}] expired");
        let (st, _) = s
            .delete(&bob, &format!("/api/v1/users/me/tokens/{ci_id}"))
            .await;
        assert_eq!(st, 204);
        let (st, b) = s.get(&bob, "/api/v1/users/me/tokens").await;
        assert_eq!(st, 200);
        assert!(
            b.as_array()
                .unwrap()
                .iter()
                .any(|t| t["id"] == ci_id && t["revoked"] == true),
            "{b}"
        );
        let (st, b) = s.delete(&bob, "/api/v1/users/me/tokens").await;
        assert_eq!(st, 405, "{b}");
        // Revoking the token in use locks it out at once.
        let (st, b) = s.get(&bob, "/api/v1/users/me/tokens").await;
        assert_eq!(st, 200);
        let own = b
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "warren login")
            .unwrap()["id"]
            .as_i64()
            .unwrap();
        let (st, _) = s
            .delete(&bob, &format!("/api/v1/users/me/tokens/{own}"))
            .await;
        assert_eq!(st, 204);
        let (st, _) = s.get(&bob, "/api/v1/users/me").await;
        assert_eq!(st, 401);
        s.stop().await;
    }
}

#[tokio::test]
async fn ssh_keys() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/users/me/ssh-keys",
                json!({"public_key": ED25519}),
            )
            .await;
        assert_eq!(st, 201, "[{}] {b}", s.label);
        assert_eq!(
            b["fingerprint"],
            "SHA256:3UeSlfl7JdmtYwloUUnOaHI4EYMxkz3LNHVRT0vbttQ"
        );
        assert_eq!(b["name"], "me@laptop");
        let id = b["id"].as_i64().unwrap();
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/users/me/ssh-keys",
                Some(json!({"public_key": ED25519})),
            )
            .await;
        assert_eq!(st, 409, "one key, one user: {b}");
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/users/me/ssh-keys",
                json!({"public_key": "ssh-ed25519 bm9wZQ=="}),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("public_key"), "{b}");
        let (st, b) = s.get(&bob, "/api/v1/users/me/ssh-keys").await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(1)));
        let (st, _) = s
            .admin(
                Method::DELETE,
                &format!("/api/v1/users/me/ssh-keys/{id}"),
                None,
            )
            .await;
        assert_eq!(st, 404, "not the admin's key");
        let (st, _) = s
            .delete(&bob, &format!("/api/v1/users/me/ssh-keys/{id}"))
            .await;
        assert_eq!(st, 204);
        let (st, b) = s.get(&bob, "/api/v1/users/me/ssh-keys").await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(0)));
        s.stop().await;
    }
}

#[tokio::test]
async fn agents_and_projects() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let (st, _) = s.post(&bob, "/api/v1/agents", json!({"name": "a"})).await;
        assert_eq!(st, 403, "[{l}] admins create agents");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "a1", "config": {"workspace_scheme": "gopher"}})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("config.workspace_scheme"), "{b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "a1", "config": {"workspace_quota": 1}})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).contains("workspace_quota"), "{b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "a1", "config": {"workspaces_quota": 5}})),
            )
            .await;
        assert_eq!(st, 201, "{b}");
        assert!(b["token"].as_str().unwrap().starts_with("wrn_agent_"));
        let (st, _) = s
            .admin(Method::POST, "/api/v1/agents", Some(json!({"name": "a1"})))
            .await;
        assert_eq!(st, 409);
        let (st, b) = s.get(&bob, "/api/v1/agents/a1").await;
        assert_eq!(st, 200);
        assert!(b.get("token").is_none());
        assert_eq!(b["config"]["workspaces_quota"], 5);
        let (st, b) = s.admin(Method::PUT, "/api/v1/agents/a1", Some(json!({"config": {"workspace_domain": "ws.example.com", "workspace_scheme": "https"}}))).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(b["config"]["workspace_domain"], "ws.example.com");
        let (st, _) = s.admin(Method::GET, "/api/v1/agents/nope", None).await;
        assert_eq!(st, 404);

        let (st, b) = s
            .post(
                &bob,
                "/api/v1/projects",
                json!({"name": "p1", "git_url": "not a url"}),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("git_url"), "{b}");
        let (st, b) = s.post(&bob, "/api/v1/projects", json!({"name": "p1", "git_url": "https://example.com/r.git", "devfile": "schemaVersion: 2.2.0\ncomponents:\n  - name: x\n    container: {}\n"}))
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(
            msg(&b).contains("components[0].container"),
            "the error names the path: {b}"
        );
        let (st, b) = s.post(&bob, "/api/v1/projects", json!({"name": "p1", "git_url": "https://example.com/r.git", "devfile": WEB_DEVFILE, "default_ref": "dev"}))
            .await;
        assert_eq!(st, 201, "{b}");
        assert_eq!(
            (b["has_devfile"].as_bool(), b["default_ref"].as_str()),
            (Some(true), Some("dev"))
        );
        let (st, _) = s
            .post(
                &bob,
                "/api/v1/projects",
                json!({"name": "p1", "git_url": "git@example.com:r.git"}),
            )
            .await;
        assert_eq!(st, 409);
        let (st, b) = s.get(&bob, "/api/v1/projects").await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(1)));
        // Private by default: another user sees nothing of it; its creator maintains it.
        assert_eq!(b[0]["visibility"], "private", "{b}");
        let carol = s.user("carol", &["api", "workspace"]).await;
        let (st, b) = s.get(&carol, "/api/v1/projects").await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(0)), "{b}");
        for m in [Method::GET, Method::DELETE] {
            let (st, _) = s.call(m, "/api/v1/projects/p1", Some(&carol), None).await;
            assert_eq!(st, 404, "[{l}]");
        }
        let (st, _) = s.delete(&bob, "/api/v1/projects/p1").await;
        assert_eq!(st, 204);
        let (st, _) = s.admin(Method::GET, "/api/v1/projects/p1", None).await;
        assert_eq!(st, 404);
        s.stop().await;
    }
}

#[tokio::test]
async fn an_agent_is_deleted_only_once_its_workspaces_are_gone_and_its_token_then_fails() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let agent = s.agent("short-lived", json!({})).await;
        let (st, _) = s.delete(&bob, "/api/v1/agents/short-lived").await;
        assert_eq!(st, 403, "[{l}] admins delete agents");
        let (st, _) = s.admin(Method::DELETE, "/api/v1/agents/nope", None).await;
        assert_eq!(st, 404, "[{l}]");

        s.workspace(&bob, json!({"name": "w1", "agent": "short-lived"}))
            .await;
        let (st, b) = s
            .admin(Method::DELETE, "/api/v1/agents/short-lived", None)
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(
            msg(&b).contains("still has 1 workspace"),
            "[{l}] the refusal says why: {b}"
        );
        // Terminated but not yet removed by the agent: still there.
        let (st, _) = s.delete(&bob, "/api/v1/workspaces/w1").await;
        assert!(st == 200 || st == 202 || st == 204, "[{l}] {st}");
        let (st, _) = s
            .admin(Method::DELETE, "/api/v1/agents/short-lived", None)
            .await;
        assert_eq!(st, 409, "[{l}] the agent has not removed it yet");
        s.reconcile_ok(
            agent,
            "partial",
            json!([{"name": "w1", "namespace": "warren-ws-w1", "termination_progress": "Terminated"}]),
        )
        .await;

        let (st, b) = s
            .admin(Method::DELETE, "/api/v1/agents/short-lived", None)
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, _) = s
            .admin(Method::GET, "/api/v1/agents/short-lived", None)
            .await;
        assert_eq!(st, 404, "[{l}]");
        // Its relay-vouched calls are refused from now on.
        let (st, _) = s
            .reconcile(
                agent,
                json!({"update_type": "full", "workspace_agent_infos": []}),
            )
            .await;
        assert_eq!(st, 401, "[{l}] a deleted agent's calls are refused");
        // The name is free again.
        s.agent("short-lived", json!({})).await;
        s.state.audit.flush().await;
        let (st, b) = s
            .admin(Method::GET, "/api/v1/audit?action=agent.delete", None)
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(
            b.to_string().contains("short-lived"),
            "[{l}] the deletion is audited: {b}"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn workspace_creation_rendering_quotas_and_visibility() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        let (st, b) = s.post(&bob, "/api/v1/workspaces", json!({})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("agent"), "no agent yet: {b}");
        s.agent("a1", json!({"workspaces_quota": 3, "workspaces_per_user_quota": 2, "workspace_domain": "ws.example.com:8443", "workspace_scheme": "https"})).await;
        s.admin(Method::POST, "/api/v1/projects", Some(json!({"name": "p1", "git_url": "https://example.com/r.git", "devfile": WEB_DEVFILE, "visibility": "internal"}))).await;

        // A broken devfile: 422 with every error and its path.
        let (st, b) = s.post(&bob, "/api/v1/workspaces", json!({"devfile": "schemaVersion: 2.2.0\ncomponents:\n  - name: a\n    container: {image: alpine, memoryLimit: lots}\n  - name: b\n    kubernetes: {uri: ../x}\n"}))
            .await;
        assert_eq!(st, 422, "{b}");
        assert_eq!(b["error"]["code"], "invalid_devfile");
        assert!(
            msg(&b).contains("components[0].container.memoryLimit")
                && msg(&b).contains("components[1].kubernetes.uri"),
            "{b}"
        );

        // Bad inputs name their field.
        for (body, field) in [
            (json!({"name": "Bad_Name"}), "name"),
            (json!({"resources": {"cpu": "lots"}}), "resources.cpu"),
            (
                json!({"variables": [{"key": "1X", "value": "v"}]}),
                "variables[0].key",
            ),
            (json!({"project": "nope"}), "project"),
            (json!({"agent": "nope"}), "agent"),
            // More environment than a process can be given: named before anything starts.
            (
                json!({"variables": [{"key": "BIG", "value": "x".repeat(130 * 1024)}]}),
                "variables[0].value",
            ),
            (
                json!({"variables": (0..3).map(|i| json!({"key": format!("V{i}"), "value": "x".repeat(100 * 1024)})).collect::<Vec<_>>()}),
                "variables: the environment variables take",
            ),
        ] {
            let (st, b) = s.post(&bob, "/api/v1/workspaces", body).await;
            assert_eq!(st, 400, "[{l}] {b}");
            assert!(msg(&b).starts_with(field), "[{l}] expected {field}: {b}");
        }

        // From the project's devfile, with URLs from the agent's domain and scheme.
        let w = s
            .workspace(
                &bob,
                json!({"project": "p1", "name": "bobs-ws", "variables": [
                {"key": "API_KEY", "value": "s3cr3t-value", "secret": true},
                {"key": "MODE", "value": "dev"}]}),
            )
            .await;
        assert_eq!(w["url"], "https://8080-bobs-ws.ws.example.com:8443/", "{w}");
        assert_eq!(
            w["endpoints"]["web"],
            "https://8080-bobs-ws.ws.example.com:8443/"
        );
        assert!(
            w["endpoints"].get("debug").is_none(),
            "internal endpoints get no URL: {w}"
        );
        assert_eq!(w["desired_state"], "Running");
        assert_eq!(w["actual_state"], "CreationRequested");
        assert_eq!(w["namespace"], "warren-ws-bobs-ws");
        assert_eq!(w["project_name"], "p1");
        assert!(
            w["variables"][0]["value"].is_null(),
            "secret values are never returned: {w}"
        );
        assert_eq!(w["variables"][1]["value"], "dev");
        let (st, _) = s
            .post(&carol, "/api/v1/workspaces", json!({"name": "bobs-ws"}))
            .await;
        assert_eq!(st, 409, "names are unique");

        // Secrets are encrypted at rest: neither the variables nor the rendered Secret hold the plain value.
        let pool = &s.state.store.db.pool;
        let rows: Vec<(String, String)> =
            sqlx::query_as("SELECT variables, rendered_objects FROM workspaces")
                .fetch_all(pool)
                .await
                .unwrap();
        for (vars, objs) in rows {
            assert!(
                !vars.contains("s3cr3t") && !objs.contains("s3cr3t") && !objs.contains("czNjcjN0"),
                "[{l}] plaintext at rest"
            );
        }
        let (_, body) = s
            .reconcile(
                1,
                json!({"update_type": "full", "workspace_agent_infos": []}),
            )
            .await;
        let yaml = body["workspace_rails_infos"][0]["config_to_apply"]
            .as_str()
            .unwrap();
        assert!(
            yaml.contains("API_KEY"),
            "the agent gets the variable: {yaml}"
        );

        // Quotas: per user (2) then per agent (3); the refusal names the quota and the count.
        s.workspace(&bob, json!({})).await;
        let (st, b) = s.post(&bob, "/api/v1/workspaces", json!({})).await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (403, Some("quota_exceeded")),
            "[{l}] {b}"
        );
        assert!(
            msg(&b).contains("workspaces_per_user_quota") && msg(&b).contains("2"),
            "{b}"
        );
        s.workspace(&carol, json!({})).await;
        let (st, b) = s.post(&carol, "/api/v1/workspaces", json!({})).await;
        assert_eq!(st, 403);
        assert!(
            msg(&b).contains("workspaces_quota") && msg(&b).contains("3"),
            "{b}"
        );
        // Terminated workspaces do not count.
        let (st, _) = s.delete(&bob, "/api/v1/workspaces/bobs-ws").await;
        assert_eq!(st, 200);
        s.workspace(&carol, json!({})).await;

        // Visibility: others' workspaces are 404; admins see everything.
        let (st, _) = s.get(&carol, "/api/v1/workspaces/bobs-ws").await;
        assert_eq!(st, 404);
        let (st, _) = s
            .put(
                &carol,
                "/api/v1/workspaces/bobs-ws/desired_state",
                json!({"desired_state": "Stopped"}),
            )
            .await;
        assert_eq!(st, 404);
        let (st, b) = s.get(&carol, "/api/v1/workspaces").await;
        assert_eq!(st, 200);
        assert!(
            b["items"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["owner_username"] == "carol"),
            "{b}"
        );
        // Filtering by another owner only narrows what the caller may see: none of bob's.
        let (st, b) = s.get(&carol, "/api/v1/workspaces?owner=bob").await;
        assert_eq!(
            (st, b["items"].as_array().map(Vec::len)),
            (200, Some(0)),
            "{b}"
        );
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?owner=bob", None)
            .await;
        assert_eq!(
            (st, b["items"].as_array().map(Vec::len)),
            (200, Some(2)),
            "{b}"
        );
        let (st, b) = s
            .admin(
                Method::GET,
                "/api/v1/workspaces?state=CreationRequested",
                None,
            )
            .await;
        assert_eq!(
            (st, b["items"].as_array().map(Vec::len)),
            (200, Some(4)),
            "{b}"
        );
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?state=running", None)
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("state"), "{b}");
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/workspaces/bobs-ws/desired_state",
                json!({"desired_state": "Paused"}),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).contains("Paused"), "{b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn pagination_and_filters() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        s.agent("a1", json!({})).await;
        s.agent("a2", json!({})).await;
        for i in 0..5 {
            s.workspace(
                &s.admin_token,
                json!({"name": format!("w{i}"), "agent": "a1"}),
            )
            .await;
        }
        s.workspace(&s.admin_token, json!({"name": "other", "agent": "a2"}))
            .await;
        let mut names = vec![];
        let mut cursor: Option<String> = None;
        let mut pages = 0;
        loop {
            let q = match &cursor {
                Some(c) => format!("/api/v1/workspaces?agent=a1&limit=2&cursor={c}"),
                None => "/api/v1/workspaces?agent=a1&limit=2".into(),
            };
            let (st, b) = s.admin(Method::GET, &q, None).await;
            assert_eq!(st, 200, "{b}");
            pages += 1;
            names.extend(
                b["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w["name"].as_str().unwrap().to_owned()),
            );
            match b["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(names, ["w0", "w1", "w2", "w3", "w4"], "[{}]", s.label);
        assert_eq!(pages, 3);
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?limit=0", None)
            .await;
        assert_eq!(st, 400, "{b}");
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?cursor=zzz", None)
            .await;
        assert_eq!(st, 400, "{b}");
        let (st, b) = s.admin(Method::GET, "/api/v1/workspaces/other", None).await;
        assert_eq!((st, b["agent_name"].as_str()), (200, Some("a2")));
        let id = b["id"].as_i64().unwrap();
        let (st, b) = s
            .admin(Method::GET, &format!("/api/v1/workspaces/{id}"), None)
            .await;
        assert_eq!((st, b["name"].as_str()), (200, Some("other")), "by id too");
        s.stop().await;
    }
}

#[tokio::test]
async fn resize_rerenders_and_restarts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s
            .agent(
                "a1",
                json!({"max_resources_per_workspace": {"limits": {"cpu": "4", "memory": "8Gi"}}}),
            )
            .await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w1", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/resources",
                Some(json!({"resources": {"cpu": "3", "memory": "6Gi"}})),
            )
            .await;
        assert_eq!(st, 200, "[{}] {b}", s.label);
        assert_eq!(b["desired_state"], "RestartRequested");
        assert_eq!(b["resources"]["cpu"], "3");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        let yaml = infos["w1"]["config_to_apply"].as_str().unwrap();
        assert!(
            yaml.contains("cpu: '3'")
                && yaml.contains("memory: 6Gi")
                && yaml.contains("replicas: 0"),
            "{yaml}"
        );
        let infos = s
            .reconcile_ok(agent, "partial", json!([stopped("w1", "2")]))
            .await;
        assert_eq!(infos["w1"]["desired_state"], "Running");
        assert!(infos["w1"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("replicas: 1"));
        // Over the agent's cap: refused with the reason.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/resources",
                Some(json!({"resources": {"cpu": "16"}})),
            )
            .await;
        assert_eq!(st, 422, "{b}");
        assert!(msg(&b).contains("max_resources_per_workspace"), "{b}");
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/resources",
                Some(json!({"resources": {"memory": "lots"}})),
            )
            .await;
        assert_eq!(st, 400);
        assert!(msg(&b).starts_with("resources.memory"), "{b}");
        s.stop().await;
    }
}

/// A resize names what changes and keeps the rest; it stays within what the agent's host
/// can give one workspace (as the agent reported it) and above the smallest useful size.
#[tokio::test]
async fn resize_keeps_what_it_does_not_name_and_stays_within_the_host() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w1", "devfile": WEB_DEVFILE}),
        )
        .await;
        // The agent's host: 2 CPUs, 4 GiB.
        let (st, b) = s
            .reconcile(
                agent,
                json!({"update_type": "full", "workspace_agent_infos": [running("w1", "1")],
                       "capacity": {"cpu_millis": 2000, "memory_bytes": 4u64 << 30}}),
            )
            .await;
        assert_eq!(st, 201, "[{}] {b}", s.label);
        let resize = |body: Value| {
            s.admin(
                Method::PUT,
                "/api/v1/workspaces/w1/resources",
                Some(json!({ "resources": body })),
            )
        };
        let (st, b) = resize(json!({"memory": "3Gi"})).await;
        assert_eq!(st, 200, "[{}] {b}", s.label);
        let (st, b) = resize(json!({"cpu": "1500m"})).await;
        assert_eq!(st, 200, "[{}] {b}", s.label);
        assert_eq!(
            b["resources"],
            json!({"cpu": "1500m", "memory": "3Gi"}),
            "[{}]",
            s.label
        );
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        let yaml = infos["w1"]["config_to_apply"].as_str().unwrap();
        assert!(
            yaml.contains("cpu: 1500m") && yaml.contains("memory: 3Gi"),
            "{yaml}"
        );

        for (body, field, words) in [
            (
                json!({"cpu": "64"}),
                "resources.cpu",
                "more than agent a1 can give one workspace (2 CPUs)",
            ),
            (
                json!({"memory": "64Gi"}),
                "resources.memory",
                "more than agent a1 can give one workspace (4096Mi)",
            ),
            (
                json!({"memory": "1Mi"}),
                "resources.memory",
                "below the smallest workspace size, 64Mi",
            ),
            (
                json!({"cpu": "1m"}),
                "resources.cpu",
                "below the smallest workspace size",
            ),
        ] {
            let (st, b) = resize(body.clone()).await;
            assert_eq!(st, 400, "[{}] {body}: {b}", s.label);
            assert!(
                msg(&b).starts_with(field) && msg(&b).contains(words),
                "[{}] {b}",
                s.label
            );
        }
        // Creating is held to the same limits.
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/workspaces",
                Some(json!({"name": "w2", "devfile": WEB_DEVFILE, "resources": {"cpu": "8"}})),
            )
            .await;
        assert_eq!(st, 400, "[{}] {b}", s.label);
        assert!(msg(&b).contains("more than agent a1 can give"), "{b}");
        // Nothing of the refused requests stuck.
        let (_, b) = s.admin(Method::GET, "/api/v1/workspaces/w1", None).await;
        assert_eq!(b["resources"], json!({"cpu": "1500m", "memory": "3Gi"}));
        s.stop().await;
    }
}

/// An agent that cannot see its runtime says so; the server shows it with the agent and on
/// each of its workspaces (their states are the last reported), sends nothing meanwhile, and
/// clears it with the next ordinary reconcile.
#[tokio::test]
async fn a_runtime_fault_is_shown_until_the_agent_sees_its_runtime_again() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = &s.label;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w1", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        let fault = "listing containers: error trying to connect: No such file or directory";
        for _ in 0..2 {
            let (st, b) = s
                .reconcile(
                    agent,
                    json!({"update_type": "partial", "workspace_agent_infos": [], "runtime_fault": fault}),
                )
                .await;
            assert_eq!(st, 201, "[{l}] {b}");
            assert_eq!(b["workspace_rails_infos"], json!([]), "[{l}] nothing to do");
        }
        let (_, a) = s.admin(Method::GET, "/api/v1/agents/a1", None).await;
        assert_eq!(a["runtime_fault"], fault, "[{l}] {a}");
        let since = a["runtime_fault_since"].clone();
        assert!(since.is_string(), "[{l}] {a}");
        let (_, w) = s.admin(Method::GET, "/api/v1/workspaces/w1", None).await;
        let shown = w["agent_fault"].as_str().unwrap_or_default();
        assert!(
            shown.starts_with("agent a1 cannot see its runtime since ")
                && shown.contains("warren agent show a1")
                && !shown.contains("No such file"),
            "[{l}] {w}"
        );
        assert_eq!(
            w["actual_state"], "Running",
            "[{l}] the last reported state stays"
        );

        s.reconcile_ok(agent, "partial", json!([])).await;
        let (_, a) = s.admin(Method::GET, "/api/v1/agents/a1", None).await;
        assert!(a["runtime_fault"].is_null(), "[{l}] cleared: {a}");
        let (_, w) = s.admin(Method::GET, "/api/v1/workspaces/w1", None).await;
        assert!(w["agent_fault"].is_null(), "[{l}] {w}");
        s.stop().await;
    }
}

/// An agent that cannot isolate workspaces says so with its full reconciles: the warning
/// shows on the agent and on each of its workspaces, survives partial reconciles, and goes
/// with the first full reconcile without it.
#[tokio::test]
async fn an_isolation_warning_is_shown_until_a_full_reconcile_clears_it() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = &s.label;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w1", "devfile": WEB_DEVFILE}),
        )
        .await;
        let warning = "workspaces on this agent are not isolated: the engine runs rootless";
        let (st, b) = s
            .reconcile(
                agent,
                json!({"update_type": "full", "workspace_agent_infos": [running("w1", "1")], "isolation_warning": warning}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.reconcile_ok(agent, "partial", json!([])).await;
        let (_, a) = s.admin(Method::GET, "/api/v1/agents/a1", None).await;
        assert_eq!(a["isolation_warning"], warning, "[{l}] {a}");
        let (_, w) = s.admin(Method::GET, "/api/v1/workspaces/w1", None).await;
        assert_eq!(w["isolation_warning"], warning, "[{l}] {w}");
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        let (_, a) = s.admin(Method::GET, "/api/v1/agents/a1", None).await;
        assert!(a.get("isolation_warning").is_none(), "[{l}] cleared: {a}");
        let (_, w) = s.admin(Method::GET, "/api/v1/workspaces/w1", None).await;
        assert!(w.get("isolation_warning").is_none(), "[{l}] {w}");
        s.stop().await;
    }
}

#[tokio::test]
async fn bootstrap_admin_happens_once() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let mut config = warren_server::ServerConfig::new(s.db.dir.path().join("home"));
        config.database_url = Some(s.db.url.clone());
        config.relay_secret = Some(RELAY_SECRET.into());
        let again = warren_server::Server::prepare(config).await.unwrap();
        assert!(
            again.bootstrap_admin().is_none(),
            "[{}] a second start creates no admin",
            s.label
        );
        let (st, b) = s.admin(Method::GET, "/api/v1/users", None).await;
        assert_eq!((st, b.as_array().map(Vec::len)), (200, Some(1)));
        s.stop().await;
    }
}

#[tokio::test]
async fn health_readiness_metrics_and_openapi() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    let get = |p: &str| s.http.get(format!("{}{p}", s.base)).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    assert_eq!(get("/readyz").await.unwrap().status(), 200);
    s.agent("a1", json!({})).await;
    s.workspace(&s.admin_token, json!({})).await;
    s.reconcile_ok(1, "full", json!([])).await;
    let text = get("/metrics").await.unwrap().text().await.unwrap();
    assert!(text.contains("warren_http_requests_total"), "{text}");
    assert!(text.contains("warren_reconcile_total"), "{text}");
    assert!(
        text.contains(
            "warren_workspaces{desired_state=\"Running\",actual_state=\"CreationRequested\"} 1"
        ),
        "{text}"
    );
    let doc: Value = get("/api/v1/openapi.json")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(doc["paths"]["/api/v1/workspaces"]["post"].is_object());
    insta::assert_snapshot!("openapi", warren_server::http::openapi::document());
    // Without `ssh_public_address` there is no SSH to tell about; anonymous callers get 401.
    let access: Value = s
        .http
        .get(format!("{}/api/v1/access", s.base))
        .bearer_auth(&s.admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(access, json!({"ssh": null}));
    assert_eq!(get("/api/v1/access").await.unwrap().status(), 401);
    s.stop().await;
}

#[tokio::test]
async fn agent_config_change_rerenders_and_restarts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w1", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.workspace(
            &s.admin_token,
            json!({"name": "w2", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.admin(
            Method::PUT,
            "/api/v1/workspaces/w2/desired_state",
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
        s.reconcile_ok(
            agent,
            "full",
            json!([running("w1", "1"), stopped("w2", "1")]),
        )
        .await;
        // Same configuration again: nothing to restart.
        let (st, _) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(json!({"config": {}})),
            )
            .await;
        assert_eq!(st, 200);
        assert!(
            s.reconcile_ok(agent, "partial", json!([])).await.is_empty(),
            "[{}] unchanged objects",
            s.label
        );
        // New labels change every object: the running one restarts, the stopped one stays stopped.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(json!({"config": {"labels": {"team": "blue"}}})),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(
            infos["w1"]["desired_state"], "RestartRequested",
            "[{}]",
            s.label
        );
        assert_eq!(infos["w2"]["desired_state"], "Stopped");
        assert!(infos["w1"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("team: blue"));
        assert!(infos["w2"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("team: blue"));
        // A cap the workspace exceeds: it keeps its objects and says why.
        let (st, _) = s
            .admin(Method::PUT, "/api/v1/agents/a1", Some(json!({"config": {"max_resources_per_workspace": {"limits": {"cpu": "500m", "memory": "512Mi"}}}})))
            .await;
        assert_eq!(st, 200);
        let (_, w) = s.admin(Method::GET, "/api/v1/workspaces/w2", None).await;
        assert!(
            w["failure_reason"]
                .as_str()
                .is_some_and(|r| r.contains("max_resources_per_workspace")),
            "{w}"
        );
        s.stop().await;
    }
}

/// Password guessing: after a few failures the account is slowed down, even for the right
/// password, with `429` and `Retry-After`; once the wait has passed the right password works
/// and clears the count. The same throttle guards the OAuth login form (tests/oauth.rs).
#[tokio::test]
async fn password_guessing_is_slowed_down() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    s.user("victim", &["api"]).await;
    let login = |password: &'static str| {
        let req = s
            .http
            .post(format!("{}/api/v1/session", s.base))
            .json(&json!({"username": "victim", "password": password}));
        async move {
            let r = req.send().await.expect("request");
            let retry = r
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap_or(Value::Null);
            (status, retry, body)
        }
    };
    for _ in 0..5 {
        assert_eq!(login("not-the-password").await.0, 401);
    }
    let (st, retry, b) = login("password-123").await;
    assert_eq!((st, retry.as_deref()), (429, Some("1")), "{b}");
    assert_eq!(b["error"]["code"], "too_many_attempts", "{b}");
    assert!(msg(&b).contains("try again in 1 s"), "{b}");
    // Another account from the same address is not held up by this one.
    let (st, _) = s
        .call(
            Method::POST,
            "/api/v1/session",
            None,
            Some(json!({"username": "admin", "password": s.admin_password})),
        )
        .await;
    assert_eq!(st, 201);
    s.clock.advance_ms(1000);
    assert_eq!(login("still-wrong").await.0, 401);
    // The wait doubles after each further failure.
    let (st, retry, _) = login("password-123").await;
    assert_eq!((st, retry.as_deref()), (429, Some("2")));
    s.clock.advance_ms(2000);
    assert_eq!(login("password-123").await.0, 201);
    // A success starts the account afresh: five more free failures.
    for _ in 0..5 {
        assert_eq!(login("not-the-password").await.0, 401);
    }
    assert_eq!(login("password-123").await.0, 429);
}

/// Behind a trusted reverse proxy the throttle counts the client `X-Forwarded-For` names,
/// so one guesser does not slow everyone behind the proxy down; from an untrusted peer the
/// header is ignored (anyone can write it).
#[tokio::test]
async fn the_address_throttle_believes_forwarded_for_only_from_trusted_proxies() {
    let attempt = |s: &TestServer, user: String, from: &'static str| {
        let req = s
            .http
            .post(format!("{}/api/v1/session", s.base))
            .header("x-forwarded-for", from)
            .json(&json!({"username": user, "password": "not-the-password"}));
        async move { req.send().await.expect("request").status().as_u16() }
    };
    for trusted in [true, false] {
        let s = TestServer::start_with(&DbChoice::Sqlite, |c| {
            if trusted {
                c.trusted_proxies = vec!["127.0.0.0/8".parse().unwrap()];
            }
        })
        .await;
        // One address sprays one failure at each of 20 accounts: its free failures.
        for i in 0..20 {
            assert_eq!(attempt(&s, format!("user{i}"), "198.51.100.7").await, 401);
        }
        assert_eq!(
            attempt(&s, "fresh".into(), "198.51.100.7").await,
            429,
            "trusted={trusted}: the spraying address waits"
        );
        let other = attempt(&s, "fresh2".into(), "198.51.100.8").await;
        if trusted {
            assert_eq!(other, 401, "another client behind the proxy is not held up");
        } else {
            assert_eq!(other, 429, "untrusted: the header is ignored, one address");
        }
        s.stop().await;
    }
}

/// An agent configuration whose labels, annotations or pull secrets Kubernetes would refuse
/// on every workspace object is refused when it is given, naming the key.
#[tokio::test]
async fn agent_metadata_is_checked_against_kubernetes_rules_up_front() {
    let s = TestServer::start(&DbChoice::Sqlite).await;
    for (config, field) in [
        (
            json!({"labels": {"bad key!": "x"}}),
            "config.labels.bad key!",
        ),
        (
            json!({"labels": {"team": "two words"}}),
            "config.labels.team",
        ),
        (json!({"annotations": {"x/y/z": "a"}}), "config.annotations"),
        (
            json!({"image_pull_secrets": [{"name": "Not_A_Name", "namespace": "default"}]}),
            "config.image_pull_secrets[0].name",
        ),
    ] {
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "a1", "config": config})),
            )
            .await;
        assert_eq!(st, 400, "{b}");
        assert!(msg(&b).starts_with(field), "{field}: {b}");
    }
    let (st, b) = s
        .admin(
            Method::POST,
            "/api/v1/agents",
            Some(json!({"name": "a1", "config": {"labels": {"example.com/team": "platform"}, "annotations": {"note": "any text at all"}}})),
        )
        .await;
    assert_eq!(st, 201, "{b}");
    s.stop().await;
}

/// `GET …?watch_version=` answers as soon as the workspace changes (here: its agent reports
/// it running), at once when the version already differs, and with the workspace as it is
/// when the time runs out; bad bounds are refused by name.
#[tokio::test]
async fn watching_a_workspace_answers_on_its_next_change() {
    for db in databases() {
        let s = std::sync::Arc::new(TestServer::start(&db).await);
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let w = s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        let v = w["version"].as_i64().expect("version");
        assert!(v > 0, "[{l}] {w}");

        let (st, b) = s
            .admin(
                Method::GET,
                &format!("/api/v1/workspaces/w1?watch_version={}", v - 1),
                None,
            )
            .await;
        assert_eq!((st, b["version"].as_i64()), (200, Some(v)), "[{l}] at once");

        let watcher = {
            let s = s.clone();
            tokio::spawn(async move {
                s.admin(
                    Method::GET,
                    &format!("/api/v1/workspaces/w1?watch_version={v}&timeout_seconds=60"),
                    None,
                )
                .await
            })
        };
        s.reconcile_ok(agent, "partial", json!([running("w1", "7")]))
            .await;
        let (st, b) = watcher.await.unwrap();
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b["version"].as_i64().unwrap() > v, "[{l}] {b}");
        assert_eq!(b["actual_state"], "Running", "[{l}] {b}");

        let now = b["version"].as_i64().unwrap();
        let (st, b) = s
            .admin(
                Method::GET,
                &format!("/api/v1/workspaces/w1?watch_version={now}&timeout_seconds=1"),
                None,
            )
            .await;
        assert_eq!(
            (st, b["version"].as_i64()),
            (200, Some(now)),
            "[{l}] unchanged"
        );
        let (st, b) = s
            .admin(
                Method::GET,
                "/api/v1/workspaces/w1?watch_version=1&timeout_seconds=0",
                None,
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("timeout_seconds"), "[{l}] {b}");
        match std::sync::Arc::try_unwrap(s) {
            Ok(s) => s.stop().await,
            Err(_) => panic!("server still shared"),
        }
    }
}

#[tokio::test]
async fn a_workspace_says_what_warren_did_with_its_devfile() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("local", json!({})).await;
        let t = s.user("alice", &["api"]).await;
        let devfile = "schemaVersion: 2.2.0\ncomponents:\n  - name: a\n    container: {image: busybox}\n  - name: b\n    container: {image: busybox}\nstarterProjects:\n  - name: s\n    git: {remotes: {origin: https://example.com/s.git}}\n  - name: u\n    git: {remotes: {origin: https://example.com/u.git}}\n";
        let w = s
            .workspace(&t, json!({"name": "noticed", "devfile": devfile}))
            .await;
        let notices = |w: &Value| -> Vec<String> {
            w["notices"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let created = notices(&w);
        assert!(
            created
                .iter()
                .any(|n| n.starts_with("components: 2 containers (a, b)")
                    && n.contains("Warren chose \"a\"")),
            "[{l}] {created:?}"
        );
        assert!(
            created.iter().any(|n| n.contains("\"s\" was cloned")),
            "[{l}] {created:?}"
        );
        let (st, got) = s.get(&t, "/api/v1/workspaces/noticed").await;
        assert_eq!(st, 200, "[{l}]");
        assert_eq!(notices(&got), created, "[{l}] the same on reading it");
        let (_, list) = s.get(&t, "/api/v1/workspaces").await;
        assert!(
            list["items"][0].get("notices").is_none(),
            "[{l}] not in lists: {list}"
        );

        // Another starter, by name; one the devfile does not offer is refused naming them.
        let w = s
            .workspace(
                &t,
                json!({"name": "second", "devfile": devfile, "starter": "u"}),
            )
            .await;
        assert!(
            notices(&w).iter().any(|n| n.contains("\"u\" was cloned")),
            "[{l}] {w}"
        );
        let (st, e) = s
            .post(
                &t,
                "/api/v1/workspaces",
                json!({"name": "third", "devfile": devfile, "starter": "nope"}),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("starter: the devfile has no starter project \"nope\" (it has s, u)"),
            "[{l}] {e}"
        );
        s.stop().await;
    }
}
