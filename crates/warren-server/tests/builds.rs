//! Build contexts (`POST /internal/agents/build-context`): a dev container with a `build`
//! becomes a workspace whose pod lists the image to build at start, and its agent — only its
//! agent, through its relay — gets the context archived out of the private repository at the
//! workspace's ref. Another agent, an image not built at start, a missing JWT and a devfile
//! that builds without a project are each refused. Skips with a notice where `git` is
//! missing.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_testkit::git_http::{have_git, GitHttpServer};
use warren_types::relay::{
    BuildImageTask, BUILD_COMMIT_HEADER, BUILD_CONTEXT_PATH, BUILD_KEY_HEADER,
    IMAGE_BUILDS_ANNOTATION,
};

const PASSWORD: &str = "build-ctx-pass";

const CONFIG: &str = r#"{
  "build": { "dockerfile": "Dockerfile", "context": "..", "args": { "V": "1" }, "target": "dev" },
  "postCreateCommand": "echo created"
}"#;

/// The relay's request for a build context, as `agent`: status, headers, body.
async fn fetch(
    s: &TestServer,
    jwt: Option<&str>,
    workspace: &str,
    image: &str,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = s
        .http
        .post(format!("{}{BUILD_CONTEXT_PATH}", s.base))
        .json(&json!({"workspace": workspace, "image": image}));
    if let Some(jwt) = jwt {
        req = req.bearer_auth(jwt);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

/// The images workspace `ws`'s pod builds at start, from `agent`'s full reconcile.
async fn pod_builds(s: &TestServer, agent: i64, ws: &str) -> Vec<BuildImageTask> {
    let infos = s.reconcile_ok(agent, "full", json!([])).await;
    let yaml = infos[ws]["config_to_apply"].as_str().unwrap();
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(yaml)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let builds = deployment["spec"]["template"]["metadata"]["annotations"][IMAGE_BUILDS_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("[{}] no builds on the pod: {deployment}", s.label));
    serde_json::from_str(builds).unwrap()
}

fn message(body: &[u8]) -> String {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_dev_container_build_gets_its_context_from_the_server_and_only_its_agent_does() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    let commit = git
        .create_repo(
            "shop",
            &[
                (".devcontainer/devcontainer.json", CONFIG),
                (".devcontainer/Dockerfile", "FROM busybox AS dev\n"),
                ("src/app.txt", "the sources\n"),
            ],
        )
        .unwrap();
    let credential = json!({"kind": "basic", "username": "ann", "password": PASSWORD});
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let other = s.agent("a2", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let body = json!({"name": "shop", "git_url": git.url("shop"), "credential": credential});
        let (st, b) = s.post(&bob, "/api/v1/projects", body).await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.workspace(
            &bob,
            json!({"project": "shop", "name": "bob-shop", "agent": "a1"}),
        )
        .await;

        // The pod lists the build, with the Dockerfile from the context's root.
        let builds = pod_builds(&s, agent, "bob-shop").await;
        assert_eq!(builds.len(), 1, "[{l}] {builds:?}");
        assert_eq!(builds[0].dockerfile, ".devcontainer/Dockerfile", "[{l}]");
        assert_eq!(builds[0].args, ["V=1"], "[{l}]");
        assert_eq!(builds[0].target.as_deref(), Some("dev"), "[{l}]");
        let image = builds[0].image.clone();

        // Its agent gets the whole repository (the context is `..`) at the commit.
        let (st, headers, tar) = fetch(&s, Some(&s.relay_jwt(agent)), "bob-shop", &image).await;
        assert_eq!(st, 200, "[{l}] {}", String::from_utf8_lossy(&tar));
        assert_eq!(
            headers[BUILD_COMMIT_HEADER].to_str().unwrap(),
            commit,
            "[{l}]"
        );
        assert_eq!(
            warren_testkit::process::tar_names(&tar),
            [
                ".devcontainer/Dockerfile",
                ".devcontainer/devcontainer.json",
                "src/app.txt"
            ],
            "[{l}]"
        );
        assert!(
            !String::from_utf8_lossy(&tar).contains(PASSWORD),
            "[{l}] the credential is not in the context"
        );
        // The build's key: the same sources, the same key.
        let key = headers[BUILD_KEY_HEADER].to_str().unwrap().to_owned();
        assert!(
            key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit()),
            "[{l}] {key}"
        );
        let (_, again, _) = fetch(&s, Some(&s.relay_jwt(agent)), "bob-shop", &image).await;
        assert_eq!(again[BUILD_KEY_HEADER].to_str().unwrap(), key, "[{l}]");

        // Another agent is told the workspace does not exist; so is a guess at a name.
        let (st, _, b) = fetch(&s, Some(&s.relay_jwt(other)), "bob-shop", &image).await;
        assert_eq!(st, 404, "[{l}] {}", String::from_utf8_lossy(&b));
        let (st, _, _) = fetch(&s, Some(&s.relay_jwt(agent)), "nobody", &image).await;
        assert_eq!(st, 404, "[{l}]");
        // Only an image built at start has a context to fetch.
        let (st, _, b) = fetch(&s, Some(&s.relay_jwt(agent)), "bob-shop", "busybox").await;
        assert_eq!(st, 404, "[{l}]");
        assert!(message(&b).contains("autoBuild"), "[{l}] {}", message(&b));
        // No relay JWT, no context.
        let (st, _, _) = fetch(&s, None, "bob-shop", &image).await;
        assert_eq!(st, 401, "[{l}]");
        let (st, _, _) = fetch(&s, Some("not-a-jwt"), "bob-shop", &image).await;
        assert_eq!(st, 401, "[{l}]");

        // A terminated workspace's context is gone with it.
        let (st, b) = s.delete(&bob, "/api/v1/workspaces/bob-shop").await;
        assert!(st < 300, "[{l}] {b}");
        let (st, _, _) = fetch(&s, Some(&s.relay_jwt(agent)), "bob-shop", &image).await;
        assert_eq!(st, 404, "[{l}]");

        // A devfile that builds at start needs a project to build from.
        let devfile = "schemaVersion: 2.2.0\ncomponents:\n  - name: dev\n    container: {image: app:1}\n  - name: img\n    image: {imageName: app:1, autoBuild: true, dockerfile: {uri: Dockerfile}}\n";
        let (st, b) = s
            .call(
                Method::POST,
                "/api/v1/workspaces",
                Some(&bob),
                Some(json!({"devfile": devfile, "agent": "a1"})),
            )
            .await;
        assert_eq!(st, 400, "[{l}] {b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("create the workspace from a project or a repository"),
            "[{l}] {b}"
        );
        s.stop().await;
    }
}

/// The relay's request for a local Feature's folder.
async fn fetch_feature(
    s: &TestServer,
    jwt: &str,
    workspace: &str,
    image: &str,
    feature: &str,
) -> (u16, Vec<u8>) {
    let resp = s
        .http
        .post(format!("{}{BUILD_CONTEXT_PATH}", s.base))
        .bearer_auth(jwt)
        .json(&json!({"workspace": workspace, "image": image, "feature": feature}))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn a_local_feature_folder_is_given_only_when_the_configuration_names_it() {
    if !have_git() {
        return;
    }
    let git = GitHttpServer::start("ann", PASSWORD).await.unwrap();
    let config = r#"{
      "image": "busybox",
      "features": { "./tool": { "flavour": "spicy" }, "ghcr.io/devcontainers/features/node:1": {} }
    }"#;
    git.create_repo(
        "featured",
        &[
            (".devcontainer/devcontainer.json", config),
            (".devcontainer/tool/devcontainer-feature.json", "{}"),
            (".devcontainer/tool/install.sh", "#!/bin/sh\n"),
            (".devcontainer/secret-notes/notes.txt", "not a Feature\n"),
        ],
    )
    .unwrap();
    let credential = json!({"kind": "basic", "username": "ann", "password": PASSWORD});
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        let bob = s.user("bob", &["api", "workspace"]).await;
        let body =
            json!({"name": "featured", "git_url": git.url("featured"), "credential": credential});
        let (st, b) = s.post(&bob, "/api/v1/projects", body).await;
        assert_eq!(st, 201, "[{l}] {b}");
        s.workspace(
            &bob,
            json!({"project": "featured", "name": "bob-feat", "agent": "a1"}),
        )
        .await;
        let builds = pod_builds(&s, agent, "bob-feat").await;
        let features = builds[0]
            .features
            .as_ref()
            .expect("the Features are on the pod");
        assert_eq!(features.base_image.as_deref(), Some("busybox"), "[{l}]");
        assert_eq!(features.features.len(), 2, "[{l}] {features:?}");
        let image = builds[0].image.clone();
        let jwt = s.relay_jwt(agent);

        // The folder the configuration names, alone.
        let (st, tar) = fetch_feature(&s, &jwt, "bob-feat", &image, ".devcontainer/tool").await;
        assert_eq!(st, 200, "[{l}] {}", String::from_utf8_lossy(&tar));
        assert_eq!(
            warren_testkit::process::tar_names(&tar),
            ["devcontainer-feature.json", "install.sh"],
            "[{l}]"
        );
        // Any other folder of the repository is not a Feature of this workspace.
        for other in [".devcontainer/secret-notes", ".devcontainer", "."] {
            let (st, b) = fetch_feature(&s, &jwt, "bob-feat", &image, other).await;
            assert_eq!(st, 404, "[{l}] {other}");
            assert!(
                message(&b).contains("names no such Feature"),
                "[{l}] {}",
                message(&b)
            );
        }
        // The image itself has no context: its base is an image, not the repository.
        let (st, _, b) = fetch(&s, Some(&jwt), "bob-feat", &image).await;
        assert_eq!(st, 422, "[{l}] {}", message(&b));
        s.stop().await;
    }
}

#[test]
fn a_build_key_changes_with_everything_a_build_is_made_of() {
    use warren_server::app::builds::build_key;
    let base = build_key("t1", "Dockerfile", &["A=1".into()], Some("dev"));
    assert_eq!(
        base,
        build_key("t1", "Dockerfile", &["A=1".into()], Some("dev"))
    );
    for other in [
        build_key("t2", "Dockerfile", &["A=1".into()], Some("dev")),
        build_key("t1", "other/Dockerfile", &["A=1".into()], Some("dev")),
        build_key("t1", "Dockerfile", &["A=2".into()], Some("dev")),
        build_key("t1", "Dockerfile", &[], Some("dev")),
        build_key("t1", "Dockerfile", &["A=1".into()], None),
        build_key("t1", "Dockerfile", &["A=1".into(), "dev".into()], None),
    ] {
        assert_ne!(base, other);
    }
}
