//! Typed IDs, states and wire types shared by every Warren component; no I/O lives here.
//!
//! This crate is the contract between the services: the reconcile protocol
//! (`reconcile`), the REST API's bodies (`api`), per-agent configuration (`config`),
//! the lifecycle rules that are pure functions of data (`lifecycle`), and resource
//! quantities (`quantity`). Services depend on it; it depends on no service.

pub mod api;
pub mod bounded;
pub mod config;
pub mod git;
pub mod gitops;
pub mod ids;
pub mod internal;
pub mod lifecycle;
pub mod quantity;
pub mod reconcile;
pub mod relay;
pub mod state;
pub mod trace;

pub use ids::{
    AgentId, MountId, ProjectId, RepositoryId, SpaceId, SshKeyId, TokenId, UserId, WorkspaceId,
};

/// The rule for the names of Warren's objects (agents, projects, repositories, GitOps
/// sources) and of the Kubernetes namespaces they name: an RFC 1123 label, 1-63 characters
/// of a-z, 0-9 and '-', not starting or ending with '-'.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
        ))
    }
}

/// An error and all its sources, `outer: inner: innermost`: how every component logs and
/// reports an error whose sources carry the detail.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        s.push_str(": ");
        s.push_str(&src.to_string());
        cur = src.source();
    }
    s
}
pub use state::{ActualState, DesiredState};
