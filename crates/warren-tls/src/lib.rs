//! TLS for Warren's listeners and clients: a server certificate read from PEM files and
//! reloaded when they change (cert-manager and the kubelet rewrite them in place), a
//! listener that serves axum over TLS with concurrent handshakes, and the extra CA bundle
//! clients trust for Warren's own endpoints.
//!
//! Reloading polls the files' contents rather than watching for events: Kubernetes swaps a
//! secret volume's files through a symlink, which inotify watchers on the files miss.

mod client;
mod listener;
mod reload;

pub use client::{trust_ca_file, CaBundle};
pub use listener::{accept, TlsListener};
pub use reload::{ServerCert, RELOAD_INTERVAL};

use std::path::PathBuf;

/// The two PEM files a listener serves TLS from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl CertFiles {
    /// Both or neither: a certificate without its key (or the reverse) is a mistake worth
    /// naming rather than serving plain HTTP.
    pub fn from_options(
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
    ) -> Result<Option<CertFiles>, TlsError> {
        match (cert, key) {
            (Some(cert), Some(key)) => Ok(Some(CertFiles { cert, key })),
            (None, None) => Ok(None),
            (Some(_), None) => Err(TlsError::Half { missing: "key" }),
            (None, Some(_)) => Err(TlsError::Half {
                missing: "certificate",
            }),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("TLS needs both a certificate file and a key file; the {missing} file is missing")]
    Half { missing: &'static str },
    #[error("reading {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing the PEM {what} in {path}")]
    Pem {
        what: &'static str,
        path: String,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("{path} holds no PEM certificate")]
    NoCertificate { path: String },
    #[error("the key in {key} does not load with the certificate in {cert}")]
    Key {
        cert: String,
        key: String,
        #[source]
        source: rustls::Error,
    },
    #[error("the CA bundle {path} is not usable")]
    Bundle {
        path: String,
        #[source]
        source: reqwest::Error,
    },
}
