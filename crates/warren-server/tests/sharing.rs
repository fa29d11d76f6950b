//! Sharing a workspace's ports (issue 41, item 4) on SQLite and (when configured) PostgreSQL:
//! the proxy's authorisation for every visibility and every kind of caller (the owner, a
//! member of the workspace's space, another signed-in user, someone not signed in, a share
//! link's holder), visibilities from the devfile, set live and capped by the agent, and share
//! links made, redeemed, confined to their port and workspace, revoked and expired.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

/// Three endpoints: the agent's default, one the devfile makes public, one it keeps private.
const DEVFILE: &str = "schemaVersion: 2.2.0
metadata:
  name: shared
components:
  - name: dev
    container:
      image: alpine:3
      endpoints:
        - name: web
          targetPort: 8080
        - name: api
          targetPort: 3000
          attributes:
            warren.dev/visibility: public
        - name: admin
          targetPort: 9000
          attributes:
            warren.dev/visibility: private
";

async fn proxy_get(s: &TestServer, path_and_query: &str) -> (u16, Value) {
    s.get(&proxy_jwt(), path_and_query).await
}

async fn user_id(s: &TestServer, token: &str) -> i64 {
    let (st, b) = s.get(token, "/api/v1/users/me").await;
    assert_eq!(st, 200, "{b}");
    b["id"].as_i64().unwrap()
}

/// Who asks, as the proxy names them.
#[derive(Clone, Copy, Debug)]
enum Who {
    User(i64),
    Share(i64),
    Anyone,
}

async fn reaches(s: &TestServer, host: &str, port: Option<u16>, who: Who) -> bool {
    let mut q = format!("/internal/workspaces/access?host={host}");
    if let Some(p) = port {
        q.push_str(&format!("&port={p}"));
    }
    match who {
        Who::User(u) => q.push_str(&format!("&user={u}")),
        Who::Share(id) => q.push_str(&format!("&share={id}")),
        Who::Anyone => {}
    }
    let (st, b) = proxy_get(s, &q).await;
    assert!(st == 200 || st == 404, "[{}] {q}: {st} {b}", s.label);
    if st == 200 && !matches!(who, Who::User(_)) {
        assert_eq!(
            b["may_start"], false,
            "[{}] {q}: no start on the owner's behalf: {b}",
            s.label
        );
    }
    st == 200
}

async fn set_agent_ports(s: &TestServer, ports: Value) {
    let (st, b) = s
        .admin(
            Method::PUT,
            "/api/v1/agents/a1",
            Some(json!({"config": {"ports": ports}})),
        )
        .await;
    assert_eq!(st, 200, "[{}] {b}", s.label);
}

#[tokio::test]
async fn every_visibility_lets_in_whom_it_says_and_no_one_else() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        set_agent_ports(&s, json!({"max_visibility": "public"})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        let dave = s.user("dave", &["api", "workspace"]).await;
        let (a, c, d) = (
            user_id(&s, &alice).await,
            user_id(&s, &carol).await,
            user_id(&s, &dave).await,
        );
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "team"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        for who in ["alice", "carol"] {
            let (st, b) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/spaces/team/members/{who}"),
                    Some(json!({"role": "developer"})),
                )
                .await;
            assert_eq!(st, 200, "[{l}] {b}");
        }
        s.workspace(
            &alice,
            json!({"name": "shop", "devfile": DEVFILE, "space": "team"}),
        )
        .await;

        // The matrix: (port, caller) → reached. Ports: 8080 the agent's default (space),
        // 3000 public by its devfile, 9000 private by its devfile, None the terminal.
        let callers = [
            ("owner", Who::User(a)),
            ("space member", Who::User(c)),
            ("another user", Who::User(d)),
            ("not signed in", Who::Anyone),
        ];
        let expect = |port: Option<u16>| -> [bool; 4] {
            match port {
                Some(8080) => [true, true, false, false],
                Some(3000) => [true, true, true, true],
                Some(9000) => [true, false, false, false],
                _ => [true, true, false, false],
            }
        };
        for port in [Some(8080), Some(3000), Some(9000), None] {
            for ((what, who), want) in callers.iter().zip(expect(port)) {
                assert_eq!(
                    reaches(&s, "shop", port, *who).await,
                    want,
                    "[{l}] {what} on {port:?}"
                );
            }
        }
        // An undeclared port is no one's, whatever its visibility would be.
        assert!(!reaches(&s, "shop", Some(5005), Who::Anyone).await, "[{l}]");
        assert!(
            !reaches(&s, "shop", Some(5005), Who::User(a)).await,
            "[{l}]"
        );

        // Listed with where each comes from (for whoever may use it).
        let (st, ports) = s.get(&carol, "/api/v1/workspaces/shop/ports").await;
        assert_eq!(st, 200, "[{l}] {ports}");
        let row = |p: u16| {
            ports
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["port"] == p)
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            (row(8080)["visibility"].clone(), row(8080)["source"].clone()),
            (json!("space"), json!("agent_default")),
            "[{l}] {ports}"
        );
        assert_eq!(row(3000)["source"], "definition", "[{l}] {ports}");
        let (st, _) = s.get(&dave, "/api/v1/workspaces/shop/ports").await;
        assert_eq!(st, 404, "[{l}] another user does not see it");

        // Changed live by its owner; a member who may only use it may not change it.
        let (st, b) = s
            .put(
                &carol,
                "/api/v1/workspaces/shop/ports/8080",
                json!({"visibility": "public"}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/shop/ports/8080",
                json!({"visibility": "authenticated"}),
            )
            .await;
        assert_eq!((st, b["source"].clone()), (200, json!("user")), "[{l}] {b}");
        assert!(reaches(&s, "shop", Some(8080), Who::User(d)).await, "[{l}]");
        assert!(!reaches(&s, "shop", Some(8080), Who::Anyone).await, "[{l}]");
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/shop/ports/9999",
                json!({"visibility": "public"}),
            )
            .await;
        assert_eq!(st, 404, "[{l}] {b}");
        assert!(
            msg(&b).contains("the proxy serves 3000, 8080, 9000"),
            "[{l}] {b}"
        );

        // The agent's admin narrows the most: every port follows at once, and wider is
        // refused naming the setting.
        set_agent_ports(&s, json!({"max_visibility": "authenticated"})).await;
        assert!(!reaches(&s, "shop", Some(3000), Who::Anyone).await, "[{l}]");
        assert!(reaches(&s, "shop", Some(3000), Who::User(d)).await, "[{l}]");
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/shop/ports/8080",
                json!({"visibility": "public"}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("ports.max_visibility"), "[{l}] {b}");
        // Back to the default: space again.
        let (st, b) = s
            .put(
                &alice,
                "/api/v1/workspaces/shop/ports/8080",
                json!({"visibility": null}),
            )
            .await;
        assert_eq!(
            (st, b["visibility"].clone()),
            (200, json!("space")),
            "[{l}] {b}"
        );
        assert!(
            !reaches(&s, "shop", Some(8080), Who::User(d)).await,
            "[{l}]"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn a_share_link_opens_its_port_only_until_revoked_or_expired() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        s.workspace(&alice, json!({"name": "shop", "devfile": DEVFILE}))
            .await;
        s.workspace(&alice, json!({"name": "other", "devfile": DEVFILE}))
            .await;
        let create = |who: String, port: u16, body: Value| {
            let s = &s;
            async move {
                s.post(
                    &who,
                    &format!("/api/v1/workspaces/shop/ports/{port}/share-links"),
                    body,
                )
                .await
            }
        };
        let redeem = |host: &str, port: u16, token: &str| {
            let (s, body) = (&s, json!({"host": host, "port": port, "token": token}));
            async move {
                s.call(
                    Method::POST,
                    "/internal/share-links/redeem",
                    Some(&proxy_jwt()),
                    Some(body),
                )
                .await
            }
        };

        // Made by its owner, for one port; the secret is in this answer only.
        let (st, b) = create(bob.clone(), 8080, json!({})).await;
        assert_eq!(st, 404, "[{l}] not bob's: {b}");
        let (st, link) = create(alice.clone(), 8080, json!({"expires_in_secs": 3600})).await;
        assert_eq!(st, 201, "[{l}] {link}");
        let url = link["url"].as_str().unwrap().to_owned();
        assert!(
            url.starts_with("http://8080-shop.ws.localhost/.warren/share?token=wrn_share_"),
            "[{l}] {url}"
        );
        let token = url.split("token=").nth(1).unwrap().to_owned();
        let id = link["id"].as_i64().unwrap();
        let (_, listed) = s.get(&alice, "/api/v1/workspaces/shop/share-links").await;
        assert_eq!(listed.as_array().map(Vec::len), Some(1), "[{l}] {listed}");
        assert!(
            !listed.to_string().contains(&token) && listed[0]["url"].is_null(),
            "[{l}] never shown again: {listed}"
        );

        // Redeemed on its own host and port only; a wrong secret is the same 404.
        let (st, r) = redeem("shop", 8080, &token).await;
        assert_eq!((st, r["link_id"].as_i64()), (200, Some(id)), "[{l}] {r}");
        for (host, port, t) in [
            ("shop", 3000, token.as_str()),
            ("other", 8080, token.as_str()),
            ("shop", 8080, "wrn_share_not-the-secret"),
            ("shop", 8080, "wrn_pat_something"),
        ] {
            let (st, b) = redeem(host, port, t).await;
            assert_eq!(st, 404, "[{l}] {host}:{port}: {b}");
        }
        assert!(
            reaches(&s, "shop", Some(8080), Who::Share(id)).await,
            "[{l}]"
        );
        assert!(
            !reaches(&s, "shop", Some(9000), Who::Share(id)).await,
            "[{l}] its port only"
        );
        assert!(
            !reaches(&s, "shop", None, Who::Share(id)).await,
            "[{l}] never the terminal"
        );
        assert!(
            !reaches(&s, "other", Some(8080), Who::Share(id)).await,
            "[{l}]"
        );

        // Limits: the agent's longest, links not allowed at all, nothing for bad lengths.
        let (st, b) = create(
            alice.clone(),
            8080,
            json!({"expires_in_secs": 8 * 24 * 3600}),
        )
        .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("max_share_link_secs"), "[{l}] {b}");
        let (st, _) = create(alice.clone(), 8080, json!({"expires_in_secs": 0})).await;
        assert_eq!(st, 422, "[{l}]");

        // Revoked: it opens nothing from then on.
        let (st, _) = s
            .delete(&alice, &format!("/api/v1/workspaces/shop/share-links/{id}"))
            .await;
        assert_eq!(st, 204, "[{l}]");
        assert!(
            !reaches(&s, "shop", Some(8080), Who::Share(id)).await,
            "[{l}]"
        );
        let (st, _) = redeem("shop", 8080, &token).await;
        assert_eq!(st, 404, "[{l}] a revoked link is not redeemed");
        let (_, listed) = s.get(&alice, "/api/v1/workspaces/shop/share-links").await;
        assert!(listed[0]["revoked_at"].is_string(), "[{l}] {listed}");

        // Expired: the same.
        let (_, link) = create(alice.clone(), 3000, json!({"expires_in_secs": 60})).await;
        let token = link["url"]
            .as_str()
            .unwrap()
            .split("token=")
            .nth(1)
            .unwrap()
            .to_owned();
        let id = link["id"].as_i64().unwrap();
        assert!(
            reaches(&s, "shop", Some(3000), Who::Share(id)).await,
            "[{l}]"
        );
        s.clock.advance_ms(61_000);
        assert!(
            !reaches(&s, "shop", Some(3000), Who::Share(id)).await,
            "[{l}]"
        );
        let (st, _) = redeem("shop", 3000, &token).await;
        assert_eq!(st, 404, "[{l}] an expired link is not redeemed");

        // An agent that allows no links: none made, and those made before stop working.
        let (_, link) = create(alice.clone(), 8080, json!({})).await;
        let id = link["id"].as_i64().unwrap();
        set_agent_ports(&s, json!({"share_links": false})).await;
        assert!(
            !reaches(&s, "shop", Some(8080), Who::Share(id)).await,
            "[{l}]"
        );
        let (st, b) = create(alice.clone(), 8080, json!({})).await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("ports.share_links"), "[{l}] {b}");
        s.stop().await;
    }
}
