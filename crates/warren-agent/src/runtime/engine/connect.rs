//! Finds a Docker or Podman API socket, or starts `podman system service` when only the
//! `podman` binary exists (no systemd socket activation on many machines).

use bollard::Docker;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::{Child, Command};

/// How long a socket may take to answer a ping before the next candidate is tried.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// Runs `"$@"` (podman) and stops it (SIGTERM) as soon as stdin reaches its end: stdin is a
/// pipe whose other end only the agent holds, so its end means the agent is gone, however
/// it went. Exits with podman's status when podman exits by itself.
/// (An asynchronous list's stdin is /dev/null unless redirected, hence fd 3.)
const WATCH_PARENT: &str = r#"exec 3<&0 </dev/null
"$@" 3<&- &
pid=$!
(read -r _ <&3; kill -TERM "$pid" 2>/dev/null) &
exec 3<&-
wait "$pid""#;

/// How long a freshly started `podman system service` may take to answer.
const SERVICE_START_DEADLINE: Duration = Duration::from_secs(30);
/// Request timeout of the API client, in seconds (image pulls are streamed, not bounded).
const CLIENT_TIMEOUT_SECS: u64 = 120;

/// What could not be connected.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "no container engine found: install Podman (apt-get install podman) or Docker, or set \
         DOCKER_HOST (tried {tried})"
    )]
    NoEngine { tried: String },
    #[error("connecting to the container engine at {host}")]
    Client {
        host: String,
        #[source]
        source: bollard::errors::Error,
    },
    #[error("the container engine at {host} does not answer")]
    NoAnswer {
        host: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("starting `podman system service` on {socket}")]
    Spawn {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`podman system service` did not answer on {socket} within {secs} s")]
    ServiceTimeout { socket: PathBuf, secs: u64 },
}

/// A `podman system service` this runtime started; killed when dropped.
#[derive(Debug)]
pub struct PodmanService {
    /// The watch wrapper ([`WATCH_PARENT`]); podman is its child.
    child: Child,
    /// Our end of the wrapper's stdin: closing it (on purpose, or by dying) stops podman.
    lifeline: Option<tokio::process::ChildStdin>,
    pub socket: PathBuf,
    host: String,
}

impl PodmanService {
    /// Stops the service and waits for it to exit.
    pub async fn stop(mut self) {
        drop(self.lifeline.take());
        if tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
        // Whatever still serves the socket (the wrapper was killed before it could stop it).
        stop_leftover_services(&self.host).await;
    }

    /// What is wrong with the service, if anything can be seen without asking it: it has
    /// exited, or its socket file is gone (then nobody can reach it).
    pub fn fault(&mut self) -> Option<String> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(format!("exited ({status})"));
        }
        (!self.socket.exists()).then(|| format!("lost its socket {}", self.socket.display()))
    }
}

/// A connected client, the address it uses, and the service started for it, if any.
#[derive(Debug)]
pub struct Connection {
    pub docker: Docker,
    pub host: String,
    pub service: Option<PodmanService>,
}

/// Connects to `host` (a `unix://`, `tcp://` or `http://` URL) and checks that it answers.
pub async fn connect_host(host: &str) -> Result<Docker, ConnectError> {
    let docker = if host.starts_with("unix://") || host.starts_with('/') {
        let path = host.strip_prefix("unix://").unwrap_or(host);
        Docker::connect_with_unix(path, CLIENT_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
    } else {
        Docker::connect_with_host(host)
    }
    .map_err(|source| ConnectError::Client {
        host: host.to_owned(),
        source,
    })?;
    match tokio::time::timeout(PING_TIMEOUT, docker.ping()).await {
        Ok(Ok(_)) => Ok(docker),
        Ok(Err(e)) => Err(ConnectError::NoAnswer {
            host: host.to_owned(),
            source: Box::new(e),
        }),
        Err(e) => Err(ConnectError::NoAnswer {
            host: host.to_owned(),
            source: Box::new(e),
        }),
    }
}

/// The sockets tried, in order, when no host is configured.
pub fn candidates() -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(h) = std::env::var("DOCKER_HOST") {
        if !h.is_empty() {
            out.push(h);
        }
    }
    out.push("unix:///var/run/docker.sock".into());
    out.push("unix:///run/podman/podman.sock".into());
    if let Ok(xdg) = std::env::var("XDG_RUNTIME_DIR") {
        if !xdg.is_empty() {
            out.push(format!("unix://{xdg}/podman/podman.sock"));
        }
    }
    out
}

/// Auto-detection: the candidates, then a `podman system service` of our own on
/// `<state_dir>/podman.sock`.
pub async fn auto(state_dir: &Path) -> Result<Connection, ConnectError> {
    auto_with(&candidates(), find_podman(), state_dir).await
}

async fn auto_with(
    candidates: &[String],
    podman: Option<PathBuf>,
    state_dir: &Path,
) -> Result<Connection, ConnectError> {
    let mut tried = Vec::new();
    for host in candidates {
        let path = host.strip_prefix("unix://");
        if path.is_some_and(|p| !Path::new(p).exists()) {
            tried.push(host.clone());
            continue;
        }
        match connect_host(host).await {
            Ok(docker) => {
                return Ok(Connection {
                    docker,
                    host: host.clone(),
                    service: None,
                })
            }
            Err(e) => {
                tracing::debug!(host, error = %e, "container engine candidate does not answer");
                tried.push(host.clone());
            }
        }
    }
    match podman {
        Some(podman) => spawn_podman(&podman, state_dir).await,
        None => {
            tried.push("a `podman` binary on PATH".into());
            Err(ConnectError::NoEngine {
                tried: tried.join(", "),
            })
        }
    }
}

/// The `podman` binary on `PATH`.
pub fn find_podman() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("podman"))
        .find(|candidate| candidate.is_file())
}

/// Starts `podman system service --time=0 unix://<state_dir>/podman.sock` and waits (with a
/// deadline) until it answers.
pub async fn spawn_podman(podman: &Path, state_dir: &Path) -> Result<Connection, ConnectError> {
    let socket = state_dir.join("podman.sock");
    let spawn_err = |source| ConnectError::Spawn {
        socket: socket.clone(),
        source,
    };
    // A Unix socket path holds at most 107 bytes; fail with the reason, not a bind error.
    if socket.as_os_str().len() > 100 {
        return Err(spawn_err(std::io::Error::other(format!(
            "the socket path is {} bytes long, too long for a Unix socket: choose a shorter \
             state directory",
            socket.as_os_str().len()
        ))));
    }
    std::fs::create_dir_all(state_dir).map_err(spawn_err)?;
    let host = format!("unix://{}", socket.display());
    // A service an earlier run started and could not stop (it was killed with SIGKILL)
    // still serves on a socket nobody can reach any more: stop it rather than run two.
    stop_leftover_services(&host).await;
    // A socket left by an earlier run would accept nothing; podman refuses to bind over it.
    match std::fs::remove_file(&socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(spawn_err(e)),
    }
    // Its own log, next to the socket: Podman is chatty (pull retries, syslog warnings).
    // Appended to, so a restart keeps what the previous service said before it died.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(state_dir.join("podman-service.log"))
        .map_err(spawn_err)?;
    // The service must not outlive us even when we cannot stop it (SIGKILL, a crash): it
    // runs under a small shell that stops it when its stdin, a pipe from us, closes, which
    // the kernel does when we die. (The next start also stops a leftover, for services
    // started otherwise.)
    let mut child = Command::new("sh")
        .args(["-c", WATCH_PARENT, "sh"])
        .arg(podman)
        .args(["system", "service", "--time=0", &host])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .map_err(spawn_err)?;
    let lifeline = child.stdin.take();
    tracing::info!(socket = %socket.display(), "started podman system service");
    let deadline = tokio::time::Instant::now() + SERVICE_START_DEADLINE;
    loop {
        if socket.exists() {
            if let Ok(docker) = connect_host(&host).await {
                return Ok(Connection {
                    docker,
                    host: host.clone(),
                    service: Some(PodmanService {
                        child,
                        lifeline,
                        socket,
                        host,
                    }),
                });
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(spawn_err(std::io::Error::other(format!(
                "podman system service exited with {status}"
            ))));
        }
        if tokio::time::Instant::now() >= deadline {
            let _ = child.kill().await;
            return Err(ConnectError::ServiceTimeout {
                socket,
                secs: SERVICE_START_DEADLINE.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Process ids of `podman system service` processes serving `host` (from `/proc`; none
/// where there is no `/proc`). A child the service has forked and not yet turned into
/// another program (Go forks before every exec: conmon, netavark, runc) still shows the
/// service's command line for a moment; it is not a second service, so a process whose
/// parent is one of them does not count.
pub fn services_on(host: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return vec![];
    };
    let serving: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| is_alive(*pid))
        .filter(|pid| {
            let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let has = |word: &str| args.contains(&word.as_bytes());
            // Not the shell that watches it (its first argument is `sh`).
            args.first().is_some_and(|a| a.ends_with(b"podman"))
                && has("system")
                && has("service")
                && has(host)
        })
        .collect();
    serving
        .iter()
        .copied()
        .filter(|pid| parent_of(*pid).is_none_or(|parent| !serving.contains(&parent)))
        .collect()
}

/// The parent of process `pid`, from `/proc/<pid>/stat` (`pid (comm) state ppid …`).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether process `pid` exists and has not exited (a zombie waiting for its parent has).
fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S …`: the state follows the last `)`.
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
    })
}

/// Stops every `podman system service` serving `host` (SIGTERM, then SIGKILL after 10 s).
/// Containers are not theirs to stop: conmon keeps them running.
async fn stop_leftover_services(host: &str) {
    let pids = services_on(host);
    if pids.is_empty() {
        return;
    }
    let signal = |sig: &'static str, pids: Vec<u32>| async move {
        let mut cmd = Command::new("kill");
        cmd.arg(sig).args(pids.iter().map(u32::to_string));
        let _ = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await;
    };
    tracing::warn!(
        ?pids,
        host,
        "stopping a podman system service an earlier run left behind"
    );
    signal("-TERM", pids.clone()).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // Looked up again each time: a process id that was reused meanwhile no longer
        // names a service on `host`, and is never signalled.
        let left: Vec<u32> = services_on(host)
            .into_iter()
            .filter(|p| pids.contains(p))
            .collect();
        if left.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            signal("-KILL", left).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go forks before each exec, and for that moment the child shows the service's command
    /// line: CI once counted two services so. A stand-in "podman" (a copy of `sh`, named so)
    /// with a subshell of its own must count once.
    #[test]
    #[allow(clippy::disallowed_methods)] // std's clock and sleep: a synchronous poll
    fn a_forked_child_of_a_service_is_not_a_second_service() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("podman");
        std::fs::copy("/bin/sh", &fake).expect("copy sh");
        let host = format!("unix://{}/podman.sock", dir.path().display());
        let mut cmd = std::process::Command::new(&fake);
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        /// The stand-in's process group: killed and reaped, even when the test fails.
        struct Group(std::process::Child);
        impl Drop for Group {
            fn drop(&mut self) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", self.0.id())])
                    .status();
                let _ = self.0.wait();
            }
        }
        let group = Group(
            cmd.args(["-c", "(sleep 60; :) & wait", "system", "service", &host])
                .spawn()
                .expect("start the stand-in"),
        );
        let service = &group.0;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let forked = loop {
            let children: Vec<u32> = std::fs::read_dir("/proc")
                .expect("/proc")
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter(|p| parent_of(*p) == Some(service.id()))
                .collect();
            if let Some(c) = children.first() {
                break *c;
            }
            assert!(std::time::Instant::now() < deadline, "the subshell starts");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_ne!(forked, service.id());
        assert_eq!(services_on(&host), [service.id()]);
    }

    #[tokio::test]
    async fn without_any_engine_the_error_says_what_to_install() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = format!("unix://{}/nothing.sock", dir.path().display());
        let err = auto_with(std::slice::from_ref(&missing), None, dir.path())
            .await
            .expect_err("no engine");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "no container engine found: install Podman (apt-get install podman) or Docker, \
                 or set DOCKER_HOST"
            ),
            "{text}"
        );
        assert!(text.contains(&missing), "names what was tried: {text}");
    }

    #[tokio::test]
    async fn a_socket_that_does_not_answer_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("silent.sock");
        // A listener that never answers HTTP.
        let _listener = tokio::net::UnixListener::bind(&path).expect("bind");
        let host = format!("unix://{}", path.display());
        let err = auto_with(std::slice::from_ref(&host), None, dir.path())
            .await
            .expect_err("no engine");
        assert!(matches!(err, ConnectError::NoEngine { .. }), "{err}");
    }
}
