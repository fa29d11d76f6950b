//! Whole-stack tests on the test kit: server, relay, agent and proxy together in one process.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../../warren-agent/tests/kube_common/mod.rs"]
mod kube_common;

mod browser;
mod browser_access;
mod gitops;
mod gitops_kube;
mod metrics;
mod mounts;
mod stack;
mod tls;
mod trace;
mod wake;
