//! Spaces through the API, on SQLite and (when configured) PostgreSQL: personal spaces made
//! on first use, top-level spaces for admins, spaces below for their owners, roles that hold
//! downwards, members managed by owners, empty-only removal, workspaces created into a space
//! (where the caller is a developer) and listed by space, recursively.

mod common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

fn msg(b: &Value) -> &str {
    b["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("not an API error: {b}"))
}

fn enc(path: &str) -> String {
    path.replace('/', "%2F")
}

fn paths(b: &Value) -> Vec<String> {
    b.as_array()
        .expect("a list")
        .iter()
        .map(|s| s["path"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[tokio::test]
async fn spaces_roles_and_workspaces_in_them() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let eve = s.user("eve", &["api", "workspace"]).await;

        // A personal space is made on first use and owned by its user alone.
        let (st, b) = s
            .call(Method::GET, "/api/v1/spaces", Some(&ann), None)
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(paths(&b), ["users/ann"], "[{l}]");
        assert_eq!(b[0]["your_role"], "owner");

        // Top-level spaces are the admins'; bad paths are named.
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/spaces",
                Some(&ann),
                Some(json!({"path": "acme"})),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        for (path, needle) in [
            ("Acme", "segment \"Acme\""),
            ("users/mallory", "personal spaces"),
            ("a/b/c/d/e/f/g/h/i", "at most 8"),
        ] {
            let (st, b) = s
                .admin(Method::POST, "/api/v1/spaces", Some(json!({"path": path})))
                .await;
            assert_eq!(st, 400, "[{l}] {path}: {b}");
            assert!(msg(&b).contains(needle), "[{l}] {path}: {b}");
        }
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        let (st, _) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme"})),
            )
            .await;
        assert_eq!(st, 409, "[{l}]");

        // The admin hands it to ann, who builds below it and adds bob as a developer of a
        // team space; eve, with no role, sees nothing of it.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/spaces/acme/members/ann",
                Some(json!({"role": "owner"})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/spaces",
                Some(&ann),
                Some(json!({"path": "acme/platform"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(b["your_role"], "owner", "[{l}] inherited from acme");
        let (st, b) = s
            .call(
                Method::PUT,
                &format!("/api/v1/spaces/{}/members/bob", enc("acme/platform")),
                Some(&ann),
                Some(json!({"role": "developer"})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["role"], "developer");
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/spaces",
                Some(&bob),
                Some(json!({"path": "acme/platform/tools"})),
            )
            .await;
        assert_eq!(st, 403, "[{l}] a developer does not manage: {b}");
        assert!(msg(&b).contains("owner role"), "[{l}] {b}");
        let (st, _) = s
            .call(Method::GET, "/api/v1/spaces/acme", Some(&eve), None)
            .await;
        assert_eq!(st, 404, "[{l}] no role: not found");
        let (st, _) = s
            .call(
                Method::PUT,
                "/api/v1/spaces/acme/members/eve",
                Some(&bob),
                Some(json!({"role": "owner"})),
            )
            .await;
        assert_eq!(st, 404, "[{l}] bob has no role on acme itself");
        let (st, b) = s
            .call(Method::GET, "/api/v1/spaces", Some(&bob), None)
            .await;
        assert_eq!(st, 200);
        assert_eq!(paths(&b), ["acme/platform", "users/bob"], "[{l}]");
        let (st, b) = s.admin(Method::GET, "/api/v1/spaces", None).await;
        assert_eq!(st, 200);
        assert!(
            paths(&b).contains(&"users/bob".to_owned()) && paths(&b).contains(&"acme".to_owned()),
            "[{l}] admins see every space: {b}"
        );

        // Workspaces go into a space where their creator is a developer; the default is the
        // creator's personal space; viewers and strangers may not.
        let w = s
            .workspace(&bob, json!({"name": "plat-one", "space": "acme/platform"}))
            .await;
        assert_eq!(w["space"], "acme/platform", "[{l}]");
        let mine = s.workspace(&bob, json!({"name": "bobs-own"})).await;
        assert_eq!(mine["space"], "users/bob", "[{l}]");
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces",
                Some(&eve),
                Some(json!({"name": "sneaky", "space": "acme/platform"})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("no space \"acme/platform\""), "[{l}] {b}");
        let (st, _) = s
            .admin(
                Method::PUT,
                &format!("/api/v1/spaces/{}/members/eve", enc("acme/platform")),
                Some(json!({"role": "viewer"})),
            )
            .await;
        assert_eq!(st, 200);
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces",
                Some(&eve),
                Some(json!({"name": "sneaky", "space": "acme/platform"})),
            )
            .await;
        assert_eq!(st, 403, "[{l}] a viewer does not create: {b}");

        // Listing by space, and below it.
        let list = |q: &'static str| {
            let s = &s;
            async move {
                let (st, b) = s
                    .admin(Method::GET, &format!("/api/v1/workspaces?{q}"), None)
                    .await;
                assert_eq!(st, 200, "{b}");
                let mut names: Vec<String> = b["items"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|w| w["name"].as_str().unwrap().to_owned())
                    .collect();
                names.sort();
                names
            }
        };
        assert_eq!(list("space=acme").await, Vec::<String>::new(), "[{l}]");
        assert_eq!(
            list("space=acme&recursive=true").await,
            ["plat-one"],
            "[{l}]"
        );
        assert_eq!(list("space=users%2Fbob").await, ["bobs-own"], "[{l}]");
        let (st, b) = s
            .admin(Method::GET, "/api/v1/workspaces?recursive=true", None)
            .await;
        assert_eq!(st, 400, "[{l}] recursive needs a space: {b}");

        // Only empty spaces go; personal ones never through the API.
        let (st, b) = s
            .call(Method::DELETE, "/api/v1/spaces/acme", Some(&ann), None)
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("1 space(s)"), "[{l}] {b}");
        let (st, b) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/spaces/{}", enc("users/bob")),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, _) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme/empty"})),
            )
            .await;
        assert_eq!(st, 201);
        let (st, b) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/spaces/{}", enc("acme/empty")),
                Some(&ann),
                None,
            )
            .await;
        assert_eq!(st, 204, "[{l}] {b}");

        // Members are listed; a role taken away is gone.
        let (st, b) = s
            .call(
                Method::GET,
                &format!("/api/v1/spaces/{}/members", enc("acme/platform")),
                Some(&bob),
                None,
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let names: Vec<&str> = b
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["username"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["bob", "eve"], "[{l}]");
        let (st, _) = s
            .call(
                Method::DELETE,
                &format!("/api/v1/spaces/{}/members/eve", enc("acme/platform")),
                Some(&ann),
                None,
            )
            .await;
        assert_eq!(st, 204, "[{l}]");
        let (st, _) = s
            .call(
                Method::GET,
                &format!("/api/v1/spaces/{}", enc("acme/platform")),
                Some(&eve),
                None,
            )
            .await;
        assert_eq!(st, 404, "[{l}]");
        s.stop().await;
    }
}
