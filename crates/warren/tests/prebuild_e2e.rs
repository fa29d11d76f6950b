//! Prebuilds end to end on Podman (issue 43): a project whose setup step is observable (it
//! counts its runs in the volume). Turned on, a prebuild of the default ref starts without
//! anyone asking; the next workspace starts from its volume (the setup's result is there, the
//! step did not run again); a commit whose prebuild fails leaves workspaces to the last good
//! prebuild, which they bring up to the new commit (and run the setup again for it); a warm
//! pool's workspace is made, stopped and taken by the next workspace without a name, its setup
//! not run again, and refilled; turned off, every prebuild volume is gone.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use serde_json::Value;
use std::time::Duration;
use support::{
    ensure_image, host_address, podman, podman_available, podman_labelled, podman_sh as sh,
    running, unique_name, wait_for, InstallationObjects, PrebuildObjects, Up,
};

const PASSWORD: &str = "pw-prebuilds-41c9";

/// `deps` is the slow step a prebuild runs (here: it records each run); `hello` runs at every
/// start.
const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: prebuilt
attributes:
  warren.dev/prebuild: [deps]
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      mountSources: true
commands:
  - id: deps
    exec:
      component: dev
      commandLine: sh "$PROJECT_SOURCE/deps.sh"
  - id: hello
    exec:
      component: dev
      commandLine: echo start >> /projects/.starts
events:
  postStart: [deps, hello]
"#;

const DEPS: &str =
    "echo \"run $(git -C \"$PROJECT_SOURCE\" rev-parse --short HEAD)\" >> /projects/.deps-runs\n\
    cp \"$PROJECT_SOURCE/README\" /projects/.installed\n";

/// At the second commit the setup fails in a prebuild's run only (a prebuild's workspace is
/// named `prebuild-…`), and works in a user's.
const DEPS_FAILING_IN_PREBUILDS: &str =
    "case \"$WARREN_WORKSPACE_NAME\" in prebuild-*) echo 'no registry here' >&2; exit 3;; esac\n\
    echo \"run $(git -C \"$PROJECT_SOURCE\" rev-parse --short HEAD)\" >> /projects/.deps-runs\n\
    cp \"$PROJECT_SOURCE/README\" /projects/.installed\n";

fn prebuilds(up: &Up, project: &str) -> Vec<Value> {
    let out = up.cli_ok(&["project", "prebuild", "list", project, "-o", "json"]);
    serde_json::from_str(&out).expect("prebuilds as JSON")
}

fn text(o: std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn a_pushed_commit_is_prebuilt_and_the_next_workspace_starts_from_it() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    let first = git
        .create_repo(
            "app",
            &[
                (".devfile.yaml", DEVFILE),
                ("deps.sh", DEPS),
                ("README", "v1\n"),
            ],
        )
        .expect("repository");
    let url = git.url_via(&host_address(), "app");

    let home = tempfile::tempdir().expect("home");
    let mut up = Up::start_with(home, &[("WARREN_PREBUILD_POLL_SECONDS", "1")]);
    let owner = std::fs::read_to_string(up.home.path().join("agent").join("owner-id"))
        .expect("the agent's owner id")
        .trim()
        .to_owned();
    let _cleanup = PrebuildObjects(owner.clone());
    // A warm pool's workspaces have names the test does not know.
    let _pool = InstallationObjects(owner.clone());
    up.allow_egress_to(&host_address());
    let project = unique_name("app");
    up.create_private_project(&project, &url, ("ann", PASSWORD), &[]);

    // On: the poll finds the ref's commit and prebuilds it, unasked.
    let on = up.cli_ok(&["project", "prebuild", "on", &project, "-o", "json"]);
    let on: Value = serde_json::from_str(&on).expect("project as JSON");
    assert!(on["prebuild_agent"].is_string(), "{on}");
    let ready = wait_for(
        "the first prebuild to be ready",
        Duration::from_secs(180),
        || {
            let all = prebuilds(&up, &project);
            match all.first().map(|b| b["state"].as_str().unwrap_or("")) {
                Some("ready") => Some(all[0].clone()),
                Some("failed") => panic!("the prebuild failed: {:#}", all[0]),
                _ => None,
            }
        },
        || format!("{:#?}\n{}", prebuilds(&up, &project), up.log()),
    );
    assert_eq!(ready["commit"], first, "{ready:#}");
    assert_eq!(ready["trigger"], "push", "nobody asked: {ready:#}");
    let log = up.cli_ok(&["project", "prebuild", "log", &project]);
    assert!(
        log.contains("deps"),
        "the prebuild's output is kept:\n{log}"
    );
    // Nobody lists or opens a prebuild's own workspace.
    let listed = up.cli_ok(&["ws", "list", "-o", "json"]);
    assert!(!listed.contains("prebuild-"), "{listed}");

    // The next workspace starts from it: the setup's result is there, and it did not run.
    let ws = unique_name("pb");
    up.workspace = Some(ws.clone());
    let created = up.cli_ok(&[
        "ws",
        "create",
        "--project",
        &project,
        "--name",
        &ws,
        "-o",
        "json",
    ]);
    assert!(
        created.contains("starts from the prebuild of commit"),
        "{created}"
    );
    let id = wait_started(&up, &ws, 1);
    assert_eq!(
        text(sh(&id, "cat /projects/.deps-runs")),
        format!("run {}", &first[..7])
    );
    assert_eq!(text(sh(&id, "cat /projects/.installed")), "v1");
    assert_eq!(
        text(sh(
            &id,
            &format!("git -C /projects/{project} rev-parse HEAD")
        )),
        first
    );
    let startup = text(sh(&id, "cat /projects/.warren/logs/dev.log"));
    assert!(
        startup.contains(&format!("started from the prebuild of {first}")),
        "{startup}"
    );
    // On Podman, a clone of the prebuild's snapshot, whose root its user writes.
    let mounts = podman(&[
        "inspect",
        "--format",
        "{{range .Mounts}}{{.Destination}}={{.Driver}} {{end}}",
        &id,
    ]);
    assert!(mounts.contains("/projects=image"), "{mounts}");
    assert_eq!(
        text(sh(&id, "touch /projects/mine && echo written")),
        "written"
    );
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);

    // A warm pool of one: made from the ready prebuild and started once, then stopped,
    // unasked; the next workspace without a name takes it, its setup not run again, and the
    // pool is refilled; turned off, its workspace goes.
    up.cli_ok(&["project", "prebuild", "on", &project, "--pool", "1"]);
    wait_pool(&up, &project, 1);
    let created = up.cli_ok(&[
        "ws",
        "create",
        "--project",
        &project,
        "--wait",
        "--timeout",
        "3m",
        "-o",
        "json",
    ]);
    assert!(
        created.contains("taken from the project's warm pool"),
        "{created}"
    );
    let created: Value = serde_json::from_str(&created).expect("workspace as JSON");
    let taken = created["name"].as_str().expect("its name").to_owned();
    up.workspace = Some(taken.clone());
    let id = wait_started(&up, &taken, 2);
    assert_eq!(
        text(sh(&id, "cat /projects/.deps-runs")),
        format!("run {}", &first[..7]),
        "the setup ran in the prebuild only"
    );
    assert_eq!(text(sh(&id, "cat /projects/.installed")), "v1");
    let listed = up.cli_ok(&["ws", "list", "-o", "json"]);
    assert!(listed.contains(&taken), "the taker's now: {listed}");
    wait_pool(&up, &project, 1);
    up.cli_ok(&["ws", "rm", &taken, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["project", "prebuild", "on", &project]);
    wait_pool(&up, &project, 0);

    // A commit whose prebuild fails: said, with its output; workspaces go on from the last
    // good prebuild and catch up, running the setup again for the new sources.
    let second = git
        .push_commit(
            "app",
            &[("deps.sh", DEPS_FAILING_IN_PREBUILDS), ("README", "v2\n")],
        )
        .expect("a push");
    let failed = wait_for(
        "the second commit's prebuild to fail",
        Duration::from_secs(180),
        || {
            let all = prebuilds(&up, &project);
            let b = all.iter().find(|b| b["commit"] == second.as_str())?;
            match b["state"].as_str() {
                Some("failed") => Some(b.clone()),
                Some("ready") => panic!("the prebuild was meant to fail: {b:#}"),
                _ => None,
            }
        },
        || format!("{:#?}\n{}", prebuilds(&up, &project), up.log()),
    );
    let reason = failed["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exited with code 3"), "{failed:#}");
    assert!(
        failed["log"]
            .as_str()
            .unwrap_or_default()
            .contains("no registry here"),
        "{failed:#}"
    );
    let ws2 = unique_name("pb");
    up.workspace = Some(ws2.clone());
    up.cli_ok(&["ws", "create", "--project", &project, "--name", &ws2]);
    let id = wait_started(&up, &ws2, 1);
    assert_eq!(
        text(sh(
            &id,
            &format!("git -C /projects/{project} rev-parse HEAD")
        )),
        second
    );
    assert_eq!(
        text(sh(&id, "cat /projects/.deps-runs")),
        format!("run {}\nrun {}", &first[..7], &second[..7]),
        "the setup ran in the prebuild, then again for the new commit"
    );
    assert_eq!(text(sh(&id, "cat /projects/.installed")), "v2");
    up.cli_ok(&["ws", "rm", &ws2, "--wait", "--timeout", "2m"]);

    // Off: the prebuilds are removed, their volumes with them.
    up.cli_ok(&["project", "prebuild", "off", &project]);
    let owner_filter = format!("label=warren.dev/engine-owner={owner}");
    wait_for(
        "the prebuilds' volumes and snapshots to go",
        Duration::from_secs(120),
        || {
            // Only this installation's: Podman ORs label filters on volumes and images, and
            // another's prebuilds (a test or bench beside this one) are none of its business.
            let owner = format!("warren.dev/engine-owner={owner}");
            let left = podman_labelled(&["volume", "ls"], &[&owner, "warren.dev/prebuild=true"]);
            // Their snapshots with them, no workspace cloning them any more.
            let snapshots = podman_labelled(&["images"], &[&owner, "warren.dev/snapshot-of"]);
            (left.is_empty() && snapshots.is_empty()).then_some(())
        },
        || {
            // What is left and what the agent said of it first: the whole log is long.
            let left = podman(&[
                "volume",
                "ls",
                "--filter",
                &owner_filter,
                "--format",
                "{{.Name}} {{.Driver}} {{.Labels}}",
            ]);
            let images = podman(&[
                "images",
                "-a",
                "--filter",
                &owner_filter,
                "--format",
                "{{.ID}} {{.Repository}}:{{.Tag}} {{.Labels}}",
            ]);
            let containers = podman(&[
                "ps",
                "-a",
                "--filter",
                &owner_filter,
                "--format",
                "{{.Names}} {{.Status}}",
            ]);
            let log = up.log();
            let said: Vec<&str> = log
                .lines()
                .filter(|l| {
                    [
                        "snapshot", "volume", "delet", "remov", "blocked", "WARN", "ERROR",
                    ]
                    .iter()
                    .any(|w| l.contains(w))
                })
                .map(|l| l.get(..400).unwrap_or(l))
                .collect::<Vec<_>>();
            let said = said.join("\n");
            format!(
                "volumes:\n{left}\nimages:\n{images}\ncontainers:\n{containers}\n\
                 the log on these:\n{said}\n{:#?}",
                prebuilds(&up, &project)
            )
        },
    );
    let all = prebuilds(&up, &project);
    assert!(
        all.iter()
            .all(|b| b["state"] != "ready" && b["state"] != "running"),
        "{all:#?}"
    );
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
    assert!(
        !up.log().contains(PASSWORD),
        "the password shows in the log"
    );
}

/// Waits until `waiting` workspaces of `project`'s warm pool wait, stopped, to be taken.
fn wait_pool(up: &Up, project: &str, waiting: u64) {
    wait_for(
        &format!("{waiting} workspaces waiting in the warm pool"),
        Duration::from_secs(240),
        || {
            let n: u64 = prebuilds(up, project)
                .iter()
                .filter_map(|b| b["pool_ready"].as_u64())
                .sum();
            (n == waiting).then_some(())
        },
        || format!("{:#?}\n{}", prebuilds(up, project), up.log()),
    );
}

/// The container of workspace `ws` once its startup ran `hello` `starts` times.
fn wait_started(up: &Up, ws: &str, starts: usize) -> String {
    wait_for(
        "the workspace's startup",
        Duration::from_secs(180),
        || {
            let live = running(ws);
            let id = live.first()?["Id"].as_str()?.to_owned();
            let n = text(sh(&id, "cat /projects/.starts 2>/dev/null"))
                .lines()
                .count();
            (n >= starts).then_some(id)
        },
        || {
            let live = running(ws);
            let logs = live
                .first()
                .and_then(|c| c["Id"].as_str())
                .map(|id| text(sh(id, "cat /projects/.warren/logs/*.log")))
                .unwrap_or_default();
            format!("{logs}\n{}", up.log())
        },
    )
}
