//! The server certificate, swapped for a new one when its files change, without dropping a
//! connection: each handshake asks for the current one.

use crate::{CertFiles, TlsError};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use sha2::{Digest, Sha256};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How often the files are read again. The kubelet takes up to a minute to update a
/// mounted secret anyway; reading two small files every few seconds costs nothing.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// A server certificate kept current with its files. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ServerCert {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    current: RwLock<Current>,
    /// The last failure (its message and the files' digest when they could be read): each
    /// distinct one is logged once, not on every poll.
    failed: Mutex<Option<(String, Option<[u8; 32]>)>>,
}

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    digest: [u8; 32],
    generation: u64,
}

impl ServerCert {
    /// Loads the files; an error here stops the service before it binds anything.
    pub fn load(files: CertFiles) -> Result<Self, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (digest, key) = read(&files, &provider)?;
        Ok(ServerCert {
            inner: Arc::new(Inner {
                files,
                provider,
                current: RwLock::new(Current {
                    key,
                    digest,
                    generation: 1,
                }),
                failed: Mutex::new(None),
            }),
        })
    }

    /// The certificate a service's two optional settings name: `None` when neither is set,
    /// an error naming the missing one when only one is, else the loaded certificate.
    pub fn from_options(
        cert: Option<std::path::PathBuf>,
        key: Option<std::path::PathBuf>,
    ) -> Result<Option<Self>, TlsError> {
        CertFiles::from_options(cert, key)?
            .map(ServerCert::load)
            .transpose()
    }

    /// An acceptor offering `alpn` (in order of preference) and always the current
    /// certificate.
    pub fn acceptor(&self, alpn: &[&[u8]]) -> TlsAcceptor {
        let mut config = rustls::ServerConfig::builder_with_provider(self.inner.provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.inner.clone())));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        TlsAcceptor::from(Arc::new(config))
    }

    /// How many certificates have been served so far: 1 after loading, one more per reload
    /// that changed it.
    pub fn generation(&self) -> u64 {
        self.inner.current.read().expect("lock poisoned").generation
    }

    /// Reads the files again and swaps the certificate when they changed. `Ok(false)` when
    /// they did not; on an error the certificate in use stays.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let (cert_pem, key_pem) = read_files(&self.inner.files)?;
        let digest = digest(&cert_pem, &key_pem);
        if digest == self.inner.current.read().expect("lock poisoned").digest {
            return Ok(false);
        }
        let key = parse(&self.inner.files, &cert_pem, &key_pem, &self.inner.provider)?;
        let mut current = self.inner.current.write().expect("lock poisoned");
        current.key = key;
        current.digest = digest;
        current.generation += 1;
        Ok(true)
    }

    /// Reloads every `every` until `shutdown`. A file caught half-written (a new certificate
    /// beside the old key) fails to load and is tried again at the next poll.
    pub async fn watch(self, every: Duration, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                // Cancel-safe: an interval tick that loses the race is taken next time.
                _ = ticks.tick() => {}
                // Cancel-safe: cancellation is level-triggered.
                _ = shutdown.cancelled() => return,
            }
            self.poll_once();
        }
    }

    fn poll_once(&self) {
        let files = &self.inner.files;
        match self.reload() {
            Ok(false) => {}
            Ok(true) => {
                *self.inner.failed.lock().expect("lock poisoned") = None;
                metrics::counter!("warren_tls_reloads_total", "result" => "ok").increment(1);
                tracing::info!(
                    cert = %files.cert.display(),
                    generation = self.generation(),
                    "TLS certificate reloaded"
                );
            }
            Err(e) => {
                // Log a given bad state once, however many polls see it.
                let message = warren_types::error_chain(&e);
                let contents = read_files(files).ok().map(|(c, k)| digest(&c, &k));
                let seen = Some((message.clone(), contents));
                let mut failed = self.inner.failed.lock().expect("lock poisoned");
                if *failed != seen {
                    *failed = seen;
                    metrics::counter!("warren_tls_reloads_total", "result" => "error").increment(1);
                    tracing::warn!(
                        error = %message,
                        "TLS certificate not reloaded; still serving the previous one"
                    );
                }
            }
        }
    }
}

#[derive(Debug)]
struct Resolver(Arc<Inner>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current.read().expect("lock poisoned").key.clone())
    }
}

fn read(
    files: &CertFiles,
    provider: &CryptoProvider,
) -> Result<([u8; 32], Arc<CertifiedKey>), TlsError> {
    let (cert_pem, key_pem) = read_files(files)?;
    let key = parse(files, &cert_pem, &key_pem, provider)?;
    Ok((digest(&cert_pem, &key_pem), key))
}

fn read_files(files: &CertFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.display().to_string(),
            source,
        })
    };
    Ok((read(&files.cert)?, read(&files.key)?))
}

fn digest(cert: &[u8], key: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update((cert.len() as u64).to_be_bytes());
    h.update(cert);
    h.update(key);
    h.finalize().into()
}

fn parse(
    files: &CertFiles,
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<Arc<CertifiedKey>, TlsError> {
    let cert_path = files.cert.display().to_string();
    let key_path = files.key.display().to_string();
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what: "certificate",
            path: cert_path.clone(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| TlsError::Pem {
        what: "private key",
        path: key_path.clone(),
        source,
    })?;
    let key = CertifiedKey::from_der(certs, key, provider).map_err(|source| TlsError::Key {
        cert: cert_path,
        key: key_path,
        source,
    })?;
    Ok(Arc::new(key))
}
