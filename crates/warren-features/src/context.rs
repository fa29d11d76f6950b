//! A Feature's files, checked, and the build context that installs Features on an image.
//!
//! The context is a tar archive Warren writes itself, so what reaches the engine is only
//! plain files and folders with paths inside the context: a Feature's archive with a link, a
//! device, an absolute path or `..` is refused rather than handed on, since the engine
//! unpacks the context on its host. Headers are normalised (owner root, no times), so the
//! same Features make the same bytes and the digest of the context is the build's identity.

use crate::{FeatureError, Resolved};
use std::io::Read;
use warren_types::features::{FeatureBuild, FeatureSource, FeatureValue, HOOKS_DIR};

/// Most entries of one Feature's archive.
const MAX_ENTRIES: usize = 10_000;
/// Most bytes of one Feature's files once unpacked (a gzip bomb stops here).
const MAX_UNPACKED_BYTES: u64 = 256 << 20;
/// Where the Features are copied in the image while they install (as the reference tools
/// do, under `/tmp`).
const INSTALL_DIR: &str = "/tmp/dev-container-features";

/// One file of a Feature.
#[derive(Debug, Clone, PartialEq, Eq)]
struct File {
    path: String,
    executable: bool,
    data: Vec<u8>,
}

/// A Feature's files: plain files and folders, paths relative to its folder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Files {
    dirs: Vec<String>,
    files: Vec<File>,
}

impl Files {
    /// Reads a Feature's archive (tar, or gzip-compressed tar).
    pub fn from_archive(source: &FeatureSource, archive: &[u8]) -> Result<Files, FeatureError> {
        let invalid = |m: String| FeatureError::invalid(source, format!("its archive {m}"));
        let reader: Box<dyn Read> = if archive.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::read::GzDecoder::new(archive))
        } else {
            Box::new(archive)
        };
        let mut tar = tar::Archive::new(reader.take(MAX_UNPACKED_BYTES));
        let mut out = Files::default();
        let entries = tar
            .entries()
            .map_err(|e| invalid(format!("cannot be read: {e}")))?;
        for (n, entry) in entries.enumerate() {
            if n == MAX_ENTRIES {
                return Err(invalid(format!("holds more than {MAX_ENTRIES} entries")));
            }
            let mut entry = entry.map_err(|e| invalid(format!("cannot be read: {e}")))?;
            let raw = entry
                .path()
                .map_err(|e| invalid(format!("has a path that cannot be read: {e}")))?
                .to_string_lossy()
                .into_owned();
            let Some(path) = clean(&raw) else {
                return Err(invalid(format!(
                    "holds {raw:?}, which is not a path inside the Feature's folder"
                )));
            };
            let kind = entry.header().entry_type();
            if kind.is_dir() {
                if !path.is_empty() {
                    out.dirs.push(path);
                }
            } else if kind.is_file() {
                let mode = entry.header().mode().unwrap_or(0o644);
                let size = entry.header().size().unwrap_or(0);
                let mut data = vec![];
                entry
                    .read_to_end(&mut data)
                    .map_err(|e| invalid(format!("cannot be read at {path}: {e}")))?;
                // Short when the archive ends early, or unpacks to more than the cap.
                if data.len() as u64 != size {
                    return Err(invalid(format!(
                        "is cut short at {path}, or unpacks to more than {MAX_UNPACKED_BYTES} bytes"
                    )));
                }
                out.files.push(File {
                    path,
                    executable: mode & 0o111 != 0,
                    data,
                });
            } else if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() {
                continue;
            } else {
                return Err(FeatureError::Unsupported {
                    feature: source.to_string(),
                    what: format!("an archive holding {path} (a link or special file)"),
                    why: "Warren hands the engine plain files and folders only, so that nothing in a build context can point outside it".into(),
                });
            }
        }
        if !out.files.iter().any(|f| f.path == "install.sh") {
            return Err(invalid(
                "has no install.sh at its top (the specification's entry point)".into(),
            ));
        }
        Ok(out)
    }

    /// The text of `devcontainer-feature.json`.
    pub fn metadata_text(&self, source: &FeatureSource) -> Result<String, FeatureError> {
        let file = self
            .files
            .iter()
            .find(|f| f.path == "devcontainer-feature.json")
            .ok_or_else(|| {
                FeatureError::invalid(
                    source,
                    "its archive has no devcontainer-feature.json at its top",
                )
            })?;
        if file.data.len() > crate::metadata::MAX_METADATA_BYTES {
            return Err(FeatureError::invalid(
                source,
                "its devcontainer-feature.json is too large",
            ));
        }
        String::from_utf8(file.data.clone()).map_err(|_| {
            FeatureError::invalid(source, "its devcontainer-feature.json is not UTF-8")
        })
    }
}

/// `raw` as a relative path with no `.`, `..` or empty parts (`` for the folder itself);
/// `None` when it is absolute or leaves the folder.
fn clean(raw: &str) -> Option<String> {
    if raw.starts_with('/') || raw.contains(['\\', '\0']) {
        return None;
    }
    let mut parts = vec![];
    for p in raw.split('/') {
        match p {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Single-quotes a value for `/bin/sh`.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A Dockerfile `ENV` value in double quotes.
fn env_value(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The script that installs one Feature: the users' variables and the options in the
/// environment, then the Feature's `install.sh`, as root, from its folder.
fn install_script(r: &Resolved) -> String {
    format!(
        r#"#!/bin/sh
# Written by Warren: installs the Feature {source} ({id} {version}).
set -e
. ../builtin.env
home_of() {{
    h=$(awk -F: -v u="$1" '$1 == u || $3 == u {{ print $6; exit }}' /etc/passwd 2>/dev/null || true)
    if [ -n "$h" ]; then echo "$h"; elif [ "$1" = root ]; then echo /root; else echo "/home/$1"; fi
}}
_CONTAINER_USER_HOME=$(home_of "$_CONTAINER_USER")
_REMOTE_USER_HOME=$(home_of "$_REMOTE_USER")
export _CONTAINER_USER _REMOTE_USER _CONTAINER_USER_HOME _REMOTE_USER_HOME
set -a
. ./devcontainer-features.env
set +a
echo "warren: installing the Feature {source}"
chmod +x ./install.sh
exec ./install.sh
"#,
        source = r.source,
        id = r.metadata.id,
        version = r.metadata.version,
    )
}

/// The options file the specification has `install.sh` source.
fn options_env(r: &Resolved) -> String {
    r.options
        .iter()
        .map(|(name, v)| {
            let text = match v {
                FeatureValue::Bool(b) => b.to_string(),
                FeatureValue::String(s) => s.clone(),
            };
            format!("{}={}\n", crate::metadata::env_name(name), sh_quote(&text))
        })
        .collect()
}

/// The build context (a tar archive, the Dockerfile at its top as `Dockerfile`) that
/// installs `features`, in that order, on `base` (an image id or reference) whose own user
/// is `image_user`.
pub fn build_context(
    features: &[Resolved],
    base: &str,
    image_user: &str,
    build: &FeatureBuild,
) -> Result<Vec<u8>, FeatureError> {
    let image_user_name = image_user.split(':').next().unwrap_or_default();
    let container_user = build
        .container_user
        .clone()
        .unwrap_or_else(|| match image_user_name {
            "" => "root".to_owned(),
            u => u.to_owned(),
        });
    let remote_user = build
        .remote_user
        .clone()
        .unwrap_or_else(|| container_user.clone());
    let mut files: Vec<(String, bool, Vec<u8>)> = vec![];
    let mut dirs: Vec<String> = vec!["warren-features".into()];
    files.push((
        "warren-features/builtin.env".into(),
        false,
        format!(
            "_CONTAINER_USER={}\n_REMOTE_USER={}\n",
            sh_quote(&container_user),
            sh_quote(&remote_user)
        )
        .into_bytes(),
    ));
    let mut dockerfile = format!(
        "# Written by Warren: the dev container's Features on its image.\nFROM {base}\nUSER root\nCOPY warren-features/builtin.env {INSTALL_DIR}/builtin.env\n"
    );
    let mut hooks = vec![];
    for (i, r) in features.iter().enumerate() {
        let dir = format!("warren-features/{i}");
        dirs.push(dir.clone());
        dirs.extend(r.files.dirs.iter().map(|d| format!("{dir}/{d}")));
        for f in &r.files.files {
            files.push((format!("{dir}/{}", f.path), f.executable, f.data.clone()));
        }
        files.push((
            format!("{dir}/devcontainer-features.env"),
            false,
            options_env(r).into_bytes(),
        ));
        files.push((
            format!("{dir}/warren-install.sh"),
            true,
            install_script(r).into_bytes(),
        ));
        dockerfile.push_str(&format!(
            "COPY {dir}/ {INSTALL_DIR}/{i}/\nRUN cd {INSTALL_DIR}/{i} && sh ./warren-install.sh\n"
        ));
        if !r.metadata.container_env.is_empty() {
            let env: Vec<String> = r
                .metadata
                .container_env
                .iter()
                .map(|(k, v)| format!("{k}={}", env_value(v)))
                .collect();
            dockerfile.push_str(&format!("ENV {}\n", env.join(" ")));
        }
        for (stage, text) in &r.metadata.hooks {
            let name = format!(
                "{i:02}-{}.sh",
                r.metadata
                    .id
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() || c == '-' {
                        c
                    } else {
                        '_'
                    })
                    .collect::<String>()
            );
            hooks.push((format!("warren-hooks/{stage}/{name}"), text.clone()));
        }
    }
    if !hooks.is_empty() {
        dirs.push("warren-hooks".into());
        for (_, stage) in crate::metadata::HOOK_STAGES {
            dirs.push(format!("warren-hooks/{stage}"));
        }
        for (path, text) in hooks {
            files.push((path, false, format!("{text}\n").into_bytes()));
        }
        dockerfile.push_str(&format!("COPY warren-hooks/ {HOOKS_DIR}/\n"));
    }
    if !image_user.is_empty() {
        dockerfile.push_str(&format!("USER {image_user}\n"));
    }
    files.insert(0, ("Dockerfile".into(), false, dockerfile.into_bytes()));
    write_tar(&dirs, &files).map_err(|e| FeatureError::Invalid {
        feature: "(all)".into(),
        message: format!("writing the build context: {e}"),
    })
}

/// A tar archive of `dirs` and `files`, with normalised headers.
fn write_tar(dirs: &[String], files: &[(String, bool, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    for d in dirs {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, format!("{d}/"), std::io::empty())?;
    }
    for (path, executable, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(if *executable { 0o755 } else { 0o644 });
        h.set_size(data.len() as u64);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, path, data.as_slice())?;
    }
    tar.into_inner()
}

#[cfg(test)]
mod tests {
    use super::clean;

    #[test]
    fn paths_stay_inside_the_folder() {
        assert_eq!(clean("./install.sh").as_deref(), Some("install.sh"));
        assert_eq!(clean("./").as_deref(), Some(""));
        assert_eq!(clean("a/./b").as_deref(), Some("a/b"));
        assert_eq!(clean("../etc/passwd"), None);
        assert_eq!(clean("a/../../b"), None);
        assert_eq!(clean("/etc/passwd"), None);
    }
}
