//! Parsing what users type: `--var K=V`, `--file-var K=@PATH`, durations, resource sizes, and
//! reading files (or stdin for `-`).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_types::api::{VariableInput, VariableKind};

/// A `K=V` pair from the command line, parsed by clap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: String,
}

/// clap value parser of `K=V`: the key is non-empty and holds no blank; the value may hold `=`.
pub fn key_value(s: &str) -> Result<KeyValue, String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))?;
    if key.is_empty() {
        return Err(format!("{s:?} has an empty key"));
    }
    if key.chars().any(char::is_whitespace) {
        return Err(format!("key {key:?} contains a blank"));
    }
    Ok(KeyValue {
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

/// clap value parser of `K=@PATH`.
pub fn key_file(s: &str) -> Result<(String, PathBuf), String> {
    let kv = key_value(s)?;
    let path = kv
        .value
        .strip_prefix('@')
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("{s:?} is not KEY=@PATH"))?;
    Ok((kv.key, PathBuf::from(path)))
}

/// clap value parser of a CPU quantity (`500m`, `2`).
pub fn cpu(s: &str) -> Result<String, String> {
    warren_types::quantity::parse_cpu_millis(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// clap value parser of a memory quantity (`512Mi`, `4Gi`).
pub fn memory(s: &str) -> Result<String, String> {
    warren_types::quantity::parse_memory_bytes(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// clap value parser of a duration: `90` (seconds), `30s`, `5m`, `1h`, `1d`, `1m30s`.
pub fn duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?} is not a duration like 30s, 5m or 1h");
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total: u64 = 0;
    let mut digits = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// clap value parser of a whole number of hours, written as a duration (`12h`, `1d`).
pub fn hours(s: &str) -> Result<u32, String> {
    let d = duration(s)?;
    let secs = d.as_secs();
    if secs == 0 || secs % 3600 != 0 {
        return Err(format!(
            "{s:?} is not a whole number of hours, like 12h or 1d"
        ));
    }
    u32::try_from(secs / 3600).map_err(|_| format!("{s:?} is too long"))
}

#[derive(Debug, thiserror::Error)]
#[error("reading {what} {path}")]
pub struct ReadError {
    pub what: &'static str,
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

/// Reads a text file, or standard input when `path` is `-`.
pub fn read_text(what: &'static str, path: &Path) -> Result<String, ReadError> {
    let err = |source| ReadError {
        what,
        path: path.display().to_string(),
        source,
    };
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).map_err(err)?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(err)
}

/// The variables of `warren ws create`, in the order env, secret env, files.
pub fn variables(
    vars: &[KeyValue],
    secret_vars: &[KeyValue],
    file_vars: &[(String, PathBuf)],
) -> Result<Vec<VariableInput>, ReadError> {
    let mut out = Vec::new();
    for (list, secret) in [(vars, false), (secret_vars, true)] {
        for kv in list {
            out.push(VariableInput {
                key: kv.key.clone(),
                value: kv.value.clone(),
                kind: VariableKind::Env,
                secret,
            });
        }
    }
    for (key, path) in file_vars {
        out.push(VariableInput {
            key: key.clone(),
            value: read_text("file variable", path)?,
            kind: VariableKind::File,
            secret: false,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_split_at_the_first_equals_sign() {
        assert_eq!(
            key_value("A=b=c").unwrap(),
            KeyValue {
                key: "A".into(),
                value: "b=c".into()
            }
        );
        assert_eq!(key_value("EMPTY=").unwrap().value, "");
        for bad in ["novalue", "=x", "A B=c"] {
            assert!(key_value(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn file_variables_need_an_at_path() {
        assert_eq!(
            key_file("CFG=@/tmp/x").unwrap(),
            ("CFG".to_owned(), PathBuf::from("/tmp/x"))
        );
        assert!(key_file("CFG=/tmp/x").unwrap_err().contains("KEY=@PATH"));
        assert!(key_file("CFG=@").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(duration("2d").unwrap(), Duration::from_secs(2 * 86_400));
        for bad in ["", "m", "5x", "5m3", "-1s", "99999999999999999999h"] {
            assert!(duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn schedules_are_whole_hours() {
        assert_eq!(hours("12h").unwrap(), 12);
        assert_eq!(hours("1d").unwrap(), 24);
        for bad in ["0h", "90m", "30s", "x"] {
            assert!(hours(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn quantities_are_checked_locally() {
        assert_eq!(cpu("500m").unwrap(), "500m");
        assert_eq!(memory("4Gi").unwrap(), "4Gi");
        assert!(cpu("lots").is_err());
        assert!(memory("4 gigs").is_err());
    }

    #[test]
    fn variables_carry_kind_and_secrecy_and_read_files() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("settings.json");
        std::fs::write(&f, "{\"a\": 1}\n").unwrap();
        let vars = variables(
            &[key_value("A=1").unwrap()],
            &[key_value("PW=s3cret").unwrap()],
            &[("SETTINGS".into(), f)],
        )
        .unwrap();
        assert_eq!(vars.len(), 3);
        assert_eq!((vars[0].kind, vars[0].secret), (VariableKind::Env, false));
        assert_eq!((vars[1].kind, vars[1].secret), (VariableKind::Env, true));
        assert_eq!(vars[2].kind, VariableKind::File);
        assert_eq!(vars[2].value, "{\"a\": 1}\n");

        let missing = tmp.path().join("nope");
        let err = variables(&[], &[], &[("X".into(), missing)]).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }
}
