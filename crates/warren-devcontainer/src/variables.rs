//! The specification's variables, substituted in every string of a configuration:
//!
//! - `${localEnv:NAME}` and `${localEnv:NAME:default}`: the user's own environment in the
//!   reference tools; on Warren the values given when the workspace is created
//!   ([`crate::Input::local_env`]), since the workspace does not run on the user's machine. An
//!   unset one without a default is empty, as the tools make it.
//! - `${containerEnv:NAME}` (and with a default): the container's environment. Warren knows the
//!   variables the configuration sets (`containerEnv`); one only the image sets is refused by
//!   name, since it is not known before the workspace runs.
//! - `${localWorkspaceFolder}`, `${containerWorkspaceFolder}` and their `…Basename`: the
//!   sources' folder. On Warren both are the folder in the workspace (`/workspaces/<project>`,
//!   or `workspaceFolder`): the user's machine holds no checkout of it.
//! - `${devcontainerId}`: stable for one configuration of one repository.
//!
//! Anything else of the form `${…}` is left as written: shell variables in commands
//! (`${HOME}`) are the shell's.

use crate::{problem, unsupported, Input, Problem, Problems};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// What the variables stand for in one conversion.
struct Scope<'a> {
    input: &'a Input<'a>,
    /// `containerWorkspaceFolder`.
    folder: String,
    /// The configuration's `containerEnv`, once substituted itself.
    container_env: Map<String, Value>,
    id: String,
}

/// Substitutes the variables in every string of `value` (a configuration's object).
pub fn substitute(value: Value, input: &Input<'_>) -> Result<Value, Problems> {
    let Value::Object(mut top) = value else {
        return Ok(value);
    };
    let mut scope = Scope {
        input,
        folder: format!("/workspaces/{}", input.project),
        container_env: Map::new(),
        id: devcontainer_id(input),
    };
    let mut problems = Vec::new();
    // The folder first: the other strings may name it.
    if let Some(Value::String(f)) = top.get("workspaceFolder") {
        let f = scope.string(f, "workspaceFolder", false, &mut problems);
        scope.folder = f.clone();
        top.insert("workspaceFolder".into(), Value::String(f));
    }
    // Then the container's environment, which may not refer to itself.
    if let Some(env) = top.remove("containerEnv") {
        let env = scope.walk(env, "containerEnv", false, &mut problems);
        if let Value::Object(m) = &env {
            scope.container_env = m.clone();
        }
        top.insert("containerEnv".into(), env);
    }
    let mut out = Map::new();
    for (k, v) in top {
        let v = if k == "containerEnv" || k == "workspaceFolder" {
            v
        } else {
            let path = k.clone();
            scope.walk(v, &path, true, &mut problems)
        };
        out.insert(k, v);
    }
    if problems.is_empty() {
        Ok(Value::Object(out))
    } else {
        Err(Problems(problems))
    }
}

/// A stable id for the configuration at `input.path` of `input.project`: 32 hex digits.
fn devcontainer_id(input: &Input<'_>) -> String {
    let mut h = Sha256::new();
    h.update(input.project.as_bytes());
    h.update([0]);
    h.update(input.path.as_bytes());
    hex::encode(&h.finalize()[..16])
}

impl Scope<'_> {
    fn walk(
        &self,
        v: Value,
        path: &str,
        container_env: bool,
        problems: &mut Vec<Problem>,
    ) -> Value {
        match v {
            Value::String(s) => Value::String(self.string(&s, path, container_env, problems)),
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .enumerate()
                    .map(|(i, x)| self.walk(x, &format!("{path}[{i}]"), container_env, problems))
                    .collect(),
            ),
            Value::Object(m) => Value::Object(
                m.into_iter()
                    .map(|(k, x)| {
                        let p = format!("{path}.{k}");
                        (k, self.walk(x, &p, container_env, problems))
                    })
                    .collect(),
            ),
            other => other,
        }
    }

    /// `s` with its variables substituted; `container_env` says whether `${containerEnv:…}`
    /// may be used here (not inside `containerEnv` itself).
    fn string(
        &self,
        s: &str,
        path: &str,
        container_env: bool,
        problems: &mut Vec<Problem>,
    ) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let Some(end) = after.find('}') else {
                out.push_str(&rest[start..]);
                return out;
            };
            let body = &after[..end];
            match self.value(body, path, container_env) {
                Ok(Some(v)) => out.push_str(&v),
                Ok(None) => out.push_str(&rest[start..start + 2 + end + 1]),
                Err(p) => problems.push(p),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// What `${body}` stands for; `None` for what is not one of the specification's variables.
    fn value(
        &self,
        body: &str,
        path: &str,
        container_env: bool,
    ) -> Result<Option<String>, Problem> {
        let basename = |f: &str| {
            f.rsplit('/')
                .find(|p| !p.is_empty())
                .unwrap_or("")
                .to_owned()
        };
        Ok(Some(match body {
            "localWorkspaceFolder" | "containerWorkspaceFolder" => self.folder.clone(),
            "localWorkspaceFolderBasename" | "containerWorkspaceFolderBasename" => {
                basename(&self.folder)
            }
            "devcontainerId" => self.id.clone(),
            _ => {
                let Some((kind, rest)) = body.split_once(':') else {
                    return Ok(None);
                };
                let (name, default) = match rest.split_once(':') {
                    Some((n, d)) => (n, Some(d)),
                    None => (rest, None),
                };
                match kind {
                    "localEnv" | "env" if self.input.secrets.contains(name) => {
                        return Err(problem(
                            path,
                            format!("`${{localEnv:{name}}}` names a secret variable: a secret is never written into the workspace's definition; the workspace has {name} in its environment already"),
                        ))
                    }
                    "localEnv" | "env" => self
                        .input
                        .local_env
                        .get(name)
                        .cloned()
                        .or_else(|| default.map(str::to_owned))
                        .unwrap_or_default(),
                    "containerEnv" if !container_env => {
                        return Err(problem(
                            path,
                            format!("`${{containerEnv:{name}}}` cannot be used inside `containerEnv`: the container's environment is what it sets"),
                        ))
                    }
                    "containerEnv" => match self.container_env.get(name) {
                        Some(Value::String(v)) => v.clone(),
                        _ => match default {
                            Some(d) => d.to_owned(),
                            None => {
                                return Err(unsupported(
                                    path,
                                    &format!("`${{containerEnv:{name}}}` of a variable the image sets (not `containerEnv`)"),
                                    "Warren substitutes variables before the workspace runs; set it in `containerEnv` or give a default (`${containerEnv:NAME:default}`)",
                                ))
                            }
                        },
                    },
                    _ => return Ok(None),
                }
            }
        }))
    }
}
