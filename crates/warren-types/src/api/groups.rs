//! Bodies of the API's groups: local groups kept by hand, groups synchronised from the
//! OpenID provider's groups claim, and the roles groups hold on spaces.

use super::*;

/// Where a group's members come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum GroupSource {
    /// Members added and removed by admins.
    #[default]
    Local,
    /// Members are those whose sign-in through the OpenID provider named the group in its
    /// groups claim; each membership lasts until the member's next sign-in, and at most the
    /// server's `oidc.group_ttl_hours` after the sign-in that gave it.
    Oidc,
}

impl GroupSource {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupSource::Local => "local",
            GroupSource::Oidc => "oidc",
        }
    }

    pub fn parse(s: &str) -> Option<GroupSource> {
        match s {
            "local" => Some(GroupSource::Local),
            "oidc" => Some(GroupSource::Oidc),
            _ => None,
        }
    }
}

/// A group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Group {
    pub id: GroupId,
    /// For an `oidc` group, the value of the provider's groups claim it stands for.
    pub name: String,
    pub source: GroupSource,
    #[serde(default)]
    pub description: String,
    /// Members whose membership counts now.
    pub members: i64,
    pub created_at: DateTime<Utc>,
}

/// Body of `POST /groups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGroupRequest {
    pub name: String,
    #[serde(default)]
    pub source: GroupSource,
    #[serde(default)]
    pub description: String,
}

/// A member of a group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GroupMember {
    pub user_id: UserId,
    pub username: String,
    /// For an `oidc` group: when the membership stops counting unless the member signs in
    /// again (the provider then says again whether they belong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// Answer of `GET /groups/{group}`: the group and who is in it now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GroupDetail {
    pub group: Group,
    pub members: Vec<GroupMember>,
}

/// A group's role on a space: each member holds it there and below, as a member of the space
/// would.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SpaceGroupRole {
    pub group_id: GroupId,
    pub group: String,
    pub source: GroupSource,
    pub role: SpaceRole,
    pub created_at: DateTime<Utc>,
}

/// Longest group name: providers name groups by path (`/org/team`) or by id (a UUID).
pub const GROUP_NAME_MAX: usize = 128;

/// The rule for group names: 1–128 characters, none of them a control character, no blank
/// at either end. Wider than other names because an `oidc` group's name is whatever the
/// provider's claim says.
pub fn check_group_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > GROUP_NAME_MAX {
        return Err(format!("must be 1 to {GROUP_NAME_MAX} bytes long"));
    }
    if name.chars().any(char::is_control) {
        return Err("must not contain control characters".into());
    }
    if name.trim() != name {
        return Err("must not start or end with a blank".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_names_take_what_providers_send_and_nothing_that_hides() {
        for good in [
            "dev",
            "/acme/platform team",
            "3f2a9c1e-7c4b-4a8e-9d2f-1b6e0a5c7d88",
        ] {
            assert_eq!(check_group_name(good), Ok(()), "{good}");
        }
        for bad in ["", " dev", "dev\n", "a\u{1b}[2J", &"x".repeat(129)] {
            assert!(check_group_name(bad).is_err(), "{bad:?}");
        }
    }
}
