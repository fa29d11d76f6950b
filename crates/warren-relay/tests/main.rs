//! The relay's integration tests: agents dialling in, exec and logs through it, faults, routing across relays through Redis.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

mod common;
mod redis_support;

mod redis_routing;
mod relay_agent;
mod relay_build_context;
mod relay_exec;
mod relay_faults;
mod relay_logs;
