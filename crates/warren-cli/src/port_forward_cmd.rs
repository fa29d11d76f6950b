//! `warren ws port-forward NAME [LOCAL:]REMOTE…`: local TCP listeners whose connections are
//! carried to ports of the workspace through the proxy (a WebSocket per connection, see
//! `Client::open_port_forward`), as `kubectl port-forward` and `coder port-forward` do.
//! Runs until interrupted; a connection that fails says why on stderr and the rest go on.

use crate::CliError;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use warren_client::Client;

/// Longest a connection waits for a woken workspace to run.
const WAKE_TIMEOUT: Duration = Duration::from_secs(180);

/// One `[LOCAL:]REMOTE`: `local` 0 is a free port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub local: u16,
    pub remote: u16,
}

pub fn parse(spec: &str) -> Result<Forward, String> {
    let port = |s: &str, what: &str| -> Result<u16, String> {
        s.parse::<u16>()
            .ok()
            .filter(|p| *p > 0 || what == "local")
            .ok_or_else(|| format!("{spec:?}: {what} port {s:?} is not a port (1-65535)"))
    };
    match spec.split_once(':') {
        None => {
            let p = port(spec, "remote")?;
            Ok(Forward {
                local: p,
                remote: p,
            })
        }
        Some(("", remote)) => Ok(Forward {
            local: 0,
            remote: port(remote, "remote")?,
        }),
        Some((local, remote)) => Ok(Forward {
            local: port(local, "local")?,
            remote: port(remote, "remote")?,
        }),
    }
}

pub async fn run(
    c: &Client,
    name: &str,
    specs: &[String],
    address: IpAddr,
) -> Result<(), CliError> {
    let forwards = specs
        .iter()
        .map(|s| parse(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(CliError::Usage)?;
    let w = match c.get_workspace(name).await {
        Err(e) if e.status() == Some(404) => {
            return Err(CliError::Failed(format!("workspace {name:?} not found")))
        }
        r => r?,
    };
    let terminal = w.terminal_url.clone().ok_or_else(|| {
        CliError::Failed(format!(
            "the server does not say where workspace {:?} is reached (its agent has no domain)",
            w.name
        ))
    })?;
    let client = Arc::new(c.clone());
    let mut tasks = Vec::new();
    for f in forwards {
        let listener = tokio::net::TcpListener::bind(SocketAddr::new(address, f.local))
            .await
            .map_err(|e| {
                CliError::Failed(format!("cannot listen on {address}:{}: {e}", f.local))
            })?;
        let local = listener
            .local_addr()
            .map_err(|e| CliError::Failed(format!("local address: {e}")))?;
        println!("Forwarding from {local} -> {}:{}", w.name, f.remote);
        let client = client.clone();
        let terminal = terminal.clone();
        let workspace = w.name.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((sock, peer)) = listener.accept().await else {
                    continue;
                };
                let client = client.clone();
                let terminal = terminal.clone();
                let workspace = workspace.clone();
                tokio::spawn(async move {
                    let _ = sock.set_nodelay(true);
                    // A workspace stopped for idleness wakes on the first connection: hold
                    // it until the workspace runs (as an SSH session does), then carry it.
                    let deadline = tokio::time::Instant::now() + WAKE_TIMEOUT;
                    let opened = loop {
                        match client.open_port_forward(&terminal, f.remote).await {
                            Err(warren_client::Error::Starting { message, secs })
                                if tokio::time::Instant::now() < deadline =>
                            {
                                eprintln!("{workspace}:{}: {message}; waiting", f.remote);
                                tokio::time::sleep(Duration::from_secs(secs.clamp(1, 10))).await;
                            }
                            r => break r,
                        }
                    };
                    match opened {
                        Ok(pf) => {
                            if let Err(e) = pf.pipe(sock).await {
                                eprintln!(
                                    "{workspace}:{} (from {peer}): connection ended: {e}",
                                    f.remote
                                );
                            }
                        }
                        Err(e) => eprintln!(
                            "{workspace}:{} (from {peer}): {}",
                            f.remote,
                            warren_types::error_chain(&e)
                        ),
                    }
                });
            }
        }));
    }
    // Until interrupted: the listeners serve in the background.
    let _ = tokio::signal::ctrl_c().await;
    for t in tasks {
        t.abort();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        assert_eq!(
            parse("5432"),
            Ok(Forward {
                local: 5432,
                remote: 5432
            })
        );
        assert_eq!(
            parse("8000:8080"),
            Ok(Forward {
                local: 8000,
                remote: 8080
            })
        );
        assert_eq!(
            parse(":9229"),
            Ok(Forward {
                local: 0,
                remote: 9229
            })
        );
        assert!(parse("0").unwrap_err().contains("remote port"));
        assert!(parse("x:80").unwrap_err().contains("local port"));
        assert!(parse("80:99999").is_err());
    }
}
