//! A certificate authority made for one test, and the certificates it issues, written as
//! the PEM files Warren's services read (`tls.crt`, `tls.key`, `ca.crt`, as cert-manager
//! names them).

use anyhow::{Context, Result};
use rustls::pki_types::pem::PemObject;
use std::path::{Path, PathBuf};

/// A test CA. Its certificate is in `ca.crt` under the directory it was made in.
pub struct TestCa {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
    /// The CA certificate (PEM).
    pub ca_file: PathBuf,
}

/// A certificate the CA issued: its files and its DER form (what a client sees).
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub der: Vec<u8>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa")
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl TestCa {
    /// A new CA named `name`, its certificate written to `dir/ca.crt`.
    pub fn new(dir: &Path, name: &str) -> Result<TestCa> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key)?;
        let ca_file = dir.join("ca.crt");
        std::fs::write(&ca_file, cert.pem())?;
        Ok(TestCa { cert, key, ca_file })
    }

    /// A leaf for `names` (DNS names, wildcards or IP addresses), written to
    /// `dir/tls.crt` and `dir/tls.key` (replacing what is there, as a renewal does).
    pub fn issue(&self, dir: &Path, names: &[&str]) -> Result<Issued> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let key = rcgen::KeyPair::generate()?;
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        let cert_file = dir.join("tls.crt");
        let key_file = dir.join("tls.key");
        // The key first: a reader between the two writes sees a mismatched pair and keeps
        // what it has, as with any non-atomic renewal.
        std::fs::write(&key_file, key.serialize_pem())?;
        std::fs::write(&cert_file, cert.pem())?;
        let der = rustls::pki_types::CertificateDer::from_pem_slice(cert.pem().as_bytes())
            .context("reading back the issued certificate")?
            .to_vec();
        Ok(Issued {
            cert_file,
            key_file,
            der,
        })
    }

    /// The CA as a bundle clients trust.
    pub fn bundle(&self) -> Result<warren_tls::CaBundle> {
        Ok(warren_tls::CaBundle::load(&self.ca_file)?)
    }
}
