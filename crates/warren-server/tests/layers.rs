//! The layering invariant (ARCHITECTURE.md): no type of `axum`, `http` or the HTTP error
//! reaches the store or the domain layer; HTTP lives in the adapters under `src/http`; and the
//! layers depend one way (store ← app ← adapters).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether a line of code (not a comment) names HTTP: `axum`, the `http` crate (a path
/// starting with `http::`, not `crate::http::`), or the adapters' error and status types.
fn names_http(line: &str) -> bool {
    let code = line.trim_start();
    if code.starts_with("//") {
        return false;
    }
    let http_path = code.match_indices("http::").any(|(i, _)| {
        code[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
    });
    http_path
        || code.contains("axum")
        || code.contains("HttpError")
        || code.contains("StatusCode")
        || code.contains("HeaderMap")
}

#[test]
fn store_and_domain_know_nothing_of_http() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    for layer in ["store", "app"] {
        rust_files(&src.join(layer), &mut files);
    }
    assert!(files.len() > 10, "found the layers' sources: {files:?}");
    let mut offending = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if names_http(line) {
                offending.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        offending.is_empty(),
        "HTTP below the adapters:\n{}",
        offending.join("\n")
    );
}

/// Whether a line of code (not a comment) names a path into `module` (`crate::app::…`,
/// `use crate::http::{…}`).
fn names_module(line: &str, module: &str) -> bool {
    let code = line.trim_start();
    !code.starts_with("//") && code.contains(&format!("{module}::"))
}

/// Dependencies point one way, store ← app ← adapters: the store never reaches the domain
/// layer or the adapters, and the domain layer never reaches the adapters (what it needs of
/// them, it is handed).
#[test]
fn the_layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offending = vec![];
    for (layer, forbidden) in [
        ("store", &["crate::app", "crate::http"][..]),
        ("app", &["crate::http"][..]),
    ] {
        let mut files = vec![];
        rust_files(&src.join(layer), &mut files);
        assert!(
            files.len() > 5,
            "found the {layer} layer's sources: {files:?}"
        );
        for f in &files {
            let text = std::fs::read_to_string(f).expect("read source");
            for (n, line) in text.lines().enumerate() {
                if forbidden.iter().any(|m| names_module(line, m)) {
                    offending.push(format!("{}:{}: {}", f.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offending.is_empty(),
        "a layer reaching up:\n{}",
        offending.join("\n")
    );
}

#[test]
fn the_check_sees_what_it_looks_for() {
    assert!(names_module("use crate::app::users;", "crate::app"));
    assert!(names_module("    crate::http::error::x()", "crate::http"));
    assert!(!names_module(
        "//! adapters (`crate::http`) over it",
        "crate::http"
    ));
    assert!(!names_module("use crate::store::x;", "crate::app"));
    assert!(names_http("use axum::Json;"));
    assert!(names_http("fn f() -> http::StatusCode {"));
    assert!(names_http("    let h: HeaderMap = x;"));
    assert!(!names_http("use crate::http::error::HttpErr0r;"));
    assert!(!names_http("// axum in a comment"));
    assert!(!names_http("let u = \"see crate::http::oauth\";"));
}

/// `docs/security.md` names, for every boundary Warren promises, the tests that attack it.
/// Each one named must exist, so the page never promises a test that was renamed or removed.
#[test]
fn every_test_the_threat_model_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/security.md")).expect("docs/security.md");
    let mut checked = 0;
    let mut missing = Vec::new();
    for line in doc.lines() {
        // `path.rs::name`, then `::other` for more tests of the same file on the line.
        let mut file: Option<String> = None;
        for token in line.split('`').skip(1).step_by(2) {
            let name = if let Some(name) = token.strip_prefix("::") {
                name
            } else if let Some((path, name)) = token.split_once(".rs::") {
                file = Some(format!("{path}.rs"));
                name
            } else {
                continue;
            };
            let Some(path) = &file else { continue };
            let text = std::fs::read_to_string(root.join(path)).unwrap_or_default();
            if !text.contains(&format!("fn {name}(")) {
                missing.push(format!("{path}::{name}"));
            }
            checked += 1;
        }
    }
    assert!(
        checked > 40,
        "only {checked} tests found in docs/security.md"
    );
    assert!(
        missing.is_empty(),
        "docs/security.md names tests that do not exist: {missing:#?}"
    );
}
