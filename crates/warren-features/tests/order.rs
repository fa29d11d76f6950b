//! The install order: the specification's round-based sort, on graphs small enough to
//! check by hand.

use std::collections::BTreeMap;
use warren_features::order::{install_order, Node};
use warren_types::features::FeatureValue;

fn node(id: &str, tag: &str, depends_on: &[usize], installs_after: &[&str]) -> Node {
    Node {
        id: id.into(),
        tag: tag.into(),
        options: BTreeMap::new(),
        canonical: format!("sha256:{id}{tag}"),
        depends_on: depends_on.to_vec(),
        installs_after: installs_after.iter().map(|s| s.to_string()).collect(),
    }
}

fn ids(nodes: &[Node], order: &[usize]) -> Vec<String> {
    order.iter().map(|i| nodes[*i].id.clone()).collect()
}

#[test]
fn with_no_dependencies_the_order_is_by_id() {
    let nodes = [
        node("r/c", "1", &[], &[]),
        node("r/a", "1", &[], &[]),
        node("r/b", "1", &[], &[]),
    ];
    assert_eq!(
        ids(&nodes, &install_order(&nodes, &[]).unwrap()),
        ["r/a", "r/b", "r/c"]
    );
}

#[test]
fn hard_and_soft_dependencies_come_first() {
    // a depends on c; b installs after a; d installs after a Feature not being installed.
    let nodes = [
        node("r/a", "1", &[2], &[]),
        node("r/b", "1", &[], &["r/a"]),
        node("r/c", "1", &[], &[]),
        node("r/d", "1", &[], &["r/zzz"]),
    ];
    assert_eq!(
        ids(&nodes, &install_order(&nodes, &[]).unwrap()),
        ["r/c", "r/d", "r/a", "r/b"]
    );
}

#[test]
fn the_users_priority_pulls_a_feature_forward_but_never_past_its_dependencies() {
    let nodes = [
        node("r/a", "1", &[], &[]),
        node("r/b", "1", &[], &[]),
        node("r/z", "1", &[], &[]),
        node("r/y", "1", &[0], &[]),
    ];
    // z first (priority 2), then y would be next (priority 1) but waits for a.
    let order = install_order(&nodes, &["r/z".into(), "r/y".into()]).unwrap();
    assert_eq!(ids(&nodes, &order), ["r/z", "r/a", "r/b", "r/y"]);
}

#[test]
fn equal_ids_are_ordered_by_tag_then_by_options() {
    let mut many = node("r/a", "1", &[], &[]);
    many.options = BTreeMap::from([("x".to_owned(), FeatureValue::Bool(true))]);
    let nodes = [
        node("r/a", "latest", &[], &[]),
        node("r/a", "1.10", &[], &[]),
        node("r/a", "1.2", &[], &[]),
        node("r/a", "1", &[], &[]),
        many,
    ];
    let order = install_order(&nodes, &[]).unwrap();
    let tags: Vec<(&str, usize)> = order
        .iter()
        .map(|i| (nodes[*i].tag.as_str(), nodes[*i].options.len()))
        .collect();
    assert_eq!(
        tags,
        [("1", 1), ("1", 0), ("1.2", 0), ("1.10", 0), ("latest", 0)]
    );
}

#[test]
fn a_cycle_is_an_error_naming_the_features_in_it() {
    let nodes = [
        node("r/a", "1", &[], &["r/b"]),
        node("r/b", "1", &[], &["r/a"]),
        node("r/c", "1", &[], &[]),
    ];
    let e = install_order(&nodes, &[]).unwrap_err();
    assert!(e.contains("r/a, r/b") && e.contains("cycle"), "{e}");
}
