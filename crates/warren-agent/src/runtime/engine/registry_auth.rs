//! Registry credentials for pulls on the engine, from the workspace's image pull secrets.
//!
//! On Kubernetes an image pull secret is a Secret of type `kubernetes.io/dockerconfigjson`;
//! an engine has no Secrets, so the agent keeps each one as a file of the same format in its
//! pull-secrets directory, `<dir>/<name>.json` — what `podman login --authfile FILE` or
//! `docker login` (`~/.docker/config.json`) writes. The names come from the ServiceAccount's
//! (or the pod's) `imagePullSecrets`, which the server renders from the agent configuration's
//! `image_pull_secrets`.

use base64::Engine;
use bollard::auth::DockerCredentials;
use std::path::Path;

/// The registry host of an image reference, as registries key their credentials: the first
/// path component when it names a host (a `.` or `:` in it, or `localhost`), else Docker
/// Hub.
pub fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first.to_owned()
        }
        _ => "docker.io".to_owned(),
    }
}

/// What the pull secrets say for `image`'s registry: the credentials, and the names that were
/// asked for but have no file (said in a failed pull's message).
#[derive(Debug, Default)]
pub struct Lookup {
    pub credentials: Option<DockerCredentials>,
    pub missing: Vec<String>,
    /// Files that exist but cannot be read or parsed, with why.
    pub unreadable: Vec<String>,
}

/// Looks the image's registry up in the named pull secrets, in order.
pub fn lookup(dir: &Path, names: &[String], image: &str) -> Lookup {
    let registry = registry_of(image);
    let mut out = Lookup::default();
    for name in names {
        // Names are Kubernetes object names (checked by the server); never a path.
        if name.contains('/') || name.starts_with('.') {
            out.unreadable.push(format!("{name}: not a valid name"));
            continue;
        }
        let path = dir.join(format!("{name}.json"));
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.missing.push(name.clone());
                continue;
            }
            Err(e) => {
                out.unreadable.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        match credentials_in(&text, &registry) {
            Ok(Some(c)) if out.credentials.is_none() => out.credentials = Some(c),
            Ok(_) => {}
            Err(e) => out.unreadable.push(format!("{}: {e}", path.display())),
        }
    }
    out
}

/// The entry of `registry` in a `{"auths": {...}}` document.
pub fn credentials_in(text: &str, registry: &str) -> Result<Option<DockerCredentials>, String> {
    let doc: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let auths = doc
        .get("auths")
        .and_then(|a| a.as_object())
        .ok_or("no \"auths\" object (expected what `podman login --authfile` writes)")?;
    let hub = registry == "docker.io";
    let entry = auths.iter().find(|(key, _)| {
        let host = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or("");
        host == registry || (hub && matches!(host, "index.docker.io" | "registry-1.docker.io"))
    });
    let Some((_, entry)) = entry else {
        return Ok(None);
    };
    let field = |k: &str| entry.get(k).and_then(|v| v.as_str()).map(str::to_owned);
    let (username, password) = match field("auth") {
        Some(auth) => {
            let plain = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|_| format!("the \"auth\" of {registry} is not base64"))?;
            let plain = String::from_utf8(plain)
                .map_err(|_| format!("the \"auth\" of {registry} is not text"))?;
            let (u, p) = plain
                .split_once(':')
                .ok_or_else(|| format!("the \"auth\" of {registry} is not user:password"))?;
            (u.to_owned(), p.to_owned())
        }
        None => match (field("username"), field("password")) {
            (Some(u), Some(p)) => (u, p),
            _ => return Err(format!("the entry of {registry} has no auth")),
        },
    };
    Ok(Some(DockerCredentials {
        username: Some(username),
        password: Some(password),
        serveraddress: Some(registry.to_owned()),
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_of_references() {
        assert_eq!(registry_of("quay.io/devfile/udi:latest"), "quay.io");
        assert_eq!(registry_of("127.0.0.1:5000/team/app"), "127.0.0.1:5000");
        assert_eq!(registry_of("localhost/warren-test:latest"), "localhost");
        assert_eq!(registry_of("python:3.12"), "docker.io");
        assert_eq!(registry_of("library/python"), "docker.io");
    }

    #[test]
    fn auth_files_as_login_writes_them() {
        let dir = tempfile::tempdir().unwrap();
        let auth = base64::engine::general_purpose::STANDARD.encode("ann:s3cret");
        std::fs::write(
            dir.path().join("regcred.json"),
            format!(r#"{{"auths": {{"127.0.0.1:5000": {{"auth": "{auth}"}}}}}}"#),
        )
        .unwrap();
        std::fs::write(dir.path().join("broken.json"), "{").unwrap();
        let names = vec!["gone".to_owned(), "broken".to_owned(), "regcred".to_owned()];
        let l = lookup(dir.path(), &names, "127.0.0.1:5000/team/app:1");
        let c = l.credentials.expect("credentials");
        assert_eq!(
            (c.username.as_deref(), c.password.as_deref()),
            (Some("ann"), Some("s3cret"))
        );
        assert_eq!(l.missing, vec!["gone".to_owned()]);
        assert_eq!(l.unreadable.len(), 1, "{:?}", l.unreadable);
        let other = lookup(dir.path(), &names, "quay.io/x/y");
        assert!(other.credentials.is_none());
        let hub =
            r#"{"auths": {"https://index.docker.io/v1/": {"username": "u", "password": "p"}}}"#;
        assert_eq!(
            credentials_in(hub, "docker.io")
                .unwrap()
                .unwrap()
                .password
                .as_deref(),
            Some("p")
        );
    }
}
