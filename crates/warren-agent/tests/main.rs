//! The agent's integration tests: the engine runtime on Podman, the Kubernetes runtime on a one-node cluster, the reconciler.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

mod common;
mod kube_common;
mod reconciler_model;

mod engine_autobuild;
mod engine_devfile;
mod engine_exec;
mod engine_features;
mod engine_gitops;
mod engine_plan;
mod engine_runtime;
mod engine_seed;
mod kube_builds;
mod kube_dry_run;
mod kube_exec;
mod kube_gitops;
mod kube_manifests;
mod kube_mock;
mod kube_node;
mod kube_runtime;
mod kube_seed;
mod reconciler_loop;
