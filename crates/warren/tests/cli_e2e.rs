//! End to end: the `warren` CLI binary against a real Warren server (SQLite in a temp home,
//! port 0), as a user would drive it: login, agent, project, workspace, list, stop, failures.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tokio_util::sync::CancellationToken;

/// A running server; stopped (and its thread joined) on drop, even when the test fails.
struct Server {
    url: String,
    admin_password: String,
    shutdown: CancellationToken,
    thread: Option<std::thread::JoinHandle<()>>,
    _home: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let home = tempfile::tempdir().unwrap();
        let config = warren_server::config::ServerConfig::new(home.path());
        let shutdown = CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let token = shutdown.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let server = warren_server::Server::prepare(config).await.unwrap();
                let password = server.bootstrap_admin().unwrap().password.clone();
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                let addr = listener.local_addr().unwrap();
                tx.send((format!("http://{addr}"), password)).unwrap();
                server.serve(listener, token).await.unwrap();
            });
        });
        let (url, admin_password) = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the server did not start");
        Server {
            url,
            admin_password,
            shutdown,
            thread: Some(thread),
            _home: home,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `warren ARGS` with its own WARREN_HOME and no inherited WARREN_URL/WARREN_TOKEN.
struct Cli {
    home: PathBuf,
    env: Vec<(String, String)>,
}

impl Cli {
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
