//! Workspace-scoped image names: what the images a workspace builds are called on a shared
//! engine.
//!
//! An engine's image names are global: a build tagged with the name a devfile asks for
//! (`imageName`) would replace whatever another workspace — or the editor's tools volume —
//! runs under that name. So a build is tagged only with a name of its workspace's own,
//!
//! ```text
//! localhost/warren-ws/<registry>/<repository path>/<workspace>.<workspace id>.<key>:<tag>
//! ```
//!
//! where `<registry>/<repository path>` is the requested name normalised as Docker does
//! (`myapp` is `docker.io/library/myapp`, a registry port's `:` becomes `_`), the tag is the
//! requested one, and `<key>` is 16 hex digits of a SHA-256 over the agent's owner id, the
//! workspace's name and id. The last component is the agent's, never the request's: the
//! name (a DNS label, so without `.`) and the id (digits) differ between any two live
//! workspaces of an installation, and a request only decides what comes before it, so no
//! request can produce another workspace's name. The key keeps installations sharing an
//! engine apart, and the id a new workspace that reuses a deleted one's name.
//!
//! The key comes last, and is unguessable to users (they never see the owner id), because
//! engines resolve short names loosely: Podman's `myapp:dev` finds any local image named
//! `…/myapp:dev`, for a container and for a Dockerfile's `FROM` alike. Only a name ending in
//! the key can match a build that way. For containers the agent does not rely on names: the
//! image carries [`BUILD_SCOPE_LABEL`], checked on the image a container was actually created
//! from (`containers`), so another workspace never runs it, however it learned the name.

use sha2::{Digest, Sha256};

/// Label of an image a workspace built: the namespace ([`BuildScope::label`]) it belongs to.
pub const BUILD_SCOPE_LABEL: &str = "warren.dev/build-scope";
/// Label of an image a workspace built: the workspace's name. Builds before
/// [`BUILD_SCOPE_LABEL`] existed carry only this one (and the name they were asked for).
pub const BUILT_FOR_LABEL: &str = "warren.dev/built-for";
/// Label of an image a workspace built: the build's key (`warren_types::relay::BUILD_KEY_HEADER`)
/// when built at start, else empty — always set by the agent, so a Dockerfile's own `LABEL`
/// can never claim a key.
pub const BUILD_KEY_LABEL: &str = "warren.dev/build-key";
/// Where every build's name starts.
pub const SCOPE_ROOT: &str = "localhost/warren-ws";
/// Longest repository name an engine accepts (the distribution specification's limit).
pub(super) const MAX_NAME_LEN: usize = 255;

/// Why a requested image name has no workspace-scoped form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScopeError {
    #[error("{image:?} is not a valid image name: {reason}")]
    Invalid { image: String, reason: String },
    #[error("{image:?} names a digest; a build can only be given a name and tag")]
    Digest { image: String },
    #[error(
        "{image:?} is too long: this workspace's name for it would have {len} characters, \
         more than the {MAX_NAME_LEN} an engine accepts"
    )]
    TooLong { image: String, len: usize },
}

/// The image names of one workspace on one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildScope {
    /// `<workspace>[.<id>].<key>`: the last path component of each of its names.
    component: String,
}

impl BuildScope {
    /// The names of workspace `name` (a DNS label) with database id `id` (its
    /// `warren.dev/workspace-id` label; ids that are not plain digits are left out) for the
    /// installation `owner`.
    pub fn new(owner: &str, name: &str, id: Option<&str>) -> BuildScope {
        let id =
            id.filter(|i| !i.is_empty() && i.len() <= 20 && i.bytes().all(|b| b.is_ascii_digit()));
        let mut hasher = Sha256::new();
        for part in ["warren build scope", owner, name, id.unwrap_or("")] {
            hasher.update(part.as_bytes());
            hasher.update([0]);
        }
        let key = hex::encode(&hasher.finalize()[..8]);
        let component = match id {
            Some(id) => format!("{name}.{id}.{key}"),
            None => format!("{name}.{key}"),
        };
        BuildScope { component }
    }

    /// The value of [`BUILD_SCOPE_LABEL`] on this workspace's images.
    pub fn label(&self) -> &str {
        &self.component
    }

    /// Whether `image` (`name:tag`) is one of this workspace's names.
    pub fn owns(&self, image: &str) -> bool {
        let name = match image.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => n,
            _ => image,
        };
        name.starts_with(&format!("{SCOPE_ROOT}/"))
            && name.ends_with(&format!("/{}", self.component))
    }

    /// The name this workspace's build of `requested` gets, and which this workspace's
    /// containers naming `requested` run.
    pub fn image_for(&self, requested: &str) -> Result<String, ScopeError> {
        let r = Reference::parse(requested)?;
        if r.digest {
            return Err(ScopeError::Digest {
                image: requested.to_owned(),
            });
        }
        let name = format!(
            "{SCOPE_ROOT}/{}/{}/{}",
            r.domain.replace(':', "_"),
            r.path,
            self.component
        );
        if name.len() > MAX_NAME_LEN {
            return Err(ScopeError::TooLong {
                image: requested.to_owned(),
                len: name.len(),
            });
        }
        Ok(format!("{name}:{}", r.tag))
    }

    /// Why an image with `labels` must not run in this workspace (`workspace` is its name):
    /// another workspace built it. `None` for an image no workspace built, or this one.
    pub fn foreign<'a>(
        &self,
        workspace: &str,
        mut labels: impl FnMut(&str) -> Option<&'a str>,
    ) -> Option<String> {
        match (labels(BUILD_SCOPE_LABEL), labels(BUILT_FOR_LABEL)) {
            (Some(scope), _) if scope != self.component => {
                Some(format!("it was built by another workspace ({scope})"))
            }
            (Some(_), _) => None,
            // Built before builds were scoped, under whatever name was asked for: the name
            // may be one another workspace took over.
            (None, Some(w)) if w != workspace => Some(format!(
                "it was built by workspace {w} under a name it did not own"
            )),
            _ => None,
        }
    }
}

/// Why the shared tools volume must not be filled from an image with `labels`: a workspace
/// built it (before builds were scoped, a build could take the tools image's name).
pub fn built_by_workspace<'a>(mut labels: impl FnMut(&str) -> Option<&'a str>) -> Option<String> {
    labels(BUILD_SCOPE_LABEL)
        .or_else(|| labels(BUILT_FOR_LABEL))
        .map(|w| format!("it was built by workspace {w}"))
}

/// An image reference, normalised as Docker does.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    /// Lowercase registry host, with its port.
    domain: String,
    /// The repository path (`library/python`).
    path: String,
    tag: String,
    digest: bool,
}

impl Reference {
    fn parse(image: &str) -> Result<Reference, ScopeError> {
        let invalid = |reason: &str| ScopeError::Invalid {
            image: image.to_owned(),
            reason: reason.to_owned(),
        };
        let (name_tag, digest) = match image.split_once('@') {
            Some((n, d)) => {
                if !is_digest(d) {
                    return Err(invalid("the digest after `@` is malformed"));
                }
                (n, true)
            }
            None => (image, false),
        };
        let (name, tag) = match name_tag.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => (n, Some(t)),
            _ => (name_tag, None),
        };
        if let Some(t) = tag {
            if !is_tag(t) {
                return Err(invalid("the tag must be 1-128 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`"));
            }
        }
        let (domain, path) = match name.split_once('/') {
            // Docker's rule: a first component with a `.` or `:`, `localhost`, or an upper
            // case letter names a registry.
            Some((first, rest))
                if first.contains(['.', ':'])
                    || first == "localhost"
                    || first.bytes().any(|b| b.is_ascii_uppercase()) =>
            {
                (first.to_ascii_lowercase(), rest.to_owned())
            }
            _ => ("docker.io".to_owned(), name.to_owned()),
        };
        let domain = if domain == "index.docker.io" {
            "docker.io".to_owned()
        } else {
            domain
        };
        if !is_domain(&domain) {
            return Err(invalid("the registry host is malformed"));
        }
        let path = if domain == "docker.io" && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        if path.is_empty() || !path.split('/').all(is_path_component) {
            return Err(invalid(
                "each part of the repository path must be lowercase letters and digits, \
                 joined by `.`, `_`, `__` or dashes",
            ));
        }
        Ok(Reference {
            domain,
            path,
            tag: tag.unwrap_or("latest").to_owned(),
            digest,
        })
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
pub(super) fn is_path_component(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &s[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-')) {
            return false;
        }
    }
    true
}

/// `[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`
fn is_tag(t: &str) -> bool {
    let ok = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'-';
    !t.is_empty() && t.len() <= 128 && t.bytes().all(ok) && !t.starts_with(['.', '-'])
}

/// A host name or IPv4 address (lowercase), with an optional numeric port; once its `:` is
/// `_`, a valid path component.
pub(super) fn is_domain(d: &str) -> bool {
    let (host, port) = match d.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (d, None),
    };
    port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        && host.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// `<algorithm>:<hex>`, as far as it matters here.
fn is_digest(d: &str) -> bool {
    d.split_once(':').is_some_and(|(alg, hex)| {
        !alg.is_empty()
            && alg
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"+._-".contains(&b))
            && hex.len() >= 32
            && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> BuildScope {
        BuildScope::new("0123456789abcdef", "brave-otter-1a2b", Some("42"))
    }

    /// `name:tag` → (name, tag).
    fn split(image: &str) -> (&str, &str) {
        image.rsplit_once(':').expect("a tag")
    }

    #[test]
    fn names_are_normalised_and_end_in_the_workspace() {
        let s = scope();
        assert!(s.label().starts_with("brave-otter-1a2b.42."));
        assert_eq!(s.label().len(), "brave-otter-1a2b.42.".len() + 16);
        for (requested, path, tag) in [
            ("myapp:dev", "docker.io/library/myapp", "dev"),
            ("myapp", "docker.io/library/myapp", "latest"),
            (
                "docker.io/library/python:3.12-slim",
                "docker.io/library/python",
                "3.12-slim",
            ),
            (
                "index.docker.io/library/python:3.12-slim",
                "docker.io/library/python",
                "3.12-slim",
            ),
            ("python:3.12-slim", "docker.io/library/python", "3.12-slim"),
            ("me/app:1", "docker.io/me/app", "1"),
            (
                "localhost/warren-test:latest",
                "localhost/warren-test",
                "latest",
            ),
            (
                "localhost/warren-tools:code-server-4.100.3",
                "localhost/warren-tools",
                "code-server-4.100.3",
            ),
            (
                "Registry.Example:5000/team/app:v1",
                "registry.example_5000/team/app",
                "v1",
            ),
            ("quay.io/a/b/c__d:x_Y.1-2", "quay.io/a/b/c__d", "x_Y.1-2"),
        ] {
            let image = s.image_for(requested).unwrap();
            assert_eq!(
                image,
                format!("{SCOPE_ROOT}/{path}/{}:{tag}", s.label()),
                "{requested}"
            );
            assert!(s.owns(&image), "{image}");
        }
        assert!(!s.owns("localhost/warren-test:latest"));
        assert!(!s.owns(&format!("docker.io/library/x/{}:1", s.label())));
    }

    #[test]
    fn digests_and_invalid_names_are_refused() {
        let s = scope();
        let digest = format!("python@sha256:{}", "a".repeat(64));
        assert!(matches!(
            s.image_for(&digest),
            Err(ScopeError::Digest { .. })
        ));
        for bad in [
            "",
            "UPPER",
            "a//b",
            "-a:1",
            "a:-1",
            "a:",
            "a b",
            "[::1]:5000/a",
            "reg:port/a",
            "a@sha256:xyz",
            "a/../b",
        ] {
            assert!(
                matches!(s.image_for(bad), Err(ScopeError::Invalid { .. })),
                "{bad:?}: {:?}",
                s.image_for(bad)
            );
        }
        let long = format!("a/{}", "b".repeat(220));
        assert!(matches!(
            s.image_for(&long),
            Err(ScopeError::TooLong { .. })
        ));
    }

    /// Whatever a workspace asks for, its name ends in its own component, which differs
    /// between workspaces: no request produces another workspace's name.
    #[test]
    fn no_request_produces_another_workspaces_name() {
        let a = BuildScope::new("owner", "alpha", Some("1"));
        let b = BuildScope::new("owner", "beta", Some("2"));
        let a_later = BuildScope::new("owner", "alpha", Some("3"));
        let elsewhere = BuildScope::new("other-owner", "alpha", Some("1"));
        let no_id = BuildScope::new("owner", "alpha", None);
        let all = [&a, &b, &a_later, &elsewhere, &no_id];
        for (i, x) in all.iter().enumerate() {
            for y in &all[i + 1..] {
                assert_ne!(x.label(), y.label());
            }
        }
        let bs = b.image_for("x:1").unwrap();
        let (b_name, _) = split(&bs);
        for requested in [
            "x:1".to_owned(),
            bs.clone(),
            b_name.to_owned(),
            format!("{}:1", b_name.trim_start_matches("localhost/")),
            format!("{b_name}/y:1"),
        ] {
            let name = a.image_for(&requested).unwrap();
            assert!(a.owns(&name) && !b.owns(&name), "{requested} → {name}");
            assert_ne!(name, bs);
        }
        // Deterministic: the same workspace gets the same names after an agent restart.
        assert_eq!(BuildScope::new("owner", "alpha", Some("1")), a);
        assert_eq!(
            BuildScope::new("owner", "alpha", Some("not-digits")),
            no_id,
            "an id that is not digits is left out"
        );
    }

    #[test]
    fn scoped_names_are_valid_references() {
        let s = BuildScope::new("o", "w", Some("9"));
        let name = s.image_for("Reg.Example:443/a-b/c.d:t").unwrap();
        let reparsed = Reference::parse(&name).unwrap();
        assert_eq!(reparsed.domain, "localhost");
        assert_eq!(reparsed.tag, "t");
        assert!(reparsed.path.ends_with(s.label()));
    }

    #[test]
    fn foreign_builds_are_told_apart_by_their_labels() {
        let s = scope();
        let check = |pairs: &[(&str, &str)]| {
            let labels: std::collections::HashMap<String, String> = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            s.foreign("brave-otter-1a2b", |k| labels.get(k).map(String::as_str))
        };
        assert_eq!(check(&[]), None, "an image no workspace built");
        assert_eq!(check(&[(BUILD_SCOPE_LABEL, s.label())]), None);
        assert!(check(&[(BUILD_SCOPE_LABEL, "other.1.abc")]).is_some());
        assert!(check(&[(BUILT_FOR_LABEL, "someone-else")]).is_some());
        assert_eq!(check(&[(BUILT_FOR_LABEL, "brave-otter-1a2b")]), None);
        assert!(built_by_workspace(|k| (k == BUILT_FOR_LABEL).then_some("x")).is_some());
        assert!(built_by_workspace(|_| None).is_none());
    }
}
