//! A session channel (`shell`, `exec`, `subsystem sftp`) bridged to an exec in the
//! workspace: channel data → stdin, EOF → stdin EOF, `window-change` → resize; stdout →
//! data, stderr → extended data 1; the exit code → `exit-status`, then EOF and close.

use super::handler::Authorized;
use crate::relay::{ExecReader, ExecWriter, Tunnel};
use crate::Shared;
use russh::server::Msg;
use russh::{Channel, ChannelMsg, ChannelWriteHalf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_types::internal::SshAuthorization;
use warren_types::relay::{EnvVar, ExecExit, ExecFrame, ExecTarget, TerminalSize};
use warren_types::ActualState;

/// Exit status reported when the process's own is unknown (as OpenSSH's client does for
/// its own failures).
const UNKNOWN_EXIT: u32 = 255;

/// A login shell: bash when the image has it, `sh` otherwise (only `/bin/sh` is required).
const LOGIN_SHELL: &str =
    "if command -v bash >/dev/null 2>&1; then exec bash -l; else exec /bin/sh -l; fi";

/// Starts the image's sftp server from wherever the distribution puts it.
const SFTP_SERVER: &str = "for p in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server \
/usr/lib/ssh/sftp-server /usr/libexec/sftp-server /usr/lib/sftp-server; do \
[ -x \"$p\" ] && exec \"$p\"; done; \
p=$(command -v sftp-server 2>/dev/null) && exec \"$p\"; \
echo 'warren: this workspace has no sftp-server; install OpenSSH'\"'\"'s sftp server in its image (Debian/Ubuntu: openssh-sftp-server)' >&2; \
exit 127";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Shell,
    Exec(String),
    Sftp,
}

impl Kind {
    fn command(&self) -> Vec<String> {
        let script = match self {
            Kind::Shell => LOGIN_SHELL,
            Kind::Exec(c) => c.as_str(),
            Kind::Sftp => SFTP_SERVER,
        };
        vec!["/bin/sh".into(), "-c".into(), script.into()]
    }
}

#[derive(Debug)]
pub(crate) struct Request {
    pub kind: Kind,
    /// `Some` when the client asked for a terminal (`pty-req`); sftp never gets one.
    pub tty: Option<TerminalSize>,
    pub env: Vec<EnvVar>,
    /// The client's address, for the audit log.
    pub peer: Option<std::net::IpAddr>,
}

impl Kind {
    /// What the audit log says ran: never an exec's arguments, which may carry secrets.
    fn audited(&self) -> String {
        match self {
            Kind::Shell => "shell".to_owned(),
            Kind::Exec(c) => {
                let program = c.split_whitespace().next().unwrap_or("");
                let program: String = program.chars().take(64).collect();
                format!("exec {program}")
            }
            Kind::Sftp => "sftp".to_owned(),
        }
    }
}

/// Why a session could not start, as the user reads it on stderr.
fn not_running_message(a: &SshAuthorization) -> String {
    let name = &a.workspace_name;
    if let Some(reason) = &a.unavailable {
        return reason.clone();
    }
    match a.actual_state {
        ActualState::Stopped | ActualState::Stopping => {
            format!("workspace {name} is stopped; start it with `warren ws start {name}`")
        }
        ActualState::Starting | ActualState::CreationRequested => {
            format!("workspace {name} is starting; try again in a moment")
        }
        other => format!("workspace {name} is not running (it is {other})"),
    }
}

/// Longest a session waits for a woken workspace to run.
const WAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);
/// How often the server is asked whether it runs yet.
const WAKE_POLL: std::time::Duration = std::time::Duration::from_secs(1);

/// Asks the server to start the workspace on its owner's behalf, then waits until it runs
/// (or fails, or the wait is too long); the final authorisation, or why not.
async fn wake(
    shared: &Shared,
    auth: &Authorized,
    a: SshAuthorization,
) -> Result<SshAuthorization, String> {
    let request = warren_types::internal::WorkspaceStartRequest {
        workspace_id: a.workspace_id,
        user_id: a.user_id,
    };
    shared
        .server
        .start(&request)
        .await
        .map_err(|e| format!("starting workspace {} failed: {e}", a.workspace_name))?;
    tracing::info!(workspace = %a.workspace_name, "woken by an SSH session");
    let deadline = tokio::time::Instant::now() + WAKE_TIMEOUT;
    loop {
        let now = auth.refreshed(shared).await.map_err(|e| e.to_string())?;
        match now.actual_state {
            ActualState::Running => return Ok(now),
            ActualState::Failed | ActualState::Error | ActualState::Terminated => {
                return Err(not_running_message(&now))
            }
            _ if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "workspace {} did not start within {} s",
                    now.workspace_name,
                    WAKE_TIMEOUT.as_secs()
                ))
            }
            _ => tokio::time::sleep(WAKE_POLL).await,
        }
    }
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    auth: Arc<Authorized>,
    channel: Channel<Msg>,
    request: Request,
    stop: CancellationToken,
) {
    let tty = request.kind != Kind::Sftp && request.tty.is_some();
    let what = request.kind.audited();
    let (mut rx, tx) = channel.split();
    let fail = |message: String| {
        let tx = &tx;
        async move {
            let nl = if tty { "\r\n" } else { "\n" };
            let text = format!("warren: {message}{nl}");
            let _ = tx.extended_data(1, text.as_bytes()).await;
            finish(tx, 1).await;
        }
    };
    let mut a = match auth.current(&shared).await {
        Ok(a) => a,
        Err(e) => return fail(e.to_string()).await,
    };
    if a.actual_state != ActualState::Running && a.wake_on_request {
        // Stopped by the idle timeout: start it and hold the session until it runs, as an
        // editor's SSH connection expects.
        let nl = if tty { "\r\n" } else { "\n" };
        let note = format!("warren: starting workspace {}…{nl}", a.workspace_name);
        let _ = tx.extended_data(1, note.as_bytes()).await;
        a = tokio::select! {
            // Cancel-safe: dropping the wait abandons nothing but the polling.
            r = wake(&shared, &auth, a) => match r {
                Ok(a) => a,
                Err(message) => return fail(message).await,
            },
            // Cancel-safe: cancellation is level-triggered.
            _ = stop.cancelled() => return,
        };
    }
    if a.actual_state != ActualState::Running {
        return fail(not_running_message(&a)).await;
    }
    let target = ExecTarget {
        workspace: a.workspace_name.clone(),
        namespace: a.namespace.clone(),
        container: None,
        command: request.kind.command(),
        env: request.env,
        tty,
        size: if tty { request.tty } else { None },
        task: None,
    };
    let opened = tokio::select! {
        // Cancel-safe: dropping a half-open exec request just abandons it.
        r = shared.relay.open_exec(a.agent_id, &target) => r,
        // Cancel-safe: cancellation is level-triggered.
        _ = stop.cancelled() => return,
    };
    let exec = match opened {
        Ok(s) => s,
        Err(e) if e.is_unreachable_workspace() => {
            tracing::info!(workspace = %a.workspace_name, error = %crate::error_chain(&e), "ssh exec: workspace unreachable");
            return fail(format!(
                "workspace {} cannot be reached right now; check `warren ws get {}`",
                a.workspace_name, a.workspace_name
            ))
            .await;
        }
        Err(e) => {
            tracing::warn!(workspace = %a.workspace_name, error = %crate::error_chain(&e), "ssh exec failed");
            return fail(format!("starting the session failed: {e}")).await;
        }
    };
    // Recorded as opened now, and as closed when this returns, however the session ends.
    let _audited = shared.sessions.open(
        warren_types::internal::SessionKind::Ssh,
        a.workspace_id,
        a.user_id,
        request.peer,
        Some(&what),
    );
    shared.activity.touch(a.workspace_id);
    let activity = || shared.activity.touch(a.workspace_id);
    let input = pump_input(&mut rx, exec.writer, tty, &activity);
    let output = pump_output(exec.reader, &tx, &activity);
    // An interactive shell is told ten minutes before a timer stops the workspace (on
    // stderr, so a program reading the session's output is not fed it).
    let shell = tty && request.kind == Kind::Shell;
    let warnings = async {
        if !shell {
            return std::future::pending().await;
        }
        let plan = a.planned_stop.clone();
        let mut w =
            crate::stop_warning::StopWarnings::new(&shared, a.user_id, &a.workspace_name, plan);
        loop {
            let line = w.next().await;
            if tx.extended_data(1, line.as_bytes()).await.is_err() {
                return std::future::pending().await;
            }
        }
    };
    tokio::pin!(input, output, warnings);
    tokio::select! {
        // Not cancel-safe and need not be: whichever branch wins, the session ends and
        // the other pump is dropped on purpose (dropping the exec stream ends the process).
        exit = &mut output => {
            let code = match exit {
                Some(ExecExit { code: Some(c), .. }) => c as u32,
                Some(ExecExit { code: None, message }) => {
                    let m = message.unwrap_or_else(|| "the process ended without an exit code".into());
                    let nl = if tty { "\r\n" } else { "\n" };
                    let _ = tx.extended_data(1, format!("warren: {m}{nl}").as_bytes()).await;
                    UNKNOWN_EXIT
                }
                None => {
                    let nl = if tty { "\r\n" } else { "\n" };
                    let _ = tx
                        .extended_data(1, format!("warren: the connection to the workspace was lost{nl}").as_bytes())
                        .await;
                    UNKNOWN_EXIT
                }
            };
            finish(&tx, code).await;
        }
        // The client closed the channel (or the connection went away): nothing to report.
        _ = &mut input => {}
        // The proxy is shutting down or the connection ended.
        _ = stop.cancelled() => {}
        // Never ends: warnings go on until the session does.
        () = &mut warnings => {}
    }
}

/// `exit-status`, EOF and close, in that order.
async fn finish(tx: &ChannelWriteHalf<Msg>, code: u32) {
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

/// Client → process until the client closes the channel. Keeps reading after the process
/// stopped taking input so russh's per-channel queue never fills and stalls the connection.
async fn pump_input(
    rx: &mut russh::ChannelReadHalf,
    writer: ExecWriter<Tunnel>,
    tty: bool,
    activity: &impl Fn(),
) {
    let mut writer = Some(writer);
    while let Some(msg) = rx.wait().await {
        let frame = match msg {
            ChannelMsg::Data { data } => {
                activity();
                ExecFrame::Stdin(data.to_vec())
            }
            ChannelMsg::Eof => ExecFrame::StdinEof,
            ChannelMsg::WindowChange {
                col_width,
                row_height,
                ..
            } if tty => ExecFrame::Resize(TerminalSize {
                cols: u16::try_from(col_width).unwrap_or(u16::MAX),
                rows: u16::try_from(row_height).unwrap_or(u16::MAX),
            }),
            _ => continue,
        };
        if let Some(w) = writer.as_mut() {
            if let Err(e) = w.send(&frame).await {
                tracing::debug!(error = %crate::error_chain(&e), "ssh session: the process no longer takes input");
                writer = None;
            }
        }
    }
}

/// Process → client until the process exits (`Some`) or the exec stream is lost (`None`).
async fn pump_output(
    mut reader: ExecReader<Tunnel>,
    tx: &ChannelWriteHalf<Msg>,
    activity: &impl Fn(),
) -> Option<ExecExit> {
    loop {
        match reader.next().await {
            Ok(Some(ExecFrame::Stdout(b))) => {
                activity();
                tx.data(&b[..]).await.ok()?;
            }
            Ok(Some(ExecFrame::Stderr(b))) => {
                activity();
                tx.extended_data(1, &b[..]).await.ok()?;
            }
            Ok(Some(ExecFrame::Exit(e))) => return Some(e),
            // Client → agent kinds never come this way; ignore rather than fail.
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %crate::error_chain(&e), "ssh session: exec stream failed");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str, path: &str) -> std::process::Output {
        std::process::Command::new("/bin/sh")
            .args(["-c", script])
            .env("PATH", path)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("running /bin/sh")
    }

    #[test]
    fn without_an_sftp_server_the_user_is_told_why() {
        let mut script = SFTP_SERVER.to_owned();
        for p in [
            "/usr/lib/openssh/sftp-server",
            "/usr/libexec/openssh/sftp-server",
            "/usr/lib/ssh/sftp-server",
            "/usr/libexec/sftp-server",
            "/usr/lib/sftp-server",
        ] {
            script = script.replace(p, "/nonexistent/sftp-server");
        }
        assert!(!script.contains("/usr/"), "every candidate replaced");
        let out = sh(&script, "/nonexistent");
        assert_eq!(out.status.code(), Some(127));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr,
            "warren: this workspace has no sftp-server; install OpenSSH's sftp server in its \
             image (Debian/Ubuntu: openssh-sftp-server)\n"
        );
    }

    #[test]
    fn the_login_shell_falls_back_to_sh() {
        use std::io::Write;
        // No bash on PATH: the wrapper still starts a login shell, which reads stdin.
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", LOGIN_SHELL])
            .env("PATH", "/nonexistent")
            .env("HOME", "/nonexistent")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(b"echo \"shell=$0\"; exit 4\n")
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(4));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "shell=/bin/sh\n");
        assert_eq!(
            Kind::Exec("true".into()).command(),
            ["/bin/sh", "-c", "true"]
        );
    }
}
