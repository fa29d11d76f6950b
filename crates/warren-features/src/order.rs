//! The order Features are installed in: the specification's round-based sort
//! ("Dependency installation order algorithm"). Each round takes every Feature whose
//! `dependsOn` (hard) and `installsAfter` (soft, only among Features being installed)
//! dependencies are installed, commits those of the highest `overrideFeatureInstallOrder`
//! priority in a stable order, and returns the rest to the work list; a round that commits
//! nothing is a cycle, reported with the Features it left.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use warren_types::features::FeatureValue;

/// A Feature in the dependency graph.
#[derive(Debug, Clone)]
pub struct Node {
    /// The id without version (`ghcr.io/devcontainers/features/node`, a local folder's name).
    pub id: String,
    /// The tag or digest it was asked for (`1`, `1.2.3`, `latest`); empty for a local one.
    pub tag: String,
    pub options: BTreeMap<String, FeatureValue>,
    /// The manifest digest (or a local folder's digest): the last tie-breaker.
    pub canonical: String,
    /// Indices of the Features it depends on (`dependsOn`, resolved).
    pub depends_on: Vec<usize>,
    /// `installsAfter` ids.
    pub installs_after: Vec<String>,
}

/// The indices of `nodes` in install order; `priority` is `overrideFeatureInstallOrder`.
pub fn install_order(nodes: &[Node], priority: &[String]) -> Result<Vec<usize>, String> {
    let round_priority = |n: &Node| {
        priority
            .iter()
            .position(|id| *id == n.id)
            .map_or(0, |i| priority.len() - i)
    };
    // Every dependency of each node: hard ones, and soft ones that are being installed.
    let deps: Vec<Vec<usize>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut d = n.depends_on.clone();
            for after in &n.installs_after {
                d.extend(
                    nodes
                        .iter()
                        .enumerate()
                        .filter(|(j, m)| *j != i && m.id == *after)
                        .map(|(j, _)| j),
                );
            }
            d
        })
        .collect();
    let mut installed: Vec<usize> = vec![];
    let mut work: Vec<usize> = (0..nodes.len()).collect();
    while !work.is_empty() {
        let ready: Vec<usize> = work
            .iter()
            .copied()
            .filter(|i| deps[*i].iter().all(|d| installed.contains(d)))
            .collect();
        let Some(top) = ready.iter().map(|i| round_priority(&nodes[*i])).max() else {
            let stuck: Vec<&str> = work.iter().map(|i| nodes[*i].id.as_str()).collect();
            return Err(format!(
                "{} wait for each other (a cycle of `dependsOn` or `installsAfter`); no order installs them",
                stuck.join(", ")
            ));
        };
        let mut round: Vec<usize> = ready
            .into_iter()
            .filter(|i| round_priority(&nodes[*i]) == top)
            .collect();
        round.sort_by(|a, b| stable(&nodes[*a], &nodes[*b]));
        work.retain(|i| !round.contains(i));
        installed.extend(round);
    }
    Ok(installed)
}

/// The specification's "round stable sort": id, then tag from oldest to newest (`latest`
/// newest), then more given options first, then the options' keys and values, then the
/// canonical name.
fn stable(a: &Node, b: &Node) -> Ordering {
    a.id.cmp(&b.id)
        .then_with(|| tag_order(&a.tag, &b.tag))
        .then_with(|| b.options.len().cmp(&a.options.len()))
        .then_with(|| a.options.keys().cmp(b.options.keys()))
        .then_with(|| a.options.values().cmp(b.options.values()))
        .then_with(|| a.canonical.cmp(&b.canonical))
}

/// Tags compared as versions (`1` < `1.2` < `1.10` < `latest`), others as text.
fn tag_order(a: &str, b: &str) -> Ordering {
    let version = |t: &str| -> Option<Vec<u64>> {
        if t == "latest" {
            return Some(vec![u64::MAX]);
        }
        t.split('.').map(|p| p.parse().ok()).collect()
    };
    match (version(a), version(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}
