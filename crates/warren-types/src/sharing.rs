//! Sharing a workspace's ports (issue 41, item 4): who may reach an endpoint (its
//! visibility), what an agent's admin allows, and the prefix of share-link tokens.
//!
//! The levels are ordered: each lets in everyone the one before does. The web terminal and
//! SSH are never shared this way: they stay with those who may use the workspace.

use serde::{Deserialize, Serialize};

/// Prefix of a share link's secret (`wrn_share_…`): it opens one port of one workspace until
/// it expires or is revoked, for whoever holds it.
pub const SHARE_TOKEN_PREFIX: &str = "wrn_share_";
/// Path on a workspace host where a share link is redeemed (`?token=…`).
pub const SHARE_PATH: &str = "/.warren/share";
/// Devfile endpoint attribute giving the endpoint's visibility (`private`, `space`,
/// `authenticated`, `public`); without it an exposed endpoint has its agent's default.
pub const VISIBILITY_ATTRIBUTE: &str = "warren.dev/visibility";

/// Who may reach a port of a workspace through the proxy.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PortVisibility {
    /// Its owner only.
    Private,
    /// Whoever may use the workspace: its owner and its space's developers and owners.
    Space,
    /// Every signed-in user of this Warren.
    Authenticated,
    /// Anyone, without signing in.
    Public,
}

impl PortVisibility {
    pub const ALL: [PortVisibility; 4] = [
        PortVisibility::Private,
        PortVisibility::Space,
        PortVisibility::Authenticated,
        PortVisibility::Public,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PortVisibility::Private => "private",
            PortVisibility::Space => "space",
            PortVisibility::Authenticated => "authenticated",
            PortVisibility::Public => "public",
        }
    }

    /// Who it lets in, in a few words.
    pub fn describe(self) -> &'static str {
        match self {
            PortVisibility::Private => "its owner only",
            PortVisibility::Space => "whoever may use the workspace",
            PortVisibility::Authenticated => "every signed-in user",
            PortVisibility::Public => "anyone, without signing in",
        }
    }
}

impl std::fmt::Display for PortVisibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PortVisibility {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PortVisibility::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!("{s:?} is not a visibility (private, space, authenticated or public)")
            })
    }
}

/// An agent's rules for sharing its workspaces' ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PortPolicy {
    /// What an exposed endpoint without `warren.dev/visibility` gets (capped by the most).
    pub default_visibility: PortVisibility,
    /// The widest visibility a devfile or a user may give a port; `public` lets a user put
    /// a port on the open internet.
    pub max_visibility: PortVisibility,
    /// Whether users may make share links.
    pub share_links: bool,
    /// Longest a share link may last.
    pub max_share_link_secs: u64,
}

/// One week.
pub const DEFAULT_MAX_SHARE_LINK_SECS: u64 = 7 * 24 * 3600;

impl Default for PortPolicy {
    fn default() -> Self {
        PortPolicy {
            default_visibility: PortVisibility::Space,
            max_visibility: PortVisibility::Authenticated,
            share_links: true,
            max_share_link_secs: DEFAULT_MAX_SHARE_LINK_SECS,
        }
    }
}

impl PortPolicy {
    /// The visibility a port asking for `wanted` (its devfile's, or a user's) gets: the
    /// default when it asks for none, never wider than the most allowed.
    pub fn effective(&self, wanted: Option<PortVisibility>) -> PortVisibility {
        wanted
            .unwrap_or(self.default_visibility)
            .min(self.max_visibility)
    }

    /// Checks the policy itself; the message names the setting.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_share_link_secs == 0 || self.max_share_link_secs > 366 * 24 * 3600 {
            return Err("ports.max_share_link_secs: between 1 and 31622400 (a year)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_are_ordered_and_capped_by_the_policy() {
        assert!(PortVisibility::Private < PortVisibility::Space);
        assert!(PortVisibility::Authenticated < PortVisibility::Public);
        let p = PortPolicy::default();
        assert_eq!(p.effective(None), PortVisibility::Space);
        assert_eq!(
            p.effective(Some(PortVisibility::Public)),
            PortVisibility::Authenticated,
            "public is the admin's to allow"
        );
        assert_eq!(
            p.effective(Some(PortVisibility::Private)),
            PortVisibility::Private
        );
        for v in PortVisibility::ALL {
            assert_eq!(v.as_str().parse::<PortVisibility>(), Ok(v));
        }
        assert!("everyone"
            .parse::<PortVisibility>()
            .unwrap_err()
            .contains("not a visibility"));
        assert!(PortPolicy {
            max_share_link_secs: 0,
            ..p
        }
        .validate()
        .is_err());
    }
}
