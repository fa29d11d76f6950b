//! `proxy` mounts an agent reaches (spec/mounts.md): the server lists them in its reconcile
//! answers; the agent probes each URL and reports what it found with its next reconcile, and
//! dials exactly these URLs for the relay's tunnels to the mount — never an address a tunnel
//! request names. An `https` URL is dialled with TLS here, checked against this machine's
//! trust store, so the proxy speaks plain HTTP inside the tunnel either way.

use crate::runtime::{ByteStream, RuntimeError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use url::Url;
use warren_types::api::Condition;
use warren_types::reconcile::{MountReport, ProxyMountSpec, URL_CONDITION};

/// How often every URL is probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(5);
/// Longest a dial (TCP and TLS) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
struct Entry {
    url: Url,
    /// The last probe: reachable, and what was seen.
    probed: Option<(bool, String)>,
}

/// The agent's URL mounts; clone it freely.
#[derive(Clone, Default)]
pub struct UrlMounts {
    entries: Arc<Mutex<BTreeMap<String, Entry>>>,
    tls: Arc<std::sync::OnceLock<Arc<rustls::ClientConfig>>>,
}

impl std::fmt::Debug for UrlMounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlMounts")
            .field("mounts", &self.lock().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl UrlMounts {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the server's list: new mounts are probed next round; a changed URL forgets its
    /// last probe; mounts no longer listed are dropped (their tunnels refused).
    pub fn set(&self, specs: &[ProxyMountSpec]) {
        let mut entries = self.lock();
        let mut next = BTreeMap::new();
        for s in specs {
            let Ok(url) = Url::parse(&s.url) else {
                tracing::warn!(mount = %s.name, "the server sent a URL that does not parse; ignored");
                continue;
            };
            let probed = entries
                .get(&s.name)
                .filter(|e| e.url == url)
                .and_then(|e| e.probed.clone());
            next.insert(s.name.clone(), Entry { url, probed });
        }
        *entries = next;
    }

    /// What the last probes found, for the next reconcile.
    pub fn reports(&self) -> Vec<MountReport> {
        self.lock()
            .iter()
            .filter_map(|(name, e)| {
                let (ok, message) = e.probed.clone()?;
                Some(MountReport {
                    mount: name.clone(),
                    ports: vec![],
                    conditions: vec![Condition {
                        kind: URL_CONDITION.into(),
                        status: if ok { "True" } else { "False" }.into(),
                        reason: if ok { "Reachable" } else { "Unreachable" }.into(),
                        message,
                    }],
                })
            })
            .collect()
    }

    /// A byte stream to mount `name`'s URL; `None` when `name` is no mount of this agent.
    pub async fn dial(&self, name: &str) -> Option<Result<Box<dyn ByteStream>, RuntimeError>> {
        let url = self.lock().get(name)?.url.clone();
        Some(self.dial_url(&url).await)
    }

    async fn dial_url(&self, url: &Url) -> Result<Box<dyn ByteStream>, RuntimeError> {
        let fail =
            |what: String, e: Box<dyn std::error::Error + Send + Sync>| RuntimeError::Runtime {
                context: what,
                source: e,
            };
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().unwrap_or(80);
        let dial = async {
            let tcp = tokio::net::TcpStream::connect((host.trim_matches(['[', ']']), port))
                .await
                .map_err(|e| fail(format!("connecting to {host}:{port}"), Box::new(e)))?;
            let _ = tcp.set_nodelay(true);
            if url.scheme() != "https" {
                return Ok(Box::new(tcp) as Box<dyn ByteStream>);
            }
            let name =
                rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_owned())
                    .map_err(|e| fail(format!("{host} as a TLS server name"), Box::new(e)))?;
            let tls = tokio_rustls::TlsConnector::from(self.tls_config())
                .connect(name, tcp)
                .await
                .map_err(|e| fail(format!("TLS with {host}:{port}"), Box::new(e)))?;
            Ok(Box::new(tls) as Box<dyn ByteStream>)
        };
        match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
            Ok(r) => r,
            Err(_) => Err(RuntimeError::NotAvailable(format!(
                "{host}:{port} did not answer within {} s",
                DIAL_TIMEOUT.as_secs()
            ))),
        }
    }

    /// TLS client settings with this machine's trust store (an internal CA the host trusts
    /// is trusted here too).
    fn tls_config(&self) -> Arc<rustls::ClientConfig> {
        self.tls
            .get_or_init(|| {
                let mut roots = rustls::RootCertStore::empty();
                let found = rustls_native_certs::load_native_certs();
                for e in &found.errors {
                    tracing::warn!(error = %e, "reading the system's trusted certificates");
                }
                let (added, ignored) = roots.add_parsable_certificates(found.certs);
                tracing::debug!(added, ignored, "trusted certificates for https mounts");
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                Arc::new(
                    rustls::ClientConfig::builder_with_provider(provider)
                        .with_safe_default_protocol_versions()
                        .expect("ring supports the default protocol versions")
                        .with_root_certificates(roots)
                        .with_no_client_auth(),
                )
            })
            .clone()
    }

    /// Probes every URL once: a dial (TCP, and TLS for `https`) that succeeds is reachable.
    pub async fn probe_all(&self) {
        let targets: Vec<(String, Url)> = self
            .lock()
            .iter()
            .map(|(n, e)| (n.clone(), e.url.clone()))
            .collect();
        let probes = targets.into_iter().map(|(name, url)| async move {
            let result = match self.dial_url(&url).await {
                Ok(_) => (true, format!("{} answered", authority(&url))),
                Err(e) => (false, warren_types::error_chain(&e)),
            };
            (name, url, result)
        });
        for (name, url, result) in futures::future::join_all(probes).await {
            let mut entries = self.lock();
            if let Some(e) = entries.get_mut(&name).filter(|e| e.url == url) {
                if e.probed.as_ref().map(|p| p.0) != Some(result.0) {
                    tracing::info!(mount = %name, reachable = result.0, detail = %result.1, "mount URL probed");
                }
                e.probed = Some(result);
            }
        }
    }

    /// Probes every [`PROBE_INTERVAL`] until `shutdown` fires.
    pub async fn run(self, shutdown: CancellationToken) {
        loop {
            self.probe_all().await;
            tokio::select! {
                // Cancel-safe: a sleep holds no state.
                _ = tokio::time::sleep(PROBE_INTERVAL) => {}
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => return,
            }
        }
    }
}

fn authority(url: &Url) -> String {
    format!(
        "{}:{}",
        url.host_str().unwrap_or_default(),
        url.port_or_known_default().unwrap_or(80)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn spec(name: &str, url: &str) -> ProxyMountSpec {
        ProxyMountSpec {
            name: name.into(),
            url: url.into(),
        }
    }

    #[tokio::test]
    async fn only_listed_urls_are_dialled_and_probes_are_reported() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(b"hi").await;
            }
        });
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let m = UrlMounts::default();
        assert!(m.dial("web").await.is_none(), "not a mount yet");
        m.set(&[
            spec("web", &format!("http://127.0.0.1:{port}/app")),
            spec("gone", &format!("http://127.0.0.1:{closed}/")),
        ]);
        assert!(m.reports().is_empty(), "nothing probed yet");
        let mut s = m.dial("web").await.unwrap().unwrap();
        let mut buf = [0u8; 2];
        s.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hi");
        m.probe_all().await;
        let reports = m.reports();
        let by_name: BTreeMap<_, _> = reports.iter().map(|r| (r.mount.as_str(), r)).collect();
        assert_eq!(by_name["web"].conditions[0].status, "True");
        assert_eq!(by_name["gone"].conditions[0].status, "False");
        assert!(
            by_name["gone"].conditions[0]
                .message
                .contains(&format!("127.0.0.1:{closed}")),
            "{:?}",
            by_name["gone"]
        );
        // Dropped from the list: no more tunnels to it.
        m.set(&[spec("web", &format!("http://127.0.0.1:{port}/app"))]);
        assert!(m.dial("gone").await.is_none());
        assert_eq!(m.reports().len(), 1, "the kept probe stays");
    }
}
