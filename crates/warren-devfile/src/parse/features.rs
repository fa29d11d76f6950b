//! The dev container attribute of an `image` component ([`FEATURES_ATTRIBUTE`]): the Features
//! to install on top of the image and, for a dev container that names an `image`, that image
//! as the base. Written by `warren-devcontainer`, but a devfile author can write it too, so
//! it is checked as any user input: the agent will fetch what it names and run it.

use super::Errors;
use crate::DevfileError;
use serde_json::Value;
use warren_types::features::{FeatureBuild, FeatureSource, FEATURES_ATTRIBUTE, MAX_FEATURES};

/// The attribute of the component at `path`, when it has one.
pub(super) fn read(
    attributes: Option<&serde_json::Map<String, Value>>,
    path: &str,
    errors: &mut Errors,
) -> Option<FeatureBuild> {
    let v = attributes?.get(FEATURES_ATTRIBUTE)?;
    let p = format!("{path}.attributes.{FEATURES_ATTRIBUTE}");
    let build: FeatureBuild = match serde_json::from_value(v.clone()) {
        Ok(b) => b,
        Err(e) => {
            errors.push(DevfileError::new(
                p,
                format!("not a dev container image: {e}"),
            ));
            return None;
        }
    };
    let before = errors.len();
    if let Some(base) = &build.base_image {
        if let Some(why) = reference_problem(base) {
            errors.push(DevfileError::new(
                format!("{p}.baseImage"),
                format!("{base:?} {why}"),
            ));
        }
    }
    if build.features.len() > MAX_FEATURES {
        errors.push(DevfileError::new(
            format!("{p}.features"),
            format!(
                "{} Features; at most {MAX_FEATURES} are installed in one image",
                build.features.len()
            ),
        ));
    }
    for (i, f) in build.features.iter().enumerate() {
        let fp = format!("{p}.features[{i}]");
        let problem = match &f.source {
            FeatureSource::Oci(r) => reference_problem(r),
            FeatureSource::Local(dir) => local_problem(dir),
        };
        if let Some(why) = problem {
            errors.push(DevfileError::new(
                format!("{fp}.source"),
                format!("{} {why}", f.source),
            ));
        }
        for name in f.options.keys() {
            if name.is_empty() || name.len() > 128 || name.chars().any(|c| c.is_control()) {
                errors.push(DevfileError::new(
                    format!("{fp}.options"),
                    format!("{name:?} is not an option name"),
                ));
            }
        }
    }
    for id in &build.install_order {
        if !build.features.iter().any(|f| f.source.id() == id) {
            // The specification lets a tool refuse an order naming what is not installed:
            // it is a misspelling more often than not.
            errors.push(DevfileError::new(
                format!("{p}.installOrder"),
                format!("{id:?} names no Feature of the image (ids are written without a version)"),
            ));
        }
    }
    for (what, user) in [
        ("containerUser", &build.container_user),
        ("remoteUser", &build.remote_user),
    ] {
        if user
            .as_deref()
            .is_some_and(|u| u.is_empty() || u.len() > 64 || !u.chars().all(is_user_char))
        {
            errors.push(DevfileError::new(
                format!("{p}.{what}"),
                "must be a user name or id (letters, digits, `_`, `-`, `.`)",
            ));
        }
    }
    (errors.len() == before).then_some(build)
}

fn is_user_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "_-.".contains(c)
}

/// Why `r` is not an image or artifact reference a registry can be asked for.
pub(crate) fn reference_problem(r: &str) -> Option<&'static str> {
    if r.is_empty() || r.len() > 512 {
        Some("must be an image reference of at most 512 characters")
    } else if r.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some("is not a reference (no spaces or control characters)")
    } else if r.starts_with('-') || r.contains("://") {
        Some("is not a reference (`registry/name[:tag][@digest]`, no scheme)")
    } else {
        None
    }
}

/// Why `dir` is not a folder of the repository a local Feature can be in.
fn local_problem(dir: &str) -> Option<&'static str> {
    if dir.is_empty() || dir.starts_with('/') || dir.contains('\\') || dir.contains('\0') {
        Some("must be a folder of the repository, from its root")
    } else if dir
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
    {
        Some("must be a plain path inside the repository (no `.`, `..` or empty parts)")
    } else {
        None
    }
}
