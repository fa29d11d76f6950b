//! The server's integration tests: the API, web UI, OAuth and SSO, leases, reconcile signals, upgrades and backups, on SQLite and PostgreSQL.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

mod common;

mod access;
mod api;
mod audit;
mod backup;
mod builds;
mod concurrency;
mod exceptions;
mod fuzz_api;
mod gitops;
mod groups;
mod layers;
mod leases;
mod machines;
mod mounts;
mod oauth;
mod prebuilds;
mod projects;
mod rebuild;
mod reconcile;
mod repositories;
mod schedules;
mod secrets;
mod sharing;
mod signal;
mod spaces;
mod sso;
mod ui;
mod ui_regions;
mod upgrades;
mod usage;
mod users;
