//! Stage 3: `{{name}}` variables.

use super::*;
use crate::DevfileError;
use serde_json::Value;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Stage 3: variables
// ---------------------------------------------------------------------------------------------

/// Replaces `{{name}}` in every string (not in `variables` itself, not in keys).
///
/// A reference to an undefined variable is left as written, as the devfile specification
/// says (published devfiles rely on tools to define some): a notice, except in an image
/// name, where it is an error (no image by that name can exist).
pub(super) fn substitute(
    value: &mut Value,
    vars: &BTreeMap<String, String>,
    path: &str,
    errors: &mut Errors,
    notices: &mut Vec<Notice>,
) {
    match value {
        Value::String(s) if s.contains("{{") => match substitute_str(s, vars) {
            Ok(new) => *s = new,
            Err(msg) if path.ends_with(".image") => errors.push(DevfileError::new(path, msg)),
            Err(msg) => notices.push(Notice {
                path: path.to_owned(),
                message: format!("{msg}; left as written"),
            }),
        },
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                substitute(item, vars, &format!("{path}[{i}]"), errors, notices);
            }
        }
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if path.is_empty() && k == "variables" {
                    continue;
                }
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                substitute(v, vars, &p, errors, notices);
            }
        }
        _ => {}
    }
}

pub(super) fn substitute_str(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut unknown = Vec::new();
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push_str(&rest[start..]);
            rest = "";
            break;
        };
        let name = after[..end].trim();
        match vars.get(name) {
            Some(v) => out.push_str(v),
            None => {
                unknown.push(name.to_owned());
                out.push_str(&rest[start..start + 4 + end]);
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    if unknown.is_empty() {
        Ok(out)
    } else {
        let names: Vec<String> = unknown.iter().map(|n| format!("{{{{{n}}}}}")).collect();
        Err(format!(
            "refers to undefined variable{} {} (define {} in the devfile's `variables`)",
            if names.len() > 1 { "s" } else { "" },
            names.join(", "),
            if names.len() > 1 { "them" } else { "it" }
        ))
    }
}
