//! The public templates of the dev container project (`testdata/devcontainers/`, MIT, see the
//! README there), each read as a repository holding it would be: accepted and rendered into a
//! workspace's objects, or refused for properties Warren does not honour, by name, never
//! because it misread one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use warren_devcontainer::{convert, Input};

fn corpus() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/devcontainers");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    out.sort();
    out
}

static NO_ENV: BTreeMap<String, String> = BTreeMap::new();
static NO_SECRETS: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();

/// Template `name` as a repository holding it (and `files`) gives it to a conversion.
fn template<'a>(name: &'a str, text: &'a str, files: &'a BTreeMap<String, String>) -> Input<'a> {
    Input {
        text,
        path: ".devcontainer/devcontainer.json",
        project: name,
        local_env: &NO_ENV,
        secrets: &NO_SECRETS,
        files,
    }
}

/// The other files of template `name`'s repository its configuration names
/// (`testdata/devcontainers/files/<name>/`), read as the server reads them.
fn template_files(name: &str, text: &str) -> BTreeMap<String, String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/devcontainers/files")
        .join(name);
    let mut files = BTreeMap::new();
    loop {
        let before = files.len();
        for n in warren_devcontainer::needed_files(&template(name, text, &files)) {
            if let Ok(t) = std::fs::read_to_string(root.join(&n.path)) {
                files.insert(n.path, t);
            } else {
                assert!(n.optional, "{name}: {} is not in the corpus", n.path);
            }
        }
        if files.len() == before {
            return files;
        }
    }
}

#[test]
fn every_public_template_is_run_or_refused_by_name() {
    let configs = corpus();
    assert!(
        configs.len() >= 40,
        "the corpus is missing: {}",
        configs.len()
    );
    let agent = warren_types::config::AgentConfig::default();
    let mut accepted = Vec::new();
    for (name, text) in &configs {
        let files = template_files(name, text);
        match convert(&template(name, text, &files)) {
            Ok(c) => {
                let devfile = warren_devfile::parse_devfile(&c.devfile).unwrap();
                warren_devfile::render_preview(&devfile, "corpus", &agent).unwrap_or_else(|e| {
                    panic!("{name}: the devfile does not render: {e}\n{}", c.devfile)
                });
                accepted.push(name.as_str());
            }
            Err(p) => {
                for e in &p.0 {
                    assert!(e.is_unsupported(), "{name}: misread, not refused: {e}");
                }
            }
        }
    }
    let want: Vec<&str> = include_str!("testdata/devcontainers/accepted.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(accepted, want, "the templates Warren runs as they are");
}
