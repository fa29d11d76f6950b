//! Validation of an agent's sources against the admin policy: every problem found, each
//! naming its field (`sources[1].kinds.allow[0]`), so an operator fixes a file in one pass.

use std::collections::BTreeSet;
use std::time::Duration;

use warren_types::gitops::{AgentGitops, Policy, Source, SourceMode};

use crate::kinds::KindPattern;
use crate::paths::check_glob;

/// Sources one agent may have.
pub const MAX_SOURCES: usize = 100;
/// Globs or kind patterns in one list.
const MAX_LIST: usize = 64;
/// Poll intervals outside these bounds are refused.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// One thing wrong with a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The field's path, e.g. `sources[0].namespace`.
    pub field: String,
    pub message: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A name of the kind Kubernetes gives namespaces (RFC 1123 label).
pub fn check_label(name: &str) -> Result<(), String> {
    warren_types::check_name(name)
}

/// Parses `90s`, `5m`, `1h30m`, `250ms`.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration (e.g. 30s, 5m, 1h30m)");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 0 || digits > 9 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit = rest
            .chars()
            .take_while(char::is_ascii_alphabetic)
            .collect::<String>();
        rest = &rest[unit.len()..];
        let part = match unit.as_str() {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            _ => return Err(bad()),
        };
        total += part;
    }
    if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&total) {
        return Err(format!("{text:?} must be between 1s and 24h"));
    }
    Ok(total)
}

/// Checks a policy's own patterns.
pub fn validate_policy(policy: &Policy) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    for (i, d) in policy.deny.iter().enumerate() {
        if let Err(e) = KindPattern::parse(d) {
            problems.push(Problem {
                field: format!("deny[{i}]"),
                message: e,
            });
        }
    }
    if policy.deny.len() > MAX_LIST {
        problems.push(Problem {
            field: "deny".into(),
            message: format!("at most {MAX_LIST} patterns"),
        });
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Checks an agent's sources: names, repositories (`known_repository`), refs, globs, mode
/// and namespace, kind patterns (which must be able to match, and may not ask for what
/// the policy denies), intervals.
pub fn validate_sources(
    config: &AgentGitops,
    policy: &Policy,
    known_repository: &dyn Fn(&str) -> bool,
) -> Result<(), Vec<Problem>> {
    let mut problems = Vec::new();
    if config.sources.len() > MAX_SOURCES {
        problems.push(Problem {
            field: "sources".into(),
            message: format!("at most {MAX_SOURCES} sources per agent"),
        });
    }
    let policy_deny: Vec<KindPattern> = policy
        .deny
        .iter()
        .filter_map(|d| KindPattern::parse(d).ok())
        .collect();
    let mut names = BTreeSet::new();
    for (i, s) in config.sources.iter().enumerate() {
        let at = |field: &str| format!("sources[{i}].{field}");
        let mut problem = |field: String, message: String| {
            problems.push(Problem { field, message });
        };
        if let Err(e) = check_label(&s.name) {
            problem(at("name"), e);
        } else if !names.insert(s.name.as_str()) {
            problem(
                at("name"),
                format!("{:?} is the name of an earlier source", s.name),
            );
        }
        if !known_repository(&s.repository) {
            problem(
                at("repository"),
                format!(
                    "no repository named {:?} is registered (warren gitops repo add)",
                    s.repository
                ),
            );
        }
        if let Err(e) = warren_types::git::validate_ref(&s.git_ref) {
            problem(at("ref"), e);
        }
        if s.paths.len() > MAX_LIST {
            problem(at("paths"), format!("at most {MAX_LIST} globs"));
        }
        for (j, g) in s.paths.iter().enumerate() {
            if let Err(e) = check_glob(g) {
                problem(at(&format!("paths[{j}]")), e);
            }
        }
        match (s.mode, &s.namespace) {
            (SourceMode::Namespaced, None) => problem(
                at("namespace"),
                "is required in namespaced mode: the only namespace the source may touch".into(),
            ),
            (_, Some(ns)) => {
                if let Err(e) = check_label(ns) {
                    problem(at("namespace"), e);
                }
            }
            (SourceMode::Cluster, None) => {}
        }
        if s.mode == SourceMode::Cluster && !policy.allow_cluster_mode {
            problem(
                at("mode"),
                "cluster mode is not allowed by the admin policy; use namespaced".into(),
            );
        }
        if let Err(e) = parse_interval(&s.interval) {
            problem(at("interval"), e);
        }
        check_kinds(s, &policy_deny, &mut |f, m| problem(at(&f), m));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

fn check_kinds(s: &Source, policy_deny: &[KindPattern], problem: &mut dyn FnMut(String, String)) {
    let allow = s.kinds.allow.as_deref().unwrap_or_default();
    let deny = &s.kinds.deny;
    if allow.len() > MAX_LIST || deny.len() > MAX_LIST {
        problem(
            "kinds".into(),
            format!("at most {MAX_LIST} patterns per list"),
        );
    }
    let mut denied = Vec::new();
    for (j, d) in deny.iter().enumerate() {
        match KindPattern::parse(d) {
            Ok(p) => denied.push((format!("kinds.deny[{j}]"), p)),
            Err(e) => problem(format!("kinds.deny[{j}]"), e),
        }
    }
    if s.kinds.allow.as_ref().is_some_and(Vec::is_empty) {
        problem(
            "kinds.allow".into(),
            "an empty list allows nothing; leave it out for the default kinds".into(),
        );
    }
    for (j, a) in allow.iter().enumerate() {
        let field = format!("kinds.allow[{j}]");
        let p = match KindPattern::parse(a) {
            Ok(p) => p,
            Err(e) => {
                problem(field, e);
                continue;
            }
        };
        if let Some(d) = policy_deny.iter().find(|d| d.covers(&p)) {
            problem(field, format!("{a:?} is denied by the admin policy ({d})"));
        } else if let Some((f, d)) = denied.iter().find(|(_, d)| d.covers(&p)) {
            problem(
                field,
                format!("{a:?} cannot match: {f} ({d}) denies all of it"),
            );
        } else if let (SourceMode::Namespaced, Some(kind)) = (s.mode, p.names_cluster_scoped()) {
            problem(
                field,
                format!("{a:?} cannot match in namespaced mode: {kind} is cluster-scoped"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_types::gitops::KindRules;

    fn source(name: &str) -> Source {
        serde_json::from_value(serde_json::json!({
            "name": name, "repository": "platform", "namespace": "team-a"
        }))
        .unwrap()
    }

    fn problems(config: &AgentGitops, policy: &Policy) -> Vec<String> {
        validate_sources(config, policy, &|r| r == "platform")
            .err()
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_good_source_passes_with_its_defaults() {
        let c = AgentGitops {
            sources: vec![source("platform")],
        };
        assert_eq!(problems(&c, &Policy::default()), Vec::<String>::new());
        let s = &c.sources[0];
        assert_eq!(
            (s.git_ref.as_str(), s.interval.as_str(), s.prune),
            ("main", "60s", false)
        );
        assert_eq!(s.mode, SourceMode::Namespaced);
    }

    #[test]
    fn every_problem_is_named_by_its_field() {
        let mut bad = source("Bad_Name");
        bad.repository = "nowhere".into();
        bad.git_ref = "-x".into();
        bad.paths = vec!["../up/*.yaml".into()];
        bad.namespace = None;
        bad.interval = "10 parsecs".into();
        bad.kinds = KindRules {
            allow: Some(vec!["apps/deployment".into(), "v1/Namespace".into()]),
            deny: vec!["v1".into()],
        };
        let mut dup = source("dup");
        dup.mode = SourceMode::Cluster;
        let c = AgentGitops {
            sources: vec![bad, dup.clone(), dup],
        };
        let policy = Policy {
            deny: vec![],
            allow_cluster_mode: false,
        };
        let p = problems(&c, &policy);
        for want in [
            "sources[0].name: \"Bad_Name\"",
            "sources[0].repository: no repository named \"nowhere\"",
            "sources[0].ref: \"-x\"",
            "sources[0].paths[0]: \"../up/*.yaml\" must not leave",
            "sources[0].namespace: is required in namespaced mode",
            "sources[0].interval: \"10 parsecs\"",
            "sources[0].kinds.deny[0]: \"v1\" must be",
            "sources[0].kinds.allow[0]: \"apps/deployment\" cannot match",
            "sources[0].kinds.allow[1]: \"v1/Namespace\" cannot match in namespaced mode",
            "sources[1].mode: cluster mode is not allowed",
            "sources[2].name: \"dup\" is the name of an earlier source",
        ] {
            assert!(
                p.iter().any(|x| x.starts_with(want)),
                "missing {want:?} in {p:#?}"
            );
        }
    }

    #[test]
    fn the_policy_caps_what_a_source_may_allow() {
        let mut s = source("x");
        s.kinds.allow = Some(vec![
            "rbac.authorization.k8s.io/v1/Role".into(),
            "v1/Secret".into(),
            "*/*".into(),
        ]);
        s.kinds.deny = vec!["v1/*".into()];
        let policy = Policy {
            deny: vec!["rbac.authorization.k8s.io/*".into()],
            allow_cluster_mode: true,
        };
        let p = problems(&AgentGitops { sources: vec![s] }, &policy);
        assert_eq!(p.len(), 2, "{p:#?}");
        assert!(
            p[0].contains("allow[0]") && p[0].contains("admin policy"),
            "{p:#?}"
        );
        assert!(
            p[1].contains("allow[1]") && p[1].contains("kinds.deny[0]"),
            "{p:#?}"
        );
    }

    #[test]
    fn intervals_parse_within_bounds() {
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_interval("1500ms"), Ok(Duration::from_millis(1500)));
        for bad in ["", "5", "0s", "25h", "1d", "s", "-1s"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn policy_patterns_are_checked() {
        let e = validate_policy(&Policy {
            deny: vec!["rbac.authorization.k8s.io/*".into(), "nope".into()],
            allow_cluster_mode: true,
        })
        .unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].field, "deny[1]");
    }
}
