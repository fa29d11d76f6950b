//! The binary's end-to-end tests: `warren up` and the services as processes, on Podman and the one-node Kubernetes cluster, driven by real clients.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../../warren-agent/tests/kube_common/mod.rs"]
mod kube_common;
mod support;

mod access_e2e;
mod cli_devfile;
mod cli_e2e;
mod container_image;
mod devcontainer_e2e;
mod devcontainer_kube_e2e;
mod devfile_e2e;
mod editor_e2e;
mod failures_e2e;
mod faults_e2e;
mod git_e2e;
mod gitops_e2e;
mod ha_e2e;
mod isolation_e2e;
mod kube_e2e;
mod logs_cli;
mod machines_e2e;
mod mounts_e2e;
mod parent_e2e;
mod port_forward_cli;
mod prebuild_e2e;
mod registry_devfiles_e2e;
mod registry_e2e;
mod rolling_upgrade;
mod run_cli;
mod scaletest_e2e;
mod server_cli;
mod server_crash;
mod ssh_cli;
mod tidy;
mod ui_e2e;
mod up_e2e;
