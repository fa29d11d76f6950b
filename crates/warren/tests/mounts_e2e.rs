//! Issue 21's "done when", with `warren up` on a real engine: an admin builds the team space
//! `acme/platform` with two members. Alice attaches this machine with `warren connect`
//! (a connector mount): its web server answers curl, its WebSocket server websocat, both
//! through the proxy under the mount's hosts; Chromium signs in and opens the page and the web
//! terminal (a real PTY on this machine); OpenSSH `ssh` and `sftp` reach it too. The
//! connector's token does not back another mount. Bob pairs in Alice's workspace through a
//! softlink; the workspace's old name is a redirect curl follows. `ws tree` draws it all with
//! honest states: killed, the connector's mount goes `Unknown` and the proxy answers 503
//! naming why; restarted, it is `Ready` again.
//!
//! Skips with a notice without Podman (fails under `WARREN_REQUIRE_ENGINE=1`) or without
//! Chromium, OpenSSH, curl, websocat or python3 (fails under `WARREN_REQUIRE_TOOLS`).

use crate::support;

use serde_json::{json, Value};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{api, ensure_image, podman_available, sign_in, Proc, Up, WEB_DEVFILE};
use warren_testkit::browser::Chromium;
use warren_testkit::process::output_ok;

/// A process of this machine the test started; killed on drop.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `curl` of `url` through the proxy at `port` with a bearer token: (status, body, headers).
fn curl(port: u16, token: &str, url: &str) -> (u16, String, String) {
    let host = url
        .split("//")
        .nth(1)
        .and_then(|r| r.split(['/', ':']).next())
        .expect("host");
    let out = Command::new("curl")
        .args(["-sS", "-D", "/dev/stderr", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .args(["--resolve", &format!("{host}:{port}:127.0.0.1")])
        .args(["-w", "\n%{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (
        code.trim().parse().expect("status"),
        body.to_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_team_attaches_a_machine_pairs_through_a_softlink_and_follows_a_redirect() {
    if !podman_available()
        || !support::tools_available(&["ssh", "sftp", "ssh-keygen", "curl", "websocat", "python3"])
    {
        return;
    }
    ensure_image();
    // One-second heartbeats: a connector silent for three is `Unknown`.
    let mut up = Up::start_with(
        tempfile::tempdir().expect("temp home"),
        &[("WARREN_PARTIAL_RECONCILIATION_INTERVAL_SECONDS", "1")],
    );
    let (http_port, ssh_port) = up.proxy_ports();
    let base = up.api_base();
    let admin = up.admin_token();
    let relay = up.relay_url();
    let suffix = support::unique_name("m");
    let (gpu, gpu2) = (format!("gpu-{suffix}"), format!("gpu2-{suffix}"));
    let ws = format!("web-{suffix}");
    let (link, old) = (format!("pair-{suffix}"), format!("old-{suffix}"));
    let (site_mount, dead_mount) = (format!("site-{suffix}"), format!("dead-{suffix}"));
    up.workspace = Some(ws.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let known_hosts = dir.path().join("known_hosts");

    // This machine's own services: a web page and a WebSocket echo.
    let site = dir.path().join("site");
    std::fs::create_dir(&site).expect("site dir");
    std::fs::write(site.join("index.html"), "served-by-connector\n").expect("page");
    std::fs::create_dir(site.join("sub")).expect("sub dir");
    std::fs::write(site.join("sub/index.html"), "served-under-sub\n").expect("page");
    let (web_port, echo_port) = (support::free_port(), support::free_port());
    let _web = Child(
        Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "-d"])
            .arg(&site)
            .arg(web_port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 http.server"),
    );
    let _echo = Child(
        Command::new("websocat")
            .args([
                "-E",
                "-t",
                &format!("ws-l:127.0.0.1:{echo_port}"),
                "mirror:",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("websocat server"),
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let http = reqwest::Client::new();
    let (alice_pw, alice, bob, carol) = rt.block_on(async {
        let (alice_pw, alice) =
            support::user_with_key(&http, &base, &admin, "alice", dir.path()).await;
        let (_, bob) = support::user_with_key(&http, &base, &admin, "bob", dir.path()).await;
        let (_, carol) = support::user_with_key(&http, &base, &admin, "carol", dir.path()).await;
        (alice_pw, alice, bob, carol)
    });
    let call = |token: &str, method: reqwest::Method, path: &str, body: Option<Value>| {
        rt.block_on(api(&http, &base, Some(token), method, path, body))
    };
    let raw = |token: &str, method: reqwest::Method, path: &str, body: Option<Value>| {
        rt.block_on(async {
            let mut req = http
                .request(method, format!("{base}/api/v1{path}"))
                .bearer_auth(token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let r = req.send().await.expect("API call");
            (r.status().as_u16(), r.text().await.unwrap_or_default())
        })
    };

    // The team admin builds acme/platform with two developers.
    up.cli_ok(&["space", "create", "acme"]);
    up.cli_ok(&["space", "create", "acme/platform"]);
    for who in ["alice", "bob"] {
        up.cli_ok(&[
            "space",
            "member",
            "add",
            "acme/platform",
            who,
            "--role",
            "developer",
        ]);
    }

    // Alice attaches this machine: the mount waits for its connector.
    let created = call(
        &alice,
        reqwest::Method::POST,
        "/mounts",
        Some(json!({"name": gpu, "type": "proxy", "connector": true, "space": "acme/platform"})),
    );
    let token = created["connector_token"]
        .as_str()
        .expect("token")
        .to_owned();
    assert_eq!(created["status"]["phase"], "Connecting", "{created}");
    let again = call(
        &alice,
        reqwest::Method::GET,
        &format!("/mounts/{gpu}"),
        None,
    );
    assert!(
        again.get("connector_token").is_none(),
        "shown once: {again}"
    );
    let connect = |mount: &str, log: &str| {
        Proc::spawn(
            "connect",
            &[
                "connect".into(),
                "--relay-url".into(),
                relay.clone(),
                "--mount".into(),
                mount.into(),
                "--port".into(),
                web_port.to_string(),
                "--port".into(),
                echo_port.to_string(),
            ],
            &[("WARREN_CONNECTOR_TOKEN", token.clone())],
            &dir.path().join(log),
        )
    };
    let phase_is = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = call(
                &alice,
                reqwest::Method::GET,
                &format!("/mounts/{gpu}"),
                None,
            );
            if m["status"]["phase"] == want {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "mount never {want}: {m}\n{}",
                up.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let mut connector = connect(&gpu, "connect.log");
    let ready = phase_is("Ready");
    assert_eq!(
        ready["ports"],
        json!([web_port.min(echo_port), web_port.max(echo_port)]),
        "{ready}"
    );
    let web_url = format!("http://{web_port}-{gpu}.ws.localhost:{http_port}/");

    // curl and websocat reach the machine's services through the proxy.
    let (status, body, _) = curl(http_port, &alice, &web_url);
    assert_eq!(
        (status, body.trim()),
        (200, "served-by-connector"),
        "{}",
        connector.log_text()
    );
    let (status, _, _) = curl(http_port, &bob, &web_url);
    assert_eq!(status, 200, "bob is a developer of acme/platform");
    let (status, _, _) = curl(http_port, &carol, &web_url);
    assert_eq!(status, 404, "carol is no member");
    let echo_host = format!("{echo_port}-{gpu}.ws.localhost");
    let out = Command::new("websocat")
        .args(["-1", "-H", &format!("Authorization: Bearer {alice}")])
        .arg(format!("--ws-c-uri=ws://{echo_host}:{http_port}/"))
        .arg("-")
        .arg(format!("ws-c:tcp:127.0.0.1:{http_port}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(b"over-the-tunnel\n")?;
            c.wait_with_output()
        })
        .expect("websocat");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "over-the-tunnel",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // SSH and sftp run as the user who started the connector, on this machine.
    let me = String::from_utf8(Command::new("id").arg("-un").output().expect("id").stdout)
        .expect("utf-8");
    let out = support::ssh(
        &dir.path().join("alice_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{gpu}@127.0.0.1"),
    )
    .arg("id -un; exit 4")
    .output()
    .expect("ssh");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(4), me.trim()),
        "ssh: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        connector.log_text()
    );
    let upload = dir.path().join("up.bin");
    let payload: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    std::fs::write(&upload, &payload).expect("write upload");
    let remote = dir.path().join("remote.bin");
    let back = dir.path().join("back.bin");
    let batch = dir.path().join("batch");
    std::fs::write(
        &batch,
        format!(
            "put {} {}\nget {} {}\n",
            upload.display(),
            remote.display(),
            remote.display(),
            back.display()
        ),
    )
    .expect("batch");
    output_ok(
        Command::new("sftp")
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
            .arg(dir.path().join("alice_ed25519"))
            .args(["-P", &ssh_port.to_string(), "-b"])
            .arg(&batch)
            .arg(format!("{gpu}@127.0.0.1")),
    );
    assert_eq!(std::fs::read(&back).expect("downloaded"), payload);

    // The browser: sign in, the machine's page, then a terminal on the machine.
    rt.block_on(async {
        let chromium = Chromium::start()
            .await
            .expect("Chromium")
            .expect("installed");
        let mut tab = chromium.tab().await.expect("tab");
        tab.goto(&web_url).await.expect("open the mount's URL");
        sign_in(&mut tab, "alice", &alice_pw).await;
        tab.wait_until(
            "document.body && document.body.innerText.includes('served-by-connector')",
            60,
        )
        .await
        .expect("the machine's page in the browser");
        support::terminal_shows(
            &mut tab,
            &format!("http://terminal-{gpu}.ws.localhost:{http_port}/"),
            "echo machine-$((6*7)); tty\r",
            "screen.includes('machine-42') && screen.includes('/dev/pts/')",
        )
        .await;
    });

    // An admin puts a URL the agent reaches in the tree: its path goes before the request's,
    // and one nothing answers on is Unavailable, the proxy saying why.
    let closed = support::free_port();
    for (name, url) in [
        (&site_mount, format!("http://127.0.0.1:{web_port}/sub")),
        (&dead_mount, format!("http://127.0.0.1:{closed}/")),
    ] {
        up.cli_ok(&[
            "mount",
            "create",
            name,
            "--type",
            "proxy",
            "--url",
            &url,
            "--via",
            "local",
            "--space",
            "acme/platform",
        ]);
    }
    let phase_of = |name: &str, want: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let m = call(
                &alice,
                reqwest::Method::GET,
                &format!("/mounts/{name}"),
                None,
            );
            if m["status"]["phase"] == want {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "{name} never {want}: {m}\n{}",
                up.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let site = phase_of(&site_mount, "Ready");
    assert_eq!(
        site["status"]["url"],
        format!("http://{web_port}-{site_mount}.ws.localhost:{http_port}/"),
        "{site}"
    );
    let (status, body, _) = curl(
        http_port,
        &bob,
        &format!("http://{web_port}-{site_mount}.ws.localhost:{http_port}/"),
    );
    assert_eq!(
        (status, body.trim()),
        (200, "served-under-sub"),
        "{}",
        up.log()
    );
    let dead = phase_of(&dead_mount, "Unavailable");
    assert_eq!(
        dead["status"]["conditions"][0]["reason"], "Unreachable",
        "{dead}"
    );
    let (status, body, _) = curl(
        http_port,
        &alice,
        &format!("http://{closed}-{dead_mount}.ws.localhost:{http_port}/"),
    );
    assert_eq!(status, 503, "{body}");
    assert!(body.contains(&format!("127.0.0.1:{closed}")), "{body}");

    // The token backs this mount alone.
    call(
        &alice,
        reqwest::Method::POST,
        "/mounts",
        Some(json!({"name": gpu2, "type": "proxy", "connector": true, "space": "acme/platform"})),
    );
    let mut wrong = connect(&gpu2, "connect2.log");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = wrong.exited() {
            break s;
        }
        assert!(Instant::now() < deadline, "{}", wrong.log_text());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    assert!(
        wrong
            .log_text()
            .contains(&format!("backs mount {gpu}, not {gpu2}")),
        "{}",
        wrong.log_text()
    );

    // Bob pairs in Alice's workspace through a softlink; its old name redirects.
    call(
        &alice,
        reqwest::Method::POST,
        "/workspaces",
        Some(json!({"name": ws, "devfile": WEB_DEVFILE, "space": "acme/platform"})),
    );
    call(
        &alice,
        reqwest::Method::POST,
        "/mounts",
        Some(json!({"name": old, "type": "redirect", "ref": ws, "space": "acme/platform"})),
    );
    let (status, text) = raw(
        &bob,
        reqwest::Method::POST,
        "/mounts",
        Some(json!({"name": link, "type": "workspace", "ref": ws, "space": "acme/platform"})),
    );
    assert_eq!(status, 403, "no grant yet: {text}");
    call(
        &alice,
        reqwest::Method::PUT,
        &format!("/workspaces/{ws}/grants/bob"),
        None,
    );
    call(
        &bob,
        reqwest::Method::POST,
        "/mounts",
        Some(json!({"name": link, "type": "workspace", "ref": ws, "space": "acme/platform"})),
    );
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let w = call(
            &alice,
            reqwest::Method::GET,
            &format!("/workspaces/{ws}"),
            None,
        );
        if w["actual_state"] == "Running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "workspace never ran: {w}\n{}",
            up.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = support::ssh(
        &dir.path().join("bob_ed25519"),
        &known_hosts,
        ssh_port,
        &format!("{link}@127.0.0.1"),
    )
    .arg("touch /tmp/bob-was-here && id -u")
    .output()
    .expect("ssh through the softlink");
    assert_eq!(
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim()
        ),
        (Some(0), "5001"),
        "the softlink: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        up.log()
    );
    let (status, _, headers) = curl(
        http_port,
        &alice,
        &format!("http://8080-{old}.ws.localhost:{http_port}/some/path?q=1"),
    );
    assert_eq!(status, 308, "{headers}");
    assert!(
        headers.to_ascii_lowercase().contains(&format!(
            "location: http://8080-{ws}.ws.localhost:{http_port}/some/path?q=1"
        )),
        "{headers}"
    );

    // Alice's own CLI: `ws ssh` follows the redirect, and logs in to the connector's machine.
    let alice_home = dir.path().join("alice-cli");
    let out = support::cli(
        &alice_home,
        &["login", "--url", &base, "-u", "alice", "--password-stdin"],
        Some(&format!("{alice_pw}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ws_ssh = |entry: &str, command: &str| {
        let key = dir.path().join("alice_ed25519");
        Command::new(support::warren_bin())
            .env("WARREN_HOME", &alice_home)
            // The CLI pins the proxy's host keys under ~/.ssh: the test's own directory.
            .env("HOME", dir.path())
            .args(["ws", "ssh", entry])
            .args(["--ssh-option", &format!("IdentityFile={}", key.display())])
            .args([
                "--ssh-option",
                "IdentitiesOnly=yes",
                "--ssh-option",
                "BatchMode=yes",
            ])
            .args(["--", command])
            .stdin(Stdio::null())
            .output()
            .expect("warren ws ssh")
    };
    for (entry, command, want) in [(&old, "id -u", "5001"), (&gpu, "id -un", me.trim())] {
        let out = ws_ssh(entry, command);
        assert_eq!(
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).trim()
            ),
            (Some(0), want),
            "ws ssh {entry}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The tree, as the admin sees it: every entry with its state.
    let tree = up.cli_ok(&["ws", "tree", "acme"]);
    for (name, state) in [
        (&ws, "Running"),
        (&gpu, "Ready"),
        (&gpu2, "Connecting"),
        (&link, "Ready"),
        (&old, "Ready"),
        (&site_mount, "Ready"),
        (&dead_mount, "Unavailable"),
    ] {
        assert!(
            tree.lines()
                .any(|l| l.contains(name.as_str()) && l.contains(state)),
            "{name} {state} in:\n{tree}"
        );
    }

    // Killed, the connector's mount goes Unknown and the proxy says why; back, Ready.
    connector.kill();
    let unknown = phase_is("Unknown");
    assert_eq!(
        unknown["status"]["conditions"][0]["reason"], "HeartbeatMissed",
        "{unknown}"
    );
    // The first request may still hold the proxy's cached answer (the tunnel fails: 503
    // naming that); the next asks the server, which names the missed heartbeats.
    let (status, body, _) = curl(http_port, &alice, &web_url);
    assert_eq!(status, 503, "{body}");
    assert!(
        body.contains("cannot be reached") || body.contains("silent"),
        "{body}"
    );
    let (status, body, _) = curl(http_port, &alice, &web_url);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("silent for"), "{body}");
    let tree = up.cli_ok(&["ws", "tree", "acme"]);
    assert!(
        tree.lines()
            .any(|l| l.contains(gpu.as_str()) && l.contains("Unknown")),
        "{tree}"
    );
    let mut connector = connect(&gpu, "connect3.log");
    phase_is("Ready");
    let (status, body, _) = curl(http_port, &alice, &web_url);
    assert_eq!((status, body.trim()), (200, "served-by-connector"));
    connector.kill();

    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "warren up exit: {status}\n{}", up.log());
}
