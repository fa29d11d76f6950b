//! A real `git://` server for tests: Git's own daemon in `--inetd` mode behind a port-0
//! listener (one daemon process per connection, as inetd would run it), serving every
//! repository under a temporary root. Counts connections so tests can tell when a client
//! stopped polling. Stops (and reaps every daemon) when dropped.

use anyhow::Result;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A running `git://` server.
#[derive(Debug)]
pub struct GitDaemon {
    pub addr: SocketAddr,
    root: PathBuf,
    connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl GitDaemon {
    /// Serves the bare repositories under `root` (`git://ADDR/<name>.git`).
    pub fn start(root: &Path) -> Result<GitDaemon> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let connections = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let children: Arc<Mutex<Vec<Child>>> = Arc::default();
        let (count, halt, kids, base) = (
            connections.clone(),
            stop.clone(),
            children.clone(),
            root.to_owned(),
        );
        let thread = std::thread::spawn(move || {
            loop {
                let Ok((stream, _)) = listener.accept() else {
                    continue;
                };
                // The drop wakes the accept with a connection of its own after setting this.
                if halt.load(Ordering::SeqCst) {
                    return;
                }
                count.fetch_add(1, Ordering::SeqCst);
                let Ok(out) = stream.try_clone() else {
                    continue;
                };
                let child = Command::new("git")
                    .arg("daemon")
                    .arg("--inetd")
                    .arg("--export-all")
                    .arg(format!("--base-path={}", base.display()))
                    .arg(&base)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .env("GIT_CONFIG_GLOBAL", "/dev/null")
                    .stdin(Stdio::from(OwnedFd::from(stream)))
                    .stdout(Stdio::from(OwnedFd::from(out)))
                    .stderr(Stdio::null())
                    .spawn();
                if let Ok(c) = child {
                    let mut kids = kids.lock().unwrap_or_else(|p| p.into_inner());
                    // Reap the ones that finished, keep the rest for the drop.
                    kids.retain_mut(|k| !matches!(k.try_wait(), Ok(Some(_))));
                    kids.push(c);
                }
            }
        });
        Ok(GitDaemon {
            addr,
            root: root.to_owned(),
            connections,
            stop,
            children,
            thread: Some(thread),
        })
    }

    /// `git://127.0.0.1:PORT/<name>.git`.
    pub fn url(&self, name: &str) -> String {
        format!("git://{}/{name}.git", self.addr)
    }

    /// The root the repositories live under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Connections accepted so far (each is one ls-refs or fetch).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        for mut c in self
            .children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
