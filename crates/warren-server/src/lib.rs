//! warren-server: Warren's control plane — REST API, storage, reconcile handler, lifecycle.
//!
//! Layers, dependencies one way: `store` (SQL) → `app` (the domain: every rule and
//! authorisation decision) → `http` (adapters: JSON API, OAuth pages, internal endpoints).
//! `relay` is the domain's client of the relays. Start it with [`run`], or
//! [`Server::prepare`] + [`Server::serve`] to read the bootstrap admin's credentials or
//! create agents in-process first (`warren up`).

pub mod app;
pub mod backup;
pub mod clock;
pub mod config;
pub mod crypto;
pub mod db;
pub mod devfile_fetch;
pub mod error;
pub mod http;
pub mod relay;
pub mod server;
pub mod store;
pub mod trace;

pub use config::{OidcConfig, ServerConfig};

/// Where an OpenID provider sends the browser back after single sign-on.
pub const SSO_CALLBACK_PATH: &str = "/oauth/sso/callback";
pub use error::ServerError;
pub use server::{run, verify_audit, Server};
