//! Redirect mounts through the API and the proxy's question, on SQLite and (when configured)
//! PostgreSQL: every bad input named, names unique among workspaces and mounts, chains
//! followed and capped at 8, roles deciding who sees and removes a mount, the status computed
//! from the target (missing once the target is terminated), the tree, and where the proxy is
//! told to send a client.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

fn msg(b: &Value) -> String {
    b["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn redirect_mounts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        let (st, _) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme"})),
            )
            .await;
        assert_eq!(st, 201);
        for (who, role) in [("alice", "developer"), ("carol", "viewer")] {
            let (st, _) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/spaces/acme/members/{who}"),
                    Some(json!({"role": role})),
                )
                .await;
            assert_eq!(st, 200);
        }
        let mut ids = std::collections::BTreeMap::new();
        for (who, t) in [("alice", &alice), ("bob", &bob), ("carol", &carol)] {
            let (_, b) = s.get(t, "/api/v1/users/me").await;
            ids.insert(who, b["id"].as_i64().unwrap());
        }
        s.workspace(
            &alice,
            json!({"name": "target-ws", "space": "acme", "devfile": WEB_DEVFILE}),
        )
        .await;
        s.workspace(&bob, json!({"name": "bobs-ws", "devfile": WEB_DEVFILE}))
            .await;
        let create = |token: &str, body: Value| {
            let s = &s;
            let token = token.to_owned();
            async move { s.post(&token, "/api/v1/mounts", body).await }
        };

        // Every bad input is named.
        for (body, want, needle) in [
            (
                json!({"name": "m1", "type": "bogus", "ref": "target-ws"}),
                400,
                "not a mount type",
            ),
            (
                json!({"name": "m1", "type": "proxy", "url": "http://10.0.0.1/"}),
                400,
                "names the agent",
            ),
            (
                json!({"name": "m1", "type": "redirect"}),
                400,
                "exactly one",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "target-ws", "url": "https://x.example/"}),
                400,
                "exactly one",
            ),
            (
                json!({"name": "m1", "type": "redirect", "url": "ftp://x.example/"}),
                400,
                "http or https",
            ),
            (
                json!({"name": "m1", "type": "redirect", "url": "https://u:p@x.example/"}),
                400,
                "credentials",
            ),
            (
                json!({"name": "m1", "type": "redirect", "url": "not a url"}),
                400,
                "not a URL",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "target-ws", "via": "a1"}),
                400,
                "proxy mounts",
            ),
            (
                json!({"name": "Bad_Name", "type": "redirect", "ref": "target-ws"}),
                400,
                "name",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "m1"}),
                400,
                "itself",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "no-such"}),
                404,
                "no-such",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "bobs-ws"}),
                404,
                "bobs-ws",
            ),
            (
                json!({"name": "target-ws", "type": "redirect", "url": "https://x.example/"}),
                409,
                "already exists",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "target-ws", "space": "nowhere"}),
                400,
                "nowhere",
            ),
            (
                json!({"name": "m1", "type": "redirect", "ref": "target-ws", "bogus": 1}),
                400,
                "bogus",
            ),
        ] {
            let (st, b) = create(&alice, body.clone()).await;
            assert_eq!(st, want, "[{l}] {body}: {b}");
            assert!(msg(&b).contains(needle), "[{l}] {body}: {b}");
        }
        let (st, b) = create(
            &carol,
            json!({"name": "m1", "type": "redirect", "ref": "target-ws", "space": "acme"}),
        )
        .await;
        assert_eq!(st, 403, "[{l}] a viewer does not create: {b}");

        // A redirect to a workspace: ready, leading there; its name is taken for workspaces.
        let (st, m) = create(
            &alice,
            json!({"name": "old-ws", "type": "redirect", "ref": "target-ws", "space": "acme"}),
        )
        .await;
        assert_eq!(st, 201, "[{l}] {m}");
        assert_eq!(m["status"]["phase"], "Ready", "[{l}] {m}");
        assert_eq!(m["status"]["resolved"], "target-ws", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][0]["type"], "WorkspaceTargetFound");
        assert_eq!(m["your_right"], "manage");
        let (st, b) = s
            .post(
                &alice,
                "/api/v1/workspaces",
                json!({"name": "old-ws", "devfile": WEB_DEVFILE}),
            )
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("mount"), "[{l}] {b}");

        // Chains: up to 8 redirects, no more.
        let mut prev = "old-ws".to_owned();
        for i in 2..=8 {
            let name = format!("hop-{i}");
            let (st, b) = create(
                &alice,
                json!({"name": name, "type": "redirect", "ref": prev}),
            )
            .await;
            assert_eq!(st, 201, "[{l}] hop {i}: {b}");
            assert_eq!(b["status"]["resolved"], "target-ws", "[{l}] {b}");
            prev = name;
        }
        let (st, b) = create(
            &alice,
            json!({"name": "hop-9", "type": "redirect", "ref": prev}),
        )
        .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("more than 8"), "[{l}] {b}");

        // Roles: a viewer sees it (not removes it); a stranger gets 404 everywhere.
        let (st, b) = s.get(&carol, "/api/v1/mounts/old-ws").await;
        assert_eq!(
            (st, b["your_right"].as_str()),
            (200, Some("see")),
            "[{l}] {b}"
        );
        let (st, b) = s.delete(&carol, "/api/v1/mounts/old-ws").await;
        assert_eq!(st, 403, "[{l}] {b}");
        for (method, path) in [
            (Method::GET, "/api/v1/mounts/old-ws"),
            (Method::DELETE, "/api/v1/mounts/old-ws"),
        ] {
            let (st, b) = s.call(method, path, Some(&bob), None).await;
            assert_eq!(st, 404, "[{l}] {path}: {b}");
        }
        let (_, b) = s.get(&bob, "/api/v1/mounts").await;
        assert_eq!(b, json!([]), "[{l}]");
        let (_, b) = s.get(&carol, "/api/v1/mounts").await;
        assert_eq!(
            b.as_array().map(Vec::len),
            Some(1),
            "[{l}] only acme's: {b}"
        );

        // The tree shows it beside the workspace.
        let (st, t) = s.get(&carol, "/api/v1/tree?space=acme").await;
        assert_eq!(st, 200, "[{l}] {t}");
        let entries = &t["spaces"][0]["entries"];
        assert_eq!(entries[0]["name"], "old-ws", "[{l}] {t}");
        assert_eq!(entries[0]["kind"], "mount");
        assert_eq!(entries[0]["mount_type"], "redirect");
        assert_eq!(entries[0]["points_to"], "target-ws");
        assert_eq!(entries[1]["name"], "target-ws");

        // The proxy's question: where does the host lead, for whom.
        let ask = |host: &'static str, user: &'static str| {
            let s = &s;
            let id = ids[user];
            async move {
                s.get(
                    &proxy_jwt(),
                    &format!("/internal/entries/redirect?host={host}&user={id}"),
                )
                .await
            }
        };
        assert_eq!(
            ask("old-ws", "alice").await,
            (200, json!({"entry": "target-ws"})),
            "[{l}]"
        );
        assert_eq!(
            ask("hop-8", "alice").await,
            (200, json!({"entry": "target-ws"})),
            "[{l}]"
        );
        assert_eq!(
            ask("old-ws", "carol").await.0,
            200,
            "[{l}] viewers may follow it"
        );
        assert_eq!(ask("old-ws", "bob").await.0, 404, "[{l}]");
        assert_eq!(
            ask("target-ws", "alice").await.0,
            404,
            "[{l}] a workspace is no redirect"
        );
        let (st, b) = create(
            &alice,
            json!({"name": "far", "type": "redirect", "url": "https://8080-ws.other.example/"}),
        )
        .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(
            ask("far", "alice").await,
            (200, json!({"url": "https://8080-ws.other.example/"})),
            "[{l}]"
        );

        // A space holding a mount stays.
        let (st, b) = s.admin(Method::DELETE, "/api/v1/spaces/acme", None).await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("1 mount(s)"), "[{l}] {b}");

        // The target terminated: the redirect says so, and the proxy is told why.
        let (st, _) = s.delete(&alice, "/api/v1/workspaces/target-ws").await;
        assert_eq!(st, 200, "[{l}]");
        let (_, m) = s.get(&alice, "/api/v1/mounts/old-ws").await;
        assert_eq!(m["status"]["phase"], "Unavailable", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][0]["status"], "False", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][0]["reason"], "TargetMissing");
        let (st, b) = ask("hop-3", "alice").await;
        assert_eq!(st, 503, "[{l}] {b}");
        assert!(msg(&b).contains("target-ws"), "[{l}] {b}");

        // Removing a link in the chain breaks the rest, which say where.
        let (st, _) = s.delete(&alice, "/api/v1/mounts/old-ws").await;
        assert_eq!(st, 204, "[{l}]");
        let (_, m) = s.get(&alice, "/api/v1/mounts/hop-2").await;
        assert!(
            m["status"]["conditions"][0]["message"]
                .as_str()
                .is_some_and(|x| x.contains("old-ws")),
            "[{l}] {m}"
        );
        s.stop().await;
    }
}

/// Softlinks (`workspace` mounts): refused without the target owner's grant, served — to
/// those who may use the softlink — by the workspace at the end of the chain under the
/// softlink's own name (proxy and SSH), showing the target's state, turned away once the
/// grant is taken back.
#[tokio::test]
async fn softlink_mounts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let mut tokens = std::collections::BTreeMap::new();
        let mut ids = std::collections::BTreeMap::new();
        for who in ["alice", "bob", "carol", "dan", "erin"] {
            let t = s.user(who, &["api", "workspace"]).await;
            let (_, b) = s.get(&t, "/api/v1/users/me").await;
            ids.insert(who, b["id"].as_i64().unwrap());
            tokens.insert(who, t);
        }
        for path in ["team", "pairs"] {
            let (st, _) = s
                .admin(Method::POST, "/api/v1/spaces", Some(json!({"path": path})))
                .await;
            assert_eq!(st, 201);
        }
        for (space, who, role) in [
            ("team", "alice", "developer"),
            ("pairs", "bob", "developer"),
            ("pairs", "carol", "developer"),
            ("pairs", "dan", "viewer"),
        ] {
            let (st, _) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/spaces/{space}/members/{who}"),
                    Some(json!({"role": role})),
                )
                .await;
            assert_eq!(st, 200);
        }
        let w = s
            .workspace(
                &tokens["alice"],
                json!({"name": "alices", "space": "team", "devfile": WEB_DEVFILE}),
            )
            .await;
        let link = |who: &'static str, name: &'static str, target: &'static str| {
            let s = &s;
            let t = tokens[who].clone();
            async move {
                s.post(
                    &t,
                    "/api/v1/mounts",
                    json!({"name": name, "type": "workspace", "ref": target, "space": "pairs"}),
                )
                .await
            }
        };

        // Without a grant: bob cannot even see the workspace (404, as if missing).
        let (st, b) = link("bob", "pair", "alices").await;
        assert_eq!(st, 404, "[{l}] {b}");
        let (st, b) = s
            .post(
                &tokens["bob"],
                "/api/v1/mounts",
                json!({"name": "pair", "type": "workspace", "url": "https://x.example/"}),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        // Only the workspace's managers give grants.
        let (st, _) = s
            .call(
                Method::PUT,
                "/api/v1/workspaces/alices/grants/bob",
                Some(&tokens["bob"]),
                None,
            )
            .await;
        assert_eq!(st, 404, "[{l}]");
        let (st, g) = s
            .call(
                Method::PUT,
                "/api/v1/workspaces/alices/grants/bob",
                Some(&tokens["alice"]),
                None,
            )
            .await;
        assert_eq!(st, 200, "[{l}] {g}");
        assert_eq!(g[0]["username"], "bob", "[{l}] {g}");
        let (st, m) = link("bob", "pair", "alices").await;
        assert_eq!(st, 201, "[{l}] {m}");
        assert_eq!(m["type"], "workspace");
        assert_eq!(m["status"]["resolved"], "alices", "[{l}] {m}");
        // The target does not run here (no agent): the softlink says so.
        assert_eq!(m["status"]["phase"], "Unavailable", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][1]["type"], "WorkspaceRunning");
        assert_eq!(m["status"]["conditions"][1]["status"], "False");
        // A chain of softlinks ends at the same workspace; a softlink never leads to a
        // redirect.
        let (st, m2) = link("carol", "pair-two", "pair").await;
        assert_eq!(st, 403, "[{l}] carol holds no grant on alices: {m2}");
        let (st, m2) = link("bob", "pair-two", "pair").await;
        assert_eq!(st, 201, "[{l}] {m2}");
        assert_eq!(m2["status"]["resolved"], "alices");
        let (st, _) = s
            .post(
                &tokens["bob"],
                "/api/v1/mounts",
                json!({"name": "moved", "type": "redirect", "ref": "pair", "space": "pairs"}),
            )
            .await;
        assert_eq!(st, 201);
        let (st, b) = link("bob", "pair-three", "moved").await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("another type"), "[{l}] {b}");

        // The proxy and SSH: developers of the softlink's space are served by alices; a
        // viewer, a stranger and alice's own teammates without a role there are not.
        let access = |who: &'static str, host: &'static str| {
            let s = &s;
            let id = ids[who];
            async move {
                s.get(
                    &proxy_jwt(),
                    &format!("/internal/workspaces/access?host={host}&port=8080&user={id}"),
                )
                .await
            }
        };
        for who in ["bob", "carol"] {
            for host in ["pair", "pair-two"] {
                let (st, b) = access(who, host).await;
                assert_eq!(st, 200, "[{l}] {who} {host}: {b}");
                assert_eq!(b["workspace_id"], w["id"], "[{l}] served by alices");
                assert_eq!(b["user_id"], ids[who]);
                // Stopped, the target shows no start button to those who only link to it.
                assert_eq!(b["may_start"], false, "[{l}] {who} {host}: {b}");
            }
        }
        let (st, b) = access("alice", "alices").await;
        assert_eq!((st, &b["may_start"]), (200, &json!(true)), "[{l}] {b}");
        for who in ["dan", "erin"] {
            assert_eq!(access(who, "pair").await.0, 404, "[{l}] {who}");
        }
        let (st, b) = s
            .get(
                &proxy_jwt(),
                &format!(
                    "/internal/ssh/authorize?username=pair&token={}",
                    tokens["carol"]
                ),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            (b["username"].as_str(), b["workspace_name"].as_str()),
            (Some("carol"), Some("alices")),
            "[{l}] {b}"
        );

        // The grant taken back: the softlinks stop serving and say why.
        let (st, _) = s
            .delete(&tokens["alice"], "/api/v1/workspaces/alices/grants/bob")
            .await;
        assert_eq!(st, 204, "[{l}]");
        assert_eq!(access("carol", "pair").await.0, 404, "[{l}]");
        let (_, m) = s.get(&tokens["carol"], "/api/v1/mounts/pair").await;
        assert_eq!(m["status"]["phase"], "Unavailable", "[{l}] {m}");
        assert_eq!(
            m["status"]["conditions"][0]["reason"], "GrantRevoked",
            "[{l}] {m}"
        );
        let (st, _) = s
            .delete(&tokens["alice"], "/api/v1/workspaces/alices/grants/bob")
            .await;
        assert_eq!(st, 404, "[{l}] nothing left to take back");
        s.stop().await;
    }
}

/// Connector mounts (`proxy` backed by `warren connect`), through the API, the relay's
/// reconcile call (the connector's heartbeat) and the proxy's questions: the token shown once
/// and good for its own mount alone, the phases from `Connecting` to `Ready`, `Unknown` past
/// the heartbeat deadline and back, a reported fault making it `Unavailable`, roles deciding
/// who reaches it, declared ports only, and the agent row gone with the mount.
#[tokio::test]
async fn connector_mounts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let a1 = s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let mut ids = std::collections::BTreeMap::new();
        for (who, t) in [("alice", &alice), ("bob", &bob)] {
            let (_, b) = s.get(t, "/api/v1/users/me").await;
            ids.insert(who, b["id"].as_i64().unwrap());
        }
        let create = |body: Value| {
            let s = &s;
            let alice = alice.clone();
            async move { s.post(&alice, "/api/v1/mounts", body).await }
        };
        // Bad requests name what is wrong.
        for (body, field, words) in [
            (
                json!({"name": "m1", "type": "proxy"}),
                "connector",
                "connector: true",
            ),
            (
                json!({"name": "m1", "type": "proxy", "connector": true, "ref": "x"}),
                "ref",
                "points at no entry",
            ),
            (
                json!({"name": "m1", "type": "redirect", "connector": true, "url": "http://x/"}),
                "connector",
                "only proxy mounts",
            ),
        ] {
            let (st, b) = create(body.clone()).await;
            assert_eq!(st, 400, "[{l}] {body}: {b}");
            assert!(msg(&b).starts_with(&format!("{field}: ")), "[{l}] {b}");
            assert!(msg(&b).contains(words), "[{l}] {b}");
        }
        let (st, gpu) = create(json!({"name": "gpu", "type": "proxy", "connector": true})).await;
        assert_eq!(st, 201, "[{l}] {gpu}");
        let token = gpu["connector_token"].as_str().unwrap().to_owned();
        assert_eq!(gpu["status"]["phase"], "Connecting", "[{l}] {gpu}");
        assert_eq!(gpu["connector"], true);
        let (_, shown) = s.get(&alice, "/api/v1/mounts/gpu").await;
        assert!(
            shown.get("connector_token").is_none(),
            "[{l}] once: {shown}"
        );
        let (st, gpu2) = create(json!({"name": "gpu2", "type": "proxy", "connector": true})).await;
        assert_eq!(st, 201);
        let gpu2_token = gpu2["connector_token"].as_str().unwrap().to_owned();
        // The connector's agent row is no agent workspaces go to.
        let (_, agents) = s.admin(Method::GET, "/api/v1/agents", None).await;
        assert_eq!(agents.as_array().unwrap().len(), 1, "[{l}] {agents}");
        let (st, b) = s
            .post(
                &alice,
                "/api/v1/workspaces",
                json!({"name": "w1", "devfile": WEB_DEVFILE}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] the only agent is still chosen: {b}");
        let (st, b) = s
            .post(
                &alice,
                "/api/v1/workspaces",
                json!({"name": "w2", "devfile": WEB_DEVFILE, "agent": "connector-gpu"}),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("agent: "), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/agents",
                Some(json!({"name": "connector-x"})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] the prefix is reserved: {b}");

        // The relay learns the connector's agent from its token.
        let (st, who) = s
            .post(
                &s.relay_jwt(0),
                warren_types::internal::AUTHENTICATE_AGENT_PATH,
                json!({"token": token}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {who}");
        let agent = who["agent_id"].as_i64().unwrap();
        assert_eq!(who["agent_name"], "connector-gpu");
        let beat = |mount: &str, ok: bool| {
            json!({
                "update_type": "partial",
                "workspace_agent_infos": [],
                "connector": {
                    "mount": mount,
                    "ports": [8080, 22, 8080],
                    "conditions": [{
                        "type": "WorkspaceConnectorConnected",
                        "status": if ok { "True" } else { "False" },
                        "reason": if ok { "Heartbeat" } else { "DiskFull" },
                        "message": "the machine says so"
                    }]
                }
            })
        };
        // Its token backs this mount alone; agents and connectors do not swap tokens.
        let (st, b) = s.reconcile(agent, beat("gpu2", true)).await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(msg(&b).contains("backs mount gpu, not gpu2"), "[{l}] {b}");
        let (st, b) = s
            .reconcile(
                agent,
                json!({"update_type": "full", "workspace_agent_infos": []}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(msg(&b).contains("warren connect --mount gpu"), "[{l}] {b}");
        let (st, b) = s.reconcile(a1, beat("gpu", true)).await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(
            msg(&b).contains("not the connector token of mount gpu"),
            "[{l}] {b}"
        );

        let (st, b) = s.reconcile(agent, beat("gpu", true)).await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(b["workspace_rails_infos"], json!([]));
        let get = || async { s.get(&alice, "/api/v1/mounts/gpu").await.1 };
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Ready", "[{l}] {m}");
        assert_eq!(m["ports"], json!([22, 8080]), "[{l}] {m}");
        assert!(
            m["status"]["url"]
                .as_str()
                .unwrap()
                .starts_with("http://22-gpu."),
            "[{l}] {m}"
        );
        let access = |who: &'static str, port: u16| {
            let s = &s;
            let id = ids[who];
            async move {
                s.get(
                    &proxy_jwt(),
                    &format!("/internal/workspaces/access?host=gpu&port={port}&user={id}"),
                )
                .await
            }
        };
        let (st, a) = access("alice", 8080).await;
        assert_eq!(st, 200, "[{l}] {a}");
        assert_eq!(
            (
                a["agent_id"].as_i64(),
                a["workspace_name"].as_str(),
                a["mount"].as_bool()
            ),
            (Some(agent), Some("gpu"), Some(true)),
            "[{l}] {a}"
        );
        assert_eq!(a["actual_state"], "Running");
        assert!(a.get("unavailable").is_none(), "[{l}] {a}");
        assert_eq!(access("alice", 9999).await.0, 404, "[{l}] undeclared port");
        assert_eq!(access("bob", 8080).await.0, 404, "[{l}] not bob's");

        // Silent past three heartbeats (the default 10 s interval): Unknown, and the proxy
        // is told why; a heartbeat brings it back.
        s.clock.advance_ms(31_000);
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Unknown", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][0]["reason"], "HeartbeatMissed");
        let (st, a) = access("alice", 8080).await;
        assert_eq!(st, 200, "[{l}] {a}");
        assert!(
            a["unavailable"]
                .as_str()
                .unwrap()
                .contains("silent for 31 s"),
            "[{l}] {a}"
        );
        let (st, b) = s
            .get(
                &proxy_jwt(),
                &format!("/internal/ssh/authorize?username=gpu&token={alice}"),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(
            b["unavailable"].as_str().unwrap().contains("Unknown"),
            "[{l}] {b}"
        );
        assert_eq!(s.reconcile(agent, beat("gpu", true)).await.0, 201);
        assert_eq!(get().await["status"]["phase"], "Ready");
        // A `Workspace…` condition False: Unavailable with its reason.
        assert_eq!(s.reconcile(agent, beat("gpu", false)).await.0, 201);
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Unavailable", "[{l}] {m}");
        assert_eq!(m["status"]["conditions"][0]["reason"], "DiskFull");
        let (_, a) = access("alice", 8080).await;
        assert!(
            a["unavailable"].as_str().unwrap().contains("DiskFull"),
            "[{l}] {a}"
        );

        // Removed, the mount takes its connector's token with it.
        let (st, _) = s.delete(&alice, "/api/v1/mounts/gpu").await;
        assert_eq!(st, 204, "[{l}]");
        let (st, _) = s
            .post(
                &s.relay_jwt(0),
                warren_types::internal::AUTHENTICATE_AGENT_PATH,
                json!({"token": token}),
            )
            .await;
        assert_eq!(st, 401, "[{l}]");

        // Reported ports are checked; a user's deletion takes their connectors' tokens too.
        let bad = json!({"update_type": "partial", "workspace_agent_infos": [],
            "connector": {"mount": "gpu2", "ports": [0]}});
        let (st, b) = s
            .post(
                &s.relay_jwt(0),
                warren_types::internal::AUTHENTICATE_AGENT_PATH,
                json!({"token": gpu2_token}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let agent2 = b["agent_id"].as_i64().unwrap();
        let (st, b) = s.reconcile(agent2, bad).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("ports"), "[{l}] {b}");
        let (st, gpu3) = s
            .post(
                &bob,
                "/api/v1/mounts",
                json!({"name": "gpu3", "type": "proxy", "connector": true}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {gpu3}");
        let (st, b) = s.admin(Method::DELETE, "/api/v1/users/bob", None).await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, _) = s
            .post(
                &s.relay_jwt(0),
                warren_types::internal::AUTHENTICATE_AGENT_PATH,
                json!({"token": gpu3["connector_token"]}),
            )
            .await;
        assert_eq!(st, 401, "[{l}] the owner's connectors go with the owner");
        let (_, agents) = s.admin(Method::GET, "/api/v1/agents", None).await;
        assert_eq!(agents.as_array().unwrap().len(), 1, "[{l}] {agents}");
        s.stop().await;
    }
}

/// `proxy` mounts to a URL through an agent: made by admins only, the URL and agent checked,
/// listed to that agent in its reconcile answers, its probes deciding the phase (`Unknown`
/// when it falls silent), and the proxy told the URL and only its port.
#[tokio::test]
async fn url_proxy_mounts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let a1 = s.agent("a1", json!({})).await;
        let a2 = s.agent("a2", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let (_, me) = s.get(&alice, "/api/v1/users/me").await;
        let alice_id = me["id"].as_i64().unwrap();
        assert_eq!(
            s.admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "acme"}))
            )
            .await
            .0,
            201
        );
        assert_eq!(
            s.admin(
                Method::PUT,
                "/api/v1/spaces/acme/members/alice",
                Some(json!({"role": "developer"}))
            )
            .await
            .0,
            200
        );
        let (st, b) = s.post(&alice, "/api/v1/mounts", json!({"name": "wiki", "type": "proxy", "url": "http://10.1.2.3:8080/", "via": "a1"}))
            .await;
        assert_eq!(st, 403, "[{l}] only admins: {b}");
        for (body, field, words) in [
            (
                json!({"url": "ftp://10.1.2.3/", "via": "a1"}),
                "url",
                "http or https",
            ),
            (json!({"url": "http://10.1.2.3/"}), "via", "names the agent"),
            (
                json!({"url": "http://10.1.2.3/", "via": "nope"}),
                "via",
                "no agent named",
            ),
            (
                json!({"url": "http://u:p@10.1.2.3/", "via": "a1"}),
                "url",
                "credentials",
            ),
        ] {
            let mut body = body;
            body["name"] = json!("wiki");
            body["type"] = json!("proxy");
            let (st, b) = s
                .admin(Method::POST, "/api/v1/mounts", Some(body.clone()))
                .await;
            assert_eq!(st, 400, "[{l}] {body}: {b}");
            assert!(msg(&b).starts_with(&format!("{field}: ")), "[{l}] {b}");
            assert!(msg(&b).contains(words), "[{l}] {b}");
        }
        let (st, m) = s
            .admin(
                Method::POST,
                "/api/v1/mounts",
                Some(json!({"name": "wiki", "type": "proxy", "url": "https://wiki.internal:8443/w", "via": "a1", "space": "acme"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {m}");
        assert_eq!(m["status"]["phase"], "Connecting", "[{l}] {m}");
        // Listed to its agent only.
        let (st, b) = s
            .reconcile(
                a1,
                json!({"update_type": "partial", "workspace_agent_infos": []}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(
            b["mounts"],
            json!([{"name": "wiki", "url": "https://wiki.internal:8443/w"}]),
            "[{l}] {b}"
        );
        let (_, b) = s
            .reconcile(
                a2,
                json!({"update_type": "partial", "workspace_agent_infos": []}),
            )
            .await;
        assert!(b.get("mounts").is_none(), "[{l}] {b}");
        let probe = |ok: bool| {
            json!({"update_type": "partial", "workspace_agent_infos": [], "mounts": [{
                "mount": "wiki",
                "conditions": [{"type": "WorkspaceUrlReachable", "status": if ok {"True"} else {"False"},
                    "reason": if ok {"Reachable"} else {"Unreachable"}, "message": "connecting to wiki.internal:8443: refused"}]
            }]})
        };
        // Another agent's word about it counts for nothing.
        assert_eq!(s.reconcile(a2, probe(true)).await.0, 201);
        let get = || async { s.get(&alice, "/api/v1/mounts/wiki").await.1 };
        assert_eq!(get().await["status"]["phase"], "Connecting", "[{l}]");
        assert_eq!(s.reconcile(a1, probe(true)).await.0, 201);
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Ready", "[{l}] {m}");
        assert!(
            m["status"]["url"]
                .as_str()
                .unwrap()
                .starts_with("http://8443-wiki."),
            "[{l}] {m}"
        );
        let access = |port: u16| {
            let s = &s;
            async move {
                s.get(
                    &proxy_jwt(),
                    &format!("/internal/workspaces/access?host=wiki&port={port}&user={alice_id}"),
                )
                .await
            }
        };
        let (st, a) = access(8443).await;
        assert_eq!(st, 200, "[{l}] {a}");
        assert_eq!(
            (
                a["agent_id"].as_i64(),
                a["mount_url"].as_str(),
                a["namespace"].as_str()
            ),
            (Some(a1), Some("https://wiki.internal:8443/w"), Some("")),
            "[{l}] {a}"
        );
        assert_eq!(access(8080).await.0, 404, "[{l}] only the URL's port");
        let (st, _) = s
            .get(
                &proxy_jwt(),
                &format!("/internal/ssh/authorize?username=wiki&token={alice}"),
            )
            .await;
        assert_eq!(st, 404, "[{l}] no shell behind a URL");
        assert_eq!(s.reconcile(a1, probe(false)).await.0, 201);
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Unavailable", "[{l}] {m}");
        let (_, a) = access(8443).await;
        assert!(
            a["unavailable"].as_str().unwrap().contains("refused"),
            "[{l}] {a}"
        );
        s.clock.advance_ms(31_000);
        let m = get().await;
        assert_eq!(m["status"]["phase"], "Unknown", "[{l}] {m}");
        assert!(
            m["status"]["conditions"][0]["message"]
                .as_str()
                .unwrap()
                .contains("agent a1 has been silent"),
            "[{l}] {m}"
        );
        s.stop().await;
    }
}
