//! `customizations`: what a configuration asks of its tools. VS Code's (`vscode`) are applied
//! to the editor Warren injects (code-server, VS Code in the browser): its `extensions`
//! installed (ids from the agent's extension gallery, `.vsix` files from the repository) and
//! its `settings` written as the machine's. Another tool's are said to be left alone.

use crate::build::join;
use crate::{problem, Notice, Problem};
use serde_json::Value;
use warren_devfile::EditorCustomizations;

pub(crate) struct Reading<'a> {
    /// The configuration's folder, from the repository's root.
    pub folder: &'a str,
    /// The sources' folder in the container (`${containerWorkspaceFolder}`, already
    /// substituted into the strings).
    pub workspace_folder: &'a str,
    pub problems: &'a mut Vec<Problem>,
    pub notices: &'a mut Vec<Notice>,
}

impl Reading<'_> {
    fn notice(&mut self, path: &str, message: &str) {
        self.notices.push(Notice {
            path: path.to_owned(),
            message: message.to_owned(),
        });
    }

    /// The editor's customizations `v` (the `customizations` object) asks for.
    pub fn read(&mut self, v: &Value) -> Option<EditorCustomizations> {
        let Some(tools) = v.as_object() else {
            self.problems
                .push(problem("customizations", "must be an object"));
            return None;
        };
        let mut out = None;
        for (tool, v) in tools {
            let path = format!("customizations.{tool}");
            if tool == "vscode" {
                out = self.vscode(&path, v);
            } else {
                self.notice(&path, "for another tool than the editor Warren injects (code-server, VS Code in the browser): not applied");
            }
        }
        out
    }

    fn vscode(&mut self, path: &str, v: &Value) -> Option<EditorCustomizations> {
        let Some(m) = v.as_object() else {
            self.problems.push(problem(path, "must be an object"));
            return None;
        };
        let mut out = EditorCustomizations::default();
        for (key, v) in m {
            let at = format!("{path}.{key}");
            match (key.as_str(), v) {
                ("extensions", Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        self.extension(&format!("{at}[{i}]"), item, &mut out);
                    }
                }
                ("settings", Value::Object(s)) => out.settings = s.clone(),
                ("extensions", _) => self
                    .problems
                    .push(problem(at, "must be an array of extension ids")),
                ("settings", _) => self.problems.push(problem(at, "must be an object")),
                _ => self.notice(&at, "not something the injected editor is given: ignored"),
            }
        }
        Some(out)
    }

    fn extension(&mut self, at: &str, item: &Value, out: &mut EditorCustomizations) {
        let Some(id) = item.as_str() else {
            self.problems
                .push(problem(at, "must be an extension id (a string)"));
            return;
        };
        if let Some(excluded) = id.strip_prefix('-') {
            self.notice(at, &format!("{excluded} is not installed: Warren installs only the extensions a configuration names"));
            return;
        }
        if !id.ends_with(".vsix") {
            if id.contains('.') && !id.chars().any(|c| c.is_whitespace() || c.is_control()) {
                out.extensions.push(id.to_owned());
            } else {
                self.problems.push(problem(
                    at,
                    format!("{id:?} is not an extension id (publisher.name)"),
                ));
            }
            return;
        }
        // A file: of the sources (`${containerWorkspaceFolder}/…`), or from the folder.
        let folder = format!("{}/", self.workspace_folder.trim_end_matches('/'));
        let path = match id.strip_prefix(&folder) {
            Some(rel) => join("", rel),
            None => join(self.folder, id),
        };
        match path {
            Ok(p) => out.vsix.push(p),
            Err(why) => self.problems.push(problem(at, format!("{id:?} {why}"))),
        }
    }
}
