//! The rendered startup script really works with `/bin/sh` and `git`: it clones the project
//! (shallow, by branch or by commit), runs postStart commands in order, logs, and leaves an
//! existing checkout alone. Skips with a notice when `sh` or `git` is missing.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use warren_devfile::{parse_devfile, render, ProjectSource};
use warren_types::config::AgentConfig;

/// A temporary directory removed on drop, even when the test fails.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let p = std::env::temp_dir().join(format!(
            "warren-devfile-{tag}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok()
        || Path::new(&format!("/bin/{tool}")).exists()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

const DEVFILE: &str = r#"
schemaVersion: 2.2.0
components:
  - name: tools
    container: {image: busybox}
commands:
  - id: first
    exec: {component: tools, commandLine: "echo one > order", workingDir: "${PROJECT_SOURCE}"}
  - id: second
    exec:
      component: tools
      commandLine: "echo \"two $GREETING\" >> order"
      env: [{name: GREETING, value: "it's me"}]
events:
  postStart: [first, second]
"#;

fn wait_for(path: &Path, needle: &str) -> String {
    wait_until(path, needle, |text| text.contains(needle))
}

/// The text of `path` once `done` holds of it (`what` names it in a timeout's message).
fn wait_until(path: &Path, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what:?} in {}:\n{text}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The text of `path` once it holds the startup's outcome: "startup of container tools done"
/// or "… failed".
fn wait_outcome(path: &Path) -> String {
    wait_until(path, "the startup's outcome", |text| {
        text.contains("startup of container tools done")
            || text.contains("startup of container tools failed")
    })
}

/// Runs `script` as the container's start in `tmp` (its projects root, a prepared home, and
/// `source` below the root as `PROJECT_SOURCE`), `true` as the container's command; the
/// projects root and the file the container's own output (stderr) goes to.
fn start_in(tmp: &TempDir, script: &str, source: &str) -> (PathBuf, PathBuf) {
    let script_path = tmp.0.join("start-tools.sh");
    std::fs::write(&script_path, script).unwrap();
    let projects = tmp.0.join("projects");
    std::fs::create_dir_all(projects.join(source)).unwrap();
    let home = prepared_home(&tmp.0);
    let output_path = tmp.0.join("container-output");
    let status = Command::new("sh")
        .arg(&script_path)
        .arg("true")
        .env("PROJECTS_ROOT", &projects)
        .env("PROJECT_SOURCE", projects.join(source))
        .env("HOME", &home)
        .stderr(std::fs::File::create(&output_path).unwrap())
        .status()
        .expect("sh runs");
    assert!(status.success(), "the container's command ran");
    (projects, output_path)
}

/// The rendered startup script of the `tools` container, cloning `project`.
fn main_script(project: Option<ProjectSource<'_>>) -> String {
    main_script_of(DEVFILE, project)
}

/// The rendered startup script of the `tools` container of `devfile`.
fn main_script_of(devfile: &str, project: Option<ProjectSource<'_>>) -> String {
    tools_script(devfile, project, false)
}

/// The rendered startup script of the `tools` container of `devfile`, a prebuild's with
/// `prebuild`.
fn tools_script(devfile: &str, project: Option<ProjectSource<'_>>, prebuild: bool) -> String {
    tools_script_as(devfile, project, prebuild, false)
}

/// `tools_script`, of a warm pool's workspace made from a prebuild with `pooled`.
fn tools_script_as(
    devfile: &str,
    project: Option<ProjectSource<'_>>,
    prebuild: bool,
    pooled: bool,
) -> String {
    let d = parse_devfile(devfile).expect("valid");
    let cfg = AgentConfig::default();
    let mut req = request(&cfg, &[]);
    req.project = project;
    req.prebuild = prebuild;
    if pooled {
        req.seed = Some(warren_types::prebuild::Seed {
            workspace: "prebuild-demo",
            workspace_id: warren_types::WorkspaceId(1),
            commit: "0123456789abcdef0123456789abcdef01234567",
            pooled: true,
        });
    }
    let r = render(&d, &req).expect("renders");
    let cm = r
        .objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap")
        .expect("scripts");
    cm["data"]["start-tools.sh"]
        .as_str()
        .expect("main script")
        .to_owned()
}

/// A home already prepared (its marker present) under `root`: the seeding would copy this
/// host user's own home.
fn prepared_home(root: &Path) -> PathBuf {
    let home = root.join("home");
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join(".warren-home"), "").expect("home marker");
    home
}

fn run_script(root: &Path, url: &str, git_ref: &str) -> String {
    run_script_of(root, DEVFILE, false, url, git_ref)
}

/// Renders `devfile`'s script of the `tools` container (a prebuild's, with `prebuild`) cloning
/// project `demo` from `url`, runs it under `root` and returns the log once it is done.
fn run_script_of(root: &Path, devfile: &str, prebuild: bool, url: &str, git_ref: &str) -> String {
    run_script_as(root, devfile, prebuild, false, url, git_ref)
}

/// `run_script_of`, of a warm pool's workspace made from a prebuild with `pooled`.
fn run_script_as(
    root: &Path,
    devfile: &str,
    prebuild: bool,
    pooled: bool,
    url: &str,
    git_ref: &str,
) -> String {
    let project = ProjectSource {
        name: "demo",
        git_url: url,
        git_ref,
        credential: None,
    };
    let script = tools_script_as(devfile, Some(project), prebuild, pooled);
    std::fs::create_dir_all(root).expect("root");
    let script_path = root.join("start-tools.sh");
    std::fs::write(&script_path, script).expect("write script");
    let projects = root.join("projects");
    std::fs::create_dir_all(&projects).expect("projects");
    let log = projects.join(".warren/logs/tools.log");
    let _ = std::fs::remove_file(&log);
    let home = prepared_home(root);
    // The payload `true` stands for the container's command; the startup work goes on in
    // the background and reports in the log.
    let status = Command::new("sh")
        .arg(&script_path)
        .arg("true")
        .env("HOME", &home)
        .env("PROJECTS_ROOT", &projects)
        .env("PROJECT_SOURCE", projects.join("demo"))
        .env("WARREN_PROJECT_GIT_URL", url)
        .env("WARREN_PROJECT_GIT_REF", git_ref)
        .status()
        .expect("sh runs");
    assert!(status.success());
    wait_outcome(&log)
}

/// A repository in `tmp` with one commit (a `README` of "first"): its folder, that commit and
/// its `file://` URL.
fn origin(tmp: &TempDir) -> (PathBuf, String, String) {
    let repo = tmp.0.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "--quiet"]);
    std::fs::write(repo.join("README"), "first\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "--quiet", "-m", "one"]);
    let first = git(&repo, &["rev-parse", "HEAD"]);
    let url = format!("file://{}", repo.display());
    (repo, first, url)
}

#[test]
fn startup_script_clones_and_runs_post_start_commands() {
    if !have("sh") || !have("git") {
        eprintln!("skipping: needs sh and git");
        return;
    }
    let tmp = TempDir::new("script");
    let (repo, first, url) = origin(&tmp);
    std::fs::write(repo.join("README"), "second\n").unwrap();
    git(&repo, &["commit", "--quiet", "-am", "two"]);

    // By branch.
    let root = tmp.0.join("by-branch");
    std::fs::create_dir_all(&root).unwrap();
    let log = run_script(&root, &url, "main");
    assert!(
        log.contains("cloned project demo") && log.contains("tools done"),
        "{log}"
    );
    let demo = root.join("projects/demo");
    assert_eq!(
        std::fs::read_to_string(demo.join("README")).unwrap(),
        "second\n"
    );
    assert_eq!(
        std::fs::read_to_string(demo.join("order")).unwrap(),
        "one\ntwo it's me\n"
    );
    assert!(root.join("projects/.warren/cloned").exists());
    // The unshallow runs in the background; wait for it to finish.
    let unshallowed = wait_for(&root.join("projects/.warren/logs/tools.log"), "unshallow");
    assert!(
        unshallowed.contains("unshallowed project demo"),
        "{unshallowed}"
    );

    // A restart leaves the checkout (and the user's changes) alone.
    std::fs::write(demo.join("README"), "local change\n").unwrap();
    let log = run_script(&root, &url, "main");
    assert!(log.contains("already present"), "{log}");
    assert_eq!(
        std::fs::read_to_string(demo.join("README")).unwrap(),
        "local change\n"
    );

    // By commit: `--branch` cannot take a commit, so the script falls back to fetching it.
    let root = tmp.0.join("by-commit");
    std::fs::create_dir_all(&root).unwrap();
    let log = run_script(&root, &url, &first);
    assert!(log.contains("cloned project demo"), "{log}");
    assert_eq!(
        std::fs::read_to_string(root.join("projects/demo/README")).unwrap(),
        "first\n"
    );
    let _ = wait_for(&root.join("projects/.warren/logs/tools.log"), "unshallow");

    // A failing clone fails the startup with git's own reason; the postStart commands that
    // need the sources do not run.
    let root = tmp.0.join("bad-url");
    std::fs::create_dir_all(&root).unwrap();
    let log = run_script(&root, "file:///nonexistent/repo", "main");
    assert!(
        log.contains("startup of container tools failed: cloning project demo failed: fatal:"),
        "{log}"
    );
    assert!(log.contains("/nonexistent/repo"), "{log}");
    assert!(!log.contains("running postStart command"), "{log}");
}

/// What `warren ws logs`, `ws show` and `--wait` read: the container's own output carries each
/// step's status, the commands' output, the point a `waitFor` makes it usable, and a failed
/// command's exit code, read back by `warren_types::startup`.
#[test]
fn startup_script_tells_its_steps_and_a_commands_exit_code_on_the_container_output() {
    use warren_types::startup::{startup_status, StartupState};
    if !have("sh") {
        eprintln!("skipping: needs sh");
        return;
    }
    let devfile = r#"
schemaVersion: 2.2.0
attributes:
  warren.dev/wait-for: setup
components:
  - name: tools
    container: {image: busybox}
commands:
  - id: setup
    exec: {component: tools, commandLine: "echo set-up-output", label: onCreateCommand}
  - id: serve
    exec: {component: tools, commandLine: "echo serve-output >&2; exit 3", label: postStartCommand}
  - id: never
    exec: {component: tools, commandLine: "echo never-output"}
events:
  postStart: [setup, serve, never]
"#;
    let tmp = TempDir::new("tell");
    let (projects, output_path) = start_in(&tmp, &main_script_of(devfile, None), "");
    let output = wait_outcome(&output_path);
    for said in [
        "warren: startup of container tools: starting",
        "warren: startup of container tools: running postStart command setup (onCreateCommand)",
        "set-up-output",
        "warren: startup of container tools ready",
        "serve-output",
        "warren: startup of container tools failed: postStart command serve (postStartCommand) exited with code 3",
    ] {
        assert!(output.contains(said), "{said:?} in:\n{output}");
    }
    assert!(!output.contains("never-output"), "{output}");
    let ready = output.find("tools ready").unwrap();
    assert!(ready > output.find("set-up-output").unwrap(), "{output}");
    assert!(ready < output.find("serve-output").unwrap(), "{output}");
    let status = startup_status(output.as_bytes());
    assert_eq!(status.state, StartupState::Failed, "{output}");
    assert_eq!(
        status.reason.as_deref(),
        Some("postStart command serve (postStartCommand) exited with code 3")
    );
    // The startup log has it all as well (`tee` writes it after the output).
    let log = wait_for(
        &projects.join(".warren/logs/tools.log"),
        "startup of container tools failed",
    );
    assert!(
        log.contains("serve-output") && log.contains("exited with code 3"),
        "{log}"
    );
}

/// Where the editor's files are missing (no tools volume, as on this host), the workspace runs
/// on and the container's own output (`warren ws logs`) says why.
#[test]
fn startup_script_explains_a_missing_editor_on_the_container_output() {
    if !have("sh") || std::path::Path::new("/warren/tools/code-server").exists() {
        eprintln!("skipping: needs sh and no /warren/tools on this host");
        return;
    }
    let tmp = TempDir::new("editor");
    let (projects, stderr_path) = start_in(&tmp, &main_script(None), "demo");
    let output = wait_for(&stderr_path, "editor not started");
    assert!(
        output.contains(
            "warren: editor not started: its files are missing from /warren/tools/code-server"
        ),
        "{output}"
    );
    let log = wait_for(
        &projects.join(".warren/logs/tools.log"),
        "editor not started",
    );
    assert!(log.contains("startup of container tools done"), "{log}");
}

/// The devfile's own projects and its starter project, fetched by the real script with real
/// `git`: a project at a branch of the remote checked out, a starter reduced to its
/// sub-directory (no workspace project, so the starter is used), and nothing touched on a
/// second start.
#[test]
fn startup_script_clones_the_devfiles_projects_and_starter() {
    if !have("sh") || !have("git") {
        eprintln!("skipping: needs sh and git");
        return;
    }
    let tmp = TempDir::new("projects");
    let app = tmp.0.join("app");
    std::fs::create_dir_all(&app).unwrap();
    git(&app, &["init", "--quiet"]);
    std::fs::write(app.join("README"), "main branch\n").unwrap();
    git(&app, &["add", "README"]);
    git(&app, &["commit", "--quiet", "-m", "one"]);
    git(&app, &["checkout", "--quiet", "-b", "feature"]);
    std::fs::write(app.join("README"), "feature branch\n").unwrap();
    git(&app, &["commit", "--quiet", "-am", "two"]);
    git(&app, &["checkout", "--quiet", "main"]);
    let starters = tmp.0.join("starters");
    std::fs::create_dir_all(starters.join("src/hello")).unwrap();
    git(&starters, &["init", "--quiet"]);
    std::fs::write(starters.join("src/hello/hello.txt"), "hi\n").unwrap();
    std::fs::write(starters.join("TOP"), "not kept\n").unwrap();
    git(&starters, &["add", "."]);
    git(&starters, &["commit", "--quiet", "-m", "s"]);
    let devfile = format!(
        "schemaVersion: 2.2.0\ncomponents:\n  - name: tools\n    container: {{image: busybox}}\nprojects:\n  - name: app\n    clonePath: apps/app\n    git:\n      remotes: {{origin: 'file://{}', other: https://example.invalid/x.git}}\n      checkoutFrom: {{remote: origin, revision: feature}}\nstarterProjects:\n  - name: hello\n    subDir: src/hello\n    git: {{remotes: {{origin: 'file://{}'}}}}\n",
        app.display(),
        starters.display()
    );
    let script = main_script_of(&devfile, None);
    let root = tmp.0.join("ws");
    let projects = root.join("projects");
    std::fs::create_dir_all(&projects).unwrap();
    let script_path = root.join("start-tools.sh");
    std::fs::write(&script_path, script).unwrap();
    let home = prepared_home(&root);
    let log = projects.join(".warren/logs/tools.log");
    let run = || {
        let _ = std::fs::remove_file(&log);
        let status = Command::new("sh")
            .arg(&script_path)
            .arg("true")
            .env("HOME", &home)
            .env("PROJECTS_ROOT", &projects)
            .env("PROJECT_SOURCE", projects.join("apps/app"))
            .status()
            .expect("sh runs");
        assert!(status.success());
        wait_outcome(&log)
    };
    let text = run();
    assert!(
        text.contains("cloned project app into") && text.contains("cloned project hello into"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(projects.join("apps/app/README")).unwrap(),
        "feature branch\n"
    );
    assert_eq!(
        std::fs::read_to_string(projects.join("hello/hello.txt")).unwrap(),
        "hi\n"
    );
    assert!(
        !projects.join("hello/TOP").exists(),
        "only the starter's sub-directory is kept"
    );
    let _ = wait_for(&log, "unshallow");

    std::fs::write(projects.join("apps/app/README"), "mine\n").unwrap();
    let text = run();
    assert!(
        text.contains("project app already present")
            && text.contains("project hello already present"),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(projects.join("apps/app/README")).unwrap(),
        "mine\n"
    );
}

const PREBUILT_DEVFILE: &str = r#"
schemaVersion: 2.2.0
attributes:
  warren.dev/prebuild: [deps]
components:
  - name: tools
    container: {image: busybox}
commands:
  - id: deps
    exec: {component: tools, commandLine: "echo installed >> ../deps-ran"}
  - id: greet
    exec: {component: tools, commandLine: "echo hello >> ../greet-ran"}
events:
  postStart: [greet, deps]
"#;

/// Runs a prebuild of `PREBUILT_DEVFILE` in a new volume `root` (waiting for its background
/// unshallow), and says what it left: the cloned commit.
fn prebuild_in(root: &Path, url: &str) -> String {
    let log = run_script_of(root, PREBUILT_DEVFILE, true, url, "main");
    assert!(log.contains("tools done"), "{log}");
    let prebuilt = root.join("projects/.warren/prebuilt");
    assert!(prebuilt.join("step-deps").exists(), "{log}");
    std::fs::read_to_string(prebuilt.join("sources"))
        .expect("the cloned commit")
        .trim()
        .to_owned()
}

/// How many times a test command ran in volume `root` (the lines of its file).
fn runs(root: &Path, file: &str) -> usize {
    std::fs::read_to_string(root.join("projects").join(file))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Issue 43: a prebuild clones and runs only its commands, marking each in the volume. The
/// first start of a workspace from that volume does not run them again when the ref has not
/// moved; when it has, the checkout is fast-forwarded and they run again for the new commits.
/// A failed catch-up is tried again at the next start; a ref that no longer leads on from the
/// prebuild fails the start. A warm pool's workspace leaves all that to its taker's first
/// start. Later starts run every command, as any workspace's do.
#[test]
fn a_prebuild_runs_its_commands_once_and_a_workspace_from_it_catches_up() {
    if !have("sh") || !have("git") {
        eprintln!("skipping: needs sh and git");
        return;
    }
    let tmp = TempDir::new("prebuild");
    let (repo, first, url) = origin(&tmp);

    // The ref has not moved: nothing is installed again.
    let root = tmp.0.join("same");
    assert_eq!(prebuild_in(&root, &url), first);
    assert_eq!((runs(&root, "deps-ran"), runs(&root, "greet-ran")), (1, 0));
    let log = run_script_of(&root, PREBUILT_DEVFILE, false, &url, "main");
    assert!(log.contains("tools done"), "{log}");
    assert!(
        log.contains(&format!(
            "project demo started from the prebuild of {first}, the ref's newest commit"
        )) && log.contains("postStart command deps ran in the prebuild; not again"),
        "{log}"
    );
    assert_eq!((runs(&root, "deps-ran"), runs(&root, "greet-ran")), (1, 1));
    let prebuilt = root.join("projects/.warren/prebuilt");
    assert!(!prebuilt.join("sources").exists() && !prebuilt.join("step-deps").exists());
    // A warm pool's workspace: its own start runs none of the prebuild's commands and leaves
    // the catch-up and the marks to its taker's first start, which then skips them once.
    let pooled = tmp.0.join("pooled");
    prebuild_in(&pooled, &url);
    let log = run_script_as(&pooled, PREBUILT_DEVFILE, false, true, &url, "main");
    assert!(
        log.contains("tools done") && log.contains("kept so for whoever takes this workspace"),
        "{log}"
    );
    assert_eq!(
        (runs(&pooled, "deps-ran"), runs(&pooled, "greet-ran")),
        (1, 1)
    );
    let kept = pooled.join("projects/.warren/prebuilt");
    assert!(kept.join("sources").exists() && kept.join("step-deps").exists());
    let log = run_script_of(&pooled, PREBUILT_DEVFILE, false, &url, "main");
    assert!(
        log.contains("the ref's newest commit")
            && log.contains("postStart command deps ran in the prebuild; not again"),
        "{log}"
    );
    assert_eq!(
        (runs(&pooled, "deps-ran"), runs(&pooled, "greet-ran")),
        (1, 2)
    );

    // A restart is any workspace's restart: every command runs.
    let log = run_script_of(&root, PREBUILT_DEVFILE, false, &url, "main");
    assert!(
        log.contains("already present") && log.contains("tools done"),
        "{log}"
    );
    assert_eq!((runs(&root, "deps-ran"), runs(&root, "greet-ran")), (2, 2));

    // A commit after the prebuild: the workspace starts at it, and installs again for it.
    let moved = tmp.0.join("moved");
    prebuild_in(&moved, &url);
    std::fs::write(repo.join("README"), "second\n").unwrap();
    git(&repo, &["commit", "--quiet", "-am", "two"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    let log = run_script_of(&moved, PREBUILT_DEVFILE, false, &url, "main");
    assert!(
        log.contains("tools done")
            && log.contains(&format!(
                "started from the prebuild of {first}, now at {second}: the prebuild's commands run again"
            )),
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(moved.join("projects/demo/README")).unwrap(),
        "second\n"
    );
    assert_eq!(
        (runs(&moved, "deps-ran"), runs(&moved, "greet-ran")),
        (2, 1)
    );

    // The remote unreachable at the first start: it fails saying so, and the next start
    // catches up (and still does not install again).
    let blip = tmp.0.join("blip");
    prebuild_in(&blip, &url);
    let away = tmp.0.join("repo-away");
    std::fs::rename(&repo, &away).unwrap();
    let log = run_script_of(&blip, PREBUILT_DEVFILE, false, &url, "main");
    std::fs::rename(&away, &repo).unwrap();
    assert!(
        log.contains("failed: bringing project demo up to date from the prebuild of"),
        "{log}"
    );
    assert_eq!(runs(&blip, "deps-ran"), 1, "{log}");
    let log = run_script_of(&blip, PREBUILT_DEVFILE, false, &url, "main");
    assert!(
        log.contains("tools done") && log.contains("ran in the prebuild; not again"),
        "{log}"
    );
    assert_eq!((runs(&blip, "deps-ran"), runs(&blip, "greet-ran")), (1, 1));

    // History rewritten after the prebuild: the start fails rather than hide other sources.
    let rewritten = tmp.0.join("rewritten");
    prebuild_in(&rewritten, &url);
    git(&repo, &["reset", "--quiet", "--hard", &first]);
    std::fs::write(repo.join("README"), "rewritten\n").unwrap();
    git(&repo, &["commit", "--quiet", "-am", "rewritten"]);
    let log = run_script_of(&rewritten, PREBUILT_DEVFILE, false, &url, "main");
    assert!(
        log.contains("failed: project demo: its ref no longer leads on from the prebuild's commit"),
        "{log}"
    );
}
