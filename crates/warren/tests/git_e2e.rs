//! A team's first day with a private repository, end to end on Podman: a project made from a
//! private repository (Git's `http-backend` behind basic auth) with only `--devfile-path`
//! and a password; `warren ws create --project` reads the devfile from the repository; the
//! workspace clones it, commits and pushes with the project's credential, which is in
//! neither the process list, the environment nor the checkout's `.git/config`.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use std::process::Command;
use std::time::Duration;
use support::{
    ensure_image, host_address, podman_available, podman_sh as sh, running, unique_name, wait_for,
    Up,
};

const PASSWORD: &str = "pw-never-shown-7f3a";

const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: from-the-repository
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      mountSources: true
"#;

#[test]
fn a_workspace_clones_and_pushes_a_private_repository_without_exposing_the_secret() {
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
            &[("tools/devfile.yaml", DEVFILE), ("README", "hello\n")],
        )
        .expect("repository");
    let url = git.url_via(&host_address(), "app");

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let project = unique_name("app");
    up.create_private_project(
        &project,
        &url,
        ("ann", PASSWORD),
        &["--devfile-path", "tools/devfile.yaml"],
    );
    let shown = up.cli_ok(&["project", "show", &project, "-o", "json"]);
    assert!(!shown.contains(PASSWORD), "{shown}");

    // Only the project: the devfile comes from the repository.
    let ws = unique_name("gitws");
    up.workspace = Some(ws.clone());
    up.cli_ok(&[
        "ws",
        "create",
        "--project",
        &project,
        "--name",
        &ws,
        "--wait",
        "--timeout",
        "3m",
    ]);
    let live = running(&ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    let id = live[0]["Id"].as_str().expect("container id").to_owned();
    let checkout = format!("/projects/{project}");
    wait_for(
        "the clone",
        Duration::from_secs(120),
        || {
            sh(&id, &format!("test -d {checkout}/.git"))
                .status
                .success()
                .then_some(())
        },
        || {
            String::from_utf8_lossy(&sh(&id, "cat /projects/.warren/logs/*.log").stdout)
                .into_owned()
        },
    );
    let head = sh(&id, &format!("git -C {checkout} rev-parse HEAD"));
    assert_eq!(String::from_utf8_lossy(&head.stdout).trim(), first);

    // Commit and push from inside, as a developer would.
    let push = sh(
        &id,
        &format!(
            "cd {checkout} && echo change >> README && git -c user.name=Dev -c user.email=dev@example.invalid \
             commit --quiet -am 'from the workspace' && git push --quiet origin HEAD:main && git rev-parse HEAD"
        ),
    );
    assert!(
        push.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    let pushed = String::from_utf8_lossy(&push.stdout).trim().to_owned();
    assert_eq!(git.head("app", "main").expect("server head"), pushed);
    assert_ne!(pushed, first);

    // The secret is nowhere a process, the environment or the checkout shows it.
    for (what, script) in [
        (
            "the process list",
            "cat /proc/[0-9]*/cmdline | tr '\\0' ' '".to_owned(),
        ),
        (
            "the environment",
            "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'".to_owned(),
        ),
        (
            "the checkout's .git/config",
            format!("cat {checkout}/.git/config"),
        ),
    ] {
        let out = sh(&id, &script);
        assert!(
            out.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains(PASSWORD),
            "the password shows in {what}:\n{text}"
        );
    }
    let inspected = Command::new("podman")
        .args(["inspect", &id])
        .output()
        .expect("podman inspect");
    assert!(!String::from_utf8_lossy(&inspected.stdout).contains(PASSWORD));

    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
    assert!(
        !up.log().contains(PASSWORD),
        "the password shows in warren up's log"
    );
}

/// The container of the workspace's only running pod.
fn container_of(ws: &str) -> String {
    let live = running(ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    live[0]["Id"].as_str().expect("container id").to_owned()
}

fn stdout(o: std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn the_home_persists_across_a_restart_and_dotfiles_install_once() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    // A public host: dotfiles repositories are cloned without credentials.
    let git = support::git_server_for_workspaces(&rt, "", "");
    git.create_repo(
        "dotfiles",
        &[(
            "install.sh",
            "echo \"installed $(date +%s%N)\" >> \"$HOME/.dotfiles-installed\"\n",
        )],
    )
    .expect("repository");
    let url = git.url_via(&host_address(), "dotfiles");

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let shown = up.cli_ok(&["dotfiles", "set", &url]);
    assert!(shown.contains(&url), "{shown}");
    let (ws, _) = up.create_workspace("home", DEVFILE);
    let id = container_of(&ws);
    assert_eq!(stdout(sh(&id, "echo $HOME")), "/projects/.home");
    assert_eq!(
        stdout(sh(&id, "cat $HOME/.profile")),
        "# the image profile of warren-test",
        "seeded from the image's home"
    );
    let log = || stdout(sh(&id, "cat /projects/.warren/logs/dev.log"));
    wait_for(
        "the dotfiles",
        Duration::from_secs(120),
        || {
            sh(&id, "test -f $HOME/.dotfiles-installed")
                .status
                .success()
                .then_some(())
        },
        log,
    );
    assert!(
        log().contains("dotfiles installed by install.sh"),
        "{}",
        log()
    );
    let wrote = sh(&id, "echo 'make test' >> $HOME/.ash_history && mkdir -p $HOME/.config/editor && echo dark > $HOME/.config/editor/theme");
    assert!(wrote.status.success());

    up.cli_ok(&["ws", "stop", &ws, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "start", &ws, "--wait", "--timeout", "2m"]);
    let id = container_of(&ws);
    assert_eq!(stdout(sh(&id, "cat $HOME/.ash_history")), "make test");
    assert_eq!(stdout(sh(&id, "cat $HOME/.config/editor/theme")), "dark");
    // Installed once: the second start finds ~/.dotfiles and leaves it.
    let log = stdout(sh(&id, "cat /projects/.warren/logs/dev.log"));
    assert_eq!(
        stdout(sh(&id, "wc -l < $HOME/.dotfiles-installed")),
        "1",
        "{log}"
    );

    // A dotfiles repository that fails does not stop a new workspace.
    up.cli_ok(&["dotfiles", "set", &git.url_via(&host_address(), "missing")]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let (ws2, created) = up.create_workspace("home2", DEVFILE);
    assert_eq!(created["actual_state"], "Running", "{created}");
    let id = container_of(&ws2);
    wait_for(
        "the failed dotfiles clone to be logged",
        Duration::from_secs(120),
        || {
            stdout(sh(&id, "cat /projects/.warren/logs/dev.log"))
                .contains("cloning dotfiles from")
                .then_some(())
        },
        || stdout(sh(&id, "cat /projects/.warren/logs/dev.log")),
    );
    up.cli_ok(&["ws", "rm", &ws2, "--wait", "--timeout", "2m"]);
    assert!(up.stop().success(), "{}", up.log());
}

/// Issue 41, item 2: a repository opened without a project. `warren ws create --repo URL#REF`
/// clones it at that tag; a link `/new?repo=URL` opened in Chromium by someone not signed
/// in leads through the sign-in back to the form, filled in, and its button makes a workspace
/// that clones the repository's default branch, with its devfile; when the branch's
/// definition moves on, `ws show` marks that workspace (issue 41, item 1).
#[test]
fn a_repository_opens_by_url_from_the_cli_and_from_a_link() {
    if !podman_available() || !support::chromium_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "", "");
    let first = git
        .create_repo(
            "Tool_Box",
            &[(".devfile.yaml", DEVFILE), ("README", "one\n")],
        )
        .expect("repository");
    // The files of `main` are replaced: the devfile stays, the README changes.
    let second = warren_testkit::git_http::commit_files(
        &git.path("Tool_Box"),
        &[(".devfile.yaml", DEVFILE), ("README", "two\n")],
    )
    .expect("a second commit");
    warren_testkit::git_http::git(&git.path("Tool_Box"), &["tag", "v1", &first]).expect("a tag");
    let url = git.url_via(&host_address(), "Tool_Box");
    let linked = unique_name("link");
    // Dropped after `up` (declared before it), once warren is gone: removes what a failure
    // leaves of the second workspace (`up` removes the first).
    let _cleanup = support::Workspaces(vec![linked.clone()]);

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let head_of = |ws: &str| {
        let id = container_of(ws);
        wait_for(
            "the clone",
            Duration::from_secs(120),
            || {
                sh(&id, "test -d /projects/tool-box/.git")
                    .status
                    .success()
                    .then_some(())
            },
            || stdout(sh(&id, "cat /projects/.warren/logs/*.log")),
        );
        stdout(sh(&id, "git -C /projects/tool-box rev-parse HEAD"))
    };

    // The CLI, at a commit.
    let ws = unique_name("repo");
    up.workspace = Some(ws.clone());
    up.cli_ok(&[
        "ws",
        "create",
        "--repo",
        &format!("{url}#v1"),
        "--name",
        &ws,
        "--wait",
        "--timeout",
        "3m",
    ]);
    assert_eq!(head_of(&ws), first);
    let shown = up.cli_ok(&["ws", "show", &ws]);
    assert!(
        shown.contains(&url) && shown.contains("v1"),
        "ws show tells the repository and its ref: {shown}"
    );

    // A link, in the browser.
    let (web, password) = up.web_ui_and_password();
    let base = web.trim_end_matches('/').to_owned();
    rt.block_on(async {
        let chromium = warren_testkit::browser::Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        let link = format!(
            "{base}/new?repo={}",
            url::form_urlencoded::byte_serialize(url.as_bytes()).collect::<String>()
        );
        tab.goto(&link).await.expect("open the link");
        support::sign_in(&mut tab, "admin", &password).await;
        tab.wait_until(
            "location.pathname === '/new' && document.getElementById('repository') !== null",
            60,
        )
        .await
        .expect("back at the link's form after signing in");
        let filled = tab
            .eval("document.getElementById('repository').value")
            .await
            .expect("the repository field");
        assert_eq!(filled, serde_json::json!(url), "the form is filled in");
        tab.eval(&format!(
            "document.getElementById('name').value = {linked:?}; \
             document.querySelector('form.card button[type=submit]').click(); true"
        ))
        .await
        .expect("create");
        // The new address shows before its document is whole: read it once loaded.
        tab.wait_until(
            &format!(
                "location.pathname === '/workspaces/{linked}' && document.readyState === 'complete'"
            ),
            60,
        )
        .await
        .expect("the new workspace's page");
        let text = tab
            .eval("document.querySelector('main').innerText")
            .await
            .expect("page text");
        assert!(
            text.as_str()
                .is_some_and(|t| t.contains("Repository") && t.contains(&url)),
            "the page tells the repository: {text}"
        );
    });
    up.cli_ok(&["ws", "start", &linked, "--wait", "--timeout", "3m"]);
    assert_eq!(head_of(&linked), second, "the default branch");

    // The branch's definition moves on: `ws show` marks the workspace built from the branch
    // ("update available", as its page does), not the one pinned to the tag.
    let shown = up.cli_ok(&["ws", "show", &linked]);
    assert!(
        !shown.contains("changed since it was built"),
        "nothing changed yet: {shown}"
    );
    warren_testkit::git_http::commit_files(
        &git.path("Tool_Box"),
        &[
            (
                ".devfile.yaml",
                &DEVFILE.replace("memoryLimit: 256Mi", "memoryLimit: 320Mi"),
            ),
            ("README", "three\n"),
        ],
    )
    .expect("a third commit");
    let shown = up.cli_ok(&["ws", "show", &linked]);
    assert!(
        shown.contains(&format!(
            "its repository's definition changed since it was built (1 change(s)): warren ws rebuild {linked}"
        )),
        "{shown}"
    );
    let shown = up.cli_ok(&["ws", "show", &ws]);
    assert!(
        !shown.contains("changed since it was built"),
        "the tag did not move: {shown}"
    );
    up.cli_ok(&["ws", "rm", &linked, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}

const SECRET_TOKEN: &str = "npm-tok-never-logged-5b1c";

/// Issue 41, item 5, on Podman: a user's secrets (an environment variable given on standard
/// input, a file), their own Git credential and commit identity reach their workspace — a
/// private repository opened by URL clones with the credential, and a commit pushed from it
/// is theirs; a changed file follows in place, a changed variable at the next start; a
/// removed one leaves; and no secret shows in `warren up`'s log.
#[test]
fn your_secrets_and_identity_reach_your_workspace() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "ann", PASSWORD);
    let first = git
        .create_repo("mine", &[(".devfile.yaml", DEVFILE), ("README", "hello\n")])
        .expect("repository");
    let url = git.url_via(&host_address(), "mine");
    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let home = up.home.path().to_path_buf();
    let cli = |args: &[&str], stdin: Option<&str>| {
        let out = support::cli(&home, args, stdin);
        assert!(
            out.status.success(),
            "warren {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    cli(
        &[
            "profile",
            "set",
            "--full-name",
            "Ann Dev",
            "--email",
            "ann@example.com",
        ],
        None,
    );
    cli(
        &["secret", "set", "NPM_TOKEN"],
        Some(&format!("{SECRET_TOKEN}\n")),
    );
    let npmrc = up.home.path().join("npmrc");
    let set_npmrc = |text: &str| {
        std::fs::write(&npmrc, text).expect("write npmrc");
        cli(
            &[
                "secret",
                "set",
                "npmrc",
                "--file",
                "--from-file",
                npmrc.to_str().expect("utf-8"),
            ],
            None,
        );
    };
    set_npmrc("//registry/:_authToken=first\n");
    let listed = cli(&["secret", "list"], None);
    assert!(
        listed.contains("NPM_TOKEN") && listed.contains("npmrc") && !listed.contains(SECRET_TOKEN),
        "{listed}"
    );
    cli(
        &[
            "git-credential",
            "add",
            &url,
            "--username",
            "ann",
            "--password-stdin",
        ],
        Some(PASSWORD),
    );
    let listed = cli(&["git-credential", "list"], None);
    assert!(
        listed.contains("basic") && !listed.contains(PASSWORD),
        "{listed}"
    );

    // The private repository by URL: its definition read, and cloned, with her credential.
    let ws = unique_name("secrets");
    up.workspace = Some(ws.clone());
    up.cli_ok(&[
        "ws",
        "create",
        "--repo",
        &url,
        "--name",
        &ws,
        "--wait",
        "--timeout",
        "3m",
    ]);
    let id = container_of(&ws);
    wait_for(
        "the clone",
        Duration::from_secs(120),
        || {
            sh(&id, "test -d /projects/mine/.git")
                .status
                .success()
                .then_some(())
        },
        || stdout(sh(&id, "cat /projects/.warren/logs/*.log")),
    );
    assert_eq!(
        stdout(sh(&id, "git -C /projects/mine rev-parse HEAD")),
        first
    );
    assert_eq!(
        stdout(sh(&id, "echo \"$NPM_TOKEN\"")),
        SECRET_TOKEN,
        "the trailing newline of `echo` is not part of it"
    );
    assert_eq!(
        stdout(sh(&id, "cat /warren/variables/npmrc")),
        "//registry/:_authToken=first"
    );
    // A commit made and pushed with no set-up is hers.
    let push = sh(
        &id,
        "cd /projects/mine && echo change >> README && git commit --quiet -am 'from the workspace' \
         && git push --quiet origin HEAD:main && git log -1 --format='%an <%ae>|%cn <%ce>|%H'",
    );
    assert!(
        push.status.success(),
        "push failed: {}",
        String::from_utf8_lossy(&push.stderr)
    );
    let pushed = stdout(push);
    let (who, sha) = pushed.rsplit_once('|').expect("log line");
    assert_eq!(
        who, "Ann Dev <ann@example.com>|Ann Dev <ann@example.com>",
        "commits are made as the account's identity"
    );
    assert_eq!(git.head("mine", "main").expect("server head"), sha);

    // A changed file follows in place; the changed variable and a removed one at the
    // next start.
    set_npmrc("//registry/:_authToken=second\n");
    cli(&["secret", "set", "NPM_TOKEN"], Some("rotated-token"));
    wait_for(
        "the new file in the workspace",
        Duration::from_secs(60),
        || {
            (stdout(sh(&id, "cat /warren/variables/npmrc")) == "//registry/:_authToken=second")
                .then_some(())
        },
        || up.log(),
    );
    assert_eq!(
        container_of(&ws),
        id,
        "a running workspace is not restarted behind its user's back"
    );
    assert_eq!(
        stdout(sh(&id, "echo \"$NPM_TOKEN\"")),
        SECRET_TOKEN,
        "until its next start"
    );
    cli(&["secret", "rm", "npmrc"], None);
    up.cli_ok(&["ws", "restart", &ws, "--wait", "--timeout", "3m"]);
    let id = container_of(&ws);
    assert_eq!(stdout(sh(&id, "echo \"$NPM_TOKEN\"")), "rotated-token");
    assert!(
        !sh(&id, "test -e /warren/variables/npmrc").status.success(),
        "a removed secret leaves the workspace"
    );

    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
    let log = up.log();
    for secret in [SECRET_TOKEN, "rotated-token", PASSWORD] {
        assert!(!log.contains(secret), "a secret shows in warren up's log");
    }
}
