//! End to end on a real engine: `warren up` (server, relay and agent in one process) and the
//! `warren` CLI drive one workspace through its whole life, with `podman` as the witness.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};
use support::{
    containers, ensure_image, networks, podman_available, running, volumes, Up, WEB_DEVFILE,
};

const DEVFILE: &str = r#"
schemaVersion: 2.2.0
metadata:
  name: e2e
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      cpuLimit: 500m
      mountSources: true
"#;

fn state_of(up: &Up, ws: &str) -> (String, String) {
    let v: Value =
        serde_json::from_str(&up.cli_ok(&["ws", "show", ws, "-o", "json"])).expect("ws show JSON");
    (
        v["desired_state"].as_str().unwrap_or_default().to_owned(),
        v["actual_state"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn warren_up_runs_a_workspace_through_its_life_on_podman() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let mut up = Up::start();
    // Create and wait for Running: a real container with the rendered limits and user.
    let (name, created) = up.create_workspace("up-e2e", DEVFILE);
    let ws = created["name"].as_str().expect("workspace name").to_owned();
    assert_eq!(ws, name, "the workspace has the requested name");
    assert_eq!(state_of(&up, &ws), ("Running".into(), "Running".into()));
    let live = running(&ws);
    assert_eq!(live.len(), 1, "one running container: {live:#?}");
    let c = &live[0];
    assert_eq!(c["HostConfig"]["Memory"], 256 * 1024 * 1024, "memory limit");
    assert_eq!(c["HostConfig"]["NanoCpus"], 500_000_000, "cpu limit");
    assert_eq!(c["Config"]["User"], "5001:0", "non-root user");
    let caps = c["HostConfig"]["CapDrop"].to_string().to_lowercase();
    assert!(
        caps.contains("all") || caps.contains("cap_"),
        "capabilities dropped: {caps}"
    );
    let id = c["Id"].as_str().expect("container id").to_owned();
    let wrote = Command::new("podman")
        .args(["exec", &id, "sh", "-c", "echo kept > /projects/keep.txt"])
        .status()
        .expect("podman exec");
    assert!(wrote.success(), "writing into /projects");
    assert_eq!(volumes(&ws).len(), 1, "the data volume exists");

    // Stop: containers stopped, volume kept.
    up.cli_ok(&["ws", "stop", &ws, "--wait", "--timeout", "2m"]);
    assert_eq!(state_of(&up, &ws), ("Stopped".into(), "Stopped".into()));
    assert!(running(&ws).is_empty(), "nothing runs after stop");
    assert_eq!(volumes(&ws).len(), 1, "the volume is kept on stop");

    // Start: the file written before the stop is still there.
    up.cli_ok(&["ws", "start", &ws, "--wait", "--timeout", "2m"]);
    assert_eq!(state_of(&up, &ws), ("Running".into(), "Running".into()));
    let live = running(&ws);
    assert_eq!(live.len(), 1);
    let id = live[0]["Id"].as_str().expect("container id").to_owned();
    let kept = Command::new("podman")
        .args(["exec", &id, "cat", "/projects/keep.txt"])
        .output()
        .expect("podman exec");
    assert_eq!(String::from_utf8_lossy(&kept.stdout).trim(), "kept");

    // Restart: back to Running with a fresh start of the container.
    let started_before = live[0]["State"]["StartedAt"].clone();
    up.cli_ok(&["ws", "restart", &ws, "--wait", "--timeout", "2m"]);
    assert_eq!(state_of(&up, &ws), ("Running".into(), "Running".into()));
    let live = running(&ws);
    assert_eq!(live.len(), 1);
    assert_ne!(live[0]["State"]["StartedAt"], started_before, "restarted");

    // Terminate: containers, network and volumes gone.
    up.cli_ok(&["ws", "rm", &ws, "--wait", "--timeout", "2m"]);
    let (desired, actual) = state_of(&up, &ws);
    assert_eq!(
        (desired.as_str(), actual.as_str()),
        ("Terminated", "Terminated")
    );
    assert!(containers(&ws).is_empty(), "containers removed");
    assert!(volumes(&ws).is_empty(), "volumes removed");
    assert!(networks(&ws).is_empty(), "network removed");

    // A running Warren stops cleanly on SIGTERM.
    let status = up.stop();
    assert!(status.success(), "warren up exit: {status}\n{}", up.log());
    assert!(up.log().contains("Warren stopped"), "{}", up.log());
}

/// `warren up` includes the proxy: a workspace endpoint answers through
/// proxy → relay → agent → container, with the CLI's token as `Authorization: Bearer`;
/// without credentials an API client gets 401.
#[test]
fn warren_up_serves_a_workspace_endpoint_through_its_proxy() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let mut up = Up::start();
    let (name, created) = up.create_workspace("up-web", WEB_DEVFILE);
    // The endpoint URL names the proxy's port, as printed at start.
    let url = created["endpoints"]["web"]
        .as_str()
        .unwrap_or_else(|| panic!("an endpoint URL: {created}"))
        .to_owned();
    let prefix = format!("http://8080-{name}.ws.localhost:");
    assert!(url.starts_with(&prefix), "{url}");
    let port: u16 = url[prefix.len()..]
        .trim_end_matches('/')
        .parse()
        .unwrap_or_else(|_| panic!("a port in {url}"));
    assert!(
        up.log().contains(&format!(
            "workspace hosts: http://{{port}}-{{workspace}}.ws.localhost:{port}/"
        )),
        "{}",
        up.log()
    );
    let token =
        warren_cli::credentials::load(&up.home.path().join(warren_cli::credentials::FILE_NAME))
            .expect("CLI credentials")
            .expect("credentials written by warren up")
            .token;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::builder()
            .resolve(
                &format!("8080-{name}.ws.localhost"),
                ([127, 0, 0, 1], port).into(),
            )
            .build()
            .expect("client");
        // The container may still be starting httpd: poll (a hang guard, not a timing check).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = http.get(&url).bearer_auth(&token).send().await;
            if let Ok(r) = r {
                if r.status() == 200 {
                    assert_eq!(r.text().await.expect("body"), "served-by-workspace\n");
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no answer through the proxy:\n{}",
                up.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let r = http.get(&url).send().await.expect("anonymous request");
        assert_eq!(r.status(), 401);
    });
    // `warren login` given the proxy's address instead of the server's: exit 3 ("not
    // Warren", as the help promises), saying what to give instead.
    let other_home = tempfile::tempdir().expect("temp home");
    let mut login = Command::new(env!("CARGO_BIN_EXE_warren"));
    login
        .args(["login", "--url", &format!("http://127.0.0.1:{port}")])
        .args(["--username", "admin", "--password-stdin"])
        .env("WARREN_HOME", other_home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = login.spawn().expect("warren login");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"secret\n").expect("password");
    }
    let out = child.wait_with_output().expect("warren login");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("does not answer like a Warren server") && err.contains("not the proxy's"),
        "{err}"
    );
    assert!(!other_home.path().join("credentials.toml").exists());
    up.cli_ok(&["ws", "rm", &name, "--wait", "--timeout", "2m"]);
    let status = up.stop();
    assert!(status.success(), "warren up exit: {status}\n{}", up.log());
}

/// Stops, when dropped, every `podman system service` serving `host`: a test that fails
/// half-way leaves none behind.
struct ServiceGuard(String);

impl Drop for ServiceGuard {
    fn drop(&mut self) {
        for pid in warren_agent::runtime::engine::services_on(&self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    }
}

/// The live (not revoked) tokens named "warren up" of the signed-in admin.
fn live_up_tokens(up: &Up) -> Vec<Value> {
    let list: Vec<Value> =
        serde_json::from_str(&up.cli_ok(&["token", "list", "-o", "json"])).expect("tokens JSON");
    list.into_iter()
        .filter(|t| t["name"] == "warren up" && t["revoked"] == false)
        .collect()
}

/// `kill -9` of `warren up` used to leave its `podman system service` running, and the next
/// start ran a second one on the same socket; every start also minted another year-long admin
/// token. Now the service dies with its parent, a leftover is stopped at the next start, and
/// the CLI keeps one token across restarts.
#[test]
fn a_killed_warren_up_leaves_no_podman_service_and_restarts_mint_no_tokens() {
    if !podman_available() {
        return;
    }
    let _serial = support::one_warren_up_at_a_time();
    ensure_image();
    let up = Up::start();
    let host = format!(
        "unix://{}",
        up.home.path().join("agent").join("podman.sock").display()
    );
    let _guard = ServiceGuard(host.clone());
    let services = warren_agent::runtime::engine::services_on(&host);
    if services.is_empty() {
        eprintln!("skipping: warren up uses an engine socket it did not start ({host})");
        return;
    }
    assert_eq!(services.len(), 1, "one service: {services:?}");
    let tokens = live_up_tokens(&up);
    assert_eq!(tokens.len(), 1, "{tokens:?}");

    let home = up.crash();
    support::wait_for(
        "the podman service to stop with warren up",
        Duration::from_secs(30),
        || {
            warren_agent::runtime::engine::services_on(&host)
                .is_empty()
                .then_some(())
        },
        || format!("still serving {host}"),
    );

    let mut up = Up::start_in(home);
    let again = warren_agent::runtime::engine::services_on(&host);
    assert_eq!(
        again.len(),
        1,
        "exactly one service after the restart: {again:?}"
    );
    assert_ne!(again, services, "a new one");
    let after = live_up_tokens(&up);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_eq!(after[0]["id"], tokens[0]["id"], "the CLI kept its token");
    // And a clean stop then start: still one service, still one token.
    let status = up.stop();
    assert!(status.success(), "{}", up.log());
    assert!(warren_agent::runtime::engine::services_on(&host).is_empty());
    let home = up.crash();
    let up = Up::start_in(home);
    // (`crash` on a stopped `warren up` only hands the home back.)
    assert_eq!(warren_agent::runtime::engine::services_on(&host).len(), 1);
    assert_eq!(live_up_tokens(&up).len(), 1);
}
