//! warren-features' tests: one test binary, each file beside this one a module.

mod context;
mod fetch;
mod guard;
mod order;
