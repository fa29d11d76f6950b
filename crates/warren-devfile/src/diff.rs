//! What changes between two definitions of a workspace, told part by part for a user to
//! read before a rebuild applies it: containers, endpoints, volumes and start-up commands.
//!
//! Each part is described by one line of the settings a user would recognise from the file
//! (an image, a command, limits, environment names — never values, which may be secret); two
//! parts differ when their lines differ, so what is shown is exactly what was compared.

use std::collections::BTreeMap;

use warren_types::api::{ChangeKind, DefinitionChange};

use crate::model::{Command, CommandAction, Container, Devfile};

/// The differences from `old` to `new`, by part name (containers, then endpoints, volumes
/// and events); empty when a rebuild would change nothing a user asked for.
pub fn changes(old: &Devfile, new: &Devfile) -> Vec<DefinitionChange> {
    let mut out = vec![];
    compare(&mut out, "container", containers(old), containers(new));
    compare(&mut out, "endpoint", endpoints(old), endpoints(new));
    compare(&mut out, "volume", volumes(old), volumes(new));
    compare(&mut out, "events", events(old), events(new));
    out
}

fn compare(
    out: &mut Vec<DefinitionChange>,
    kind: &str,
    old: BTreeMap<String, String>,
    mut new: BTreeMap<String, String>,
) {
    let start = out.len();
    let part = |name: &str| {
        if name.is_empty() {
            kind.to_owned()
        } else {
            format!("{kind} {name}")
        }
    };
    for (name, before) in old {
        match new.remove(&name) {
            None => out.push(DefinitionChange {
                part: part(&name),
                change: ChangeKind::Removed,
                before: Some(before),
                after: None,
            }),
            Some(after) if after != before => out.push(DefinitionChange {
                part: part(&name),
                change: ChangeKind::Changed,
                before: Some(before),
                after: Some(after),
            }),
            Some(_) => {}
        }
    }
    for (name, after) in new {
        out.push(DefinitionChange {
            part: part(&name),
            change: ChangeKind::Added,
            before: None,
            after: Some(after),
        });
    }
    // By name within the kind, whatever happened to each.
    out[start..].sort_by(|a, b| a.part.cmp(&b.part));
}

fn containers(d: &Devfile) -> BTreeMap<String, String> {
    d.containers
        .iter()
        .map(|c| (c.name.clone(), container_line(c)))
        .collect()
}

fn container_line(c: &Container) -> String {
    let mut parts = vec![format!("image {}", c.image)];
    let run: Vec<&str> = c
        .command
        .iter()
        .chain(&c.args)
        .map(String::as_str)
        .collect();
    if !run.is_empty() {
        parts.push(format!("runs {}", run.join(" ")));
    }
    for (what, value) in [
        ("cpu", &c.cpu_limit),
        ("memory", &c.memory_limit),
        ("cpu request", &c.cpu_request),
        ("memory request", &c.memory_request),
    ] {
        if let Some(v) = value {
            parts.push(format!("{what} {v}"));
        }
    }
    if !c.env.is_empty() {
        let mut names: Vec<&str> = c.env.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        // Names and a digest of the values: a changed value shows without being shown.
        parts.push(format!(
            "env {} ({})",
            names.join(", "),
            digest(c.env.iter().map(|e| format!("{}={}", e.name, e.value)))
        ));
    }
    if !c.volume_mounts.is_empty() {
        let mounts: Vec<String> = c
            .volume_mounts
            .iter()
            .map(|m| format!("{}:{}", m.name, m.path))
            .collect();
        parts.push(format!("mounts {}", mounts.join(", ")));
    }
    if c.mount_sources {
        parts.push(format!("sources at {}", c.source_mapping));
    }
    if c.init_only {
        parts.push("runs before the others (preStart)".into());
    }
    if !c.isolation.cap_add.is_empty() || !c.isolation.security_opt.is_empty() {
        let asked: Vec<&str> = c
            .isolation
            .cap_add
            .iter()
            .chain(&c.isolation.security_opt)
            .map(String::as_str)
            .collect();
        parts.push(format!("asks for {}", asked.join(", ")));
    }
    parts.join("; ")
}

fn endpoints(d: &Devfile) -> BTreeMap<String, String> {
    d.containers
        .iter()
        .flat_map(|c| c.endpoints.iter().map(move |e| (c, e)))
        .map(|(c, e)| {
            let mut line = format!(
                "port {} ({}, {}) in {}",
                e.target_port,
                format!("{:?}", e.exposure).to_lowercase(),
                e.protocol.as_str(),
                c.name
            );
            if let Some(p) = &e.path {
                line.push_str(&format!(", path {p}"));
            }
            if let Some(v) = e.visibility {
                line.push_str(&format!(", visibility {v}"));
            }
            (e.name.clone(), line)
        })
        .collect()
}

fn volumes(d: &Devfile) -> BTreeMap<String, String> {
    d.volumes
        .iter()
        .map(|v| {
            let mut line = v
                .size
                .clone()
                .map_or("default size".into(), |s| s.to_string());
            if v.ephemeral {
                line.push_str(", ephemeral");
            }
            (v.name.clone(), line)
        })
        .collect()
}

/// The commands run at each start (`preStart`, `postStart`), as one part.
fn events(d: &Devfile) -> BTreeMap<String, String> {
    let by_id: BTreeMap<&str, &Command> = d.commands.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut lines = vec![];
    for (event, ids) in [("preStart", &d.pre_start), ("postStart", &d.post_start)] {
        if ids.is_empty() {
            continue;
        }
        let told: Vec<String> = ids
            .iter()
            .map(|id| match by_id.get(id.as_str()).map(|c| &c.action) {
                Some(CommandAction::Exec { command_line, .. }) => format!("{id} ({command_line})"),
                _ => id.clone(),
            })
            .collect();
        lines.push(format!("{event}: {}", told.join(", ")));
    }
    if lines.is_empty() {
        BTreeMap::new()
    } else {
        BTreeMap::from([(String::new(), lines.join("; "))])
    }
}

/// A short digest of some values, to tell that they changed without telling them.
fn digest(values: impl Iterator<Item = String>) -> String {
    use sha2::Digest as _;
    let mut h = sha2::Sha256::new();
    for v in values {
        h.update(v.as_bytes());
        h.update([0]);
    }
    format!("values {}", &hex::encode(h.finalize())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Devfile {
        crate::parse_devfile(text).expect("a valid devfile")
    }

    const OLD: &str = r#"
schemaVersion: 2.2.0
metadata: {name: app}
components:
  - name: dev
    container:
      image: quay.io/devfile/universal-developer-image:ubi8-latest
      memoryLimit: 2Gi
      env: [{name: TOKEN, value: first-secret}]
      endpoints:
        - {name: web, targetPort: 8080, exposure: public}
  - name: cache
    volume: {size: 1Gi}
  - name: db
    container: {image: postgres:16}
"#;

    #[test]
    fn containers_endpoints_volumes_and_events_are_told_without_values() {
        let new_text = OLD
            .replace("memoryLimit: 2Gi", "memoryLimit: 4Gi")
            .replace("first-secret", "second-secret")
            .replace("targetPort: 8080", "targetPort: 3000")
            .replace("  - name: db\n    container: {image: postgres:16}\n", "")
            + "  - name: redis\n    container: {image: redis:7}\n";
        let got = changes(&parse(OLD), &parse(&new_text));
        let parts: Vec<(&str, ChangeKind)> =
            got.iter().map(|c| (c.part.as_str(), c.change)).collect();
        assert_eq!(
            parts,
            [
                ("container db", ChangeKind::Removed),
                ("container dev", ChangeKind::Changed),
                ("container redis", ChangeKind::Added),
                ("endpoint web", ChangeKind::Changed),
            ],
            "{got:#?}"
        );
        let dev = &got[1];
        let (before, after) = (
            dev.before.as_deref().unwrap(),
            dev.after.as_deref().unwrap(),
        );
        assert!(
            before.contains("memory 2Gi") && after.contains("memory 4Gi"),
            "{dev:?}"
        );
        assert!(
            before.contains("env TOKEN (values ") && before != after,
            "{dev:?}"
        );
        assert!(
            !format!("{got:?}").contains("secret"),
            "values are never shown: {got:?}"
        );
        assert_eq!(
            got[3].after.as_deref(),
            Some("port 3000 (public, http) in dev")
        );
        assert!(changes(&parse(OLD), &parse(OLD)).is_empty());
    }
}
