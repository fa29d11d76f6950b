//! The devfile crate's integration tests: parsing, rules, rendering, the registry corpus, fuzzing.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

mod common;

mod fuzz;
mod parent;
mod registry;
mod render;
mod rules;
mod schema_oracle;
mod startup_script;
