//! warren-server: Warren's control plane — REST API, storage, reconcile handler, lifecycle.
//!
//! Start it with [`run`], or [`Server::prepare`] + [`Server::serve`] to read the bootstrap
//! admin's credentials or create agents in-process first (`warren up`).

pub mod api;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod db;
pub mod error;
pub mod internal;
pub mod lifecycle;
pub mod metrics;
pub mod names;
pub mod oauth;
pub mod openapi;
pub mod render;
pub mod server;
pub mod state;
pub mod store;
pub mod throttle;

pub use config::ServerConfig;
pub use error::ServerError;
pub use server::{run, Server};
