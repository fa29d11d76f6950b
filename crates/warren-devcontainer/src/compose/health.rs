//! A Compose service's `healthcheck`: its test as a program and arguments (`CMD-SHELL`
//! through `/bin/sh -c`), its times in whole seconds, Compose's defaults where it says none.

use super::service::{Healthcheck, Reader};
use crate::problem;
use serde_json::Value;

impl Reader<'_, '_> {
    pub(super) fn healthcheck(&mut self, v: &Value) -> Option<Healthcheck> {
        let Some(m) = v.as_object() else {
            self.wrong("healthcheck", "a mapping", v);
            return None;
        };
        if m.get("disable").and_then(Value::as_bool) == Some(true) {
            return None;
        }
        let test: Vec<String> = match m.get("test") {
            Some(Value::String(s)) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
            Some(Value::Array(a)) => {
                let words: Vec<String> = a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect();
                match words.split_first() {
                    Some((first, rest)) if first == "CMD" && !rest.is_empty() => rest.to_vec(),
                    Some((first, rest)) if first == "CMD-SHELL" && rest.len() == 1 => {
                        vec!["/bin/sh".into(), "-c".into(), rest[0].clone()]
                    }
                    Some((first, _)) if first == "NONE" => return None,
                    _ => {
                        self.problems.push(problem(
                            self.at("healthcheck.test"),
                            "must be a string, or a list starting with CMD, CMD-SHELL or NONE",
                        ));
                        return None;
                    }
                }
            }
            // A healthcheck changing only the image's times: the image's test is not known.
            _ => {
                self.notice("healthcheck", "it gives no `test`, and an image's own HEALTHCHECK is not read: nothing is checked");
                return None;
            }
        };
        let mut time = |key: &str, default: u32| match m.get(key) {
            None => Some(default),
            Some(Value::String(s)) => match duration(s) {
                Some(d) => Some(d),
                None => {
                    self.problems.push(problem(
                        self.at(&format!("healthcheck.{key}")),
                        format!("{s:?} is not a duration (such as 10s, 1m30s)"),
                    ));
                    None
                }
            },
            Some(v) => {
                self.wrong(&format!("healthcheck.{key}"), "a duration", v);
                None
            }
        };
        let interval = time("interval", 30)?.max(1);
        let timeout = time("timeout", 30)?.max(1);
        let start_period = time("start_period", 0)?;
        let retries = match m.get("retries") {
            None => 3,
            Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n > 0 => n,
                _ => {
                    self.wrong("healthcheck.retries", "a positive number", v);
                    return None;
                }
            },
        };
        Some(Healthcheck {
            test,
            interval,
            timeout,
            retries,
            start_period,
        })
    }
}

/// A Compose duration (`1m30s`, `10s`, `500ms`, `1h`) in whole seconds, rounded up.
pub(crate) fn duration(s: &str) -> Option<u32> {
    let mut total_ms: u64 = 0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let value: u64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let ms = match &rest[..u] {
            "h" => 3_600_000,
            "m" => 60_000,
            "s" => 1000,
            "ms" => 1,
            "us" | "µs" => 0,
            _ => return None,
        };
        rest = &rest[u..];
        total_ms = total_ms.checked_add(value.checked_mul(ms)?)?;
    }
    u32::try_from(total_ms.div_ceil(1000)).ok()
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_as_compose_writes_them() {
        assert_eq!(duration("10s"), Some(10));
        assert_eq!(duration("1m30s"), Some(90));
        assert_eq!(duration("500ms"), Some(1));
        assert_eq!(duration("1h"), Some(3600));
        assert_eq!(duration("10"), None);
        assert_eq!(duration("ten"), None);
        assert_eq!(duration(""), None);
    }
}
