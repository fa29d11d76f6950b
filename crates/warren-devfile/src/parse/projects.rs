//! `projects`, `dependentProjects` and `starterProjects`: where each comes from (one Git
//! remote and revision, or a zip archive) and where it goes under the sources root, checked
//! so the startup script can use them as they are.

use super::raw::RawProject;
use crate::model::{DevfileProject, Notice, ProjectOrigin};
use crate::DevfileError;

/// Longest URL or path accepted in a project.
const MAX_LEN: usize = 2048;

/// Whether `url` is one Git can fetch from inside a workspace: `https://`, `http://`,
/// `ssh://`, `git://`, `file://` (the workspace's own files) or scp-like `user@host:path`.
fn git_url_ok(url: &str) -> bool {
    let schemes = ["https://", "http://", "ssh://", "git://", "file://"];
    let scp_like = url
        .split_once(':')
        .is_some_and(|(host, path)| host.contains('@') && !host.contains('/') && !path.is_empty());
    (schemes
        .iter()
        .any(|s| url.starts_with(s) && url.len() > s.len())
        || scp_like)
        && !url.starts_with('-')
}

/// Whether `text` is fit to pass to a shell script as one quoted word: no control
/// characters, bounded.
fn plain(text: &str) -> bool {
    !text.is_empty() && text.len() <= MAX_LEN && !text.chars().any(char::is_control)
}

/// A relative path under the sources root: no `..`, not absolute, no empty parts.
fn relative_path(p: &str) -> Result<String, &'static str> {
    let p = p.trim_end_matches('/');
    if p.is_empty() || !plain(p) {
        return Err("must be a non-empty path without control characters");
    }
    if p.starts_with('/') {
        return Err("must be relative to the sources root, not absolute");
    }
    if p.split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err("must not contain `..`, `.` or empty parts");
    }
    Ok(p.to_owned())
}

/// Converts the raw projects of one key, with their paths; errors and notices are pushed.
pub(super) fn projects(
    raw: &[(String, RawProject)],
    starter: bool,
    errors: &mut Vec<DevfileError>,
    notices: &mut Vec<Notice>,
) -> Vec<DevfileProject> {
    let mut out: Vec<DevfileProject> = Vec::new();
    for (path, p) in raw {
        if p.attributes.as_ref().is_some_and(|a| !a.is_empty()) {
            notices.push(Notice {
                path: format!("{path}.attributes"),
                message: format!("project {:?}: attributes are not used by Warren", p.name),
            });
        }
        if let (true, Some(_)) = (starter, &p.description) {
            notices.push(Notice {
                path: format!("{path}.description"),
                message: format!(
                    "starter project {:?}: the description is not shown by Warren",
                    p.name
                ),
            });
        }
        let clone_path = match p.clone_path.as_deref() {
            None => p.name.clone(),
            Some(c) => match relative_path(c) {
                Ok(c) => c,
                Err(e) => {
                    errors.push(DevfileError::new(format!("{path}.clonePath"), e));
                    continue;
                }
            },
        };
        let sub_dir = match p.sub_dir.as_deref() {
            None => None,
            Some(d) => match relative_path(d) {
                Ok(d) => Some(d),
                Err(e) => {
                    errors.push(DevfileError::new(format!("{path}.subDir"), e));
                    continue;
                }
            },
        };
        let origin = match (&p.git, &p.zip) {
            (Some(g), _) => {
                let wanted = g.checkout_from.as_ref().and_then(|c| c.remote.as_deref());
                let remote = match (wanted, g.remotes.len()) {
                    (Some(name), _) => match g.remotes.get(name) {
                        Some(url) => url,
                        None => {
                            errors.push(DevfileError::new(
                                format!("{path}.git.checkoutFrom.remote"),
                                format!(
                                    "names remote {name:?}, which is not among the project's remotes ({})",
                                    g.remotes.keys().cloned().collect::<Vec<_>>().join(", ")
                                ),
                            ));
                            continue;
                        }
                    },
                    (None, 1) => match g.remotes.values().next() {
                        Some(url) => url,
                        None => continue,
                    },
                    (None, 0) => {
                        errors.push(DevfileError::new(
                            format!("{path}.git.remotes"),
                            "a Git project needs at least one remote",
                        ));
                        continue;
                    }
                    (None, _) => {
                        errors.push(DevfileError::new(
                            format!("{path}.git.checkoutFrom.remote"),
                            "the project has several remotes: name the one to check out",
                        ));
                        continue;
                    }
                };
                if !git_url_ok(remote) || !plain(remote) {
                    errors.push(DevfileError::new(
                        format!("{path}.git.remotes"),
                        format!("{remote:?} is not a Git URL Warren clones from (https://, http://, ssh://, git://, file:// or user@host:path)"),
                    ));
                    continue;
                }
                let revision = g.checkout_from.as_ref().and_then(|c| c.revision.clone());
                if let Some(r) = &revision {
                    if !plain(r) || r.starts_with('-') {
                        errors.push(DevfileError::new(
                            format!("{path}.git.checkoutFrom.revision"),
                            "must be a branch, tag or commit (no control characters, not starting with `-`)",
                        ));
                        continue;
                    }
                }
                if g.remotes.len() > 1 {
                    notices.push(Notice {
                        path: format!("{path}.git.remotes"),
                        message: format!(
                            "project {:?}: only the remote checked out is set up in the clone",
                            p.name
                        ),
                    });
                }
                ProjectOrigin::Git {
                    url: remote.clone(),
                    revision,
                }
            }
            (None, Some(z)) => match z.location.as_deref() {
                Some(l) if (l.starts_with("https://") || l.starts_with("http://")) && plain(l) => {
                    ProjectOrigin::Zip {
                        location: l.to_owned(),
                    }
                }
                _ => {
                    errors.push(DevfileError::new(
                        format!("{path}.zip.location"),
                        "a zip project needs an http:// or https:// location",
                    ));
                    continue;
                }
            },
            // Reported by the structure check.
            (None, None) => continue,
        };
        if let Some(other) = out.iter().find(|o| o.clone_path == clone_path) {
            errors.push(DevfileError::new(
                path.clone(),
                format!(
                    "project {:?} would go to the same directory as {:?} ({clone_path})",
                    p.name, other.name
                ),
            ));
            continue;
        }
        out.push(DevfileProject {
            name: p.name.clone(),
            clone_path,
            origin,
            sub_dir,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        for ok in [
            "https://github.com/a/b.git",
            "git@github.com:a/b.git",
            "ssh://git@host/a",
            "file:///srv/repo",
        ] {
            assert!(git_url_ok(ok), "{ok}");
        }
        for bad in ["", "https://", "/srv/repo", "-uhttps://x", "C:/x", "repo"] {
            assert!(!git_url_ok(bad), "{bad}");
        }
        assert_eq!(relative_path("a/b/").as_deref(), Ok("a/b"));
        for bad in ["/abs", "../up", "a/../b", "a//b", "", "a\nb"] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
    }
}
