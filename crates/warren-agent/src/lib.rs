//! Warren's agent: reconciles a workspace runtime (Kubernetes, container engine) with the server.

mod backoff;
pub mod connection;
pub mod gitops;
pub mod reconciler;
pub mod runtime;
mod service;

pub use service::{run, serve, AgentConfig, AgentError, RuntimeChoice};
