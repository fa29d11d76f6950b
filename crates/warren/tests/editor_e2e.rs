//! Issue 17's "done when", on Podman: with `warren up` running, a user creates a workspace
//! from a project whose image knows nothing of editors (Debian minbase with git), opens the
//! injected VS Code (code-server) in headless Chromium after signing in, sees the cloned
//! project's file in the explorer, creates a file from the editor's integrated terminal, and
//! finds it on the volume after a stop and a start; another user gets 404; a busybox-based
//! image (whose glibc is incomplete) still runs, and `warren ws logs` says why it has no
//! editor. A screenshot of the workbench is kept in `$CARGO_TARGET_TMPDIR`.
//!
//! Skips with a notice without Podman, Chromium or the editor's images (fails under
//! `WARREN_REQUIRE_ENGINE=1` / `WARREN_REQUIRE_TOOLS=1`; `.ci/setup-editor.sh` and
//! `.ci/setup-podman.sh image-debian` build the images).

use crate::support;

use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{
    api, create_user, ensure_image, host_address, image_exists, podman_available, running, sign_in,
    wait_for, Up, DEBIAN_DEVFILE, DEBIAN_IMAGE, TOOLS_IMAGE,
};
use warren_testkit::browser::{Chromium, Tab};
use warren_testkit::git_http::GitHttpServer;

const BUSYBOX_DEVFILE: &str = r#"schemaVersion: 2.2.0
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
"#;

fn images_available() -> bool {
    let missing: Vec<&str> = [TOOLS_IMAGE, DEBIAN_IMAGE]
        .into_iter()
        .filter(|i| !image_exists(i))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1") {
        panic!(
            "WARREN_REQUIRE_ENGINE=1 but {missing:?} are missing \
             (.ci/setup-editor.sh, .ci/setup-podman.sh image-debian)"
        );
    }
    eprintln!("skipping: images {missing:?} missing (.ci/setup-editor.sh, .ci/setup-podman.sh image-debian)");
    false
}

struct User {
    name: String,
    password: String,
    token: String,
}

async fn user(http: &reqwest::Client, base: &str, admin: &str, name: &str) -> User {
    let (password, token) = create_user(http, base, admin, name).await;
    User {
        name: name.into(),
        password,
        token,
    }
}

/// One key press (down and up) as the keyboard sends it.
async fn press(tab: &mut Tab, key: &str, code: &str, key_code: i64, text: Option<&str>) {
    let mut down = json!({"type": "keyDown", "key": key, "code": code,
                          "windowsVirtualKeyCode": key_code, "nativeVirtualKeyCode": key_code});
    if let Some(t) = text {
        down["text"] = json!(t);
    }
    tab.call("Input.dispatchKeyEvent", down)
        .await
        .expect("key down");
    tab.call(
        "Input.dispatchKeyEvent",
        json!({"type": "keyUp", "key": key, "code": code,
               "windowsVirtualKeyCode": key_code, "nativeVirtualKeyCode": key_code}),
    )
    .await
    .expect("key up");
}

async fn type_text(tab: &mut Tab, text: &str) {
    tab.call("Input.insertText", json!({"text": text}))
        .await
        .expect("insert text");
}

/// What the workspace's container says: its output and the start-up and editor logs.
fn diagnose(ws: &str) -> String {
    let Some(id) = running(ws)
        .first()
        .and_then(|c| c["Id"].as_str())
        .map(str::to_owned)
    else {
        return format!("no running container of {ws}");
    };
    let logs = Command::new("podman")
        .args(["logs", &id])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stderr).into_owned() + &String::from_utf8_lossy(&o.stdout)
        })
        .unwrap_or_default();
    let files = exec(&id, "tail -n 40 /projects/.warren/logs/*.log");
    format!(
        "--- container output ---\n{logs}\n--- logs ---\n{}",
        String::from_utf8_lossy(&files.stdout)
    )
}

fn exec(id: &str, script: &str) -> std::process::Output {
    Command::new("podman")
        .args(["exec", id, "sh", "-c", script])
        .output()
        .expect("podman exec")
}

#[test]
fn the_injected_editor_shows_the_project_to_its_owner_only_and_keeps_its_files() {
    if !podman_available() || !support::chromium_available() || !images_available() {
        return;
    }
    ensure_image();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A public repository (empty username: no credentials asked) holding the devfile.
    let git = rt
        .block_on(GitHttpServer::start_on(
            "0.0.0.0:0".parse().unwrap(),
            "",
            "",
        ))
        .expect("git server");
    git.create_repo(
        "app",
        &[
            (".devfile.yaml", DEBIAN_DEVFILE),
            ("hello-from-the-project.txt", "hello\n"),
        ],
    )
    .expect("repository");
    let url = git.url_via(&host_address(), "app");

    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let (port, _) = up.proxy_ports();
    let base = up.api_base();
    let admin = up.admin_token();
    let name = support::unique_name("ide");
    up.workspace = Some(name.clone());
    let project = support::unique_name("app");
    let shot = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("editor-workbench.png");

    let editor_url = rt.block_on(async {
        let http = reqwest::Client::new();
        let alice = user(&http, &base, &admin, "alice").await;
        let bob = user(&http, &base, &admin, "bob").await;
        api(&http, &base, Some(&admin), reqwest::Method::POST, "/projects",
            Some(json!({"name": project, "git_url": url, "visibility": "internal"}))).await;
        api(&http, &base, Some(&alice.token), reqwest::Method::POST, "/workspaces",
            Some(json!({"name": name, "project": project}))).await;
        let deadline = Instant::now() + Duration::from_secs(240);
        let w = loop {
            let w = api(&http, &base, Some(&alice.token), reqwest::Method::GET, &format!("/workspaces/{name}"), None).await;
            if w["actual_state"] == "Running" {
                break w;
            }
            assert!(Instant::now() < deadline, "workspace never ran: {w}\n{}", up.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let editor_url = w["editor_url"].as_str().expect("an editor URL").to_owned();
        assert_eq!(editor_url, format!("http://13337-{name}.ws.localhost:{port}/"));
        assert_eq!(w["endpoints"]["warren-editor"], json!(editor_url));

        // Without signing in, the editor's host sends the browser to sign in, nothing more.
        let anonymous = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .resolve(&format!("13337-{name}.ws.localhost"), ([127, 0, 0, 1], port).into())
            .build()
            .expect("client");
        let r = anonymous.get(&editor_url).header("accept", "text/html").send().await.expect("anonymous request");
        assert!(r.status().is_redirection(), "{}", r.status());
        let body = r.text().await.unwrap_or_default();
        assert!(!body.contains("vscode") && !body.contains("workbench"), "{body}");
        // A program (no HTML wanted) is told it is not authenticated.
        let r = anonymous.get(&editor_url).send().await.expect("anonymous request");
        assert_eq!(r.status(), reqwest::StatusCode::UNAUTHORIZED);

        // The owner: sign in, then VS Code's workbench with the project in its explorer.
        let chromium = Chromium::start().await.expect("Chromium").expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        tab.call("Emulation.setDeviceMetricsOverride",
            json!({"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": false}))
            .await.expect("window size");
        tab.goto(&editor_url).await.expect("open the editor");
        sign_in(&mut tab, &alice.name, &alice.password).await;
        // The editor starts after the clone: reload until the workbench shows.
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if tab.wait_until("document.querySelector('.monaco-workbench') !== null", 10).await.is_ok() {
                break;
            }
            if Instant::now() > deadline {
                let page = tab.text().await.unwrap_or_default();
                panic!("no workbench; page: {page}\n{}", diagnose(&name));
            }
            // An empty answer while the editor starts is one more reason to reload.
            let _ = tab.goto(&editor_url).await;
        }
        tab.wait_until(
            "(() => { const e = document.querySelector('.explorer-folders-view'); \
             return !!e && e.innerText.includes('hello-from-the-project.txt'); })()",
            120,
        )
        .await
        .expect("the explorer lists the project's file");
        let png = tab.call("Page.captureScreenshot", json!({"format": "png"})).await.expect("screenshot");
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png["data"].as_str().expect("image data"))
            .expect("base64");
        std::fs::write(&shot, bytes).expect("keep the screenshot");
        eprintln!("workbench screenshot: {}", shot.display());

        // The integrated terminal: a new one from the command palette (retried: the welcome
        // page opening at start-up may take the focus away from the palette), then a command.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            tab.eval("document.querySelector('.monaco-workbench').focus(); true").await.expect("focus");
            press(&mut tab, "F1", "F1", 112, None).await;
            let opened = tab
                .wait_until("!!document.querySelector('.quick-input-widget input') \
                             && document.activeElement === document.querySelector('.quick-input-widget input')", 5)
                .await
                .is_ok();
            if opened {
                type_text(&mut tab, "Terminal: Create New Terminal").await;
                if tab.wait_until("document.querySelector('.quick-input-list .monaco-list-row') !== null", 5).await.is_ok() {
                    press(&mut tab, "Enter", "Enter", 13, Some("\r")).await;
                    if tab.wait_until("document.querySelector('.xterm-helper-textarea') !== null", 10).await.is_ok() {
                        break;
                    }
                }
            }
            assert!(Instant::now() < deadline, "no terminal from the command palette: {}", tab.text().await.unwrap_or_default());
            press(&mut tab, "Escape", "Escape", 27, None).await;
        }
        // The shell may still be starting (typing before it reads is lost), and the terminal
        // draws on a canvas: type the (idempotent) command until its file appears.
        let command = "echo made-in-the-editor-$((6*7)) > /projects/from-the-editor.txt";
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            tab.eval("document.querySelector('.xterm-helper-textarea').focus(); true")
                .await
                .expect("focus the terminal");
            type_text(&mut tab, command).await;
            press(&mut tab, "Enter", "Enter", 13, Some("\r")).await;
            let made = || {
                running(&name).first().and_then(|c| c["Id"].as_str().map(str::to_owned)).is_some_and(|id| {
                    String::from_utf8_lossy(&exec(&id, "cat /projects/from-the-editor.txt").stdout).trim()
                        == "made-in-the-editor-42"
                })
            };
            let until = Instant::now() + Duration::from_secs(5);
            let mut done = false;
            while Instant::now() < until && !done {
                done = made();
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            if done {
                break;
            }
            assert!(Instant::now() < deadline, "the editor's terminal never ran the command\n{}", diagnose(&name));
        }

        // Another user signs in and gets 404 for Alice's editor.
        let bobs = Chromium::start().await.expect("Chromium").expect("installed");
        let mut bob_tab = bobs.tab().await.expect("tab");
        bob_tab.goto(&editor_url).await.expect("open");
        sign_in(&mut bob_tab, &bob.name, &bob.password).await;
        bob_tab
            .wait_not_found(60)
            .await
            .expect("404 for another user");
        assert!(bob_tab.eval("document.querySelector('.monaco-workbench') === null").await.expect("eval") == json!(true));
        editor_url
    });
    assert!(editor_url.contains("13337-"));

    let id = running(&name)[0]["Id"]
        .as_str()
        .expect("container id")
        .to_owned();
    wait_for(
        "the file made in the editor's terminal",
        Duration::from_secs(60),
        || {
            let out = exec(&id, "cat /projects/from-the-editor.txt");
            (String::from_utf8_lossy(&out.stdout).trim() == "made-in-the-editor-42").then_some(())
        },
        || {
            String::from_utf8_lossy(&exec(&id, "cat /projects/.warren/logs/*.log").stdout)
                .into_owned()
        },
    );
    // Podman gives the image's unknown user the home `/`: nothing of it is copied.
    assert!(!exec(&id, "test -e /projects/.home/etc").status.success());
    // The editor's own state lives in the home on the volume too.
    assert!(
        exec(&id, "test -d /projects/.home/.local/share/code-server/User")
            .status
            .success()
    );

    up.cli_ok(&["ws", "stop", &name, "--wait", "--timeout", "2m"]);
    up.cli_ok(&["ws", "start", &name, "--wait", "--timeout", "3m"]);
    let id = running(&name)[0]["Id"]
        .as_str()
        .expect("container id")
        .to_owned();
    let out = exec(&id, "cat /projects/from-the-editor.txt");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "made-in-the-editor-42"
    );
    let logs = up.cli_ok(&["ws", "logs", &name]);
    assert!(
        logs.contains("warren: starting the editor (code-server 4.100.3) on port 13337"),
        "{logs}"
    );
    up.cli_ok(&["ws", "rm", &name, "--wait", "--timeout", "2m"]);

    // An image the editor cannot run in: the workspace runs all the same, and says why.
    let (plain, _) = up.create_workspace("noide", BUSYBOX_DEVFILE);
    let logs = wait_for(
        "the reason the editor is missing",
        Duration::from_secs(60),
        || {
            let logs = up.cli_ok(&["ws", "logs", &plain]);
            logs.contains("editor not started").then_some(logs)
        },
        || up.log(),
    );
    assert!(logs.contains("warren: editor not started: its Node.js cannot run in image localhost/warren-test:latest"), "{logs}");
    let shown: Value =
        serde_json::from_str(&up.cli_ok(&["ws", "show", &plain, "-o", "json"])).expect("JSON");
    assert_eq!(shown["actual_state"], "Running");
    up.cli_ok(&["ws", "rm", &plain, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}

/// A dev container's `customizations.vscode`, given to the injected editor: the repository's
/// `.vsix` installed by code-server before it starts, the settings written as the machine's,
/// and an extension id the agent has no gallery for named in the workspace's output.
#[test]
fn a_dev_containers_vscode_customizations_reach_the_injected_editor() {
    if !podman_available() || !images_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let git = support::git_server_for_workspaces(&rt, "ann", "vsix-pass-3");
    let config = format!(
        r#"{{
  "image": "{DEBIAN_IMAGE}",
  "hostRequirements": {{ "memory": "1536mb" }},
  "customizations": {{
    "vscode": {{
      "extensions": ["ours.vsix", "rust-lang.rust-analyzer"],
      "settings": {{ "editor.tabSize": 3 }}
    }}
  }}
}}"#
    );
    let vsix = warren_testkit::vsix::vsix("warren-test", "hello", "0.0.1");
    git.create_repo_bytes(
        "customized",
        &[
            (".devcontainer/devcontainer.json", config.as_bytes()),
            (".devcontainer/ours.vsix", &vsix),
        ],
    )
    .expect("repository");
    let mut up = Up::start();
    up.allow_egress_to(&host_address());
    let project = up.project_of(&git, "customized", "vsix-pass-3");
    let ws = support::unique_name("dcvsix");
    let _cleanup = support::Workspaces(vec![ws.clone()]);
    up.create_of_project(&project, &ws);
    let id = running(&ws)[0]["Id"]
        .as_str()
        .expect("container id")
        .to_owned();
    let data = "$HOME/.local/share/code-server";
    wait_for(
        "the repository's extension installed",
        Duration::from_secs(180),
        || {
            let out = exec(&id, &format!("ls {data}/extensions"));
            String::from_utf8_lossy(&out.stdout)
                .contains("warren-test.hello-0.0.1")
                .then_some(())
        },
        || {
            let logs = exec(&id, "tail -n 40 /workspaces/.warren/logs/*.log");
            String::from_utf8_lossy(&logs.stdout).into_owned()
        },
    );
    let settings = exec(&id, &format!("cat {data}/Machine/settings.json"));
    let settings: Value =
        serde_json::from_slice(&settings.stdout).expect("the machine's settings, as JSON");
    assert_eq!(settings["editor.tabSize"], 3);
    let output = up.cli_ok(&["ws", "logs", &ws]);
    assert!(
        output.contains("editor extensions not installed: rust-lang.rust-analyzer")
            && output.contains("names no extension gallery"),
        "{output}"
    );
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
}
