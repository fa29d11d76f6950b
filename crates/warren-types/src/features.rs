//! Dev Container Features as a build asks for them: what a dev container's `features` say,
//! carried from the devfile made of it, through the rendering, to the agent that fetches and
//! installs them on top of the image (containers.dev, "Dev Container Features reference").
//!
//! The server only writes down what the configuration names; the agent resolves it (an OCI
//! registry through its own credentials, or a folder of the repository through the server),
//! orders the Features by their own metadata and installs them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Devfile attribute of an `image` component made of a dev container: a [`FeatureBuild`].
pub const FEATURES_ATTRIBUTE: &str = "warren.dev/devcontainer-image";

/// Where the build that installs Features leaves the lifecycle commands they contribute:
/// `<HOOKS_DIR>/<stage>/<NN>-<feature>.sh` (`on-create`, `update-content`, `post-create`,
/// `post-start`), run in name order before the dev container's own command of the stage.
pub const HOOKS_DIR: &str = "/usr/local/share/warren/feature-hooks";

/// Most Features one build installs, counting those pulled in by `dependsOn`: a bound on
/// what one configuration can make an agent fetch and run.
pub const MAX_FEATURES: usize = 32;

/// What a dev container adds to an image build.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FeatureBuild {
    /// The image to start from when there is no Dockerfile (the configuration's `image`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_image: Option<String>,
    /// The Features, as the configuration lists them (their order is the agent's to find).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<FeatureRequest>,
    /// `overrideFeatureInstallOrder`: Feature ids (no version), first installed first once
    /// their dependencies are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub install_order: Vec<String>,
    /// `containerUser`, for the install scripts' `_CONTAINER_USER` (the image's own user
    /// when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_user: Option<String>,
    /// `remoteUser`, for `_REMOTE_USER` (the container user when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_user: Option<String>,
}

/// One Feature and the options it is installed with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FeatureRequest {
    pub source: FeatureSource,
    /// Option id → value, as the configuration gives them (defaults are the Feature's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, FeatureValue>,
}

/// Where a Feature comes from.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum FeatureSource {
    /// An OCI artifact: `registry/namespace/id[:tag|@digest]`, lowercase, mirrors applied.
    Oci(String),
    /// A folder of the repository (from its root), below the configuration's
    /// `.devcontainer/` folder as the specification requires.
    Local(String),
}

impl FeatureSource {
    /// The Feature's id without version or digest: what `installsAfter` and
    /// `overrideFeatureInstallOrder` name (`ghcr.io/devcontainers/features/node`), a local
    /// Feature's folder name.
    pub fn id(&self) -> &str {
        match self {
            FeatureSource::Oci(r) => oci_name(r),
            FeatureSource::Local(p) => p.rsplit('/').next().unwrap_or(p),
        }
    }
}

impl std::fmt::Display for FeatureSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeatureSource::Oci(r) => f.write_str(r),
            FeatureSource::Local(p) => write!(f, "./{p}"),
        }
    }
}

/// A Feature's OCI reference as the specification reads it: lowercased, `:latest` when it has
/// neither a tag nor a digest.
pub fn oci_feature(reference: &str) -> FeatureSource {
    let reference = reference.to_ascii_lowercase();
    let tagged = reference.contains('@') || oci_name(&reference) != reference;
    FeatureSource::Oci(if tagged {
        reference
    } else {
        format!("{reference}:latest")
    })
}

/// An OCI reference without its tag or digest.
pub fn oci_name(reference: &str) -> &str {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    // A `:` after the last `/` is a tag's; one before it is a registry's port.
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// An option's value: the specification allows a string or a boolean.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum FeatureValue {
    Bool(bool),
    String(String),
}

impl std::fmt::Display for FeatureValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeatureValue::Bool(b) => write!(f, "{b}"),
            FeatureValue::String(s) => f.write_str(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_drop_the_version_but_keep_a_registry_port() {
        assert_eq!(
            oci_name("ghcr.io/devcontainers/features/node:1"),
            "ghcr.io/devcontainers/features/node"
        );
        assert_eq!(
            oci_name("localhost:5000/f/hello@sha256:abcd"),
            "localhost:5000/f/hello"
        );
        assert_eq!(oci_name("localhost:5000/f/hello"), "localhost:5000/f/hello");
        assert_eq!(
            FeatureSource::Local(".devcontainer/local-tool".into()).id(),
            "local-tool"
        );
    }

    #[test]
    fn a_build_reads_back_what_it_wrote() {
        let b = FeatureBuild {
            base_image: Some("debian:12".into()),
            features: vec![FeatureRequest {
                source: FeatureSource::Oci("ghcr.io/x/y:1".into()),
                options: BTreeMap::from([
                    ("version".into(), FeatureValue::String("18".into())),
                    ("pip".into(), FeatureValue::Bool(false)),
                ]),
            }],
            install_order: vec!["ghcr.io/x/y".into()],
            container_user: None,
            remote_user: Some("vscode".into()),
        };
        let text = serde_json::to_string(&b).unwrap();
        assert!(text.contains(r#""oci":"ghcr.io/x/y:1""#), "{text}");
        assert_eq!(serde_json::from_str::<FeatureBuild>(&text).unwrap(), b);
    }
}
