//! Spaces through the API, on SQLite and (when configured) PostgreSQL: personal spaces made
//! on first use, top-level spaces for admins, spaces below for their owners, roles that hold
//! downwards, members managed by owners, empty-only removal, workspaces created into a space
//! (where the caller is a developer) and listed by space, recursively; and the roles deciding
//! what each user may do with a workspace, over the API and the proxy's and SSH's questions.

use crate::common;

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
        let (st, b) = s.get(&ann, "/api/v1/spaces").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(paths(&b), ["users/ann"], "[{l}]");
        assert_eq!(b[0]["your_role"], "owner");

        // Top-level spaces are the admins'; bad paths are named.
        let (st, b) = s
            .post(&ann, "/api/v1/spaces", json!({"path": "acme"}))
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
            .post(&ann, "/api/v1/spaces", json!({"path": "acme/platform"}))
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(b["your_role"], "owner", "[{l}] inherited from acme");
        let (st, b) = s
            .put(
                &ann,
                &format!("/api/v1/spaces/{}/members/bob", enc("acme/platform")),
                json!({"role": "developer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["role"], "developer");
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/spaces",
                json!({"path": "acme/platform/tools"}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] a developer does not manage: {b}");
        assert!(msg(&b).contains("owner role"), "[{l}] {b}");
        let (st, _) = s.get(&eve, "/api/v1/spaces/acme").await;
        assert_eq!(st, 404, "[{l}] no role: not found");
        let (st, _) = s
            .put(
                &bob,
                "/api/v1/spaces/acme/members/eve",
                json!({"role": "owner"}),
            )
            .await;
        assert_eq!(st, 404, "[{l}] bob has no role on acme itself");
        let (st, b) = s.get(&bob, "/api/v1/spaces").await;
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
            .post(
                &eve,
                "/api/v1/workspaces",
                json!({"name": "sneaky", "space": "acme/platform"}),
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
            .post(
                &eve,
                "/api/v1/workspaces",
                json!({"name": "sneaky", "space": "acme/platform"}),
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
        let (st, b) = s.delete(&ann, "/api/v1/spaces/acme").await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("1 space(s)"), "[{l}] {b}");
        let (st, b) = s
            .delete(&bob, &format!("/api/v1/spaces/{}", enc("users/bob")))
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
            .delete(&ann, &format!("/api/v1/spaces/{}", enc("acme/empty")))
            .await;
        assert_eq!(st, 204, "[{l}] {b}");

        // Members are listed; a role taken away is gone.
        let (st, b) = s
            .get(
                &bob,
                &format!("/api/v1/spaces/{}/members", enc("acme/platform")),
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
            .delete(
                &ann,
                &format!("/api/v1/spaces/{}/members/eve", enc("acme/platform")),
            )
            .await;
        assert_eq!(st, 204, "[{l}]");
        let (st, _) = s
            .get(&eve, &format!("/api/v1/spaces/{}", enc("acme/platform")))
            .await;
        assert_eq!(st, 404, "[{l}]");
        s.stop().await;
    }
}

/// The authorisation matrix of issue 21 over one workspace in `acme/platform`: its owner, an
/// owner of `acme` (the role held downwards), a developer and a viewer of `acme/platform`, a
/// developer of the sibling `acme/sibling`, a user with no role, and an admin — through the
/// API (see, use, manage), the proxy's access question, SSH's, and the stopped page's button.
/// Run twice: with each role given to the user, and (issue 44) with each given to a group
/// the user is in, which must decide exactly the same.
#[tokio::test]
async fn roles_decide_what_each_user_may_do_with_a_workspace() {
    for db in databases() {
        for via in ["user", "group"] {
            roles_matrix(&db, via).await;
        }
    }
}

async fn roles_matrix(db: &DbChoice, via: &str) {
    {
        let s = TestServer::start(db).await;
        let l = format!("{} via {via}", s.label);
        let l = l.as_str();
        s.agent("a1", json!({})).await;
        for path in ["acme", "acme/platform", "acme/sibling"] {
            let (st, b) = s
                .admin(Method::POST, "/api/v1/spaces", Some(json!({"path": path})))
                .await;
            assert_eq!(st, 201, "[{l}] {path}: {b}");
        }
        let mut tokens = std::collections::BTreeMap::new();
        let mut ids = std::collections::BTreeMap::new();
        for (user, space, role) in [
            ("wendy", "acme/platform", Some("developer")),
            ("olga", "acme", Some("owner")),
            ("dev", "acme/platform", Some("developer")),
            ("viv", "acme/platform", Some("viewer")),
            ("sib", "acme/sibling", Some("developer")),
            ("non", "", None),
        ] {
            let t = s.user(user, &["api", "workspace"]).await;
            if let Some(role) = role {
                let holder = if via == "group" {
                    let group = format!("team-{user}");
                    let (st, b) = s
                        .admin(Method::POST, "/api/v1/groups", Some(json!({"name": group})))
                        .await;
                    assert_eq!(st, 201, "[{l}] {b}");
                    let (st, b) = s
                        .admin(
                            Method::PUT,
                            &format!("/api/v1/groups/{group}/members/{user}"),
                            None,
                        )
                        .await;
                    assert_eq!(st, 200, "[{l}] {b}");
                    format!("groups/{group}")
                } else {
                    format!("members/{user}")
                };
                let (st, b) = s
                    .admin(
                        Method::PUT,
                        &format!("/api/v1/spaces/{}/{holder}", enc(space)),
                        Some(json!({"role": role})),
                    )
                    .await;
                assert_eq!(st, 200, "[{l}] {user}: {b}");
            }
            let (st, b) = s.get(&t, "/api/v1/users/me").await;
            assert_eq!(st, 200, "[{l}] {b}");
            ids.insert(user, b["id"].as_i64().unwrap());
            tokens.insert(user, t);
        }
        let admin = s.admin_token.clone();
        let (st, b) = s.get(&admin, "/api/v1/users/me").await;
        assert_eq!(st, 200, "[{l}] {b}");
        ids.insert("admin", b["id"].as_i64().unwrap());
        // The admin became the owner of `acme` by making it; the matrix wants an admin with no
        // role (admins manage through the API, but do not use others' workspaces as such).
        let admin_name = b["username"].as_str().unwrap().to_owned();
        let (st, b) = s
            .admin(
                Method::DELETE,
                &format!("/api/v1/spaces/acme/members/{admin_name}"),
                None,
            )
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        tokens.insert("admin", admin);
        let w = s
            .workspace(
                &tokens["wendy"],
                json!({"name": "plat-ws", "space": "acme/platform", "devfile": WEB_DEVFILE}),
            )
            .await;
        let wid = w["id"].as_i64().unwrap();
        let everyone = ["wendy", "olga", "dev", "viv", "sib", "non", "admin"];
        let call = |who: &'static str, method: Method, path: String, body: Option<Value>| {
            let s = &s;
            let t = tokens[who].clone();
            async move { s.call(method, &path, Some(&t), body).await }
        };

        // Seeing: everyone with a role there or above, and admins; the rest get 404, and
        // their lists leave it out.
        for who in everyone {
            let (st, b) = call(who, Method::GET, "/api/v1/workspaces/plat-ws".into(), None).await;
            let sees = !matches!(who, "sib" | "non");
            assert_eq!(st, if sees { 200 } else { 404 }, "[{l}] {who} GET: {b}");
            let right = match who {
                "wendy" | "olga" | "admin" => json!("manage"),
                "dev" => json!("use"),
                "viv" => json!("see"),
                _ => Value::Null,
            };
            assert_eq!(b["your_right"], right, "[{l}] {who}: {b}");
            let (st, b) = call(who, Method::GET, "/api/v1/workspaces".into(), None).await;
            assert_eq!(st, 200, "[{l}] {b}");
            let listed = b["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|w| w["name"] == "plat-ws");
            assert_eq!(listed, sees, "[{l}] {who} lists it: {b}");
        }
        let (st, b) = call(
            "viv",
            Method::GET,
            "/api/v1/workspaces?space=acme&recursive=true".into(),
            None,
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["items"].as_array().map(Vec::len), Some(1), "[{l}] {b}");

        // The tree: each sees the spaces where they hold a role and the entries in them.
        let tree = |who: &'static str, q: &'static str| {
            let call = &call;
            async move {
                let (st, b) = call(who, Method::GET, format!("/api/v1/tree{q}"), None).await;
                let drawn: Vec<(String, Vec<String>)> = b["spaces"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|s| {
                                let entries = s["entries"]
                                    .as_array()
                                    .unwrap()
                                    .iter()
                                    .map(|e| {
                                        format!("{} {}", e["name"].as_str().unwrap(), e["kind"])
                                    })
                                    .collect();
                                (s["path"].as_str().unwrap().to_owned(), entries)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                (st, drawn)
            }
        };
        let plat = || {
            (
                "acme/platform".to_owned(),
                vec!["plat-ws \"workspace\"".to_owned()],
            )
        };
        assert_eq!(
            tree("viv", "").await,
            (200, vec![plat(), ("users/viv".to_owned(), vec![])]),
            "[{l}]"
        );
        assert_eq!(
            tree("admin", "?space=acme").await,
            (
                200,
                vec![
                    ("acme".to_owned(), vec![]),
                    plat(),
                    ("acme/sibling".to_owned(), vec![])
                ]
            ),
            "[{l}]"
        );
        assert_eq!(
            tree("olga", "?space=acme%2Fplatform").await,
            (200, vec![plat()]),
            "[{l}]"
        );
        assert_eq!(tree("sib", "?space=acme%2Fplatform").await.0, 404, "[{l}]");
        assert_eq!(tree("non", "?space=acme").await.0, 404, "[{l}]");

        // Using (stop and start, logs) and managing (resize, terminate): viewers are told
        // what they lack, strangers still get 404.
        let resize = json!({"resources": {"memory": "512Mi"}});
        for (who, op, want) in [
            ("viv", "stop", 403),
            ("sib", "stop", 404),
            ("non", "stop", 404),
            ("viv", "logs", 403),
            ("sib", "logs", 404),
            ("dev", "resize", 403),
            ("viv", "resize", 403),
            ("non", "resize", 404),
            ("dev", "terminate", 403),
            ("viv", "terminate", 403),
            ("sib", "terminate", 404),
        ] {
            let (method, path, body) = match op {
                "stop" => (
                    Method::PUT,
                    "desired_state",
                    Some(json!({"desired_state": "Stopped"})),
                ),
                "logs" => (Method::GET, "logs", None),
                "resize" => (Method::PUT, "resources", Some(resize.clone())),
                _ => (Method::DELETE, "", None),
            };
            let path = format!("/api/v1/workspaces/plat-ws/{path}");
            let path = path.trim_end_matches('/').to_owned();
            let (st, b) = call(who, method, path, body).await;
            assert_eq!(st, want, "[{l}] {who} {op}: {b}");
            if want == 403 {
                assert!(
                    msg(&b).contains("role on its space"),
                    "[{l}] {who} {op}: {b}"
                );
            }
        }
        let (st, b) = call(
            "dev",
            Method::GET,
            "/api/v1/workspaces/plat-ws/logs".into(),
            None,
        )
        .await;
        assert!(
            st != 403 && st != 404,
            "[{l}] a developer may read the logs (no agent is connected here): {st} {b}"
        );

        // The proxy's question: who may reach port 8080. Admins as such may not.
        for who in everyone {
            let (st, b) = s
                .get(
                    &proxy_jwt(),
                    &format!(
                        "/internal/workspaces/access?host=plat-ws&port=8080&user={}",
                        ids[who]
                    ),
                )
                .await;
            let uses = matches!(who, "wendy" | "olga" | "dev");
            assert_eq!(st, if uses { 200 } else { 404 }, "[{l}] {who} proxy: {b}");
            // SSH with the user's token as the password, answering who connects.
            let (st, b) = s
                .get(
                    &proxy_jwt(),
                    &format!(
                        "/internal/ssh/authorize?username=plat-ws&token={}",
                        tokens[who]
                    ),
                )
                .await;
            assert_eq!(st, if uses { 200 } else { 404 }, "[{l}] {who} ssh: {b}");
            if uses {
                assert_eq!(b["username"], who, "[{l}] the session names who connects");
            }
        }

        // A developer stops it; the stopped page's button starts it for developers only.
        let (st, b) = call(
            "dev",
            Method::PUT,
            "/api/v1/workspaces/plat-ws/desired_state".into(),
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        for (who, want) in [("viv", 404), ("non", 404), ("admin", 404), ("dev", 200)] {
            let (st, b) = s
                .post(
                    &proxy_jwt(),
                    "/internal/workspaces/start",
                    json!({"workspace_id": wid, "user_id": ids[who]}),
                )
                .await;
            assert_eq!(st, want, "[{l}] {who} start button: {b}");
        }

        // The owner of a space above manages it: resize, then terminate.
        let (st, b) = call(
            "olga",
            Method::PUT,
            "/api/v1/workspaces/plat-ws/resources".into(),
            Some(resize.clone()),
        )
        .await;
        assert_ne!(st, 403, "[{l}] {b}");
        assert_ne!(st, 404, "[{l}] {b}");
        let (st, b) = call(
            "olga",
            Method::DELETE,
            "/api/v1/workspaces/plat-ws".into(),
            None,
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["desired_state"], "Terminated", "[{l}]");

        // A role taken away (or the user taken out of the group) takes the rights with it.
        let taken = if via == "group" {
            "/api/v1/groups/team-dev/members/dev".to_owned()
        } else {
            format!("/api/v1/spaces/{}/members/dev", enc("acme/platform"))
        };
        let (st, _) = s.admin(Method::DELETE, &taken, None).await;
        assert_eq!(st, 204, "[{l}]");
        let (st, _) = call(
            "dev",
            Method::GET,
            "/api/v1/workspaces/plat-ws".into(),
            None,
        )
        .await;
        assert_eq!(st, 404, "[{l}] no role left");
        s.stop().await;
    }
}
