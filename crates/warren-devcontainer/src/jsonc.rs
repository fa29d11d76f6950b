//! The text of a configuration: JSON with comments and trailing commas (JSONC, as VS Code and
//! the reference CLI accept it), at most [`crate::MAX_CONFIG_BYTES`], an object at the top.

use crate::{problem, Problem, MAX_CONFIG_BYTES};
use serde_json::Value;

/// Parses `text` into its JSON value; the problem names the line and column of a syntax error.
pub fn parse(text: &str) -> Result<Value, Problem> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(problem(
            "",
            format!(
                "the configuration is {} bytes; at most {MAX_CONFIG_BYTES} are accepted",
                text.len()
            ),
        ));
    }
    if nesting(text) > MAX_NESTING {
        return Err(problem(
            "",
            format!("the configuration nests deeper than {MAX_NESTING} levels"),
        ));
    }
    let options = jsonc_parser::ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
    };
    let value = jsonc_parser::parse_to_serde_value(text, &options)
        .map_err(|e| problem("", format!("not valid JSON with comments: {e}")))?;
    match value {
        Some(v @ Value::Object(_)) => Ok(v),
        Some(_) => Err(problem("", "the text must be a JSON object at its top")),
        None => Err(problem("", "the configuration is empty")),
    }
}

/// How deep objects and arrays may nest: real configurations use four or five levels; the
/// bound keeps a hostile file from exhausting the parser's stack.
pub const MAX_NESTING: usize = 64;

/// The deepest nesting of `{` and `[` in `text`, strings and comments left out.
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for s in chars.by_ref() {
                    if s == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut star = false;
                for s in chars.by_ref() {
                    if star && s == '/' {
                        break;
                    }
                    star = s == '*';
                }
            }
            '{' | '[' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}
