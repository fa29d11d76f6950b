//! Typed identifiers, so a workspace id can never be passed where a user id is expected.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

macro_rules! typed_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
            utoipa::ToSchema,
        )]
        #[serde(transparent)]
        pub struct $name(pub i64);

        impl $name {
            /// The raw database key.
            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.parse().map($name)
            }
        }

        impl From<i64> for $name {
            fn from(v: i64) -> Self {
                $name(v)
            }
        }
    };
}

typed_id!(
    /// A user account.
    UserId
);
typed_id!(
    /// A registered agent (one per cluster or container-engine host).
    AgentId
);
typed_id!(
    /// A project: a git repository and the devfile in it.
    ProjectId
);
typed_id!(
    /// A workspace.
    WorkspaceId
);
typed_id!(
    /// A personal access token.
    TokenId
);
typed_id!(
    /// An SSH public key registered by a user.
    SshKeyId
);
typed_id!(
    /// A Git repository registered for GitOps.
    RepositoryId
);
typed_id!(
    /// A space of the tree (spec/mounts.md).
    SpaceId
);
typed_id!(
    /// A group of users, which can hold roles on spaces.
    GroupId
);
typed_id!(
    /// A mount: an entry of the tree Warren does not run as containers (spec/mounts.md).
    MountId
);
