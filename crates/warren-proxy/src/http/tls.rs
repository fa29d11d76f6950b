//! TLS for the HTTP listener when the configuration names a certificate and key (PEM):
//! HTTP/2 and HTTP/1.1 offered by ALPN.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading the TLS {what} from {path}")]
    Pem {
        what: &'static str,
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the TLS certificate file {path} holds no certificate")]
    NoCertificate { path: String },
    #[error("the TLS certificate and key do not make a server configuration")]
    Config(#[source] rustls::Error),
}

/// Loads the certificate chain and key; fails before anything is served.
pub(crate) fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, TlsError> {
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| TlsError::Pem {
            what: "certificate",
            path: cert.display().to_string(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: cert.display().to_string(),
        });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| TlsError::Pem {
        what: "key",
        path: key.display().to_string(),
        source,
    })?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(TlsError::Config)?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(TlsError::Config)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}
