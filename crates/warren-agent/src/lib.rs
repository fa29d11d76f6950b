//! Warren's agent: reconciles a workspace runtime (Kubernetes, container engine) with the server;
//! and `warren connect`, which attaches a machine as a mount over the same relay connection.

pub mod backoff;
pub mod connection;
pub mod connector;
pub mod gitops;
pub mod leader;
pub mod meter;
pub mod reconciler;
pub mod runtime;
mod service;
pub mod url_mounts;

pub use service::{run, serve, AgentConfig, AgentError, RuntimeChoice};
