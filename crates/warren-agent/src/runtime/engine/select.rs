//! Which engine objects a listing may return and a deletion may touch: one selector, applied
//! to every result whatever the engine did with the label filters.
//!
//! Engines filter by label on the server side, but not alike: Podman 4.3 ORs several `label`
//! filters on volumes and networks where Docker ANDs them, so a listing for "workspace a of
//! this agent" can return every volume of the agent. The filters only narrow what travels;
//! [`Selector::matches`] decides.

use std::collections::BTreeMap;

use super::plan::WORKSPACE_NAME_LABEL;
use super::OWNER_LABEL;
use crate::runtime::AGENT_ID_LABEL;

/// The objects of one installation (agent id and owner id), or of one workspace of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    agent: String,
    owner: String,
    workspace: Option<String>,
}

impl Selector {
    /// Every object of this installation.
    pub fn installation(agent: impl Into<String>, owner: impl Into<String>) -> Self {
        Selector {
            agent: agent.into(),
            owner: owner.into(),
            workspace: None,
        }
    }

    /// The objects of one workspace of this installation.
    pub fn workspace(&self, name: &str) -> Self {
        Selector {
            workspace: Some(name.to_owned()),
            ..self.clone()
        }
    }

    /// The workspace selected, if one is.
    pub fn workspace_name(&self) -> Option<&str> {
        self.workspace.as_deref()
    }

    /// `label` filter values narrowing what the engine sends (not trusted; see the module).
    pub fn filters(&self) -> Vec<String> {
        let mut out = vec![
            format!("{AGENT_ID_LABEL}={}", self.agent),
            format!("{OWNER_LABEL}={}", self.owner),
        ];
        out.extend(
            self.workspace
                .as_ref()
                .map(|w| format!("{WORKSPACE_NAME_LABEL}={w}")),
        );
        out
    }

    /// Whether an object with these labels is selected: every label named must be present
    /// with exactly this value.
    pub fn matches<'a>(&self, mut get: impl FnMut(&str) -> Option<&'a str>) -> bool {
        get(AGENT_ID_LABEL) == Some(self.agent.as_str())
            && get(OWNER_LABEL) == Some(self.owner.as_str())
            && self
                .workspace
                .as_deref()
                .is_none_or(|w| get(WORKSPACE_NAME_LABEL) == Some(w))
    }

    /// [`Selector::matches`] on a label map.
    pub fn matches_map<S: std::hash::BuildHasher>(
        &self,
        labels: &std::collections::HashMap<String, String, S>,
    ) -> bool {
        self.matches(|k| labels.get(k).map(String::as_str))
    }

    /// [`Selector::matches`] on an ordered label map.
    pub fn matches_btree(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches(|k| labels.get(k).map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(agent: &str, owner: &str, ws: Option<&str>) -> BTreeMap<String, String> {
        let mut m = BTreeMap::new();
        m.insert(AGENT_ID_LABEL.to_owned(), agent.to_owned());
        m.insert(OWNER_LABEL.to_owned(), owner.to_owned());
        if let Some(ws) = ws {
            m.insert(WORKSPACE_NAME_LABEL.to_owned(), ws.to_owned());
        }
        m
    }

    #[test]
    fn a_workspace_selector_takes_only_that_workspace() {
        let s = Selector::installation("7", "own").workspace("a1");
        assert!(s.matches_btree(&labels("7", "own", Some("a1"))));
        assert!(!s.matches_btree(&labels("7", "own", Some("a2"))));
        assert!(!s.matches_btree(&labels("7", "own", Some("a1-x"))));
        assert!(!s.matches_btree(&labels("7", "own", None)));
        assert!(!s.matches_btree(&labels("8", "own", Some("a1"))));
        assert!(!s.matches_btree(&labels("7", "other", Some("a1"))));
        assert!(Selector::installation("7", "own").matches_btree(&labels("7", "own", None)));
    }

    proptest! {
        /// Whatever objects an engine returns for a listing (as if it had ignored or ORed
        /// the filters), the selection is exactly the objects whose three labels are the
        /// selector's: never another workspace's, agent's or installation's.
        #[test]
        fn selection_is_exactly_the_matching_objects(
            objects in proptest::collection::vec(
                (0u8..3, 0u8..3, proptest::option::of(0u8..4)), 0..40),
            agent in 0u8..3,
            owner in 0u8..3,
            ws in proptest::option::of(0u8..4),
        ) {
            let name = |i: u8| format!("ws{i}");
            let sel = Selector::installation(agent.to_string(), format!("o{owner}"));
            let sel = match ws { Some(w) => sel.workspace(&name(w)), None => sel };
            for (a, o, w) in objects {
                let l = labels(&a.to_string(), &format!("o{o}"), w.map(name).as_deref());
                let expected = a == agent && o == owner && ws.is_none_or(|ws| w == Some(ws));
                prop_assert_eq!(sel.matches_btree(&l), expected);
            }
        }
    }
}
