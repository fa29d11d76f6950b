//! The extra certificate authorities a client trusts for Warren's own endpoints (a private
//! CA, e.g. cert-manager's), on top of the built-in public roots.

use crate::TlsError;
use std::path::Path;

/// The certificates of a PEM CA bundle, checked when loaded.
#[derive(Clone, Debug)]
pub struct CaBundle {
    certs: Vec<reqwest::Certificate>,
}

impl CaBundle {
    /// Reads and parses the bundle; an empty or unreadable file is an error that names it.
    pub fn load(path: &Path) -> Result<Self, TlsError> {
        let name = path.display().to_string();
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            path: name.clone(),
            source,
        })?;
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).map_err(|source| TlsError::Bundle {
                path: name.clone(),
                source,
            })?;
        if certs.is_empty() {
            return Err(TlsError::NoCertificate { path: name });
        }
        Ok(CaBundle { certs })
    }

    /// The bundle at `path`, when one is configured.
    pub fn load_optional(path: Option<&Path>) -> Result<Option<Self>, TlsError> {
        path.map(CaBundle::load).transpose()
    }

    /// `builder` trusting these CAs as well as the built-in roots.
    pub fn apply(&self, mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        for cert in &self.certs {
            builder = builder.add_root_certificate(cert.clone());
        }
        builder
    }
}

/// `builder`, trusting the CA bundle at `path` too when one is given.
pub fn trust_ca_file(
    builder: reqwest::ClientBuilder,
    path: Option<&Path>,
) -> Result<reqwest::ClientBuilder, TlsError> {
    Ok(match path {
        Some(path) => CaBundle::load(path)?.apply(builder),
        None => builder,
    })
}
