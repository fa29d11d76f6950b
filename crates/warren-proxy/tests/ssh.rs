//! The proxy's SSH server with real OpenSSH clients (`ssh`, `sftp`, `ssh-keygen`,
//! `ssh-keyscan`, `sshpass`) against the in-process stack (warren-testkit): the server
//! decides who may log in, exec runs through relay and agent on the simulated runtime
//! (local processes).
//!
//! Each client runs with `-F /dev/null`, its own known_hosts and `IdentitiesOnly`, so the
//! user's SSH configuration and agent never take part. Without the tools the tests print a
//! notice and pass, unless `WARREN_REQUIRE_TOOLS=1`.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::Command;
use warren_testkit::{Stack, TestUser, TestWorkspace};

/// A hang guard for one client run, not a timing assertion.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(60);

fn tools_present(tools: &[&str]) -> bool {
    let missing: Vec<_> = tools
        .iter()
        .filter(|t| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .stdout(Stdio::null())
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        })
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_TOOLS=1 but these tools are missing: {missing:?}");
    }
    eprintln!("SKIPPED: missing tools {missing:?} (set WARREN_REQUIRE_TOOLS=1 to fail instead)");
    false
}

/// A test's client side: a directory for keys, known_hosts and files.
struct Client {
    dir: tempfile::TempDir,
    addr: SocketAddr,
}

impl Client {
    fn new(addr: SocketAddr) -> Result<Client> {
        Ok(Client {
            dir: tempfile::tempdir()?,
            addr,
        })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A new ed25519 key pair; returns the private key's path.
    async fn keygen(&self, name: &str) -> Result<PathBuf> {
        let path = self.path(name);
        let out = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&path)
            .output()
            .await?;
        if !out.status.success() {
            bail!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(path)
    }

    fn public_key(&self, key: &Path) -> Result<String> {
        let mut p = key.as_os_str().to_owned();
        p.push(".pub");
        Ok(std::fs::read_to_string(p)?.trim().to_owned())
    }

    fn common_args(&self, cmd: &mut Command, strict: bool) {
        cmd.arg("-F")
            .arg("/dev/null")
            .arg("-o")
            .arg(format!(
                "UserKnownHostsFile={}",
                self.path("known_hosts").display()
            ))
            .args([
                "-o",
                if strict {
                    "StrictHostKeyChecking=yes"
                } else {
                    "StrictHostKeyChecking=accept-new"
                },
                "-o",
                "GlobalKnownHostsFile=/dev/null",
                "-o",
                "IdentitiesOnly=yes",
                "-o",
                "IdentityAgent=none",
                "-o",
                "ConnectTimeout=20",
                "-o",
                "LogLevel=ERROR",
            ]);
    }

    /// `ssh` with `key` (publickey only) as `user`; add the remote command and options.
    fn ssh(&self, key: &Path, user: &str) -> Command {
        self.ssh_with(key, user, false)
    }

    fn ssh_with(&self, key: &Path, user: &str, strict: bool) -> Command {
        let mut cmd = Command::new("ssh");
        self.common_args(&mut cmd, strict);
        cmd.args([
            "-o",
            "BatchMode=yes",
            "-o",
            "PreferredAuthentications=publickey",
        ])
        .arg("-i")
        .arg(key)
        .arg("-p")
        .arg(self.addr.port().to_string())
        .arg(format!("{user}@{}", self.addr.ip()));
        cmd
    }

    /// `sshpass -e ssh` with `password` (password authentication only).
    fn ssh_password(&self, password: &str, user: &str) -> Command {
        let mut cmd = Command::new("sshpass");
        cmd.arg("-e").arg("ssh").env("SSHPASS", password);
        self.common_args(&mut cmd, false);
        cmd.args([
            "-o",
            "PreferredAuthentications=password",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "NumberOfPasswordPrompts=1",
        ])
        .arg("-p")
        .arg(self.addr.port().to_string())
        .arg(format!("{user}@{}", self.addr.ip()));
        cmd
    }
}

/// Runs a client with `stdin`, killing it if it hangs.
async fn run(cmd: &mut Command, stdin: &[u8]) -> Result<Output> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("starting the client")?;
    let mut input = child.stdin.take().context("stdin")?;
    let data = stdin.to_vec();
    let writer = tokio::spawn(async move {
        let _ = input.write_all(&data).await;
        drop(input);
    });
    let out = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .context("the client hung")??;
    let _ = writer.await;
    Ok(out)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A stack with exec enabled, a user `alice` with a registered key and a running workspace.
struct World {
    stack: Stack,
    client: Client,
    alice: TestUser,
    key: PathBuf,
    ws: TestWorkspace,
    /// The simulated workspace's file system (exec runs there).
    files: tempfile::TempDir,
}

async fn world(ws_name: &str) -> Result<World> {
    world_with(ws_name, warren_testkit::StackOptions::default()).await
}

async fn world_with(ws_name: &str, options: warren_testkit::StackOptions) -> Result<World> {
    let stack = Stack::start_with(options).await?;
    let files = tempfile::tempdir()?;
    stack.runtime.enable_exec(files.path());
    let client = Client::new(stack.ssh_addr.context("the stack runs SSH")?)?;
    let alice = stack.user("alice").await?;
    let key = client.keygen("alice_key").await?;
    add_key(&stack, &alice, &client.public_key(&key)?).await?;
    let ws = stack.workspace(&alice, ws_name).await?;
    Ok(World {
        stack,
        client,
        alice,
        key,
        ws,
        files,
    })
}

async fn add_key(stack: &Stack, user: &TestUser, public_key: &str) -> Result<()> {
    stack
        .api(
            reqwest::Method::POST,
            "/api/v1/users/me/ssh-keys",
            &user.token,
            Some(json!({ "public_key": public_key })),
        )
        .await
        .map(|_| ())
}

#[tokio::test]
async fn exec_reports_the_exit_code_and_keeps_stdout_and_stderr_apart() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-exec").await?;
    let out = run(w.client.ssh(&w.key, &w.ws.name).arg("exit 7"), b"").await?;
    assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));

    let out = run(
        w.client
            .ssh(&w.key, &w.ws.name)
            .arg("echo out; echo err >&2; exit 0"),
        b"",
    )
    .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "out\n");
    assert_eq!(text(&out.stderr), "err\n");
    Ok(())
}

#[tokio::test]
async fn shell_with_a_pty_runs_commands_and_exits_with_their_status() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-shell").await?;
    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.arg("-tt").env("TERM", "xterm-warren-test");
    let out = run(&mut cmd, b"echo hi; echo \"term=$TERM\"; exit 3\n").await?;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "stdout: {stdout}");
    assert!(stdout.contains("hi"), "{stdout}");
    assert!(stdout.contains("term=xterm-warren-test"), "{stdout}");
    Ok(())
}

#[tokio::test]
async fn stdin_reaches_the_process_and_env_requests_are_passed_on() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-stdin").await?;
    // More than any window or buffer on the way, so backpressure is exercised.
    let data: Vec<u8> = (0..3 * 1024 * 1024u32).map(|i| (i % 251) as u8).collect();
    let out = run(w.client.ssh(&w.key, &w.ws.name).arg("cat"), &data).await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        out.stdout == data,
        "cat returned {} bytes",
        out.stdout.len()
    );

    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.args([
        "-o",
        "SetEnv=LANG=C.UTF-8 LC_WARREN=yes",
        "echo \"$LANG/$LC_WARREN\"",
    ]);
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "C.UTF-8/yes\n");
    Ok(())
}

#[tokio::test]
async fn sftp_puts_and_gets_a_file() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen", "sftp"]) {
        return Ok(());
    }
    let has_server = [
        "/usr/lib/openssh/sftp-server",
        "/usr/libexec/openssh/sftp-server",
        "/usr/lib/ssh/sftp-server",
        "/usr/libexec/sftp-server",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if !has_server {
        if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
            panic!("WARREN_REQUIRE_TOOLS=1 but no sftp-server is installed (openssh-sftp-server)");
        }
        eprintln!("SKIPPED: no sftp-server (Debian: openssh-sftp-server)");
        return Ok(());
    }
    let w = world("alice-sftp").await?;
    let local = w.client.path("upload.bin");
    let payload: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 256) as u8).collect();
    std::fs::write(&local, &payload)?;
    let back = w.client.path("download.bin");
    let batch = w.client.path("batch");
    std::fs::write(
        &batch,
        format!(
            "put {} remote.bin\nget remote.bin {}\n",
            local.display(),
            back.display()
        ),
    )?;
    let mut cmd = Command::new("sftp");
    w.client.common_args(&mut cmd, false);
    cmd.args([
        "-o",
        "BatchMode=yes",
        "-o",
        "PreferredAuthentications=publickey",
    ])
    .arg("-i")
    .arg(&w.key)
    .arg("-P")
    .arg(w.client.addr.port().to_string())
    .arg("-b")
    .arg(&batch)
    .arg(format!("{}@{}", w.ws.name, w.client.addr.ip()));
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(std::fs::read(w.files.path().join("remote.bin"))? == payload);
    assert!(std::fs::read(&back)? == payload);
    Ok(())
}

/// An upstream that answers every connection with `hello\n` and then echoes.
async fn echo_upstream() -> Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"hello\n").await;
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    Ok(addr)
}

#[tokio::test]
async fn local_forwarding_reaches_a_workspace_port_and_nothing_else() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-fwd").await?;
    let upstream = echo_upstream().await?;
    w.stack.set_endpoint(&w.ws, 8080, upstream);

    // `-W`: stdio forwarding, a direct-tcpip channel without a local port.
    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.args(["-W", "localhost:8080"]);
    let out = run(&mut cmd, b"ping\n").await?;
    assert_eq!(
        text(&out.stdout),
        "hello\nping\n",
        "stderr: {}",
        text(&out.stderr)
    );

    // `-L` on a local port (found by binding port 0 and letting it go).
    let local_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.args(["-N", "-o", "ExitOnForwardFailure=yes", "-L"])
        .arg(format!("127.0.0.1:{local_port}:127.0.0.1:8080"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut forwarder = cmd.spawn()?;
    // Poll until ssh listens (a hang guard, not a timing check).
    let deadline = tokio::time::Instant::now() + CLIENT_TIMEOUT;
    let mut conn = loop {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", local_port)).await {
            break s;
        }
        if let Ok(Some(status)) = forwarder.try_wait() {
            bail!("ssh -L exited with {status}");
        }
        if tokio::time::Instant::now() > deadline {
            bail!("ssh -L never listened");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    conn.write_all(b"via -L\n").await?;
    let mut got = vec![0u8; "hello\nvia -L\n".len()];
    tokio::time::timeout(CLIENT_TIMEOUT, conn.read_exact(&mut got)).await??;
    assert_eq!(text(&got), "hello\nvia -L\n");
    drop(conn);
    let _ = forwarder.start_kill();
    let _ = forwarder.wait().await;

    // Another host is refused: the channel never opens.
    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.args(["-W", "example.com:80"]);
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(
        text(&out.stderr).contains("forwarding failed"),
        "stderr: {}",
        text(&out.stderr)
    );
    Ok(())
}

/// A forward whose workspace side says its piece and closes, while the client still has
/// input open (`ssh -W` under an editor's ProxyCommand): the channel is closed both ways and
/// the client exits. With russh 0.54 the proxy never answered the client's own close, and
/// `warren ws ssh` now and then hung after its session ended (issue 38).
#[tokio::test]
async fn a_forward_the_workspace_closes_first_ends_and_the_client_exits() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-bye").await?;
    let l = TcpListener::bind("127.0.0.1:0").await?;
    let upstream = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let _ = s.write_all(b"bye\n").await;
        }
    });
    w.stack.set_endpoint(&w.ws, 8080, upstream);
    for _ in 0..3 {
        let mut cmd = w.client.ssh(&w.key, &w.ws.name);
        cmd.args(["-W", "localhost:8080"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().context("starting ssh")?;
        // Held open until ssh has exited: only the workspace's side ends the forward.
        let input = child.stdin.take().context("stdin")?;
        let out = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
            .await
            .context("ssh did not end after the workspace closed the forward")??;
        drop(input);
        assert_eq!(text(&out.stdout), "bye\n", "stderr: {}", text(&out.stderr));
        assert!(
            out.status.success(),
            "{:?}: {}",
            out.status,
            text(&out.stderr)
        );
    }
    Ok(())
}

#[tokio::test]
async fn password_is_a_personal_access_token_and_a_revoked_one_is_refused() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen", "sshpass"]) {
        return Ok(());
    }
    let w = world("alice-pat").await?;
    let created = w
        .stack
        .api(
            reqwest::Method::POST,
            "/api/v1/users/me/tokens",
            &w.alice.token,
            Some(json!({"name": "ssh", "scopes": ["workspace"]})),
        )
        .await?;
    let secret = created["secret"].as_str().context("secret")?.to_owned();
    let id = created["token"]["id"].as_i64().context("token id")?;

    let mut cmd = w.client.ssh_password(&secret, &w.ws.name);
    cmd.arg("exit 5");
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));

    // A wrong password is refused like anything else.
    let mut cmd = w.client.ssh_password("wrn_pat_not-a-token", &w.ws.name);
    cmd.arg("exit 5");
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Permission denied"));

    w.stack
        .api(
            reqwest::Method::DELETE,
            &format!("/api/v1/users/me/tokens/{id}"),
            &w.alice.token,
            None,
        )
        .await?;
    let mut cmd = w.client.ssh_password(&secret, &w.ws.name);
    cmd.arg("exit 5");
    let out = run(&mut cmd, b"").await?;
    assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("Permission denied"));
    Ok(())
}

#[tokio::test]
async fn unknown_keys_and_other_users_keys_are_refused() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-keys").await?;
    let stranger = w.client.keygen("stranger_key").await?;
    let out = run(w.client.ssh(&stranger, &w.ws.name).arg("true"), b"").await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(
        text(&out.stderr).contains("Permission denied"),
        "{}",
        text(&out.stderr)
    );

    // Bob's key opens Bob's workspace, not Alice's; and Alice's key not Bob's.
    let bob = w.stack.user("bob").await?;
    let bob_key = w.client.keygen("bob_key").await?;
    add_key(&w.stack, &bob, &w.client.public_key(&bob_key)?).await?;
    let bob_ws = w.stack.workspace(&bob, "bob-keys").await?;
    let out = run(w.client.ssh(&bob_key, &bob_ws.name).arg("exit 4"), b"").await?;
    assert_eq!(out.status.code(), Some(4), "stderr: {}", text(&out.stderr));
    let out = run(w.client.ssh(&bob_key, &w.ws.name).arg("true"), b"").await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("Permission denied"));
    let out = run(w.client.ssh(&w.key, &bob_ws.name).arg("true"), b"").await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("Permission denied"));

    // A workspace that does not exist looks exactly the same.
    let out = run(w.client.ssh(&w.key, "no-such-workspace").arg("true"), b"").await?;
    assert_eq!(out.status.code(), Some(255));
    assert!(text(&out.stderr).contains("Permission denied"));
    Ok(())
}

#[tokio::test]
async fn a_stopped_workspace_says_so_and_exits_1() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-stopped").await?;
    w.stack.set_desired(&w.alice, &w.ws.name, "Stopped").await?;
    w.stack.wait_state(&w.alice, &w.ws.name, "Stopped").await?;
    let out = run(
        w.client.ssh(&w.key, &w.ws.name).arg("echo should-not-run"),
        b"",
    )
    .await?;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "workspace alice-stopped is stopped; start it with `warren ws start alice-stopped`"
        ),
        "{stderr}"
    );
    Ok(())
}

/// A second proxy (SSH only matters) on the stack, with a state directory the test keeps.
async fn extra_proxy(
    stack: &Stack,
    state_dir: &Path,
) -> Result<(
    SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    extra_proxy_with(stack.another_proxy(state_dir.to_owned())?).await
}

/// A second proxy of `config`.
async fn extra_proxy_with(
    config: warren_proxy::ProxyConfig,
) -> Result<(
    SocketAddr,
    tokio_util::sync::CancellationToken,
    tokio::task::JoinHandle<()>,
)> {
    let http = TcpListener::bind("127.0.0.1:0").await?;
    let ssh = TcpListener::bind("127.0.0.1:0").await?;
    let addr = ssh.local_addr()?;
    let stop = tokio_util::sync::CancellationToken::new();
    let task = tokio::spawn({
        let stop = stop.clone();
        async move {
            let listeners = warren_proxy::ProxyListeners {
                http,
                ssh: Some(ssh),
                metrics: None,
            };
            if let Err(e) = warren_proxy::run(config, listeners, stop).await {
                eprintln!("extra proxy stopped: {e}");
            }
        }
    });
    Ok((addr, stop, task))
}

/// Every replica shows the same host key, the one the server publishes, across restarts and
/// with nothing in its own state directory: a client's `known_hosts` entry holds whichever
/// replica answers. A configured host key file is each replica's own, and a corrupt one is a
/// startup error that leaves the file alone.
#[tokio::test]
async fn every_replica_and_restart_shows_the_same_host_key() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-hostkey").await?;
    let published = w
        .stack
        .api(reqwest::Method::GET, "/api/v1/access", &w.alice.token, None)
        .await?;
    let published: Vec<String> = published["ssh"]["host_keys"]
        .as_array()
        .context("host keys")?
        .iter()
        .map(|k| k.as_str().unwrap_or_default().to_owned())
        .collect();

    let state = tempfile::tempdir()?;
    let (addr, stop, task) = extra_proxy(&w.stack, state.path()).await?;
    let client = Client::new(addr)?;
    let out = run(client.ssh(&w.key, &w.ws.name).arg("exit 6"), b"").await?;
    assert_eq!(out.status.code(), Some(6), "stderr: {}", text(&out.stderr));
    let known = std::fs::read_to_string(client.path("known_hosts"))?;
    let shown = known
        .split_whitespace()
        .skip(1)
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(published.contains(&shown), "{shown} not in {published:?}");
    stop.cancel();
    task.await?;
    assert!(
        !state.path().join("ssh_host_ed25519_key").exists(),
        "a replica keeps no host key of its own"
    );

    // The stack's own proxy and a restarted replica (another empty state directory) pass
    // strict checking with the entry the first replica left, moved to their ports.
    let state2 = tempfile::tempdir()?;
    let (addr2, stop, task) = extra_proxy(&w.stack, state2.path()).await?;
    for other in [addr2, w.stack.ssh_addr.context("ssh")?] {
        let client2 = Client::new(other)?;
        let moved = known.replace(
            &format!("]:{} ", addr.port()),
            &format!("]:{} ", other.port()),
        );
        assert_ne!(moved, known, "the entry names the port");
        std::fs::write(client2.path("known_hosts"), moved)?;
        let out = run(
            client2.ssh_with(&w.key, &w.ws.name, true).arg("exit 6"),
            b"",
        )
        .await?;
        assert_eq!(out.status.code(), Some(6), "{other}: {}", text(&out.stderr));
    }
    stop.cancel();
    task.await?;

    // A corrupt configured key is a startup error, and the file is left alone.
    let key_file = state.path().join("configured_host_key");
    std::fs::write(&key_file, b"garbage")?;
    let mut config = w.stack.another_proxy(state.path().to_owned())?;
    config.ssh_host_key_file = Some(key_file.clone());
    let (_addr3, _stop, task) = extra_proxy_with(config).await?;
    tokio::time::timeout(CLIENT_TIMEOUT, task).await??;
    assert_eq!(std::fs::read(&key_file)?, b"garbage");
    Ok(())
}

/// Accepts any host key (the test talks to its own proxy).
struct TrustingClient;

impl russh::client::Handler for TrustingClient {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

/// OpenSSH's client resizes only from a real terminal, so russh's client sends the
/// `window-change`; the exec on the agent's side sees the initial size and the new one.
#[tokio::test]
async fn window_change_resizes_the_terminal_and_several_channels_share_a_connection() -> Result<()>
{
    if !tools_present(&["ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-resize").await?;
    let session = signed_in(&w).await?;

    let mut tty = session.channel_open_session().await?;
    tty.request_pty(true, "xterm", 90, 30, 0, 0, &[]).await?;
    tty.exec(true, "cat").await?;
    tty.window_change(132, 43, 0, 0).await?;
    let want = [
        warren_types::relay::TerminalSize { cols: 90, rows: 30 },
        warren_types::relay::TerminalSize {
            cols: 132,
            rows: 43,
        },
    ];
    let runtime = w.stack.runtime.clone();
    warren_testkit::wait_for("both terminal sizes", 30, || {
        let runtime = runtime.clone();
        async move { runtime.exec_resizes().ends_with(&want) }
    })
    .await?;

    // A second channel on the same connection, while the first is still open.
    let mut second = session.channel_open_session().await?;
    second.exec(true, "echo second; exit 9").await?;
    let (out, code) = drain(&mut second).await?;
    assert_eq!(text(&out), "second\n");
    assert_eq!(code, Some(9));

    // The first still works: what goes in comes back, EOF ends it with status 0.
    tty.data(&b"still here\n"[..]).await?;
    tty.eof().await?;
    let (out, code) = drain(&mut tty).await?;
    // A terminal's line discipline turns the echoed LF into CRLF.
    assert_eq!(text(&out), "still here\r\n");
    assert_eq!(code, Some(0));
    Ok(())
}

/// A russh client connection to `w`'s workspace, signed in with its key.
async fn signed_in(w: &World) -> Result<russh::client::Handle<TrustingClient>> {
    let key = russh::keys::load_secret_key(&w.key, None)?;
    let mut session = russh::client::connect(
        std::sync::Arc::new(russh::client::Config::default()),
        w.client.addr,
        TrustingClient,
    )
    .await?;
    let auth = session
        .authenticate_publickey(
            w.ws.name.clone(),
            russh::keys::PrivateKeyWithHashAlg::new(std::sync::Arc::new(key), None),
        )
        .await?;
    assert!(auth.success());
    Ok(session)
}

/// Reads a channel to its end: everything it sent as data, and its exit status.
async fn drain(
    channel: &mut russh::Channel<russh::client::Msg>,
) -> anyhow::Result<(Vec<u8>, Option<u32>)> {
    let mut out = Vec::new();
    let mut code = None;
    while let Some(msg) = tokio::time::timeout(CLIENT_TIMEOUT, channel.wait()).await? {
        match msg {
            russh::ChannelMsg::Data { data } => out.extend_from_slice(&data),
            russh::ChannelMsg::ExitStatus { exit_status } => code = Some(exit_status),
            _ => {}
        }
    }
    Ok((out, code))
}

fn alive(pid: &str) -> bool {
    std::process::Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Closing the connection ends what it started: the process in the workspace goes away.
#[tokio::test]
async fn a_closed_connection_ends_its_processes() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-cleanup").await?;
    let mut cmd = w.client.ssh(&w.key, &w.ws.name);
    cmd.arg("echo $$ > pid.txt; exec sleep 600")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn()?;
    let pid_file = w.files.path().join("pid.txt");
    let files = pid_file.clone();
    warren_testkit::wait_for("the remote process", 30, || {
        let f = files.clone();
        async move {
            std::fs::read_to_string(&f)
                .map(|s| !s.trim().is_empty())
                .unwrap_or(false)
        }
    })
    .await?;
    let pid = std::fs::read_to_string(&pid_file)?.trim().to_owned();
    assert!(alive(&pid));
    child.start_kill()?;
    child.wait().await?;
    warren_testkit::wait_for("the remote process to end", 30, || {
        let pid = pid.clone();
        async move { !alive(&pid) }
    })
    .await?;
    Ok(())
}

/// Issue 41, item 7: an interactive shell is told, on its stderr, ten minutes before a timer
/// stops the workspace (here the agent's idle timeout of ten minutes: at once); a command
/// session is not.
#[tokio::test]
async fn an_interactive_shell_is_warned_of_the_planned_stop() -> Result<()> {
    if !tools_present(&["ssh-keygen"]) {
        return Ok(());
    }
    let w = world("alice-warned").await?;
    let admin = w.stack.admin.token.clone();
    let agent = w
        .stack
        .api(reqwest::Method::GET, "/api/v1/agents/local", &admin, None)
        .await?;
    let mut config = agent["config"].clone();
    config["lifecycle"]["idle_timeout_minutes"] = json!(10);
    w.stack
        .api(
            reqwest::Method::PUT,
            "/api/v1/agents/local",
            &admin,
            Some(json!({ "config": config })),
        )
        .await?;
    let session = signed_in(&w).await?;
    let mut shell = session.channel_open_session().await?;
    shell.request_pty(true, "xterm", 80, 24, 0, 0, &[]).await?;
    shell.request_shell(true).await?;
    let mut warned = String::new();
    while !warned.contains("[warren] This workspace stops in") {
        match tokio::time::timeout(CLIENT_TIMEOUT, shell.wait()).await? {
            Some(russh::ChannelMsg::ExtendedData { data, ext: 1 }) => warned.push_str(&text(&data)),
            Some(_) => {}
            None => anyhow::bail!("the shell ended before the warning: {warned}"),
        }
    }
    assert!(warned.contains("idle timeout"), "{warned}");
    shell.data(&b"exit 4\n"[..]).await?;
    let (_, code) = drain(&mut shell).await?;
    assert_eq!(code, Some(4));

    // A command (what an editor runs) gets only its own output.
    let mut command = session.channel_open_session().await?;
    command.exec(true, "echo plain").await?;
    let mut stderr = Vec::new();
    let mut stdout = Vec::new();
    while let Some(msg) = tokio::time::timeout(CLIENT_TIMEOUT, command.wait()).await? {
        match msg {
            russh::ChannelMsg::Data { data } => stdout.extend_from_slice(&data),
            russh::ChannelMsg::ExtendedData { data, .. } => stderr.extend_from_slice(&data),
            _ => {}
        }
    }
    assert_eq!(
        (text(&stdout), text(&stderr)),
        ("plain\n".to_owned(), String::new())
    );
    Ok(())
}

/// Issue 42: an SSH session through replica A ends when A is killed; connecting again — what
/// VS Code Remote-SSH does by itself, and a user with the same command — reaches replica B
/// with the same pinned host key (strict checking) and the same key.
#[tokio::test]
async fn a_session_cut_by_a_killed_replica_connects_again_through_another() -> Result<()> {
    if !tools_present(&["ssh", "ssh-keygen"]) {
        return Ok(());
    }
    let w = world_with(
        "alice-replicas",
        warren_testkit::StackOptions {
            proxies: 2,
            ..warren_testkit::StackOptions::default()
        },
    )
    .await?;
    let steer = w
        .stack
        .proxy_balancers
        .clone()
        .and_then(|b| b.1)
        .context("an SSH balancer")?;
    steer.prefer(Some(0));
    let out = run(w.client.ssh(&w.key, &w.ws.name).arg("exit 6"), b"").await?;
    assert_eq!(out.status.code(), Some(6), "stderr: {}", text(&out.stderr));

    // A long session on replica A.
    let mut long = w.client.ssh(&w.key, &w.ws.name);
    long.arg("echo started; sleep 600")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = long.spawn()?;
    let mut stdout = child.stdout.take().context("stdout")?;
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !text(&seen).contains("started") {
        let n = tokio::time::timeout(CLIENT_TIMEOUT, stdout.read(&mut buf)).await??;
        if n == 0 {
            bail!("the session ended before it started: {}", text(&seen));
        }
        seen.extend_from_slice(&buf[..n]);
    }
    steer.prefer(None);
    w.stack.kill_proxy(0);
    let status = tokio::time::timeout(CLIENT_TIMEOUT, child.wait()).await??;
    assert!(!status.success(), "the cut session ends: {status}");

    // Again, with strict host key checking: replica B answers as A did.
    let out = run(
        w.client.ssh_with(&w.key, &w.ws.name, true).arg("exit 7"),
        b"",
    )
    .await?;
    assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));
    let taken = steer.connections();
    assert!(taken[1] > 0, "replica B took the new connection: {taken:?}");
    Ok(())
}
