//! A repository holding only a `.devcontainer/` folder, end to end on Podman, through
//! `warren ws create --project P --wait`.
//!
//! With a Dockerfile: the agent builds the image first — the context archived by the server
//! out of the private repository, the build's `args` and `target` honoured, the image tagged
//! in the workspace's own namespace — and the workspace then runs it, its `postCreateCommand`
//! included. A Dockerfile that fails leaves the workspace failed with the build's own last
//! lines, and the image it did not build is never pulled from anywhere.
//!
//! With Features: one from a private registry (TLS trusted through certs.d, the agent's pull
//! secret for its password) and one from the repository, installed with their options on the
//! configuration's image; the Feature's own lifecycle command runs before the configuration's.
//!
//! With Docker Compose: the services run as containers of the workspace, started in
//! dependency order (a healthy dependency first), reached by name, a built image and a named
//! volume among them, a service's port forwarded through the proxy.
//!
//! Skips with a notice when no Podman (or, for Features, no docker-registry) exists; fails
//! instead under `WARREN_REQUIRE_ENGINE=1` / `WARREN_REQUIRE_TOOLS=1`.

use crate::support;

use std::time::Duration;
use support::{
    ensure_image, host_address, podman_available, running, show, unique_name, wait_for, Up,
};

const PASSWORD: &str = "dc-build-pass-41c7";

const CONFIG: &str = r#"// Built, not pulled.
{
  "name": "Built here",
  "build": {
    "dockerfile": "Dockerfile",
    "context": "..",
    "args": { "GREETING": "hello-from-the-build" },
    "target": "dev",
  },
  "postCreateCommand": "cat /tmp/greeting > \"$HOME/created.txt\"",
}"#;

/// `dev` is the target; `broken`, the last stage, would fail the build were it built.
const DOCKERFILE: &str = "FROM localhost/warren-test:latest AS base
ARG GREETING=unset
RUN echo \"$GREETING\" > /tmp/greeting
FROM base AS dev
COPY README /tmp/readme-from-the-context
FROM base AS broken
RUN exit 7
";

const FAILING: &str = "FROM localhost/warren-test:latest
RUN echo the-step-before-the-failure && exit 3
";

/// Creates workspace `ws` of `project`, waiting for it to run; its one running container.
fn create_running(up: &Up, project: &str, ws: &str) -> serde_json::Value {
    up.create_of_project(project, ws);
    let live = running(ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    live[0].clone()
}

/// What a shell command in the container prints, trimmed.
fn sh(id: &str, script: &str) -> String {
    let out = support::podman_sh(id, script);
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn a_dev_container_with_a_dockerfile_is_built_then_run_and_a_failed_build_says_why() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    git.create_repo(
        "built",
        &[
            (".devcontainer/devcontainer.json", CONFIG),
            (".devcontainer/Dockerfile", DOCKERFILE),
            ("README", "the repository's readme\n"),
        ],
    )
    .expect("repository");
    git.create_repo(
        "broken",
        &[
            (
                ".devcontainer/devcontainer.json",
                r#"{ "build": { "dockerfile": "Dockerfile" } }"#,
            ),
            (".devcontainer/Dockerfile", FAILING),
        ],
    )
    .expect("repository");
    git.create_repo(
        "hooks-fail",
        &[(".devcontainer/devcontainer.json", LIFECYCLE_FAILS)],
    )
    .expect("repository");

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let project = up.project_of(&git, "built", PASSWORD);
    let ws = unique_name("dcbuild");
    let bad = unique_name("dcfail");
    let hooks = unique_name("dchooks");
    let _cleanup = support::Workspaces(vec![ws.clone(), bad.clone(), hooks.clone()]);
    let live = create_running(&up, &project, &ws);
    let id = live["Id"].as_str().expect("container id").to_owned();
    // The workspace's own build, never the name the configuration asked for.
    let image = live["ImageName"].as_str().unwrap_or_default().to_owned();
    assert!(
        image.starts_with("localhost/warren-ws/") && image.contains(&ws),
        "the container runs {image}"
    );
    assert_eq!(sh(&id, "cat /tmp/greeting"), "hello-from-the-build");
    assert_eq!(
        sh(&id, "cat /tmp/readme-from-the-context"),
        "the repository's readme"
    );
    // `--wait` returned at `waitFor` (by default `updateContentCommand`, which it has not):
    // the `postCreateCommand` goes on, and the startup is done once it ran.
    wait_for(
        "the postCreateCommand",
        Duration::from_secs(120),
        || (sh(&id, "cat \"$HOME/created.txt\"") == "hello-from-the-build").then_some(()),
        || sh(&id, "cat /projects/.warren/logs/*.log"),
    );
    up.startup_done(&ws);
    // A second workspace of the same configuration takes the image over: no step runs again.
    let again = unique_name("dcagain");
    let _cleanup_again = support::Workspaces(vec![again.clone()]);
    up.create_of_project(&project, &again);
    let output = up.cli_ok(&["ws", "logs", &again, "--container", "warren-build"]);
    assert!(output.contains("reusing image"), "{output}");
    up.cli_ok(&["ws", "rm", &again, "--wait", "--timeout", "2m"]);
    // The password reached the build through the server only.
    let log = up.log();
    assert!(!log.contains(PASSWORD), "the password shows in the log");

    // A failing Dockerfile: the workspace fails with the build's own words.
    let broken = up.project_of(&git, "broken", PASSWORD);
    let out = up.cli(&[
        "ws",
        "create",
        "--project",
        &broken,
        "--name",
        &bad,
        "--wait",
        "--timeout",
        "5m",
    ]);
    assert!(!out.status.success(), "a failed build is a failed create");
    let reason = wait_for(
        "the build's failure on the workspace",
        Duration::from_secs(120),
        || {
            let w = show(up.home.path(), &bad)?;
            w["failure_reason"].as_str().map(str::to_owned)
        },
        || up.log(),
    );
    assert!(
        reason.starts_with("ImageBuildFailed: building image localhost/warren/devcontainer:latest")
            && reason.contains("the-step-before-the-failure"),
        "{reason}"
    );
    assert!(running(&bad).is_empty(), "nothing runs without its image");
    // The whole output of the build is there to read.
    let output = up.cli_ok(&["ws", "logs", &bad, "--container", "warren-build"]);
    assert!(
        output.contains("the-step-before-the-failure") && output.contains("from commit"),
        "{output}"
    );
    // The good workspace's build, too.
    let output = up.build_log(&ws);
    assert!(output.contains("/tmp/greeting"), "{output}");

    a_failed_lifecycle_command_is_the_startups_failure(&up, &rt, &git, &hooks);

    up.cli_ok(&["ws", "rm", &bad, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}

/// A lifecycle command that fails: the ones after it do not run.
const LIFECYCLE_FAILS: &str = r#"{
  "image": "localhost/warren-test:latest",
  "onCreateCommand": "echo on-create-output; exit 7",
  "postCreateCommand": "echo post-create-never-runs"
}"#;

/// `ws create --wait` of a dev container whose `onCreateCommand` fails: the create fails with
/// the command and its exit code, the workspace runs on (to be fixed in), and `ws show` and
/// the API say the same; `ws logs` has the command's output.
fn a_failed_lifecycle_command_is_the_startups_failure(
    up: &Up,
    rt: &tokio::runtime::Runtime,
    git: &warren_testkit::git_http::GitHttpServer,
    ws: &str,
) {
    let project = up.project_of(git, "hooks-fail", PASSWORD);
    let out = up.cli(&[
        "ws",
        "create",
        "--project",
        &project,
        "--name",
        ws,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let said = "postStart command on-create (onCreateCommand) exited with code 7";
    assert!(
        stderr.contains(&format!("is Running, but its startup failed: {said}")),
        "{stderr}"
    );
    let w = show(up.home.path(), ws).expect("the workspace");
    assert_eq!(w["actual_state"], "Running", "{w:#}");
    let shown = up.cli_ok(&["ws", "show", ws]);
    assert!(shown.contains(&format!("failed: {said}")), "{shown}");
    let output = up.cli_ok(&["ws", "logs", ws]);
    assert!(output.contains("on-create-output"), "{output}");
    assert!(!output.contains("post-create-never-runs"), "{output}");
    let token = up.admin_token();
    let api: serde_json::Value = rt.block_on(async {
        reqwest::Client::new()
            .get(format!("{}/api/v1/workspaces/{ws}/startup", up.api_base()))
            .bearer_auth(&token)
            .send()
            .await
            .expect("the API answers")
            .json()
            .await
            .expect("JSON")
    });
    assert_eq!(api["state"], "failed", "{api:#}");
    assert_eq!(api["reason"], said, "{api:#}");
    up.cli_ok(&["ws", "rm", ws, "--wait", "--timeout", "2m"]);
}

/// A Feature of the repository itself, below `.devcontainer/`.
const LOCAL_FEATURE: &str = r#"{
  "id": "local-tool", "version": "0.1.0", "name": "A tool of this repository",
  "options": { "flavour": { "type": "string", "enum": ["plain", "spicy"], "default": "plain" } }
}"#;

#[test]
fn a_dev_container_with_features_from_a_private_registry_and_the_repository_runs_with_them() {
    use warren_testkit::registry;
    if !podman_available() || !registry::available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // A private registry over TLS, trusted as Podman trusts it (certs.d), with one user.
    let (features, greet_ref) = support::registry_with_feature(
        &rt,
        "feature-pass-9",
        r#", "containerEnv": { "GREETING_FROM_FEATURE": "set-in-the-image" },
            "postCreateCommand": "echo from-the-feature-hook > \"$HOME/hook.txt\"""#,
    );
    let config = format!(
        r#"{{
  "image": "localhost/warren-test:latest",
  "features": {{
    "{greet_ref}": {{ "greeting": "hi-from-the-registry" }},
    "./local-tool": {{ "flavour": "spicy" }},
  }},
  // After the Feature's own postCreateCommand.
  "postCreateCommand": "cat \"$HOME/hook.txt\" /usr/local/share/greet.txt > \"$HOME/created.txt\"",
}}"#
    );
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    git.create_repo(
        "featured",
        &[
            (".devcontainer/devcontainer.json", config.as_str()),
            (
                ".devcontainer/local-tool/devcontainer-feature.json",
                LOCAL_FEATURE,
            ),
            (
                ".devcontainer/local-tool/install.sh",
                "#!/bin/sh\necho \"local $FLAVOUR\" > /usr/local/share/local-tool.txt\n",
            ),
        ],
    )
    .expect("repository");

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    // The Feature's registry is reached with the agent's pull secret.
    up.update_agent_config(|config| {
        config["image_pull_secrets"] =
            serde_json::json!([{"name": "features", "namespace": "default"}]);
    });
    registry::auth_file(
        &up.home.path().join("agent/pull-secrets/features.json"),
        &features.addr,
        "ann",
        "feature-pass-9",
    );
    let project = up.project_of(&git, "featured", PASSWORD);
    let ws = unique_name("dcfeat");
    let _cleanup = support::Workspaces(vec![ws.clone()]);
    let live = create_running(&up, &project, &ws);
    let id = live["Id"].as_str().expect("container id").to_owned();
    assert_eq!(
        sh(&id, "cat /usr/local/share/greet.txt"),
        "hi-from-the-registry"
    );
    assert_eq!(
        sh(&id, "cat /usr/local/share/local-tool.txt"),
        "local spicy"
    );
    assert_eq!(sh(&id, "echo $GREETING_FROM_FEATURE"), "set-in-the-image");
    // The Feature's lifecycle command ran first, then the configuration's.
    wait_for(
        "the postCreateCommand",
        Duration::from_secs(120),
        || {
            (sh(&id, "cat \"$HOME/created.txt\"") == "from-the-feature-hook\nhi-from-the-registry")
                .then_some(())
        },
        || sh(&id, "cat /projects/.warren/logs/*.log"),
    );
    let output = up.build_log(&ws);
    assert!(
        output.contains("installing in this order") && output.contains(&greet_ref),
        "{output}"
    );
    let log = up.log();
    assert!(
        !log.contains("feature-pass-9"),
        "the registry password shows in the log"
    );
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}

/// A Compose dev container: the dev container's service and a "database" (a web server on
/// the database's port, its image built from the repository), which starts 2 s late, so only
/// a start held until its healthcheck passes lets the dev container reach it at once.
pub(crate) const COMPOSE_CONFIG: &str = r#"{
  "name": "Composed",
  "dockerComposeFile": "docker-compose.yml",
  "service": "app",
  "workspaceFolder": "/workspaces/${localWorkspaceFolderBasename}",
  "forwardPorts": ["db:5432"],
  "postCreateCommand": "wget -qO- http://db:5432/ > \"$HOME/created.txt\"",
  "postAttachCommand": "echo attached >> \"$HOME/attached.txt\"",
}"#;

pub(crate) const COMPOSE_FILE: &str = r#"
services:
  app:
    image: localhost/warren-test:latest
    volumes: ["../..:/workspaces:cached"]
    # What the database said when the dev container started.
    command: ["/bin/sh", "-c", "wget -qO- http://db:5432/ > /tmp/at-start.txt 2>&1; exec sleep 2147483647"]
    network_mode: service:db
    depends_on:
      db: { condition: service_healthy }
  db:
    build:
      context: .
      dockerfile: db.Dockerfile
    environment:
      GREETING: "${GREETING:-unset}"
    command: ["/bin/sh", "-c", "sleep 2; mkdir -p /data/www; [ -f /data/www/index.html ] || echo \"db-says-$$GREETING\" > /data/www/index.html; exec httpd -f -p 5432 -h /data/www"]
    volumes: ["db-data:/data"]
    healthcheck:
      test: ["CMD", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:5432/"]
      interval: 1s
      retries: 60
volumes:
  db-data:
"#;

#[test]
fn a_compose_dev_container_runs_its_services_in_order_reached_by_name_and_through_the_proxy() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    git.create_repo(
        "composed",
        &[
            (".devcontainer/devcontainer.json", COMPOSE_CONFIG),
            (".devcontainer/docker-compose.yml", COMPOSE_FILE),
            (".devcontainer/.env", "GREETING=from-the-env-file\n"),
            (
                ".devcontainer/db.Dockerfile",
                "FROM localhost/warren-test:latest\nRUN echo built > /built.txt\n",
            ),
        ],
    )
    .expect("repository");
    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let project = up.project_of(&git, "composed", PASSWORD);
    let ws = unique_name("dccompose");
    let _cleanup = support::Workspaces(vec![ws.clone()]);
    up.create_of_project(&project, &ws);
    let id_of = |service: &str| {
        running(&ws)
            .iter()
            .find(|c| {
                c["Name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&format!(".c.{service}")))
            })
            .and_then(|c| c["Id"].as_str().map(str::to_owned))
            .unwrap_or_else(|| {
                let all = std::process::Command::new("podman")
                    .args(["ps", "-a", "--format", "{{.Names}} {{.Status}}"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                panic!(
                    "no running container of {service}:\n{all}\n{:?}\n{}",
                    show(up.home.path(), &ws),
                    up.log()
                )
            })
    };
    let (app, db) = (id_of("app"), id_of("db"));
    // Built from the repository, its variable from the `.env` file.
    assert_eq!(sh(&db, "cat /built.txt"), "built");
    // The database was healthy before the dev container started, and is reached by name.
    assert_eq!(
        sh(&app, "cat /tmp/at-start.txt"),
        "db-says-from-the-env-file"
    );
    wait_for(
        "the postCreateCommand",
        Duration::from_secs(120),
        || (sh(&app, "cat \"$HOME/created.txt\"") == "db-says-from-the-env-file").then_some(()),
        || sh(&app, "cat /workspaces/.warren/logs/*.log"),
    );
    // SSH lands in the dev container's service, which reaches the database by name.
    let keys = up.ssh_key();
    let (out, err) = up.ssh_terminal(
        keys.path(),
        &ws,
        "wget -qO- http://db:5432/; if [ -e /built.txt ]; then echo the-db-image; else echo its-own-image; fi",
    );
    assert_eq!(out, "db-says-from-the-env-file\nits-own-image", "{err}");
    wait_for(
        "the postAttachCommand",
        Duration::from_secs(60),
        || (sh(&app, "cat \"$HOME/attached.txt\"") == "attached").then_some(()),
        || sh(&app, "cat /workspaces/.warren/logs/*.log"),
    );
    // The database's port, forwarded on its own authenticated host through the proxy.
    let ((status, body), anonymous) = up.get_endpoint(&rt, &ws, "port-5432");
    assert_eq!(
        (status, body.as_str()),
        (200, "db-says-from-the-env-file\n")
    );
    assert_eq!(anonymous, 401);
    // The named volume outlives a stop and start: the page written at the first start stays.
    sh(&db, "echo kept > /data/www/index.html");
    up.cli_ok(&["ws", "stop", &ws, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "start", &ws, "--wait", "--timeout", "5m"]);
    let app = id_of("app");
    assert_eq!(sh(&app, "cat /tmp/at-start.txt"), "kept");
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}
