//! Features from OCI registries ("Dev Container Features distribution"): the manifest of
//! `registry/namespace/id:tag`, whose config has the media type `application/vnd.devcontainers`
//! and whose one layer (`application/vnd.devcontainers.layer.v1+tar`) is the Feature's
//! folder as a tar archive.
//!
//! Registries are reached as the agent's engine reaches them: with the credentials of the
//! workspace's image pull secrets, trusting the certificates Podman trusts for a registry
//! (`/etc/containers/certs.d/<registry>/*.crt`), over plain HTTP only for registries the agent
//! names. The manifest is asked for every time (a tag moves); the layer is kept by its
//! digest, checked on the way in and again when read back, so a second build does not
//! download it again.
//!
//! A configuration names the registry, and the registry names its token realm and its
//! redirects: all three are held to the agent's outbound guard ([`Registries::guard`]; the
//! client goes through a `warren_netguard` proxy, as it takes no resolver), so a Feature
//! cannot make the agent reach the cloud's metadata service or a loopback port. The registries the operator
//! configured (plain-HTTP ones, those with certificates in `certs.d`) are trusted by name.

use crate::FeatureError;
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// A Feature's manifest is an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of a Feature.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.devcontainers";
/// The media type of a Feature's layer: its folder as tar.
pub const LAYER_MEDIA_TYPE: &str = "application/vnd.devcontainers.layer.v1+tar";
/// Most bytes of a manifest.
const MAX_MANIFEST_BYTES: usize = 1 << 20;
/// Most bytes of a Feature's archive as fetched (published ones are a few KiB to a few MiB).
pub const MAX_ARCHIVE_BYTES: usize = 64 << 20;

/// A registry's credentials: (user, password).
pub type Credentials = Arc<dyn Fn(&str) -> Option<(String, String)> + Send + Sync>;

/// How the agent reaches registries for Features.
#[derive(Clone)]
pub struct Registries {
    /// `<dir>/<registry>/*.crt` are trusted for that registry, beside the system's roots.
    pub certs_dir: PathBuf,
    /// Registries (`host[:port]`) reached over plain HTTP.
    pub plain_http: Vec<String>,
    /// Where fetched archives are kept, by digest.
    pub cache_dir: PathBuf,
    /// The credentials for a registry host, if any.
    pub credentials: Credentials,
    /// The outbound guard every request is held to; `None` reaches any address (tests of
    /// the fetch itself).
    pub guard: Option<warren_netguard::Guard>,
}

impl std::fmt::Debug for Registries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registries")
            .field("certs_dir", &self.certs_dir)
            .field("plain_http", &self.plain_http)
            .field("cache_dir", &self.cache_dir)
            .field("guard", &self.guard)
            .finish_non_exhaustive()
    }
}

fn fetch_error(
    feature: &str,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> FeatureError {
    FeatureError::Fetch {
        feature: feature.to_owned(),
        source: e.into(),
    }
}

impl Registries {
    /// The Feature at `reference`: its archive, its manifest's digest, and whether the
    /// archive came from the cache.
    pub async fn fetch(&self, reference: &str) -> Result<(Vec<u8>, String, bool), FeatureError> {
        let parsed: Reference = reference
            .parse()
            .map_err(|e| FeatureError::invalid(reference, format!("not an OCI reference: {e}")))?;
        let session = match &self.guard {
            Some(guard) => Some(
                warren_netguard::proxy::Session::start(guard.clone(), &self.trusted())
                    .await
                    .map_err(|e| fetch_error(reference, e))?,
            ),
            None => None,
        };
        let client = self
            .client(parsed.registry(), session.as_ref())
            .map_err(|e| fetch_error(reference, e))?;
        let fetched = self.fetch_with(&client, reference, &parsed).await;
        match (fetched, session.as_ref().and_then(|s| s.refusal())) {
            // Whatever the client made of the proxy's refusal ("unsuccessful tunnel", a
            // 403 where a token was expected), the refusal is why.
            (Err(_), Some(refusal)) => Err(fetch_error(reference, refusal)),
            (fetched, _) => fetched,
        }
    }

    /// The registries the operator configured, trusted by name: the plain-HTTP ones and
    /// those with certificates of their own.
    fn trusted(&self) -> Vec<String> {
        let mut trusted = self.plain_http.clone();
        if let Ok(entries) = std::fs::read_dir(&self.certs_dir) {
            trusted.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .filter_map(|e| e.file_name().into_string().ok()),
            );
        }
        trusted
    }

    async fn fetch_with(
        &self,
        client: &Client,
        reference: &str,
        parsed: &Reference,
    ) -> Result<(Vec<u8>, String, bool), FeatureError> {
        let registry = parsed.registry().to_owned();
        let auth = match (self.credentials)(&registry) {
            Some((user, password)) => RegistryAuth::Basic(user, password),
            None => RegistryAuth::Anonymous,
        };
        let (bytes, digest) = client
            .pull_manifest_raw(parsed, &auth, &[MANIFEST_MEDIA_TYPE])
            .await
            .map_err(|e| fetch_error(reference, e))?;
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(FeatureError::invalid(
                reference,
                format!(
                    "its manifest is {} bytes; at most {MAX_MANIFEST_BYTES} are read",
                    bytes.len()
                ),
            ));
        }
        let manifest: OciImageManifest = serde_json::from_slice(&bytes).map_err(|e| {
            FeatureError::invalid(
                reference,
                format!("its manifest is not an OCI image manifest: {e}"),
            )
        })?;
        if manifest.config.media_type != CONFIG_MEDIA_TYPE {
            return Err(FeatureError::invalid(
                reference,
                format!(
                    "not a Dev Container Feature: its config is {} (a Feature's is {CONFIG_MEDIA_TYPE})",
                    manifest.config.media_type
                ),
            ));
        }
        let Some(layer) = manifest
            .layers
            .iter()
            .find(|l| l.media_type == LAYER_MEDIA_TYPE)
        else {
            return Err(FeatureError::invalid(
                reference,
                format!("its manifest has no {LAYER_MEDIA_TYPE} layer"),
            ));
        };
        let size = usize::try_from(layer.size).unwrap_or(usize::MAX);
        if size > MAX_ARCHIVE_BYTES {
            return Err(FeatureError::invalid(
                reference,
                format!(
                    "its archive is {} bytes; at most {MAX_ARCHIVE_BYTES} are fetched",
                    layer.size
                ),
            ));
        }
        let Some(hex_digest) = layer
            .digest
            .strip_prefix("sha256:")
            .filter(|h| h.len() == 64 && h.chars().all(|c| c.is_ascii_hexdigit()))
        else {
            return Err(FeatureError::invalid(
                reference,
                format!("its layer's digest {} is not a sha256 digest", layer.digest),
            ));
        };
        let cached = self
            .cache_dir
            .join(format!("sha256-{}.tar", hex_digest.to_ascii_lowercase()));
        if let Ok(data) = tokio::fs::read(&cached).await {
            if hex::encode(Sha256::digest(&data)).eq_ignore_ascii_case(hex_digest) {
                return Ok((data, digest, true));
            }
            // Damaged: fetched again below, and replaced.
            tracing::warn!(path = %cached.display(), "a cached Feature did not match its digest");
        }
        let mut out = Capped {
            data: Vec::with_capacity(size.min(MAX_ARCHIVE_BYTES)),
            max: MAX_ARCHIVE_BYTES,
        };
        // The client checks the bytes against the layer's digest.
        client
            .pull_blob(parsed, layer, &mut out)
            .await
            .map_err(|e| fetch_error(reference, e))?;
        if let Err(e) = self.keep(&cached, &out.data).await {
            tracing::warn!(path = %cached.display(), error = %e, "could not cache a Feature");
        }
        Ok((out.data, digest, false))
    }

    fn client(
        &self,
        registry: &str,
        session: Option<&warren_netguard::proxy::Session>,
    ) -> Result<Client, Box<dyn std::error::Error + Send + Sync>> {
        // reqwest 0.13 is built without a TLS provider of its own (as gix's is): Warren's,
        // ring, for the process; a no-op once one is installed.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut extra_root_certificates = vec![];
        let dir = self.certs_dir.join(registry);
        if !registry.contains(['/', '\\']) && !registry.starts_with('.') {
            if let Ok(entries) = std::fs::read_dir(&dir) {
                for entry in entries.flatten() {
                    let path = entry.path();
                    if path.extension().is_some_and(|e| e == "crt") {
                        extra_root_certificates.push(Certificate {
                            encoding: CertificateEncoding::Pem,
                            data: std::fs::read(&path)?,
                        });
                    }
                }
            }
        }
        // Not `Client::new`: on a bad certificate it falls back to a default client, one
        // without the proxy.
        Ok(Client::try_from(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.plain_http.clone()),
            extra_root_certificates,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            https_proxy: session.map(|s| s.url()),
            http_proxy: session.map(|s| s.url()),
            ..Default::default()
        })?)
    }

    /// Writes a fetched archive to the cache (a whole file or none).
    async fn keep(&self, path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
        tokio::fs::create_dir_all(&self.cache_dir).await?;
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        tokio::fs::write(&tmp, data).await?;
        tokio::fs::rename(&tmp, path).await
    }
}

/// A buffer that refuses to grow past `max` bytes.
struct Capped {
    data: Vec<u8>,
    max: usize,
}

impl tokio::io::AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if self.data.len() + buf.len() > self.max {
            return Poll::Ready(Err(std::io::Error::other(format!(
                "the archive is larger than {} bytes",
                self.max
            ))));
        }
        self.data.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
