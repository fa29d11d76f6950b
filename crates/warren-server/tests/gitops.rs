//! GitOps configuration through the API, on SQLite and (when configured) PostgreSQL:
//! repositories with sealed credentials and webhook secrets (never returned, never stored
//! in clear), admin-only access, sources validated field by field against the registered
//! repositories and the admin policy, and a repository in use that cannot be removed.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::json;
use sqlx::Row;

const TOKEN: &str = "glpat-never-shown-0123456789";
const HOOK: &str = "webhook-secret-never-shown-42";

/// Every text column of the GitOps tables, for checking that no secret is stored in clear.
async fn stored_text(s: &TestServer) -> String {
    let pool = &s.state.store.db.pool;
    let mut all = String::new();
    for q in [
        "SELECT name, url, credential, webhook_secret FROM gitops_repositories",
        "SELECT name, spec FROM gitops_sources",
    ] {
        for r in sqlx::query(q).fetch_all(pool).await.expect("query") {
            for i in 0..r.len() {
                if let Ok(Some(v)) = r.try_get::<Option<String>, _>(i) {
                    all.push_str(&v);
                    all.push('\n');
                }
            }
        }
    }
    all
}

#[tokio::test]
async fn repositories_keep_their_secrets_sealed_and_only_admins_manage_them() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let bob = s.user("bob", &["api", "workspace"]).await;

        // Only admins see or register repositories.
        let (st, b) = s.get(&bob, "/api/v1/gitops/repositories").await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s
            .post(
                &bob,
                "/api/v1/gitops/repositories",
                json!({"name": "x", "url": "https://git.example.com/x.git"}),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");

        // Bad input is refused naming the field, and never echoes a secret.
        for (body, field) in [
            (
                json!({"name": "Bad Name", "url": "https://h/x.git"}),
                "name",
            ),
            (json!({"name": "x", "url": "ftp://h/x.git"}), "url"),
            (json!({"name": "x", "url": "https://ann:pw@h/x.git"}), "url"),
            (
                json!({"name": "x", "url": "http://git.example.com/x.git",
                       "credential": {"kind": "token", "token": TOKEN}}),
                "credential",
            ),
            (
                json!({"name": "x", "url": "ssh://git@h/x.git",
                       "credential": {"kind": "token", "token": TOKEN}}),
                "credential",
            ),
            (
                json!({"name": "x", "url": "https://h/x.git", "webhook_secret": "short"}),
                "webhook_secret",
            ),
        ] {
            let (st, b) = s
                .admin(
                    Method::POST,
                    "/api/v1/gitops/repositories",
                    Some(body.clone()),
                )
                .await;
            assert_eq!(st, 400, "[{l}] {body}: {b}");
            assert!(msg(&b).starts_with(field), "[{l}] {body}: {b}");
            assert!(!b.to_string().contains(TOKEN), "[{l}] {b}");
        }
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/gitops/repositories",
                Some(json!({"name": "x", "url": "https://h/x.git", "extra": 1})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] unknown field: {b}");
        assert!(msg(&b).contains("extra"), "[{l}] {b}");

        // Registered with a token and a webhook secret: neither comes back.
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/gitops/repositories",
                Some(
                    json!({"name": "platform", "url": "https://git.example.com/ops/platform.git",
                            "credential": {"kind": "token", "token": TOKEN},
                            "webhook_secret": HOOK}),
                ),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(b["credential"], "token", "[{l}] {b}");
        assert_eq!(b["webhook"], true, "[{l}] {b}");
        for path in [
            "/api/v1/gitops/repositories",
            "/api/v1/gitops/repositories/platform",
        ] {
            let (st, b) = s.admin(Method::GET, path, None).await;
            assert_eq!(st, 200, "[{l}] {b}");
            let text = b.to_string();
            assert!(
                !text.contains(TOKEN) && !text.contains(HOOK),
                "[{l}] {text}"
            );
            assert!(
                text.contains("git.example.com/ops/platform.git"),
                "[{l}] {text}"
            );
        }
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/gitops/repositories",
                Some(json!({"name": "platform", "url": "https://git.example.com/other.git"})),
            )
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("already exists"), "[{l}] {b}");

        // Sealed at rest.
        let stored = stored_text(&s).await;
        assert!(
            !stored.contains(TOKEN) && !stored.contains(HOOK),
            "[{l}] {stored}"
        );

        // The credential and webhook secret can be replaced and removed.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/gitops/repositories/platform/credential",
                Some(json!({"kind": "basic", "username": "ann", "password": "pw-also-hidden"})),
            )
            .await;
        assert_eq!(
            (st, b["credential"].as_str()),
            (200, Some("basic")),
            "[{l}] {b}"
        );
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/gitops/repositories/platform/credential",
                None,
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b.get("credential").is_none(), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/gitops/repositories/platform/webhook_secret",
                Some(json!({"secret": "tiny"})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("secret"), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/gitops/repositories/platform/webhook_secret",
                None,
            )
            .await;
        assert_eq!((st, &b["webhook"]), (200, &json!(false)), "[{l}] {b}");

        let (st, b) = s
            .admin(Method::GET, "/api/v1/gitops/repositories/nope", None)
            .await;
        assert_eq!(st, 404, "[{l}] {b}");
        assert!(msg(&b).contains("\"nope\""), "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn sources_are_validated_against_repositories_and_the_policy() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("edge", json!({})).await;
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/gitops/repositories",
                Some(json!({"name": "platform-config", "url": "file:///srv/git/platform.git"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");

        // An agent starts with no sources.
        let (st, b) = s
            .admin(Method::GET, "/api/v1/agents/edge/gitops", None)
            .await;
        assert_eq!((st, b), (200, json!({"sources": []})), "[{l}]");

        // Everything wrong is named at once.
        let bad = json!({"sources": [
            {"name": "platform", "repository": "nowhere", "paths": ["/abs/*.yaml"],
             "mode": "namespaced", "kinds": {"allow": ["apps/deployment"]}, "interval": "soon"},
            {"name": "platform", "repository": "platform-config", "mode": "cluster"}
        ]});
        let (st, b) = s
            .admin(Method::PUT, "/api/v1/agents/edge/gitops", Some(bad))
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        let m = msg(&b);
        for want in [
            "sources[0].repository: no repository named \"nowhere\"",
            "sources[0].paths[0]",
            "sources[0].namespace: is required in namespaced mode",
            "sources[0].kinds.allow[0]: \"apps/deployment\" cannot match",
            "sources[0].interval",
            "sources[1].name: \"platform\" is the name of an earlier source",
        ] {
            assert!(m.contains(want), "[{l}] missing {want:?} in {m}");
        }
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/edge/gitops",
                Some(
                    json!({"sources": [{"name": "a", "repository": "platform-config",
                                         "namespace": "team-a", "colour": "red"}]}),
                ),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("colour"), "[{l}] {b}");

        // A good configuration is stored with its defaults and read back.
        let good = json!({"sources": [
            {"name": "platform", "repository": "platform-config", "ref": "release",
             "paths": ["deploy/**/*.yaml"], "namespace": "team-a",
             "kinds": {"allow": ["apps/*", "v1/ConfigMap", "v1/Service"], "deny": ["v1/Secret"]},
             "prune": true, "interval": "30s"},
            {"name": "cluster-wide", "repository": "platform-config", "mode": "cluster"}
        ]});
        let (st, b) = s
            .admin(Method::PUT, "/api/v1/agents/edge/gitops", Some(good))
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["sources"][0]["ref"], "release", "[{l}] {b}");
        assert_eq!(b["sources"][1]["ref"], "main", "[{l}] {b}");
        assert_eq!(b["sources"][1]["interval"], "60s", "[{l}] {b}");
        assert_eq!(b["sources"][1]["prune"], false, "[{l}] {b}");
        let (_, again) = s
            .admin(Method::GET, "/api/v1/agents/edge/gitops", None)
            .await;
        assert_eq!(again, b, "[{l}]");

        // The repository lists its users and cannot be removed while used.
        let (_, r) = s
            .admin(
                Method::GET,
                "/api/v1/gitops/repositories/platform-config",
                None,
            )
            .await;
        assert_eq!(
            r["used_by"],
            json!(["edge/platform", "edge/cluster-wide"]),
            "[{l}] {r}"
        );
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/gitops/repositories/platform-config",
                None,
            )
            .await;
        assert_eq!(st, 409, "[{l}] {b}");
        assert!(msg(&b).contains("edge/platform"), "[{l}] {b}");

        // The admin policy caps what sources may allow, and may refuse cluster mode.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/gitops/policy",
                Some(json!({"deny": ["rbac.authorization.k8s.io/*", "not a pattern"]})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("deny[1]"), "[{l}] {b}");
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/gitops/policy",
                Some(json!({"deny": ["rbac.authorization.k8s.io/*"], "allow_cluster_mode": false})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (_, p) = s.admin(Method::GET, "/api/v1/gitops/policy", None).await;
        assert_eq!(
            p,
            json!({"deny": ["rbac.authorization.k8s.io/*"], "allow_cluster_mode": false}),
            "[{l}]"
        );
        let capped = json!({"sources": [
            {"name": "rbac", "repository": "platform-config", "namespace": "team-a",
             "kinds": {"allow": ["rbac.authorization.k8s.io/v1/Role"]}},
            {"name": "wide", "repository": "platform-config", "mode": "cluster"}
        ]});
        let (st, b) = s
            .admin(Method::PUT, "/api/v1/agents/edge/gitops", Some(capped))
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        let m = msg(&b);
        assert!(
            m.contains("sources[0].kinds.allow[0]") && m.contains("admin policy"),
            "[{l}] {m}"
        );
        assert!(
            m.contains("sources[1].mode: cluster mode is not allowed"),
            "[{l}] {m}"
        );
        // A refused change leaves the stored sources as they were.
        let (_, kept) = s
            .admin(Method::GET, "/api/v1/agents/edge/gitops", None)
            .await;
        assert_eq!(kept, again, "[{l}]");

        // Non-admins may not read or set sources, or the policy.
        let bob = s.user("bob", &["api", "workspace"]).await;
        for (m, path) in [
            (Method::GET, "/api/v1/agents/edge/gitops"),
            (Method::GET, "/api/v1/gitops/policy"),
        ] {
            let (st, b) = s.call(m, path, Some(&bob), None).await;
            assert_eq!(st, 403, "[{l}] {path}: {b}");
        }

        // Emptied sources free the repository.
        let (st, _) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/edge/gitops",
                Some(json!({"sources": []})),
            )
            .await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = s
            .admin(
                Method::DELETE,
                "/api/v1/gitops/repositories/platform-config",
                None,
            )
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, b) = s
            .admin(Method::GET, "/api/v1/agents/nobody/gitops", None)
            .await;
        assert_eq!(st, 404, "[{l}] {b}");
        s.stop().await;
    }
}
