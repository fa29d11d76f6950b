//! The Kubernetes API server's own rules for what Warren renders — names, label and
//! annotation keys and values, environment variable names — checked before anything is
//! stored, so a devfile Warren accepts never fails at apply time. Each check answers with
//! the rule in words, or `None` when the value is fine.

/// Longest label name part, DNS label and label value.
const MAX_NAME: usize = 63;
/// Longest DNS subdomain (a key's prefix).
const MAX_SUBDOMAIN: usize = 253;
/// Most bytes of all annotations of one object together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// A DNS-1035 label (Service names): lowercase letters, digits and `-`, starting with a
/// letter, ending with a letter or digit, at most `max` characters.
pub fn dns1035_label_problem(s: &str, max: usize) -> Option<String> {
    let b = s.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= max
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[b.len() - 1] != b'-';
    (!ok).then(|| {
        format!(
            "{s:?} must be 1-{max} characters of a-z, 0-9 and '-', starting with a letter and not ending with '-'"
        )
    })
}

fn dns1123_subdomain_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

/// A DNS-1123 subdomain (Secret and most object names).
pub fn dns1123_subdomain_problem(s: &str) -> Option<String> {
    (!dns1123_subdomain_ok(s)).then(|| {
        format!(
            "{s:?} must be a DNS subdomain: at most 253 lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit"
        )
    })
}

/// The name part of a qualified name, and a label value when not empty: at most 63 of
/// letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit.
fn name_part_ok(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter()
            .all(|c| alnum(*c) || matches!(c, b'-' | b'_' | b'.'))
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain.
pub fn qualified_name_problem(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if !name_part_ok(name) {
        return Some(format!(
            "{key:?} is not a valid key: the name part must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    if prefix.is_some_and(|p| !dns1123_subdomain_ok(p)) {
        return Some(format!(
            "{key:?} is not a valid key: the prefix before '/' must be a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253 characters)"
        ));
    }
    None
}

/// A label value: empty, or a valid name part.
pub fn label_value_problem(value: &str) -> Option<String> {
    (!value.is_empty() && !name_part_ok(value)).then(|| {
        format!(
            "{value:?} is not a valid label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    })
}

/// The annotations of one object: valid keys, and not more than 256 KiB together.
pub fn annotations_problem<'a>(
    map: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Option<String> {
    let mut total = 0;
    for (k, v) in map {
        if let Some(p) = qualified_name_problem(k) {
            return Some(p);
        }
        total += k.len() + v.len();
    }
    (total > MAX_ANNOTATIONS_BYTES).then(|| {
        format!(
            "the annotations take {total} bytes together; Kubernetes accepts at most {MAX_ANNOTATIONS_BYTES}"
        )
    })
}

/// A container environment variable name as every supported Kubernetes version accepts it:
/// letters, digits, `_`, `-` and `.`, not starting with a digit.
pub fn env_name_problem(name: &str) -> Option<String> {
    let b = name.as_bytes();
    let ok = !b.is_empty()
        && !b[0].is_ascii_digit()
        && b.iter()
            .all(|c| alnum(*c) || matches!(c, b'_' | b'-' | b'.'));
    (!ok).then(|| {
        format!(
            "{name:?} is not a valid environment variable name (letters, digits, '_', '-' and '.', not starting with a digit)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_keys() {
        assert!(dns1035_label_problem("abc-1", 40).is_none());
        assert!(dns1035_label_problem("1abc", 40).is_some());
        assert!(dns1035_label_problem("abc-", 40).is_some());
        assert!(dns1035_label_problem(&"a".repeat(41), 40).is_some());
        for good in ["a", "example.com/x", "x_y.z-1", "a.b/c"] {
            assert!(qualified_name_problem(good).is_none(), "{good}");
        }
        for bad in [
            "x/y/z",
            "bad key!",
            "",
            "-a",
            "a-",
            "Example.com/x",
            "/x",
            "x/",
        ] {
            assert!(qualified_name_problem(bad).is_some(), "{bad}");
        }
        assert!(label_value_problem("").is_none());
        assert!(label_value_problem("v1.2").is_none());
        assert!(label_value_problem("a b").is_some());
        assert!(env_name_problem("MY_VAR").is_none());
        assert!(env_name_problem("my.var-2").is_none());
        for bad in ["1BAD", "MY VAR", "", "A=B"] {
            assert!(env_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn annotation_size_is_capped() {
        let big = "x".repeat(MAX_ANNOTATIONS_BYTES);
        let m: std::collections::BTreeMap<String, String> = [("a".to_owned(), big)].into();
        assert!(annotations_problem(&m).is_some());
    }
}
