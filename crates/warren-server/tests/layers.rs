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

/// The sibling modules of the domain layer that a file of module `own` names: `super::x`,
/// `super::{x, y}` (from `app/own.rs` or `app/own/mod.rs`; deeper files reach siblings with
/// one more `super::` per level) and `crate::app::x`, comments aside.
fn sibling_modules(text: &str, depth: usize, own: &str, modules: &[String]) -> Vec<String> {
    let up = "super::".repeat(depth.max(1));
    let mut out = vec![];
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for prefix in [up.as_str(), "crate::app::"] {
            for (i, _) in code.match_indices(prefix) {
                // `super::super::x` holds `super::x` too: count each path once, from its start.
                if prefix == up && code[..i].ends_with("super::") {
                    continue;
                }
                let rest = &code[i + prefix.len()..];
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or_default()
                        .split(',')
                        .map(|n| n.trim().split("::").next().unwrap_or_default())
                        .collect(),
                    None => vec![rest
                        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or_default()],
                };
                for n in names {
                    if n != own && modules.iter().any(|m| m == n) && !out.iter().any(|o| o == n) {
                        out.push(n.to_owned());
                    }
                }
            }
        }
    }
    out
}

/// The domain layer's modules import one another without a cycle (issue 39 broke one of five:
/// rights and re-rendering have their own modules), so each can be read, and later moved to a
/// crate of its own, after what it uses.
#[test]
fn the_domain_modules_import_no_cycle() {
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/app");
    let mut modules: Vec<(String, Vec<(PathBuf, usize)>)> = vec![];
    for entry in std::fs::read_dir(&app).expect("read src/app") {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name")
            .to_owned();
        if path.is_dir() {
            let mut files = vec![];
            rust_files(&path, &mut files);
            let depths = files
                .into_iter()
                .map(|f| {
                    let below = f.strip_prefix(&app).expect("below src/app");
                    let depth = below.components().count();
                    let depth = if f.ends_with("mod.rs") {
                        depth - 1
                    } else {
                        depth
                    };
                    (f, depth)
                })
                .collect();
            modules.push((name, depths));
        } else if name != "mod" && path.extension().is_some_and(|e| e == "rs") {
            modules.push((name, vec![(path, 1)]));
        }
    }
    assert!(modules.len() > 10, "found the domain's modules");
    let names: Vec<String> = modules.iter().map(|(n, _)| n.clone()).collect();
    let graph: std::collections::BTreeMap<String, Vec<String>> = modules
        .iter()
        .map(|(name, files)| {
            let mut deps = vec![];
            for (f, depth) in files {
                let text = std::fs::read_to_string(f).expect("read source");
                for d in sibling_modules(&text, *depth, name, &names) {
                    if !deps.contains(&d) {
                        deps.push(d);
                    }
                }
            }
            (name.clone(), deps)
        })
        .collect();
    // Depth-first; a module met again while still on the path closes a cycle.
    fn visit(
        m: &str,
        graph: &std::collections::BTreeMap<String, Vec<String>>,
        path: &mut Vec<String>,
        done: &mut Vec<String>,
        cycles: &mut Vec<String>,
    ) {
        if let Some(at) = path.iter().position(|p| p == m) {
            cycles.push(format!("{} -> {m}", path[at..].join(" -> ")));
            return;
        }
        if done.iter().any(|d| d == m) {
            return;
        }
        path.push(m.to_owned());
        for d in &graph[m] {
            visit(d, graph, path, done, cycles);
        }
        path.pop();
        done.push(m.to_owned());
    }
    let mut cycles = vec![];
    let mut done = vec![];
    for m in graph.keys() {
        visit(m, &graph, &mut vec![], &mut done, &mut cycles);
    }
    assert!(
        cycles.is_empty(),
        "domain modules importing each other in a cycle:\n{}\n(graph: {graph:?})",
        cycles.join("\n")
    );
}

#[test]
fn the_cycle_check_reads_imports_as_rust_writes_them() {
    let modules: Vec<String> = ["rights", "render", "spaces", "users"]
        .map(String::from)
        .to_vec();
    let text = "use super::rights::{self, Right};\nuse super::{render, AppError};\n\
                // super::users in a comment\nlet x = crate::app::spaces::tree();";
    assert_eq!(
        sibling_modules(text, 1, "mounts", &modules),
        ["rights", "render", "spaces"]
    );
    // Two levels down, `super::` is the own module and `super::super::` a sibling.
    let deep = "use super::super::users::x;\nuse super::render::y;";
    assert_eq!(sibling_modules(deep, 2, "oauth", &modules), ["users"]);
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

/// Every transaction of the store starts with `Db::begin` (`BEGIN IMMEDIATE` on SQLite): a
/// deferred one that reads and then writes fails at once with "database is locked" when
/// another writer committed in between — the busy timeout does not cover a snapshot's
/// upgrade. (Found as an intermittent "database query failed" of `warren secret set` in CI,
/// with proxies writing their presence every 5 s.)
#[test]
fn store_transactions_take_the_write_lock_first() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/store");
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let deferred: Vec<String> = files
        .iter()
        .filter(|f| {
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .contains("pool.begin()")
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(deferred.is_empty(), "deferred transactions in {deferred:?}");
}
