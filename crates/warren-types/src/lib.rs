//! Typed IDs, states and wire types shared by every Warren component; no I/O lives here.
//!
//! This crate is the contract between the services: the reconcile protocol
//! (`reconcile`), the REST API's bodies (`api`), per-agent configuration (`config`),
//! the lifecycle rules that are pure functions of data (`lifecycle`), and resource
//! quantities (`quantity`). Services depend on it; it depends on no service.

pub mod api;
pub mod config;
pub mod ids;
pub mod internal;
pub mod lifecycle;
pub mod quantity;
pub mod reconcile;
pub mod relay;
pub mod state;

pub use ids::{AgentId, ProjectId, SshKeyId, TokenId, UserId, WorkspaceId};
pub use state::{ActualState, DesiredState};
