//! Typed IDs, states and wire types shared by every Warren component; no I/O lives here.
//!
//! This crate is the contract between the services: the reconcile protocol
//! (`reconcile`), the REST API's bodies (`api`), per-agent configuration (`config`),
//! the lifecycle rules that are pure functions of data (`lifecycle`), and resource
//! quantities (`quantity`). Services depend on it; it depends on no service.

pub mod api;
pub mod bounded;
pub mod config;
pub mod features;
pub mod git;
pub mod gitops;
pub mod host_requirements;
pub mod ids;
pub mod internal;
pub mod isolation;
pub mod lifecycle;
pub mod machine;
pub mod prebuild;
pub mod quantity;
pub mod reconcile;
pub mod relay;
pub mod schedule;
pub mod sharing;
pub mod startup;
pub mod state;
pub mod trace;

pub use ids::{
    AgentId, GroupId, MountId, ProjectId, RepositoryId, SpaceId, SshKeyId, TokenId, UserId,
    WorkspaceId,
};

/// The rule for the names of Warren's objects (agents, projects, repositories, GitOps
/// sources) and of the Kubernetes namespaces they name: an RFC 1123 label, 1-63 characters
/// of a-z, 0-9 and '-', not starting or ending with '-'.
pub fn check_name(name: &str) -> Result<(), String> {
    if is_dns_label(name, 63) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} must be 1-63 characters of a-z, 0-9 and '-', not starting or ending with '-'"
        ))
    }
}

/// The DNS label rule (RFC 1123), `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`, at most `max`
/// characters: the one home of the rule for workspace and object names, devfile component
/// names (with their own maximum), Kubernetes namespaces and the proxy's host labels.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An SSH front door as clients reach it, `host:port` (`[v6]:port` too), split into the
/// host (brackets removed) and a non-zero port: the one home of the rule for a proxy's
/// `ssh_public_address`, the server's check of a presence and the CLI's use of it. A host
/// starting with '-' is refused, since it would read as an option on ssh's command line.
pub fn parse_ssh_address(v: &str) -> Option<(&str, u16)> {
    let (host, port) = v.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let host_ok = !host.is_empty()
        && !host.starts_with('-')
        && v.len() <= 255
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'));
    let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
    host_ok.then_some((host, port))
}

/// SHA-256 of a high-entropy token (an agent's, an API token), hex: what the server stores
/// and looks up by, and what the relay presents for an agent it has not seen.
pub fn token_digest(token: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(token.as_bytes()))
}

/// Milliseconds since the Unix epoch by the wall clock (0 before it): the one home of the
/// wall clock for timestamps that are stored or exchanged (the server's reads go through its
/// `Clock` seam); durations and deadlines use tokio's clock, which tests can pause.
pub fn unix_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Seconds since the Unix epoch by the wall clock (see [`unix_millis`]): JWT times.
pub fn unix_secs() -> i64 {
    unix_millis().div_euclid(1000)
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
