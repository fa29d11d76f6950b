//! `warren ws ssh-proxy NAME --host %h --port %p`: OpenSSH's `ProxyCommand` for workspaces in
//! a region. The door is chosen when the connection is made, not when the Host block was
//! written: the region's proxy while it answers, else the central one, so a block written while
//! the region served keeps working after it fails over. Every proxy shows the server's shared
//! host key, so ssh's check against the block's `HostName` holds whichever door answered.

use super::ws::{regional_endpoint, ssh_target};
use crate::{ssh_cmd, CliError, WsCommand};
use std::io::{Read, Write};
use std::time::Duration;
use tokio::net::TcpStream;
use warren_client::Client;

/// How long one door may take to accept before the next is tried. A proxy that is down
/// usually refuses at once; this bounds a door that drops packets instead.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the server may take to say where the workspace is reached: ssh is waiting (VS
/// Code's Remote-SSH gives up after 15 s), and the door the block names is there to fall back
/// on.
const ASK_TIMEOUT: Duration = Duration::from_secs(8);

/// One place to connect to, and what to say when it is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Door {
    host: String,
    port: u16,
    /// `Some`: the region's door, named for the notice when it does not answer.
    region: Option<String>,
}

/// Connects stdin/stdout to the first door that answers.
pub(super) async fn run(
    signed_in: Result<&Client, CliError>,
    name: &str,
    host: String,
    port: u16,
) -> Result<(), CliError> {
    let written = Door {
        host,
        port,
        region: None,
    };
    let asked = match signed_in {
        Ok(c) => tokio::time::timeout(ASK_TIMEOUT, doors(c, name))
            .await
            .unwrap_or_else(|_| {
                Err(CliError::Failed(format!(
                    "no answer within {}s",
                    ASK_TIMEOUT.as_secs()
                )))
            }),
        Err(e) => Err(e),
    };
    let doors = match asked {
        Ok(doors) => doors,
        // The control plane may be down while the proxies still serve (they keep what they
        // were told): the door the block names is the best guess, and says so.
        Err(e) => {
            eprintln!(
                "warren: could not ask the server where {name} is reached ({}); trying {}:{} as the SSH config says",
                e.report(),
                written.host,
                written.port
            );
            vec![written]
        }
    };
    let stream = connect_first(&doors).await?;
    splice(stream).await
}

/// `ws` without a sign-in: `ssh-proxy` still connects (to the door the SSH config names, as
/// where an IDE runs ssh may lack the sign-in); every other command fails with `e`.
pub(super) async fn unless_signed_in(e: CliError, cmd: WsCommand) -> Result<(), CliError> {
    match cmd {
        WsCommand::SshProxy { name, host, port } => run(Err(e), &name, host, port).await,
        _ => Err(e),
    }
}

/// The doors to try, in order: the region's while the server says its proxy serves, then the
/// central one; a region shown through the central proxy gets its notice printed.
async fn doors(c: &Client, name: &str) -> Result<Vec<Door>, CliError> {
    let central = c.access().await?.ssh.ok_or_else(ssh_cmd::no_ssh)?;
    let (_, region) = ssh_target(c, name).await?;
    let door = regional_endpoint(&central, region.as_ref());
    let central_door = Door {
        host: central.host.clone(),
        port: central.port,
        region: None,
    };
    match region {
        Some(r) if (door.host.as_str(), door.port) != (central.host.as_str(), central.port) => {
            Ok(vec![
                Door {
                    host: door.host,
                    port: door.port,
                    region: Some(r.name),
                },
                central_door,
            ])
        }
        Some(r) => {
            if let Some(notice) = r.notice {
                eprintln!("warren: {notice}");
            }
            Ok(vec![central_door])
        }
        None => Ok(vec![central_door]),
    }
}

/// The first door that accepts a TCP connection, telling on stderr of each that did not.
async fn connect_first(doors: &[Door]) -> Result<TcpStream, CliError> {
    let mut failures = Vec::new();
    for (i, d) in doors.iter().enumerate() {
        let attempt = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect((d.host.as_str(), d.port)),
        )
        .await;
        let why = match attempt {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}s", CONNECT_TIMEOUT.as_secs()),
        };
        if let (Some(region), Some(next)) = (&d.region, doors.get(i + 1)) {
            eprintln!(
                "warren: region {region}'s SSH door {}:{} did not answer ({why}); connecting through the central proxy at {}:{}",
                d.host, d.port, next.host, next.port
            );
        }
        failures.push(format!("{}:{} ({why})", d.host, d.port));
    }
    Err(CliError::Failed(format!(
        "no SSH door answered: {}",
        failures.join("; ")
    )))
}

/// Copies stdin to the door and the door to stdout until the door closes. Plain threads: a
/// read of stdin cannot be cancelled, and the process ends (taking that thread with it) as
/// soon as the door side is done.
async fn splice(stream: TcpStream) -> Result<(), CliError> {
    let failed = |what: &str, e: std::io::Error| CliError::Failed(format!("{what}: {e}"));
    let down = stream
        .into_std()
        .and_then(|s| s.set_nonblocking(false).map(|()| s))
        .map_err(|e| failed("preparing the connection", e))?;
    let mut up = down
        .try_clone()
        .map_err(|e| failed("preparing the connection", e))?;
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut up);
        // ssh closed its side: the server sees the end and closes too.
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    let mut down = down;
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        // Flushed per read: Rust's stdout holds bytes back until a line break, and SSH's
        // packets are not lines.
        let mut out = std::io::stdout().lock();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = down.read(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            out.write_all(&buf[..n])?;
            out.flush()?;
        }
    })
    .await
    .map_err(|e| CliError::Failed(format!("passing the connection on: {e}")))?
    // ssh going away first is how a session ends, not a failure.
    .or_else(|e| match e.kind() {
        std::io::ErrorKind::BrokenPipe => Ok(()),
        _ => Err(failed("passing the connection on", e)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_next_door_is_tried_and_a_dead_region_is_named() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dead_port = dead.local_addr().unwrap().port();
        drop(dead);
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live_port = live.local_addr().unwrap().port();
        let doors = [
            Door {
                host: "127.0.0.1".into(),
                port: dead_port,
                region: Some("eu".into()),
            },
            Door {
                host: "127.0.0.1".into(),
                port: live_port,
                region: None,
            },
        ];
        let s = connect_first(&doors).await.expect("the central door");
        assert_eq!(s.peer_addr().unwrap().port(), live_port);

        let e = connect_first(&doors[..1]).await.expect_err("none answers");
        let text = e.to_string();
        assert!(
            text.contains("no SSH door answered") && text.contains(&dead_port.to_string()),
            "{text}"
        );
    }
}
