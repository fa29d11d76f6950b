//! Workspaces on the engine runtime are isolated, end to end on Podman: a workspace cannot
//! reach another workspace's port, nor a network its agent configuration blocks, and can
//! reach one it allows — the rendered NetworkPolicy enforced as the agent's nftables rules.
//! Where the agent cannot enforce it (not root, rootless engine), the warning shows on the
//! agent and the workspace instead.
//!
//! Skips with a notice when no Podman exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::support;

use serde_json::Value;
use std::net::TcpListener;
use std::process::Command;
use support::{ensure_image, host_address, podman_available, running, unique_name, Up};

const SERVER: &str = r#"schemaVersion: 2.2.0
metadata:
  name: server
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      command: ["httpd", "-f", "-p", "8080"]
      memoryLimit: 128Mi
      mountSources: true
      endpoints:
        - name: web
          targetPort: 8080
"#;

fn container_of(ws: &str) -> Value {
    let live = running(ws);
    assert_eq!(live.len(), 1, "{live:#?}");
    live[0].clone()
}

fn ip_of(c: &Value) -> String {
    c["NetworkSettings"]["Networks"]
        .as_object()
        .and_then(|n| n.values().next())
        .and_then(|n| n["IPAddress"].as_str())
        .expect("container address")
        .to_owned()
}

/// Whether a TCP connection from the container to `ip:port` succeeds (refused at once by
/// the firewall's reject, or by a closed port; bounded by nc's timeout otherwise).
fn connects(c: &Value, ip: &str, port: u16) -> bool {
    let id = c["Id"].as_str().expect("id");
    Command::new("podman")
        .args(["exec", id, "nc", "-w", "5", ip, &port.to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("podman exec")
        .status
        .success()
}

/// Replaces the agent's network policy; the agent re-renders and restarts its workspaces.
fn set_egress(up: &Up, egress: Value) {
    let agent: Value =
        serde_json::from_str(&up.cli_ok(&["agent", "show", "local", "-o", "json"])).unwrap();
    let mut config = agent["config"].clone();
    config["network_policy"] = serde_json::json!({"enabled": true, "egress": egress});
    let path = up.home.path().join("agent-config.json");
    std::fs::write(&path, config.to_string()).unwrap();
    up.cli_ok(&[
        "agent",
        "update",
        "local",
        "--config",
        path.to_str().unwrap(),
    ]);
}

/// A port on every address of the host that accepts connections and drops them.
fn host_listener() -> u16 {
    let listener = TcpListener::bind("0.0.0.0:0").expect("host listener");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    port
}

/// Why the agent cannot isolate workspaces here, if it cannot; fails where it must be able
/// to (root, under `WARREN_REQUIRE_ENGINE=1`).
fn isolation_warning(up: &Up) -> Option<String> {
    let agent: Value =
        serde_json::from_str(&up.cli_ok(&["agent", "show", "local", "-o", "json"])).unwrap();
    let w = agent["isolation_warning"].as_str()?.to_owned();
    let required = std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1") && nix_is_root();
    assert!(!required, "running as root, yet: {w}");
    Some(w)
}

#[test]
fn a_workspace_reaches_neither_a_neighbour_nor_a_blocked_network() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let host = host_address();
    let host_port = host_listener();

    let mut up = Up::start();
    if let Some(w) = isolation_warning(&up) {
        // Not enforceable here: it must say so, on the agent and on every workspace.
        let (ws, created) = up.create_workspace("iso", SERVER);
        assert_eq!(
            created["isolation_warning"].as_str(),
            Some(w.as_str()),
            "{created}"
        );
        let shown = up.cli_ok(&["ws", "show", &ws]);
        assert!(shown.contains("not isolated"), "{shown}");
        eprintln!("skipping the isolation checks: {w}");
        return;
    }

    // Block the host explicitly (the default blocks only the private ranges).
    set_egress(
        &up,
        serde_json::json!([{"allow": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", format!("{host}/32")]}]),
    );
    let (a, _) = up.create_workspace("iso-a", SERVER);
    let b = unique_name("iso-b");
    let devfile = up.home.path().join("b.devfile.yaml");
    std::fs::write(&devfile, SERVER).unwrap();
    up.cli_ok(&[
        "ws",
        "create",
        "--name",
        &b,
        "--devfile",
        devfile.to_str().unwrap(),
        "--wait",
        "--timeout",
        "3m",
    ]);
    let guard_b = BGuard(b.clone());
    let ca = container_of(&a);
    let cb = container_of(&b);
    let ip_b = ip_of(&cb);
    assert!(connects(&cb, "127.0.0.1", 8080), "b serves on 8080");
    assert!(connects(&ca, "127.0.0.1", 8080), "a serves on 8080");
    assert!(!connects(&ca, &ip_b, 8080), "a reached b's port at {ip_b}");
    assert!(!connects(&cb, &ip_of(&ca), 8080), "b reached a's port");
    // Nothing else the engine runs (an image build's `RUN` step, any other container on its
    // default network) opens a connection into a workspace either.
    let outside = Command::new("podman")
        .args(["run", "--rm", "localhost/warren-test:latest"])
        .args(["nc", "-w", "5", &ip_b, "8080"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("podman run");
    assert!(
        !outside.status.success(),
        "a container outside Warren reached b at {ip_b}:8080"
    );
    assert!(
        !connects(&ca, &host, host_port),
        "a reached the blocked {host}"
    );

    // Allow the host: now it is reachable, the neighbour still is not.
    set_egress(&up, serde_json::json!([{"allow": format!("{host}/32")}]));
    up.cli_ok(&["ws", "restart", &a, "--wait", "--timeout", "2m"]);
    let ca = container_of(&a);
    assert!(
        connects(&ca, &host, host_port),
        "a cannot reach the allowed {host}"
    );
    let cb = container_of(&b);
    assert!(
        !connects(&ca, &ip_of(&cb), 8080),
        "a reached b after the change"
    );

    up.cli_ok(&["ws", "rm", &b, "--wait", "--timeout", "2m"]);
    drop(guard_b);
    up.cli_ok(&["ws", "rm", &a, "--wait", "--timeout", "2m"]);
    assert!(up.stop().success(), "{}", up.log());
}

/// The address the container's network routes through: the host, as the bridge sees it.
fn gateway_of(c: &Value) -> String {
    c["NetworkSettings"]["Networks"]
        .as_object()
        .and_then(|n| n.values().next())
        .and_then(|n| n["Gateway"].as_str())
        .expect("gateway address")
        .to_owned()
}

/// Attack: an admin opens egress to the whole internet (`0.0.0.0/0`, no exceptions), and a
/// workspace user then dials the machine the engine runs on — its own address and its
/// network's gateway — where the relay's internal port, metrics, sshd or an engine's TCP API
/// listen, and the cloud's metadata service. The host answers only DNS and what the policy
/// names as a single address; the metadata range stays excepted from the broad block.
#[test]
fn a_workspace_open_to_the_internet_reaches_neither_the_host_nor_metadata() {
    if !podman_available() {
        return;
    }
    ensure_image();
    let host = host_address();
    let host_port = host_listener();
    let mut up = Up::start();
    if let Some(w) = isolation_warning(&up) {
        eprintln!("skipping the host checks: {w}");
        return;
    }
    set_egress(&up, serde_json::json!([{"allow": "0.0.0.0/0"}]));
    let (a, _) = up.create_workspace("open", SERVER);
    let ca = container_of(&a);
    let gateway = gateway_of(&ca);
    assert!(
        !connects(&ca, &host, host_port),
        "the workspace reached the host at {host}:{host_port}"
    );
    assert!(
        !connects(&ca, &gateway, host_port),
        "the workspace reached the host through its gateway {gateway}:{host_port}"
    );
    let subnet_chain = nft_chain_for(&ip_of(&ca));
    assert!(
        subnet_chain.contains("169.254.0.0/16") && subnet_chain.contains("100.64.0.0/10"),
        "the metadata and CGNAT ranges are excepted from 0.0.0.0/0: {subnet_chain}"
    );

    // Named as one address, the host is reachable: the admin's explicit choice.
    set_egress(
        &up,
        serde_json::json!([{"allow": "0.0.0.0/0"}, {"allow": format!("{host}/32")}]),
    );
    up.cli_ok(&["ws", "restart", &a, "--wait", "--timeout", "2m"]);
    let ca = container_of(&a);
    assert!(
        connects(&ca, &host, host_port),
        "a cannot reach the host it was allowed"
    );
    up.cli_ok(&["ws", "rm", &a, "--wait", "--timeout", "2m"]);
    assert!(up.stop().success(), "{}", up.log());
}

/// The text of the forward chain the agent's nftables table runs for traffic from `ip`.
fn nft_chain_for(ip: &str) -> String {
    let ip: std::net::IpAddr = ip.parse().expect("container address");
    let out = Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .expect("nft list ruleset");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // Each workspace subnet has its chain, named after the subnet: `w_10_89_3_0_24`.
    for (at, _) in text.match_indices("chain w_") {
        let rest = &text[at + "chain w_".len()..];
        let Some(key) = rest.split_whitespace().next() else {
            continue;
        };
        let parts: Vec<&str> = key.split('_').collect();
        if parts.len() != 5 {
            continue;
        }
        let net = format!("{}/{}", parts[..4].join("."), parts[4]);
        if net
            .parse::<ipnet::IpNet>()
            .is_ok_and(|net| net.contains(&ip))
        {
            let body = &text[at..];
            return body[..body.find('}').unwrap_or(body.len())].to_owned();
        }
    }
    panic!("no nftables chain for {ip}:\n{text}")
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Removes the second workspace's containers, volumes and network even when the test fails.
struct BGuard(String);

impl Drop for BGuard {
    fn drop(&mut self) {
        support::remove_workspace_objects(&self.0);
    }
}
