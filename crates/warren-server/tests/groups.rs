//! Groups (issue 44), on SQLite and PostgreSQL: who may make and fill them, names that are
//! refused, a group's role on a space giving each member what a direct role gives (and
//! losing it with the membership, the role or the group), `oidc` groups filled only from
//! the provider's claim, their memberships ending at the next sign-in that leaves them out
//! or when their time runs out (simulated clock), and every change in the audit log.
//! The authorisation matrix through groups is `spaces.rs`; a real provider's claim, `sso.rs`.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_server::store::users::UserRow;

fn enc(path: &str) -> String {
    path.replace('/', "%2F")
}

async fn user_row(s: &TestServer, name: &str) -> UserRow {
    s.state
        .store
        .user_by_name(name)
        .await
        .expect("query")
        .expect("the user")
}

/// The names of the workspaces `token` lists.
async fn listed(s: &TestServer, token: &str) -> Vec<String> {
    let (st, b) = s.get(token, "/api/v1/workspaces").await;
    assert_eq!(st, 200, "{b}");
    b["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_groups_role_is_each_members_and_ends_with_the_membership() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let olga = s.user("olga", &["api", "workspace"]).await;
        let ann = s.user("ann", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        s.space("acme").await;
        s.member("acme", "olga", "owner").await;
        s.space("acme/platform").await;
        s.workspace(
            &olga,
            json!({"name": "plat-ws", "space": "acme/platform", "devfile": WEB_DEVFILE}),
        )
        .await;

        // Only admins make groups; names are checked; a name is taken once.
        let (st, b) = s
            .post(&olga, "/api/v1/groups", json!({"name": "platform"}))
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        for bad in ["", " padded", "tab\there", &"x".repeat(129)] {
            let (st, b) = s
                .admin(Method::POST, "/api/v1/groups", Some(json!({"name": bad})))
                .await;
            assert_eq!(st, 400, "[{l}] {bad:?}: {b}");
            assert!(msg(&b).contains("name"), "[{l}] {b}");
        }
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/groups",
                Some(json!({"name": "platform", "description": "The platform team"})),
            )
            .await;
        assert_eq!((st, &b["source"]), (201, &json!("local")), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/groups",
                Some(json!({"name": "platform"})),
            )
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/groups",
                Some(json!({"name": "/acme/sre", "source": "oidc"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");

        // Members: admins add them to local groups only; the group's members and admins
        // see who is in it.
        let (st, b) = s
            .put(&olga, "/api/v1/groups/platform/members/ann", json!(null))
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        for who in ["ann", "olga"] {
            let (st, b) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/groups/platform/members/{who}"),
                    None,
                )
                .await;
            assert_eq!(st, 200, "[{l}] {b}");
        }
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/groups/%2Facme%2Fsre/members/bob",
                None,
            )
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("identity provider"), "[{l}] {b}");
        let (st, b) = s
            .admin(Method::PUT, "/api/v1/groups/platform/members/nobody", None)
            .await;
        assert_eq!(st, 404, "[{l}] {b}");
        let (st, b) = s.get(&ann, "/api/v1/groups/platform").await;
        assert_eq!(st, 200, "[{l}] {b}");
        let names: Vec<&str> = b["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["username"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["ann", "olga"], "[{l}] {b}");
        let (st, b) = s.get(&bob, "/api/v1/groups/platform").await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s.get(&bob, "/api/v1/groups").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b.as_array().map(Vec::len), Some(2), "[{l}] {b}");
        assert_eq!(b[1]["members"], 2, "[{l}] {b}");

        // Before any role, ann sees nothing of acme.
        assert!(listed(&s, &ann).await.is_empty(), "[{l}]");
        // The space's owner (not an admin) gives the group a role; not on a personal space
        // (ann's, made at her first look at the tree).
        let (st, _) = s.get(&ann, "/api/v1/tree").await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = s
            .put(
                &olga,
                &format!("/api/v1/spaces/{}/groups/platform", enc("acme/platform")),
                json!({"role": "developer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = s
            .put(
                &ann,
                &format!("/api/v1/spaces/{}/groups/platform", enc("users/ann")),
                json!({"role": "viewer"}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s
            .put(
                &bob,
                &format!("/api/v1/spaces/{}/groups/platform", enc("acme/platform")),
                json!({"role": "owner"}),
            )
            .await;
        assert_eq!(
            st, 404,
            "[{l}] a stranger does not learn the space exists: {b}"
        );
        let (st, b) = s
            .get(
                &ann,
                &format!("/api/v1/spaces/{}/groups", enc("acme/platform")),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            (&b[0]["group"], &b[0]["role"]),
            (&json!("platform"), &json!("developer")),
            "[{l}] {b}"
        );

        // Now ann lists it and may use it, as a developer: stop yes, resize no.
        assert_eq!(listed(&s, &ann).await, ["plat-ws"], "[{l}]");
        let (st, b) = s.get(&ann, "/api/v1/workspaces/plat-ws").await;
        assert_eq!((st, &b["your_right"]), (200, &json!("use")), "[{l}] {b}");
        let (st, b) = s
            .put(
                &ann,
                "/api/v1/workspaces/plat-ws/resources",
                json!({"resources": {"memory": "512Mi"}}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s.get(&ann, "/api/v1/tree").await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b.to_string().contains("plat-ws"), "[{l}] {b}");
        // A direct role and a group's add up to the higher.
        let (st, b) = s
            .put(
                &olga,
                &format!("/api/v1/spaces/{}/members/ann", enc("acme/platform")),
                json!({"role": "viewer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (_, b) = s.get(&ann, "/api/v1/workspaces/plat-ws").await;
        assert_eq!(b["your_right"], "use", "[{l}] {b}");
        let (st, _) = s
            .delete(
                &olga,
                &format!("/api/v1/spaces/{}/members/ann", enc("acme/platform")),
            )
            .await;
        assert_eq!(st, 204, "[{l}]");

        // Out of the group: the right goes at once.
        let (st, b) = s
            .admin(Method::DELETE, "/api/v1/groups/platform/members/ann", None)
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, _) = s.get(&ann, "/api/v1/workspaces/plat-ws").await;
        assert_eq!(st, 404, "[{l}]");
        assert!(listed(&s, &ann).await.is_empty(), "[{l}]");

        // An oidc group is filled by sign-ins: the claim names it, and the membership holds
        // until it runs out (or the next sign-in leaves it out).
        let (st, b) = s
            .put(
                &olga,
                &format!("/api/v1/spaces/{}/groups/%2Facme%2Fsre", enc("acme")),
                json!({"role": "viewer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let bob_row = user_row(&s, "bob").await;
        let hour = 3_600_000;
        warren_server::app::groups::synced(&s.state, &bob_row, &["/acme/sre", "unknown"], hour)
            .await
            .expect("synced");
        assert_eq!(listed(&s, &bob).await, ["plat-ws"], "[{l}]");
        let (_, b) = s.get(&bob, "/api/v1/workspaces/plat-ws").await;
        assert_eq!(b["your_right"], "see", "[{l}] {b}");
        s.clock.advance_ms(hour - 1000);
        assert_eq!(
            listed(&s, &bob).await,
            ["plat-ws"],
            "[{l}] still within the hour"
        );
        s.clock.advance_ms(2000);
        assert!(
            listed(&s, &bob).await.is_empty(),
            "[{l}] the membership ran out"
        );
        let (st, _) = s.get(&bob, "/api/v1/workspaces/plat-ws").await;
        assert_eq!(st, 404, "[{l}]");
        let (_, b) = s.get(&bob, "/api/v1/groups").await;
        assert_eq!(b[0]["name"], "/acme/sre", "[{l}] {b}");
        assert_eq!(b[0]["members"], 0, "[{l}] {b}");
        // A new sign-in renews it; one whose claim leaves the group out ends it.
        warren_server::app::groups::synced(&s.state, &bob_row, &["/acme/sre"], hour)
            .await
            .expect("synced");
        assert_eq!(listed(&s, &bob).await, ["plat-ws"], "[{l}]");
        warren_server::app::groups::synced(&s.state, &bob_row, &[], hour)
            .await
            .expect("synced");
        assert!(listed(&s, &bob).await.is_empty(), "[{l}]");

        // Removing the group takes its roles with it.
        warren_server::app::groups::synced(&s.state, &bob_row, &["/acme/sre"], hour)
            .await
            .expect("synced");
        let (st, b) = s
            .admin(Method::DELETE, "/api/v1/groups/%2Facme%2Fsre", None)
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        assert!(listed(&s, &bob).await.is_empty(), "[{l}]");
        let (st, b) = s
            .get(&olga, &format!("/api/v1/spaces/{}/groups", enc("acme")))
            .await;
        assert_eq!((st, b), (200, json!([])), "[{l}]");

        // Every change is in the audit log once, by whom it was made.
        let (st, log) = s
            .admin(Method::GET, "/api/v1/audit?action=group.*&limit=1000", None)
            .await;
        assert_eq!(st, 200, "[{l}] {log}");
        let got: Vec<(String, String, String)> = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .filter(|e| e["outcome"] == "success")
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (s("actor"), s("action"), s("detail"))
            })
            .collect();
        let admin = log["items"][0]["actor"].as_str().unwrap().to_owned();
        let want: Vec<(String, String, String)> = [
            (admin.as_str(), "group.create", "source: local"),
            (admin.as_str(), "group.create", "source: oidc"),
            (admin.as_str(), "group.add_member", "group: platform"),
            (admin.as_str(), "group.add_member", "group: platform"),
            (admin.as_str(), "group.remove_member", "group: platform"),
            ("bob", "group.sync", "joined /acme/sre"),
            ("bob", "group.sync", "joined /acme/sre"),
            ("bob", "group.sync", "left /acme/sre"),
            ("bob", "group.sync", "joined /acme/sre"),
            (admin.as_str(), "group.delete", ""),
        ]
        .iter()
        .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
        .collect();
        assert_eq!(got, want, "[{l}] {log:#}");
        let denied = log["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["outcome"] != "success")
            .count();
        assert_eq!(denied, 9, "[{l}] the refused ones too: {log:#}");
        let (_, roles) = s
            .admin(
                Method::GET,
                "/api/v1/audit?action=space.set_group_role",
                None,
            )
            .await;
        let roles: Vec<&Value> = roles["items"].as_array().unwrap().iter().collect();
        assert_eq!(roles.len(), 4, "[{l}] {roles:#?}");
        s.stop().await;
    }
}
