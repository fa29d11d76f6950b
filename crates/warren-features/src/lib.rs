//! warren-features: Dev Container Features (containers.dev, "Dev Container Features
//! reference") made into the image build that installs them.
//!
//! The pipeline is [`resolve`] then [`context::build_context`]:
//!
//! 1. each Feature a dev container names is fetched ([`oci`] from a registry, through the
//!    agent's credentials and trusted certificates, cached by digest; a local one through
//!    [`LocalFeatures`], which the agent answers from the server), and its
//!    `devcontainer-feature.json` read ([`metadata`]): what Warren cannot honour inside a
//!    workspace's isolation (`privileged`, `mounts`, `entrypoint`) is refused by name; its
//!    `capAdd` and `securityOpt` are not given, with a note in the build's log (the
//!    configuration's own may ask for them);
//! 2. `dependsOn` is followed (recursively, the same Feature with the same options only once),
//!    and the set ordered by the specification's round-based algorithm ([`order`]);
//! 3. the build context is made: a Dockerfile `FROM` the base that copies each Feature in and
//!    runs its `install.sh` as root with its options as environment variables, then sets its
//!    `containerEnv`, and leaves its lifecycle commands where the workspace runs them.
//!
//! Everything a Feature hands in is treated as hostile input: sizes and counts are capped,
//! archives may hold only plain files and folders inside themselves, and the install runs in
//! the agent's isolated build, never on the agent's host.

pub mod context;
pub mod metadata;
pub mod oci;
pub mod order;

use std::collections::BTreeMap;
use warren_types::features::{FeatureBuild, FeatureRequest, FeatureSource, FeatureValue};

/// Why the Features of a build could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum FeatureError {
    #[error("Feature {feature}: {message}")]
    Invalid { feature: String, message: String },
    /// The message holds "not supported by Warren", as refusals elsewhere do.
    #[error("Feature {feature}: {what} is not supported by Warren: {why}")]
    Unsupported {
        feature: String,
        what: String,
        why: String,
    },
    #[error("fetching Feature {feature}")]
    Fetch {
        feature: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("ordering the Features: {0}")]
    Order(String),
    #[error("more than {max} Features once their dependencies are counted", max = warren_types::features::MAX_FEATURES)]
    TooMany,
}

impl FeatureError {
    pub(crate) fn invalid(feature: impl std::fmt::Display, message: impl Into<String>) -> Self {
        FeatureError::Invalid {
            feature: feature.to_string(),
            message: message.into(),
        }
    }
}

/// Where local Features come from: the agent asks the server for the folder of the
/// workspace's repository, archived as tar (paths relative to the folder).
#[async_trait::async_trait]
pub trait LocalFeatures: Send + Sync {
    /// The folder `dir` (from the repository's root) as a tar archive, and a digest of its
    /// contents when the source knows one.
    async fn fetch(&self, dir: &str) -> Result<(Vec<u8>, Option<String>), String>;
}

/// A Feature ready to install.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Where it came from, as the configuration (or a `dependsOn`) named it.
    pub source: FeatureSource,
    /// What identifies its contents: an OCI manifest's digest, a local folder's digest.
    pub digest: String,
    pub metadata: metadata::Metadata,
    /// The options as the Feature gets them: every option it declares, the given value
    /// else its default, then any other given one.
    pub options: BTreeMap<String, FeatureValue>,
    /// Its files (`devcontainer-feature.json`, `install.sh`, …), checked.
    pub files: context::Files,
    /// Whether the configuration named it itself (else a `dependsOn` pulled it in).
    pub requested: bool,
}

/// A line of progress for the build log.
pub type Log<'a> = &'a mut (dyn FnMut(String) + Send);

/// Fetches every Feature `build` names and those they depend on, and puts them in the order
/// they are installed.
pub async fn resolve(
    build: &FeatureBuild,
    registries: &oci::Registries,
    local: &dyn LocalFeatures,
    log: Log<'_>,
) -> Result<Vec<Resolved>, FeatureError> {
    let mut resolved: Vec<Resolved> = vec![];
    // (index of the Feature, the indices it depends on)
    let mut depends: Vec<Vec<usize>> = vec![];
    // Work list: (request, whether the user asked for it, who depends on it).
    let mut work: Vec<(FeatureRequest, bool, Option<usize>)> = build
        .features
        .iter()
        .cloned()
        .map(|f| (f, true, None))
        .collect();
    work.reverse();
    while let Some((request, requested, dependent)) = work.pop() {
        let fetched = fetch_one(&request.source, registries, local, log).await?;
        let options = metadata::resolve_options(&request.source, &fetched.0, &request.options)?;
        // Equal Features (same contents, same options) are installed once; local ones are
        // never equal to another (the specification's rule).
        let same = resolved.iter().position(|r| {
            !matches!(r.source, FeatureSource::Local(_))
                && r.digest == fetched.1
                && r.options == options
        });
        let index = match same {
            Some(i) => {
                resolved[i].requested |= requested;
                i
            }
            None => {
                if resolved.len() == warren_types::features::MAX_FEATURES {
                    return Err(FeatureError::TooMany);
                }
                let (metadata, digest, files) = fetched;
                log(format!(
                    "warren: Feature {} ({} {}), {digest}",
                    request.source, metadata.id, metadata.version
                ));
                if metadata.deprecated {
                    log(format!(
                        "warren: Feature {} is deprecated by its authors",
                        request.source
                    ));
                }
                for dep in metadata.depends_on.iter().rev() {
                    let source = dependency_source(&request.source, &dep.0)?;
                    work.push((
                        FeatureRequest {
                            source,
                            options: dep.1.clone(),
                        },
                        false,
                        Some(resolved.len()),
                    ));
                }
                resolved.push(Resolved {
                    source: request.source.clone(),
                    digest,
                    metadata,
                    options,
                    files,
                    requested,
                });
                depends.push(vec![]);
                resolved.len() - 1
            }
        };
        if let Some(d) = dependent {
            if d == index || reaches(&depends, index, d) {
                return Err(FeatureError::Order(format!(
                    "{} and {} depend on each other (`dependsOn`)",
                    resolved[d].source, resolved[index].source
                )));
            }
            depends[d].push(index);
        }
    }
    let nodes: Vec<order::Node> = resolved
        .iter()
        .zip(&depends)
        .map(|(r, deps)| order::Node {
            id: r.source.id().to_owned(),
            tag: match &r.source {
                FeatureSource::Oci(reference) => reference
                    .strip_prefix(warren_types::features::oci_name(reference))
                    .unwrap_or_default()
                    .trim_start_matches([':', '@'])
                    .to_owned(),
                FeatureSource::Local(_) => String::new(),
            },
            options: r.options.clone(),
            canonical: r.digest.clone(),
            depends_on: deps.clone(),
            installs_after: r.metadata.installs_after.clone(),
        })
        .collect();
    let sequence =
        order::install_order(&nodes, &build.install_order).map_err(FeatureError::Order)?;
    let mut slots: Vec<Option<Resolved>> = resolved.into_iter().map(Some).collect();
    Ok(sequence
        .into_iter()
        .filter_map(|i| slots[i].take())
        .collect())
}

/// Whether `from` reaches `to` through `depends`.
fn reaches(depends: &[Vec<usize>], from: usize, to: usize) -> bool {
    let mut seen = vec![false; depends.len()];
    let mut stack = vec![from];
    while let Some(n) = stack.pop() {
        if n == to {
            return true;
        }
        if std::mem::replace(&mut seen[n], true) {
            continue;
        }
        stack.extend(depends[n].iter().copied());
    }
    false
}

/// Fetches and checks one Feature: its metadata, digest and files.
async fn fetch_one(
    source: &FeatureSource,
    registries: &oci::Registries,
    local: &dyn LocalFeatures,
    log: Log<'_>,
) -> Result<(metadata::Metadata, String, context::Files), FeatureError> {
    let (archive, digest) = match source {
        FeatureSource::Oci(reference) => {
            let (archive, digest, cached) = registries.fetch(reference).await?;
            if cached {
                log(format!(
                    "warren: Feature {reference}: {digest} from the agent's cache"
                ));
            }
            (archive, digest)
        }
        FeatureSource::Local(dir) => {
            let (archive, key) = local.fetch(dir).await.map_err(|e| FeatureError::Fetch {
                feature: source.to_string(),
                source: e.into(),
            })?;
            let digest = key.unwrap_or_else(|| {
                use sha2::Digest;
                format!("sha256:{}", hex::encode(sha2::Sha256::digest(&archive)))
            });
            (archive, digest)
        }
    };
    let files = context::Files::from_archive(source, &archive)?;
    let text = files.metadata_text(source)?;
    let metadata = metadata::parse(source, &text)?;
    Ok((metadata, digest, files))
}

/// The source a `dependsOn` key names: an OCI reference as in a configuration; a local
/// Feature may name another local one by a path relative to its own folder's parent (the
/// configuration's folder).
fn dependency_source(of: &FeatureSource, key: &str) -> Result<FeatureSource, FeatureError> {
    if key.starts_with("./") || key.starts_with("../") {
        return match of {
            FeatureSource::Local(dir) => {
                let parent = dir.rsplit_once('/').map_or("", |(p, _)| p);
                warren_devcontainer::build::join(parent, key)
                    .ok()
                    .filter(|d| d.starts_with(".devcontainer/"))
                    .map(FeatureSource::Local)
                    .ok_or_else(|| {
                        FeatureError::invalid(
                            of,
                            format!("`dependsOn` {key:?} is not a folder below `.devcontainer/`"),
                        )
                    })
            }
            FeatureSource::Oci(_) => Err(FeatureError::invalid(
                of,
                format!("`dependsOn` {key:?}: a published Feature cannot depend on a local one"),
            )),
        };
    }
    if key.starts_with("https://") || key.starts_with("http://") || !key.contains('/') {
        return Err(FeatureError::Unsupported {
            feature: of.to_string(),
            what: format!("the dependency {key:?}"),
            why: "Warren fetches Features from OCI registries or the repository only".into(),
        });
    }
    Ok(warren_types::features::oci_feature(key))
}
