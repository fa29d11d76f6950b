//! `features`: each Feature is named with its options on the image component built at the
//! workspace's start (the agent fetches, orders and installs them); an `image` becomes the
//! base of that build; what the agent could not fetch safely is refused by name.

use crate::rules::{ok, one, refused};
use std::collections::BTreeMap;
use warren_devcontainer::build::IMAGE;
use warren_types::features::{FeatureSource, FeatureValue};

#[test]
fn features_on_an_image_become_a_build_on_top_of_it() {
    let (d, c) = ok(r#"{
        "image": "localhost/warren-test:latest",
        "remoteUser": "vscode",
        "features": {
            "ghcr.io/devcontainers/features/node:1": { "version": "lts", "nvm": false },
            "GHCR.io/Devcontainers/Features/Python": "3.12",
            "./local-tool": true
        },
        "overrideFeatureInstallOrder": ["ghcr.io/devcontainers/features/python"]
    }"#);
    // The container runs what the build makes; the configuration's image is the base.
    assert_eq!(d.main_container().image, IMAGE);
    assert_eq!(d.images.len(), 1, "{}", c.devfile);
    let image = &d.images[0];
    assert!(image.auto_build);
    assert_eq!(image.dockerfile, "", "no Dockerfile: the base is an image");
    let f = image
        .features
        .as_ref()
        .expect("the Features travel with the image");
    assert_eq!(
        f.base_image.as_deref(),
        Some("localhost/warren-test:latest")
    );
    assert_eq!(f.remote_user.as_deref(), Some("vscode"));
    assert_eq!(f.container_user, None);
    let sources: Vec<String> = f.features.iter().map(|f| f.source.to_string()).collect();
    // Lowercased, `:latest` when no tag is given, local ones from the repository's root.
    assert_eq!(
        sources,
        [
            "./.devcontainer/local-tool",
            "ghcr.io/devcontainers/features/node:1",
            "ghcr.io/devcontainers/features/python:latest",
        ]
    );
    let node = &f.features[1];
    assert_eq!(
        node.options,
        BTreeMap::from([
            ("nvm".to_owned(), FeatureValue::Bool(false)),
            ("version".to_owned(), FeatureValue::String("lts".into())),
        ])
    );
    // A string is the Feature's `version`.
    assert_eq!(
        f.features[2].options.get("version"),
        Some(&FeatureValue::String("3.12".into()))
    );
    assert_eq!(f.install_order, ["ghcr.io/devcontainers/features/python"]);
    assert_eq!(
        image.build_paths().unwrap(),
        (".".to_owned(), String::new())
    );
}

#[test]
fn features_on_a_dockerfile_are_installed_on_what_it_builds() {
    let (d, _) = ok(r#"{
        "build": { "dockerfile": "Dockerfile" },
        "features": { "localhost:5000/features/hello:1.0.0": {} }
    }"#);
    let image = &d.images[0];
    assert_eq!(image.dockerfile, ".devcontainer/Dockerfile");
    let f = image.features.as_ref().unwrap();
    assert_eq!(f.base_image, None);
    // A registry's port is not a tag.
    assert_eq!(
        f.features[0].source,
        FeatureSource::Oci("localhost:5000/features/hello:1.0.0".into())
    );
    assert_eq!(f.features[0].source.id(), "localhost:5000/features/hello");
}

#[test]
fn no_features_means_no_build() {
    let (d, _) = ok(r#"{ "image": "busybox", "features": {} }"#);
    assert!(d.images.is_empty());
    assert_eq!(d.main_container().image, "busybox");
    let (d, c) = ok(r#"{ "image": "busybox", "features": { "ghcr.io/a/b:1": false } }"#);
    assert!(d.images.is_empty());
    assert!(c.notices.iter().any(|n| n.path == "features.ghcr.io/a/b:1"));
}

#[test]
fn features_the_agent_cannot_fetch_safely_or_that_are_misnamed_are_refused() {
    let p = refused(r#"{ "image": "busybox", "features": { "node": "lts" } }"#);
    assert!(p.0[0].is_unsupported(), "{p}");
    assert!(
        one(&p).contains("ghcr.io/devcontainers/features/node:1"),
        "the refusal names the reference to write instead: {p}"
    );
    // Known to ask for a privileged container: refused before any workspace is made.
    let p = refused(
        r#"{ "image": "busybox", "features": { "ghcr.io/devcontainers/features/docker-in-docker:2": {} } }"#,
    );
    assert!(
        p.0[0].is_unsupported() && one(&p).contains("privileged"),
        "{p}"
    );
    let p = refused(r#"{ "image": "busybox", "features": { "../../etc": {} } }"#);
    assert!(one(&p).contains("leaves the repository"), "{p}");
    let p = refused(r#"{ "image": "busybox", "features": { "../tools/x": {} } }"#);
    assert!(one(&p).contains("below `.devcontainer/`"), "{p}");
    let p = refused(r#"{ "image": "busybox", "features": { "ghcr.io/a/b:1": { "n": 3 } } }"#);
    assert!(one(&p).starts_with("features.ghcr.io/a/b:1.n"), "{p}");
    let p = refused(
        r#"{ "image": "busybox", "features": { "ghcr.io/a/b:1": {}, "GHCR.IO/a/b:1": {} } }"#,
    );
    assert!(one(&p).contains("listed twice"), "{p}");
    let p = refused(
        r#"{ "image": "busybox", "features": { "ghcr.io/a/b:1": {} },
             "overrideFeatureInstallOrder": ["ghcr.io/a/c"] }"#,
    );
    assert!(one(&p).starts_with("overrideFeatureInstallOrder[0]"), "{p}");
    let many: Vec<String> = (0..40)
        .map(|i| format!("\"ghcr.io/a/f{i}:1\": {{}}"))
        .collect();
    let p = refused(&format!(
        r#"{{ "image": "busybox", "features": {{ {} }} }}"#,
        many.join(",")
    ));
    assert!(one(&p).contains("at most 32"), "{p}");
}
