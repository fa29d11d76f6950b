//! Projects from private repositories, on SQLite and (when configured) PostgreSQL, against a
//! real Git server (`git http-backend` behind basic auth): the credential is sealed and
//! never returned, the devfile is read from the repository at the workspace's ref, the
//! workspace gets the credential through a helper (no secret in its environment), URLs
//! carrying credentials are refused (and old ones moved into sealed storage), and only
//! members see a private project. Skips with a notice where `git` is missing.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_testkit::git_http::{have_git, GitHttpServer};

const PASSWORD: &str = "s3cret-git-pass";

#[tokio::test]
async fn a_private_repository_with_only_a_devfile_path() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    git.create_repo("app", &[("tools/devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    let url = git.url("app");
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        let call = |who: &str, m: Method, path: &str, body: Option<Value>| {
            let who = who.to_owned();
            let path = path.to_owned();
            let s = &s;
            async move { s.call(m, &path, Some(&who), body).await }
        };

        // A URL with the secret in it is refused, naming the way to do it.
        let with_secret = url.replace("http://", &format!("http://ann:{PASSWORD}@"));
        let (st, b) = call(
            &bob,
            Method::POST,
            "/api/v1/projects",
            Some(json!({"name": "app", "git_url": with_secret})),
        )
        .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("project's credential"), "[{l}] {b}");
        assert!(!b.to_string().contains(PASSWORD), "[{l}] {b}");

        let (st, b) = call(
            &bob,
            Method::POST,
            "/api/v1/projects",
            Some(
                json!({"name": "app", "git_url": url, "devfile_path": "tools/devfile.yaml",
                        "credential": {"kind": "basic", "username": "ann", "password": PASSWORD}}),
            ),
        )
        .await;
        assert_eq!(st, 201, "[{l}] {b}");
        assert_eq!(
            (b["credential"].as_str(), b["visibility"].as_str()),
            (Some("basic"), Some("private")),
            "[{l}] {b}"
        );
        for path in ["/api/v1/projects", "/api/v1/projects/app"] {
            let (_, b) = call(&bob, Method::GET, path, None).await;
            assert!(!b.to_string().contains(PASSWORD), "[{l}] {b}");
        }
        let pool = &s.state.store.db.pool;
        let stored: Vec<(String,)> = sqlx::query_as("SELECT credential FROM projects")
            .fetch_all(pool)
            .await
            .unwrap();
        assert!(
            stored.iter().all(|(c,)| !c.contains(PASSWORD)),
            "[{l}] sealed at rest"
        );

        // The workspace's devfile comes from the repository, at the project's ref.
        let w = s
            .workspace(&bob, json!({"project": "app", "name": "bob-app"}))
            .await;
        assert!(
            w["url"].as_str().unwrap_or("").contains("8080-bob-app."),
            "[{l}] the repository's devfile declares port 8080: {w}"
        );
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let yaml = infos["bob-app"]["config_to_apply"].as_str().unwrap();
        assert!(yaml.contains("name: bob-app-git"), "[{l}] {yaml}");
        let origin = url.trim_end_matches("/app.git");
        assert!(
            yaml.contains(&format!("credential.{origin}.helper")),
            "[{l}] the helper is scoped to the repository's origin: {yaml}"
        );
        assert!(
            yaml.contains("/warren/git/credentials"),
            "[{l}] the helper reads the mounted file: {yaml}"
        );
        // The secret travels only in the Secret's data (base64), never in an env value.
        for line in yaml.lines().filter(|l| l.contains("value:")) {
            assert!(!line.contains(PASSWORD), "[{l}] {line}");
        }

        // Errors name the repository, the ref and the path.
        let (st, b) = call(
            &bob,
            Method::POST,
            "/api/v1/workspaces",
            Some(json!({"project": "app", "ref": "nope"})),
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (422, Some("devfile_not_found")),
            "[{l}] {b}"
        );
        assert!(
            msg(&b).contains(&url) && msg(&b).contains("\"nope\""),
            "[{l}] {b}"
        );
        let (st, b) = call(
            &bob,
            Method::PATCH,
            "/api/v1/projects/app",
            Some(json!({"devfile_path": "missing.yaml"})),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = call(
            &bob,
            Method::POST,
            "/api/v1/workspaces",
            Some(json!({"project": "app"})),
        )
        .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(
            msg(&b).contains(&url)
                && msg(&b).contains("\"missing.yaml\"")
                && msg(&b).contains("\"main\""),
            "[{l}] {b}"
        );
        let (st, _) = call(
            &bob,
            Method::PATCH,
            "/api/v1/projects/app",
            Some(json!({"devfile_path": "tools/devfile.yaml"})),
        )
        .await;
        assert_eq!(st, 200);
        let (st, b) = call(
            &bob,
            Method::PUT,
            "/api/v1/projects/app/credential",
            Some(json!({"kind": "token", "token": "wrong-token"})),
        )
        .await;
        assert_eq!(
            (st, b["credential"].as_str()),
            (200, Some("token")),
            "[{l}] {b}"
        );
        let (st, b) = call(
            &bob,
            Method::POST,
            "/api/v1/workspaces",
            Some(json!({"project": "app"})),
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (422, Some("repository_auth_failed")),
            "[{l}] {b}"
        );
        assert!(!msg(&b).contains("wrong-token"), "[{l}] {b}");

        // Private: carol cannot see or use it until bob adds her.
        let (st, _) = call(&carol, Method::GET, "/api/v1/projects/app", None).await;
        assert_eq!(st, 404, "[{l}]");
        let (st, b) = call(
            &carol,
            Method::POST,
            "/api/v1/workspaces",
            Some(json!({"project": "app"})),
        )
        .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("no project named"), "[{l}] {b}");
        let (st, b) = call(
            &bob,
            Method::PUT,
            "/api/v1/projects/app/members/carol",
            Some(json!({"role": "developer"})),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b.as_array().map(Vec::len), Some(2), "[{l}] {b}");
        let (st, _) = call(&carol, Method::GET, "/api/v1/projects/app", None).await;
        assert_eq!(st, 200, "[{l}]");
        let (st, b) = call(
            &carol,
            Method::PUT,
            "/api/v1/projects/app/credential",
            Some(json!({"kind": "token", "token": "x"})),
        )
        .await;
        assert_eq!(st, 403, "[{l}] developers do not manage: {b}");
        let (st, b) = call(
            &bob,
            Method::DELETE,
            "/api/v1/projects/app/members/bob",
            None,
        )
        .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (409, Some("last_maintainer")),
            "[{l}] {b}"
        );
        let (st, _) = call(
            &carol,
            Method::DELETE,
            "/api/v1/projects/app/members/carol",
            None,
        )
        .await;
        assert_eq!(st, 204, "[{l}] a member may leave");
        let (st, _) = call(&carol, Method::GET, "/api/v1/projects/app", None).await;
        assert_eq!(st, 404, "[{l}]");
        let (st, b) = call(
            &bob,
            Method::PUT,
            "/api/v1/projects/app/credential",
            Some(json!({"kind": "token", "token": "two\nlines"})),
        )
        .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).starts_with("credential.token:"), "[{l}] {b}");
        s.stop().await;
    }
}

#[tokio::test]
async fn credentials_in_old_urls_move_into_sealed_storage() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let (st, b) = s.admin(Method::GET, "/api/v1/users/me", None).await;
        assert_eq!(st, 200);
        let admin = warren_types::UserId(b["id"].as_i64().unwrap());
        // A row as an earlier version stored it: the token in the URL, visible to everyone.
        let old = warren_server::store::projects::NewProject {
            name: "legacy".into(),
            git_url: "https://ann:glpat-legacy@git.example.com/team/app.git".into(),
            default_ref: "main".into(),
            devfile_path: ".devfile.yaml".into(),
            devfile: None,
            created_by: admin,
            visibility: warren_types::api::ProjectVisibility::Internal,
            credential: None,
        };
        s.state.store.insert_project(&old, 0).await.unwrap();
        let moved = warren_server::app::projects::move_url_credentials(&s.state)
            .await
            .unwrap();
        assert_eq!(moved, 1, "[{l}]");
        let again = warren_server::app::projects::move_url_credentials(&s.state)
            .await
            .unwrap();
        assert_eq!(again, 0, "[{l}] a no-op once done");
        let (st, b) = s.admin(Method::GET, "/api/v1/projects/legacy", None).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            b["git_url"], "https://git.example.com/team/app.git",
            "[{l}] {b}"
        );
        assert_eq!(b["credential"], "basic", "[{l}] {b}");
        assert_eq!(b["visibility"], "private", "[{l}] {b}");
        let p = s
            .state
            .store
            .project_by_key("legacy")
            .await
            .unwrap()
            .unwrap();
        let c = s.state.store.project_credential(&p).unwrap().unwrap();
        assert_eq!(
            c.username_password(),
            Some(("ann", "glpat-legacy")),
            "[{l}]"
        );
        s.stop().await;
    }
}

// ---- Server-side request forgery: what a user can make the server fetch ----------------
//
// The harness allows the server to fetch from 127.0.0.1 only (the tests' own servers); the
// "internal services" below listen on 127.0.0.2, which the server can reach and the user
// cannot: before the outbound guard, each of these attacks read them.

const INTERNAL_DEVFILE: &str = "schemaVersion: 2.2.0\nmetadata: {name: internal-secret}\ncomponents:\n  - name: leaked\n    container: {image: internal-only, memoryLimit: 64Mi}\n";

/// `token`'s attempt to create a workspace whose devfile's parent is at `uri`.
async fn create_with_parent(s: &TestServer, token: &str, uri: &str) -> (u16, Value) {
    let devfile = format!("schemaVersion: 2.2.0\nparent: {{uri: '{uri}'}}\n");
    s.post(
        token,
        "/api/v1/workspaces",
        json!({"name": "probe", "devfile": devfile}),
    )
    .await
}

#[tokio::test]
async fn attack_a_devfile_parent_on_a_loopback_service_is_not_fetched() {
    let internal =
        warren_testkit::files_http::FilesHttpServer::start_on("127.0.0.2:0".parse().unwrap())
            .await
            .unwrap();
    internal.put("/devfile.yaml", INTERNAL_DEVFILE);
    // An allowed server of the attacker's that bounces the fetch to the internal one.
    let bouncer = warren_testkit::files_http::FilesHttpServer::start()
        .await
        .unwrap();
    bouncer.redirect("/bounce.yaml", &internal.url("/devfile.yaml"));
    bouncer.redirect(
        "/metadata.yaml",
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    );
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let eve = s.user("eve", &["api", "workspace"]).await;
        for (case, uri) in [
            ("direct", internal.url("/devfile.yaml")),
            ("redirected", bouncer.url("/bounce.yaml")),
            ("redirected to metadata", bouncer.url("/metadata.yaml")),
            (
                "metadata",
                "http://169.254.169.254/latest/meta-data/".to_owned(),
            ),
            (
                "mapped IPv6",
                format!(
                    "http://[::ffff:127.0.0.2]:{}/devfile.yaml",
                    internal.addr.port()
                ),
            ),
            (
                "decimal",
                format!("http://2130706434:{}/devfile.yaml", internal.addr.port()),
            ),
        ] {
            let (st, b) = create_with_parent(&s, &eve, &uri).await;
            assert_eq!(st, 422, "[{l}] {case}: {b}");
            let m = msg(&b);
            assert!(
                m.contains("does not resolve to a public address")
                    || m.contains("redirects could not be followed"),
                "[{l}] {case}: the refusal is named: {m}"
            );
            assert!(!m.contains("internal-secret"), "[{l}] {case}: {m}");
        }
        assert_eq!(
            internal.total_hits(),
            0,
            "[{l}] the internal service was never asked"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn attack_a_name_resolving_to_loopback_is_refused_after_resolution() {
    let internal = warren_testkit::files_http::FilesHttpServer::start()
        .await
        .unwrap();
    internal.put("/devfile.yaml", INTERNAL_DEVFILE);
    for db in databases() {
        // No allow-list at all: loopback is refused whatever name leads there.
        let s = TestServer::start_with(&db, |c| c.outbound_allow.clear()).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let eve = s.user("eve", &["api", "workspace"]).await;
        let uri = format!("http://localhost:{}/devfile.yaml", internal.addr.port());
        let (st, b) = create_with_parent(&s, &eve, &uri).await;
        assert_eq!(st, 422, "[{l}] {b}");
        let m = msg(&b);
        assert!(
            m.contains("localhost does not resolve to a public address"),
            "[{l}] {m}"
        );
        assert!(
            !m.contains("127.0.0.1"),
            "[{l}] the address is not told: {m}"
        );
        s.stop().await;
    }
    assert_eq!(
        internal.total_hits(),
        0,
        "the loopback service was never asked"
    );
}

#[tokio::test]
async fn attack_a_project_remote_on_a_loopback_service_is_not_read() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start_on("127.0.0.2:0".parse().unwrap(), "ann", PASSWORD)
        .await
        .unwrap();
    git.create_repo("internal", &[(".devfile.yaml", INTERNAL_DEVFILE)])
        .unwrap();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let eve = s.user("eve", &["api", "workspace"]).await;
        let (st, b) = s
            .post(
                &eve,
                "/api/v1/projects",
                json!({"name": "internal", "git_url": git.url("internal"),
                    "credential": {"kind": "basic", "username": "ann", "password": PASSWORD}}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        let (st, b) = s
            .post(
                &eve,
                "/api/v1/workspaces",
                json!({"project": "internal", "name": "probe"}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "address_not_allowed", "[{l}] {b}");
        assert!(
            msg(&b).contains("does not resolve to a public address"),
            "[{l}] {b}"
        );
        s.stop().await;
    }
    assert_eq!(
        (git.refused(), git.upload_packs()),
        (0, 0),
        "the internal forge was never contacted"
    );
}

/// A repository holding only a dev container configuration: the workspace runs it (its port,
/// its environment with `${localEnv:…}` from the workspace's variables, its lifecycle command)
/// and says so in its notices; a devfile beside one is the one used; a configuration Warren
/// cannot run is refused naming the property; a secret variable is never written into it.
#[tokio::test]
async fn a_repository_with_only_a_dev_container_configuration() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    let config = r#"// The shop's dev container.
        {
          "name": "Shop",
          "image": "localhost/warren-test:latest",
          "forwardPorts": [8080],
          "containerEnv": { "GREETING": "hello ${localEnv:WHO}" },
          "postCreateCommand": "echo created",
          "remoteUser": "vscode",
        }"#;
    git.create_repo("dc", &[(".devcontainer/devcontainer.json", config)])
        .unwrap();
    git.create_repo(
        "both",
        &[
            (".devfile.yaml", WEB_DEVFILE),
            (".devcontainer.json", config),
        ],
    )
    .unwrap();
    git.create_repo(
        "bad",
        &[(
            ".devcontainer.json",
            r#"{ "image": "busybox", "privileged": true }"#,
        )],
    )
    .unwrap();
    // Several configurations: a workspace names the one it runs.
    git.create_repo(
        "several",
        &[
            (".devfile.yaml", WEB_DEVFILE),
            (
                ".devcontainer/python/devcontainer.json",
                r#"{ "image": "localhost/warren-test:latest", "containerEnv": { "FLAVOUR": "python" } }"#,
            ),
            (
                ".devcontainer/node/devcontainer.json",
                r#"{ "image": "localhost/warren-test:latest", "containerEnv": { "FLAVOUR": "node" } }"#,
            ),
        ],
    )
    .unwrap();
    let credential = json!({"kind": "basic", "username": "ann", "password": PASSWORD});
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        for name in ["dc", "both", "bad", "several"] {
            let body = json!({"name": name, "git_url": git.url(name), "credential": credential});
            let (st, b) = s.post(&bob, "/api/v1/projects", body).await;
            assert_eq!(st, 201, "[{l}] {b}");
        }

        let vars = json!([{"key": "WHO", "value": "bob"}, {"key": "TOKEN", "value": "t0k3n-s3cret", "secret": true}]);
        let w = s
            .workspace(
                &bob,
                json!({"project": "dc", "name": "bob-dc", "variables": vars}),
            )
            .await;
        assert!(
            w["url"].as_str().unwrap_or("").contains("8080-bob-dc."),
            "[{l}] the forwarded port is the workspace's: {w}"
        );
        let notices = w["notices"].to_string();
        for said in [
            ".devcontainer/devcontainer.json: the workspace runs this dev container configuration",
            ".devcontainer/devcontainer.json: remoteUser: the image's users are not switched to",
        ] {
            assert!(notices.contains(said), "[{l}] {said:?} not in {notices}");
        }
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let yaml = infos["bob-dc"]["config_to_apply"].as_str().unwrap();
        assert!(yaml.contains("hello bob"), "[{l}] {yaml}");
        assert!(yaml.contains("echo created"), "[{l}] {yaml}");
        assert!(
            !yaml.contains("t0k3n-s3cret"),
            "[{l}] a secret is never in the clear: {yaml}"
        );

        // A devfile beside a dev container configuration wins.
        let w = s
            .workspace(&bob, json!({"project": "both", "name": "bob-both"}))
            .await;
        let notices = w["notices"].to_string();
        assert!(
            notices.contains(".devcontainer.json: the repository also has this dev container configuration; the devfile .devfile.yaml is the one used"),
            "[{l}] the choice is shown: {notices}"
        );
        assert!(
            !notices.contains("runs this dev container configuration"),
            "[{l}] {w}"
        );

        // A workspace's own choice among several configurations, read as a dev container.
        let w = s
            .workspace(
                &bob,
                json!({"project": "several", "name": "bob-node", "definition": ".devcontainer/node/devcontainer.json"}),
            )
            .await;
        assert!(
            w["notices"].to_string().contains(".devcontainer/node/devcontainer.json: the workspace runs this dev container configuration"),
            "[{l}] {w}"
        );
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let yaml = infos["bob-node"]["config_to_apply"].as_str().unwrap();
        assert!(
            yaml.contains("node") && !yaml.contains("python"),
            "[{l}] {yaml}"
        );
        // Without a definition, the project's devfile as before.
        let w = s
            .workspace(&bob, json!({"project": "several", "name": "bob-default"}))
            .await;
        assert!(
            !w["notices"]
                .to_string()
                .contains("dev container configuration"),
            "[{l}] {w}"
        );
        // A definition is a path of the project's repository, and nothing else.
        for (body, says) in [
            (
                json!({"project": "several", "definition": "../etc/passwd"}),
                "no `.`, `..`",
            ),
            (
                json!({"project": "several", "definition": "/etc/passwd"}),
                "relative to the repository's root",
            ),
            (
                json!({"definition": ".devcontainer/node/devcontainer.json"}),
                "give the project or the repository too",
            ),
            (
                json!({"project": "several", "definition": "nowhere/devcontainer.json"}),
                "nowhere/devcontainer.json",
            ),
        ] {
            let (st, b) = s.post(&bob, "/api/v1/workspaces", body.clone()).await;
            assert!((400..500).contains(&st), "[{l}] {body}: {st} {b}");
            assert!(msg(&b).contains(says), "[{l}] {body}: {}", msg(&b));
        }

        // What Warren cannot run is refused by name, with the file and the ref.
        let (st, b) = s
            .post(&bob, "/api/v1/workspaces", json!({"project": "bad"}))
            .await;
        assert_eq!(
            (st, b["error"]["code"].as_str()),
            (422, Some("invalid_devcontainer")),
            "[{l}] {b}"
        );
        let m = msg(&b);
        assert!(
            m.contains(".devcontainer.json")
                && m.contains("privileged: a privileged container is not supported by Warren"),
            "[{l}] {m}"
        );
        s.stop().await;
    }
}
