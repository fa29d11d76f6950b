//! Opening a repository without a project (issue 41, item 2) on SQLite and (when configured)
//! PostgreSQL, against a real Git server: the definition is read from the repository at the
//! ref asked for (a devfile, else a dev container configuration, else the server's default
//! devfile, said), the workspace clones it, a rebuild reads it again; a URL the server must
//! not read (a path of its disk, credentials in it, an address it may not reach) and a
//! private repository are refused with what to do instead.

use crate::common;

use base64::Engine;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_testkit::git_http::{commit_files, git as git_in, have_git, GitHttpServer};

const DEVCONTAINER: &str = r#"{
  // Comments, as dev container files have them.
  "image": "alpine:3",
  "forwardPorts": [3000],
}"#;

fn notices(w: &Value) -> String {
    w["notices"].to_string()
}

#[tokio::test]
async fn a_repository_opens_without_a_project_and_rebuilds_from_it() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("", "").await.unwrap();
    git.create_repo("web-app", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    git.create_repo(
        "Dev_Container",
        &[(".devcontainer/devcontainer.json", DEVCONTAINER)],
    )
    .unwrap();
    git.create_repo("plain", &[("README.md", "nothing to run\n")])
        .unwrap();
    let web = git.url("web-app");
    git.create_repo(
        "two-defs",
        &[
            (".devfile.yaml", WEB_DEVFILE),
            ("tools/other.yaml", &WEB_DEVFILE.replace("8080", "7000")),
        ],
    )
    .unwrap();
    let two_defs = git.url("two-defs");
    // As forges do: a commit may be fetched by its id (`ws create --repo URL#COMMIT`).
    git_in(
        &git.path("web-app"),
        &["config", "uploadpack.allowReachableSHA1InWant", "true"],
    )
    .unwrap();
    for db in databases() {
        // The repository's devfile moves on below: each database starts from the first,
        // kept reachable by a tag (a commit is fetched by its id as forges allow).
        let first = commit_files(&git.path("web-app"), &[(".devfile.yaml", WEB_DEVFILE)]).unwrap();
        git_in(&git.path("web-app"), &["tag", "--force", "v1", &first]).unwrap();
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;

        // Its devfile: the workspace clones the repository into /projects/web-app.
        let w = s
            .workspace(&alice, json!({"name": "r1", "repository": web}))
            .await;
        assert_eq!(w["repository"], web.as_str(), "[{l}] {w}");
        assert!(w["project"].is_null(), "[{l}] {w}");
        assert!(
            w["url"].as_str().unwrap_or("").contains("8080-r1."),
            "[{l}] the repository's devfile declares port 8080: {w}"
        );
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let yaml = infos["r1"]["config_to_apply"].as_str().unwrap();
        let encoded = base64::engine::general_purpose::STANDARD.encode(&web);
        assert!(
            yaml.contains(&format!("WARREN_PROJECT_GIT_URL: {encoded}"))
                && yaml.contains("cloning project web-app"),
            "[{l}] the workspace clones the repository into /projects/web-app: {yaml}"
        );
        assert!(
            !yaml.contains("name: r1-git"),
            "[{l}] no credential Secret for a repository opened by URL: {yaml}"
        );

        // At a ref: a commit before the devfile moved on.
        commit_files(
            &git.path("web-app"),
            &[(".devfile.yaml", &WEB_DEVFILE.replace("8080", "9090"))],
        )
        .unwrap();
        let w = s
            .workspace(
                &alice,
                json!({"name": "r2", "repository": web, "ref": first}),
            )
            .await;
        assert!(
            w["url"].as_str().unwrap_or("").contains("8080-r2."),
            "[{l}] the devfile at the ref asked for: {w}"
        );
        assert_eq!(w["ref"], first.as_str(), "[{l}] {w}");

        // Only a dev container configuration: it runs, its port forwarded; the folder is the
        // repository's name as a DNS label.
        let w = s
            .workspace(
                &alice,
                json!({"name": "r3", "repository": git.url("Dev_Container")}),
            )
            .await;
        assert!(w["endpoints"].to_string().contains("3000-r3."), "[{l}] {w}");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        let yaml = infos["r3"]["config_to_apply"].as_str().unwrap();
        assert!(yaml.contains("dev-container"), "[{l}] {yaml}");

        // Neither: the server's default devfile, said, with the repository cloned.
        let w = s
            .workspace(
                &alice,
                json!({"name": "r4", "repository": git.url("plain")}),
            )
            .await;
        assert!(
            notices(&w).contains("has no devfile")
                && notices(&w).contains("server's default devfile runs it")
                && notices(&w).contains("/projects/plain"),
            "[{l}] {w}"
        );

        // A rebuild reads the repository again: r1 was made from the devfile on port 8080.
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/r1/rebuild",
                Some(&alice),
                Some(json!({"dry_run": true})),
            )
            .await;
        assert_eq!(st, 200, "[{l}] {b}");
        assert_eq!(
            b["source"],
            format!("repository {web} at its default branch"),
            "[{l}] {b}"
        );
        assert!(b["changes"].to_string().contains("port 9090"), "[{l}] {b}");
        // r2 stays at its commit: nothing to change.
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/r2/rebuild",
                Some(&alice),
                Some(json!({"dry_run": true})),
            )
            .await;
        assert_eq!((st, b["changes"].clone()), (200, json!([])), "[{l}] {b}");

        // A definition chosen at creation (`--definition`) is the one a rebuild reads again,
        // not the usual locations.
        let w = s
            .workspace(
                &alice,
                json!({"name": "r5", "repository": two_defs, "definition": "tools/other.yaml"}),
            )
            .await;
        assert!(
            w["url"].as_str().unwrap_or("").contains("7000-r5."),
            "[{l}] {w}"
        );
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces/r5/rebuild",
                Some(&alice),
                Some(json!({"dry_run": true})),
            )
            .await;
        assert_eq!(
            (st, b["changes"].clone()),
            (200, json!([])),
            "[{l}] the chosen file again, not .devfile.yaml's port 8080: {b}"
        );

        // The list shows the repository where a project would be; a project and a
        // repository together, or a starter project with a repository, are refused.
        let (_, list) = s
            .call(Method::GET, "/api/v1/workspaces", Some(&alice), None)
            .await;
        assert!(list.to_string().contains(&web), "[{l}] {list}");
        for (body, field, words) in [
            (
                json!({"repository": web, "project": "app"}),
                "repository",
                "not both",
            ),
            (
                json!({"repository": web, "starter": "x"}),
                "starter",
                "without a project repository",
            ),
            (
                json!({"repository": web, "ref": "--upload-pack=x"}),
                "ref",
                "not a valid git ref",
            ),
        ] {
            let (st, b) = s.post(&alice, "/api/v1/workspaces", body.clone()).await;
            assert!(st == 400 || st == 422, "[{l}] {body}: {st} {b}");
            assert!(
                msg(&b).starts_with(&format!("{field}: ")),
                "[{l}] {body}: {b}"
            );
            assert!(msg(&b).contains(words), "[{l}] {body}: {b}");
        }
        s.stop().await;
    }
}

#[tokio::test]
async fn attack_repositories_the_server_must_not_read_are_refused_by_name() {
    if !have_git() {
        return;
    }
    let private = GitHttpServer::start("ann", "s3cret-pass").await.unwrap();
    private
        .create_repo("private", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    let internal = GitHttpServer::start_on("127.0.0.2:0".parse().unwrap(), "", "")
        .await
        .unwrap();
    internal
        .create_repo("internal", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let eve = s.user("eve", &["api", "workspace"]).await;
        let creds = private
            .url("private")
            .replace("http://", "http://ann:s3cret-pass@");
        for (url, words) in [
            (
                "file:///etc",
                "scheme \"file\" cannot be read by the server",
            ),
            ("/etc/passwd", "is not a Git URL"),
            ("--upload-pack=touch /tmp/x", "is not a Git URL"),
            (creds.as_str(), "carries credentials"),
        ] {
            let (st, b) = s
                .post(&eve, "/api/v1/workspaces", json!({"repository": url}))
                .await;
            assert_eq!(st, 400, "[{l}] {url}: {b}");
            assert!(msg(&b).starts_with("repository: "), "[{l}] {url}: {b}");
            assert!(msg(&b).contains(words), "[{l}] {url}: {b}");
            assert!(!msg(&b).contains("s3cret"), "[{l}] never told: {b}");
        }
        // An address the server may not reach (127.0.0.2 is outside the test server's
        // allow-list, as an internal service is outside a real one's).
        let (st, b) = s
            .post(
                &eve,
                "/api/v1/workspaces",
                json!({"repository": internal.url("internal")}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "address_not_allowed", "[{l}] {b}");
        // A private repository: what to do instead.
        let (st, b) = s
            .post(
                &eve,
                "/api/v1/workspaces",
                json!({"repository": private.url("private")}),
            )
            .await;
        assert_eq!(st, 422, "[{l}] {b}");
        assert_eq!(b["error"]["code"], "repository_auth_failed", "[{l}] {b}");
        assert!(
            msg(&b).contains("register it as a project with its credential"),
            "[{l}] {b}"
        );
        let (_, list) = s
            .call(Method::GET, "/api/v1/workspaces", Some(&eve), None)
            .await;
        assert_eq!(list["items"], json!([]), "[{l}] nothing was made: {list}");
        s.stop().await;
    }
    assert_eq!(
        (internal.refused(), internal.upload_packs()),
        (0, 0),
        "the internal forge was never contacted"
    );
}

/// The web UI's link `/new?repo=URL%23REF` (or a forge's address of a branch): the form
/// filled in (a GET makes nothing), its button makes the workspace, and its page names the
/// repository and the ref.
#[tokio::test]
async fn a_link_fills_in_the_new_workspace_form() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("", "").await.unwrap();
    git.create_repo("web-app", &[(".devfile.yaml", WEB_DEVFILE)])
        .unwrap();
    git_in(&git.path("web-app"), &["tag", "v1"]).unwrap();
    let web = git.url("web-app");
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        s.agent("a1", json!({})).await;
        let alice = s.user("alice", &["api", "workspace"]).await;
        let mut b = crate::ui::signed_in(&s, "alice", "password-123").await;
        let link: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("repo", &format!("{web}#v1"))
            .finish();
        let page = b.get(&format!("/new?{link}")).await;
        assert_eq!(page.status, 200, "[{l}] {}", page.body);
        assert!(
            page.body.contains(&format!("value=\"{web}\"")) && page.body.contains("value=\"v1\""),
            "[{l}] the form is filled in: {}",
            page.body
        );
        // The address of a branch as a forge's pages show it is the repository and the ref.
        let page = b
            .get("/new?repo=https%3A%2F%2Fgithub.com%2Forg%2Fapp%2Ftree%2Ffeature%2Fx")
            .await;
        assert!(
            page.body.contains("value=\"https://github.com/org/app\"")
                && page.body.contains("value=\"feature/x\""),
            "[{l}] a forge's address is split: {}",
            page.body
        );
        let (_, list) = s
            .call(Method::GET, "/api/v1/workspaces", Some(&alice), None)
            .await;
        assert_eq!(list["items"], json!([]), "[{l}] a link makes nothing");
        let csrf = crate::ui::csrf_of(&page);
        let p = b
            .post_form(
                "/workspaces/new",
                &[
                    ("name".into(), "linked".into()),
                    ("repository".into(), web.clone()),
                    ("ref".into(), "v1".into()),
                    ("csrf_token".into(), csrf.clone()),
                ],
            )
            .await;
        assert_eq!(p.status, 303, "[{l}] {}", p.body);
        let page = b.get("/workspaces/linked").await;
        assert!(
            page.body.contains(&web) && page.body.contains("Repository"),
            "[{l}] {}",
            page.body
        );
        // A URL the server must not read lands beside the repository field.
        let p = b
            .post_form(
                "/workspaces/new",
                &[
                    ("repository".into(), "file:///etc".into()),
                    ("csrf_token".into(), csrf),
                ],
            )
            .await;
        assert_eq!(p.status, 400, "[{l}] {}", p.body);
        assert!(
            p.body.contains("id=\"repository-error\""),
            "[{l}] {}",
            p.body
        );
        s.stop().await;
    }
}
