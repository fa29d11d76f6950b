//! Fuzzing with proptest: mutated registry devfiles (deleted, duplicated and retyped keys,
//! random bytes, truncation) never panic or hang; every input yields objects or errors.
//! `PROPTEST_CASES` raises the case count for longer runs.

use crate::common;

use common::*;
use proptest::prelude::*;
use serde_json::Value;
use std::sync::OnceLock;
use warren_devfile::{objects_to_yaml, parse_devfile, render};
use warren_types::config::AgentConfig;

fn corpus() -> &'static Vec<String> {
    static CORPUS: OnceLock<Vec<String>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut v: Vec<String> = registry().into_iter().map(|(_, t)| t).collect();
        // Stripped variants reach the renderer, not only the validator.
        let stripped: Vec<String> = v.iter().map(|t| strip_unsupported(t)).collect();
        v.extend(stripped);
        v
    })
}

/// Parses and, when valid, renders; panics only on a bug.
fn exercise(text: &str) {
    match parse_devfile(text) {
        Ok(d) => {
            let cfg = AgentConfig::default();
            if let Ok(r) = render(&d, &request(&cfg, &[])) {
                assert!(!objects_to_yaml(&r.objects).is_empty());
            }
        }
        Err(e) => {
            assert!(!e.0.is_empty(), "an error list is never empty");
            assert!(!e.to_string().is_empty());
        }
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(usize),
    Duplicate(usize),
    Retype(usize, u8),
    Rename(usize, String),
}

fn count_nodes(v: &Value) -> usize {
    1 + match v {
        Value::Object(m) => m.values().map(count_nodes).sum(),
        Value::Array(a) => a.iter().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Applies a mutation to the n-th node (pre-order) of the document.
fn apply(doc: &mut Value, m: &Mutation) {
    // Walk without raw pointers: find the parent container and the position of the target.
    fn walk(v: &mut Value, target: &mut usize, m: &Mutation) -> bool {
        let children: usize = match v {
            Value::Object(o) => o.len(),
            Value::Array(a) => a.len(),
            _ => 0,
        };
        for i in 0..children {
            if *target == 0 {
                mutate_child(v, i, m);
                return true;
            }
            *target -= 1;
            let child = match v {
                Value::Object(o) => o.values_mut().nth(i),
                Value::Array(a) => a.get_mut(i),
                _ => None,
            };
            if let Some(c) = child {
                if walk(c, target, m) {
                    return true;
                }
            }
        }
        false
    }
    let mut n = match m {
        Mutation::Delete(n)
        | Mutation::Duplicate(n)
        | Mutation::Retype(n, _)
        | Mutation::Rename(n, _) => *n,
    };
    let total = count_nodes(doc).max(1);
    n %= total;
    walk(doc, &mut n, m);
}

fn mutate_child(parent: &mut Value, i: usize, m: &Mutation) {
    match (parent, m) {
        (Value::Object(o), Mutation::Delete(_)) => {
            if let Some(k) = o.keys().nth(i).cloned() {
                o.remove(&k);
            }
        }
        (Value::Array(a), Mutation::Delete(_)) => {
            a.remove(i);
        }
        (Value::Object(o), Mutation::Duplicate(_)) => {
            if let Some((k, v)) = o.iter().nth(i).map(|(k, v)| (k.clone(), v.clone())) {
                o.insert(format!("{k}2"), v);
            }
        }
        (Value::Array(a), Mutation::Duplicate(_)) => {
            let v = a[i].clone();
            a.insert(i, v);
        }
        (parent, Mutation::Retype(_, t)) => {
            let new = match t % 6 {
                0 => Value::Null,
                1 => Value::from(-1),
                2 => Value::from("{{x}}"),
                3 => serde_json::json!([]),
                4 => serde_json::json!({"warren.dev/main": true}),
                _ => Value::from(u64::MAX),
            };
            match parent {
                Value::Object(o) => {
                    if let Some(v) = o.values_mut().nth(i) {
                        *v = new;
                    }
                }
                Value::Array(a) => a[i] = new,
                _ => {}
            }
        }
        (Value::Object(o), Mutation::Rename(_, name)) => {
            if let Some(k) = o.keys().nth(i).cloned() {
                if let Some(v) = o.remove(&k) {
                    o.insert(name.clone(), v);
                }
            }
        }
        (Value::Array(a), Mutation::Rename(_, name)) => a[i] = Value::from(name.clone()),
        _ => {}
    }
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Duplicate),
        (any::<usize>(), any::<u8>()).prop_map(|(n, t)| Mutation::Retype(n, t)),
        (
            any::<usize>(),
            "[a-zA-Z-]{0,12}|warren-[a-z]{1,5}|name|container|image|endpoints"
        )
            .prop_map(|(n, s)| Mutation::Rename(n, s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(96)
    ))]

    #[test]
    fn structural_mutations_never_panic(file in any::<usize>(), ms in proptest::collection::vec(mutation(), 1..6)) {
        let corpus = corpus();
        let text = &corpus[file % corpus.len()];
        let mut doc: Value = serde_yaml::from_str(text).expect("registry yaml");
        for m in &ms {
            apply(&mut doc, m);
        }
        exercise(&serde_json::to_string(&doc).expect("json"));
        exercise(&serde_yaml::to_string(&doc).expect("yaml"));
    }

    #[test]
    fn byte_mutations_never_panic(
        file in any::<usize>(),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let corpus = corpus();
        let mut bytes = corpus[file % corpus.len()].clone().into_bytes();
        for (pos, b) in edits {
            let p = pos % (bytes.len() + 1);
            bytes.insert(p, b);
        }
        bytes.truncate(bytes.len() - cut % (bytes.len() / 4 + 1));
        exercise(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn arbitrary_text_never_panics(s in "\\PC{0,200}") {
        exercise(&s);
    }
}

#[test]
fn yaml_bombs_and_deep_nesting_are_errors() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]\ng: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]\nh: [*g, *g, *g, *g, *g, *g, *g, *g, *g]\nschemaVersion: 2.2.0\n";
    assert!(parse_devfile(bomb).is_err());
    let deep = format!(
        "schemaVersion: 2.2.0\nattributes: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    assert!(parse_devfile(&deep).is_err());
}
