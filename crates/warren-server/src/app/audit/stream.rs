//! Where audit entries go besides the database — a file of JSON lines, a syslog receiver —
//! and the quiet windows that keep anyone's refused tokens from flooding the log.

use super::AuditEntry;
use std::path::PathBuf;
use tokio::io::AsyncWriteExt;

/// Where entries go besides the database: a file of JSON lines, a syslog receiver.
#[derive(Debug, Default)]
pub struct Stream {
    file: Option<tokio::sync::Mutex<tokio::fs::File>>,
    path: Option<PathBuf>,
    syslog: Option<Syslog>,
}

/// Refusals of anyone's credentials are recorded once per source and minute, with the count
/// of those left out: anyone can send bad tokens as fast as the network allows, and each
/// entry is a write under the chain's one lock.
#[derive(Debug, Default)]
pub(super) struct Quiet {
    /// (action, source) → (end of its window, refusals left out in it).
    windows: std::collections::HashMap<(String, String), (i64, u64)>,
}

const QUIET_WINDOW_MS: i64 = 60_000;
/// Sources tracked at once; past it, expired windows are dropped, and if none has expired
/// every refusal shares one window (memory stays bounded under a spread-out flood).
const QUIET_SOURCES: usize = 4096;

impl Quiet {
    /// Whether to record a refusal now, with how many earlier ones it stands for.
    pub(super) fn admit(&mut self, action: &str, source: &str, now: i64) -> Option<u64> {
        if self.windows.len() >= QUIET_SOURCES {
            self.windows.retain(|_, (end, _)| *end > now);
        }
        let source = if self.windows.len() >= QUIET_SOURCES {
            "*"
        } else {
            source
        };
        let key = (action.to_owned(), source.to_owned());
        match self.windows.get_mut(&key) {
            Some((end, left_out)) if *end > now => {
                *left_out += 1;
                None
            }
            Some((end, left_out)) => {
                let earlier = *left_out;
                (*end, *left_out) = (now + QUIET_WINDOW_MS, 0);
                Some(earlier)
            }
            None => {
                self.windows.insert(key, (now + QUIET_WINDOW_MS, 0));
                Some(0)
            }
        }
    }
}

impl Stream {
    /// Appends to `path` (made if missing, readable by its owner only).
    pub async fn to_file(path: PathBuf) -> std::io::Result<Stream> {
        let mut opts = tokio::fs::OpenOptions::new();
        opts.create(true).append(true);
        #[cfg(unix)]
        opts.mode(0o600);
        let file = opts.open(&path).await?;
        Ok(Stream {
            file: Some(tokio::sync::Mutex::new(file)),
            path: Some(path),
            ..Stream::default()
        })
    }

    /// Also sends every entry to a syslog receiver (`udp://host:port`, or `unix:PATH` such
    /// as `unix:/dev/log`), one RFC 5424 message each, its text the entry's JSON.
    pub async fn with_syslog(mut self, target: &str) -> std::io::Result<Stream> {
        self.syslog = Some(Syslog::connect(target).await?);
        Ok(self)
    }

    pub(super) async fn send(&self, e: &AuditEntry) {
        if let Some(s) = &self.syslog {
            s.send(e).await;
        }
        let Some(file) = &self.file else { return };
        let mut line = serde_json::to_vec(e).unwrap_or_default();
        line.push(b'\n');
        let mut f = file.lock().await;
        // One write per line, under the lock: lines never interleave.
        let written = async {
            f.write_all(&line).await?;
            f.flush().await
        }
        .await;
        if let Err(e) = written {
            let path = self.path.as_deref().unwrap_or(std::path::Path::new(""));
            tracing::error!(error = %e, path = %path.display(), "writing the audit stream");
        }
    }
}

/// A syslog receiver, connected once (datagrams: a receiver that is down loses entries, which
/// the database still holds).
#[derive(Debug)]
enum Syslog {
    Udp(tokio::net::UdpSocket, String),
    #[cfg(unix)]
    Unix(tokio::net::UnixDatagram, String),
}

/// `authpriv.info`: facility 10 (security/authorization), severity 6.
const SYSLOG_PRI: u8 = 10 * 8 + 6;
/// Datagrams stay below what every transport carries whole.
const SYSLOG_MAX: usize = 8192;

impl Syslog {
    /// Checks a `--audit-syslog` target's form, without connecting.
    pub fn check(target: &str) -> Result<(), String> {
        if let Some(addr) = target.strip_prefix("udp://") {
            if addr
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
            {
                return Ok(());
            }
        } else if target
            .strip_prefix("unix:")
            .is_some_and(|p| p.starts_with('/'))
        {
            return Ok(());
        }
        Err(format!(
            "{target:?} is not a syslog receiver: udp://HOST:PORT or unix:/PATH (e.g. unix:/dev/log)"
        ))
    }

    async fn connect(target: &str) -> std::io::Result<Syslog> {
        Syslog::check(target)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty() && h.is_ascii() && !h.contains(' '))
            .unwrap_or_else(|| "-".to_owned());
        if let Some(addr) = target.strip_prefix("udp://") {
            let peer = tokio::net::lookup_host(addr).await?.next().ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{addr} has no address"),
                )
            })?;
            let local = if peer.is_ipv4() {
                "0.0.0.0:0"
            } else {
                "[::]:0"
            };
            let sock = tokio::net::UdpSocket::bind(local).await?;
            sock.connect(peer).await?;
            return Ok(Syslog::Udp(sock, host));
        }
        #[cfg(unix)]
        if let Some(path) = target.strip_prefix("unix:") {
            let sock = tokio::net::UnixDatagram::unbound()?;
            sock.connect(path)?;
            return Ok(Syslog::Unix(sock, host));
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "unix sockets",
        ))
    }

    async fn send(&self, e: &AuditEntry) {
        let host = match self {
            Syslog::Udp(_, h) => h,
            #[cfg(unix)]
            Syslog::Unix(_, h) => h,
        };
        let msg = message(host, e);
        let sent = match self {
            Syslog::Udp(s, _) => s.send(&msg).await,
            #[cfg(unix)]
            Syslog::Unix(s, _) => s.send(&msg).await,
        };
        if let Err(err) = sent {
            tracing::warn!(error = %err, seq = e.seq, "sending an audit entry to syslog");
        }
    }
}

/// One RFC 5424 message: `<PRI>1 TIME HOST warren - audit - JSON`, cut at [`SYSLOG_MAX`].
fn message(host: &str, e: &AuditEntry) -> Vec<u8> {
    let json = serde_json::to_string(e).unwrap_or_default();
    let mut msg = format!(
        "<{SYSLOG_PRI}>1 {} {host} warren - audit - {json}",
        e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    )
    .into_bytes();
    msg.truncate(SYSLOG_MAX);
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syslog_targets_are_checked_by_form() {
        assert!(Syslog::check("udp://127.0.0.1:514").is_ok());
        assert!(Syslog::check("udp://siem.example.com:5514").is_ok());
        assert!(Syslog::check("unix:/dev/log").is_ok());
        for bad in [
            "udp://siem",
            "tcp://h:1",
            "unix:dev/log",
            "/dev/log",
            "udp://:514",
        ] {
            assert!(
                Syslog::check(bad).unwrap_err().contains("udp://HOST:PORT"),
                "{bad}"
            );
        }
    }

    #[test]
    fn refusals_are_recorded_once_per_source_and_minute_with_the_count_left_out() {
        let mut q = Quiet::default();
        assert_eq!(q.admit("token.use", "10.0.0.1", 0), Some(0));
        assert_eq!(q.admit("token.use", "10.0.0.1", 1_000), None);
        assert_eq!(q.admit("token.use", "10.0.0.1", 2_000), None);
        assert_eq!(q.admit("token.use", "10.0.0.2", 2_000), Some(0));
        assert_eq!(q.admit("token.use", "10.0.0.1", 60_000), Some(2));
        assert_eq!(q.admit("token.use", "10.0.0.1", 60_001), None);
    }

    #[test]
    fn a_spread_out_flood_keeps_memory_bounded() {
        let mut q = Quiet::default();
        for i in 0..(QUIET_SOURCES as u32 * 3) {
            q.admit("token.use", &std::net::Ipv4Addr::from(i).to_string(), 10);
        }
        assert!(q.windows.len() <= QUIET_SOURCES + 1);
    }
}
