//! A devfile as people publish it, end to end on Podman through `warren up`: two containers
//! and none marked main, a `projects` entry at a tag and `starterProjects` with `subDir`s,
//! cloned with real `git` from a Git server the test runs (`git http-backend`, anonymous),
//! then its commands run with `warren ws run` — an exec in each container and a composite
//! that stops at the failing step with its exit code.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use std::process::Command;
use std::time::Duration;
use support::{
    ensure_image, host_address, podman_available, podman_sh as sh, unique_name, wait_for, Up,
};
use warren_testkit::git_http::{git, GitHttpServer};

fn devfile(lib: &str, starters: &str, image: &str) -> String {
    format!(
        r#"schemaVersion: 2.2.0
metadata:
  name: published
  icon: https://example.com/icon.svg
  version: 1.0.0
projects:
  - name: lib
    git:
      remotes: {{origin: "{lib}"}}
      checkoutFrom: {{revision: v1}}
starterProjects:
  - name: web
    git: {{remotes: {{origin: "{starters}"}}}}
    subDir: web
  - name: api
    git: {{remotes: {{origin: "{starters}"}}}}
    subDir: api
components:
  - name: tools
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      endpoints: [{{name: http, targetPort: 8080}}]
  - name: build
    image:
      imageName: {image}
      dockerfile: {{uri: docker/Dockerfile, buildContext: ., args: ["GREETING=built by warren"]}}
  - name: sidecar
    container:
      image: localhost/warren-test:latest
      memoryLimit: 64Mi
      mountSources: false
      command: [sleep]
      args: ["3600"]
commands:
  - id: version
    exec: {{component: tools, commandLine: cat VERSION, workingDir: /projects/lib}}
  - id: where
    exec: {{component: sidecar, commandLine: 'echo "in $(tr "\\0" " " < /proc/1/cmdline)"'}}
  - id: broken
    exec: {{component: tools, commandLine: 'echo about to fail; exit 7'}}
  - id: all
    composite: {{commands: [version, where, broken, version]}}
  - id: build-image
    apply: {{component: build}}
"#
    )
}

/// Removes the built image however the test ends.
struct RemoveImage(String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        let _ = Command::new("podman").args(["rmi", "-f", &self.0]).output();
    }
}

#[test]
fn a_published_devfile_clones_its_projects_and_runs_its_commands() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // Anonymous, as public repositories are.
    let server = rt
        .block_on(GitHttpServer::start_on(
            "0.0.0.0:0".parse().unwrap(),
            "",
            "",
        ))
        .expect("git server");
    server
        .create_repo(
            "lib",
            &[
                ("VERSION", "1\n"),
                (
                    "docker/Dockerfile",
                    "FROM localhost/warren-test:latest\nARG GREETING\nRUN echo \"$GREETING\" > /built.txt\nCOPY VERSION /version.txt\n",
                ),
            ],
        )
        .expect("lib");
    // v1 is the first commit; main moves on.
    let work = tempfile::tempdir().expect("temp dir");
    let bare = server.path("lib");
    git(
        work.path(),
        &["clone", "--quiet", bare.to_str().unwrap(), "."],
    )
    .expect("clone");
    git(work.path(), &["tag", "v1"]).expect("tag");
    std::fs::write(work.path().join("VERSION"), "2\n").expect("write");
    git(work.path(), &["commit", "--quiet", "-am", "two"]).expect("commit");
    git(work.path(), &["push", "--quiet", "origin", "main", "v1"]).expect("push");
    server
        .create_repo(
            "starters",
            &[
                ("web/index.html", "web\n"),
                ("api/main.txt", "api\n"),
                ("README", "both\n"),
            ],
        )
        .expect("starters");
    let host = host_address();
    let ws = unique_name("published");
    let image = format!("localhost/warren-e2e-{ws}:1");
    let text = devfile(
        &server.url_via(&host, "lib"),
        &server.url_via(&host, "starters"),
        &image,
    );

    let mut up = Up::start();
    up.allow_egress_to(&host);
    up.workspace = Some(ws.clone());
    let path = up.home.path().join("devfile.yaml");
    std::fs::write(&path, &text).expect("write devfile");
    let created = up.cli_ok(&[
        "ws",
        "create",
        "--name",
        &ws,
        "--devfile",
        path.to_str().unwrap(),
        "--starter",
        "api",
        "--wait",
        "--timeout",
        "3m",
        "-o",
        "json",
    ]);
    assert!(
        created.contains("Warren chose \\\"tools\\\" (it has the most endpoints)"),
        "the main container's choice is a notice: {created}"
    );
    assert!(
        created.contains("icon"),
        "unused metadata is a notice: {created}"
    );

    let tools = format!("warren-{ws}.c.tools");
    wait_for(
        "the projects to be fetched",
        Duration::from_secs(120),
        || {
            sh(
                &tools,
                "test -f /projects/lib/VERSION && test -f /projects/api/main.txt",
            )
            .status
            .success()
            .then_some(())
        },
        || {
            String::from_utf8_lossy(&sh(&tools, "cat /projects/.warren/logs/*.log").stdout)
                .into_owned()
        },
    );
    let out = sh(
        &tools,
        "cat /projects/lib/VERSION; git -C /projects/lib describe --tags; cat /projects/api/main.txt; ls /projects/api; test -e /projects/web || echo no-web",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "1\nv1\napi\nmain.txt\nno-web\n",
        "lib at v1; only the chosen starter's subDir: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Commands on demand, each in its own container.
    let run = |id: &str| up.cli(&["ws", "run", &ws, id]);
    let out = run("version");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n");
    let out = run("where");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("in ") && stdout.ends_with("sleep 3600 \n"),
        "ran in the sidecar, whose first process is sleep: {stdout}"
    );
    let out = run("all");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("1\nin ") && stdout.ends_with("sleep 3600 \nabout to fail\n"),
        "{stdout}"
    );
    assert!(
        stderr.contains("==> broken failed (exit code 7)") && stderr.contains("failed at broken"),
        "{stderr}"
    );
    let shown = up.cli_ok(&["ws", "show", &ws]);
    assert!(
        shown.contains("all (composite): version + where + broken + version"),
        "{shown}"
    );

    // An image component, built by Podman from the project's sources on demand; a workspace
    // then runs on it.
    let out = run("build-image");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _cleanup = RemoveImage(image.clone());
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("built {image}")), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("STEP"),
        "the build's progress is shown: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A build that fails says why, and fails the step.
    let broke = sh(
        &tools,
        "echo 'RUN echo no-such-step >&2; exit 3' >> /projects/lib/docker/Dockerfile",
    );
    assert!(broke.status.success());
    let out = run("build-image");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("==> build-image failed (exit code 1): building")
            && stderr.contains("exit status 3"),
        "{stderr}"
    );

    let on_it = format!(
        "schemaVersion: 2.2.0\ncomponents:\n  - name: app\n    container: {{image: \"{image}\", memoryLimit: 128Mi}}\ncommands:\n  - id: show\n    exec: {{component: app, commandLine: cat /built.txt /version.txt, workingDir: /}}\n"
    );
    // The build belongs to the workspace that built it: another workspace naming the image
    // does not get it (issue 37: a build could replace a colleague's image by its name).
    let second = unique_name("on-built");
    let path = up.home.path().join("on-built.devfile.yaml");
    std::fs::write(&path, &on_it).expect("write devfile");
    up.workspace = Some(second.clone());
    let out = up.cli(&[
        "ws",
        "create",
        "--name",
        &second,
        "--devfile",
        path.to_str().expect("utf-8 path"),
        "--wait",
        "--timeout",
        "3m",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("ErrImagePull") && stderr.contains(&image),
        "another workspace ran the build: {stderr}"
    );
    up.cli_ok(&["ws", "rm", &second, "--wait", "--timeout", "2m"]);
    up.workspace = Some(ws.clone());
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}
