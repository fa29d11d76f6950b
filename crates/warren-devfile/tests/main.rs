//! The devfile crate's integration tests: parsing, rules, rendering, the registry corpus, fuzzing.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

// Tests wait on real processes and engines with the standard clock (blocking waits in
// plain tests); the tokio-clock rule of clippy.toml is for product code.
#![allow(clippy::disallowed_methods)]

mod common;

mod attributes;
mod fuzz;
mod parent;
mod registry;
mod render;
mod rules;
mod schema_oracle;
mod startup_script;
