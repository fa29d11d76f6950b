//! Helpers shared by the integration tests: the registry data, a standard render request.
#![allow(dead_code)]

use std::path::PathBuf;
use warren_devfile::{ProjectSource, RenderRequest, ResolvedVariable};
use warren_types::config::AgentConfig;
use warren_types::{AgentId, DesiredState, WorkspaceId};

pub const DATA_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/devfiles");

/// `(file name, text)` of every registry devfile, sorted by name.
pub fn registry() -> Vec<(String, String)> {
    let dir = PathBuf::from(DATA_DIR).join("registry");
    let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            let path = e.expect("dir entry").path();
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path).expect("read devfile");
            (name, text)
        })
        .filter(|(n, _)| n.ends_with(".yaml"))
        .collect();
    out.sort();
    assert!(
        out.len() >= 80,
        "expected the registry devfiles in {}",
        dir.display()
    );
    out
}

pub fn registry_file(name: &str) -> String {
    std::fs::read_to_string(PathBuf::from(DATA_DIR).join("registry").join(name))
        .expect("read devfile")
}

pub fn request<'a>(
    config: &'a AgentConfig,
    variables: &'a [ResolvedVariable],
) -> RenderRequest<'a> {
    RenderRequest {
        workspace_name: "brave-otter-x7k2",
        workspace_id: WorkspaceId(42),
        agent_id: AgentId(7),
        agent_config: config,
        project: Some(ProjectSource {
            name: "demo",
            git_url: "https://example.com/team/demo.git",
            git_ref: "main",
            credential: None,
        }),
        resources: None,
        machine: None,
        variables,
        desired_state: DesiredState::Running,
        dotfiles_url: None,
        starter: None,
        prebuild: false,
        seed: None,
    }
}

/// Removes what Warren refuses from a registry devfile (starter projects, non-container/volume
/// components, composite commands, commands and events that refer to removed parts), so the
/// rest of a real devfile can be rendered.
pub fn strip_unsupported(text: &str) -> String {
    let mut v: serde_json::Value = serde_yaml::from_str(text).expect("yaml");
    let obj = v.as_object_mut().expect("mapping");
    for k in ["starterProjects", "projects", "dependentProjects", "parent"] {
        obj.remove(k);
    }
    let mut kept = std::collections::BTreeSet::new();
    if let Some(serde_json::Value::Array(cs)) = obj.get_mut("components") {
        cs.retain(|c| c.get("container").is_some() || c.get("volume").is_some());
        for c in cs.iter_mut() {
            if let Some(serde_json::Value::Object(a)) = c.get_mut("attributes") {
                a.remove("pod-overrides");
                a.remove("container-overrides");
            }
        }
        for c in cs.iter() {
            kept.insert(c["name"].as_str().unwrap_or_default().to_owned());
        }
    }
    let mut ids = std::collections::BTreeSet::new();
    if let Some(serde_json::Value::Array(cmds)) = obj.get_mut("commands") {
        cmds.retain(|c| {
            let comp = c
                .get("exec")
                .or_else(|| c.get("apply"))
                .and_then(|x| x.get("component"))
                .and_then(|x| x.as_str());
            comp.is_some_and(|n| kept.contains(n))
        });
        for c in cmds.iter() {
            ids.insert(c["id"].as_str().unwrap_or_default().to_owned());
        }
    }
    if let Some(serde_json::Value::Object(ev)) = obj.get_mut("events") {
        ev.remove("preStop");
        ev.remove("postStop");
        for list in ev.values_mut() {
            if let serde_json::Value::Array(items) = list {
                items.retain(|i| i.as_str().is_some_and(|s| ids.contains(s)));
            }
        }
    }
    serde_json::to_string_pretty(&v).expect("json")
}
