//! GitOps rules shared by the server (validation when an operator configures a source), the
//! relay (which files of a commit to read and how to parse them) and the agent (which
//! objects it may apply): one implementation, so the three never disagree.

pub mod kinds;
pub mod manifests;
pub mod paths;
pub mod rights;
pub mod validate;

pub use kinds::{KindPattern, KindSet, DEFAULT_ALLOW};
pub use manifests::{parse_files, Manifest, Parsed};
pub use paths::PathSelector;
pub use rights::Rights;
pub use validate::{parse_interval, validate_policy, validate_sources, Problem};
