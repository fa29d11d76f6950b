//! Guard rails for the codebase's shape (ARCHITECTURE.md, "Invariants"): every Rust file
//! opens with a `//!` line saying what it is, and no product function is over
//! [`MAX_FN_LINES`] lines nor product file over [`MAX_FILE_LINES`] unless the allow-lists
//! below name it with its reason. An allowed unit may not grow past the size recorded for
//! it, and one that shrank below the limit must leave the list: the lists only shrink.

use std::path::{Path, PathBuf};
use syn::spanned::Spanned;
use syn::visit::Visit;

const MAX_FN_LINES: usize = 150;
const MAX_FILE_LINES: usize = 800;

/// Functions over the limit: file, name, the most lines it may have, why it is long.
const LONG_FUNCTIONS: &[(&str, &str, usize, &str)] = &[(
    "crates/warren-admission/src/pod_security.rs",
    "check_pod",
    172,
    "the Pod Security Standard's rules in its table's order, a few lines each, over one pod spec",
), (
    "crates/warren-server/src/app/workspaces/create.rs",
    "create_unaudited",
    180,
    "its stages (inputs, definition and size, the owner's secrets, a warm pool's workspace, a prebuild's seed, the insert) each use most of what the ones before found; split, they would hand a dozen values along",
)];

/// Product files over the limit: file, the most lines it may have, why it is long.
const LONG_FILES: &[(&str, usize, &str)] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The `.rs` files below `dir`, as paths relative to the repository's root.
fn rust_files(dir: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(root()).unwrap_or(&path);
            out.push(relative.display().to_string());
        }
    }
}

/// Every crate's files of one kind (`src`, `tests`, `benches`).
fn files_in(kind: &str) -> Vec<String> {
    let mut files = vec![];
    for krate in std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        rust_files(&krate.path().join(kind), &mut files);
    }
    files.sort();
    files
}

#[test]
fn every_rust_file_says_what_it_is() {
    let mut files = files_in("src");
    files.extend(files_in("tests"));
    files.extend(files_in("benches"));
    assert!(files.len() > 300, "found the sources: {}", files.len());
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| {
            let text = std::fs::read_to_string(root().join(f)).unwrap_or_default();
            !text.starts_with("//!")
        })
        .collect();
    assert!(
        missing.is_empty(),
        "files not opening with a `//!` line: {missing:#?}"
    );
}

/// The functions (free, in impls, default trait methods) of one file, with their lengths.
#[derive(Default)]
struct Lengths(Vec<(String, usize)>);

impl Lengths {
    fn add(&mut self, name: &syn::Ident, span: proc_macro2::Span) {
        let lines = span.end().line - span.start().line + 1;
        self.0.push((name.to_string(), lines));
    }
}

impl<'a> Visit<'a> for Lengths {
    fn visit_item_fn(&mut self, f: &'a syn::ItemFn) {
        self.add(&f.sig.ident, f.span());
        syn::visit::visit_item_fn(self, f);
    }
    fn visit_impl_item_fn(&mut self, f: &'a syn::ImplItemFn) {
        self.add(&f.sig.ident, f.span());
        syn::visit::visit_impl_item_fn(self, f);
    }
    fn visit_trait_item_fn(&mut self, f: &'a syn::TraitItemFn) {
        if f.default.is_some() {
            self.add(&f.sig.ident, f.span());
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

#[test]
fn units_stay_small_or_say_why() {
    let files = files_in("src");
    let mut problems = vec![];
    let mut seen_functions = vec![];
    let mut seen_files = vec![];
    for file in &files {
        let text = std::fs::read_to_string(root().join(file)).expect("read source");
        let lines = text.lines().count();
        let allowed_file = LONG_FILES.iter().find(|(f, _, _)| f == file);
        match allowed_file {
            Some((_, max, _)) if lines > *max => problems.push(format!(
                "{file}: {lines} lines, more than the {max} it is allowed: split it"
            )),
            Some(_) if lines <= MAX_FILE_LINES => problems.push(format!(
                "{file}: {lines} lines, within the limit now: take it off LONG_FILES"
            )),
            None if lines > MAX_FILE_LINES => problems.push(format!(
                "{file}: {lines} lines (limit {MAX_FILE_LINES}): split it, or add \
                 (\"{file}\", {lines}, \"why\") to LONG_FILES"
            )),
            _ => {}
        }
        if allowed_file.is_some() {
            seen_files.push(file.clone());
        }
        let parsed = match syn::parse_file(&text) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("{file}: does not parse: {e}"));
                continue;
            }
        };
        let mut lengths = Lengths::default();
        lengths.visit_file(&parsed);
        for (name, lines) in lengths.0 {
            let allowed = LONG_FUNCTIONS
                .iter()
                .find(|(f, n, _, _)| f == file && *n == name);
            match allowed {
                Some((_, _, max, _)) if lines > *max => problems.push(format!(
                    "{file}: fn {name} has {lines} lines, more than the {max} it is allowed: \
                     split it"
                )),
                Some(_) if lines <= MAX_FN_LINES => problems.push(format!(
                    "{file}: fn {name} has {lines} lines, within the limit now: take it off \
                     LONG_FUNCTIONS"
                )),
                None if lines > MAX_FN_LINES => problems.push(format!(
                    "{file}: fn {name} has {lines} lines (limit {MAX_FN_LINES}): split it, or \
                     add (\"{file}\", \"{name}\", {lines}, \"why\") to LONG_FUNCTIONS"
                )),
                _ => {}
            }
            if allowed.is_some() {
                seen_functions.push((file.clone(), name));
            }
        }
    }
    for (file, name, _, _) in LONG_FUNCTIONS {
        if !seen_functions.iter().any(|(f, n)| f == file && n == name) {
            problems.push(format!(
                "LONG_FUNCTIONS names {file}: fn {name}, which is gone: take it off"
            ));
        }
    }
    for (file, _, _) in LONG_FILES {
        if !seen_files.iter().any(|f| f == file) {
            problems.push(format!(
                "LONG_FILES names {file}, which is gone: take it off"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
