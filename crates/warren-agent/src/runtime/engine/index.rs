//! Which containers each workspace has, known without asking the engine for a listing.
//!
//! Podman answers a container listing by loading every container it holds, whatever the
//! filters: with 200 workspaces present one listing of a single workspace's containers took
//! ~50 ms against ~3 ms for an inspection (issue 38), and an apply, a deletion and each look
//! of the view made one or two. So the runtime keeps the names of each workspace's
//! containers and inspects those by name:
//!
//! - a listing of all of the installation's containers (the view's full look at start, on
//!   every event stream (re)connection and before each full reconcile; the restart
//!   supervisor's pass) sets the index, and marks it complete;
//! - the runtime's own creates add their container as soon as the engine has it;
//! - the engine's `create` and `remove` events of the installation's containers add and drop
//!   names (anything that makes a container with the installation's labels, the runtime or
//!   not, is seen);
//! - when the event stream (re)connects, events may have been missed: the index is not
//!   complete until the next full listing, and lookups list meanwhile.
//!
//! Invariant: while the index is complete, every container with the installation's labels
//! that the engine holds is named under its workspace, except for moments between the
//! engine making one on someone else's behalf and its `create` event arriving. Names that
//! are no longer there cost an inspection that answers 404, after which they are dropped;
//! what an inspection returns is checked against the selector as a listing's entries are.
//!
//! A listing's answer may be older than a change made while it travelled (a create by the
//! runtime, an event): each change stamps its workspace, and a listing sets only the
//! workspaces not stamped since it began.

use std::collections::{BTreeMap, BTreeSet};

use bollard::models::{ContainerInspectResponse, ContainerSummary, ContainerSummaryStateEnum};

/// The names of each workspace's containers.
#[derive(Debug, Default)]
pub(super) struct ContainerIndex {
    /// `names` holds every workspace's containers (set by a full listing, kept since by
    /// the runtime's creates and the engine's events); otherwise lookups list.
    complete: bool,
    names: BTreeMap<String, BTreeSet<String>>,
    /// Bumped by every change; `stamps` holds, per workspace, the value of its last one.
    clock: u64,
    stamps: BTreeMap<String, u64>,
}

impl ContainerIndex {
    /// The moment a listing or lookup begins, to pass to [`ContainerIndex::set_all`] or
    /// [`ContainerIndex::forget`] with its answer.
    pub fn now(&self) -> u64 {
        self.clock
    }

    fn stamp(&mut self, workspace: &str) {
        self.clock += 1;
        self.stamps.insert(workspace.to_owned(), self.clock);
    }

    fn changed_since(&self, workspace: &str, since: u64) -> bool {
        self.stamps.get(workspace).is_some_and(|s| *s > since)
    }

    /// The names to inspect for `workspace`; `None` when the index is not complete and the
    /// engine must be asked for a listing.
    pub fn lookup(&self, workspace: &str) -> Option<Vec<String>> {
        self.complete.then(|| {
            self.names
                .get(workspace)
                .map(|n| n.iter().cloned().collect())
                .unwrap_or_default()
        })
    }

    /// Container `name` of `workspace` exists (created, or announced by an event).
    pub fn add(&mut self, workspace: &str, name: &str) {
        self.names
            .entry(workspace.to_owned())
            .or_default()
            .insert(name.to_owned());
        self.stamp(workspace);
    }

    /// Container `name` is gone, whichever workspace it was of.
    pub fn remove(&mut self, name: &str) {
        let holders: Vec<String> = self
            .names
            .iter()
            .filter(|(_, names)| names.contains(name))
            .map(|(w, _)| w.clone())
            .collect();
        for w in holders {
            if let Some(names) = self.names.get_mut(&w) {
                names.remove(name);
                if names.is_empty() {
                    self.names.remove(&w);
                }
            }
            self.stamp(&w);
        }
    }

    /// Container `name` of `workspace` was found gone (or not the workspace's) by a lookup
    /// that began at `since`; dropped unless the workspace changed meanwhile (it may have
    /// been made again under the same name).
    pub fn forget(&mut self, workspace: &str, name: &str, since: u64) {
        if self.changed_since(workspace, since) {
            return;
        }
        if let Some(names) = self.names.get_mut(workspace) {
            names.remove(name);
            if names.is_empty() {
                self.names.remove(workspace);
            }
        }
    }

    /// What a listing of all the installation's containers that began at `since` found,
    /// as (workspace, name) pairs; the index is complete from now on.
    pub fn set_all(&mut self, listed: impl IntoIterator<Item = (String, String)>, since: u64) {
        let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (workspace, name) in listed {
            found.entry(workspace).or_default().insert(name);
        }
        let workspaces: BTreeSet<String> = found.keys().chain(self.names.keys()).cloned().collect();
        for w in workspaces {
            if self.changed_since(&w, since) {
                continue;
            }
            match found.remove(&w) {
                Some(names) => {
                    self.names.insert(w, names);
                }
                None => {
                    self.names.remove(&w);
                }
            }
        }
        self.complete = true;
    }

    /// Events may have been missed: lookups list until the next full listing.
    pub fn invalidate(&mut self) {
        self.complete = false;
        self.names.clear();
        self.clock += 1;
        self.stamps.clear();
    }
}

/// A container's name as a listing gives it (`/name`), without the slash.
pub(super) fn summary_name(c: &ContainerSummary) -> Option<&str> {
    c.names
        .as_ref()?
        .first()
        .map(|n| n.strip_prefix('/').unwrap_or(n))
}

/// What a listing would have said of the container an inspection describes (the fields the
/// runtime reads: id, name, image, labels, state).
pub(super) fn summary_of(i: ContainerInspectResponse) -> ContainerSummary {
    let config = i.config.unwrap_or_default();
    let state = i
        .state
        .and_then(|s| s.status)
        .and_then(|s| s.to_string().parse::<ContainerSummaryStateEnum>().ok());
    let command = {
        let words: Vec<String> = config
            .entrypoint
            .unwrap_or_default()
            .into_iter()
            .chain(config.cmd.unwrap_or_default())
            .collect();
        (!words.is_empty()).then(|| words.join(" "))
    };
    ContainerSummary {
        id: i.id,
        names: i
            .name
            .map(|n| vec![format!("/{}", n.strip_prefix('/').unwrap_or(&n))]),
        image: config.image,
        image_id: i.image,
        command,
        created: i
            .created
            .as_deref()
            .and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok())
            .map(|c| c.timestamp()),
        labels: config.labels,
        state,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(w, n)| ((*w).to_owned(), (*n).to_owned()))
            .collect()
    }

    #[test]
    fn lookups_list_until_a_full_listing_and_again_after_events_may_have_been_missed() {
        let mut index = ContainerIndex::default();
        index.add("a", "warren-a-dev");
        assert_eq!(index.lookup("a"), None, "not complete: list");
        let t = index.now();
        index.set_all(pairs(&[("a", "warren-a-dev"), ("b", "warren-b-dev")]), t);
        assert_eq!(index.lookup("a"), Some(vec!["warren-a-dev".to_owned()]));
        assert_eq!(index.lookup("c"), Some(vec![]), "complete: none");
        index.invalidate();
        assert_eq!(index.lookup("a"), None);
    }

    #[test]
    fn a_listing_does_not_undo_what_changed_while_it_travelled() {
        let mut index = ContainerIndex::default();
        let t = index.now();
        // Created while the listing was answered: the listing does not have it.
        index.add("a", "warren-a-dev");
        index.set_all(pairs(&[("b", "warren-b-dev"), ("c", "warren-c-dev")]), t);
        assert_eq!(index.lookup("a"), Some(vec!["warren-a-dev".to_owned()]));
        assert_eq!(index.lookup("b"), Some(vec!["warren-b-dev".to_owned()]));
        // Removed while the next listing travelled: it stays removed.
        let t = index.now();
        index.remove("warren-b-dev");
        index.set_all(pairs(&[("b", "warren-b-dev"), ("c", "warren-c-dev")]), t);
        assert_eq!(index.lookup("b"), Some(vec![]));
        // A listing that began after the change is believed.
        let t = index.now();
        index.set_all(pairs(&[("b", "warren-b-dev")]), t);
        assert_eq!(index.lookup("b"), Some(vec!["warren-b-dev".to_owned()]));
        assert_eq!(index.lookup("a"), Some(vec![]));
        assert_eq!(index.lookup("c"), Some(vec![]));
    }

    #[test]
    fn a_name_found_gone_is_forgotten_unless_made_again_meanwhile() {
        let mut index = ContainerIndex::default();
        let t = index.now();
        index.set_all(pairs(&[("a", "warren-a-dev"), ("a", "warren-a-init")]), t);
        let t = index.now();
        index.forget("a", "warren-a-init", t);
        assert_eq!(index.lookup("a"), Some(vec!["warren-a-dev".to_owned()]));
        // The lookup saw 404, but the runtime made it again before the lookup ended.
        let t = index.now();
        index.add("a", "warren-a-dev");
        index.forget("a", "warren-a-dev", t);
        assert_eq!(index.lookup("a"), Some(vec!["warren-a-dev".to_owned()]));
    }

    #[test]
    fn an_inspection_reads_as_a_listing_entry() {
        let text = r#"{"Id":"abc","Name":"/warren-a-dev","Image":"sha256:76a4",
            "Created":"2026-11-29T04:14:11.96581505Z",
            "State":{"Status":"exited","ExitCode":3},
            "Config":{"Image":"localhost/warren-test:latest","Cmd":["sh","-c","exit 3"],
                      "Labels":{"warren.dev/workspace-name":"a"}}}"#;
        let i: ContainerInspectResponse = serde_json::from_str(text).unwrap();
        let s = summary_of(i);
        assert_eq!(s.id.as_deref(), Some("abc"));
        assert_eq!(summary_name(&s), Some("warren-a-dev"));
        assert_eq!(s.state, Some(ContainerSummaryStateEnum::EXITED));
        assert_eq!(s.image_id.as_deref(), Some("sha256:76a4"));
        assert_eq!(s.image.as_deref(), Some("localhost/warren-test:latest"));
        assert_eq!(s.labels.unwrap()["warren.dev/workspace-name"], "a");
        assert_eq!(s.created, Some(1_795_925_651));
    }
}
