//! `warren ws ssh` and `warren ws ssh-config` (the binary) against the in-process stack
//! (warren-testkit) with its proxy's SSH server; OpenSSH's `ssh` does the connecting.
//!
//! The binary runs with its own `HOME` and `WARREN_HOME`; `WARREN_SSH` points at a wrapper
//! that gives ssh `-F /dev/null`, a private known_hosts and the test's key, so the user's SSH
//! setup never takes part. Without OpenSSH the tests print a notice and pass, unless
//! `WARREN_REQUIRE_TOOLS=1`.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::process::Command;
use warren_testkit::{Stack, TestUser};

fn tools_present() -> bool {
    let ok = ["ssh", "ssh-keygen"].iter().all(|t| {
        std::process::Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    });
    if ok {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_TOOLS=1 but ssh or ssh-keygen is missing");
    }
    eprintln!("SKIPPED: OpenSSH client tools missing (set WARREN_REQUIRE_TOOLS=1 to fail instead)");
    false
}

struct Env {
    stack: Stack,
    alice: TestUser,
    home: tempfile::TempDir,
    ssh_wrapper: PathBuf,
}

async fn env() -> Result<Env> {
    env_with(warren_testkit::StackOptions::default()).await
}

async fn env_with(options: warren_testkit::StackOptions) -> Result<Env> {
    let stack = Stack::start_with(options).await?;
    stack.runtime.enable_exec(std::env::temp_dir());
    let alice = stack.user("alice").await?;
    let home = tempfile::tempdir()?;
    let key = home.path().join("id_test");
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&key)
        .output()
        .await?;
    if !out.status.success() {
        bail!("ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
    }
    let public = std::fs::read_to_string(home.path().join("id_test.pub"))?;
    stack
        .api(
            reqwest::Method::POST,
            "/api/v1/users/me/ssh-keys",
            &alice.token,
            Some(json!({ "public_key": public.trim() })),
        )
        .await?;
    let ssh_wrapper = home.path().join("ssh-wrapper");
    std::fs::write(
        &ssh_wrapper,
        format!(
            "#!/bin/sh\nexec ssh -F /dev/null -o UserKnownHostsFile={kh} -o GlobalKnownHostsFile=/dev/null \
             -o StrictHostKeyChecking=accept-new -o IdentitiesOnly=yes -o IdentityAgent=none \
             -o BatchMode=yes -o LogLevel=ERROR -i {key} \"$@\"\n",
            kh = home.path().join("known_hosts").display(),
            key = key.display()
        ),
    )?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ssh_wrapper, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(Env {
        stack,
        alice,
        home,
        ssh_wrapper,
    })
}

impl Env {
    async fn warren(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(args)
            .env("HOME", self.home.path())
            .env("WARREN_HOME", self.home.path().join("warren"))
            .env("WARREN_URL", &self.stack.api_url)
            .env("WARREN_TOKEN", &self.alice.token)
            .env("WARREN_SSH", &self.ssh_wrapper)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        tokio::time::timeout(Duration::from_secs(60), cmd.output())
            .await
            .context("warren hung")?
            .context("running warren")
    }

    fn ssh_dir(&self) -> PathBuf {
        self.home.path().join(".ssh")
    }
}

/// OpenSSH with Warren's written config alone, as an IDE runs it: the block's own key and
/// pinned host keys, no agent, no questions.
fn ide_ssh(config: &std::path::Path) -> Command {
    let mut cmd = Command::new("ssh");
    cmd.arg("-F").arg(config).args([
        "-o",
        "BatchMode=yes",
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        "IdentityAgent=none",
    ]);
    cmd
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_ssh_runs_the_command_and_returns_its_exit_code() -> Result<()> {
    if !tools_present() {
        return Ok(());
    }
    let e = env().await?;
    e.stack.workspace(&e.alice, "alice-cli").await?;
    let out = e
        .warren(&["ws", "ssh", "alice-cli", "--", "exit", "7"])
        .await?;
    assert_eq!(out.status.code(), Some(7), "stderr: {}", text(&out.stderr));
    let out = e
        .warren(&["ws", "ssh", "alice-cli", "--", "echo", "hello from $0"])
        .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello from /bin/sh\n");

    // Both sessions are in the audit log, read by their owner with the CLI: opened and closed,
    // by alice, from the loopback address, what ran (the program, never its arguments) and
    // how long. The proxy reports them every second.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let entries = loop {
        let out = e
            .warren(&[
                "audit",
                "list",
                "--target",
                "alice-cli",
                "--action",
                "ssh.*",
                "-o",
                "json",
            ])
            .await?;
        assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
        let entries: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout)?;
        if entries.len() >= 4 {
            break entries;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "audit entries: {entries:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(entries.len(), 4, "{entries:#?}");
    for en in &entries {
        assert_eq!(en["actor"], "alice", "{en}");
        assert_eq!(en["source"], "127.0.0.1", "{en}");
        assert_eq!(en["channel"], "ssh", "{en}");
        assert!(en["detail"].as_str().unwrap().starts_with("exec "), "{en}");
        assert!(!en["detail"].as_str().unwrap().contains("hello"), "{en}");
    }
    let closed = entries
        .iter()
        .filter(|e| e["action"] == "ssh.close")
        .count();
    assert_eq!(closed, 2, "{entries:#?}");

    // No ssh program: a clear error, not a panic.
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
    cmd.args(["ws", "ssh", "alice-cli"])
        .env("HOME", e.home.path())
        .env("WARREN_HOME", e.home.path().join("warren"))
        .env("WARREN_URL", &e.stack.api_url)
        .env("WARREN_TOKEN", &e.alice.token)
        .env("WARREN_SSH", "/nonexistent/ssh")
        .stdin(Stdio::null());
    let out = cmd.output().await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("was not found"),
        "{}",
        text(&out.stderr)
    );

    // An unknown workspace is named.
    let out = e.warren(&["ws", "ssh", "nope"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_ssh_config_prints_blocks_and_writes_them_once() -> Result<()> {
    if !tools_present() {
        return Ok(());
    }
    let e = env().await?;
    e.stack.workspace(&e.alice, "alice-one").await?;
    e.stack.workspace(&e.alice, "alice-two").await?;
    let bob = e.stack.user("bob").await?;
    e.stack.workspace(&bob, "bob-ws").await?;
    let addr = e.stack.ssh_addr.context("ssh")?;

    let out = e.warren(&["ws", "ssh-config"]).await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let printed = text(&out.stdout);
    let block = |n: &str| {
        format!(
            "Host warren-{n}\n    HostName {}\n    Port {}\n    User {n}\n",
            addr.ip(),
            addr.port()
        )
    };
    assert!(printed.contains(&block("alice-one")), "{printed}");
    assert!(printed.contains(&block("alice-two")), "{printed}");
    assert!(!printed.contains("bob-ws"), "{printed}");

    // Printed blocks pin the published host key too: pasted as they are, they never fall
    // back to trust on first use.
    let known_hosts = e.ssh_dir().join("warren_known_hosts");
    let pin = format!(
        "    UserKnownHostsFile {}\n    StrictHostKeyChecking yes\n",
        known_hosts.display()
    );
    // …and name the CLI's own key (made and registered by the first command above).
    let identity = format!(
        "    IdentityFile {}\n    IdentitiesOnly yes\n",
        e.home.path().join("warren/ssh/id_ed25519_alice").display()
    );
    let out = e.warren(&["ws", "ssh-config", "alice-two"]).await?;
    assert_eq!(
        text(&out.stdout),
        format!("{}{pin}{identity}", block("alice-two"))
    );
    assert!(
        std::fs::read_to_string(&known_hosts)?.contains(&format!(
            "[{}]:{}",
            addr.ip(),
            addr.port()
        )),
        "the key the blocks name is on file"
    );

    // --write: the user's own config keeps its content and gains one Include.
    std::fs::create_dir_all(e.ssh_dir())?;
    std::fs::write(e.ssh_dir().join("config"), "Host example\n    User me\n")?;
    let out = e.warren(&["ws", "ssh-config", "--write"]).await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let config = std::fs::read_to_string(e.ssh_dir().join("config"))?;
    let written = std::fs::read_to_string(e.ssh_dir().join("warren.config"))?;
    assert_eq!(
        config.matches("Include warren.config").count(),
        1,
        "{config}"
    );
    assert!(config.ends_with("Host example\n    User me\n"), "{config}");
    assert!(written.contains(&block("alice-one")) && written.contains(&block("alice-two")));

    let out = e.warren(&["ws", "ssh-config", "--write"]).await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(e.ssh_dir().join("config"))?, config);
    assert_eq!(
        std::fs::read_to_string(e.ssh_dir().join("warren.config"))?,
        written
    );

    // OpenSSH reads the blocks as intended.
    let out = Command::new("ssh")
        .arg("-G")
        .arg("-F")
        .arg(e.ssh_dir().join("warren.config"))
        .arg("warren-alice-one")
        .output()
        .await?;
    let resolved = text(&out.stdout);
    assert!(resolved.contains("\nuser alice-one\n"), "{resolved}");
    assert!(
        resolved.contains(&format!("\nport {}\n", addr.port())),
        "{resolved}"
    );
    assert!(
        resolved.contains(&format!("\nhostname {}\n", addr.ip())),
        "{resolved}"
    );

    // And through them, a real login (the wrapper adds key and known_hosts).
    let out = Command::new(&e.ssh_wrapper)
        .arg("-F")
        .arg(e.ssh_dir().join("warren.config"))
        .args(["warren-alice-one", "exit 4"])
        .stdin(Stdio::null())
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(4), "stderr: {}", text(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ssh_on_the_server_both_commands_say_so() -> Result<()> {
    let stack = Stack::start_with(warren_testkit::StackOptions {
        ssh: false,
        ..Default::default()
    })
    .await?;
    let alice = stack.user("alice").await?;
    stack.workspace(&alice, "alice-nossh").await?;
    let home = tempfile::tempdir()?;
    for args in [
        &["ws", "ssh", "alice-nossh"][..],
        &["ws", "ssh-config", "--write"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(args)
            .env("HOME", home.path())
            .env("WARREN_HOME", home.path().join("warren"))
            .env("WARREN_URL", &stack.api_url)
            .env("WARREN_TOKEN", &alice.token)
            .env("WARREN_SSH", "/nonexistent/ssh")
            .stdin(Stdio::null())
            .output()
            .await?;
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert!(
            text(&out.stderr).contains("offers no SSH"),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert!(!home.path().join(".ssh").exists(), "nothing was written");
    Ok(())
}

/// The server publishes the proxy's host key and the CLI pins it: with OpenSSH in batch mode
/// (no prompt could accept an unknown key) and no known_hosts of the test's own, `warren ws
/// ssh` and the blocks `ssh-config --write` writes connect; a different key on file for that
/// host is refused as a changed host key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_published_host_key_is_pinned_without_trust_on_first_use() -> Result<()> {
    if !tools_present() {
        return Ok(());
    }
    let e = env().await?;
    e.stack.workspace(&e.alice, "alice-pin").await?;
    let addr = e.stack.ssh_addr.context("ssh")?;
    // Like the usual wrapper, minus the known_hosts options: the CLI's are the only ones.
    let strict = e.home.path().join("ssh-strict");
    std::fs::write(
        &strict,
        format!(
            "#!/bin/sh\nexec ssh -o GlobalKnownHostsFile=/dev/null -o IdentitiesOnly=yes \
             -o IdentityAgent=none -o BatchMode=yes -o LogLevel=ERROR -i {key} \"$@\"\n",
            key = e.home.path().join("id_test").display()
        ),
    )?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&strict, std::fs::Permissions::from_mode(0o755))?;
    }
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
    cmd.args(["ws", "ssh", "alice-pin", "--", "exit", "5"])
        .env("HOME", e.home.path())
        .env("WARREN_HOME", e.home.path().join("warren"))
        .env("WARREN_URL", &e.stack.api_url)
        .env("WARREN_TOKEN", &e.alice.token)
        .env("WARREN_SSH", &strict)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output()).await??;
    assert_eq!(out.status.code(), Some(5), "stderr: {}", text(&out.stderr));
    let known = e.ssh_dir().join("warren_known_hosts");
    let pinned = std::fs::read_to_string(&known)?;
    let host = format!("[{}]:{}", addr.ip(), addr.port());
    assert!(
        pinned.starts_with(&format!("{host} ssh-ed25519 ")),
        "{pinned}"
    );

    // The written blocks pin the same file.
    let out = e
        .warren(&["ws", "ssh-config", "--write", "alice-pin"])
        .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let config = e.ssh_dir().join("warren.config");
    let out = Command::new(&strict)
        .arg("-F")
        .arg(&config)
        .args(["warren-alice-pin", "exit 6"])
        .stdin(Stdio::null())
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(6), "stderr: {}", text(&out.stderr));

    // Another key on file for this host: refused, nothing runs.
    let other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGBkR0J1uFYPqFmGFbPhWSIsyfMvQU3oHYW3MOnX0UaL";
    std::fs::write(&known, format!("{host} {other}\n"))?;
    let out = Command::new(&strict)
        .arg("-F")
        .arg(&config)
        .args(["warren-alice-pin", "exit 6"])
        .stdin(Stdio::null())
        .output()
        .await?;
    assert_eq!(
        out.status.code(),
        Some(255),
        "stderr: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("Host key verification failed"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

/// Right after `warren up`, with no key registered and none of the user's own offered: the
/// first `warren ws ssh` makes the CLI's key, registers it (saying so) and logs in; the next
/// one uses it as it is; without `ssh-keygen` the CLI says how to go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ws_ssh_works_on_first_use_with_the_clis_own_key() -> Result<()> {
    if !tools_present() {
        return Ok(());
    }
    let e = env().await?;
    let bob = e.stack.user("bob").await?;
    e.stack.workspace(&bob, "bob-first").await?;
    // No key of the test's: only what the CLI gives ssh.
    let bare = e.home.path().join("ssh-bare");
    std::fs::write(
        &bare,
        format!(
            "#!/bin/sh\nexec ssh -F /dev/null -o UserKnownHostsFile={kh} -o GlobalKnownHostsFile=/dev/null \
             -o StrictHostKeyChecking=accept-new -o IdentityAgent=none -o BatchMode=yes -o LogLevel=ERROR \"$@\"\n",
            kh = e.home.path().join("known_hosts").display()
        ),
    )?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&bare, std::fs::Permissions::from_mode(0o755))?;
    }
    let home = tempfile::tempdir()?;
    let run = |keygen: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(["ws", "ssh", "bob-first", "--", "echo", "in"])
            .env("HOME", home.path())
            .env("WARREN_HOME", home.path().join("warren"))
            .env("WARREN_URL", &e.stack.api_url)
            .env("WARREN_TOKEN", &bob.token)
            .env("WARREN_SSH", &bare)
            .env("WARREN_SSH_KEYGEN", keygen)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        async move {
            tokio::time::timeout(Duration::from_secs(60), cmd.output())
                .await
                .context("warren hung")?
                .context("running warren")
        }
    };

    // Without ssh-keygen: refused as before, and the CLI says what to do.
    let out = run("/nonexistent/ssh-keygen").await?;
    assert_eq!(out.status.code(), Some(255), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("warren ssh-key add"),
        "{}",
        text(&out.stderr)
    );

    let out = run("ssh-keygen").await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "in\n");
    let key = home.path().join("warren/ssh/id_ed25519_bob");
    assert!(
        text(&out.stderr).contains(&format!("registered the CLI's SSH key {}", key.display())),
        "{}",
        text(&out.stderr)
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&key)?.permissions().mode() & 0o777, 0o600);
        let dir = key.parent().unwrap();
        assert_eq!(std::fs::metadata(dir)?.permissions().mode() & 0o777, 0o700);
    }
    let keys = e
        .stack
        .api(
            reqwest::Method::GET,
            "/api/v1/users/me/ssh-keys",
            &bob.token,
            None,
        )
        .await?;
    let public = std::fs::read_to_string(key.with_extension("pub"))?;
    let words: Vec<&str> = public.split_whitespace().take(2).collect();
    assert!(
        keys.to_string().contains(&words.join(" ")),
        "{keys} lacks {public}"
    );

    // The next time: the same key, not registered again.
    let out = run("/nonexistent/ssh-keygen").await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        !text(&out.stderr).contains("registered"),
        "{}",
        text(&out.stderr)
    );
    Ok(())
}

/// VS Code's Remote-SSH, as it connects (issue 41, item 6): `warren ws open NAME --vscode`
/// installs the workspace's SSH host once and gives the link; OpenSSH with that host runs
/// `ssh -T -D PORT warren-NAME sh` — a shell reading its script from stdin for as long as the
/// window is open — and reaches the workspace's ports through the dynamic (SOCKS) forward of
/// the same connection. JetBrains Gateway's link names the same host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vs_code_remote_ssh_connects_as_it_does() -> Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    if !tools_present() {
        return Ok(());
    }
    let e = env().await?;
    let ws = e.stack.workspace(&e.alice, "alice-code").await?;
    let upstream = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let upstream_addr = upstream.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut s, _)) = upstream.accept().await {
            tokio::spawn(async move {
                let _ = s.write_all(b"hello\n").await;
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    e.stack.set_endpoint(&ws, 8080, upstream_addr);

    let out = e
        .warren(&["ws", "open", "alice-code", "--vscode", "--print"])
        .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "vscode://vscode-remote/ssh-remote+warren-alice-code/projects\n"
    );
    assert!(
        text(&out.stderr).contains("wrote the SSH host warren-alice-code"),
        "{}",
        text(&out.stderr)
    );
    let config = e.ssh_dir().join("warren.config");
    let written = std::fs::read_to_string(&config)?;
    let out = e
        .warren(&["ws", "open", "alice-code", "--jetbrains", "--print"])
        .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with(
            "jetbrains-gateway://connect#type=ssh&deploy=false&host=warren-alice-code&port="
        ) && text(&out.stdout).ends_with("&user=alice-code&projectPath=%2Fprojects\n"),
        "{}",
        text(&out.stdout)
    );
    assert!(
        !text(&out.stderr).contains("wrote"),
        "installed once: {}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&config)?, written, "unchanged");

    let socks_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?.port()
    };
    let mut ssh = ide_ssh(&config)
        .args([
            "-T",
            "-D",
            &format!("127.0.0.1:{socks_port}"),
            "warren-alice-code",
            "sh",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = ssh.stdin.take().context("stdin")?;
    let mut lines = tokio::io::BufReader::new(ssh.stdout.take().context("stdout")?).lines();
    stdin.write_all(b"echo ready-$((40 + 2))\n").await?;
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("the shell never answered")??;
    assert_eq!(line.as_deref(), Some("ready-42"));

    // SOCKS5, as VS Code reaches its server's port: no authentication, CONNECT 127.0.0.1:8080.
    let mut socks = tokio::net::TcpStream::connect(("127.0.0.1", socks_port)).await?;
    socks.write_all(&[5, 1, 0]).await?;
    let mut chosen = [0u8; 2];
    socks.read_exact(&mut chosen).await?;
    assert_eq!(chosen, [5, 0]);
    socks
        .write_all(&[5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90])
        .await?;
    let mut reply = [0u8; 10];
    tokio::time::timeout(Duration::from_secs(30), socks.read_exact(&mut reply))
        .await
        .context("no SOCKS reply")??;
    assert_eq!(reply[1], 0, "SOCKS reply {reply:?}");
    socks.write_all(b"ping\n").await?;
    let mut got = vec![0u8; "hello\nping\n".len()];
    tokio::time::timeout(Duration::from_secs(30), socks.read_exact(&mut got))
        .await
        .context("nothing came back through the forward")??;
    assert_eq!(text(&got), "hello\nping\n");
    drop(socks);

    // The shell still answers on the same connection; closing its input ends it.
    stdin.write_all(b"echo still-here\n").await?;
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await??;
    assert_eq!(line.as_deref(), Some("still-here"));
    drop(stdin);
    let status = tokio::time::timeout(Duration::from_secs(30), ssh.wait())
        .await
        .context("ssh did not end after its input closed")??;
    assert!(status.success(), "{status:?}");
    Ok(())
}

/// Issue 42: the Host block of a workspace in a region is written once and keeps working as
/// the region's proxy comes and goes. Its `ProxyCommand` (`warren ws ssh-proxy`) picks the door
/// when ssh connects: the region's proxy while it serves (the central one sees nothing), the
/// central one when it died — before the server noticed too — saying so, and the region's new
/// proxy when it is back; OpenSSH's pinned host-key check passes on every door, since all
/// proxies show the server's shared key. Without a sign-in it goes to the door the block
/// names. `warren ws ssh` takes the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regions_ssh_host_follows_its_door_through_failover() -> Result<()> {
    if !tools_present() {
        return Ok(());
    }
    let e = env_with(warren_testkit::StackOptions {
        proxies: 2,
        ..Default::default()
    })
    .await?;
    let s = &e.stack;
    s.workspace(&e.alice, "alice-eu").await?;
    let admin = &s.admin.token;
    let agent = s
        .api(reqwest::Method::GET, "/api/v1/agents/local", admin, None)
        .await?;
    let mut config = agent["config"].clone();
    config["region"] = json!("eu");
    s.api(
        reqwest::Method::PUT,
        "/api/v1/agents/local",
        admin,
        Some(json!({ "config": config })),
    )
    .await?;
    let eu = s.regional_proxy("eu", "eu.localhost").await?;
    let eu_ssh = eu.ssh_addr.context("the region's SSH door")?;
    let central_ssh = || -> usize {
        let balancers = s.proxy_balancers.as_ref().expect("two central replicas");
        balancers
            .1
            .as_ref()
            .expect("an SSH balancer")
            .connections()
            .iter()
            .sum()
    };

    let out = e
        .warren(&["ws", "ssh-config", "alice-eu", "--write"])
        .await?;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let config = e.ssh_dir().join("warren.config");
    let written = std::fs::read_to_string(&config)?;
    assert!(
        written.contains(&format!(
            "Host warren-alice-eu\n    HostName {}\n    Port {}\n",
            eu_ssh.ip(),
            eu_ssh.port()
        )),
        "the region's door: {written}"
    );
    let proxy_command = format!(
        "    ProxyCommand env WARREN_HOME={} {} ws ssh-proxy alice-eu --host %h --port %p\n",
        e.home.path().join("warren").display(),
        env!("CARGO_BIN_EXE_warren")
    );
    assert!(written.contains(&proxy_command), "{written}");

    // OpenSSH as an IDE runs it: the block's own key, pinned host key and ProxyCommand; the
    // sign-in is the CLI's (here its environment, as `warren login` would leave a file).
    let ssh = |signed_in: bool| {
        let mut cmd = ide_ssh(&config);
        cmd.args(["warren-alice-eu", "exit 4"])
            .env("HOME", e.home.path())
            .env_remove("WARREN_URL")
            .env_remove("WARREN_TOKEN")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if signed_in {
            cmd.env("WARREN_URL", &s.api_url)
                .env("WARREN_TOKEN", &e.alice.token);
        }
        async move {
            let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
                .await
                .context("ssh hung")??;
            anyhow::Ok((out.status.code(), text(&out.stderr)))
        }
    };

    // The region serves: its door, not a byte through the central proxy.
    let before = central_ssh();
    let (code, stderr) = ssh(true).await?;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(!stderr.contains("warren:"), "no notice: {stderr}");
    // Not signed in where ssh runs: the door the block names, saying why.
    let (code, stderr) = ssh(false).await?;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(
        stderr.contains("could not ask the server where alice-eu is reached")
            && stderr.contains(&format!("trying {eu_ssh} as the SSH config says")),
        "{stderr}"
    );
    assert_eq!(central_ssh(), before, "the central proxy saw no SSH");

    // The region's proxy dies: the same block logs in through the central proxy, whether
    // the server has noticed yet (then the door is refused and passed over) or not.
    eu.kill();
    warren_testkit::wait_for("the killed proxy's SSH door to close", 30, || async {
        tokio::net::TcpStream::connect(eu_ssh).await.is_err()
    })
    .await?;
    let (code, stderr) = ssh(true).await?;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(
        stderr.contains("connecting through the central proxy")
            || stderr.contains("region eu's proxy has not answered since"),
        "{stderr}"
    );
    assert_eq!(central_ssh(), before + 1, "through the central proxy");
    warren_testkit::wait_for("the dead proxy's presence to expire", 60, || async {
        let w = s
            .api(
                reqwest::Method::GET,
                "/api/v1/workspaces/alice-eu",
                admin,
                None,
            )
            .await
            .expect("workspace");
        w["region"]["regional"] == false
    })
    .await?;
    let (code, stderr) = ssh(true).await?;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(
        stderr.contains("warren: region eu's proxy has not answered since"),
        "the server's notice: {stderr}"
    );
    // `warren ws ssh` goes the same way.
    let out = e.warren(&["ws", "ssh", "alice-eu", "--", "exit 5"]).await?;
    assert_eq!(out.status.code(), Some(5), "{}", text(&out.stderr));
    assert_eq!(central_ssh(), before + 3);

    // The region is back, at the port the OS gave it: the block written before finds it.
    let _back = s.regional_proxy("eu", "eu.localhost").await?;
    let (code, stderr) = ssh(true).await?;
    assert_eq!(code, Some(4), "{stderr}");
    assert!(!stderr.contains("warren:"), "no notice: {stderr}");
    let out = e.warren(&["ws", "ssh", "alice-eu", "--", "exit 6"]).await?;
    assert_eq!(out.status.code(), Some(6), "{}", text(&out.stderr));
    assert_eq!(central_ssh(), before + 3, "the region's proxy again");
    Ok(())
}
