//! Which files of a commit a source reads: its path globs (`deploy/**/*.yaml`), or every
//! `.yaml`, `.yml` and `.json` file when it names none.
//!
//! `*` stays within a directory and `**` crosses them, as in Flux's and Argo CD's path
//! options; paths are relative to the repository's root, with `/` separators.

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// What every source reads when it names no paths.
pub const DEFAULT_PATHS: &[&str] = &["**/*.yaml", "**/*.yml", "**/*.json"];

/// A compiled set of path globs.
#[derive(Debug, Clone)]
pub struct PathSelector {
    set: GlobSet,
}

/// Checks one glob; the message says what is wrong with it.
pub fn check_glob(glob: &str) -> Result<(), String> {
    if glob.is_empty() {
        return Err("must not be empty".into());
    }
    if glob.len() > 1024 || glob.chars().any(char::is_control) {
        return Err(format!("{glob:?} is not a path glob"));
    }
    if glob.starts_with('/') {
        return Err(format!(
            "{glob:?} must be relative to the repository's root (no leading '/')"
        ));
    }
    if glob.split('/').any(|c| c == "..") {
        return Err(format!("{glob:?} must not leave the repository ('..')"));
    }
    compile(glob).map(|_| ())
}

fn compile(glob: &str) -> Result<globset::Glob, String> {
    GlobBuilder::new(glob)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .map_err(|e| format!("{glob:?} is not a valid glob: {}", e.kind()))
}

impl PathSelector {
    /// From a source's globs (empty: [`DEFAULT_PATHS`]).
    pub fn new(globs: &[String]) -> Result<PathSelector, String> {
        let mut b = GlobSetBuilder::new();
        if globs.is_empty() {
            for g in DEFAULT_PATHS {
                b.add(compile(g)?);
            }
        } else {
            for g in globs {
                check_glob(g)?;
                b.add(compile(g)?);
            }
        }
        let set = b.build().map_err(|e| e.to_string())?;
        Ok(PathSelector { set })
    }

    /// Whether the file at `path` (relative, `/`-separated) is read.
    pub fn selects(&self, path: &str) -> bool {
        self.set.is_match(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_select_within_and_across_directories() {
        let s = PathSelector::new(&["deploy/**/*.yaml".into(), "base/*.json".into()]).unwrap();
        assert!(s.selects("deploy/app.yaml"));
        assert!(s.selects("deploy/a/b/app.yaml"));
        assert!(s.selects("base/cm.json"));
        assert!(!s.selects("base/x/cm.json"));
        assert!(!s.selects("other/app.yaml"));
        let all = PathSelector::new(&[]).unwrap();
        assert!(all.selects("a.yml") && all.selects("x/y/z.json") && !all.selects("README.md"));
    }

    #[test]
    fn bad_globs_are_named() {
        for (g, why) in [
            ("/etc/*.yaml", "relative"),
            ("../x/*.yaml", "leave the repository"),
            ("deploy/[a.yaml", "not a valid glob"),
            ("", "empty"),
        ] {
            let e = check_glob(g).unwrap_err();
            assert!(e.contains(why), "{g}: {e}");
        }
    }
}
