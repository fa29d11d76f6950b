//! The server's client side of the relays: the internal JWTs it mints and accepts, the
//! "reconcile now" signal, and reading a workspace's output. Used by the domain layer; it
//! speaks HTTP to the relays but hands no HTTP type upward.

pub mod exec;
pub mod jwt;
pub mod logs;
pub mod signal;
