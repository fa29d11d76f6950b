//! A repository holding only a `.devcontainer/` folder with a Dockerfile, end to end on
//! Podman: `warren ws create --project P --wait` has the agent build the image first — the
//! context archived by the server out of the private repository, the build's `args` and
//! `target` honoured, the image tagged in the workspace's own namespace — and the workspace
//! then runs it, its `postCreateCommand` included. A Dockerfile that fails leaves the
//! workspace failed with the build's own last lines, and the image it did not build is
//! never pulled from anywhere.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

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

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let project = unique_name("built");
    up.create_private_project(
        &project,
        &git.url_via(&host_address(), "built"),
        ("ann", PASSWORD),
        &[],
    );
    let ws = unique_name("dcbuild");
    let bad = unique_name("dcfail");
    let _cleanup = support::Workspaces(vec![ws.clone(), bad.clone()]);
    up.cli_ok(&[
        "ws",
        "create",
        "--project",
        &project,
        "--name",
        &ws,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let live = running(&ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    let id = live[0]["Id"].as_str().expect("container id").to_owned();
    // The workspace's own build, never the name the configuration asked for.
    let image = live[0]["ImageName"].as_str().unwrap_or_default().to_owned();
    assert!(
        image.starts_with("localhost/warren-ws/") && image.contains(&ws),
        "the container runs {image}"
    );
    assert_eq!(sh(&id, "cat /tmp/greeting"), "hello-from-the-build");
    assert_eq!(
        sh(&id, "cat /tmp/readme-from-the-context"),
        "the repository's readme"
    );
    wait_for(
        "the postCreateCommand",
        Duration::from_secs(120),
        || (sh(&id, "cat \"$HOME/created.txt\"") == "hello-from-the-build").then_some(()),
        || sh(&id, "cat /projects/.warren/logs/*.log"),
    );
    // A second workspace of the same configuration takes the image over: no step runs again.
    let again = unique_name("dcagain");
    let _cleanup_again = support::Workspaces(vec![again.clone()]);
    up.cli_ok(&[
        "ws",
        "create",
        "--project",
        &project,
        "--name",
        &again,
        "--wait",
        "--timeout",
        "5m",
    ]);
    let output = up.cli_ok(&["ws", "logs", &again, "--container", "warren-build"]);
    assert!(output.contains("reusing image"), "{output}");
    up.cli_ok(&["ws", "rm", &again, "--wait", "--timeout", "2m"]);
    // The password reached the build through the server only.
    let log = up.log();
    assert!(!log.contains(PASSWORD), "the password shows in the log");

    // A failing Dockerfile: the workspace fails with the build's own words.
    let broken = unique_name("broken");
    up.create_private_project(
        &broken,
        &git.url_via(&host_address(), "broken"),
        ("ann", PASSWORD),
        &[],
    );
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
    let output = up.cli_ok(&[
        "ws",
        "logs",
        &ws,
        "--container",
        "warren-build",
        "--tail",
        "1000",
    ]);
    assert!(output.contains("/tmp/greeting"), "{output}");

    up.cli_ok(&["ws", "rm", &bad, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}
