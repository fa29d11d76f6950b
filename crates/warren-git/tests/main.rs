//! The Git library's integration tests.
//!
//! One test binary for the crate: each file beside this one is a module of it, so the
//! tests link once and share one process (helpers initialised once, not per file).

mod read;
mod snapshot;
