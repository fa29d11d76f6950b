//! End to end: the `warren` CLI binary against a real `warren server` (SQLite in a temp home,
//! port 0), as a user would drive it: login, agent, project, workspace, list, stop, failures;
//! then `--wait` through every transition with a scripted agent reconciling.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_types::reconcile::{
    ReconcileRequest, ReconcileResponse, TerminationProgress, UpdateType, WorkspaceAgentInfo,
    RECONCILE_PATH, RELAY_JWT_ISSUER, SERVER_JWT_AUDIENCE,
};
use warren_types::DesiredState;

const RELAY_SECRET: &str = "cli-e2e-relay-secret-0123456789abcdef";

/// `warren server` on port 0 with a temp home; killed on drop, even when the test fails.
struct Server {
    child: Child,
    url: String,
    admin_password: String,
    _home: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let home = tempfile::tempdir().unwrap();
        let ready = home.path().join("ready");
        let log = home.path().join("stdout.log");
        let child = Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["server", "--listen", "127.0.0.1:0", "--home"])
            .arg(home.path())
            .arg("--ready-file")
            .arg(&ready)
            .args(["--relay-secret", RELAY_SECRET])
            .env_remove("WARREN_DATABASE_URL")
            .env("WARREN_LOG", "warn")
            .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn warren server");
        let mut server = Server {
            child,
            url: String::new(),
            admin_password: String::new(),
            _home: home,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&ready) {
                if !addr.trim().is_empty() {
                    server.url = format!("http://{}", addr.trim());
                    break;
                }
            }
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("warren server exited early: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "warren server did not become ready"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = std::fs::read_to_string(&log).unwrap();
        server.admin_password = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("password: "))
            .expect("the first start prints the admin password")
            .to_owned();
        server
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scripted agent speaking the reconcile protocol over plain HTTP, as the relay would on an
/// agent's behalf: every tick a full reconcile reporting a Deployment that does at once what
/// the last answer asked for. Stopped (thread joined) on drop.
struct ScriptedAgent {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ScriptedAgent {
    fn start(url: &str, agent_id: i64) -> ScriptedAgent {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let endpoint = format!("{url}{RECONCILE_PATH}");
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(agent_loop(endpoint, agent_id, flag));
        });
        ScriptedAgent {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for ScriptedAgent {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the fake runtime holds for one workspace.
struct Fake {
    namespace: String,
    replicas: i64,
    terminated: bool,
    rv: u64,
    /// The objects last applied; a change while running is a rollout (one `Starting` report).
    config: Option<String>,
    rolling: bool,
}

async fn agent_loop(endpoint: String, agent_id: i64, stop: Arc<AtomicBool>) {
    let http = reqwest::Client::new();
    let mut runtime: BTreeMap<String, Fake> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        let infos: Vec<WorkspaceAgentInfo> = runtime
            .iter()
            .map(|(name, f)| WorkspaceAgentInfo {
                name: name.clone(),
                namespace: f.namespace.clone(),
                latest_k8s_deployment_info: (!f.terminated).then(|| deployment(name, f)),
                termination_progress: f.terminated.then_some(TerminationProgress::Terminated),
                error_details: None,
                pod_failure: None,
                pod_waiting: None,
            })
            .collect();
        runtime.retain(|_, f| !f.terminated);
        let jwt = warren_server::relay::jwt::mint(
            RELAY_SECRET.as_bytes(),
            RELAY_JWT_ISSUER,
            SERVER_JWT_AUDIENCE,
            Some(agent_id.to_string()),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs() as i64,
            30,
        );
        let req = ReconcileRequest {
            update_type: UpdateType::Full,
            workspace_agent_infos: infos,
            capacity: None,
            runtime_fault: None,
            isolation_warning: None,
            connector: None,
            mounts: vec![],
            used: vec![],
        };
        let resp = http
            .post(&endpoint)
            .bearer_auth(jwt)
            .json(&req)
            .send()
            .await;
        if let Ok(resp) = resp {
            assert_eq!(resp.status().as_u16(), 201, "reconcile refused");
            let body: ReconcileResponse = resp.json().await.unwrap();
            for info in body.workspace_rails_infos {
                let f = runtime.entry(info.name.clone()).or_insert(Fake {
                    namespace: info.namespace.clone(),
                    replicas: 0,
                    terminated: false,
                    rv: 0,
                    config: None,
                    rolling: false,
                });
                f.rolling = false;
                if let Some(config) = info.config_to_apply {
                    if f.config.as_ref().is_some_and(|c| *c != config) && f.replicas == 1 {
                        f.rolling = true;
                        f.rv += 1;
                    }
                    f.config = Some(config);
                }
                let (replicas, terminated) = match info.desired_state {
                    DesiredState::Running => (1, false),
                    DesiredState::Stopped | DesiredState::RestartRequested => (0, false),
                    DesiredState::Terminated => (0, true),
                };
                if (replicas, terminated) != (f.replicas, f.terminated) {
                    f.rv += 1;
                }
                f.replicas = replicas;
                f.terminated = terminated;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A settled Deployment with `f.replicas` replicas, as Kubernetes reports it.
fn deployment(name: &str, f: &Fake) -> serde_json::Value {
    let progressing = if f.rolling {
        "ReplicaSetUpdated"
    } else {
        "NewReplicaSetAvailable"
    };
    let mut status = serde_json::json!({"conditions": [
        {"type": "Progressing", "status": "True", "reason": progressing},
        {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
    ]});
    if f.replicas > 0 {
        status["availableReplicas"] = f.replicas.into();
    }
    serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": f.namespace, "resourceVersion": f.rv.to_string()},
        "spec": {"replicas": f.replicas},
        "status": status,
    })
}

/// Runs `warren ARGS` with its own WARREN_HOME and no inherited WARREN_URL/WARREN_TOKEN.
struct Cli {
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Cli {
    /// A CLI signed in as the server's bootstrap admin.
    fn admin(server: &Server, home: &Path) -> Cli {
        let cli = Cli::new(home);
        let out = cli.run_stdin(
            &[
                "login",
                "--url",
                &server.url,
                "--username",
                "admin",
                "--password-stdin",
            ],
            &format!("{}\n", server.admin_password),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        cli
    }

    fn new(home: &Path) -> Cli {
        Cli {
            home: home.to_owned(),
            env: vec![],
        }
    }

    fn with_env(&self, k: &str, v: &str) -> Cli {
        let mut env = self.env.clone();
        env.push((k.into(), v.into()));
        Cli {
            home: self.home.clone(),
            env,
        }
    }

    fn run_stdin(&self, args: &[&str], stdin: &str) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(args)
            .env("WARREN_HOME", &self.home)
            .env_remove("WARREN_URL")
            .env_remove("WARREN_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_stdin(args, "")
    }

    /// Runs and insists on success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "warren {args:?} failed ({:?}):\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let stdout = self.ok(&all);
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?}: {e}\n{stdout}"))
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: e2e
components:
  - name: dev
    container:
      image: quay.io/devfile/universal-developer-image:ubi9-latest
      memoryLimit: 1Gi
      endpoints:
        - name: web
          targetPort: 3000
"#;

const BAD_DEVFILE: &str = r#"schemaVersion: 2.2.0
metadata:
  name: bad
components:
  - name: dev
    container:
      image: quay.io/devfile/universal-developer-image:ubi9-latest
      memoryLimit: lots
"#;

#[test]
fn cli_drives_a_real_server() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cli = Cli::new(&tmp.path().join("cli-home"));
    let devfile = tmp.path().join("devfile.yaml");
    std::fs::write(&devfile, DEVFILE).unwrap();
    let bad_devfile = tmp.path().join("bad.yaml");
    std::fs::write(&bad_devfile, BAD_DEVFILE).unwrap();
    let devfile = devfile.to_str().unwrap();

    // Not signed in yet: exit 4 and a hint.
    let out = cli.run(&["ws", "list"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    assert!(stderr(&out).contains("warren login"), "{}", stderr(&out));

    // A wrong password is refused with the server's message.
    let out = cli.run_stdin(
        &[
            "login",
            "--url",
            &server.url,
            "--username",
            "admin",
            "--password-stdin",
        ],
        "wrong\n",
    );
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));

    let out = cli.run_stdin(
        &[
            "login",
            "--url",
            &server.url,
            "--username",
            "admin",
            "--password-stdin",
        ],
        &format!("{}\n", server.admin_password),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let creds = cli.home.join("credentials.toml");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&creds).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let stored = std::fs::read_to_string(&creds).unwrap();
    assert!(stored.contains(&server.url), "{stored}");

    assert_eq!(cli.json(&["whoami"])["username"], "admin");

    // Agent: the token alone on stdout.
    let token = cli.ok(&["agent", "create", "local"]);
    assert_eq!(token.lines().count(), 1, "{token}");
    assert!(token.trim().len() >= 20, "{token}");
    let agents = cli.json(&["agent", "list"]);
    assert_eq!(agents[0]["name"], "local");
    assert!(cli.ok(&["agent", "show", "local"]).contains("Domain:"));

    // Project with a stored devfile.
    let p = cli.json(&[
        "project",
        "create",
        "demo",
        "--git-url",
        "https://example.com/demo.git",
        "--devfile",
        devfile,
    ]);
    assert_eq!(p["name"], "demo");
    assert_eq!(p["has_devfile"], true);
    assert!(cli
        .ok(&["project", "list"])
        .contains("https://example.com/demo.git"));

    // Workspace from a devfile file.
    let w = cli.json(&[
        "ws",
        "create",
        "--devfile",
        devfile,
        "--name",
        "dev",
        "--var",
        "GREETING=hi",
        "--secret-var",
        "PW=s3cret",
        "--cpu",
        "1",
        "--memory",
        "1Gi",
    ]);
    assert_eq!(w["name"], "dev");
    assert_eq!(w["desired_state"], "Running");
    assert_eq!(w["actual_state"], "CreationRequested");
    assert!(!w.to_string().contains("s3cret"), "{w}");

    // `ws open --print`: the addresses, no browser; the editor by default.
    let main_url = w["url"].as_str().expect("a main endpoint").to_owned();
    let editor_url = w["editor_url"].as_str().expect("an editor").to_owned();
    assert_eq!(editor_url, "http://13337-dev.ws.localhost/");
    assert_eq!(cli.ok(&["ws", "open", "dev", "--print"]).trim(), editor_url);
    assert_eq!(
        cli.ok(&["ws", "open", "dev", "--main", "--print"]).trim(),
        main_url
    );
    let terminal = cli.ok(&["ws", "open", "dev", "--terminal", "--print"]);
    assert!(terminal.contains("://terminal-dev."), "{terminal}");
    let out = cli.run(&["ws", "open", "dev", "--endpoint", "db", "--print"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("\"db\""), "{}", stderr(&out));

    // From the project's devfile too.
    let w2 = cli.json(&["ws", "create", "--project", "demo", "--name", "dev2"]);
    assert_eq!(w2["project_name"], "demo");

    let page = cli.json(&["ws", "list"]);
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"dev") && names.contains(&"dev2"), "{page}");
    let all = cli.json(&["ws", "list", "--all", "--limit", "1"]);
    assert_eq!(all["items"].as_array().unwrap().len(), 2, "{all}");
    let table = cli.ok(&["ws", "list"]);
    assert!(table.lines().next().unwrap().starts_with("NAME"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("dev ")), "{table}");

    // Stop: the new desired state is shown at once.
    let stopped = cli.ok(&["ws", "stop", "dev"]);
    assert!(stopped.contains("desired Stopped"), "{stopped}");
    assert_eq!(cli.json(&["ws", "show", "dev"])["desired_state"], "Stopped");
    assert!(cli
        .ok(&["ws", "show", "dev"])
        .contains("PW (env) = (secret)"));

    // No agent is running, so waiting ends in a timeout: exit 1, one line.
    let out = cli.run(&["ws", "start", "dev", "--wait", "--timeout", "2s"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: timed out") && err.contains("\"dev\""),
        "{err}"
    );

    // Unknown workspace: exit 1, one line naming it.
    let out = cli.run(&["ws", "show", "no-such-ws"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("no-such-ws"),
        "{err}"
    );
    let out = cli.run(&["ws", "stop", "no-such-ws"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));

    // A devfile the server refuses: the path of the error is printed.
    let out = cli.run(&["ws", "create", "--devfile", bad_devfile.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("components[0].container.memoryLimit"),
        "{}",
        stderr(&out)
    );
    // A devfile that cannot be read: usage, exit 2.
    let out = cli.run(&["ws", "create", "--devfile", "/no/such/devfile.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    // Terminate; afterwards nothing may move it.
    let rm = cli.ok(&["ws", "rm", "dev"]);
    assert!(rm.contains("desired Terminated"), "{rm}");
    let out = cli.run(&["ws", "start", "dev"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("Terminated"), "{}", stderr(&out));

    // Tokens: the secret alone on stdout, usable through WARREN_TOKEN.
    let secret = cli.ok(&[
        "token",
        "create",
        "ci",
        "--scope",
        "read_api",
        "--expires-in-days",
        "2",
    ]);
    let secret = secret.trim();
    let tokens = cli.json(&["token", "list"]);
    assert!(tokens.to_string().contains("\"ci\""), "{tokens}");
    let via_env = cli.with_env("WARREN_TOKEN", secret);
    assert_eq!(via_env.json(&["whoami"])["username"], "admin");
    let out = cli.with_env("WARREN_TOKEN", "wrong-token").run(&["whoami"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    // SSH keys.
    let key = tmp.path().join("id_ed25519.pub");
    std::fs::write(
        &key,
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl e2e@test\n",
    )
    .unwrap();
    let k = cli.json(&["ssh-key", "add", key.to_str().unwrap(), "--name", "laptop"]);
    assert_eq!(k["name"], "laptop");
    assert!(cli.ok(&["ssh-key", "list"]).contains("laptop"));

    // An unreachable server: exit 3.
    let out = cli
        .with_env("WARREN_URL", "http://127.0.0.1:9")
        .run(&["whoami"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("cannot reach"), "{}", stderr(&out));

    // --wait through every transition, with an agent reconciling.
    let agent_id = agents[0]["id"].as_i64().unwrap();
    {
        let _agent = ScriptedAgent::start(&server.url, agent_id);
        let wait = ["--wait", "--timeout", "60s"];
        let w = cli.json(
            &[
                &["ws", "create", "--devfile", devfile, "--name", "waited"][..],
                &wait,
            ]
            .concat(),
        );
        assert_eq!(
            (w["desired_state"].as_str(), w["actual_state"].as_str()),
            (Some("Running"), Some("Running")),
            "{w}"
        );
        let out = cli.ok(&[&["ws", "stop", "waited"][..], &wait].concat());
        assert!(out.contains("desired Stopped, actual Stopped"), "{out}");
        let w = cli.json(&[&["ws", "start", "waited"][..], &wait].concat());
        assert_eq!(w["actual_state"], "Running", "{w}");
        let w = cli.json(&[&["ws", "restart", "waited"][..], &wait].concat());
        assert_eq!(
            (w["desired_state"].as_str(), w["actual_state"].as_str()),
            (Some("Running"), Some("Running")),
            "{w}"
        );
        let w = cli.json(&[&["ws", "resize", "waited", "--memory", "2Gi"][..], &wait].concat());
        assert_eq!(w["actual_state"], "Running", "{w}");
        assert_eq!(w["resources"]["memory"], "2Gi", "{w}");
        // Rebuild (issue 41, item 1): what changes first, asked before applying, a
        // definition that does not validate refused with the workspace untouched.
        let next = tmp.path().join("next.yaml");
        std::fs::write(
            &next,
            DEVFILE.replace("targetPort: 3000", "targetPort: 4000"),
        )
        .unwrap();
        let next = next.to_str().unwrap();
        let out = cli.ok(&["ws", "rebuild", "waited", "--devfile", next, "--dry-run"]);
        assert!(
            out.contains("Rebuilding waited from the devfile given changes 1 part(s):")
                && out.contains("~ endpoint web:")
                && out.contains("was: port 3000")
                && out.contains("now: port 4000"),
            "{out}"
        );
        let out = cli.run(&["ws", "rebuild", "waited", "--devfile", next]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("pass --yes"), "{}", stderr(&out));
        let before = cli.json(&["ws", "show", "waited"]);
        let out = cli.run(&[
            "ws",
            "rebuild",
            "waited",
            "--yes",
            "--devfile",
            bad_devfile.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("memoryLimit"), "{}", stderr(&out));
        let after = cli.json(&["ws", "show", "waited"]);
        assert_eq!(before["version"], after["version"], "untouched: {after}");
        let w = cli.json(
            &[
                &["ws", "rebuild", "waited", "--yes", "--devfile", next][..],
                &wait,
            ]
            .concat(),
        );
        assert_eq!(w["actual_state"], "Running", "{w}");
        assert!(
            w["url"].as_str().unwrap_or_default().contains("4000"),
            "{w}"
        );
        // Sharing a port (issue 41, item 4): listed, changed, a link printed once, revoked.
        let out = cli.ok(&["ws", "port", "waited"]);
        assert!(
            out.contains("PORT") && out.contains("4000") && out.contains("space"),
            "{out}"
        );
        let out = cli.run(&["ws", "port", "waited", "4000", "--visibility", "public"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("ports.max_visibility"),
            "public is the admin's to allow: {}",
            stderr(&out)
        );
        let out = cli.run(&["ws", "port", "waited", "4000", "--visibility", "everyone"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let out = cli.run(&[
            "ws",
            "port",
            "waited",
            "4000",
            "--visibility",
            "authenticated",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("every signed-in user"),
            "{}",
            stderr(&out)
        );
        let out = cli.run(&["ws", "port", "waited", "4000", "--share", "--expires", "2h"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let link = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            link.contains("4000-waited.") && link.contains("/.warren/share?token=wrn_share_"),
            "{link}"
        );
        assert!(stderr(&out).contains("not shown again"), "{}", stderr(&out));
        let listed = cli.json(&["ws", "port", "waited"]);
        assert_eq!(
            listed["ports"][0]["visibility"], "authenticated",
            "{listed}"
        );
        let id = listed["share_links"][0]["id"].as_i64().expect("a link");
        assert!(!listed.to_string().contains("wrn_share_"), "{listed}");
        cli.ok(&["ws", "port", "waited", "--revoke", &id.to_string()]);
        let listed = cli.json(&["ws", "port", "waited"]);
        assert!(
            listed["share_links"][0]["revoked_at"].is_string(),
            "{listed}"
        );
        let out = cli.run(&["ws", "port", "waited", "4001", "--default"]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("the proxy serves 4000"),
            "{}",
            stderr(&out)
        );
        // What stops it next (issue 41, item 7), and working hours.
        let out = cli.ok(&["ws", "show", "waited"]);
        assert!(
            out.contains("Next:") && out.contains("max_active_hours_before_stop"),
            "{out}"
        );
        cli.ok(&[
            "working-hours",
            "set",
            "--days",
            "mon-fri",
            "--start",
            "08:30",
            "--stop",
            "18:00",
            "--timezone",
            "Europe/Paris",
        ]);
        let out = cli.ok(&["working-hours", "show"]);
        assert!(
            out.contains("mon,tue,wed,thu,fri 08:30–18:00 Europe/Paris"),
            "{out}"
        );
        let out = cli.run(&[
            "working-hours",
            "set",
            "--days",
            "mon-funday",
            "--stop",
            "18:00",
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let out = cli.run(&[
            "working-hours",
            "set",
            "--days",
            "mon",
            "--stop",
            "6pm",
            "--timezone",
            "UTC",
        ]);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stderr(&out).contains("stop: \"6pm\""), "{}", stderr(&out));
        let out = cli.ok(&["working-hours", "clear"]);
        assert!(out.contains("No working hours"), "{out}");
        let out = cli.run(&[&["ws", "rm", "waited"][..], &wait].concat());
        assert!(out.status.success(), "{}", stderr(&out));
        let w = cli.json(&["ws", "show", "waited"]);
        assert_eq!(w["actual_state"], "Terminated", "{w}");
    }

    // Logout revokes the token it created and deletes the file.
    let login_token = stored
        .lines()
        .find_map(|l| l.strip_prefix("token = \""))
        .map(|t| t.trim_end_matches('"').to_owned())
        .unwrap();
    cli.ok(&["logout"]);
    assert!(!creds.exists());
    let out = cli
        .with_env("WARREN_URL", &server.url)
        .with_env("WARREN_TOKEN", &login_token)
        .run(&["whoami"]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));

    // Log in again with a token from stdin.
    let out = cli.run_stdin(&["login", "--url", &server.url, "--token-stdin"], secret);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(cli.json(&["whoami"])["username"], "admin");
}

#[test]
fn cli_administers_users() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let admin = Cli::new(&tmp.path().join("admin"));
    let bob = Cli::new(&tmp.path().join("bob"));
    let login = |cli: &Cli, user: &str, password: &str| {
        cli.run_stdin(
            &[
                "login",
                "--url",
                &server.url,
                "--username",
                user,
                "--password-stdin",
            ],
            &format!("{password}\n"),
        )
    };
    assert!(login(&admin, "admin", &server.admin_password)
        .status
        .success());
    let out = admin.run_stdin(
        &["user", "create", "bob", "--password-stdin"],
        "bob-password-1\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(login(&bob, "bob", "bob-password-1").status.success());
    assert_eq!(bob.json(&["whoami"])["username"], "bob");

    // Disable: bob's saved token stops working, with a message that says why it may.
    let u = admin.json(&["user", "disable", "bob"]);
    assert!(u["disabled_at"].is_string(), "{u}");
    assert!(admin.ok(&["user", "list"]).contains("disabled"));
    let out = bob.run(&["whoami"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("disabled"), "{}", stderr(&out));
    let out = login(&bob, "bob", "bob-password-1");
    assert!(
        stderr(&out).contains("this account is disabled"),
        "{}",
        stderr(&out)
    );
    admin.ok(&["user", "enable", "bob"]);
    assert_eq!(bob.json(&["whoami"])["username"], "bob");

    // Admin rights.
    assert_eq!(admin.json(&["user", "promote", "bob"])["is_admin"], true);
    assert_eq!(bob.json(&["user", "show", "admin"])["username"], "admin");
    assert_eq!(admin.json(&["user", "demote", "bob"])["is_admin"], false);
    let out = admin.run(&["user", "demote", "admin"]);
    assert!(
        stderr(&out).contains("last active admin"),
        "{}",
        stderr(&out)
    );

    // Bob changes his password, and signs out everywhere else.
    let out = bob.run_stdin(
        &["passwd", "--password-stdin", "--revoke-sessions"],
        "bob-password-1\nbob-password-2\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        bob.json(&["whoami"])["username"],
        "bob",
        "this session is kept"
    );
    assert!(
        !login(&Cli::new(&tmp.path().join("x")), "bob", "bob-password-1")
            .status
            .success()
    );
    assert!(
        login(&Cli::new(&tmp.path().join("y")), "bob", "bob-password-2")
            .status
            .success()
    );
    let out = bob.run_stdin(
        &["passwd", "--password-stdin"],
        "wrong-one\nbob-password-3\n",
    );
    assert!(
        stderr(&out).contains("current_password"),
        "{}",
        stderr(&out)
    );

    // OAuth clients: the proxy's secret alone on stdout, listed without it, deleted.
    let secret = admin.ok(&[
        "oauth-client",
        "create",
        "proxy",
        "--name",
        "Warren proxy",
        "--first-party",
        "--redirect-uri",
        "https://auth.ws.example.com/oauth/callback",
    ]);
    assert_eq!(secret.lines().count(), 1, "{secret}");
    assert!(secret.starts_with("wrn_cs_"), "{secret}");
    let listed = admin.ok(&["oauth-client", "list"]);
    assert!(
        listed.contains("proxy") && listed.contains("first-party, confidential"),
        "{listed}"
    );
    assert!(!listed.contains(secret.trim()), "{listed}");
    let out = bob.run(&["oauth-client", "list"]);
    assert!(stderr(&out).contains("admin"), "{}", stderr(&out));
    admin.ok(&["oauth-client", "rm", "proxy"]);
    let out = admin.run(&["oauth-client", "rm", "proxy"]);
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));

    // The proxies' cookie key: an admin rotates it through the server, a user may not.
    let rotated = admin.ok(&["proxy", "rotate-key"]);
    assert!(
        rotated.contains("generation 1") && rotated.contains("previous key stay valid"),
        "{rotated}"
    );
    let json = admin.ok(&["proxy", "rotate-key", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["generation"], 2, "{json}");
    let out = bob.run(&["proxy", "rotate-key"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("admin"), "{}", stderr(&out));
    // The proxies the server heard from (none here: this server runs alone), admins only.
    let listed = admin.ok(&["proxy", "list"]);
    assert!(listed.contains("No proxy has said it serves"), "{listed}");
    assert_eq!(admin.ok(&["proxy", "ls", "-o", "json"]).trim(), "[]");
    let out = bob.run(&["proxy", "list"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("admin"), "{}", stderr(&out));
    // Regions and their doors: registered, changed, listed and removed by admins only.
    let listed = admin.ok(&["region", "list"]);
    assert!(listed.contains("No region is registered"), "{listed}");
    let set = admin.ok(&[
        "region",
        "set",
        "eu",
        "--workspace-domain",
        "ws.eu.example",
        "--ssh-address",
        "ssh.eu.example:22",
    ]);
    assert!(
        set.contains("https://*.ws.eu.example") && set.contains("ssh.eu.example:22"),
        "{set}"
    );
    let out = admin.run(&[
        "region",
        "set",
        "eu",
        "--workspace-domain",
        "ws.eu.example",
        "--ssh-address=-oProxyCommand=x:22",
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ssh_address"), "{}", stderr(&out));
    admin.ok(&[
        "region",
        "set",
        "eu",
        "--workspace-domain",
        "ws2.eu.example:8443",
    ]);
    let json = admin.ok(&["region", "ls", "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v[0]["workspace_domain"], "ws2.eu.example:8443", "{json}");
    assert_eq!(v[0]["serving"], false, "{json}");
    assert!(v[0].get("ssh_address").is_none(), "{json}");
    let out = bob.run(&["region", "set", "eu", "--workspace-domain", "evil.example"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("admin"), "{}", stderr(&out));
    let out = admin.run(&["region", "rm", "eu"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = admin.run(&["region", "rm", "eu"]);
    assert!(stderr(&out).contains("not found"), "{}", stderr(&out));

    // Delete (no workspaces: nothing to confirm).
    let out = admin.run(&["user", "rm", "bob"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("deleted"), "{}", stderr(&out));
    let out = admin.run(&["user", "show", "bob"]);
    assert!(
        stderr(&out).contains("user \"bob\" not found"),
        "{}",
        stderr(&out)
    );
    assert!(!bob.run(&["whoami"]).status.success());
}

/// `warren gitops repo …`, `warren gitops policy …` and `warren agent gitops …` as an operator
/// uses them: a generated webhook secret is printed once and never again, a sources file is
/// checked with every problem named, and a used repository cannot be removed.
#[test]
fn cli_configures_gitops() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cli = Cli::admin(&server, &tmp.path().join("cli-home"));
    cli.ok(&["agent", "create", "edge"]);

    // A token from standard input, a generated webhook secret printed once on stdout.
    let out = cli.run_stdin(
        &[
            "gitops",
            "repo",
            "add",
            "platform",
            "--url",
            "https://git.example.com/ops/platform.git",
            "--token-stdin",
            "--generate-webhook-secret",
        ],
        "glpat-cli-secret-token\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(secret.len(), 64, "{secret}");
    assert!(
        stderr(&out).contains("shown only this once"),
        "{}",
        stderr(&out)
    );
    let listed = cli.ok(&["gitops", "repo", "list"]);
    assert!(
        listed.contains("platform") && listed.contains("token"),
        "{listed}"
    );
    let shown = cli.ok(&["gitops", "repo", "show", "platform", "-o", "json"]);
    assert!(
        !shown.contains(&secret) && !shown.contains("glpat-cli-secret-token"),
        "{shown}"
    );
    let r: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(
        (r["credential"].as_str(), r["webhook"].as_bool()),
        (Some("token"), Some(true))
    );

    // A sources file with problems: each named; nothing stored.
    let bad = tmp.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "sources:\n  - name: web\n    repository: nowhere\n    interval: often\n",
    )
    .unwrap();
    let out = cli.run(&[
        "agent",
        "gitops",
        "set",
        "edge",
        "-f",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = stderr(&out);
    for want in [
        "sources[0].repository",
        "sources[0].namespace",
        "sources[0].interval",
    ] {
        assert!(err.contains(want), "{want}: {err}");
    }
    let typo = tmp.path().join("typo.yaml");
    std::fs::write(&typo, "sources:\n  - name: web\n    repo: platform\n").unwrap();
    let out = cli.run(&[
        "agent",
        "gitops",
        "set",
        "edge",
        "-f",
        typo.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("repo"), "{}", stderr(&out));

    let good = tmp.path().join("sources.yaml");
    std::fs::write(
        &good,
        "sources:\n  - name: web\n    repository: platform\n    paths: [\"deploy/**/*.yaml\"]\n    \
         namespace: team-a\n    prune: true\n",
    )
    .unwrap();
    let set = cli.ok(&[
        "agent",
        "gitops",
        "set",
        "edge",
        "-f",
        good.to_str().unwrap(),
    ]);
    assert!(
        set.contains("web") && set.contains("deploy/**/*.yaml"),
        "{set}"
    );
    let shown = cli.json(&["agent", "gitops", "show", "edge"]);
    assert_eq!(shown["sources"][0]["namespace"], "team-a", "{shown}");
    assert_eq!(shown["sources"][0]["interval"], "60s", "{shown}");

    // In use: not removable, naming the source.
    let out = cli.run(&["gitops", "repo", "rm", "platform"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("edge/web"), "{}", stderr(&out));

    // The policy.
    let policy = tmp.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "deny: [\"rbac.authorization.k8s.io/*\"]\nallow_cluster_mode: false\n",
    )
    .unwrap();
    let p = cli.ok(&["gitops", "policy", "set", "-f", policy.to_str().unwrap()]);
    assert!(
        p.contains("rbac.authorization.k8s.io/*") && p.contains("refused"),
        "{p}"
    );

    // The webhook secret can be replaced from stdin and removed.
    let out = cli.run_stdin(
        &["gitops", "repo", "webhook-secret", "platform", "--stdin"],
        "a-new-webhook-secret-of-enough-length\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = cli.run(&["gitops", "repo", "webhook-secret", "platform", "--remove"]);
    assert!(stderr(&out).contains("removed"), "{}", stderr(&out));
}

/// `warren space …` as a team admin uses it: a top-level space and one below, a member with
/// a role, spaces listed with the caller's role, a workspace created into a space and listed
/// by it, and an occupied space that cannot be removed.
#[test]
fn cli_manages_spaces() {
    let server = Server::start();
    let tmp = tempfile::tempdir().unwrap();
    let cli = Cli::admin(&server, &tmp.path().join("cli-home"));
    let out = cli.run_stdin(
        &["user", "create", "ann", "--password-stdin"],
        "ann-password-1\n",
    );
    assert!(out.status.success(), "{}", stderr(&out));

    cli.ok(&["space", "create", "acme"]);
    cli.ok(&["space", "create", "acme/platform"]);
    let added = cli.ok(&[
        "space",
        "member",
        "add",
        "acme/platform",
        "ann",
        "--role",
        "viewer",
    ]);
    assert!(added.contains("ann is viewer of acme/platform"), "{added}");
    let members = cli.ok(&["space", "member", "list", "acme/platform"]);
    assert!(
        members.contains("ann") && members.contains("viewer"),
        "{members}"
    );
    let listed = cli.ok(&["space", "list"]);
    for want in ["acme", "acme/platform", "users/admin", "owner"] {
        assert!(listed.contains(want), "{want}: {listed}");
    }
    let bad = cli.run(&["space", "create", "Acme/x"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("segment \"Acme\""),
        "{}",
        stderr(&bad)
    );

    // The admin is the owner of acme (it made it): a workspace goes into acme/platform.
    cli.ok(&["agent", "create", "edge"]);
    cli.ok(&[
        "ws",
        "create",
        "--name",
        "plat",
        "--space",
        "acme/platform",
        "--agent",
        "edge",
    ]);
    let shown = cli.ok(&["ws", "show", "plat", "-o", "json"]);
    let w: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(w["space"], "acme/platform");
    let tree = cli.ok(&["ws", "list", "--space", "acme", "--recursive", "-o", "json"]);
    assert!(tree.contains("\"plat\""), "{tree}");
    let flat = cli.ok(&["ws", "list", "--space", "acme", "-o", "json"]);
    assert!(!flat.contains("\"plat\""), "{flat}");
    // The tree: entries first, then the spaces below, each with the caller's role.
    cli.ok(&["space", "create", "acme/platform/tools"]);
    let drawn = cli.ok(&["ws", "tree", "acme"]);
    let lines: Vec<&str> = drawn.lines().collect();
    assert_eq!(lines.len(), 4, "{drawn}");
    assert_eq!(lines[0], "acme/  [owner]", "{drawn}");
    assert_eq!(lines[1], "└── platform/  [owner]", "{drawn}");
    assert!(
        lines[2].starts_with("    ├── plat  workspace ") && lines[2].contains("owner admin"),
        "{drawn}"
    );
    assert_eq!(lines[3], "    └── tools/  [owner]", "{drawn}");
    let whole = cli.ok(&["ws", "tree"]);
    assert!(
        whole.contains("users/\n") && whole.contains("└── admin/"),
        "an admin's whole tree holds the personal spaces: {whole}"
    );
    let json = cli.ok(&["ws", "tree", "acme/platform", "-o", "json"]);
    let t: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(t["spaces"][0]["entries"][0]["name"], "plat", "{json}");
    let missing = cli.run(&["ws", "tree", "nowhere"]);
    assert!(!missing.status.success());
    assert!(stderr(&missing).contains("nowhere"), "{}", stderr(&missing));
    cli.ok(&["space", "rm", "acme/platform/tools"]);

    // A redirect mount: shown, drawn in the tree, followed by `ws open`.
    let bad = cli.run(&["mount", "create", "m", "--type", "bogus", "--ref", "plat"]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("not a mount type"),
        "{}",
        stderr(&bad)
    );
    cli.ok(&[
        "mount",
        "create",
        "old-plat",
        "--type",
        "redirect",
        "--ref",
        "plat",
        "--space",
        "acme/platform",
    ]);
    let shown = cli.ok(&["mount", "show", "old-plat"]);
    assert!(
        shown.contains("leads to:  plat") && shown.contains("phase:     Ready"),
        "{shown}"
    );
    assert_eq!(
        cli.ok(&["ws", "show", "old-plat"]),
        shown,
        "ws show shows a mount"
    );
    let listed = cli.ok(&["mount", "list"]);
    assert!(
        listed.contains("old-plat") && listed.contains("redirect"),
        "{listed}"
    );
    let drawn = cli.ok(&["ws", "tree", "acme/platform"]);
    assert!(
        drawn.contains("├── old-plat  mount redirect → plat  Ready  owner admin"),
        "{drawn}"
    );
    let open = cli.run(&["ws", "open", "old-plat", "--print"]);
    assert!(
        stderr(&open).contains("old-plat redirects to plat"),
        "{}",
        stderr(&open)
    );
    let plat_open = cli.run(&["ws", "open", "plat", "--print"]);
    assert_eq!(
        String::from_utf8_lossy(&open.stdout),
        String::from_utf8_lossy(&plat_open.stdout),
        "the same address as the target's"
    );
    let out = cli.run(&["space", "rm", "acme/platform"]);
    assert!(stderr(&out).contains("1 mount(s)"), "{}", stderr(&out));
    // Grants and a softlink: the admin manages plat, so needs no grant for its own softlink.
    let granted = cli.ok(&["ws", "grant", "plat", "ann"]);
    assert!(granted.contains("ann"), "{granted}");
    assert!(cli.ok(&["ws", "grants", "plat"]).contains("ann"));
    cli.ok(&["ws", "revoke", "plat", "ann"]);
    assert!(!cli.ok(&["ws", "grants", "plat"]).contains("ann"));
    let again = cli.run(&["ws", "revoke", "plat", "ann"]);
    assert!(!again.status.success(), "nothing left to take back");
    cli.ok(&[
        "mount",
        "create",
        "plat-link",
        "--type",
        "workspace",
        "--ref",
        "plat",
        "--space",
        "acme/platform",
    ]);
    let link = cli.ok(&["mount", "show", "plat-link"]);
    assert!(
        link.contains("type:      workspace") && link.contains("leads to:  plat"),
        "{link}"
    );
    cli.ok(&["mount", "rm", "plat-link"]);
    cli.ok(&["mount", "rm", "old-plat"]);
    let gone = cli.run(&["mount", "show", "old-plat"]);
    assert!(
        stderr(&gone).contains("mount \"old-plat\" not found"),
        "{}",
        stderr(&gone)
    );

    let out = cli.run(&["space", "rm", "acme/platform"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("1 workspace(s)"), "{}", stderr(&out));
    cli.ok(&["space", "member", "rm", "acme/platform", "ann"]);
}
