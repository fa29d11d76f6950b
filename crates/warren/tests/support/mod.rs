//! Shared pieces of the end-to-end tests (and the lifecycle benchmark): Podman witnesses,
//! polling with deadlines, and guards that kill every process and remove every container,
//! volume and network a run created, even when it panics.
#![allow(dead_code)]

use serde_json::Value;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const IMAGE: &str = "localhost/warren-test:latest";

/// The `warren` binary under test.
pub fn warren_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warren"))
}

/// True when Podman works; panics under `WARREN_REQUIRE_ENGINE=1` when it does not.
pub fn podman_available() -> bool {
    let ok = Command::new("podman")
        .arg("version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_ENGINE=1 but podman does not work here (run .ci/setup-podman.sh)");
    }
    eprintln!("skipping: podman not found (install it with .ci/setup-podman.sh)");
    false
}

/// Builds the test image with `.ci/setup-podman.sh image` when it is missing.
pub fn ensure_image() {
    let exists = Command::new("podman")
        .args(["image", "exists", IMAGE])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !exists {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/setup-podman.sh");
        let status = Command::new("bash")
            .arg(script)
            .arg("image")
            .status()
            .expect("running .ci/setup-podman.sh image");
        assert!(status.success(), "building {IMAGE} failed");
    }
}

pub fn podman(args: &[&str]) -> String {
    let out = Command::new("podman").args(args).output().expect("podman");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Ids of every container (running or not) of the workspace.
pub fn containers(ws: &str) -> Vec<String> {
    podman(&[
        "ps",
        "-a",
        "--filter",
        &format!("name=^warren-{ws}\\."),
        "--format",
        "{{.ID}}",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

pub fn volumes(ws: &str) -> Vec<String> {
    podman(&["volume", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|v| v.starts_with(&format!("warren-{ws}-")))
        .map(str::to_owned)
        .collect()
}

pub fn networks(ws: &str) -> Vec<String> {
    podman(&["network", "ls", "--format", "{{.Name}}"])
        .lines()
        .filter(|n| *n == format!("warren-{ws}"))
        .map(str::to_owned)
        .collect()
}

/// `podman inspect` of one container; `Null` when it is gone.
pub fn inspect(id: &str) -> Value {
    let text = podman(&["inspect", id]);
    serde_json::from_str::<Value>(&text)
        .map(|v| v[0].clone())
        .unwrap_or(Value::Null)
}

/// The running containers of the workspace, inspected.
pub fn running(ws: &str) -> Vec<Value> {
    containers(ws)
        .iter()
        .map(|id| inspect(id))
        .filter(|c| c["State"]["Running"] == Value::Bool(true))
        .collect()
}

/// Removes every container, volume and network of a workspace.
pub fn remove_workspace_objects(ws: &str) {
    for id in containers(ws) {
        let _ = podman(&["rm", "-f", "-t", "0", &id]);
    }
    for v in volumes(ws) {
        let _ = podman(&["volume", "rm", "-f", &v]);
    }
    let _ = podman(&["network", "rm", "-f", &format!("warren-{ws}")]);
}

/// Polls `probe` until it returns `Some`, panicking with `what` and `context()` at the deadline.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl FnMut() -> Option<T>,
    context: impl Fn() -> String,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free loopback port: bound, read, released (the caller binds it again right away).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding a free port")
}

/// One `warren` service process with its output in a log file; SIGKILLed on drop.
pub struct Proc {
    pub name: String,
    child: Option<Child>,
    pub log: PathBuf,
}

impl Proc {
    /// Spawns `warren <args>` with `envs`, output appended to `log`.
    pub fn spawn(name: &str, args: &[String], envs: &[(&str, String)], log: &Path) -> Proc {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut cmd = Command::new(warren_bin());
        cmd.args(args)
            .env("WARREN_LOG", "info")
            .env_remove("WARREN_URL")
            .env_remove("WARREN_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone().expect("log file")))
            .stderr(Stdio::from(file));
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn warren {name}: {e}"));
        Proc {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `Some(status)` once the process has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL and reap: the crash the fault tests inject.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL after `grace`; returns the exit status.
    pub fn terminate(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + grace;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Removes the Podman objects of every workspace named in it when dropped.
#[derive(Default)]
pub struct Workspaces(pub Vec<String>);

impl Drop for Workspaces {
    fn drop(&mut self) {
        for ws in &self.0 {
            remove_workspace_objects(ws);
        }
    }
}

/// Runs the `warren` CLI with its credentials under `home`.
pub fn cli(home: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(warren_bin());
    cmd.args(args)
        .env("WARREN_HOME", home)
        .env_remove("WARREN_URL")
        .env_remove("WARREN_TOKEN")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run the warren CLI");
    if let Some(text) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(text.as_bytes()).expect("write stdin");
    }
    child.wait_with_output().expect("run the warren CLI")
}

/// The workspace as `warren ws show -o json` prints it; `None` when the CLI fails (e.g. the
/// server is down).
pub fn show(home: &Path, ws: &str) -> Option<Value> {
    let out = cli(home, &["ws", "show", ws, "-o", "json"], None);
    if !out.status.success() {
        return None;
    }
    serde_json::from_slice(&out.stdout).ok()
}

/// Writes a devfile into `dir`.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write file");
    path
}

/// The devfile of a one-container workspace on the test image.
pub const DEVFILE: &str = r#"
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
