//! Kind patterns, `<group or apiVersion>/<Kind>`, and the allow/deny sets built from them.
//!
//! The left part is a group (`apps`: any of its versions), an apiVersion (`apps/v1`, or `v1`
//! and `core` for the core group) or `*`; the right part a kind (`ConfigMap`) or `*`. A
//! pattern that can never match an object (`apps/deployment`, `v2/Pod`) is refused when
//! parsed, so a typo does not silently allow or deny nothing.

use std::fmt;

/// What a source may manage when it says nothing: workloads and their configuration.
pub const DEFAULT_ALLOW: &[&str] = &[
    "apps/*",
    "batch/*",
    "autoscaling/*",
    "policy/PodDisruptionBudget",
    "networking.k8s.io/Ingress",
    "networking.k8s.io/NetworkPolicy",
    "v1/ConfigMap",
    "v1/Secret",
    "v1/Service",
    "v1/ServiceAccount",
    "v1/PersistentVolumeClaim",
];

/// Kinds of the built-in API that exist outside namespaces (the agent asks the API server
/// for everything else; this table is for refusing patterns that cannot match early).
pub const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    ("node.k8s.io", "RuntimeClass"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("apiregistration.k8s.io", "APIService"),
];

/// Whether a built-in kind is known to be cluster-scoped.
pub fn known_cluster_scoped(group: &str, kind: &str) -> bool {
    CLUSTER_SCOPED.contains(&(group, kind))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Group {
    Any,
    /// `""` is the core group.
    Named(String),
}

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindPattern {
    text: String,
    group: Group,
    version: Option<String>,
    kind: Option<String>,
}

fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    tail.is_empty()
        || ["alpha", "beta"].iter().any(|stage| {
            tail.strip_prefix(stage).is_some_and(|n| {
                !n.is_empty() && !n.starts_with('0') && n.chars().all(|c| c.is_ascii_digit())
            })
        })
}

fn is_group(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn is_kind(s: &str) -> bool {
    s.len() <= 63
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
}

/// Splits an object's `apiVersion` into group (`""` for core) and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.rsplit_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

impl KindPattern {
    /// Parses a pattern; the error says why it cannot match anything.
    pub fn parse(text: &str) -> Result<KindPattern, String> {
        let usage = "must be <group or apiVersion>/<Kind>, e.g. apps/*, v1/ConfigMap or \
                     networking.k8s.io/v1/Ingress";
        let Some((left, kind)) = text.rsplit_once('/') else {
            return Err(format!("{text:?} {usage}"));
        };
        let kind = match kind {
            "*" => None,
            k if is_kind(k) => Some(k.to_owned()),
            k => {
                return Err(format!(
                    "{text:?} cannot match: {k:?} is not a kind (kinds are written as in \
                     manifests, e.g. ConfigMap, or *)"
                ))
            }
        };
        let (group, version) = match left {
            "*" => (Group::Any, None),
            "v1" | "core" => (Group::Named(String::new()), Some("v1".to_owned())),
            l if is_version(l) => {
                return Err(format!(
                    "{text:?} cannot match: the core group has only version v1"
                ))
            }
            l => match l.split_once('/') {
                Some((g, v)) if is_group(g) && is_version(v) => {
                    (Group::Named(g.to_owned()), Some(v.to_owned()))
                }
                Some(_) => return Err(format!("{text:?} {usage}")),
                None if is_group(l) => (Group::Named(l.to_owned()), None),
                None => return Err(format!("{text:?} {usage}")),
            },
        };
        Ok(KindPattern {
            text: text.to_owned(),
            group,
            version,
            kind,
        })
    }

    /// Whether an object of `api_version` and `kind` matches.
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        let (g, v) = split_api_version(api_version);
        (match &self.group {
            Group::Any => true,
            Group::Named(n) => n == g,
        }) && self.version.as_deref().is_none_or(|want| want == v)
            && self.kind.as_deref().is_none_or(|want| want == kind)
    }

    /// Whether every object this pattern matches, `other` matches too.
    pub fn covers(&self, other: &KindPattern) -> bool {
        let group = match (&self.group, &other.group) {
            (Group::Any, _) => true,
            (Group::Named(a), Group::Named(b)) => a == b,
            (Group::Named(_), Group::Any) => false,
        };
        let version = match (&self.version, &other.version) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        let kind = match (&self.kind, &other.kind) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        group && version && kind
    }

    /// The kind, when the pattern names one built-in cluster-scoped kind exactly.
    pub fn names_cluster_scoped(&self) -> Option<&str> {
        match (&self.group, &self.kind) {
            (Group::Named(g), Some(k)) if known_cluster_scoped(g, k) => Some(k),
            _ => None,
        }
    }
}

impl fmt::Display for KindPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// The kinds a source may manage: allowed by one of `allow`, denied by none of `deny`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindSet {
    pub allow: Vec<KindPattern>,
    pub deny: Vec<KindPattern>,
}

impl KindSet {
    /// From a source's rules and the admin's deny list (`None` allow: [`DEFAULT_ALLOW`]).
    /// Patterns were validated when configured; one that no longer parses denies
    /// everything rather than nothing.
    pub fn new(allow: Option<&[String]>, deny: &[String], policy_deny: &[String]) -> KindSet {
        let parse_all = |list: &mut dyn Iterator<Item = &str>| -> Result<Vec<_>, String> {
            list.map(KindPattern::parse).collect()
        };
        let allow = match allow {
            Some(a) => parse_all(&mut a.iter().map(String::as_str)),
            None => parse_all(&mut DEFAULT_ALLOW.iter().copied()),
        };
        let deny = parse_all(&mut deny.iter().chain(policy_deny).map(String::as_str));
        match (allow, deny) {
            (Ok(allow), Ok(deny)) => KindSet { allow, deny },
            _ => KindSet {
                allow: vec![],
                deny: vec![],
            },
        }
    }

    /// `Ok` when the kind may be managed, else why not.
    pub fn permits(&self, api_version: &str, kind: &str) -> Result<(), String> {
        if let Some(d) = self.deny.iter().find(|d| d.matches(api_version, kind)) {
            return Err(format!("{api_version} {kind} is denied ({d})"));
        }
        if self.allow.iter().any(|a| a.matches(api_version, kind)) {
            Ok(())
        } else {
            Err(format!(
                "{api_version} {kind} is not among the kinds this source may manage"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> KindPattern {
        KindPattern::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn patterns_match_groups_versions_and_kinds() {
        assert!(p("apps/*").matches("apps/v1", "Deployment"));
        assert!(!p("apps/*").matches("v1", "ConfigMap"));
        assert!(p("v1/ConfigMap").matches("v1", "ConfigMap"));
        assert!(p("core/ConfigMap").matches("v1", "ConfigMap"));
        assert!(!p("v1/ConfigMap").matches("v1", "Secret"));
        assert!(p("networking.k8s.io/v1/Ingress").matches("networking.k8s.io/v1", "Ingress"));
        assert!(!p("networking.k8s.io/v1beta1/Ingress").matches("networking.k8s.io/v1", "Ingress"));
        assert!(p("*/*").matches("example.com/v1alpha1", "Widget"));
        assert!(p("*/Secret").matches("v1", "Secret"));
    }

    #[test]
    fn patterns_that_cannot_match_are_refused_naming_why() {
        for (bad, why) in [
            ("ConfigMap", "must be"),
            ("apps/deployment", "is not a kind"),
            ("v2/Pod", "only version v1"),
            ("Apps/*", "must be"),
            ("apps/v1x/Deployment", "must be"),
            ("apps/", "is not a kind"),
            ("/Pod", "must be"),
        ] {
            let e = KindPattern::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn coverage_is_set_inclusion() {
        assert!(p("*/*").covers(&p("rbac.authorization.k8s.io/*")));
        assert!(p("rbac.authorization.k8s.io/*").covers(&p("rbac.authorization.k8s.io/v1/Role")));
        assert!(!p("rbac.authorization.k8s.io/v1/Role").covers(&p("rbac.authorization.k8s.io/*")));
        assert!(!p("apps/*").covers(&p("*/*")));
        assert!(p("v1/*").covers(&p("core/Secret")));
    }

    #[test]
    fn deny_wins_and_the_default_allows_workloads_not_rbac() {
        let set = KindSet::new(None, &["v1/Secret".into()], &[]);
        assert!(set.permits("apps/v1", "Deployment").is_ok());
        assert!(set.permits("v1", "ConfigMap").is_ok());
        let e = set.permits("v1", "Secret").unwrap_err();
        assert!(e.contains("denied (v1/Secret)"), "{e}");
        let e = set
            .permits("rbac.authorization.k8s.io/v1", "ClusterRole")
            .unwrap_err();
        assert!(e.contains("not among"), "{e}");
        let policy = KindSet::new(
            Some(&["*/*".into()]),
            &[],
            &["rbac.authorization.k8s.io/*".into()],
        );
        assert!(policy
            .permits("rbac.authorization.k8s.io/v1", "Role")
            .is_err());
        assert!(policy.permits("example.com/v1", "Widget").is_ok());
    }
}
