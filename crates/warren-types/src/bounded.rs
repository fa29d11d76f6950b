//! Bounds on YAML (and JSON) text, checked in one linear pass before any parser runs.
//!
//! libyaml — under `serde_yaml` — does work proportional to the flow nesting depth for every
//! token, so deeply nested flow collections (`[[[[…]]]]`, `{a: {a: …}}`) make parsing
//! quadratic: a 200 KB file takes seconds, one at the size cap hours. A depth limit inside the
//! parser comes too late (the whole event stream is built first), so this module lexes the
//! text just enough to know where flow collections open and close — quoted scalars, plain
//! scalars (which may hold brackets and quotes), comments and block scalars are told apart as
//! YAML 1.2 does — and refuses excessive size, flow depth and alias use with a message naming
//! the limit and the line. Block nesting costs the parser nothing extra; its depth is left to
//! the deserializer's own recursion limit.
//!
//! The lexer errs on the side of counting: where it cannot tell (text that is not valid
//! YAML), it may count a bracket YAML would not, never the other way round, so the depth it
//! reports is at least the parser's.

/// What a text may hold at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of text.
    pub max_bytes: usize,
    /// Nesting of flow collections (`[` and `{`).
    pub max_flow_depth: usize,
    /// Aliases (`*name`); each can repeat a whole subtree.
    pub max_aliases: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 1024 * 1024,
            max_flow_depth: 64,
            max_aliases: 100,
        }
    }
}

/// Why a text was refused before parsing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundsError {
    #[error("{size} bytes, more than the {max} bytes accepted")]
    TooLarge { size: usize, max: usize },
    #[error(
        "line {line}: flow collections (`[…]`, `{{…}}`) nested more than {max} deep; write deep structures in block style or flatten them"
    )]
    TooDeep { line: usize, max: usize },
    #[error("line {line}: more than {max} aliases (`*name`)")]
    TooManyAliases { line: usize, max: usize },
}

/// What the lexer is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quote {
    Single,
    Double,
}

/// Checks `text` against `limits` in time linear in its length.
pub fn check_yaml(text: &str, limits: &Limits) -> Result<(), BoundsError> {
    if text.len() > limits.max_bytes {
        return Err(BoundsError::TooLarge {
            size: text.len(),
            max: limits.max_bytes,
        });
    }
    Lexer::new(limits).run(text.as_bytes())
}

struct Lexer<'l> {
    limits: &'l Limits,
    line: usize,
    /// Open flow collections; 0 is block context.
    flow: usize,
    aliases: usize,
    /// Inside a quoted scalar (which may span lines).
    quote: Option<Quote>,
    /// Inside a block scalar (`|`, `>`) whose parent node sits at this column: lines indented
    /// more (or blank) are its content.
    block_scalar: Option<usize>,
    /// A block-context plain scalar owned by a node at this column is open at the end of the
    /// previous line: lines indented more continue it.
    plain_owner: Option<usize>,
    /// In flow context: a node may start next (after `[`, `{`, `,`, a value indicator).
    flow_expect: bool,
    /// In flow context: the last thing was a JSON-like node (quoted scalar, collection), so
    /// a value indicator may touch it (`"a":1`).
    flow_after_json: bool,
}

impl<'l> Lexer<'l> {
    fn new(limits: &'l Limits) -> Self {
        Lexer {
            limits,
            line: 0,
            flow: 0,
            aliases: 0,
            quote: None,
            block_scalar: None,
            plain_owner: None,
            flow_expect: false,
            flow_after_json: false,
        }
    }

    fn run(mut self, text: &[u8]) -> Result<(), BoundsError> {
        for line in text.split(|b| *b == b'\n') {
            self.line += 1;
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            self.line_of(line)?;
        }
        Ok(())
    }

    fn open_flow(&mut self) -> Result<(), BoundsError> {
        self.flow += 1;
        if self.flow > self.limits.max_flow_depth {
            return Err(BoundsError::TooDeep {
                line: self.line,
                max: self.limits.max_flow_depth,
            });
        }
        Ok(())
    }

    fn alias(&mut self) -> Result<(), BoundsError> {
        self.aliases += 1;
        if self.aliases > self.limits.max_aliases {
            return Err(BoundsError::TooManyAliases {
                line: self.line,
                max: self.limits.max_aliases,
            });
        }
        Ok(())
    }

    fn line_of(&mut self, line: &[u8]) -> Result<(), BoundsError> {
        let indent = line.iter().take_while(|b| **b == b' ').count();
        let blank = line[indent..].iter().all(|b| *b == b' ' || *b == b'\t');
        if let Some(parent) = self.block_scalar {
            if blank || indent > parent {
                return Ok(());
            }
            self.block_scalar = None;
        }
        if let Some(q) = self.quote {
            let Some(end) = skip_quote(line, 0, q) else {
                return Ok(());
            };
            self.quote = None;
            return self.after_quote(line, end, indent);
        }
        if self.flow > 0 {
            return self.flow_from(line, 0, indent);
        }
        if blank || line[indent] == b'#' {
            // A comment line ends a plain scalar.
            if !blank {
                self.plain_owner = None;
            }
            return Ok(());
        }
        if let Some(owner) = self.plain_owner {
            // More indented than its owner: the plain scalar goes on (brackets and quotes in
            // it are text).
            if indent > owner {
                return Ok(());
            }
            self.plain_owner = None;
        }
        // A document marker, then possibly a node on the same line.
        if indent == 0
            && (line.starts_with(b"---") || line.starts_with(b"..."))
            && is_blank_or_end(line, 3)
        {
            return self.block(line, 3, 0);
        }
        self.block(line, indent, indent)
    }

    /// Goes on after a quoted scalar that closed just before `i`.
    fn after_quote(&mut self, line: &[u8], i: usize, indent: usize) -> Result<(), BoundsError> {
        if self.flow > 0 {
            self.flow_expect = false;
            self.flow_after_json = true;
            return self.flow_from(line, i, indent);
        }
        self.after_node(line, i, indent)
    }

    /// Block context after a complete node (a quoted scalar, a flow collection) ending just
    /// before `i`: it was a key if a value indicator follows.
    fn after_node(&mut self, line: &[u8], i: usize, parent: usize) -> Result<(), BoundsError> {
        let j = skip_spaces(line, i);
        if line.get(j) == Some(&b':') && is_blank_or_end(line, j + 1) {
            return self.block(line, j + 1, parent);
        }
        Ok(())
    }

    /// Block context from `i`, at the start of a node; `parent` is the column of the node
    /// that owns what starts here (a key's or an entry's column).
    fn block(&mut self, line: &[u8], mut i: usize, mut parent: usize) -> Result<(), BoundsError> {
        loop {
            i = skip_spaces(line, i);
            let Some(&c) = line.get(i) else { return Ok(()) };
            match c {
                b'#' => return Ok(()),
                b'-' | b'?' | b':' if is_blank_or_end(line, i + 1) => {
                    parent = i;
                    i += 1;
                }
                b'[' | b'{' => {
                    self.open_flow()?;
                    self.flow_expect = true;
                    self.flow_after_json = false;
                    return self.flow_from(line, i + 1, parent);
                }
                b'\'' | b'"' => {
                    let q = if c == b'\'' {
                        Quote::Single
                    } else {
                        Quote::Double
                    };
                    match skip_quote(line, i + 1, q) {
                        Some(end) => return self.after_node(line, end, i),
                        None => {
                            self.quote = Some(q);
                            return Ok(());
                        }
                    }
                }
                b'|' | b'>' => {
                    self.block_scalar = Some(parent);
                    return Ok(());
                }
                b'*' => {
                    self.alias()?;
                    i = skip_token(line, i);
                }
                b'&' | b'!' => i = skip_token(line, i),
                _ => {
                    // A plain scalar: a key if `: ` follows on this line, else a value that
                    // may continue on more indented lines. Nothing in it opens anything.
                    let start = i;
                    let mut j = i;
                    while j < line.len() {
                        match line[j] {
                            b':' if is_blank_or_end(line, j + 1) => break,
                            b'#' if j > start && matches!(line[j - 1], b' ' | b'\t') => {
                                return Ok(());
                            }
                            _ => j += 1,
                        }
                    }
                    if j < line.len() {
                        parent = start;
                        i = j + 1;
                        continue;
                    }
                    self.plain_owner = Some(parent);
                    return Ok(());
                }
            }
        }
    }

    /// Flow context from `i`. `parent` is the column of the block node that owns the
    /// outermost collection.
    fn flow_from(&mut self, line: &[u8], mut i: usize, parent: usize) -> Result<(), BoundsError> {
        while i < line.len() {
            let c = line[i];
            match c {
                b' ' | b'\t' => i += 1,
                b'#' if i == 0 || matches!(line[i - 1], b' ' | b'\t') => return Ok(()),
                b'[' | b'{' => {
                    self.open_flow()?;
                    self.flow_expect = true;
                    self.flow_after_json = false;
                    i += 1;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    i += 1;
                    self.flow_expect = false;
                    self.flow_after_json = true;
                    if self.flow == 0 {
                        return self.after_node(line, i, parent);
                    }
                }
                b',' => {
                    self.flow_expect = true;
                    self.flow_after_json = false;
                    i += 1;
                }
                b':' if self.flow_after_json || ends_flow_plain(line, i + 1) => {
                    self.flow_expect = true;
                    self.flow_after_json = false;
                    i += 1;
                }
                b'?' if self.flow_expect && is_blank_or_end(line, i + 1) => i += 1,
                b'\'' | b'"' if self.flow_expect => {
                    let q = if c == b'\'' {
                        Quote::Single
                    } else {
                        Quote::Double
                    };
                    match skip_quote(line, i + 1, q) {
                        Some(end) => {
                            i = end;
                            self.flow_expect = false;
                            self.flow_after_json = true;
                        }
                        None => {
                            self.quote = Some(q);
                            return Ok(());
                        }
                    }
                }
                b'*' if self.flow_expect => {
                    self.alias()?;
                    i = skip_flow_token(line, i);
                    self.flow_expect = false;
                    self.flow_after_json = false;
                }
                b'&' | b'!' if self.flow_expect => i = skip_flow_token(line, i),
                _ => {
                    // A plain scalar: runs to a flow indicator, a value indicator or a
                    // comment; quotes inside it are text. It may go on on the next line.
                    i += 1;
                    while i < line.len() {
                        match line[i] {
                            b',' | b'[' | b']' | b'{' | b'}' => break,
                            b':' if ends_flow_plain(line, i + 1) => break,
                            b'#' if matches!(line[i - 1], b' ' | b'\t') => return Ok(()),
                            _ => i += 1,
                        }
                    }
                    self.flow_expect = false;
                    self.flow_after_json = false;
                }
            }
        }
        Ok(())
    }
}

/// Whether a `:` followed by what is at `i` is a value indicator in flow context.
fn ends_flow_plain(line: &[u8], i: usize) -> bool {
    matches!(
        line.get(i),
        None | Some(b' ' | b'\t' | b',' | b'[' | b']' | b'{' | b'}')
    )
}

fn skip_spaces(line: &[u8], mut i: usize) -> usize {
    while matches!(line.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    i
}

fn is_blank_or_end(line: &[u8], i: usize) -> bool {
    matches!(line.get(i), None | Some(b' ' | b'\t'))
}

/// Past an anchor, tag or alias in block context (up to whitespace).
fn skip_token(line: &[u8], mut i: usize) -> usize {
    while i < line.len() && !matches!(line[i], b' ' | b'\t') {
        i += 1;
    }
    i
}

/// Past an anchor, tag or alias in flow context (up to whitespace or a flow indicator).
fn skip_flow_token(line: &[u8], mut i: usize) -> usize {
    i += 1;
    while i < line.len() && !matches!(line[i], b' ' | b'\t' | b',' | b'[' | b']' | b'{' | b'}') {
        i += 1;
    }
    i
}

/// The index just past the closing quote of a scalar whose content starts at `i`, if it
/// closes on this line.
fn skip_quote(line: &[u8], mut i: usize, q: Quote) -> Option<usize> {
    while i < line.len() {
        match (q, line[i]) {
            (Quote::Single, b'\'') => {
                if line.get(i + 1) == Some(&b'\'') {
                    i += 2;
                    continue;
                }
                return Some(i + 1);
            }
            (Quote::Double, b'\\') => i += 2,
            (Quote::Double, b'"') => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_limit(max: usize) -> Limits {
        Limits {
            max_flow_depth: max,
            ..Limits::default()
        }
    }

    fn ok(text: &str, max: usize) -> bool {
        check_yaml(text, &depth_limit(max)).is_ok()
    }

    #[test]
    fn counts_flow_nesting() {
        assert!(ok("a: [[[1]]]\n", 3));
        assert!(!ok("a: [[[[1]]]]\n", 3));
        assert!(ok("a: {b: {c: [1, 2]}}\n", 3));
        assert!(!ok("a: {b: {c: [1, {d: 2}]}}\n", 3));
        assert!(ok("[1, [2]]\n", 2), "a flow document");
        // Depth goes back down: siblings do not add up.
        assert!(ok("a: [[1], [2], [3]]\nb: [[4]]\n", 2));
        // Across lines.
        assert!(!ok("a: [\n  [\n    [\n      [1]]]]\n", 3));
        let e = check_yaml("x: [[[[[1]]]]]\n", &depth_limit(2)).unwrap_err();
        assert_eq!(e, BoundsError::TooDeep { line: 1, max: 2 });
        assert!(e.to_string().contains("nested more than 2 deep"), "{e}");
    }

    #[test]
    fn text_is_not_structure() {
        // Brackets in plain, quoted, block scalars and comments open nothing.
        let plain = "commandLine: test [[[[[[[[ -f x ]] && echo {{{{{{{{\n";
        assert!(ok(plain, 1));
        let quoted = "a: '[[[[[[[['\nb: \"{{{{{{{{\\\"[[[[\"\n";
        assert!(ok(quoted, 1));
        let block = "a: |\n  [[[[[[[[\n  {{{{{{{{\nb: 1\n";
        assert!(ok(block, 1));
        let comment = "a: 1 # [[[[[[[[\n# {{{{{{{{\n";
        assert!(ok(comment, 1));
        // A plain value continued on a more indented line.
        let continued = "a: some text\n  [[[[[[[[ more text\nb: 1\n";
        assert!(ok(continued, 1));
        // But a value on the next line is a node.
        assert!(!ok("a:\n  [[[[1]]]]\n", 3));
        // A quote inside a plain scalar is text, in block and flow context.
        assert!(ok("a: it's [[[[[[\n", 1));
        assert!(ok("a: [it's, b]\n", 1));
    }

    #[test]
    fn quotes_cannot_hide_closing_brackets() {
        // A quote inside a flow plain scalar does not start a quoted scalar, so the closers in
        // the real quoted scalar that follows cannot be mistaken for structure.
        let segment = "[[[[ a 'b , 'x]]]]' , ";
        let attack = format!("v: {}1\n", segment.repeat(20));
        assert!(!ok(&attack, 64));
        // Multi-line quoted scalars are followed across lines.
        assert!(ok("a: 'line one [[[[\n  line two ]]]]'\nb: [1]\n", 1));
        assert!(!ok("a: \"x\n  y\"\nb: [[[1]]]\n", 2));
    }

    #[test]
    fn block_scalars_end_where_their_parent_does() {
        // The block scalar of `key` (column 2) ends at a line indented 2; what follows counts.
        let text = "- key: |\n    text\n  other: [[[[1]]]]\n";
        assert!(!ok(text, 3));
        assert!(ok("- |\n  [[[[[[\n- [1]\n", 1));
    }

    #[test]
    fn aliases_and_size_are_capped() {
        let many = format!("a: &x 1\nb: [{}]\n", ["*x"; 5].join(", "));
        let limits = Limits {
            max_aliases: 4,
            ..Limits::default()
        };
        assert_eq!(
            check_yaml(&many, &limits),
            Err(BoundsError::TooManyAliases { line: 2, max: 4 })
        );
        let small = Limits {
            max_bytes: 10,
            ..Limits::default()
        };
        assert_eq!(
            check_yaml("a: 12345678901", &small),
            Err(BoundsError::TooLarge { size: 14, max: 10 })
        );
    }

    #[test]
    fn json_is_yaml() {
        let json = r#"{"a": [{"b": [1, 2]}, {"c": {"d": "x]]]]"}}], "e":"[[[["}"#;
        assert!(ok(json, 4));
        assert!(!ok(json, 3));
    }
}
