//! Shared pieces of the end-to-end tests (and the lifecycle benchmark): Podman witnesses,
//! polling with deadlines, and guards that kill every process and remove every container,
//! volume and network a run created, even when it panics.
#![allow(dead_code)]

use serde_json::Value;
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use warren_testkit::process::output_ok;

pub const IMAGE: &str = "localhost/warren-test:latest";

/// A glibc image (Debian minbase with git, `.ci/setup-podman.sh image-debian`), where the
/// injected editor runs.
pub const DEBIAN_IMAGE: &str = "localhost/warren-test-debian:latest";
/// The tools image `.ci/setup-editor.sh` builds (the editor's default).
pub const TOOLS_IMAGE: &str = "localhost/warren-tools:code-server-4.100.3";

/// A workspace on the Debian image with the sources mounted and room for the editor.
pub const DEBIAN_DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: editor-e2e
components:
  - name: dev
    container:
      image: localhost/warren-test-debian:latest
      memoryLimit: 1536Mi
      mountSources: true
"#;

/// A REST call against a Warren API at `base`; asserts success and returns the JSON answer.
pub async fn api(
    http: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> Value {
    let mut req = http.request(method.clone(), format!("{base}/api/v1{path}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("API call");
    let status = resp.status();
    let text = resp.text().await.unwrap_or_default();
    assert!(status.is_success(), "{method} {path}: {status} {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// Signs `admin` in at the API at `base`; its session token.
pub async fn admin_session(http: &reqwest::Client, base: &str, password: &str) -> String {
    api(
        http,
        base,
        None,
        reqwest::Method::POST,
        "/session",
        Some(serde_json::json!({"username": "admin", "password": password})),
    )
    .await["secret"]
        .as_str()
        .expect("a session token")
        .to_owned()
}

/// Creates user `name` (password `<name>-password-123`) as the admin and signs in; returns
/// the password and a session token.
pub async fn create_user(
    http: &reqwest::Client,
    base: &str,
    admin: &str,
    name: &str,
) -> (String, String) {
    let password = format!("{name}-password-123");
    api(
        http,
        base,
        Some(admin),
        reqwest::Method::POST,
        "/users",
        Some(serde_json::json!({"username": name, "password": password})),
    )
    .await;
    let session = api(
        http,
        base,
        None,
        reqwest::Method::POST,
        "/session",
        Some(serde_json::json!({"username": name, "password": password})),
    )
    .await;
    let token = session["secret"].as_str().expect("token").to_owned();
    (password, token)
}

/// Whether headless Chromium is here; a missing one fails the test when the tools are
/// required (CI), and skips it with a notice elsewhere.
pub fn chromium_available() -> bool {
    if warren_testkit::browser::chromium_path().is_some() {
        return true;
    }
    if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some()
        || std::env::var("WARREN_REQUIRE_ENGINE").as_deref() == Ok("1")
    {
        panic!("the tools are required but Chromium is missing; run .ci/setup-tools.sh");
    }
    eprintln!("skipping: Chromium is not installed (.ci/setup-tools.sh)");
    false
}

/// Fills in and submits the server's login form once the tab shows it.
pub async fn sign_in(tab: &mut warren_testkit::browser::Tab, username: &str, password: &str) {
    tab.wait_until("document.getElementById('password') !== null", 60)
        .await
        .expect("the server's login page");
    tab.eval(&format!(
        "document.getElementById('username').value = {username:?}; \
         document.getElementById('password').value = {password:?}; \
         document.getElementById('password').form.submit(); true"
    ))
    .await
    .expect("submit the login form");
}

/// Opens `page` (signed in already, or signing in as `username`) and reloads it until its
/// text includes `text` (the workspace's server may still be starting); `log` says why not.
pub async fn page_shows(
    tab: &mut warren_testkit::browser::Tab,
    page: &str,
    sign_in_as: Option<(&str, &str)>,
    text: &str,
    log: impl Fn() -> String,
) {
    tab.goto(page).await.expect("open the workspace URL");
    if let Some((username, password)) = sign_in_as {
        sign_in(tab, username, password).await;
    }
    let condition = format!("document.body && document.body.innerText.includes({text:?})");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while tab.wait_until(&condition, 5).await.is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "no page from the workspace:\n{}",
            log()
        );
        tab.goto(page).await.expect("reload");
    }
}

/// Types `exit {code}` into the open web terminal and checks that the page reports the
/// shell's exit with that code.
pub async fn terminal_exits(tab: &mut warren_testkit::browser::Tab, code: i32) {
    tab.eval(&format!(
        "window.warrenTerminal.input('exit {code}\\r'); true"
    ))
    .await
    .expect("type");
    tab.wait_until("document.body.dataset.state === 'exited'", 60)
        .await
        .expect("exit");
    assert_eq!(
        tab.eval("document.body.dataset.exitCode")
            .await
            .expect("code"),
        code.to_string()
    );
}

/// Runs `command` with `input` on its stdin (then closed) and returns its output.
pub fn output_with_stdin(mut command: Command, input: &[u8]) -> Output {
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().expect("stdin").write_all(input)?;
            c.wait_with_output()
        })
        .expect("run the command")
}

/// Opens the web terminal at `url`, types `input` into it (a real shell in the workspace)
/// and waits until its screen shows `expect` (a JavaScript condition on `screen`, the text of
/// every line).
pub async fn terminal_shows(
    tab: &mut warren_testkit::browser::Tab,
    url: &str,
    input: &str,
    expect: &str,
) {
    tab.goto(url).await.expect("open the terminal");
    tab.wait_until(
        "document.body && document.body.dataset.state === 'connected'",
        60,
    )
    .await
    .expect("terminal connected");
    tab.eval(&format!("window.warrenTerminal.input({input:?}); true"))
        .await
        .expect("type");
    let screen = "(() => { const b = window.warrenTerminal.buffer.active; let s = ''; \
                  for (let i = 0; i < b.length; i++) { s += b.getLine(i).translateToString(true) + '\\n'; } \
                  return s; })()";
    tab.wait_until(&format!("((screen) => {expect})({screen})"), 60)
        .await
        .expect("the command's output on a real terminal");
}

/// A workspace whose main container serves `served-by-workspace` with busybox httpd on its
/// declared endpoint 8080.
pub const WEB_DEVFILE: &str = r#"
schemaVersion: 2.2.0
metadata:
  name: e2e-web
components:
  - name: dev
    container:
      image: localhost/warren-test:latest
      memoryLimit: 256Mi
      cpuLimit: 500m
      command: ["sh", "-c", "mkdir -p /tmp/www && echo served-by-workspace > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
      endpoints:
        - name: web
          targetPort: 8080
          exposure: public
"#;

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
/// Whether Podman holds `image`.
pub fn image_exists(image: &str) -> bool {
    Command::new("podman")
        .args(["image", "exists", image])
        .status()
        .is_ok_and(|s| s.success())
}

pub fn ensure_image() {
    if !image_exists(IMAGE) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.ci/setup-podman.sh");
        let status = Command::new("bash")
            .arg(script)
            .arg("image")
            .status()
            .expect("running .ci/setup-podman.sh image");
        assert!(status.success(), "building {IMAGE} failed");
    }
}

/// A Git server (http-backend, basic auth as `user`/`password`; empty: none) that
/// workspaces reach: it listens on every address, for `host_address()`.
pub fn git_server_for_workspaces(
    rt: &tokio::runtime::Runtime,
    user: &str,
    password: &str,
) -> warren_testkit::git_http::GitHttpServer {
    rt.block_on(warren_testkit::git_http::GitHttpServer::start_on(
        "0.0.0.0:0".parse().unwrap(),
        user,
        password,
    ))
    .expect("git server")
}

/// Runs a shell command in a container as its user (`podman exec`).
pub fn podman_sh(container: &str, script: &str) -> Output {
    Command::new("podman")
        .args(["exec", container, "sh", "-c", script])
        .output()
        .expect("podman exec")
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

/// Removes every container, volume, network and built image of a workspace.
pub fn remove_workspace_objects(ws: &str) {
    for id in containers(ws) {
        let _ = podman(&["rm", "-f", "-t", "0", &id]);
    }
    for v in volumes(ws) {
        let _ = podman(&["volume", "rm", "-f", &v]);
    }
    let _ = podman(&["network", "rm", "-f", &format!("warren-{ws}")]);
    let built = podman(&[
        "images",
        "-q",
        "--filter",
        &format!("label=warren.dev/built-for={ws}"),
    ]);
    for id in built.split_whitespace() {
        let _ = podman(&["rmi", "-f", id]);
    }
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

/// A free loopback port: bound, read, released (the caller binds it again right away) —
/// never one this helper handed out before, since the kernel may give two binds in a row the
/// same free port, and two services told one port fail.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("binding a free port");
        if GIVEN.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return port;
        }
    }
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
        Proc::spawn_bin(&warren_bin(), name, args, envs, log)
    }

    /// As [`Proc::spawn`] with another `warren` binary (an earlier release, say).
    pub fn spawn_bin(
        bin: &Path,
        name: &str,
        args: &[String],
        envs: &[(&str, String)],
        log: &Path,
    ) -> Proc {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        let mut cmd = Command::new(bin);
        // Its own process group, so the `podman system service` an agent starts can be found
        // and stopped with it (a SIGKILLed agent cannot stop it itself).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.args(args)
            .env("WARREN_LOG", "info")
            .env("WARREN_OUTBOUND_ALLOW", outbound_allow())
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

    /// Waits (two minutes at most) for the address a service writes to its `--ready-file`;
    /// fails with the log if the process exits first.
    pub fn wait_ready(&mut self, ready: &Path) -> String {
        let log = self.log.clone();
        let name = self.name.clone();
        let addr = wait_for(
            &format!("{name} to be ready"),
            Duration::from_secs(120),
            || {
                assert!(
                    self.exited().is_none(),
                    "{name} exited:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
                std::fs::read_to_string(ready)
                    .ok()
                    .filter(|s| !s.trim().is_empty())
            },
            || std::fs::read_to_string(&log).unwrap_or_default(),
        );
        addr.trim().to_owned()
    }

    /// The first admin's password, as a server prints it once on the start that made it.
    pub fn bootstrap_password(&self) -> String {
        self.log_text()
            .lines()
            .find_map(|l| l.trim().strip_prefix("password: ").map(str::to_owned))
            .unwrap_or_else(|| panic!("{} prints the admin's password", self.name))
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

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL and reap: the crash the fault tests inject. A Podman service the process
    /// started is stopped too; containers keep running, as after a real crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            kill_podman_services(child.id());
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
                kill_podman_services(child.id());
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let status = child.wait().ok();
                kill_podman_services(child.id());
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Stops the `podman system service` processes left in a test process's group.
pub fn kill_podman_services(group: u32) {
    let _ = Command::new("pkill")
        .args([
            "-KILL",
            "-g",
            &group.to_string(),
            "-f",
            "podman system service",
        ])
        .status();
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

/// Generous: the machine running the tests may be loaded.
pub const CONVERGE: Duration = Duration::from_secs(240);
const RELAY_SECRET: &str = "faults-e2e-relay-secret-0123456789abcdef";

/// The three services on fixed loopback ports chosen at start, so a restarted process comes
/// back where the others expect it. Every process is SIGKILLed on drop.
pub struct Stack {
    pub dir: tempfile::TempDir,
    /// Whether the server signals the relay on desired-state changes (off: timers only).
    signal: bool,
    pub server_port: u16,
    agent_port: u16,
    internal_port: u16,
    /// The agent's `--metrics-listen` port.
    pub metrics_port: u16,
    agent_token: String,
    /// Extra environment of the server and the relay (a database, a Redis).
    server_env: Vec<(&'static str, String)>,
    relay_env: Vec<(&'static str, String)>,
    pub server: Option<Proc>,
    pub relay: Option<Proc>,
    pub agent: Option<Proc>,
}

impl Stack {
    /// The CLI's personal access token (for calling the REST API directly).
    pub fn token(&self) -> String {
        let text = std::fs::read_to_string(self.cli_home().join("credentials.toml"))
            .expect("the CLI's credentials");
        let v: toml::Value = toml::from_str(&text).expect("credentials TOML");
        v["token"].as_str().expect("a token").to_owned()
    }

    pub fn server_home(&self) -> PathBuf {
        self.dir.path().join("server")
    }
    /// Where the CLI keeps its credentials.
    pub fn cli_home(&self) -> PathBuf {
        self.dir.path().join("cli")
    }
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.server_port)
    }

    pub fn logs(&self) -> String {
        let read = |n: &str| std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default();
        format!(
            "--- server ---\n{}\n--- relay ---\n{}\n--- agent ---\n{}",
            read("server.log"),
            read("relay.log"),
            read("agent.log")
        )
    }

    /// Starts the server and waits for its ready file; retried while the port is still
    /// held by the process just killed.
    pub fn start_server(&mut self) {
        let ready = self.dir.path().join("server.ready");
        let _ = std::fs::remove_file(&ready);
        let mut args: Vec<String> = vec![
            "server".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.server_port),
            "--home".into(),
            self.server_home().display().to_string(),
            "--ready-file".into(),
            ready.display().to_string(),
            "--relay-secret".into(),
            RELAY_SECRET.into(),
        ];
        if self.signal {
            args.push("--relay-url".into());
            args.push(format!("http://127.0.0.1:{}", self.internal_port));
        }
        let log = self.dir.path().join("server.log");
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut proc = Proc::spawn("server", &args, &self.server_env, &log);
        while !std::fs::read_to_string(&ready).is_ok_and(|s| !s.trim().is_empty()) {
            if proc.exited().is_some() {
                assert!(Instant::now() < deadline, "server exits:\n{}", self.logs());
                proc = Proc::spawn("server", &args, &self.server_env, &log);
            }
            assert!(
                Instant::now() < deadline,
                "server not ready:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.server = Some(proc);
    }

    /// Starts the relay and waits until both its listeners accept connections.
    pub fn start_relay(&mut self) {
        let args: Vec<String> = vec![
            "relay".into(),
            "--agent-listen".into(),
            format!("127.0.0.1:{}", self.agent_port),
            "--internal-listen".into(),
            format!("127.0.0.1:{}", self.internal_port),
            "--server-url".into(),
            self.url(),
        ];
        let mut envs = vec![("WARREN_RELAY_SHARED_SECRET", RELAY_SECRET.to_owned())];
        envs.extend(self.relay_env.iter().cloned());
        let log = self.dir.path().join("relay.log");
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut proc = Proc::spawn("relay", &args, &envs, &log);
        let accepts = |port: u16| TcpStream::connect(("127.0.0.1", port)).is_ok();
        loop {
            if proc.exited().is_some() {
                assert!(Instant::now() < deadline, "relay exits:\n{}", self.logs());
                proc = Proc::spawn("relay", &args, &envs, &log);
            } else if accepts(self.agent_port) && accepts(self.internal_port) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "relay not listening:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        self.relay = Some(proc);
    }

    /// The token the agent starts with from now on (after `warren agent reset-token`).
    pub fn set_agent_token(&mut self, token: &str) {
        self.agent_token = token.to_owned();
    }

    /// Starts the agent; it reconnects to the relay by itself, so there is nothing to wait for.
    pub fn start_agent(&mut self) {
        let args: Vec<String> = vec![
            "agent".into(),
            "--relay-url".into(),
            format!("http://127.0.0.1:{}", self.agent_port),
            "--metrics-listen".into(),
            format!("127.0.0.1:{}", self.metrics_port),
            "--runtime".into(),
            "engine".into(),
            "--state-dir".into(),
            self.dir.path().join("agent-state").display().to_string(),
        ];
        let envs = [("WARREN_AGENT_TOKEN", self.agent_token.clone())];
        self.agent = Some(Proc::spawn(
            "agent",
            &args,
            &envs,
            &self.dir.path().join("agent.log"),
        ));
    }

    /// Starts the server (signalling the relay when `signal`), signs the CLI in as the bootstrap admin, registers an agent, then
    /// starts the relay and the agent.
    pub fn start(signal: bool) -> Stack {
        let mut stack = Stack::control_plane(signal);
        stack.start_agent();
        stack
    }

    /// The relay's URL for agents.
    pub fn agent_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.agent_port)
    }

    /// As [`Stack::start`] without starting the agent (its token is registered).
    pub fn control_plane(signal: bool) -> Stack {
        Stack::control_plane_with(signal, vec![], vec![])
    }

    /// As [`Stack::control_plane`], the server and the relay started with extra environment
    /// (`WARREN_DATABASE_URL`, `WARREN_REDIS_URL`, …).
    pub fn control_plane_with(
        signal: bool,
        server_env: Vec<(&'static str, String)>,
        relay_env: Vec<(&'static str, String)>,
    ) -> Stack {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut stack = Stack {
            dir,
            signal,
            server_env,
            relay_env,
            server_port: free_port(),
            agent_port: free_port(),
            internal_port: free_port(),
            metrics_port: free_port(),
            agent_token: String::new(),
            server: None,
            relay: None,
            agent: None,
        };
        stack.start_server();
        let log = stack.logs();
        let password = log
            .lines()
            .find_map(|l| l.trim().strip_prefix("password: "))
            .unwrap_or_else(|| panic!("the bootstrap admin's password is printed:\n{log}"))
            .to_owned();
        let cli_home = stack.cli_home();
        let out = cli(
            &cli_home,
            &[
                "login",
                "--url",
                &stack.url(),
                "-u",
                "admin",
                "--password-stdin",
            ],
            Some(&format!("{password}\n")),
        );
        assert!(
            out.status.success(),
            "warren login: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let created: Value =
            serde_json::from_str(&stack.cli_ok(&["agent", "create", "faulty", "-o", "json"]))
                .expect("agent create JSON");
        stack.agent_token = created["token"]
            .as_str()
            .expect("the new agent's token")
            .to_owned();
        stack.start_relay();
        stack
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = cli(&self.cli_home(), args, None);
        assert!(
            out.status.success(),
            "warren {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.logs()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the server reports `actual` for the workspace and `check` holds on the engine.
    pub fn converge(&self, ws: &str, actual: &str, check: impl Fn() -> bool) -> Value {
        wait_for(
            &format!("workspace {ws} to be {actual}"),
            CONVERGE,
            || show(&self.cli_home(), ws).filter(|v| v["actual_state"] == actual && check()),
            || format!("{:#?}\n{}", show(&self.cli_home(), ws), self.logs()),
        )
    }

    pub fn kill(slot: &mut Option<Proc>) {
        if let Some(mut p) = slot.take() {
            p.kill();
        }
    }
}

/// `warren up` in a temp home; stopped (SIGTERM, then SIGKILL) on drop, and every container,
/// volume and network of its workspace removed, even when the test fails.
pub struct Up {
    child: Option<Child>,
    pub home: tempfile::TempDir,
    pub workspace: Option<String>,
}

impl Up {
    pub fn start() -> Up {
        Up::start_in(tempfile::tempdir().expect("temp home"))
    }

    /// `warren up` on an existing home (a restart after `crash` or `stop`).
    pub fn start_in(home: tempfile::TempDir) -> Up {
        Up::start_with(home, &[])
    }

    /// `warren up` with extra environment variables (settings without a test default).
    pub fn start_with(home: tempfile::TempDir, env: &[(&str, &str)]) -> Up {
        let ready = home.path().join("ready");
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(home.path().join("up.log"))
            .expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .arg("up")
            .arg("--home")
            .arg(home.path())
            .args(["--listen", "127.0.0.1:0", "--ready-file"])
            .arg(&ready)
            .args([
                "--proxy-listen",
                "127.0.0.1:0",
                "--ssh-listen",
                "127.0.0.1:0",
                // Tests build the tools image with `.ci/setup-editor.sh`, once.
                "--no-editor-build",
            ])
            .env(
                "WARREN_LOG",
                std::env::var("WARREN_TEST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("WARREN_OUTBOUND_ALLOW", outbound_allow())
            .envs(env.iter().copied())
            .process_group(0)
            .stdout(Stdio::from(log.try_clone().expect("log file")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn warren up");
        let mut up = Up {
            child: Some(child),
            home,
            workspace: None,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while !std::fs::read_to_string(&ready).is_ok_and(|s| !s.trim().is_empty()) {
            if let Some(Ok(Some(status))) = up.child.as_mut().map(|c| c.try_wait()) {
                panic!("warren up exited early ({status}):\n{}", up.log());
            }
            assert!(
                Instant::now() < deadline,
                "warren up not ready:\n{}",
                up.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        up
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.home.path().join("up.log")).unwrap_or_default()
    }

    /// The process id of `warren up`, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The proxy's HTTP and SSH ports, as the last start printed them (a restarted `warren
    /// up` appends to the same log).
    pub fn proxy_ports(&self) -> (u16, u16) {
        let log = self.log();
        let after = |marker: &str, end: char| {
            log.rsplit(marker)
                .next()
                .filter(|_| log.contains(marker))
                .and_then(|r| r.split(end).next())
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("no {marker:?} in:\n{log}"))
        };
        (
            after(
                "workspace hosts: http://{port}-{workspace}.ws.localhost:",
                '/',
            ),
            after("SSH:             ssh -p ", ' '),
        )
    }

    /// The relay's listener for agents and connectors, as `warren up` printed it.
    pub fn relay_url(&self) -> String {
        let log = self.log();
        log.rsplit("warren connect --relay-url ")
            .next()
            .filter(|_| log.contains("warren connect --relay-url "))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no relay URL in:\n{log}"))
            .to_owned()
    }

    /// The API's base URL (`http://addr`), from the ready file.
    pub fn api_base(&self) -> String {
        format!(
            "http://{}",
            std::fs::read_to_string(self.home.path().join("ready"))
                .expect("ready file")
                .trim()
        )
    }

    /// The web UI's URL and the admin's password, as `warren up` printed them for a new user.
    pub fn web_ui_and_password(&self) -> (String, String) {
        let log = self.log();
        let url = log
            .lines()
            .find_map(|l| l.trim().strip_prefix("web UI:"))
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no web UI line in:\n{log}"))
            .to_owned();
        let password = log
            .lines()
            .find(|l| l.starts_with("Created the admin account"))
            .and_then(|l| l.split("with password \"").nth(1))
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("no admin password in:\n{log}"))
            .to_owned();
        (url, password)
    }

    /// The admin's token, as `warren up` signed the CLI in.
    pub fn admin_token(&self) -> String {
        warren_cli::credentials::load(&self.home.path().join(warren_cli::credentials::FILE_NAME))
            .expect("CLI credentials")
            .expect("credentials written by warren up")
            .token
    }

    /// Lets workspaces reach `ip` besides what the default policy allows (the agent's
    /// firewall blocks private ranges, where a test's host may be).
    pub fn allow_egress_to(&self, ip: &str) {
        self.update_agent_config(|config| {
            config["network_policy"]["egress"]
                .as_array_mut()
                .expect("egress rules")
                .push(serde_json::json!({"allow": format!("{ip}/32")}));
        });
    }

    /// Changes the `local` agent's configuration as `change` says (`warren agent update`).
    pub fn update_agent_config(&self, change: impl FnOnce(&mut Value)) {
        let agent: Value =
            serde_json::from_str(&self.cli_ok(&["agent", "show", "local", "-o", "json"]))
                .expect("agent JSON");
        let mut config = agent["config"].clone();
        change(&mut config);
        let path = self.home.path().join("agent-config.json");
        std::fs::write(&path, config.to_string()).expect("write the agent config");
        self.cli_ok(&[
            "agent",
            "update",
            "local",
            "--config",
            path.to_str().expect("utf-8 path"),
        ]);
    }

    /// Runs the CLI as the user `warren up` signed in.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(args)
            .env("WARREN_HOME", self.home.path())
            .env_remove("WARREN_URL")
            .env_remove("WARREN_TOKEN")
            .output()
            .expect("run the warren CLI")
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "warren {args:?} failed: {}\n--- warren up log ---\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Creates a workspace named `{prefix}-{random}` from `devfile` with the CLI and waits
    /// until it runs; the guard removes it even when the test fails. Returns the name and
    /// `ws create -o json`'s answer.
    pub fn create_workspace(&mut self, prefix: &str, devfile: &str) -> (String, Value) {
        let name = unique_name(prefix);
        // Named before the create so cleanup works even when the create itself fails.
        self.workspace = Some(name.clone());
        let path = self.home.path().join(format!("{name}.devfile.yaml"));
        std::fs::write(&path, devfile).expect("write devfile");
        let created = serde_json::from_str(&self.cli_ok(&[
            "ws",
            "create",
            "--name",
            &name,
            "--devfile",
            path.to_str().expect("utf-8 path"),
            "--wait",
            "--timeout",
            "3m",
            "-o",
            "json",
        ]))
        .expect("ws create JSON");
        (name, created)
    }

    /// SIGKILL, as a crash or the OOM killer would, and nothing else: whatever `warren up`
    /// started is left to fend for itself. Returns the home for a restart.
    pub fn crash(mut self) -> tempfile::TempDir {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let home = tempfile::tempdir().expect("temp dir");
        std::mem::replace(&mut self.home, home)
    }

    /// A project (a unique name made of `repo`'s) of repository `repo` of `git`, reached at
    /// the host's address as workspaces reach it, with `ann`'s `password`.
    pub fn project_of(
        &self,
        git: &warren_testkit::git_http::GitHttpServer,
        repo: &str,
        password: &str,
    ) -> String {
        let project = unique_name(repo);
        self.create_private_project(
            &project,
            &git.url_via(&host_address(), repo),
            ("ann", password),
            &[],
        );
        project
    }

    /// `warren ws create` of workspace `ws` from `project`, waiting (at most 5 minutes) for
    /// it to run.
    pub fn create_of_project(&self, project: &str, ws: &str) {
        self.cli_ok(&[
            "ws",
            "create",
            "--project",
            project,
            "--name",
            ws,
            "--wait",
            "--timeout",
            "5m",
        ]);
    }

    /// Waits until `warren ws show WS` says the workspace's startup is done.
    pub fn startup_done(&self, ws: &str) {
        wait_for(
            "the startup done in ws show",
            Duration::from_secs(60),
            || {
                let shown = self.cli_ok(&["ws", "show", ws]);
                shown
                    .lines()
                    .any(|l| l.starts_with("Startup") && l.ends_with(" done"))
                    .then_some(())
            },
            || self.cli_ok(&["ws", "show", ws]) + &self.cli_ok(&["ws", "logs", ws]),
        );
    }

    /// `warren project create` of a private repository, its password given on stdin (never
    /// on the command line), with `extra` arguments.
    pub fn create_private_project(
        &self,
        name: &str,
        url: &str,
        (username, password): (&str, &str),
        extra: &[&str],
    ) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(["project", "create", name, "--git-url", url])
            .args(extra)
            .args(["--username", username, "--password-stdin"])
            .env("WARREN_HOME", self.home.path())
            .env_remove("WARREN_URL")
            .env_remove("WARREN_TOKEN");
        let out = output_with_stdin(cmd, format!("{password}\n").as_bytes());
        assert!(
            out.status.success(),
            "warren project create {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The output of workspace `ws`'s builds at start (`warren ws logs --container
    /// warren-build`).
    pub fn build_log(&self, ws: &str) -> String {
        self.cli_ok(&[
            "ws",
            "logs",
            ws,
            "--container",
            "warren-build",
            "--tail",
            "1000",
        ])
    }

    /// An SSH key made for the test and added to the signed-in user; the directory holds
    /// it as `id_ed25519` and is the `HOME` under which `warren ws ssh` pins host keys.
    pub fn ssh_key(&self) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = dir.path().join("id_ed25519");
        let made = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .expect("ssh-keygen");
        assert!(made.success());
        self.cli_ok(&[
            "ssh-key",
            "add",
            key.with_extension("pub").to_str().unwrap(),
        ]);
        dir
    }

    /// `warren ws ssh WS` with a terminal (a session attaching) and the key of `keys`
    /// ([`Up::ssh_key`]), running `command`: its output, lines ending in `\n`, trimmed; and
    /// what the client said on stderr.
    pub fn ssh_terminal(&self, keys: &Path, ws: &str, command: &str) -> (String, String) {
        let key = keys.join("id_ed25519");
        let out = Command::new(warren_bin())
            .env("WARREN_HOME", self.home.path())
            // The CLI pins the proxy's host key under ~/.ssh: the test's own directory.
            .env("HOME", keys)
            .args(["ws", "ssh", ws])
            .args(["--ssh-option", &format!("IdentityFile={}", key.display())])
            .args([
                "--ssh-option",
                "IdentitiesOnly=yes",
                "--ssh-option",
                "BatchMode=yes",
            ])
            .args(["--ssh-option", "RequestTTY=force"])
            .args(["--", command])
            .stdin(Stdio::null())
            .output()
            .expect("warren ws ssh");
        (
            String::from_utf8_lossy(&out.stdout)
                .replace("\r\n", "\n")
                .trim()
                .to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// A GET of workspace `ws`'s endpoint `endpoint` (`port-8080`) through the proxy: the
    /// status and body with the CLI's token, and the status without it.
    pub fn get_endpoint(
        &self,
        rt: &tokio::runtime::Runtime,
        ws: &str,
        endpoint: &str,
    ) -> ((u16, String), u16) {
        let w = show(self.home.path(), ws).expect("the workspace");
        let url = w["endpoints"][endpoint]
            .as_str()
            .unwrap_or_else(|| panic!("an endpoint {endpoint}: {w}"))
            .to_owned();
        let token = warren_cli::credentials::load(
            &self.home.path().join(warren_cli::credentials::FILE_NAME),
        )
        .expect("CLI credentials")
        .expect("credentials written by warren up")
        .token;
        let host = url
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let (name, port) = host.rsplit_once(':').expect("a port in the URL");
        let port: u16 = port.parse().expect("port");
        rt.block_on(async {
            let http = reqwest::Client::builder()
                .resolve(name, ([127, 0, 0, 1], port).into())
                .build()
                .expect("client");
            let r = http
                .get(&url)
                .bearer_auth(&token)
                .send()
                .await
                .expect("through the proxy");
            let status = r.status().as_u16();
            let body = r.text().await.expect("body");
            let anonymous = http.get(&url).send().await.expect("anonymous request");
            ((status, body), anonymous.status().as_u16())
        })
    }

    /// Stops `warren up` with SIGTERM and returns its exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("warren up ignored SIGTERM:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            kill_podman_services(child.id());
        }
        if let Some(ws) = &self.workspace {
            remove_workspace_objects(ws);
        }
        remove_firewall_tables(&self.home.path().join("agent"));
    }
}

/// Removes the nftables tables the agent of this state directory made (`warren_<owner>_*`),
/// which a test that failed half-way leaves behind; a later workspace network with the same
/// subnet must not meet its rules.
pub fn remove_firewall_tables(agent_state: &Path) {
    let Ok(owner) = std::fs::read_to_string(agent_state.join("owner-id")) else {
        return;
    };
    let owner: String = owner
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    if owner.is_empty() {
        return;
    }
    let Ok(out) = Command::new("nft").args(["list", "tables"]).output() else {
        return;
    };
    let prefix = format!("warren_{owner}_");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if let Some(table) = line
            .strip_prefix("table inet ")
            .filter(|t| t.starts_with(&prefix))
        {
            let _ = Command::new("nft")
                .args(["delete", "table", "inet", table.trim()])
                .status();
        }
    }
}

/// `{prefix}-{6 hex digits}`: distinct across concurrent runs on one engine.
pub fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{prefix}-{:06x}", (nanos ^ std::process::id()) & 0xff_ffff)
}

/// An address of this host that containers can reach (the primary interface's): found by
/// "connecting" a UDP socket, which sends nothing.
/// What the server may fetch from besides public addresses: the tests' Git servers and
/// registries listen on 127.0.0.1 and the host's address, which it refuses unless told.
pub fn outbound_allow() -> String {
    format!("127.0.0.1/32,{}/32", host_address())
}

/// A private registry over TLS (trusted through `/etc/containers/certs.d`, as Podman and a
/// node's containerd read it) with one user, `ann`, and the Feature `features/greet:1` on it
/// (option `greeting`, installed into `/usr/local/share/greet.txt`; `extra` more metadata);
/// the registry and the Feature's reference.
pub fn registry_with_feature(
    rt: &tokio::runtime::Runtime,
    password: &str,
    extra: &str,
) -> (warren_testkit::registry::Registry, String) {
    use warren_testkit::registry::{borrowed, simple_feature, Registry, RegistryOptions};
    let registry = rt
        .block_on(Registry::start(&RegistryOptions {
            trust_in: Some("/etc/containers/certs.d".into()),
            user: Some(("ann".into(), password.into())),
        }))
        .expect("registry");
    let greet = simple_feature(
        "greet",
        &format!(
            r#", "options": {{ "greeting": {{ "type": "string", "default": "hello" }} }}{extra} "#
        ),
        "$GREETING",
    );
    let (reference, _) = rt
        .block_on(registry.push_feature(
            "features/greet:1",
            &borrowed(&greet),
            Some(("ann", password)),
        ))
        .expect("publishing the Feature");
    (registry, reference)
}

pub fn host_address() -> String {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
    s.connect("192.0.2.1:9").expect("a default route");
    s.local_addr().expect("local address").ip().to_string()
}

/// The body of `GET {path}` on 127.0.0.1:`port` (plain HTTP/1.0, no client library), or
/// `None` when nothing answers there.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let ok = head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200");
    ok.then(|| body.to_owned())
}

/// Runs `git` in `dir` as a throwaway identity; panics with its error output when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    output_ok(
        Command::new("git")
            .args(["-c", "user.name=ops", "-c", "user.email=ops@example.test"])
            .args(args)
            .current_dir(dir),
    );
}

/// Whether OpenSSH's `bins` (and curl, websocat… as asked) and Chromium are installed; a
/// notice when not, or a panic under `WARREN_REQUIRE_TOOLS`.
pub fn tools_available(bins: &[&str]) -> bool {
    let have = |bin: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {bin}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let missing: Vec<_> = bins.iter().filter(|b| !have(b)).collect();
    let chromium = warren_testkit::browser::chromium_path().is_some();
    if missing.is_empty() && chromium {
        return true;
    }
    let what = format!("missing {missing:?}, chromium: {chromium}");
    if std::env::var_os("WARREN_REQUIRE_TOOLS").is_some() {
        panic!(
            "WARREN_REQUIRE_TOOLS is set but tools are missing ({what}); run .ci/setup-tools.sh"
        );
    }
    eprintln!("skipping: {what} (.ci/setup-tools.sh installs them)");
    false
}

/// `ssh` with nothing from the user's own configuration.
pub fn ssh(key: &Path, known_hosts: &Path, port: u16, dest: &str) -> Command {
    let mut c = Command::new("ssh");
    c.args([
        "-F",
        "/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "IdentitiesOnly=yes",
    ])
    .args([
        "-o",
        "StrictHostKeyChecking=accept-new",
        "-o",
        "ConnectTimeout=20",
    ])
    .arg("-o")
    .arg(format!("UserKnownHostsFile={}", known_hosts.display()))
    .arg("-i")
    .arg(key)
    .args(["-p", &port.to_string(), dest]);
    c
}

/// Creates user `name` with a session token and an SSH key `{dir}/{name}_ed25519` on the
/// account; returns the password and the token.
pub async fn user_with_key(
    http: &reqwest::Client,
    base: &str,
    admin: &str,
    name: &str,
    dir: &Path,
) -> (String, String) {
    let (password, token) = create_user(http, base, admin, name).await;
    let key = dir.join(format!("{name}_ed25519"));
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen");
    assert!(st.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");
    api(
        http,
        base,
        Some(&token),
        reqwest::Method::POST,
        "/users/me/ssh-keys",
        Some(serde_json::json!({"name": "laptop", "public_key": public.trim()})),
    )
    .await;
    (password, token)
}

/// A PostgreSQL schema of its own, dropped at the end.
pub struct PgSchema {
    base: String,
    name: String,
}

impl PgSchema {
    pub async fn create(base: &str) -> PgSchema {
        sqlx::any::install_default_drivers();
        let name = format!("e2e_{:08x}", rand::random::<u32>());
        let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(base)
            .await
            .expect("connect to PostgreSQL");
        sqlx::query(&format!("CREATE SCHEMA {name}"))
            .execute(&mut conn)
            .await
            .expect("create schema");
        PgSchema {
            base: base.to_owned(),
            name,
        }
    }

    /// The database URL with this schema first on the search path.
    pub fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.base, self.name)
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&base)
                    .await
                    .ok()?;
                sqlx::query(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Milliseconds, for benchmark tables.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median of `v`, in milliseconds.
pub fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    ms(v[v.len() / 2])
}

/// Runs the CLI with the credentials under `home`, failing loudly when it fails; how long it
/// took (benchmarks time whole CLI processes, as a user waits for them).
pub fn warren_timed(home: &Path, args: &[&str]) -> Duration {
    let t0 = Instant::now();
    let out = cli(home, args, None);
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "warren {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

/// `warren ws create --devfile DEVFILE --name NAME --wait` under `home`, timed as
/// [`warren_timed`].
pub fn create_timed(home: &Path, devfile: &str, name: &str) -> Duration {
    let args = [
        "ws",
        "create",
        "--devfile",
        devfile,
        "--name",
        name,
        "--wait",
    ];
    warren_timed(home, &args)
}

/// One unmeasured create and removal of workspace `name`, to warm a benchmark's stack (its
/// connections, the engine's caches) before it measures.
pub fn warm_up(home: &Path, devfile: &str, name: &str) {
    create_timed(home, devfile, name);
    warren_timed(home, &["ws", "rm", name, "--wait"]);
}

/// Whether a benchmark on Podman runs: not when cargo only lists benchmarks (`--list`), nor
/// without Podman (then it says so, naming `what`); the test image is built when it is not.
pub fn podman_bench_runs(what: &str) -> bool {
    if std::env::args().any(|a| a == "--list") {
        return false;
    }
    if !podman_available() {
        eprintln!(
            "skipping the {what} benchmark: podman not found (install it with .ci/setup-podman.sh)"
        );
        return false;
    }
    ensure_image();
    true
}

/// Runs the `podman` CLI, failing loudly when it fails; how long it took.
pub fn podman_timed(args: &[&str]) -> Duration {
    let t0 = Instant::now();
    output_ok(Command::new("podman").args(args));
    t0.elapsed()
}

/// One `warren up` (and so one Podman service) at a time among the tests that take this:
/// `up_e2e`, `git_e2e` and `devfile_e2e`, which share one test binary. The lifecycle test's
/// restarted container was seen to exit (code 0, about 0.3 s after its start, with no stop
/// from Warren) far more often with two Podman services on the same storage; it also
/// happens, rarely, with one, which the engine runtime handles itself (`watch_restart` in
/// `engine/start.rs`). Serialising keeps these tests to the usual case.
pub fn one_warren_up_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The objects `list` names (e.g. `["volume", "ls"]`, `["images"]`) that carry every one of
/// `labels` (`key=value`, or `key` for any value). Podman 4.3 ORs several label filters on
/// volumes, networks and images (it ANDs them on containers), so `--filter a --filter b` there
/// also lists other installations' objects: the engine narrows by the first label only and the
/// rest are checked here.
pub fn podman_labelled(list: &[&str], labels: &[&str]) -> Vec<String> {
    let Some(first) = labels.first() else {
        panic!("podman_labelled needs at least one label");
    };
    let filter = format!("label={first}");
    let mut args = list.to_vec();
    args.extend(["--filter", &filter, "--format", "json"]);
    let out = podman(&args);
    let objects: Vec<serde_json::Value> = if out.trim().is_empty() {
        Vec::new()
    } else {
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("podman {args:?} as JSON: {e}\n{out}"))
    };
    let carries_all = |o: &serde_json::Value| {
        let tags = o.get("Labels").or_else(|| o.get("labels"));
        labels.iter().all(|want| {
            let (key, value) = match want.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (*want, None),
            };
            let have = tags.and_then(|t| t.get(key)).and_then(|v| v.as_str());
            value.map_or(have.is_some(), |v| have == Some(v))
        })
    };
    objects
        .iter()
        .filter(|o| carries_all(o))
        .filter_map(|o| {
            ["Name", "name", "Id", "id"]
                .iter()
                .find_map(|k| o.get(*k).and_then(|v| v.as_str()))
                .map(str::to_owned)
        })
        .collect()
}

/// Removes every container, volume and network of the installation with this owner id, even
/// when the test failed half-way: what it made under names the test does not know (a warm
/// pool's workspaces). Only that installation's: another's objects are none of its business.
pub struct InstallationObjects(pub String);

impl Drop for InstallationObjects {
    fn drop(&mut self) {
        let owner = format!("warren.dev/engine-owner={}", self.0);
        for id in podman_labelled(&["ps", "-a"], &[&owner]) {
            let _ = podman(&["rm", "-f", "-t", "0", &id]);
        }
        for v in podman_labelled(&["volume", "ls"], &[&owner]) {
            let _ = podman(&["volume", "rm", "-f", &v]);
        }
        for n in podman_labelled(&["network", "ls"], &[&owner]) {
            let _ = podman(&["network", "rm", "-f", &n]);
        }
    }
}

/// Removes what the installation made for prebuilds, even when the test failed half-way (and
/// only that: not another installation's prebuilds, nor its own other objects).
pub struct PrebuildObjects(pub String);

impl Drop for PrebuildObjects {
    fn drop(&mut self) {
        let owner = format!("warren.dev/engine-owner={}", self.0);
        let mark = "warren.dev/prebuild=true";
        for id in podman_labelled(&["ps", "-a"], &[&owner, mark]) {
            let _ = podman(&["rm", "-f", "-t", "0", &id]);
        }
        for v in podman_labelled(&["volume", "ls"], &[&owner, mark]) {
            let _ = podman(&["volume", "rm", "-f", &v]);
        }
        for n in podman_labelled(&["network", "ls"], &[&owner, mark]) {
            let _ = podman(&["network", "rm", "-f", &n]);
        }
    }
}
