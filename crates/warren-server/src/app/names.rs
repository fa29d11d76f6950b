//! Workspace names: generated `<adjective>-<animal>-<4 random>`, or user-supplied and checked.

use rand::seq::SliceRandom;
use rand::Rng;

const ADJECTIVES: &[&str] = &[
    "agile", "bold", "brave", "bright", "calm", "clever", "cosy", "crisp", "daring", "eager",
    "fair", "fast", "gentle", "glad", "grand", "happy", "honest", "jolly", "keen", "kind",
    "lively", "lucky", "merry", "mighty", "neat", "nimble", "noble", "plucky", "proud", "quick",
    "quiet", "rapid", "ready", "shiny", "sleek", "smart", "snappy", "solid", "steady", "sunny",
    "swift", "tidy", "trusty", "vivid", "warm", "wise", "witty", "zesty",
];

const ANIMALS: &[&str] = &[
    "badger", "beaver", "bison", "crane", "eagle", "falcon", "ferret", "finch", "fox", "gecko",
    "heron", "ibex", "koala", "lemur", "lynx", "marten", "mole", "moose", "newt", "otter", "owl",
    "panda", "puffin", "quail", "rabbit", "raven", "robin", "salmon", "seal", "shrew", "sparrow",
    "stoat", "swan", "tapir", "tiger", "toad", "trout", "turtle", "vole", "walrus", "weasel",
    "whale", "wolf", "wombat", "wren", "yak", "zebra", "hare",
];

/// Longest workspace name (it ends up in host names and the namespace `warren-ws-<name>`).
pub const MAX_NAME_LEN: usize = 40;

/// A fresh random name; the caller retries on a (rare) collision.
pub fn generate() -> String {
    let mut rng = rand::thread_rng();
    let adj = ADJECTIVES.choose(&mut rng).copied().unwrap_or("brave");
    let animal = ANIMALS.choose(&mut rng).copied().unwrap_or("otter");
    let suffix: String = (0..4)
        .map(|_| {
            let i = rng.gen_range(0..36u8);
            char::from(if i < 10 { b'0' + i } else { b'a' + i - 10 })
        })
        .collect();
    format!("{adj}-{animal}-{suffix}")
}

/// Checks a user-supplied name: a DNS label of at most 40 characters, not `warren-…`.
pub fn validate(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("{name:?} must be 1-{MAX_NAME_LEN} characters"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(format!("{name:?} may contain only a-z, 0-9 and '-'"));
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) || name.ends_with('-') {
        return Err(format!(
            "{name:?} must start with a letter and not end with '-'"
        ));
    }
    if name.starts_with("warren-") {
        return Err(format!(
            "{name:?}: names starting with warren- are reserved"
        ));
    }
    if name.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{name:?} must not be all digits"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_names_are_valid() {
        for _ in 0..1000 {
            let n = generate();
            assert!(validate(&n).is_ok(), "{n}");
            assert_eq!(n.split('-').count(), 3, "{n}");
        }
    }

    #[test]
    fn bad_names() {
        for n in [
            "",
            "A",
            "-a",
            "a-",
            "a_b",
            "warren-x",
            &"a".repeat(41),
            "1abc",
        ] {
            assert!(validate(n).is_err(), "{n}");
        }
        assert!(validate("my-ws-1").is_ok());
    }
}
