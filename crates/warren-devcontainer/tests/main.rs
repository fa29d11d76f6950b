//! The dev container reader's tests: one test binary, each file beside this one a module.

mod build;
mod compose;
mod corpus;
mod features;
mod rules;
