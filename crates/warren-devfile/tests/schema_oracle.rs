//! The official devfile JSON schemas are the oracle for Warren's structural checks: on the
//! registry devfiles and on systematically broken variants of them (wrong types, missing
//! fields, unknown fields, bad enum values, bad names) Warren and the schema agree.

use crate::common;

use common::*;
use serde_json::Value;
use warren_devfile::{check_structure, parse_devfile};

struct Oracle {
    v222: jsonschema::Validator,
    v230: jsonschema::Validator,
}

impl Oracle {
    fn new() -> Self {
        let load = |v: &str| {
            let path = format!("{DATA_DIR}/schema/devfile-{v}.schema.json");
            let text = std::fs::read_to_string(&path).expect("schema");
            let schema: Value = serde_json::from_str(&text).expect("schema json");
            jsonschema::validator_for(&schema).expect("valid schema")
        };
        Oracle {
            v222: load("2.2.2"),
            v230: load("2.3.0"),
        }
    }

    /// 2.3.0 for 2.3.x documents, 2.2.2 for the older ones.
    fn accepts(&self, doc: &Value) -> bool {
        let v = doc
            .get("schemaVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        if v.starts_with("2.3.") {
            self.v230.is_valid(doc)
        } else {
            self.v222.is_valid(doc)
        }
    }
}

/// Compares the oracle and Warren on one document; returns a description on disagreement.
fn compare(oracle: &Oracle, what: &str, doc: &Value) -> Option<String> {
    let text = serde_json::to_string(doc).expect("json");
    let schema_ok = oracle.accepts(doc);
    let warren = check_structure(&text);
    if schema_ok != warren.is_ok() {
        return Some(format!(
            "{what}: schema {} but Warren {}",
            if schema_ok { "accepts" } else { "rejects" },
            match &warren {
                Ok(()) => "accepts".to_string(),
                Err(e) => format!("rejects: {e}"),
            }
        ));
    }
    if !schema_ok && parse_devfile(&text).is_ok() {
        return Some(format!("{what}: schema rejects but parse_devfile accepts"));
    }
    None
}

/// Every (path, value) position in a document.
fn positions(v: &Value, path: Vec<PathSeg>, out: &mut Vec<Vec<PathSeg>>) {
    out.push(path.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let mut p = path.clone();
                p.push(PathSeg::Key(k.clone()));
                positions(c, p, out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let mut p = path.clone();
                p.push(PathSeg::Index(i));
                positions(c, p, out);
            }
        }
        _ => {}
    }
}

#[derive(Clone, Debug)]
enum PathSeg {
    Key(String),
    Index(usize),
}

fn get_mut<'a>(v: &'a mut Value, path: &[PathSeg]) -> Option<&'a mut Value> {
    let mut cur = v;
    for seg in path {
        cur = match seg {
            PathSeg::Key(k) => cur.get_mut(k.as_str())?,
            PathSeg::Index(i) => cur.get_mut(*i)?,
        };
    }
    Some(cur)
}

fn describe(path: &[PathSeg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            PathSeg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            PathSeg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

/// Whether a path lies in free-form data (attributes, unknown metadata) where anything goes.
fn free_form(path: &[PathSeg]) -> bool {
    path.iter()
        .any(|s| matches!(s, PathSeg::Key(k) if k == "attributes"))
}

/// Broken variants of `doc`, for field shapes not in `seen` yet (the same mutation of the same
/// field shape in another file adds little; `WARREN_ORACLE_EXHAUSTIVE=1` mutates every
/// position of every file, about 37,000 variants).
fn mutations(doc: &Value, seen: &mut std::collections::HashSet<String>) -> Vec<(String, Value)> {
    let mut paths = Vec::new();
    positions(doc, vec![], &mut paths);
    let mut out = Vec::new();
    for path in paths.iter().filter(|p| !p.is_empty() && !free_form(p)) {
        let here = describe(path);
        if !seen.insert(shape(&here)) && std::env::var_os("WARREN_ORACLE_EXHAUSTIVE").is_none() {
            continue;
        }
        let Some(original) = get_mut(&mut doc.clone(), path).cloned() else {
            continue;
        };
        // Wrong types.
        let wrong: Vec<Value> = match &original {
            Value::String(_) => vec![Value::from(42), Value::Bool(true), Value::Null],
            Value::Number(_) => vec![Value::from("8080"), Value::from(1.5)],
            Value::Bool(_) => vec![Value::from("true")],
            Value::Array(_) => vec![Value::from("x"), serde_json::json!({})],
            Value::Object(_) => vec![Value::from("x"), serde_json::json!([])],
            Value::Null => vec![],
        };
        for w in wrong {
            let mut d = doc.clone();
            if let Some(slot) = get_mut(&mut d, path) {
                *slot = w.clone();
            }
            out.push((format!("{here} = {w}"), d));
        }
        // Missing fields and unknown fields.
        if let Some(PathSeg::Key(k)) = path.last() {
            let mut d = doc.clone();
            if let Some(Value::Object(parent)) = get_mut(&mut d, &path[..path.len() - 1]) {
                parent.remove(k);
            }
            out.push((format!("without {here}"), d));
            // Bad enum values and bad names.
            let bad: &[&str] = match k.as_str() {
                "exposure" | "protocol" | "kind" => &["bogus", "HTTP"],
                "name" | "id" => &["Bad_Name", "-lead", "x".repeat(64).leak(), ""],
                "schemaVersion" => &["1.0.0", "2.2", "two"],
                _ => &[],
            };
            for b in bad {
                let mut d = doc.clone();
                if let Some(slot) = get_mut(&mut d, path) {
                    *slot = Value::from(*b);
                }
                out.push((format!("{here} = {b:?}"), d));
            }
        }
        if let Value::Object(_) = original {
            let mut d = doc.clone();
            if let Some(Value::Object(m)) = get_mut(&mut d, path) {
                m.insert("bogusField".into(), Value::from(1));
            }
            out.push((format!("{here} + bogusField"), d));
        }
        // An endpoint name of 16 characters (the schema allows 15).
        if matches!(path.iter().rev().nth(2), Some(PathSeg::Key(k)) if k == "endpoints") {
            let mut d = doc.clone();
            if let Some(Value::Object(m)) = get_mut(&mut d, &path[..path.len() - 1]) {
                m.insert("name".into(), Value::from("a234567890123456"));
            }
            out.push((format!("{here}: endpoint name of 16 chars"), d));
        }
    }
    out
}

/// A mutation's description with sequence indices erased (`components[3].name` → `components[].name`).
fn shape(what: &str) -> String {
    let mut out = String::with_capacity(what.len());
    let mut in_index = false;
    for ch in what.chars() {
        match ch {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' if in_index => {
                in_index = false;
                out.push(']');
            }
            c if in_index && c.is_ascii_digit() => {}
            c => out.push(c),
        }
    }
    out
}

#[test]
fn registry_devfiles_agree_with_the_schema() {
    let oracle = Oracle::new();
    let mut problems = Vec::new();
    for (name, text) in registry() {
        let doc: Value = serde_yaml::from_str(&text).expect("yaml");
        assert!(
            oracle.accepts(&doc),
            "{name}: the schema should accept a registry devfile"
        );
        problems.extend(compare(&oracle, &name, &doc));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn broken_variants_agree_with_the_schema() {
    let oracle = Oracle::new();
    let mut problems = Vec::new();
    let mut count = 0;
    let mut rejected = 0;
    // Every distinct (field shape, mutation) of the whole registry, once.
    let mut seen = std::collections::HashSet::new();
    for (name, text) in registry() {
        let doc: Value = serde_yaml::from_str(&text).expect("yaml");
        for (what, variant) in mutations(&doc, &mut seen) {
            count += 1;
            if !oracle.accepts(&variant) {
                rejected += 1;
            }
            problems.extend(compare(&oracle, &format!("{name}: {what}"), &variant));
        }
    }
    eprintln!("{count} variants, {rejected} rejected by the schema");
    assert!(
        count > 400 && rejected > count / 3,
        "{count} variants, {rejected} rejected"
    );
    problems.truncate(40);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn edge_documents_agree_with_the_schema() {
    let oracle = Oracle::new();
    let base =
        r#"{"schemaVersion":"2.2.0","components":[{"name":"dev","container":{"image":"x"%s}}]%t}"#;
    let cases = [
        (",\"endpoints\":[{\"name\":\"a\",\"targetPort\":18446744073709551615}]", ""),
        (",\"endpoints\":[{\"name\":\"a\",\"targetPort\":8080.0}]", ""),
        (",\"endpoints\":[{\"name\":\"a\",\"targetPort\":-1}]", ""),
        (",\"endpoints\":[{\"name\":\"a\",\"targetPort\":80,\"exposure\":null}]", ""),
        (",\"env\":[]", ",\"metadata\":{\"custom\":null,\"name\":\"n\"}"),
        ("", ",\"metadata\":{\"version\":\"1.0\"}"),
        ("", ",\"metadata\":{\"architectures\":[\"amd64\",\"amd64\"]}"),
        ("", ",\"variables\":{\"a\":1}"),
        ("", ",\"events\":{\"preStart\":[1]}"),
        ("", ",\"attributes\":{\"anything\":null}"),
        ("", ",\"commands\":[{\"id\":\"a\",\"exec\":{\"component\":\"dev\",\"commandLine\":\"x\"},\"apply\":{\"component\":\"dev\"}}]"),
        ("", ",\"commands\":[{\"id\":\"a\"}]"),
        ("", ",\"starterProjects\":[{\"name\":\"s\",\"git\":{\"remotes\":{}},\"zip\":{}}]"),
        ("", ",\"starterProjects\":[{\"name\":\"s\",\"clonePath\":\"x\",\"git\":{\"remotes\":{}}}]"),
        ("", ",\"projects\":[{\"name\":\"s\",\"subDir\":\"x\",\"git\":{\"remotes\":{}}}]"),
        (",\"volumeMounts\":[{\"name\":\"UPPER\"}]", ""),
        (",\"annotation\":{\"pod\":{}}", ""),
    ];
    let mut problems = Vec::new();
    for (container_extra, top_extra) in cases {
        let text = base.replace("%s", container_extra).replace("%t", top_extra);
        let doc: Value = serde_json::from_str(&text).expect("json");
        problems.extend(compare(&oracle, &text, &doc));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
