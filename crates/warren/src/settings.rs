//! How every service command layers its settings: flags (with their `WARREN_*` environment
//! fallbacks) over the optional TOML file (`--config`) over the defaults. The rules are here
//! once. Each command has one settings type that clap fills from the flags and serde from the
//! file (unknown keys refused), so each setting is listed once.

use anyhow::Context;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A command's settings: those the flags and variables set, over the `--config` file's.
/// A flag left unset (`None`, or no value of a list) leaves the file's value; a table such as
/// `[oidc]` merges key by key. The file is read alone first, so that its mistakes (unknown
/// keys, wrong types) are named with their place in it.
pub fn layered<S: Serialize + DeserializeOwned>(
    flags: &S,
    file: Option<&Path>,
) -> anyhow::Result<S> {
    let mut merged = Value::Object(Default::default());
    if let Some(path) = file {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let _checked: S =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let table: toml::Table = toml::from_str(&text)?;
        merged = serde_json::to_value(table)?;
    }
    overlay(&mut merged, serde_json::to_value(flags)?);
    serde_json::from_value(merged).context("combining the flags with the configuration file")
}

/// Puts a setting over its default: `slot` keeps the default when the setting is unset.
pub fn set<T>(slot: &mut T, setting: Option<T>) {
    if let Some(value) = setting {
        *slot = value;
    }
}

/// A secret read from its file when one is named, else taken from the variable `env`; none
/// when neither is set. A file's trailing newline is not part of the secret.
pub fn secret(env: &str, file: Option<PathBuf>, what: &str) -> anyhow::Result<Option<String>> {
    match (std::env::var(env).ok(), file) {
        (_, Some(path)) => read_secret(&path, what).map(Some),
        (Some(value), None) if !value.is_empty() => Ok(Some(value)),
        _ => Ok(None),
    }
}

/// Reads a secret from a file, without the trailing newline editors add.
pub fn read_secret(path: &Path, what: &str) -> anyhow::Result<String> {
    let raw = std::fs::read_to_string(path)
        .with_context(|| format!("reading the {what} from {}", path.display()))?;
    let secret = raw.trim_end_matches(['\n', '\r']).to_owned();
    if secret.is_empty() {
        anyhow::bail!("the {what} file {} is empty", path.display());
    }
    Ok(secret)
}

/// Puts what `top` sets over `base`, table by table.
fn overlay(base: &mut Value, top: Value) {
    let (Value::Object(base), Value::Object(top)) = (base, top) else {
        return;
    };
    for (key, value) in top {
        let unset = value.is_null() || value.as_array().is_some_and(Vec::is_empty);
        match base.get_mut(&key) {
            _ if unset => {}
            Some(slot @ Value::Object(_)) if value.is_object() => overlay(slot, value),
            _ => {
                base.insert(key, value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Settings {
        port: Option<u16>,
        host: Option<String>,
        names: Vec<String>,
        limits: Limits,
    }

    #[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
    #[serde(default, deny_unknown_fields)]
    struct Limits {
        max: Option<u32>,
        min: Option<u32>,
    }

    fn file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_nothing() {
        let (_dir, path) =
            file("port = 7\nhost = 'f'\nnames = ['a', 'b']\n[limits]\nmax = 9\nmin = 1\n");
        let flags = Settings {
            host: Some("flag".into()),
            limits: Limits {
                max: Some(5),
                min: None,
            },
            ..Settings::default()
        };
        let s = layered(&flags, Some(&path)).unwrap();
        assert_eq!(
            s,
            Settings {
                port: Some(7),
                host: Some("flag".into()),
                names: vec!["a".into(), "b".into()],
                limits: Limits {
                    max: Some(5),
                    min: Some(1)
                },
            }
        );
        let flags = Settings {
            names: vec!["c".into()],
            ..Settings::default()
        };
        assert_eq!(layered(&flags, Some(&path)).unwrap().names, ["c"]);
        assert_eq!(layered(&flags, None).unwrap(), flags);
    }

    #[test]
    fn the_file_is_optional_and_names_its_problems() {
        let (dir, path) = file("prot = 7\n");
        let e = format!(
            "{:#}",
            layered(&Settings::default(), Some(&path)).unwrap_err()
        );
        assert!(e.contains("parsing") && e.contains("prot"), "{e}");
        let (_dir, path) = file("port = 'seven'\n");
        let e = format!(
            "{:#}",
            layered(&Settings::default(), Some(&path)).unwrap_err()
        );
        assert!(e.contains("parsing") && e.contains("port"), "{e}");
        let e = format!(
            "{:#}",
            layered(&Settings::default(), Some(&dir.path().join("none"))).unwrap_err()
        );
        assert!(e.contains("reading"), "{e}");
    }

    #[test]
    fn a_secret_comes_from_its_file_before_its_variable() {
        let (_dir, path) = file("s3cret\n");
        let from_file = secret("WARREN_TEST_NO_SUCH_VARIABLE", Some(path), "test secret").unwrap();
        assert_eq!(from_file.as_deref(), Some("s3cret"));
        assert_eq!(
            secret("WARREN_TEST_NO_SUCH_VARIABLE", None, "test secret").unwrap(),
            None
        );
        let (_dir, empty) = file("\n");
        let e = format!("{:#}", secret("X", Some(empty), "test secret").unwrap_err());
        assert!(e.contains("test secret file") && e.contains("empty"), "{e}");
    }
}
