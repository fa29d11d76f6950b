//! Kubernetes objects from the files of a commit: multi-document YAML and JSON, `List` kinds
//! expanded, each document checked to be an object (apiVersion, kind, metadata.name), with
//! caps on sizes and counts. A bad file or document becomes a [`SyncError`] naming it; the
//! other files still yield their objects, so one typo does not stop a whole source.

use serde_json::Value;
use std::collections::BTreeMap;
use warren_types::bounded::{check_yaml, Limits as TextLimits};
use warren_types::gitops::SyncError;

/// What one commit of one source may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of one file.
    pub max_file_bytes: usize,
    /// Bytes of all selected files together.
    pub max_total_bytes: usize,
    /// Objects in all files together.
    pub max_objects: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_file_bytes: 4 * 1024 * 1024,
            max_total_bytes: 32 * 1024 * 1024,
            max_objects: 10_000,
        }
    }
}

/// One object and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    pub file: String,
    /// 1-based position of its document in the file.
    pub document: usize,
    pub object: Value,
}

impl Manifest {
    pub fn api_version(&self) -> &str {
        self.object["apiVersion"].as_str().unwrap_or_default()
    }
    pub fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }
    pub fn name(&self) -> &str {
        self.object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }
    pub fn namespace(&self) -> Option<&str> {
        self.object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
    }
    /// `apiVersion kind namespace/name`, or `apiVersion kind name` without a namespace.
    pub fn display(&self) -> String {
        describe(&self.object)
    }
}

/// How errors and status lines name an object.
pub fn describe(object: &Value) -> String {
    let s = |p: &str| object.pointer(p).and_then(Value::as_str).unwrap_or("?");
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) if !ns.is_empty() => format!(
            "{} {} {ns}/{}",
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/name")
        ),
        _ => format!(
            "{} {} {}",
            s("/apiVersion"),
            s("/kind"),
            s("/metadata/name")
        ),
    }
}

/// The objects of `files` (path, contents) and what was wrong with the rest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    pub objects: Vec<Manifest>,
    pub errors: Vec<SyncError>,
}

fn file_error(file: &str, message: impl Into<String>) -> SyncError {
    SyncError {
        file: Some(file.to_owned()),
        object: None,
        message: message.into(),
    }
}

/// Parses every file; documents that are empty or only comments are skipped.
pub fn parse_files(files: &[(String, Vec<u8>)], limits: &Limits) -> Parsed {
    let mut out = Parsed::default();
    let total: usize = files.iter().map(|(_, b)| b.len()).sum();
    if total > limits.max_total_bytes {
        out.errors.push(SyncError {
            file: None,
            object: None,
            message: format!(
                "the selected files hold {total} bytes, more than the {} accepted; narrow the \
                 source's paths",
                limits.max_total_bytes
            ),
        });
        return out;
    }
    // Identity → first place seen, to refuse the same object twice.
    let mut seen: BTreeMap<(String, String, String, String), String> = BTreeMap::new();
    for (file, bytes) in files {
        if bytes.len() > limits.max_file_bytes {
            out.errors.push(file_error(
                file,
                format!(
                    "{} bytes, more than the {} accepted for one file",
                    bytes.len(),
                    limits.max_file_bytes
                ),
            ));
            continue;
        }
        let Ok(text) = std::str::from_utf8(bytes) else {
            out.errors.push(file_error(file, "is not UTF-8 text"));
            continue;
        };
        let documents = match documents(file, text, limits.max_file_bytes) {
            Ok(d) => d,
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        for (index, doc) in documents.into_iter().enumerate() {
            let document = index + 1;
            let items = match expand(doc) {
                Ok(items) => items,
                Err(m) => {
                    out.errors
                        .push(file_error(file, format!("document {document}: {m}")));
                    continue;
                }
            };
            for object in items {
                if let Err(m) = check_object(&object) {
                    out.errors
                        .push(file_error(file, format!("document {document}: {m}")));
                    continue;
                }
                if out.objects.len() >= limits.max_objects {
                    out.errors.push(file_error(
                        file,
                        format!(
                            "more than {} objects in the source; the rest are not read",
                            limits.max_objects
                        ),
                    ));
                    return out;
                }
                let m = Manifest {
                    file: file.clone(),
                    document,
                    object,
                };
                let (group, _) = crate::kinds::split_api_version(m.api_version());
                let key = (
                    group.to_owned(),
                    m.kind().to_owned(),
                    m.namespace().unwrap_or_default().to_owned(),
                    m.name().to_owned(),
                );
                if let Some(first) = seen.get(&key) {
                    out.errors.push(SyncError {
                        file: Some(file.clone()),
                        object: Some(m.display()),
                        message: format!(
                            "document {document}: the same object is also defined in {first}; \
                             neither is applied"
                        ),
                    });
                    continue;
                }
                seen.insert(key, format!("{file} (document {document})"));
                out.objects.push(m);
            }
        }
    }
    // An object defined twice is applied from neither place: which one Git "means" is unclear.
    let twice: Vec<String> = out
        .errors
        .iter()
        .filter(|e| e.message.contains("also defined in"))
        .filter_map(|e| e.object.clone())
        .collect();
    out.objects.retain(|m| !twice.contains(&m.display()));
    out
}

/// The documents of one file, as JSON values (YAML for every extension but `.json`).
fn documents(file: &str, text: &str, max_bytes: usize) -> Result<Vec<Value>, SyncError> {
    if file.ends_with(".json") {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| file_error(file, format!("is not valid JSON: {e}")))?;
        return Ok(vec![v]);
    }
    let limits = TextLimits {
        max_bytes,
        ..TextLimits::default()
    };
    check_yaml(text, &limits).map_err(|e| file_error(file, e.to_string()))?;
    let mut out = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v: serde_yaml::Value = serde::Deserialize::deserialize(de)
            .map_err(|e| file_error(file, format!("document {}: is not valid YAML: {e}", i + 1)))?;
        if v.is_null() {
            continue;
        }
        let json = serde_json::to_value(&v).map_err(|e| {
            file_error(
                file,
                format!("document {}: cannot be read as JSON: {e}", i + 1),
            )
        })?;
        out.push(json);
    }
    Ok(out)
}

/// A `…List` (`kind: List`, or any kind ending in `List` with `items`) becomes its items.
fn expand(doc: Value) -> Result<Vec<Value>, String> {
    let is_list = doc
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && doc.get("items").is_some();
    if !is_list {
        return Ok(vec![doc]);
    }
    match doc.get("items") {
        Some(Value::Array(items)) => Ok(items.clone()),
        Some(Value::Null) => Ok(vec![]),
        _ => Err("a List's items must be a sequence".into()),
    }
}

/// Whether a document is a Kubernetes object, and if not, what it lacks.
fn check_object(v: &Value) -> Result<(), String> {
    let Value::Object(map) = v else {
        return Err("is not a Kubernetes object (not a mapping)".into());
    };
    let text = |k: &str| map.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    if text("apiVersion").is_none() {
        return Err("is not a Kubernetes object: apiVersion is missing".into());
    }
    if text("kind").is_none() {
        return Err("is not a Kubernetes object: kind is missing".into());
    }
    match v.pointer("/metadata/name").and_then(Value::as_str) {
        Some(n) if !n.is_empty() => Ok(()),
        _ if v.pointer("/metadata/generateName").is_some() => Err(format!(
            "{} uses metadata.generateName, which cannot be kept in sync; give it a name",
            describe(v)
        )),
        _ => Err(format!("{} has no metadata.name", describe(v))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
        list.iter()
            .map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn multi_document_yaml_json_and_lists() {
        let p = parse_files(
            &files(&[
                (
                    "a.yaml",
                    "# config\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: one, namespace: ns}\n\
                     ---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
                ),
                (
                    "b.json",
                    r#"{"apiVersion": "v1", "kind": "List", "items": [
                        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}},
                        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}]}"#,
                ),
            ]),
            &Limits::default(),
        );
        assert_eq!(p.errors, vec![]);
        let names: Vec<String> = p.objects.iter().map(Manifest::display).collect();
        assert_eq!(
            names,
            [
                "v1 ConfigMap ns/one",
                "apps/v1 Deployment web",
                "v1 Service web",
                "v1 Secret s"
            ]
        );
        assert_eq!(
            (p.objects[1].file.as_str(), p.objects[1].document),
            ("a.yaml", 2)
        );
    }

    #[test]
    fn bad_documents_are_named_and_the_rest_still_read() {
        let p = parse_files(
            &files(&[
                ("bad.yaml", "apiVersion: v1\nkind: [unclosed\n"),
                ("scalar.yaml", "just a string\n"),
                ("nokind.yaml", "apiVersion: v1\nmetadata: {name: x}\n"),
                ("gen.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {generateName: x-}\n"),
                ("bad.json", "{\"apiVersion\": "),
                ("good.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ok}\n"),
                ("twice.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: dup}\n"),
            ]),
            &Limits::default(),
        );
        let errs: Vec<String> = p
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.file.as_deref().unwrap_or("-"), e.message))
            .collect();
        for want in [
            "bad.yaml: document 1: is not valid YAML",
            "scalar.yaml: document 1: is not a Kubernetes object (not a mapping)",
            "nokind.yaml: document 1: is not a Kubernetes object: kind is missing",
            "gen.yaml: document 1: v1 Pod ? uses metadata.generateName",
            "bad.json: is not valid JSON",
            "twice.yaml: document 2: the same object is also defined in twice.yaml (document 1)",
        ] {
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "missing {want:?} in {errs:#?}"
            );
        }
        let names: Vec<String> = p.objects.iter().map(Manifest::display).collect();
        assert_eq!(
            names,
            ["v1 ConfigMap ok"],
            "a duplicate is applied from neither place"
        );
    }

    #[test]
    fn caps_are_enforced_with_a_message() {
        let limits = Limits {
            max_file_bytes: 100,
            max_total_bytes: 1000,
            max_objects: 2,
        };
        let big = "#".repeat(200);
        let p = parse_files(&files(&[("big.yaml", &big)]), &limits);
        assert!(
            p.errors[0].message.contains("more than the 100 accepted"),
            "{p:?}"
        );
        let many = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n";
        let p = parse_files(
            &files(&[
                ("m1.yaml", many),
                ("m2.yaml", &many.replace("name: ", "name: x")),
            ]),
            &Limits {
                max_file_bytes: 1000,
                ..limits
            },
        );
        assert_eq!(p.objects.len(), 2);
        assert!(p.errors[0].message.contains("more than 2 objects"), "{p:?}");
        let huge = vec![
            ("a.yaml".to_owned(), vec![b'#'; 600]),
            ("b.yaml".to_owned(), vec![b'#'; 600]),
        ];
        let p = parse_files(
            &huge,
            &Limits {
                max_file_bytes: 1000,
                ..limits
            },
        );
        assert!(
            p.errors[0].message.contains("narrow the source's paths"),
            "{p:?}"
        );
        let deep = format!("a: {}{}", "[".repeat(100), "]".repeat(100));
        let p = parse_files(&files(&[("deep.yaml", &deep)]), &Limits::default());
        assert!(p.errors[0].message.contains("nested more than"), "{p:?}");
    }
}
