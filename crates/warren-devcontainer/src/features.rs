//! `features` and `overrideFeatureInstallOrder`: the Dev Container Features to install on top
//! of the image. Here they are only named and checked; the agent fetches each one (an OCI
//! registry through its credentials and mirrors, or a folder of the repository through the
//! server), reads its metadata, orders them by `dependsOn` and `installsAfter` and installs
//! them in a build at the workspace's start.
//!
//! Which references are honoured: an OCI artifact (`registry/namespace/id[:tag|@digest]`,
//! `:latest` when neither is given, lowercased as the specification says) and a folder below
//! `.devcontainer/`. A tarball at a URL and the retired short ids are refused by name.

use crate::{problem, unsupported, Notice, Problem};
use serde_json::Value;
use std::collections::BTreeMap;
use warren_types::features::{
    oci_feature, oci_name, FeatureRequest, FeatureSource, FeatureValue, MAX_FEATURES,
};

/// Published Features whose metadata asks for what no workspace gets, refused before any
/// workspace is made (the agent would refuse them when it reads their metadata): what each
/// asks for.
const KNOWN_REFUSED: [(&str, &str); 2] = [
    (
        "ghcr.io/devcontainers/features/docker-in-docker",
        "a privileged container running a Docker daemon of its own (`privileged`, `entrypoint`)",
    ),
    (
        "ghcr.io/devcontainers/features/docker-outside-of-docker",
        "the engine's socket mounted into the container (`mounts`, `entrypoint`)",
    ),
];

/// Reads `features` and `overrideFeatureInstallOrder` from the configuration's top level.
pub(crate) struct Reading<'a> {
    /// The configuration's folder, relative to the repository's root (`` for the root).
    pub folder: &'a str,
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'a mut Vec<Notice>,
}

impl Reading<'_> {
    /// The Features the configuration asks for, and the install order it imposes.
    pub fn read(
        &mut self,
        top: &serde_json::Map<String, Value>,
    ) -> (Vec<FeatureRequest>, Vec<String>) {
        let mut features: Vec<FeatureRequest> = vec![];
        match top.get("features") {
            None => {}
            Some(Value::Object(m)) => {
                for (key, v) in m {
                    let path = format!("features.{key}");
                    let Some(source) = self.source(&path, key) else {
                        continue;
                    };
                    let Some(options) = self.options(&path, v) else {
                        continue;
                    };
                    if features.iter().any(|f| f.source == source) {
                        self.problems.push(problem(
                            path,
                            format!("{source} is listed twice (ids are not case-sensitive)"),
                        ));
                        continue;
                    }
                    features.push(FeatureRequest { source, options });
                }
            }
            Some(v) => self.problems.push(problem(
                "features",
                format!("must be an object, not {}", crate::properties::type_name(v)),
            )),
        }
        // One order whatever the text's: the agent sorts them anyway, and the same
        // configuration must make the same devfile.
        features.sort_by_key(|f| f.source.to_string());
        if features.len() > MAX_FEATURES {
            self.problems.push(problem(
                "features",
                format!(
                    "{} Features; Warren installs at most {MAX_FEATURES} in one image",
                    features.len()
                ),
            ));
        }
        let order = self.order(top.get("overrideFeatureInstallOrder"), &features);
        (features, order)
    }

    /// Where the Feature named `key` comes from.
    fn source(&mut self, path: &str, key: &str) -> Option<FeatureSource> {
        if key.starts_with("./") || key.starts_with("../") {
            return self.local(path, key);
        }
        if key.starts_with("https://") || key.starts_with("http://") {
            self.problems.push(unsupported(
                path,
                "a Feature from a tarball at a URL",
                "agents fetch Features from OCI registries (through their credentials and mirrors) or from the repository, never from an arbitrary address; publish it to a registry or keep it below `.devcontainer/`",
            ));
            return None;
        }
        if !key.contains('/') {
            self.problems.push(unsupported(
                path,
                &format!("the short Feature id {key:?}"),
                &format!("it names a Feature of the retired first Features repository, which the specification no longer resolves; write its OCI reference, as `ghcr.io/devcontainers/features/{key}:1`"),
            ));
            return None;
        }
        let reference = key.to_ascii_lowercase();
        if let Some((_, what)) = KNOWN_REFUSED
            .iter()
            .find(|(name, _)| oci_name(&reference) == *name)
        {
            self.problems.push(unsupported(
                path,
                &format!("the Feature {key}"),
                &format!("it asks for {what}, which would reach past the workspace's isolation to the machine and the other tenants (the agent refuses it from its metadata too)"),
            ));
            return None;
        }
        if let Some(why) = reference_problem(&reference) {
            self.problems.push(problem(path, format!("{key:?} {why}")));
            return None;
        }
        Some(oci_feature(&reference))
    }

    /// A Feature in a folder of the repository: the specification has it below the
    /// `.devcontainer/` folder of the configuration.
    fn local(&mut self, path: &str, key: &str) -> Option<FeatureSource> {
        let dir = match crate::build::join(self.folder, key) {
            Ok(d) => d,
            Err(why) => {
                self.problems.push(problem(path, format!("{key:?} {why}")));
                return None;
            }
        };
        if !dir.starts_with(".devcontainer/") {
            self.problems.push(problem(
                path,
                format!("{key:?} is {dir}: a local Feature must be in a folder below `.devcontainer/` (the specification's rule)"),
            ));
            return None;
        }
        Some(FeatureSource::Local(dir))
    }

    /// The options of a Feature: an object of strings and booleans, a string (its
    /// `version`), or `true`. `None` when the Feature is not to be installed.
    fn options(&mut self, path: &str, v: &Value) -> Option<BTreeMap<String, FeatureValue>> {
        match v {
            Value::String(s) => Some(BTreeMap::from([(
                "version".to_owned(),
                FeatureValue::String(s.clone()),
            )])),
            Value::Bool(true) => Some(BTreeMap::new()),
            Value::Bool(false) => {
                self.notices.push(Notice {
                    path: path.to_owned(),
                    message: "`false`: not installed".into(),
                });
                None
            }
            Value::Object(m) => {
                let mut out = BTreeMap::new();
                for (name, value) in m {
                    match value {
                        Value::String(s) => {
                            out.insert(name.clone(), FeatureValue::String(s.clone()));
                        }
                        Value::Bool(b) => {
                            out.insert(name.clone(), FeatureValue::Bool(*b));
                        }
                        other => self.problems.push(problem(
                            format!("{path}.{name}"),
                            format!(
                                "an option is a string or a boolean, not {}",
                                crate::properties::type_name(other)
                            ),
                        )),
                    }
                }
                Some(out)
            }
            other => {
                self.problems.push(problem(
                    path,
                    format!(
                        "must be the Feature's options (an object), or a version (a string), not {}",
                        crate::properties::type_name(other)
                    ),
                ));
                None
            }
        }
    }

    /// `overrideFeatureInstallOrder` as Feature ids; each must name one of `features`.
    fn order(&mut self, v: Option<&Value>, features: &[FeatureRequest]) -> Vec<String> {
        let Some(v) = v else {
            return vec![];
        };
        let Some(items) = v.as_array() else {
            self.problems.push(problem(
                "overrideFeatureInstallOrder",
                "must be an array of Feature ids",
            ));
            return vec![];
        };
        let mut out = vec![];
        for (i, item) in items.iter().enumerate() {
            let path = format!("overrideFeatureInstallOrder[{i}]");
            let Some(s) = item.as_str() else {
                self.problems
                    .push(problem(path, "must be a Feature id (a string)"));
                continue;
            };
            let id = if s.starts_with("./") || s.starts_with("../") {
                match crate::build::join(self.folder, s) {
                    Ok(dir) => FeatureSource::Local(dir).id().to_owned(),
                    Err(why) => {
                        self.problems.push(problem(path, format!("{s:?} {why}")));
                        continue;
                    }
                }
            } else {
                oci_name(&s.to_ascii_lowercase()).to_owned()
            };
            if !features.iter().any(|f| f.source.id() == id) {
                self.problems.push(problem(
                    path,
                    format!("{s:?} names none of the configuration's `features` (give their ids, without a version)"),
                ));
            } else if !out.contains(&id) {
                out.push(id);
            }
        }
        out
    }
}

/// Why `r` cannot be an OCI reference.
fn reference_problem(r: &str) -> Option<&'static str> {
    if r.len() > 512 {
        Some("is longer than 512 characters")
    } else if r.chars().any(|c| c.is_whitespace() || c.is_control()) || r.starts_with('-') {
        Some("is not an OCI reference (`registry/namespace/id[:tag]`)")
    } else if r.split('/').any(str::is_empty) {
        Some("is not an OCI reference: it has an empty part")
    } else {
        None
    }
}
