//! Credentials for a project's Git repository: what the API accepts (write-only), what the
//! server keeps sealed, and what a workspace's credential helper and the server's reads use.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Username sent with a bare token when none is given: forges accept any username with a
/// token (GitLab documents `oauth2`, GitHub and Gitea ignore it).
pub const DEFAULT_TOKEN_USERNAME: &str = "oauth2";

/// How Warren authenticates to a project's repository. Never returned by the API, never
/// logged (`Debug` shows the kind only).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GitCredential {
    /// An access token over HTTPS (sent as the password).
    Token {
        token: String,
        /// Sent as the username; `oauth2` when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        username: Option<String>,
    },
    /// A username and password over HTTPS.
    Basic { username: String, password: String },
    /// A private key for `ssh://` and `user@host:path` URLs (OpenSSH format).
    SshKey {
        private_key: String,
        /// `known_hosts` lines for the server; without them the first key seen is trusted.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        known_hosts: Option<String>,
    },
}

impl std::fmt::Debug for GitCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GitCredential::{}", self.kind())
    }
}

impl GitCredential {
    /// `token`, `basic` or `ssh_key`: what the API shows of a stored credential.
    pub fn kind(&self) -> &'static str {
        match self {
            GitCredential::Token { .. } => "token",
            GitCredential::Basic { .. } => "basic",
            GitCredential::SshKey { .. } => "ssh_key",
        }
    }

    /// The HTTPS username and password, for credential helpers; `None` for SSH keys.
    pub fn username_password(&self) -> Option<(&str, &str)> {
        match self {
            GitCredential::Token { token, username } => Some((
                username.as_deref().unwrap_or(DEFAULT_TOKEN_USERNAME),
                token.as_str(),
            )),
            GitCredential::Basic { username, password } => Some((username, password)),
            GitCredential::SshKey { .. } => None,
        }
    }

    /// Checks the fields; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let line = |field: &str, v: &str, max: usize| -> Result<(), String> {
            if v.is_empty() {
                return Err(format!("{field}: must not be empty"));
            }
            if v.len() > max {
                return Err(format!("{field}: at most {max} bytes"));
            }
            if v.chars().any(|c| c.is_control()) {
                return Err(format!(
                    "{field}: must be one line without control characters"
                ));
            }
            Ok(())
        };
        match self {
            GitCredential::Token { token, username } => {
                line("token", token, 4096)?;
                if let Some(u) = username {
                    line("username", u, 256)?;
                }
            }
            GitCredential::Basic { username, password } => {
                line("username", username, 256)?;
                line("password", password, 4096)?;
            }
            GitCredential::SshKey {
                private_key,
                known_hosts,
            } => {
                let key = private_key.trim();
                if !(key.starts_with("-----BEGIN ") && key.contains("PRIVATE KEY-----")) {
                    return Err(
                        "private_key: must be a private key in OpenSSH or PEM format \
                         (-----BEGIN … PRIVATE KEY-----)"
                            .into(),
                    );
                }
                if private_key.len() > 64 * 1024 {
                    return Err("private_key: at most 64 KiB".into());
                }
                if known_hosts.as_ref().is_some_and(|k| k.len() > 64 * 1024) {
                    return Err("known_hosts: at most 64 KiB".into());
                }
            }
        }
        Ok(())
    }
}

/// Checks a branch, tag or commit id as Warren accepts them (no option-like, ranged or
/// wildcard forms); the message quotes the ref.
pub fn validate_ref(r: &str) -> Result<(), String> {
    let ok = !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.contains("..")
        && r.chars()
            .all(|c| c.is_ascii_graphic() && !"~^:?*[\\".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{r:?} is not a valid git ref"))
    }
}

/// Where a repository opened without a project is looked in for its devfile, in order (a dev
/// container configuration is looked for after these).
pub const DEVFILE_LOCATIONS: [&str; 4] = [
    ".devfile.yaml",
    "devfile.yaml",
    ".devfile.yml",
    "devfile.yml",
];

/// `URL#REF` as users write a repository with a branch, tag or commit (`warren ws create
/// --repo`, the web UI's `/new?repo=`): the URL, and the ref when a non-empty one follows
/// the last `#` (a Git URL has no fragment of its own).
///
/// The address of a branch or tag as a forge's web pages show it, which users copy from the
/// address bar, is taken too: `https://HOST/OWNER/REPO/tree/REF` (GitHub and GitHub
/// Enterprise), `…/-/tree/REF` (GitLab, in subgroups too) and `…/src/branch/REF`,
/// `…/src/tag/REF`, `…/src/commit/REF` (Gitea, Forgejo) become the repository's URL and the
/// ref. Everything after the marker is the ref (`tree/feature/x` is `feature/x`): a forge
/// shows a folder of a branch the same way, and such a ref then fails to resolve, naming it.
pub fn split_repository_ref(s: &str) -> (&str, Option<&str>) {
    let (url, r) = match s.rsplit_once('#') {
        Some((url, r)) if !r.is_empty() => (url, Some(r)),
        Some((url, _)) => (url, None),
        None => (s, None),
    };
    match (r, browser_ref(url)) {
        (None, Some((url, r))) => (url, Some(r)),
        _ => (url, r),
    }
}

/// A forge's web address of a ref (see [`split_repository_ref`]) as the repository's URL and
/// the ref; `None` for anything else, a clone URL ending in `.git` included.
fn browser_ref(url: &str) -> Option<(&str, &str)> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let path_at = rest.find('/')?;
    let path = &rest[path_at..];
    let base = url.len() - rest.len() + path_at;
    let found = |marker: &str| {
        path.find(marker).map(|at| {
            let r = path[at + marker.len()..].trim_end_matches('/');
            (&url[..base + at], r)
        })
    };
    let (repo, r) = found("/-/tree/")
        .or_else(|| found("/src/branch/"))
        .or_else(|| found("/src/tag/"))
        .or_else(|| found("/src/commit/"))
        .or_else(|| {
            // GitHub: exactly OWNER/REPO before `tree`.
            let mut segments = path.splitn(5, '/').skip(1);
            let (owner, repo, tree) = (segments.next()?, segments.next()?, segments.next()?);
            (!owner.is_empty() && !repo.is_empty() && tree == "tree").then(|| {
                let prefix = 1 + owner.len() + 1 + repo.len();
                let r = segments.next().unwrap_or_default().trim_end_matches('/');
                (&url[..base + prefix], r)
            })
        })?;
    let plain_repo = !repo.ends_with(".git") && !repo.ends_with('/');
    (plain_repo && !r.is_empty()).then_some((repo, r))
}

/// The folder under `/projects` a repository opened without a project is cloned into: the
/// last segment of its path without `.git`, as a DNS label (`My_Repo.git` → `my-repo`), and
/// `repository` when nothing usable is left.
pub fn repository_folder(url: &str) -> String {
    let path = url.trim_end_matches('/');
    let last = path
        .rsplit(['/', ':'])
        .next()
        .unwrap_or_default()
        .trim_end_matches(".git");
    let mut label = String::new();
    for c in last.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && (label.is_empty() || label.ends_with('-'))) {
            label.push(c);
        }
        if label.len() == 63 {
            break;
        }
    }
    let label = label.trim_end_matches('-');
    if label.is_empty() {
        "repository".to_owned()
    } else {
        label.to_owned()
    }
}

/// The host a user's own Git credential is for, as Warren matches it to a repository's URL:
/// `https://host[:port]` or `http://host[:port]` (an HTTP origin, for a token or password),
/// `ssh://host[:port]` (for a private key; `user@host:path` is `ssh://host`). Takes a
/// repository URL or the host alone in one of those forms; the user, path and case of the
/// host are left out.
pub fn credential_host(url: &str) -> Result<String, String> {
    let url = url.trim();
    let bad = || format!("{url:?} is not an https://, http:// or ssh:// host or repository URL");
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        // `user@host:path`, as scp and Git write SSH remotes.
        None => match url.split_once(':') {
            Some((user_host, _)) if user_host.contains('@') && !user_host.contains('/') => {
                ("ssh".to_owned(), user_host)
            }
            _ => return Err(bad()),
        },
    };
    if !matches!(scheme.as_str(), "https" | "http" | "ssh") {
        return Err(bad());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    // A name or an IPv4 address (an IPv6 literal is not taken).
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    let name_ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.".contains(c));
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    if !name_ok || !port_ok {
        return Err(bad());
    }
    let mut out = format!("{scheme}://{}", name.to_ascii_lowercase());
    if let Some(p) = port {
        out.push(':');
        out.push_str(p);
    }
    Ok(out)
}

impl GitCredential {
    /// Whether this kind of credential is used for `host` (a [`credential_host`]): a key for
    /// SSH, a token or password for HTTP(S).
    pub fn fits(&self, host: &str) -> bool {
        matches!(self, GitCredential::SshKey { .. }) == host.starts_with("ssh://")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn credential_hosts_match_repository_urls() {
        for (url, host) in [
            (
                "https://Git.Example.com/acme/app.git",
                "https://git.example.com",
            ),
            ("https://git.example.com", "https://git.example.com"),
            ("http://127.0.0.1:8080/app", "http://127.0.0.1:8080"),
            (
                "https://ann@git.example.com:8443/x",
                "https://git.example.com:8443",
            ),
            (
                "ssh://git@git.example.com:2222/acme/app.git",
                "ssh://git.example.com:2222",
            ),
            ("git@github.com:acme/app.git", "ssh://github.com"),
        ] {
            assert_eq!(super::credential_host(url).as_deref(), Ok(host), "{url}");
        }
        for bad in [
            "git.example.com",
            "file:///etc",
            "ftp://x",
            "https://",
            "https://a b/",
            "/etc/passwd",
            "https://h:99999999/",
        ] {
            assert!(super::credential_host(bad).is_err(), "{bad}");
        }
    }

    use super::*;

    #[test]
    fn repositories_are_split_from_their_ref_and_named_as_folders() {
        assert_eq!(
            split_repository_ref("https://git.example/a/b.git#feature/x"),
            ("https://git.example/a/b.git", Some("feature/x"))
        );
        assert_eq!(
            split_repository_ref("git@host:a/b.git"),
            ("git@host:a/b.git", None)
        );
        assert_eq!(split_repository_ref("https://h/r#"), ("https://h/r", None));
        // Addresses copied from a forge's web pages.
        for (address, url, r) in [
            (
                "https://github.com/org/app/tree/main",
                "https://github.com/org/app",
                "main",
            ),
            (
                "https://github.com/org/app/tree/feature/x/",
                "https://github.com/org/app",
                "feature/x",
            ),
            (
                "https://gitlab.example/group/sub/app/-/tree/v1.2",
                "https://gitlab.example/group/sub/app",
                "v1.2",
            ),
            (
                "http://gitea.example:3000/org/app/src/branch/dev",
                "http://gitea.example:3000/org/app",
                "dev",
            ),
            (
                "https://codeberg.org/org/app/src/tag/v2",
                "https://codeberg.org/org/app",
                "v2",
            ),
        ] {
            assert_eq!(split_repository_ref(address), (url, Some(r)), "{address}");
        }
        for kept in [
            // A ref after `#` wins; the path is the repository's.
            "https://github.com/org/app/tree/main#v1",
            // Clone URLs, and paths that are not a ref's page.
            "https://github.com/org/app.git",
            "https://github.com/org/app",
            "https://git.example/a/b/c/tree/main",
            "https://github.com/org/app/tree/",
            "https://github.com/org/app.git/tree/main",
            "git@github.com:org/app/tree/main",
            "ssh://git@host/org/app/-/tree/main",
        ] {
            let (url, r) = split_repository_ref(kept);
            let expected = kept.rsplit_once('#').map_or(kept, |(u, _)| u);
            assert_eq!(url, expected, "{kept}");
            assert_eq!(r.is_some(), kept.contains('#'), "{kept}");
        }
        for (url, folder) in [
            ("https://git.example/org/My_Repo.git", "my-repo"),
            ("https://git.example/org/app/", "app"),
            ("git@host:team/api.server.git", "api-server"),
            ("ssh://git@host:2222/x/--odd--", "odd"),
            ("https://git.example/.git", "repository"),
            ("https://host/Ünïcode", "n-code"),
        ] {
            assert_eq!(repository_folder(url), folder, "{url}");
        }
        assert_eq!(
            repository_folder(&format!("https://h/{}", "a".repeat(100))).len(),
            63
        );
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let c = GitCredential::Basic {
            username: "ann".into(),
            password: "hunter2-secret".into(),
        };
        assert_eq!(format!("{c:?}"), "GitCredential::basic");
    }

    #[test]
    fn wire_form_and_validation() {
        let c: GitCredential =
            serde_json::from_str(r#"{"kind": "token", "token": "glpat-abc"}"#).unwrap();
        assert_eq!(c.username_password(), Some(("oauth2", "glpat-abc")));
        assert!(serde_json::from_str::<GitCredential>(r#"{"kind": "token"}"#).is_err());
        assert!(serde_json::from_str::<GitCredential>(
            r#"{"kind": "token", "token": "a", "x": 1}"#
        )
        .is_err());
        let bad = GitCredential::Token {
            token: "a\nb".into(),
            username: None,
        };
        assert!(bad.validate().unwrap_err().starts_with("token:"));
        let key = GitCredential::SshKey {
            private_key: "not a key".into(),
            known_hosts: None,
        };
        assert!(key.validate().unwrap_err().starts_with("private_key:"));
    }
}
