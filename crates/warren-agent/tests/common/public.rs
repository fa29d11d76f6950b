//! The public example manifests of `tests/fixtures/public` (see its README) and the local
//! images standing in for the registry images they name.

#![allow(dead_code)]

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use warren_gitops::Manifest;

/// The image Argo CD's guestbook example runs (a local build under that name).
pub const GUESTBOOK_IMAGE: &str = "gcr.io/heptio-images/ks-guestbook-demo:0.2";
/// The image of the crash-looping example: the test image (busybox) under that name.
pub const CRASHLOOP_IMAGE: &str = "docker.io/library/busybox:1.36";
/// Both, as the one-node cluster imports them.
pub const IMAGES: &[&str] = &[GUESTBOOK_IMAGE, CRASHLOOP_IMAGE];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/public")
}

fn podman(args: &[&str]) -> Result<()> {
    let out = Command::new("podman")
        .args(args)
        .output()
        .with_context(|| format!("running podman {}", args.join(" ")))?;
    anyhow::ensure!(
        out.status.success(),
        "podman {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Builds (or tags) the stand-in images in Podman's store; cheap when they exist.
pub fn build_images() -> Result<()> {
    let context = dir().join("images/guestbook");
    let context = context.to_string_lossy();
    // Layers are cached: a rebuild of an unchanged context costs a look at the cache.
    podman(&["build", "-q", "-t", GUESTBOOK_IMAGE, &context])?;
    podman(&["tag", "localhost/warren-test:latest", CRASHLOOP_IMAGE])
}

/// The manifests of the fixture files `files`, parsed as a GitOps source's commit is.
pub fn manifests(files: &[&str]) -> Result<Vec<Manifest>> {
    let mut read = Vec::new();
    for f in files {
        let bytes = std::fs::read(dir().join(f)).with_context(|| format!("reading {f}"))?;
        read.push(((*f).to_owned(), bytes));
    }
    let parsed = warren_gitops::parse_files(&read, &warren_gitops::manifests::Limits::default());
    anyhow::ensure!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    Ok(parsed.objects)
}
