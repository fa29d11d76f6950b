//! `build`: a dev container whose image is built from a Dockerfile of the repository becomes
//! a devfile `image` component with `autoBuild`, with paths from the repository's root; what
//! would reach past the build's isolation is refused by name.

use crate::rules::{ok, one, refused};
use warren_devcontainer::build::IMAGE;

#[test]
fn a_dockerfile_build_becomes_an_image_built_at_start_that_the_container_runs() {
    let (d, c) = ok(r#"{
        "build": {
            "dockerfile": "Dockerfile",
            "context": "..",
            "args": { "VARIANT": "3.12", "NODE": "lts" },
            "target": "dev",
            "cacheFrom": "ghcr.io/example/cache:latest"
        }
    }"#);
    assert_eq!(d.main_container().image, IMAGE);
    assert_eq!(d.images.len(), 1, "{}", c.devfile);
    let image = &d.images[0];
    assert!(image.auto_build);
    assert_eq!(image.image_name, IMAGE);
    // From the repository's root: the configuration's folder is `.devcontainer`.
    assert_eq!(image.dockerfile, ".devcontainer/Dockerfile");
    assert_eq!(image.build_context, ".");
    assert_eq!(image.args, ["NODE=lts", "VARIANT=3.12"]);
    assert_eq!(image.target.as_deref(), Some("dev"));
    assert_eq!(
        image.build_paths().unwrap(),
        (".".to_owned(), ".devcontainer/Dockerfile".to_owned())
    );
    // cacheFrom is not acted on, and says so.
    assert!(
        c.notices.iter().any(|n| n.path == "build.cacheFrom"),
        "{:?}",
        c.notices
    );
}

#[test]
fn the_older_spellings_and_the_default_context_are_read_too() {
    let (d, _) = ok(r#"{ "dockerFile": "docker/Dockerfile.dev" }"#);
    assert_eq!(
        d.images[0].dockerfile,
        ".devcontainer/docker/Dockerfile.dev"
    );
    assert_eq!(d.images[0].build_context, ".devcontainer");
    assert_eq!(
        d.images[0].build_paths().unwrap(),
        (
            ".devcontainer".to_owned(),
            "docker/Dockerfile.dev".to_owned()
        )
    );
    let (d, _) = ok(r#"{ "dockerFile": "Dockerfile", "context": ".." }"#);
    assert_eq!(d.images[0].build_context, ".");
}

#[test]
fn builds_that_reach_out_of_the_repository_or_the_isolation_are_refused_by_name() {
    let p =
        refused(r#"{ "build": { "dockerfile": "Dockerfile", "options": ["--network=host"] } }"#);
    assert!(
        p.0.iter()
            .any(|e| e.path == "build.options" && e.is_unsupported()),
        "{p}"
    );
    let p = refused(r#"{ "build": { "dockerfile": "../../Dockerfile" } }"#);
    assert!(one(&p).contains("leaves the repository"), "{p}");
    let p = refused(r#"{ "build": { "dockerfile": "/etc/Dockerfile" } }"#);
    assert!(
        one(&p).contains("relative path inside the repository"),
        "{p}"
    );
    let p = refused(r#"{ "build": { "dockerfile": "../Dockerfile", "context": "sub" } }"#);
    assert!(one(&p).contains("outside its build context"), "{p}");
    let p = refused(r#"{ "build": { "dockerfile": "Dockerfile", "squash": true } }"#);
    assert!(one(&p).starts_with("build.squash"), "{p}");
}

#[test]
fn malformed_builds_get_a_clear_error() {
    for (text, want) in [
        (
            r#"{ "build": "Dockerfile" }"#,
            "build: must be an object, not a string",
        ),
        (
            r#"{ "build": {} }"#,
            "build.dockerfile: must name the Dockerfile",
        ),
        (
            r#"{ "build": { "dockerfile": "" } }"#,
            "build.dockerfile: must name the Dockerfile",
        ),
        (
            r#"{ "build": { "dockerfile": "D", "args": { "A": 1 } } }"#,
            "build.args.A: must be a string",
        ),
        (
            r#"{ "build": { "dockerfile": "D", "context": 3 } }"#,
            "build.context: must be a string",
        ),
        (
            r#"{ "build": { "dockerfile": "D", "target": 3 } }"#,
            "build.target: must be a string",
        ),
        (
            r#"{ "image": "busybox", "build": { "dockerfile": "D" } }"#,
            "name either the `image` to run or the Dockerfile",
        ),
        (
            r#"{ "build": { "dockerfile": "D" }, "dockerFile": "E" }"#,
            "either in `build` or in the older",
        ),
        (
            r#"{ "context": ".." }"#,
            "dockerFile: must name the Dockerfile",
        ),
    ] {
        let p = refused(text);
        assert!(p.to_string().contains(want), "{text}: {p}");
    }
}
