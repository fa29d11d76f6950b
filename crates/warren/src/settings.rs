//! How every service command layers its settings: flags (with their `WARREN_*` environment
//! fallbacks) over the optional TOML file (`--config`, unknown keys refused by each file's
//! type) over the defaults. The rules are here once; each command lists only its fields.

use anyhow::Context;
use std::path::Path;

/// The `--config` file read into `T`, or `T`'s defaults (every setting unset) without one.
pub fn read_file<T: serde::de::DeserializeOwned + Default>(
    path: Option<&Path>,
) -> anyhow::Result<T> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// A list setting: the flag's values when any were given, else the file's, else none.
pub fn list<T>(flag: Vec<T>, file: Option<Vec<T>>) -> Vec<T> {
    if flag.is_empty() {
        file.unwrap_or_default()
    } else {
        flag
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Default, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct File {
        port: Option<u16>,
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_nothing() {
        assert_eq!(list(vec![1], Some(vec![2, 3])), vec![1]);
        assert_eq!(list(vec![], Some(vec![2, 3])), vec![2, 3]);
        assert_eq!(list::<u8>(vec![], None), Vec::<u8>::new());
    }

    #[test]
    fn the_file_is_optional_and_names_its_problems() {
        assert_eq!(read_file::<File>(None).unwrap(), File::default());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(&path, "port = 7\n").unwrap();
        assert_eq!(read_file::<File>(Some(&path)).unwrap().port, Some(7));
        std::fs::write(&path, "prot = 7\n").unwrap();
        let e = format!("{:#}", read_file::<File>(Some(&path)).unwrap_err());
        assert!(e.contains("parsing") && e.contains("prot"), "{e}");
        let e = format!(
            "{:#}",
            read_file::<File>(Some(&dir.path().join("none"))).unwrap_err()
        );
        assert!(e.contains("reading"), "{e}");
    }
}
