//! Issue 5's "done when", on a real engine: with `warren up` running, a user who created a
//! workspace opens its URL in headless Chromium, signs in and sees the workspace's web
//! server; opens the web terminal (a real exec with a PTY in the Podman container) and runs a
//! command; connects with OpenSSH `ssh` (exit status, stdin) and `sftp`; another user gets
//! 404 in the browser and is refused over SSH. The workspace lives in the team space `acme`
//! (issue 21): a developer of it gets in over SSH, a viewer of it is refused, and a developer
//! of another space gets in through a softlink made with the owner's grant.
//!
//! Skips with a notice without Podman (fails under `WARREN_REQUIRE_ENGINE=1`) or without
//! Chromium/OpenSSH (fails under `WARREN_REQUIRE_TOOLS`).

use crate::support;

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::{api, ensure_image, podman_available, sign_in, Up, WEB_DEVFILE};
use warren_testkit::browser::Chromium;

/// A user with a token and an SSH key registered on the account.
struct User {
    name: String,
    password: String,
    token: String,
}

async fn user(http: &reqwest::Client, base: &str, admin: &str, name: &str, dir: &Path) -> User {
    let (password, token) = support::user_with_key(http, base, admin, name, dir).await;
    User {
        name: name.into(),
        password,
        token,
    }
}

#[test]
fn with_warren_up_a_user_reaches_the_workspace_in_the_browser_terminal_ssh_and_sftp() {
    if !podman_available() || !support::tools_available(&["ssh", "sftp", "ssh-keygen"]) {
        return;
    }
    ensure_image();
    let mut up = Up::start();
    let (http_port, ssh_port) = up.proxy_ports();
    let base = up.api_base();
    let admin = up.admin_token();
    let name = support::unique_name("acc");
    up.workspace = Some(name.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let known_hosts = dir.path().join("known_hosts");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::new();
        let alice = user(&http, &base, &admin, "alice", dir.path()).await;
        let bob = user(&http, &base, &admin, "bob", dir.path()).await;
        let carol = user(&http, &base, &admin, "carol", dir.path()).await;
        user(&http, &base, &admin, "dan", dir.path()).await;
        let admin_call = |method, path: String, body| {
            let (http, base, admin) = (&http, &base, &admin);
            async move { api(http, base, Some(admin), method, &path, body).await }
        };
        admin_call(
            reqwest::Method::POST,
            "/spaces".into(),
            Some(json!({"path": "acme"})),
        )
        .await;
        for (who, role) in [
            ("alice", "developer"),
            ("carol", "developer"),
            ("dan", "viewer"),
        ] {
            admin_call(
                reqwest::Method::PUT,
                format!("/spaces/acme/members/{who}"),
                Some(json!({"role": role})),
            )
            .await;
        }
        api(
            &http,
            &base,
            Some(&alice.token),
            reqwest::Method::POST,
            "/workspaces",
            Some(json!({"name": name, "devfile": WEB_DEVFILE, "space": "acme"})),
        )
        .await;
        // A softlink for pairing: alice lets carol link to her workspace; carol puts the
        // link in `pairs`, where she and dan (only a viewer of acme) are developers.
        admin_call(
            reqwest::Method::POST,
            "/spaces".into(),
            Some(json!({"path": "pairs"})),
        )
        .await;
        for who in ["carol", "dan"] {
            admin_call(
                reqwest::Method::PUT,
                format!("/spaces/pairs/members/{who}"),
                Some(json!({"role": "developer"})),
            )
            .await;
        }
        api(
            &http,
            &base,
            Some(&alice.token),
            reqwest::Method::PUT,
            &format!("/workspaces/{name}/grants/carol"),
            None,
        )
        .await;
        api(
            &http,
            &base,
            Some(&carol.token),
            reqwest::Method::POST,
            "/mounts",
            Some(json!({"name": format!("{name}-link"), "type": "workspace", "ref": name, "space": "pairs"})),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let w = api(
                &http,
                &base,
                Some(&alice.token),
                reqwest::Method::GET,
                &format!("/workspaces/{name}"),
                None,
            )
            .await;
            if w["actual_state"] == "Running" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "workspace never ran: {w}\n{}",
                up.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        // The browser: sign in, then the workspace's own web server.
        let chromium = Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        let page = format!("http://8080-{name}.ws.localhost:{http_port}/");
        support::page_shows(
            &mut tab,
            &page,
            Some((&alice.name, &alice.password)),
            "served-by-workspace",
            || up.log(),
        )
        .await;
        assert_eq!(tab.url().await.expect("url"), page);

        // The web terminal: a real exec with a PTY in the Podman container.
        support::terminal_shows(
            &mut tab,
            &format!("http://terminal-{name}.ws.localhost:{http_port}/"),
            "echo warren-$((6*7)) $(id -u); tty\r",
            "screen.includes('warren-42 5001') && screen.includes('/dev/pts/')",
        )
        .await;
        support::terminal_exits(&mut tab, 3).await;

        // Bob, in his own browser, signs in and gets 404 for Alice's workspace.
        let bobs = Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut bob_tab = bobs.tab().await.expect("tab");
        bob_tab.goto(&page).await.expect("open");
        sign_in(&mut bob_tab, &bob.name, &bob.password).await;
        bob_tab
            .wait_not_found(60)
            .await
            .expect("404 for another user");
        assert!(!bob_tab
            .text()
            .await
            .expect("text")
            .contains("served-by-workspace"));
    });

    // SSH: exec with an exit status and stdin, then sftp both ways.
    let mut ssh = support::ssh(
        &alice_key(&dir),
        &known_hosts,
        ssh_port,
        &format!("{name}@127.0.0.1"),
    );
    ssh.arg("read line; echo got-$line; id -u; exit 7");
    let out = support::output_with_stdin(ssh, b"hello\n");
    assert_eq!(
        out.status.code(),
        Some(7),
        "ssh: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.log()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got-hello\n5001\n");

    let upload = dir.path().join("upload.bin");
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&upload, &payload).expect("write upload");
    let back = dir.path().join("back.bin");
    let batch = dir.path().join("batch");
    std::fs::write(
        &batch,
        format!(
            "put {} /tmp/up.bin\nget /tmp/up.bin {}\n",
            upload.display(),
            back.display()
        ),
    )
    .expect("batch file");
    let out = Command::new("sftp")
        .args([
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
        ])
        .arg("-o")
        .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
        .arg("-i")
        .arg(alice_key(&dir))
        .args(["-P", &ssh_port.to_string(), "-b"])
        .arg(&batch)
        .arg(format!("{name}@127.0.0.1"))
        .output()
        .expect("sftp");
    assert!(
        out.status.success(),
        "sftp: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.log()
    );
    assert_eq!(std::fs::read(&back).expect("downloaded file"), payload);

    // Bob's key opens nothing of Alice's.
    let out = support::ssh(
        &dir.path().join("bob_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{name}@127.0.0.1"),
    )
    .arg("true")
    .output()
    .expect("ssh as bob");
    assert_ne!(out.status.code(), Some(0), "bob got in");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A developer of the workspace's space uses it; a viewer of it only sees it.
    let out = support::ssh(
        &dir.path().join("carol_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{name}@127.0.0.1"),
    )
    .arg("echo carol-in")
    .output()
    .expect("ssh as carol");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "carol-in"),
        "a developer of acme: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.log()
    );
    let out = support::ssh(
        &dir.path().join("dan_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{name}@127.0.0.1"),
    )
    .arg("true")
    .output()
    .expect("ssh as dan");
    assert_ne!(out.status.code(), Some(0), "a viewer got in");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Through the softlink dan pairs in the same workspace: the file sftp left is there.
    let out = support::ssh(
        &dir.path().join("dan_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{name}-link@127.0.0.1"),
    )
    .arg("test -s /tmp/up.bin && echo dan-paired")
    .output()
    .expect("ssh as dan through the softlink");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "dan-paired"),
        "the softlink: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.log()
    );

    up.cli_ok(&["ws", "rm", &name, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "warren up exit: {status}\n{}", up.log());
}

fn alice_key(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("alice_ed25519")
}
