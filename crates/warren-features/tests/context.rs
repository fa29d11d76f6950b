//! A Feature's metadata and files read as hostile input, and the build context that installs
//! Features: what `install.sh` gets (options, users), what the image keeps (`containerEnv`,
//! lifecycle commands), and what is refused by name.

use std::collections::BTreeMap;
use warren_features::context::{build_context, Files};
use warren_features::metadata::{parse, resolve_options};
use warren_features::{FeatureError, Resolved};
use warren_testkit::registry::feature_tar;
use warren_types::features::{FeatureBuild, FeatureSource, FeatureValue};

fn source(id: &str) -> FeatureSource {
    FeatureSource::Oci(format!("registry.test/features/{id}:1"))
}

fn resolved(id: &str, metadata: &str, given: &[(&str, FeatureValue)]) -> Resolved {
    let s = source(id);
    let tar = feature_tar(&[
        ("devcontainer-feature.json", 0o644, metadata.as_bytes()),
        ("install.sh", 0o755, b"#!/bin/sh\necho installing\n"),
        ("lib/helper.sh", 0o644, b"echo helping\n"),
    ])
    .unwrap();
    let files = Files::from_archive(&s, &tar).unwrap();
    let metadata = parse(&s, &files.metadata_text(&s).unwrap()).unwrap();
    let given: BTreeMap<String, FeatureValue> = given
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let options = resolve_options(&s, &metadata, &given).unwrap();
    Resolved {
        source: s,
        digest: format!("sha256:{id}"),
        metadata,
        options,
        files,
        requested: true,
    }
}

/// The files of a tar archive: path → contents.
fn unpack(tar: &[u8]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut a = tar::Archive::new(tar);
    for e in a.entries().unwrap() {
        let mut e = e.unwrap();
        let path = e.path().unwrap().to_string_lossy().into_owned();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut e, &mut text).unwrap();
        out.insert(path, text);
    }
    out
}

const NODE: &str = r#"{
    "id": "node", "version": "1.4.0", "name": "Node.js",
    "options": {
        "version": { "type": "string", "default": "lts", "proposals": ["lts", "20"] },
        "nvm": { "type": "boolean", "default": true },
        "channel": { "type": "string", "enum": ["stable", "beta"], "default": "stable" }
    },
    "containerEnv": { "NVM_DIR": "/usr/local/share/nvm", "PATH": "/usr/local/share/nvm/bin:${PATH}" },
    "postCreateCommand": "node --version",
    "postStartCommand": { "a": "echo a", "b": ["echo", "b c"] },
    "postAttachCommand": "echo attached",
    "customizations": { "vscode": { "extensions": ["dbaeumer.vscode-eslint"] } }
}"#;

#[test]
fn the_context_installs_each_feature_with_its_options_and_keeps_what_the_image_needs() {
    let node = resolved(
        "node",
        NODE,
        &[
            ("version", FeatureValue::String("20 'quoted'".into())),
            ("nvm", FeatureValue::String("false".into())),
        ],
    );
    // Defaults fill what was not given; a boolean given as text is a boolean.
    assert_eq!(
        node.options["channel"],
        FeatureValue::String("stable".into())
    );
    assert_eq!(node.options["nvm"], FeatureValue::Bool(false));
    assert!(
        node.metadata.not_applied.len() == 2,
        "{:?}",
        node.metadata.not_applied
    );
    let hello = resolved(
        "hello",
        r#"{"id": "hello", "version": "1.0.0", "name": "Hello"}"#,
        &[],
    );
    let build = FeatureBuild {
        remote_user: Some("vscode".into()),
        ..Default::default()
    };
    let tar = build_context(&[hello, node], "sha256:base", "1000:1000", &build).unwrap();
    // The same input, the same bytes: the context's digest is the build's identity.
    assert_eq!(
        tar,
        build_context(
            &[
                resolved(
                    "hello",
                    r#"{"id": "hello", "version": "1.0.0", "name": "Hello"}"#,
                    &[]
                ),
                resolved(
                    "node",
                    NODE,
                    &[
                        ("version", FeatureValue::String("20 'quoted'".into())),
                        ("nvm", FeatureValue::String("false".into())),
                    ]
                ),
            ],
            "sha256:base",
            "1000:1000",
            &build
        )
        .unwrap()
    );
    let files = unpack(&tar);
    let dockerfile = &files["Dockerfile"];
    let lines: Vec<&str> = dockerfile.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(
        lines,
        [
            "FROM sha256:base",
            "USER root",
            "COPY warren-features/builtin.env /tmp/dev-container-features/builtin.env",
            "COPY warren-features/0/ /tmp/dev-container-features/0/",
            "RUN cd /tmp/dev-container-features/0 && sh ./warren-install.sh",
            "COPY warren-features/1/ /tmp/dev-container-features/1/",
            "RUN cd /tmp/dev-container-features/1 && sh ./warren-install.sh",
            r#"ENV NVM_DIR="/usr/local/share/nvm" PATH="/usr/local/share/nvm/bin:${PATH}""#,
            "COPY warren-hooks/ /usr/local/share/warren/feature-hooks/",
            // The image's own user again once the Features are in.
            "USER 1000:1000",
        ]
    );
    // The container user is the image's; the remote user the configuration's.
    assert_eq!(
        files["warren-features/builtin.env"],
        "_CONTAINER_USER='1000'\n_REMOTE_USER='vscode'\n"
    );
    // Options as the specification names them, quoted for the shell that sources them.
    assert_eq!(
        files["warren-features/1/devcontainer-features.env"],
        "CHANNEL='stable'\nNVM='false'\nVERSION='20 '\\''quoted'\\'''\n"
    );
    assert!(files.contains_key("warren-features/1/lib/helper.sh"));
    assert!(files["warren-features/1/warren-install.sh"].contains("exec ./install.sh"));
    // Lifecycle commands stay in the image, for the workspace to run before its own.
    assert_eq!(
        files["warren-hooks/post-create/01-node.sh"],
        "node --version\n"
    );
    assert!(files["warren-hooks/post-start/01-node.sh"].contains("'echo' 'b c'"));
    assert!(!files.keys().any(|k| k.contains("attach")));
}

#[test]
fn a_root_image_without_users_installs_for_root() {
    let hello = resolved(
        "hello",
        r#"{"id": "hello", "version": "1.0.0", "name": "Hello"}"#,
        &[],
    );
    let files =
        unpack(&build_context(&[hello], "debian:12", "", &FeatureBuild::default()).unwrap());
    assert_eq!(
        files["warren-features/builtin.env"],
        "_CONTAINER_USER='root'\n_REMOTE_USER='root'\n"
    );
    assert!(!files["Dockerfile"]
        .lines()
        .any(|l| l.starts_with("USER ") && l != "USER root"));
}

fn refused_archive(entries: Vec<(tar::Header, String, Vec<u8>)>) -> String {
    let mut tar = tar::Builder::new(Vec::new());
    for (mut h, path, data) in entries {
        // Written raw: the tar crate's own path checks would stop `..` before the archive.
        let name = path.as_bytes();
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.set_size(data.len() as u64);
        h.set_cksum();
        tar.append(&h, data.as_slice()).unwrap();
    }
    let bytes = tar.into_inner().unwrap();
    Files::from_archive(&source("evil"), &bytes)
        .unwrap_err()
        .to_string()
}

fn file(mode: u32) -> tar::Header {
    let mut h = tar::Header::new_old();
    h.set_mode(mode);
    h.set_entry_type(tar::EntryType::Regular);
    h
}

#[test]
fn archives_with_links_or_paths_outside_the_folder_are_refused() {
    let install = || {
        (
            file(0o755),
            "install.sh".to_owned(),
            b"#!/bin/sh\n".to_vec(),
        )
    };
    let e = refused_archive(vec![
        install(),
        (file(0o644), "../escape".into(), b"x".to_vec()),
    ]);
    assert!(e.contains("not a path inside the Feature's folder"), "{e}");
    let e = refused_archive(vec![
        install(),
        (file(0o644), "/etc/cron.d/x".into(), b"x".to_vec()),
    ]);
    assert!(e.contains("not a path inside"), "{e}");
    let mut link = tar::Header::new_old();
    link.set_entry_type(tar::EntryType::Symlink);
    link.set_link_name("/etc/shadow").unwrap();
    let e = refused_archive(vec![install(), (link, "lib".into(), vec![])]);
    assert!(
        e.contains("not supported by Warren") && e.contains("link"),
        "{e}"
    );
    let e = refused_archive(vec![(file(0o644), "README.md".into(), b"x".to_vec())]);
    assert!(e.contains("no install.sh"), "{e}");
}

#[test]
fn a_compressed_archive_is_read_and_a_bomb_is_stopped() {
    use std::io::Write;
    let tar = feature_tar(&[
        (
            "devcontainer-feature.json",
            0o644,
            br#"{"id":"z","version":"1","name":"z"}"#,
        ),
        ("install.sh", 0o755, b"#!/bin/sh\n"),
    ])
    .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    let files = Files::from_archive(&source("z"), &gz.finish().unwrap()).unwrap();
    assert!(files.metadata_text(&source("z")).unwrap().contains("\"z\""));
    // 300 MiB of zeros in a file: a few hundred KiB compressed, refused once 256 MiB are out.
    let big = vec![0u8; 300 << 20];
    let tar = feature_tar(&[
        ("install.sh", 0o755, b"#!/bin/sh\n"),
        ("zeros", 0o644, &big),
    ])
    .unwrap();
    drop(big);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(bomb.len() < 4 << 20, "{}", bomb.len());
    match Files::from_archive(&source("bomb"), &bomb) {
        Err(FeatureError::Invalid { message, .. }) => {
            assert!(message.contains("archive"), "{message}")
        }
        other => panic!("a bomb was read: {other:?}"),
    }
}

#[test]
fn metadata_that_would_reach_past_the_isolation_is_refused_by_name() {
    for (extra, what) in [
        (r#""privileged": true"#, "privileged"),
        (
            r#""mounts": [{"source": "/var/run/docker.sock", "target": "/var/run/docker.sock", "type": "bind"}]"#,
            "mounts",
        ),
        (
            r#""entrypoint": "/usr/local/share/docker-init.sh""#,
            "entrypoint",
        ),
    ] {
        let text = format!(r#"{{"id": "x", "version": "1", "name": "x", {extra}}}"#);
        let e = parse(&source("x"), &text).unwrap_err().to_string();
        assert!(
            e.contains("not supported by Warren") && e.contains(what),
            "{extra}: {e}"
        );
    }
    // The Go, Rust and C++ Features ask for a debugger's rights: installed without them, said.
    let go = parse(
        &source("go"),
        r#"{"id": "go", "version": "1", "name": "Go", "capAdd": ["SYS_PTRACE"], "securityOpt": ["seccomp=unconfined"]}"#,
    )
    .expect("installed");
    assert_eq!(go.not_applied.len(), 2, "{:?}", go.not_applied);
    assert!(
        go.not_applied[0].contains("`capAdd` \"SYS_PTRACE\" is not given")
            && go.not_applied[1].contains("seccomp=unconfined")
            && go.not_applied[1].contains("the dev container's own `securityOpt`"),
        "{:?}",
        go.not_applied
    );
    for (text, wanted) in [
        (r#"{"version": "1", "name": "x"}"#, "no `id`"),
        (
            r#"{"id": "x", "version": "1", "name": "x", "options": {"o": {"type": "number"}}}"#,
            "\"number\"",
        ),
        (
            r#"{"id": "x", "version": "1", "name": "x", "containerEnv": {"A B": "1"}}"#,
            "not an environment variable name",
        ),
        (r#"[1, 2]"#, "must be a JSON object"),
    ] {
        let e = parse(&source("x"), text).unwrap_err().to_string();
        assert!(e.contains(wanted), "{text}: {e}");
    }
}

#[test]
fn options_outside_what_the_feature_allows_are_refused() {
    let s = source("node");
    let m = parse(&s, NODE).unwrap();
    let e = resolve_options(
        &s,
        &m,
        &BTreeMap::from([("channel".to_owned(), FeatureValue::String("nightly".into()))]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("must be one of stable, beta"), "{e}");
    let e = resolve_options(
        &s,
        &m,
        &BTreeMap::from([("nvm".to_owned(), FeatureValue::String("yes".into()))]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("is a boolean"), "{e}");
}
