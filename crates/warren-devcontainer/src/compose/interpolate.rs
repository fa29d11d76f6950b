//! Compose's own variables (`$NAME`, `${NAME}`, `${NAME:-default}`, `${NAME-default}`,
//! `${NAME:?message}`, `${NAME?message}`, `${NAME:+other}`, `${NAME+other}`, `$$` for a
//! dollar), substituted in every string of a Compose file as `docker compose` does. The values
//! are the workspace's variables first, then the `.env` file beside the first Compose file: on
//! Warren the user's shell is not where the services run.

use crate::{problem, Problem};
use std::collections::BTreeMap;

/// Where the values come from, first match first.
pub(crate) struct Values<'a> {
    pub variables: &'a BTreeMap<String, String>,
    pub dot_env: BTreeMap<String, String>,
}

impl Values<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        self.variables
            .get(name)
            .or_else(|| self.dot_env.get(name))
            .map(String::as_str)
    }
}

/// The `.env` file's `NAME=value` lines (comments, blank lines and `export ` prefixes as
/// Compose reads them; quotes around a value removed).
pub(crate) fn dot_env(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        let v = match (v.chars().next(), v.chars().last()) {
            (Some(q @ ('"' | '\'')), Some(e)) if q == e && v.len() >= 2 => &v[1..v.len() - 1],
            _ => v,
        };
        out.insert(k.trim().to_owned(), v.to_owned());
    }
    out
}

/// `s` with its variables substituted; `path` names it in the problems. `unset` collects
/// the names used without a value (Compose warns of them; they become empty).
pub(crate) fn substitute(
    s: &str,
    path: &str,
    values: &Values<'_>,
    unset: &mut Vec<String>,
) -> Result<String, Problem> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = rest.strip_prefix('{') {
            let end = closing(r)
                .ok_or_else(|| problem(path, format!("{s:?}: a `${{` without its closing `}}`")))?;
            out.push_str(&braced(&r[..end], s, path, values, unset)?);
            rest = &r[end + 1..];
        } else {
            let n = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            if n == 0 {
                out.push('$');
                continue;
            }
            out.push_str(&lookup(&rest[..n], values, unset));
            rest = &rest[n..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// The index of the `}` closing a `${`, nested `${…}` in defaults counted.
fn closing(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let bytes = s.as_bytes();
    for (i, b) in bytes.iter().enumerate() {
        match b {
            b'{' if i > 0 && bytes[i - 1] == b'$' => depth += 1,
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
    }
    None
}

fn lookup(name: &str, values: &Values<'_>, unset: &mut Vec<String>) -> String {
    match values.get(name) {
        Some(v) => v.to_owned(),
        None => {
            if !unset.iter().any(|u| u == name) {
                unset.push(name.to_owned());
            }
            String::new()
        }
    }
}

/// One `${…}`: its name and what follows it.
fn braced(
    inner: &str,
    whole: &str,
    path: &str,
    values: &Values<'_>,
    unset: &mut Vec<String>,
) -> Result<String, Problem> {
    let n = inner
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(inner.len());
    let (name, op) = inner.split_at(n);
    if name.is_empty() {
        return Err(problem(
            path,
            format!("{whole:?}: `${{{inner}}}` names no variable"),
        ));
    }
    let value = values.get(name);
    let set = value.is_some();
    let non_empty = value.is_some_and(|v| !v.is_empty());
    let word = |w: &str, unset: &mut Vec<String>| substitute(w, path, values, unset);
    let ops: [(&str, bool); 6] = [
        (":-", non_empty),
        ("-", set),
        (":?", non_empty),
        ("?", set),
        (":+", non_empty),
        ("+", set),
    ];
    if op.is_empty() {
        return Ok(lookup(name, values, unset));
    }
    for (prefix, holds) in ops {
        let Some(w) = op.strip_prefix(prefix) else {
            continue;
        };
        return match prefix.trim_start_matches(':') {
            "-" if holds => Ok(value.unwrap_or_default().to_owned()),
            "-" => word(w, unset),
            "?" if holds => Ok(value.unwrap_or_default().to_owned()),
            "?" => Err(problem(
                path,
                format!(
                    "the variable {name} is required{}: give it as a variable of the workspace",
                    if w.is_empty() {
                        String::new()
                    } else {
                        format!(" ({w})")
                    }
                ),
            )),
            _ if holds => word(w, unset),
            _ => Ok(String::new()),
        };
    }
    Err(problem(
        path,
        format!("{whole:?}: `${{{inner}}}` is not a form Compose knows"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(s: &str) -> Result<String, Problem> {
        let variables = BTreeMap::from([
            ("SET".to_owned(), "v".to_owned()),
            ("EMPTY".to_owned(), String::new()),
        ]);
        let values = Values {
            variables: &variables,
            dot_env: BTreeMap::from([
                ("FROM_FILE".to_owned(), "f".to_owned()),
                ("SET".to_owned(), "file".to_owned()),
            ]),
        };
        substitute(s, "x", &values, &mut vec![])
    }

    #[test]
    fn the_forms_compose_knows() {
        assert_eq!(sub("a $SET ${SET} $$SET").unwrap(), "a v v $SET");
        assert_eq!(sub("${FROM_FILE}").unwrap(), "f");
        assert_eq!(
            sub("${NOPE:-d} ${EMPTY:-d} ${EMPTY-d} ${NOPE-d}").unwrap(),
            "d d  d"
        );
        assert_eq!(
            sub("${SET:+alt} ${EMPTY:+alt} ${EMPTY+alt}").unwrap(),
            "alt  alt"
        );
        assert_eq!(sub("${NOPE:-${SET}}").unwrap(), "v");
        assert_eq!(sub("cost $5 and $").unwrap(), "cost  and $");
        let e = sub("${NOPE:?give it}").unwrap_err();
        assert!(e.message.contains("NOPE is required (give it)"), "{e}");
        assert!(sub("${SET").unwrap_err().message.contains("closing"));
        assert!(sub("${}")
            .unwrap_err()
            .message
            .contains("names no variable"));
        assert!(sub("${SET/x/y}")
            .unwrap_err()
            .message
            .contains("not a form"));
    }

    #[test]
    fn dot_env_lines() {
        let e = dot_env("# c\nA=1\nexport B = \"two words\"\nC='q'\n\nnot a line\n");
        assert_eq!(e.get("A").unwrap(), "1");
        assert_eq!(e.get("B").unwrap(), "two words");
        assert_eq!(e.get("C").unwrap(), "q");
        assert_eq!(e.len(), 3);
    }
}
