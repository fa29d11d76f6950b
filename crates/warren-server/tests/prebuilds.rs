//! Prebuilds through the API (issue 43), on SQLite and (when configured) PostgreSQL, against a
//! real Git server: only a project's maintainers turn them on, run them and turn them off;
//! its users list them; a prebuild's own workspace is rendered as a prebuild with the
//! project's credential and nobody's secrets, and no one lists, opens or changes it; a new
//! workspace of the default ref on the prebuilds' agent starts from the newest ready one
//! (and only then); turned off, the prebuilds go and their workspaces are terminated.

use crate::common;
use crate::ui::{csrf_of, form_with, signed_in};

use common::*;
use reqwest::Method;
use serde_json::json;
use warren_testkit::git_http::{have_git, GitHttpServer};

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

const PASSWORD: &str = "pb-git-pass-5d1";
const SECRET: &str = "bobs-own-npm-token-77";

const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata: {name: prebuilt}
attributes:
  warren.dev/prebuild: [deps]
components:
  - name: dev
    container: {image: localhost/warren-test:latest, mountSources: true}
commands:
  - id: deps
    exec: {component: dev, commandLine: "npm ci"}
events:
  postStart: [deps]
"#;

/// A Git server holding repository `app` with [`DEVFILE`], and its URL; `None` (the test
/// skips) without git.
async fn app_repo() -> Option<(GitHttpServer, String)> {
    if !have_git() {
        return None;
    }
    let git = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    git.create_repo("app", &[(".devfile.yaml", DEVFILE)])
        .unwrap();
    let url = git.url("app");
    Some((git, url))
}

/// Project `app` of `url`, made by `token`'s user (its maintainer), with the repository's
/// password as its credential.
async fn make_project(s: &TestServer, token: &str, url: &str) {
    let project = json!({"name": "app", "git_url": url,
        "credential": {"kind": "basic", "username": "ann", "password": PASSWORD}});
    let (st, b) = s.post(token, "/api/v1/projects", project).await;
    assert_eq!(st, 201, "[{}] {b}", s.label);
}

#[tokio::test]
async fn prebuilds_are_the_maintainers_and_start_the_projects_next_workspaces() {
    let Some((git, url)) = app_repo().await else {
        return;
    };
    let head = git.head("app", "main").unwrap();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        let dave = s.user("dave", &["api", "workspace"]).await;
        make_project(&s, &bob, &url).await;
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/projects/app/members/carol",
                json!({"role": "developer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        // Bob's own secret: never in a prebuild, which belongs to no one.
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/users/me/secrets/NPM_TOKEN",
                json!({"value": SECRET}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");

        // Only maintainers turn prebuilds on, run and off; others are told why (or nothing).
        let settings = "/api/v1/projects/app/prebuilds/settings";
        let (st, b) = s.put(&carol, settings, json!({})).await;
        assert_eq!(st, 403, "[{l}] a developer: {b}");
        let (st, b) = s.put(&dave, settings, json!({})).await;
        assert_eq!(st, 404, "[{l}] not a member: {b}");
        let (st, b) = s
            .post(&bob, "/api/v1/projects/app/prebuilds", json!(null))
            .await;
        assert_eq!(st, 409, "[{l}] off: {b}");
        assert!(msg(&b).contains("prebuild on app"), "[{l}] {b}");
        let (st, b) = s.put(&bob, settings, json!({"agent": "nope"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("nope"), "[{l}] {b}");
        let (st, b) = s.put(&bob, settings, json!({"agents": "a1"})).await;
        assert_eq!(st, 400, "[{l}] unknown field: {b}");
        let (st, b) = s.put(&bob, settings, json!({})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(b["prebuild_agent"], "a1", "[{l}] the only agent: {b}");

        let (st, run) = s
            .post(&bob, "/api/v1/projects/app/prebuilds", json!(null))
            .await;
        assert_eq!(st, 202, "[{l}] {run}");
        assert_eq!(
            (&run["state"], &run["trigger"], &run["commit"], &run["ref"]),
            (
                &json!("running"),
                &json!("manual"),
                &json!(head),
                &json!("main")
            ),
            "[{l}] {run}"
        );
        // Asked again while it runs: the same prebuild.
        let (st, again) = s
            .post(&bob, "/api/v1/projects/app/prebuilds", json!(null))
            .await;
        assert_eq!((st, &again["id"]), (202, &run["id"]), "[{l}] {again}");
        let (st, b) = s
            .post(&carol, "/api/v1/projects/app/prebuilds", json!(null))
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(st, 200, "[{l}] {list}");
        assert_eq!(list.as_array().map(Vec::len), Some(1), "[{l}] {list}");
        let (st, _) = s.get(&dave, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(st, 404, "[{l}]");

        // The web UI: the project's users see its prebuilds; only maintainers ask for one.
        let mut carol_ui = signed_in(&s, "carol", "password-123").await;
        let page = carol_ui.get("/projects/app/prebuilds").await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(page.body.contains(&head[..12]), "[{l}] {}", page.body);
        assert!(page.body.contains("running"), "[{l}] {}", page.body);
        let csrf = csrf_of(&page);
        let refused = carol_ui
            .post_form("/projects/app/prebuilds", &form_with(&csrf, &[]))
            .await;
        assert_eq!(refused.status, 403, "[{l}] {}", refused.body);
        let mut dave_ui = signed_in(&s, "dave", "password-123").await;
        let hidden = dave_ui.get("/projects/app/prebuilds").await;
        assert_eq!(hidden.status, 404, "[{l}] {}", hidden.body);
        let mut bob_ui = signed_in(&s, "bob", "password-123").await;
        let page = bob_ui.get("/projects/app/prebuilds").await;
        let asked = bob_ui
            .post_form("/projects/app/prebuilds", &form_with(&csrf_of(&page), &[]))
            .await;
        assert_eq!(asked.status, 303, "[{l}] {}", asked.body);
        assert_eq!(
            asked.location.as_deref(),
            Some("/projects/app/prebuilds"),
            "[{l}]"
        );
        let (_, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(
            list.as_array().map(Vec::len),
            Some(1),
            "[{l}] the running one, not a second: {list}"
        );

        // Its workspace: the agent gets it, as a prebuild, with the project's credential and
        // without Bob's secret; nobody lists, opens or changes it.
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let (name, info) = infos
            .iter()
            .find(|(n, _)| n.starts_with("prebuild-"))
            .unwrap_or_else(|| panic!("[{l}] the prebuild's workspace is sent: {infos:?}"));
        let config = info["config_to_apply"].as_str().unwrap_or_default();
        assert!(
            config.contains("warren.dev/prebuild: 'true'")
                || config.contains("warren.dev/prebuild: \"true\""),
            "[{l}] {config}"
        );
        assert!(
            !config.contains(&b64(SECRET)) && !config.contains(SECRET),
            "[{l}] a secret in a prebuild"
        );
        assert!(!config.contains("NPM_TOKEN"), "[{l}] {config}");
        assert!(
            config.contains(&format!("name: {name}-git")),
            "[{l}] the project's credential: {config}"
        );
        for who in [&bob, &s.admin_token.clone()] {
            let (_, listed) = s.get(who, "/api/v1/workspaces").await;
            assert!(!listed.to_string().contains("prebuild-"), "[{l}] {listed}");
            for (m, path) in [
                (Method::GET, format!("/api/v1/workspaces/{name}")),
                (Method::DELETE, format!("/api/v1/workspaces/{name}")),
                (Method::GET, format!("/api/v1/workspaces/{name}/logs")),
                (
                    Method::PUT,
                    format!("/api/v1/workspaces/{name}/desired_state"),
                ),
            ] {
                let body = (m == Method::PUT).then(|| json!({"desired_state": "Stopped"}));
                let (st, b) = s.call(m.clone(), &path, Some(who), body).await;
                assert_eq!(st, 404, "[{l}] {m} {path}: {b}");
            }
        }

        // Ready (the driver's verdict, set here: this server reads no workspace output), a
        // new workspace of the default ref starts from it; one with its own devfile or of
        // another ref does not.
        let id = run["id"].as_i64().expect("id");
        let finish = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Ready,
            reason: None,
            log: Some("done"),
        };
        let from = warren_types::prebuild::PrebuildState::Running;
        assert!(s
            .state
            .store
            .finish_prebuild(id, from, &finish, 0)
            .await
            .unwrap());
        // Ready, but its workspace has not stopped yet: its volume may still be written to,
        // so a new workspace starts without it.
        let w = s
            .workspace(&carol, json!({"project": "app", "name": "early"}))
            .await;
        assert!(!w["notices"].to_string().contains("prebuild"), "[{l}] {w}");
        assert!(
            !s.config_of(agent, "early").await.contains("seed-from"),
            "[{l}]"
        );
        // The driver stops it; once the agent reports it stopped, it is used.
        warren_server::app::prebuilds::run_once(&s.state, false)
            .await
            .unwrap();
        let (desired,): (String,) =
            sqlx::query_as("SELECT desired_state FROM workspaces WHERE prebuild_id = $1")
                .bind(id)
                .fetch_one(&s.state.store.db.pool)
                .await
                .unwrap();
        assert_eq!(
            desired, "Stopped",
            "[{l}] a ready prebuild's workspace is stopped"
        );
        // The agent reports it stopped, with what it keeps: a figure that is no count of
        // bytes is ignored, the agent's measure is shown per prebuild and for the project.
        let stopped_with = |rv: &str, bytes: &str| {
            let mut report = stopped(name, rv);
            report["namespace"] = info["namespace"].clone();
            report["latest_k8s_deployment_info"]["metadata"]["annotations"] =
                json!({ warren_types::prebuild::STORED_BYTES_ANNOTATION: bytes });
            report
        };
        s.reconcile_ok(agent, "partial", json!([stopped_with("7", "a lot")]))
            .await;
        let (_, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["state"], "ready", "[{l}] {list}");
        assert!(list[0].get("stored_bytes").is_none(), "[{l}] {list}");
        s.reconcile_ok(agent, "partial", json!([stopped_with("8", "1610612736")]))
            .await;
        let (_, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["stored_bytes"], 1_610_612_736u64, "[{l}] {list}");
        let page = carol_ui.get("/projects/app/prebuilds").await;
        assert!(
            page.body.contains("1.5 GiB"),
            "[{l}] the space, per prebuild and in all: {}",
            page.body
        );
        let w = s
            .workspace(&carol, json!({"project": "app", "name": "mine"}))
            .await;
        let notices = w["notices"].to_string();
        assert!(
            notices.contains(&format!("prebuild of commit {}", &head[..12])),
            "[{l}] {w}"
        );
        let config = s.config_of(agent, "mine").await;
        assert!(
            config.contains(&format!("warren.dev/seed-from: {name}")),
            "[{l}] {config}"
        );
        for (ws, extra) in [
            ("own-devfile", json!({"devfile": DEVFILE})),
            ("other-ref", json!({"ref": head})),
        ] {
            let mut req = json!({"project": "app", "name": ws});
            req.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let w = s.workspace(&carol, req).await;
            assert!(
                !w["notices"].to_string().contains("prebuild"),
                "[{l}] {ws}: {w}"
            );
            let config = s.config_of(agent, ws).await;
            assert!(!config.contains("seed-from"), "[{l}] {ws}");
        }
        let (_, list) = s.get(&bob, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["used"], 1, "[{l}] {list}");

        // Off: the prebuild is removed and its workspace asked to go.
        let (st, b) = s.delete(&bob, settings).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(b.get("prebuild_agent").is_none(), "[{l}] {b}");
        let (_, list) = s.get(&bob, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["state"], "removed", "[{l}] {list}");
        assert!(
            list[0].get("stored_bytes").is_none(),
            "[{l}] a removed prebuild keeps nothing: {list}"
        );
        let gone: Vec<(String,)> =
            sqlx::query_as("SELECT desired_state FROM workspaces WHERE prebuild_id IS NOT NULL")
                .fetch_all(&s.state.store.db.pool)
                .await
                .unwrap();
        assert_eq!(gone, [("Terminated".to_owned(),)], "[{l}]");
        let (st, b) = s.get(&carol, "/api/v1/workspaces/early").await;
        assert_eq!(st, 200, "[{l}] {b}");
        // A workspace already started from it keeps running, untouched.
        let (st, b) = s.get(&carol, "/api/v1/workspaces/mine").await;
        assert_eq!(
            (st, &b["desired_state"]),
            (200, &json!("Running")),
            "[{l}] {b}"
        );
    }
}

/// Anyone may make a project: a prebuild's workspace counts against every quota of the
/// maintainer who turned prebuilds on, or prebuilds would be a way past one.
#[tokio::test]
async fn a_prebuild_counts_against_the_quotas_of_whoever_turned_them_on() {
    let Some((_git, url)) = app_repo().await else {
        return;
    };
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({"workspaces_per_user_quota": 1})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        make_project(&s, &bob, &url).await;
        let settings = "/api/v1/projects/app/prebuilds/settings";
        let (st, b) = s.put(&bob, settings, json!({})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let runs = "/api/v1/projects/app/prebuilds";
        let (st, run) = s.post(&bob, runs, json!(null)).await;
        assert_eq!((st, &run["state"]), (202, &json!("running")), "[{l}] {run}");
        // Its running prebuild is Bob's one workspace on the agent.
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces",
                Some(&bob),
                Some(json!({"name": "w1"})),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(msg(&b).contains("workspaces_per_user_quota"), "[{l}] {b}");

        // Once it failed and its workspace went, Bob's own takes the place; the next prebuild
        // then fails saying whose quota it would exceed.
        let finish = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Failed,
            reason: Some("a step failed"),
            log: None,
        };
        let from = warren_types::prebuild::PrebuildState::Running;
        let id = run["id"].as_i64().expect("id");
        assert!(s
            .state
            .store
            .finish_prebuild(id, from, &finish, 0)
            .await
            .unwrap());
        warren_server::app::prebuilds::run_once(&s.state, false)
            .await
            .unwrap();
        s.workspace(&bob, json!({"name": "w1"})).await;
        let (st, run) = s.post(&bob, runs, json!(null)).await;
        assert_eq!((st, &run["state"]), (202, &json!("failed")), "[{l}] {run}");
        let reason = run["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("bob's quotas") && reason.contains("workspaces_per_user_quota"),
            "[{l}] {run}"
        );
        s.stop().await;
    }
}

/// A forge's push webhook for a project: only with the project's secret (set by a
/// maintainer, stored sealed, never shown), and then the ref's new commit gets its prebuild
/// at once instead of at the next poll. What the body claims is never the commit: the ref is
/// read. A missing project and one without a secret answer alike.
#[tokio::test]
async fn a_signed_push_webhook_prebuilds_the_refs_new_commit_at_once() {
    const HOOK_SECRET: &str = "prebuild-hook-secret-4f1e9";
    let Some((git, url)) = app_repo().await else {
        return;
    };
    let sign = |secret: &str, body: &[u8]| {
        use hmac::Mac;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    };
    for db in databases() {
        // The ref's head as this database's run finds it (an earlier run pushed to it).
        let first = git.head("app", "main").unwrap();
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        make_project(&s, &bob, &url).await;
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/projects/app/members/carol",
                json!({"role": "developer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = s
            .put(&bob, "/api/v1/projects/app/prebuilds/settings", json!({}))
            .await;
        assert_eq!(st, 200, "[{l}] {b}");

        let hook =
            |project: &str| format!("{}/api/v1/projects/{project}/prebuilds/webhook", s.base);
        let body = format!(
            r#"{{"ref":"refs/heads/main","after":"{}"}}"#,
            "f".repeat(40)
        );
        let push = |project: &str, header: Option<(&str, String)>| {
            let mut req = s.http.post(hook(project)).body(body.clone());
            if let Some((name, value)) = header {
                req = req.header(name, value);
            }
            async move {
                let r = req.send().await.expect("webhook");
                let status = r.status().as_u16();
                (
                    status,
                    r.json::<serde_json::Value>().await.unwrap_or_default(),
                )
            }
        };
        let signed = || Some(("X-Hub-Signature-256", sign(HOOK_SECRET, body.as_bytes())));

        // No secret yet: no webhook, said as for a project that does not exist.
        let (st, none) = push("app", signed()).await;
        assert_eq!(st, 404, "[{l}] {none}");
        let (st, missing) = push("no-such-project", signed()).await;
        assert_eq!(st, 404, "[{l}] {missing}");
        assert_eq!(
            msg(&none).replace("\"app\"", "X"),
            msg(&missing).replace("\"no-such-project\"", "X"),
            "[{l}] the answers tell the projects apart"
        );

        // Maintainers set it, within bounds; developers cannot.
        let secret_path = "/api/v1/projects/app/prebuilds/webhook";
        let (st, b) = s
            .put(&carol, secret_path, json!({"secret": HOOK_SECRET}))
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        let (st, b) = s.put(&bob, secret_path, json!({"secret": "short"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(msg(&b).contains("secret"), "[{l}] {b}");
        let (st, b) = s
            .put(&bob, secret_path, json!({"secret": HOOK_SECRET}))
            .await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (_, project) = s.get(&bob, "/api/v1/projects/app").await;
        assert!(
            !project.to_string().contains(HOOK_SECRET),
            "[{l}] {project}"
        );

        // Wrong or missing proof: refused, nothing started.
        for header in [
            None,
            Some((
                "X-Hub-Signature-256",
                sign("another-secret-entirely", body.as_bytes()),
            )),
            Some(("X-Gitlab-Token", "prebuild-hook-secret-4f1e8".to_owned())),
            Some(("X-Gitea-Signature", "00".repeat(32))),
        ] {
            let (st, b) = push("app", header).await;
            assert_eq!(st, 401, "[{l}] {b}");
        }
        let (_, list) = s.get(&bob, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list.as_array().map(Vec::len), Some(0), "[{l}] {list}");

        // Signed: the ref's newest commit (not the body's) is prebuilt at once.
        let (st, b) = push("app", signed()).await;
        assert_eq!(st, 202, "[{l}] {b}");
        assert_eq!(
            (&b["started"][0]["commit"], &b["started"][0]["trigger"]),
            (&json!(first), &json!("push")),
            "[{l}] {b}"
        );
        assert_eq!(b["started"].as_array().map(Vec::len), Some(1), "[{l}] {b}");
        // Again while it runs: nothing more. GitLab's token works as well.
        let (st, b) = push("app", Some(("X-Gitlab-Token", HOOK_SECRET.to_owned()))).await;
        assert_eq!((st, &b["started"]), (202, &json!([])), "[{l}] {b}");

        // A new commit, its predecessor's prebuild finished: the next push prebuilds it.
        let second = git
            .push_commit("app", &[("README.md", &format!("second, {l}\n"))])
            .unwrap();
        let (_, list) = s.get(&bob, "/api/v1/projects/app/prebuilds").await;
        let id = list[0]["id"].as_i64().expect("id");
        let finish = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Failed,
            reason: Some("a step failed"),
            log: None,
        };
        let from = warren_types::prebuild::PrebuildState::Running;
        assert!(s
            .state
            .store
            .finish_prebuild(id, from, &finish, 0)
            .await
            .unwrap());
        let (st, b) = push("app", signed()).await;
        assert_eq!(st, 202, "[{l}] {b}");
        assert_eq!(b["started"][0]["commit"], json!(second), "[{l}] {b}");

        // Removed: refused as if there were none.
        let (st, b) = s.call(Method::DELETE, secret_path, Some(&bob), None).await;
        assert_eq!(st, 204, "[{l}] {b}");
        let (st, b) = push("app", signed()).await;
        assert_eq!(st, 404, "[{l}] {b}");
    }
}

/// Maintainers choose more refs than the default one, and a schedule: each ref's newest commit
/// gets its prebuild (a ref that cannot be read keeps no other from its own), a workspace of a
/// prebuilt ref starts from that ref's prebuild, a ref's unchanged commit is prebuilt again
/// once its newest prebuild is as old as the schedule says, and a ref taken off the list loses
/// its prebuilds.
#[tokio::test]
async fn more_refs_are_prebuilt_and_a_schedule_prebuilds_an_unchanged_commit_again() {
    let Some((git, url)) = app_repo().await else {
        return;
    };
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let main = git.head("app", "main").unwrap();
        let release = git
            .push_commit_to("app", "release", &[("RELEASE", l)])
            .unwrap();
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        make_project(&s, &bob, &url).await;
        let settings = "/api/v1/projects/app/prebuilds/settings";
        let prebuilds = "/api/v1/projects/app/prebuilds";

        // Settings out of bounds are refused, naming what is wrong.
        let many: Vec<String> = (0..11).map(|i| format!("b{i}")).collect();
        for (body, names) in [
            (json!({"refs": ["bad..ref"]}), "bad..ref"),
            (json!({"refs": many}), "at most 10"),
            (json!({"every_hours": 0}), "not 0"),
            (json!({"every_hours": 100_000}), "not 100000"),
            (json!({"refs": "release"}), "sequence"),
        ] {
            let (st, b) = s.put(&bob, settings, body.clone()).await;
            assert_eq!(st, 400, "[{l}] {body}: {b}");
            assert!(msg(&b).contains(names), "[{l}] {body}: {b}");
        }
        let (_, project) = s.get(&bob, "/api/v1/projects/app").await;
        assert!(project.get("prebuild_agent").is_none(), "[{l}] {project}");

        // The default ref first, each ref once; "gone" does not exist (yet).
        let (st, p) = s
            .put(
                &bob,
                settings,
                json!({"refs": ["release", "main", "release", "gone"], "every_hours": 24}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {p}");
        assert_eq!(
            (&p["prebuild_refs"], &p["prebuild_every_hours"]),
            (&json!(["main", "release", "gone"]), &json!(24)),
            "[{l}] {p}"
        );

        let poll = || warren_server::app::prebuilds::run_once(&s.state, true);
        poll().await.unwrap();
        let (_, list) = s.get(&bob, prebuilds).await;
        let of = |list: &serde_json::Value, r: &str| -> Vec<serde_json::Value> {
            let all = list.as_array().cloned().unwrap_or_default();
            all.into_iter().filter(|b| b["ref"] == r).collect()
        };
        for (r, commit) in [("main", &main), ("release", &release)] {
            let mine = of(&list, r);
            assert_eq!(mine.len(), 1, "[{l}] {r}: {list}");
            assert_eq!(
                (&mine[0]["commit"], &mine[0]["trigger"], &mine[0]["state"]),
                (&json!(commit), &json!("push"), &json!("running")),
                "[{l}] {r}: {list}"
            );
        }
        assert!(of(&list, "gone").is_empty(), "[{l}] {list}");
        let release_id = of(&list, "release")[0]["id"].as_i64().expect("id");
        let main_id = of(&list, "main")[0]["id"].as_i64().expect("id");

        // Asked for by hand: only a prebuilt ref; the running one of it is answered.
        let (st, b) = s.post(&bob, prebuilds, json!({"ref": "feature"})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).contains("\"feature\"") && msg(&b).contains("--ref feature"),
            "[{l}] {b}"
        );
        let (st, b) = s.post(&bob, prebuilds, json!({"reff": "release"})).await;
        assert_eq!(st, 400, "[{l}] unknown field: {b}");
        let (st, b) = s.post(&bob, prebuilds, json!({"ref": "release"})).await;
        assert_eq!((st, &b["id"]), (202, &json!(release_id)), "[{l}] {b}");

        // Release's prebuild ready and its workspace stopped: a workspace of release starts
        // from it; one of main (whose prebuild still runs) does not.
        let ready = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Ready,
            reason: None,
            log: Some("done"),
        };
        let running = warren_types::prebuild::PrebuildState::Running;
        let store = &s.state.store;
        assert!(store
            .finish_prebuild(release_id, running, &ready, 0)
            .await
            .unwrap());
        warren_server::app::prebuilds::run_once(&s.state, false)
            .await
            .unwrap();
        sqlx::query("UPDATE workspaces SET actual_state = 'Stopped' WHERE prebuild_id = $1")
            .bind(release_id)
            .execute(&store.db.pool)
            .await
            .unwrap();
        let (release_ws,): (String,) =
            sqlx::query_as("SELECT name FROM workspaces WHERE prebuild_id = $1")
                .bind(release_id)
                .fetch_one(&store.db.pool)
                .await
                .unwrap();
        let w = s
            .workspace(
                &bob,
                json!({"project": "app", "name": "rel", "ref": "release"}),
            )
            .await;
        assert!(
            w["notices"]
                .to_string()
                .contains(&format!("prebuild of commit {}", &release[..12])),
            "[{l}] {w}"
        );
        let config = s.config_of(agent, "rel").await;
        assert!(
            config.contains(&format!("warren.dev/seed-from: {release_ws}")),
            "[{l}] {config}"
        );
        let w = s
            .workspace(&bob, json!({"project": "app", "name": "trunk"}))
            .await;
        assert!(!w["notices"].to_string().contains("prebuild"), "[{l}] {w}");

        // Main's failed; a day has not passed: the same commits are not prebuilt again.
        let failed = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Failed,
            reason: Some("a step failed"),
            log: None,
        };
        assert!(store
            .finish_prebuild(main_id, running, &failed, 0)
            .await
            .unwrap());
        s.clock.advance_ms(23 * 3_600_000);
        poll().await.unwrap();
        let (_, list) = s.get(&bob, prebuilds).await;
        assert_eq!(list.as_array().map(Vec::len), Some(2), "[{l}] {list}");
        // A day after they started: both again, at the same commits, said to be scheduled.
        s.clock.advance_ms(3_600_000);
        poll().await.unwrap();
        let (_, list) = s.get(&bob, prebuilds).await;
        for (r, commit) in [("main", &main), ("release", &release)] {
            let mine = of(&list, r);
            assert_eq!(mine.len(), 2, "[{l}] {r}: {list}");
            assert_eq!(
                (&mine[0]["commit"], &mine[0]["trigger"], &mine[0]["state"]),
                (&json!(commit), &json!("schedule"), &json!("running")),
                "[{l}] {r}: {list}"
            );
        }

        // Release off the list (the schedule too): its prebuilds go, their workspaces with
        // them; the workspace made from one keeps running.
        let (st, p) = s.put(&bob, settings, json!({})).await;
        assert_eq!(st, 200, "[{l}] {p}");
        assert_eq!(p["prebuild_refs"], json!(["main"]), "[{l}] {p}");
        assert!(p.get("prebuild_every_hours").is_none(), "[{l}] {p}");
        let (_, list) = s.get(&bob, prebuilds).await;
        for b in of(&list, "release") {
            assert_eq!(b["state"], "removed", "[{l}] {list}");
            let reason = b["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("no longer prebuilt"), "[{l}] {b}");
        }
        let kept: Vec<(String,)> = sqlx::query_as(
            "SELECT w.desired_state FROM workspaces w JOIN prebuilds b ON b.id = w.prebuild_id \
             WHERE b.git_ref = 'release'",
        )
        .fetch_all(&store.db.pool)
        .await
        .unwrap();
        assert!(
            !kept.is_empty() && kept.iter().all(|(d,)| d == "Terminated"),
            "[{l}] {kept:?}"
        );
        let (st, b) = s.get(&bob, "/api/v1/workspaces/rel").await;
        assert_eq!(
            (st, &b["desired_state"]),
            (200, &json!("Running")),
            "[{l}] {b}"
        );
    }
}

/// The names and desired states of the workspaces waiting in a warm pool (not terminated).
async fn pool_of(s: &TestServer) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT name, desired_state FROM workspaces WHERE pool_of IS NOT NULL \
         AND desired_state <> 'Terminated' ORDER BY id",
    )
    .fetch_all(&s.state.store.db.pool)
    .await
    .unwrap()
}

/// A warm pool: its workspaces are made from the newest ready prebuild with nobody's secrets,
/// shown to no one, stopped once their startup is done, and handed whole to the next user
/// who creates a workspace of the default ref (rendered as theirs, catching up from the
/// prebuild at their start); the pool is refilled, shrunk, and emptied when turned off, and
/// the workspace taken keeps running.
#[tokio::test]
async fn a_warm_pool_hands_its_workspaces_to_the_next_users_and_is_refilled() {
    let Some((git, url)) = app_repo().await else {
        return;
    };
    let head = git.head("app", "main").unwrap();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let carol = s.user("carol", &["api", "workspace"]).await;
        make_project(&s, &bob, &url).await;
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/projects/app/members/carol",
                json!({"role": "developer"}),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (st, b) = s
            .put(
                &bob,
                "/api/v1/users/me/secrets/NPM_TOKEN",
                json!({"value": SECRET}),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        let settings = "/api/v1/projects/app/prebuilds/settings";
        let (st, b) = s.put(&bob, settings, json!({"pool": 21})).await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            msg(&b).contains("at most 20") && msg(&b).contains("21"),
            "[{l}] {b}"
        );
        let (st, p) = s.put(&bob, settings, json!({"pool": 2})).await;
        assert_eq!((st, &p["prebuild_pool"]), (200, &json!(2)), "[{l}] {p}");

        // No ready prebuild yet: nothing to fill the pool from.
        let run_once = || warren_server::app::prebuilds::run_once(&s.state, false);
        run_once().await.unwrap();
        assert!(pool_of(&s).await.is_empty(), "[{l}]");
        let (st, run) = s
            .post(&bob, "/api/v1/projects/app/prebuilds", json!(null))
            .await;
        assert_eq!(st, 202, "[{l}] {run}");
        let id = run["id"].as_i64().expect("id");
        let store = &s.state.store;
        let ready = warren_server::store::prebuilds::Finish {
            state: warren_types::prebuild::PrebuildState::Ready,
            reason: None,
            log: Some("done"),
        };
        let running = warren_types::prebuild::PrebuildState::Running;
        assert!(store.finish_prebuild(id, running, &ready, 0).await.unwrap());
        run_once().await.unwrap();
        assert!(
            pool_of(&s).await.is_empty(),
            "[{l}] its workspace has not stopped yet"
        );
        sqlx::query("UPDATE workspaces SET actual_state = 'Stopped' WHERE prebuild_id = $1")
            .bind(id)
            .execute(&store.db.pool)
            .await
            .unwrap();
        run_once().await.unwrap();
        let members = pool_of(&s).await;
        assert_eq!(members.len(), 2, "[{l}] {members:?}");
        assert!(
            members.iter().all(|(_, d)| d == "Running"),
            "[{l}] started once: {members:?}"
        );

        // Sent to the agent as copies of the prebuild with the project's credential, nobody's
        // secret, and no catch-up (that is for whoever takes it); hidden from everyone.
        let (prebuild_ws,): (String,) =
            sqlx::query_as("SELECT name FROM workspaces WHERE prebuild_id = $1")
                .bind(id)
                .fetch_one(&store.db.pool)
                .await
                .unwrap();
        for (name, _) in &members {
            let config = s.config_of(agent, name).await;
            assert!(
                config.contains(&format!("warren.dev/seed-from: {prebuild_ws}")),
                "[{l}] {config}"
            );
            assert!(
                config.contains(&format!("name: {name}-git")),
                "[{l}] {config}"
            );
            assert!(
                !config.contains(&b64(SECRET)) && !config.contains("NPM_TOKEN"),
                "[{l}] a secret in a pooled workspace"
            );
            assert!(
                !config.contains("up to date from its prebuild"),
                "[{l}] a pooled workspace catches up at its first start: {config}"
            );
            for who in [&bob, &carol, &s.admin_token.clone()] {
                let (st, b) = s.get(who, &format!("/api/v1/workspaces/{name}")).await;
                assert_eq!(st, 404, "[{l}] {b}");
                let (_, listed) = s.get(who, "/api/v1/workspaces").await;
                assert!(
                    !listed.to_string().contains(name.as_str()),
                    "[{l}] {listed}"
                );
            }
        }
        // Still starting: nothing to take yet; a workspace starts from the prebuild instead.
        let w = s.workspace(&carol, json!({"project": "app"})).await;
        let notices = w["notices"].to_string();
        assert!(!notices.contains("warm pool"), "[{l}] {w}");
        assert!(notices.contains("prebuild of commit"), "[{l}] {w}");
        let cold = w["name"].as_str().unwrap_or_default().to_owned();
        assert!(members.iter().all(|(n, _)| *n != cold), "[{l}] {w}");

        // Their startup done and stopped (the driver's verdict, set here: this server reads
        // no workspace's output), the next workspace of the default ref is one of them.
        sqlx::query(
            "UPDATE workspaces SET desired_state = 'Stopped', actual_state = 'Stopped' \
             WHERE pool_of IS NOT NULL",
        )
        .execute(&store.db.pool)
        .await
        .unwrap();
        // Its users see how many wait (not who made them or what they are called).
        let (_, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["pool_ready"], 2, "[{l}] {list}");
        let named = s
            .workspace(&carol, json!({"project": "app", "name": "mine"}))
            .await;
        assert!(
            !named["notices"].to_string().contains("warm pool"),
            "[{l}] a name asked for is a new workspace: {named}"
        );
        let other_ref = s
            .workspace(&carol, json!({"project": "app", "ref": head}))
            .await;
        assert!(
            !other_ref["notices"].to_string().contains("warm pool"),
            "[{l}] {other_ref}"
        );
        let w = s.workspace(&carol, json!({"project": "app"})).await;
        let taken = w["name"].as_str().unwrap_or_default().to_owned();
        assert!(
            w["notices"].to_string().contains(&format!(
                "warm pool: made from the prebuild of commit {}",
                &head[..12]
            )),
            "[{l}] {w}"
        );
        assert_eq!(&taken, &members[0].0, "[{l}] the oldest member: {w}");
        assert_eq!(
            (&w["owner_username"], &w["desired_state"]),
            (&json!("carol"), &json!("Running")),
            "[{l}] {w}"
        );
        let (st, b) = s.get(&carol, &format!("/api/v1/workspaces/{taken}")).await;
        assert_eq!(st, 200, "[{l}] {b}");
        let (_, listed) = s.get(&carol, "/api/v1/workspaces").await;
        assert!(listed.to_string().contains(&taken), "[{l}] {listed}");
        let config = s.config_of(agent, &taken).await;
        assert!(
            config.contains("up to date from its prebuild"),
            "[{l}] taken, it catches up from the prebuild: {config}"
        );
        assert!(pool_of(&s).await.iter().all(|(n, _)| *n != taken), "[{l}]");
        let (_, list) = s.get(&carol, "/api/v1/projects/app/prebuilds").await;
        assert_eq!(list[0]["pool_ready"], 1, "[{l}] {list}");

        // Refilled to two; made smaller, then turned off: the pool's go, the one taken stays.
        run_once().await.unwrap();
        let members = pool_of(&s).await;
        assert_eq!(members.len(), 2, "[{l}] refilled: {members:?}");
        let (st, p) = s.put(&bob, settings, json!({"pool": 1})).await;
        assert_eq!(st, 200, "[{l}] {p}");
        run_once().await.unwrap();
        let left = pool_of(&s).await;
        assert_eq!(left, members[..1], "[{l}] the oldest stays");
        let (st, p) = s.put(&bob, settings, json!({})).await;
        assert_eq!(st, 200, "[{l}] {p}");
        assert!(p.get("prebuild_pool").is_none(), "[{l}] {p}");
        run_once().await.unwrap();
        assert!(pool_of(&s).await.is_empty(), "[{l}]");
        let (st, b) = s.get(&carol, &format!("/api/v1/workspaces/{taken}")).await;
        assert_eq!(
            (st, &b["desired_state"]),
            (200, &json!("Running")),
            "[{l}] {b}"
        );
    }
}
