//! The server's integration tests: the API, web UI, OAuth and SSO, leases, reconcile signals, upgrades and backups, on SQLite and PostgreSQL.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

mod common;

mod access;
mod api;
mod backup;
mod concurrency;
mod fuzz_api;
mod gitops;
mod layers;
mod leases;
mod mounts;
mod oauth;
mod projects;
mod reconcile;
mod signal;
mod spaces;
mod sso;
mod ui;
mod upgrades;
mod users;
