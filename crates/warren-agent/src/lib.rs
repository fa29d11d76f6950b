//! Warren's agent: reconciles a workspace runtime (Kubernetes, container engine) with the server.

mod backoff;
pub mod connection;
pub mod reconciler;
pub mod runtime;
