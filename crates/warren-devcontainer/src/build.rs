//! `build` (and its older spellings `dockerFile` and `context`): the dev container's image
//! built from a Dockerfile of the repository before the workspace starts. It becomes a
//! devfile `image` component with `autoBuild`, which the agent builds from the project at
//! the workspace's ref (the server archives the context), in the workspace's own image
//! namespace, and the container runs it.
//!
//! Paths in the configuration start from its folder; the devfile's start from the
//! repository's root, so they are joined here, and one that leaves the repository is a
//! problem. `build.options` (any `docker build` flag, `--network=host` among them) is
//! refused; `cacheFrom` is accepted with a notice, since the agent's engine builds with its
//! own layer cache and pulls nothing for it.

use crate::{problem, unsupported, Notice, Problem};
use serde_json::Value;

/// The name the built image is asked for. The agent tags every build with a name of the
/// workspace's own, so one fixed name cannot collide between workspaces, and `localhost/`
/// keeps an engine from ever pulling something under it.
pub const IMAGE: &str = "localhost/warren/devcontainer:latest";

/// A Dockerfile build, its paths from the repository's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Build {
    pub dockerfile: String,
    pub context: String,
    /// `NAME=value`, in name order.
    pub args: Vec<String>,
    pub target: Option<String>,
}

/// What the configuration's `build`, `dockerFile` and `context` say, read from `top`.
pub(crate) struct Reading<'a> {
    /// The configuration's folder, relative to the repository's root (`` for the root).
    pub folder: &'a str,
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'a mut Vec<Notice>,
}

impl Reading<'_> {
    /// The build the configuration asks for, if any.
    pub fn read(&mut self, top: &serde_json::Map<String, Value>) -> Option<Build> {
        let (dockerfile, context, path) = match top.get("build") {
            Some(Value::Object(b)) => {
                for (key, v) in b {
                    self.property(key, v);
                }
                if top.contains_key("dockerFile") || top.contains_key("context") {
                    self.problems.push(problem(
                        "build",
                        "give the Dockerfile either in `build` or in the older `dockerFile` and `context`, not both",
                    ));
                }
                (b.get("dockerfile"), b.get("context"), "build.dockerfile")
            }
            Some(v) => {
                self.problems.push(problem(
                    "build",
                    format!("must be an object, not {}", crate::properties::type_name(v)),
                ));
                return None;
            }
            None => (top.get("dockerFile"), top.get("context"), "dockerFile"),
        };
        let dockerfile = match dockerfile {
            Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
            None if top.get("build").is_none() && top.get("context").is_none() => return None,
            _ => {
                self.problems.push(problem(
                    path,
                    "must name the Dockerfile, relative to the configuration's folder",
                ));
                return None;
            }
        };
        let context_path = if path == "dockerFile" {
            "context"
        } else {
            "build.context"
        };
        let context = match context {
            None => ".".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(v) => {
                self.problems.push(problem(
                    context_path,
                    format!("must be a string, not {}", crate::properties::type_name(v)),
                ));
                return None;
            }
        };
        let dockerfile = self.in_repository(path, &dockerfile)?;
        let context = self.in_repository(context_path, &context)?;
        let inside = context == "." || dockerfile.starts_with(&format!("{context}/"));
        if !inside {
            self.problems.push(unsupported(
                path,
                "a Dockerfile outside its build context",
                &format!("the engine is sent the context alone ({context}); move the Dockerfile into it or widen `context`"),
            ));
            return None;
        }
        let b = top.get("build").and_then(Value::as_object);
        Some(Build {
            dockerfile,
            context,
            args: b.map(|b| self.args(b)).unwrap_or_default(),
            target: b
                .and_then(|b| b.get("target"))
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    fn property(&mut self, key: &str, v: &Value) {
        let path = format!("build.{key}");
        match key {
            "dockerfile" | "context" | "args" => {}
            "target" => {
                if !v.is_string() {
                    self.problems.push(problem(path, "must be a string"));
                }
            }
            "cacheFrom" => self.notices.push(Notice {
                path,
                message: "no image is pulled for its cache: the agent's engine builds with its own layer cache, so a rebuild of unchanged steps is quick anyway".into(),
            }),
            "options" => {
                if v.as_array().is_some_and(|a| !a.is_empty()) {
                    self.problems.push(unsupported(
                        &path,
                        "passing options to the image build",
                        "they are `docker build` flags (`--network=host`, `--secret`, `--add-host` among them) that would reach past the workspace's isolation; Warren builds with its own fixed settings",
                    ));
                }
            }
            _ => self.problems.push(unsupported(
                &path,
                &format!("`build.{key}`"),
                "it is not part of the dev container specification's `build`",
            )),
        }
    }

    /// `build.args` as `NAME=value`, in name order.
    fn args(&mut self, b: &serde_json::Map<String, Value>) -> Vec<String> {
        match b.get("args") {
            None => vec![],
            Some(Value::Object(m)) => {
                let mut out = vec![];
                for (k, v) in m {
                    match v {
                        Value::String(s) => out.push(format!("{k}={s}")),
                        _ => self
                            .problems
                            .push(problem(format!("build.args.{k}"), "must be a string")),
                    }
                }
                out.sort();
                out
            }
            Some(_) => {
                self.problems
                    .push(problem("build.args", "must be an object of strings"));
                vec![]
            }
        }
    }

    /// `rel` (from the configuration's folder) from the repository's root; `.` for the root.
    fn in_repository(&mut self, path: &str, rel: &str) -> Option<String> {
        match join(self.folder, rel) {
            Ok(p) => Some(p),
            Err(why) => {
                self.problems.push(problem(path, format!("{rel:?} {why}")));
                None
            }
        }
    }
}

/// `rel` joined to `folder`, `.` and `..` resolved; an error when it is absolute or leaves
/// the repository.
pub fn join(folder: &str, rel: &str) -> Result<String, &'static str> {
    if rel.starts_with('/') || rel.contains('\0') || rel.contains('\\') {
        return Err("must be a relative path inside the repository");
    }
    let mut parts: Vec<&str> = folder
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    for part in rel.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err("leaves the repository");
                }
            }
            p => parts.push(p),
        }
    }
    Ok(if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    })
}

#[cfg(test)]
mod tests {
    use super::join;

    #[test]
    fn paths_join_from_the_configuration_folder() {
        assert_eq!(
            join(".devcontainer", "Dockerfile").unwrap(),
            ".devcontainer/Dockerfile"
        );
        assert_eq!(join(".devcontainer", "..").unwrap(), ".");
        assert_eq!(
            join(".devcontainer", "../docker/./Dockerfile").unwrap(),
            "docker/Dockerfile"
        );
        assert_eq!(join("", "Dockerfile").unwrap(), "Dockerfile");
        assert_eq!(join(".", "a/Dockerfile").unwrap(), "a/Dockerfile");
        assert!(join(".devcontainer", "../..").is_err());
        assert!(join(".devcontainer", "/etc/passwd").is_err());
    }
}
