//! A real OCI registry for tests: Debian's `docker-registry` (the CNCF distribution
//! registry, installed by `.ci/setup-tools.sh`) on a free loopback port, over plain HTTP or
//! over TLS with a certificate of a test CA and htpasswd users; and a pusher of Dev Container
//! Features to it, as the reference tools publish them.
//!
//! The registry process is killed when the [`Registry`] is dropped, and the certificate
//! trust it was given (a `certs.d/<addr>/ca.crt`, with the `hosts.toml` containerd reads
//! there) removed.

use anyhow::{bail, Context, Result};
use oci_client::client::{
    Certificate, CertificateEncoding, ClientConfig, ClientProtocol, Config, ImageLayer,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The config media type of a Feature.
pub const FEATURE_CONFIG: &str = "application/vnd.devcontainers";
/// The layer media type of a Feature.
pub const FEATURE_LAYER: &str = "application/vnd.devcontainers.layer.v1+tar";

/// How a [`Registry`] is started.
#[derive(Debug, Default, Clone)]
pub struct RegistryOptions {
    /// TLS, the CA's certificate written as `<dir>/<addr>/ca.crt` (Podman's `certs.d`
    /// layout) for clients to trust; plain HTTP when `None`.
    pub trust_in: Option<PathBuf>,
    /// One htpasswd user (needs TLS: the registry refuses basic auth in the clear).
    pub user: Option<(String, String)>,
}

/// A running registry.
pub struct Registry {
    child: Child,
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// The CA certificate clients must trust (TLS only).
    pub ca_pem: Option<Vec<u8>>,
    trusted: Option<PathBuf>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("addr", &self.addr)
            .finish()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(t) = &self.trusted {
            let _ = std::fs::remove_dir_all(t);
        }
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `docker-registry` and `htpasswd` are here; without them a test skips with a
/// notice, or fails under `WARREN_REQUIRE_TOOLS=1`.
pub fn available() -> bool {
    let missing: Vec<&str> = ["docker-registry", "htpasswd"]
        .into_iter()
        .filter(|t| !have(t))
        .collect();
    if missing.is_empty() {
        return true;
    }
    if std::env::var("WARREN_REQUIRE_TOOLS").as_deref() == Ok("1") {
        panic!("WARREN_REQUIRE_TOOLS=1 but {missing:?} missing (.ci/setup-tools.sh)");
    }
    eprintln!("skipping: {missing:?} missing (.ci/setup-tools.sh installs them)");
    false
}

/// A loopback port nothing listens on now (the registry cannot report the one it took).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Registry {
    pub async fn start(options: &RegistryOptions) -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let addr = format!("127.0.0.1:{}", free_port()?);
        std::fs::create_dir_all(d.join("storage"))?;
        let mut config = format!(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n",
            d.join("storage").display()
        );
        let mut ca_pem = None;
        let mut trusted = None;
        if let Some(trust_in) = &options.trust_in {
            let ca = crate::tls::TestCa::new(&d.join("ca"), "warren test registry CA")?;
            let leaf = ca.issue(&d.join("leaf"), &["127.0.0.1"])?;
            config.push_str(&format!(
                "  tls:\n    certificate: {}\n    key: {}\n",
                leaf.cert_file.display(),
                leaf.key_file.display()
            ));
            let pem = std::fs::read(&ca.ca_file)?;
            let t = trust_in.join(&addr);
            std::fs::create_dir_all(&t).with_context(|| format!("creating {}", t.display()))?;
            std::fs::write(t.join("ca.crt"), &pem)?;
            // containerd reads the same layout (a node's `config_path`), but speaks plain
            // HTTP to a loopback registry unless told otherwise; Podman ignores this file.
            std::fs::write(
                t.join("hosts.toml"),
                format!(
                    "server = \"https://{addr}\"\n[host.\"https://{addr}\"]\n  ca = \"{}\"\n",
                    t.join("ca.crt").display()
                ),
            )?;
            trusted = Some(t);
            ca_pem = Some(pem);
        }
        if let Some((user, password)) = &options.user {
            if options.trust_in.is_none() {
                bail!("the registry takes basic auth over TLS only");
            }
            let out =
                crate::process::stdout_ok(Command::new("htpasswd").args(["-Bbn", user, password]));
            std::fs::write(d.join("htpasswd"), out)?;
            config.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: warren-test\n    path: {}\n",
                d.join("htpasswd").display()
            ));
        }
        std::fs::write(d.join("config.yml"), config)?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(d.join("config.yml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("registry.log"))?)
            .spawn()
            .context("starting docker-registry")?;
        let registry = Registry {
            child,
            addr,
            ca_pem,
            trusted,
            dir,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(&registry.addr)
            .await
            .is_err()
        {
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "the registry did not listen on {} within 30 s: {}",
                    registry.addr,
                    registry.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(registry)
    }

    /// What the registry logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// A client that reaches this registry.
    pub fn client(&self) -> Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = ClientConfig {
            protocol: if self.ca_pem.is_some() {
                ClientProtocol::Https
            } else {
                ClientProtocol::Http
            },
            ..Default::default()
        };
        if let Some(pem) = &self.ca_pem {
            config.extra_root_certificates.push(Certificate {
                encoding: CertificateEncoding::Pem,
                data: pem.clone(),
            });
        }
        Client::new(config)
    }

    /// Publishes a Feature as `<addr>/<path>` (`features/hello:1`): its folder's files
    /// (path, mode, contents) as the one layer of an OCI artifact, as `devcontainer
    /// features publish` does. Returns the full reference and the manifest's digest.
    pub async fn push_feature(
        &self,
        path: &str,
        files: &[(&str, u32, &[u8])],
        auth: Option<(&str, &str)>,
    ) -> Result<(String, String)> {
        self.push_artifact(path, &feature_tar(files)?, FEATURE_CONFIG, auth)
            .await
    }

    /// Publishes `layer` as the one layer of an artifact whose config has `config_type`.
    pub async fn push_artifact(
        &self,
        path: &str,
        layer: &[u8],
        config_type: &str,
        auth: Option<(&str, &str)>,
    ) -> Result<(String, String)> {
        let full = format!("{}/{path}", self.addr);
        let reference: Reference = full.parse()?;
        let auth = match auth {
            Some((u, p)) => RegistryAuth::Basic(u.into(), p.into()),
            None => RegistryAuth::Anonymous,
        };
        let layers = [ImageLayer::new(layer.to_vec(), FEATURE_LAYER.into(), None)];
        let config = Config::new(Vec::new(), config_type.into(), None);
        let client = self.client();
        client
            .push(&reference, &layers, config, &auth, None)
            .await
            .with_context(|| format!("pushing {full}: {}", self.log()))?;
        let digest = client
            .fetch_manifest_digest(&reference, &auth)
            .await
            .with_context(|| format!("the digest of {full}"))?;
        Ok((full, digest))
    }
}

/// A Feature's folder as the tar its layer is.
pub fn feature_tar(files: &[(&str, u32, &[u8])]) -> Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for (path, mode, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_cksum();
        tar.append_data(&mut h, format!("./{path}"), *data)?;
    }
    Ok(tar.into_inner()?)
}

/// A `devcontainer-feature.json` and an `install.sh` that writes `line` (which may use the
/// options' variables) to `/usr/local/share/<id>.txt`.
pub fn simple_feature(id: &str, metadata_extra: &str, line: &str) -> Vec<(String, u32, Vec<u8>)> {
    let metadata = format!(
        r#"{{ "id": "{id}", "version": "1.0.0", "name": "The {id} Feature"{metadata_extra} }}"#
    );
    let install = format!(
        "#!/bin/sh\nset -e\nmkdir -p /usr/local/share\necho \"{line}\" >> /usr/local/share/{id}.txt\n"
    );
    vec![
        (
            "devcontainer-feature.json".into(),
            0o644,
            metadata.into_bytes(),
        ),
        ("install.sh".into(), 0o755, install.into_bytes()),
    ]
}

/// Borrows files as [`Registry::push_feature`] takes them.
pub fn borrowed(files: &[(String, u32, Vec<u8>)]) -> Vec<(&str, u32, &[u8])> {
    files
        .iter()
        .map(|(p, m, d)| (p.as_str(), *m, d.as_slice()))
        .collect()
}

/// A registry auth file as `podman login --authfile` writes it (an agent's pull secret).
pub fn auth_file(path: &std::path::Path, registry: &str, user: &str, password: &str) {
    use base64::Engine;
    std::fs::create_dir_all(path.parent().expect("a file in a directory")).expect("directory");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::write(
        path,
        format!(r#"{{"auths": {{"{registry}": {{"auth": "{auth}"}}}}}}"#),
    )
    .expect("auth file");
}
