//! Bodies of the REST API under `/api/v1`, shared by the server, the client and the CLI.

use crate::config::AgentConfig;
use crate::ids::{
    AgentId, GroupId, MountId, ProjectId, SpaceId, SshKeyId, TokenId, UserId, WorkspaceId,
};
use crate::state::{ActualState, DesiredState};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

mod accounts;
mod audit;
mod groups;
mod lists;
mod ports;
mod secrets;
mod tree;
mod usage;
mod workspaces;

pub use accounts::*;
pub use audit::*;
pub use groups::*;
pub use lists::{Page, WorkspaceListQuery};
pub use ports::*;
pub use secrets::*;
pub use tree::*;
pub use usage::*;
pub use workspaces::*;

/// Prefix of every REST route.
pub const API_PREFIX: &str = "/api/v1";

/// Every API error: `{"error": {"code": "...", "message": "..."}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiError {
    pub error: ApiErrorBody,
}

impl ApiError {
    /// The code and message of an error answer's body; for a body that is not this JSON (a
    /// load balancer's page, say), no code and the start of the text.
    pub fn parts_of(body: &[u8]) -> (String, String) {
        match serde_json::from_slice::<ApiError>(body) {
            Ok(e) => (e.error.code, e.error.message),
            Err(_) => (
                String::new(),
                String::from_utf8_lossy(body).chars().take(200).collect(),
            ),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApiErrorBody {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_field`, `quota_exceeded`.
    pub code: String,
    /// Human-readable, names the offending field or state.
    pub message: String,
}

#[cfg(test)]
mod ssh_endpoint_tests {
    use super::SshEndpoint;

    #[test]
    fn host_keys_are_checked_and_become_known_hosts_lines() {
        let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx0";
        assert_eq!(
            SshEndpoint::parse_host_key(&format!("{key} warren proxy host key")).unwrap(),
            key
        );
        for bad in ["", "ssh-ed25519", "ssh-ed25519 not;base64!!!!!!!!!!", "a b"] {
            assert!(SshEndpoint::parse_host_key(bad).is_err(), "{bad:?}");
        }
        let mut e = SshEndpoint::parse("ssh.example.com:2222").unwrap();
        e.host_keys = vec![key.into()];
        assert_eq!(
            e.known_hosts_lines(),
            [format!("[ssh.example.com]:2222 {key}")]
        );
        e.port = 22;
        assert_eq!(e.known_hosts_lines(), [format!("ssh.example.com {key}")]);
    }

    #[test]
    fn parses_the_usual_forms() {
        let p = |s| SshEndpoint::parse(s).map(|e| (e.host, e.port));
        assert_eq!(p("ssh.example.com"), Ok(("ssh.example.com".into(), 22)));
        assert_eq!(p("127.0.0.1:2222"), Ok(("127.0.0.1".into(), 2222)));
        assert_eq!(p("[::1]:2222"), Ok(("::1".into(), 2222)));
        assert_eq!(p("::1"), Ok(("::1".into(), 22)));
        assert!(p("").is_err());
        assert!(p("host:0").is_err());
        assert!(p("host:x").is_err());
        assert!(p("a b:22").is_err());
        assert!(p("u@host:22").is_err());
    }
}
