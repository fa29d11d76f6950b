//! The proxy's integration tests: the authenticating front door for HTTP, WebSocket and SSH.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

mod common;

mod front_door;
mod limits;
mod regions;
mod replicas;
mod sharing;
mod ssh;
