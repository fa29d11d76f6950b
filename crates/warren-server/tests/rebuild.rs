//! Rebuilding a workspace (issue 41, item 1) on SQLite and (when configured) PostgreSQL: what
//! changes is told before anything is applied, a rebuild keeps the workspace and restarts it
//! with the new objects, a definition that does not validate or that the agent does not allow
//! is refused with its reasons and leaves the workspace as it was, a project's workspace
//! takes the definition its repository has now, and only who may manage it may rebuild it.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_testkit::git_http::{commit_files, have_git, GitHttpServer};

/// WEB_DEVFILE with more memory, the web endpoint on another port, the debug endpoint gone
/// and a second container.
const NEXT_DEVFILE: &str = "schemaVersion: 2.2.0
metadata:
  name: web
components:
  - name: dev
    container:
      image: alpine:3
      memoryLimit: 2Gi
      cpuLimit: '1'
      endpoints:
        - name: web
          targetPort: 3000
          exposure: public
  - name: db
    container:
      image: postgres:16
";

fn parts(b: &Value) -> Vec<(String, String)> {
    b["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            (
                c["part"].as_str().unwrap_or_default().to_owned(),
                c["change"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_rebuild_tells_what_changes_then_applies_it_and_restarts() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        s.workspace(&alice, json!({"name": "w1", "devfile": WEB_DEVFILE}))
            .await;
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        let rebuild = |who: &str, body: Value| {
            let who = who.to_owned();
            let s = &s;
            async move {
                s.call(
                    Method::POST,
                    "/api/v1/workspaces/w1/rebuild",
                    Some(&who),
                    Some(body),
                )
                .await
            }
        };
        let want = pairs(&[
            ("container db", "added"),
            ("container dev", "changed"),
            ("endpoint debug", "removed"),
            ("endpoint web", "changed"),
        ]);

        // A dry run tells and changes nothing.
        let (st, b) = rebuild(&alice, json!({"devfile": NEXT_DEVFILE, "dry_run": true})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(parts(&b), want, "[{l}] {b}");
        assert_eq!(b["applied"], false, "[{l}] {b}");
        assert_eq!(b["source"], "the devfile given", "[{l}] {b}");
        let web = b["changes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["part"] == "endpoint web")
            .unwrap();
        assert_eq!(
            (web["before"].as_str(), web["after"].as_str()),
            (
                Some("port 8080 (public, http) in dev"),
                Some("port 3000 (public, http) in dev")
            ),
            "[{l}] {b}"
        );
        let (_, w) = s
            .call(Method::GET, "/api/v1/workspaces/w1", Some(&alice), None)
            .await;
        assert_eq!(w["desired_state"], "Running", "[{l}] {w}");
        assert!(
            w["endpoints"]["web"]
                .as_str()
                .unwrap()
                .contains("//8080-w1."),
            "[{l}] {w}"
        );
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert!(
            infos.get("w1").is_none(),
            "[{l}] a dry run sends nothing: {infos:?}"
        );

        // Someone else's workspace is not found; a devfile that does not validate is refused
        // with its reason, and the workspace is as it was.
        let (st, b) = rebuild(&bob, json!({"devfile": NEXT_DEVFILE})).await;
        assert_eq!(st, 404, "[{l}] {b}");
        let (st, b) = rebuild(
            &alice,
            json!({"devfile": "schemaVersion: 2.2.0\ncomponents:\n  - name: dev\n    container: {}\n"}),
        )
        .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("image"), "[{l}] names what is wrong: {b}");
        // Beyond what the agent allows: refused by name.
        let (st, b) = rebuild(
            &alice,
            json!({"devfile": NEXT_DEVFILE.replace(
                "  - name: db\n",
                "  - name: db\n    attributes:\n      warren.dev/isolation: {capAdd: [SYS_PTRACE]}\n")}),
        )
        .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert!(msg(&b).contains("SYS_PTRACE"), "[{l}] {b}");
        let (_, after) = s
            .call(Method::GET, "/api/v1/workspaces/w1", Some(&alice), None)
            .await;
        assert_eq!(after["version"], w["version"], "[{l}] untouched: {after}");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert!(infos.get("w1").is_none(), "[{l}] {infos:?}");

        // Applied: restarted with the new objects, the new endpoints shown.
        let (st, b) = rebuild(&alice, json!({"devfile": NEXT_DEVFILE})).await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            (b["applied"].as_bool(), parts(&b)),
            (Some(true), want),
            "[{l}] {b}"
        );
        let w = &b["workspace"];
        assert_eq!(w["desired_state"], "RestartRequested", "[{l}] {w}");
        assert!(
            w["endpoints"]["web"]
                .as_str()
                .unwrap()
                .contains("//3000-w1."),
            "[{l}] {w}"
        );
        assert!(
            w["url"].as_str().unwrap().contains("//3000-w1."),
            "[{l}] {w}"
        );
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        let yaml = infos["w1"]["config_to_apply"].as_str().unwrap();
        assert!(
            yaml.contains("postgres:16")
                && yaml.contains("memory: 2Gi")
                && yaml.contains("replicas: 0"),
            "[{l}] {yaml}"
        );
        let infos = s
            .reconcile_ok(agent, "partial", json!([stopped("w1", "2")]))
            .await;
        assert_eq!(infos["w1"]["desired_state"], "Running", "[{l}] {infos:?}");

        // The definition it was made from is now the new one: nothing more to change.
        let (st, b) = rebuild(&alice, json!({"dry_run": true})).await;
        assert_eq!((st, parts(&b)), (200, vec![]), "[{l}] {b}");
        assert_eq!(b["source"], "the definition it was made from", "[{l}] {b}");
        s.stop().await;
    }
}

/// A project's workspace is rebuilt from what its repository holds at the workspace's ref
/// now; a stopped one stays stopped and starts with it next time.
#[tokio::test]
async fn a_projects_workspace_takes_the_repositorys_definition_as_it_is_now() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("", "").await.unwrap();
    git.create_repo("app", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    let url = git.url("app");
    let mut first = true;
    for db in databases() {
        if !first {
            commit_files(&git.path("app"), &[(".devfile.yaml", WEB_DEVFILE)]).unwrap();
        }
        first = false;
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let call = |m: Method, path: &str, body: Option<Value>| {
            let (s, alice, path) = (&s, alice.clone(), path.to_owned());
            async move { s.call(m, &path, Some(&alice), body).await }
        };
        let (st, b) = call(
            Method::POST,
            "/api/v1/projects",
            Some(json!({"name": "app", "git_url": url})),
        )
        .await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.workspace(&alice, json!({"name": "pw", "project": "app"}))
            .await;
        s.reconcile_ok(agent, "full", json!([running("pw", "1")]))
            .await;
        let mut browser = crate::ui::signed_in(&s, "alice", "password-123").await;
        let page = browser.get("/workspaces/pw").await;
        assert!(
            !page.body.contains("definition changed"),
            "[{l}] {}",
            page.body
        );
        let (st, b) = call(
            Method::POST,
            "/api/v1/workspaces/pw/rebuild",
            Some(json!({"dry_run": true})),
        )
        .await;
        assert_eq!((st, parts(&b)), (200, vec![]), "[{l}] {b}");
        assert_eq!(b["source"], "project app at main", "[{l}] {b}");
        let (st, _) = call(
            Method::PUT,
            "/api/v1/workspaces/pw/desired_state",
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
        assert_eq!(st, 200, "[{l}]");

        // The repository moved on: the page marks it, and a rebuild takes it.
        commit_files(&git.path("app"), &[(".devfile.yaml", NEXT_DEVFILE)]).unwrap();
        let page = browser.get("/workspaces/pw").await;
        assert!(
            page.body
                .contains("Its project&#39;s definition changed since it was built (4 change(s))")
                || page
                    .body
                    .contains("Its project's definition changed since it was built (4 change(s))"),
            "[{l}] {}",
            page.body
        );
        let (st, b) = call(
            Method::POST,
            "/api/v1/workspaces/pw/rebuild",
            Some(json!({})),
        )
        .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert!(
            parts(&b).contains(&("container db".into(), "added".into())),
            "[{l}] {b}"
        );
        assert_eq!(b["workspace"]["desired_state"], "Stopped", "[{l}] {b}");
        let page = browser.get("/workspaces/pw").await;
        assert!(
            !page.body.contains("definition changed"),
            "[{l}] {}",
            page.body
        );

        // Bob owns the space of alice's workspace, so he manages it, but the private project
        // is not his to read: a rebuild from it is refused; a devfile of his own is not.
        let bob = s.user("bob", &["api", "workspace"]).await;
        let (st, b) = s
            .admin(
                Method::POST,
                "/api/v1/spaces",
                Some(json!({"path": "team"})),
            )
            .await;
        assert_eq!(st, 201, "[{l}] {b}");
        for (who, role) in [("bob", "owner"), ("alice", "developer")] {
            let (st, b) = s
                .admin(
                    Method::PUT,
                    &format!("/api/v1/spaces/team/members/{who}"),
                    Some(json!({"role": role})),
                )
                .await;
            assert_eq!(st, 200, "[{l}] {b}");
        }
        s.workspace(
            &alice,
            json!({"name": "tw", "project": "app", "space": "team"}),
        )
        .await;
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/tw/rebuild",
                Some(&bob),
                Some(json!({"dry_run": true})),
            )
            .await;
        assert_eq!(st, 403, "[{l}] {b}");
        assert!(msg(&b).contains("needs access"), "[{l}] {b}");
        assert!(
            !b.to_string().contains("postgres"),
            "[{l}] nothing of it: {b}"
        );
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/tw/rebuild",
                Some(&bob),
                Some(json!({"dry_run": true, "devfile": WEB_DEVFILE})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        s.stop().await;
    }
}
