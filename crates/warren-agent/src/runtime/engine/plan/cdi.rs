//! The devices this host offers through the Container Device Interface: what a machine
//! class's `devices` (an extended resource such as `nvidia.com/gpu`) become on Podman and
//! Docker, where Kubernetes takes a count.
//!
//! The agent applies a specification's edits itself — its device nodes, environment and
//! mounts — because not every engine's Docker-compatible API, which the agent speaks, takes
//! CDI names (Podman before 5.4 answers "stat nvidia.com/gpu=0: no such file" or ignores a
//! `cdi` device request; Docker before 25, or without CDI enabled, refuses the driver).
//! OCI hooks, which NVIDIA's generated specifications carry, cannot be given through that
//! API at all: a device whose edits hold hooks is requested from the engine by its CDI name
//! (a device request with the `cdi` driver, as `docker run --device vendor.com/x=y` sends)
//! where the engine applies such requests itself ([`EngineCdi::Applies`]), and refused by
//! name elsewhere rather than given without its hooks, so a workspace never runs with half
//! a device.

use bollard::models::{DeviceMapping, Mount, MountType};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where CDI specifications live (the specification's defaults, which Podman and Docker
/// read).
pub const SPEC_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// The devices of each kind the host's specifications name, with their edits.
#[derive(Debug, Clone, Default)]
pub struct CdiDevices {
    kinds: BTreeMap<String, Kind>,
    /// The directories read, for messages.
    dirs: Vec<PathBuf>,
    /// Whether the engine applies a device requested by name.
    engine: EngineCdi,
}

/// Whether the container engine applies a CDI device requested by its name through the
/// Docker-compatible API (`HostConfig.DeviceRequests` with the `cdi` driver): the whole
/// specification, hooks included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineCdi {
    /// Podman 5.4 and later; Docker with CDI enabled (from 25 when configured, by default
    /// from 28.2), which says so by listing its specification directories in `info`.
    Applies,
    /// It ignores or refuses such a request; the engine and its version, for messages.
    Ignores(String),
}

impl Default for EngineCdi {
    fn default() -> Self {
        EngineCdi::Ignores("the container engine".into())
    }
}

impl EngineCdi {
    /// What an engine does with CDI requests, from its `version` and, for Docker, the
    /// specification directories its `info` lists (present only while CDI is enabled).
    /// Podman's `info` never lists them, so its version decides: 5.4 passes a `cdi`
    /// request's names on to its own CDI support, earlier versions drop the request
    /// without a word — a workspace would start without its device.
    pub fn of(is_podman: bool, version: &str, docker_cdi_dirs: &[String]) -> EngineCdi {
        let version = match version.trim() {
            "" => "(version unknown)",
            v => v,
        };
        if is_podman {
            let mut parts = version
                .trim_start_matches('v')
                .split(|c: char| !c.is_ascii_digit())
                .map(|p| p.parse::<u32>().ok());
            let major = parts.next().flatten().unwrap_or(0);
            let minor = parts.next().flatten().unwrap_or(0);
            if (major, minor) >= (5, 4) {
                EngineCdi::Applies
            } else {
                EngineCdi::Ignores(format!("Podman {version}"))
            }
        } else if docker_cdi_dirs.iter().any(|d| !d.is_empty()) {
            EngineCdi::Applies
        } else {
            EngineCdi::Ignores(format!("Docker {version} without CDI enabled"))
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Kind {
    /// Each device's name and edits, with its specification's own edits (which every
    /// device of it gets) first.
    devices: Vec<(String, Edits)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    kind: String,
    #[serde(default)]
    devices: Vec<SpecDevice>,
    #[serde(default)]
    container_edits: Edits,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecDevice {
    name: String,
    #[serde(default)]
    container_edits: Edits,
}

/// What a device adds to a container (the CDI specification's `containerEdits`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Edits {
    #[serde(default)]
    env: Vec<String>,
    #[serde(default)]
    device_nodes: Vec<DeviceNode>,
    #[serde(default)]
    mounts: Vec<SpecMount>,
    #[serde(default)]
    hooks: Vec<serde_yaml::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DeviceNode {
    path: String,
    host_path: Option<String>,
    permissions: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SpecMount {
    host_path: String,
    container_path: String,
    #[serde(default)]
    options: Vec<String>,
}

/// What the chosen devices add to a container, as the engine's API takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Injected {
    pub devices: Vec<DeviceMapping>,
    pub env: Vec<String>,
    pub mounts: Vec<Mount>,
    /// Fully qualified names (`vendor.com/class=name`) of devices the engine applies
    /// itself: one device request with the `cdi` driver.
    pub requests: Vec<String>,
}

impl CdiDevices {
    /// The specifications (`*.yaml`, `*.yml`, `*.json`) in `dirs`; a file that cannot be
    /// read or parsed is left out (the engine would refuse it too), and logged.
    pub fn read(dirs: &[PathBuf]) -> CdiDevices {
        let mut kinds: BTreeMap<String, Kind> = BTreeMap::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for path in files {
                let spec_file = path
                    .extension()
                    .is_some_and(|e| e == "yaml" || e == "yml" || e == "json");
                if !spec_file {
                    continue;
                }
                match read_spec(&path) {
                    Ok(spec) => {
                        let kind = kinds.entry(spec.kind).or_default();
                        for d in spec.devices {
                            if kind.devices.iter().any(|(n, _)| *n == d.name) {
                                continue;
                            }
                            let mut edits = spec.container_edits.clone();
                            edits.extend(d.container_edits);
                            kind.devices.push((d.name, edits));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(path = %path.display(), error = %e, "CDI specification left out");
                    }
                }
            }
        }
        CdiDevices {
            kinds,
            dirs: dirs.to_vec(),
            engine: EngineCdi::default(),
        }
    }

    /// The same devices, on an engine that does `engine` with requests by name.
    pub fn on_engine(mut self, engine: EngineCdi) -> CdiDevices {
        self.engine = engine;
        self
    }

    /// The edits of `count` devices of `kind` (the first ones its specifications list), or
    /// what is missing.
    pub fn inject(&self, kind: &str, count: u32, into: &mut Injected) -> Result<(), String> {
        let dirs = || {
            self.dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(" or ")
        };
        let Some(devices) = self.kinds.get(kind).filter(|k| !k.devices.is_empty()) else {
            return Err(format!(
                "this host has no {kind} devices: no Container Device Interface specification in {} names that kind (for NVIDIA GPUs, `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` writes one); pick a machine class without it",
                dirs()
            ));
        };
        let wanted = usize::try_from(count).unwrap_or(usize::MAX);
        if devices.devices.len() < wanted {
            let names: Vec<&str> = devices.devices.iter().map(|(n, _)| n.as_str()).collect();
            return Err(format!(
                "this host has {} {kind} device(s) ({}), and the workspace asks for {count}",
                names.len(),
                names.join(", ")
            ));
        }
        let chosen = &devices.devices[..wanted];
        // All of a kind or none goes to the engine: the specification's own edits, which
        // each device carries here, must not be applied twice.
        if let Some((name, _)) = chosen.iter().find(|(_, e)| !e.hooks.is_empty()) {
            return match &self.engine {
                EngineCdi::Applies => {
                    for (name, _) in chosen {
                        let qualified = format!("{kind}={name}");
                        if !into.requests.contains(&qualified) {
                            into.requests.push(qualified);
                        }
                    }
                    Ok(())
                }
                EngineCdi::Ignores(engine) => Err(format!(
                    "the CDI specification of {kind}={name} runs hooks when a container starts, which {engine} cannot apply through its Docker-compatible API (Podman 5.4 or later, or Docker 25 or later with CDI enabled, applies the whole specification); on this engine only a specification of device nodes, environment and mounts works"
                )),
            };
        }
        for (_, edits) in chosen {
            for n in &edits.device_nodes {
                let mapping = DeviceMapping {
                    path_on_host: Some(n.host_path.clone().unwrap_or_else(|| n.path.clone())),
                    path_in_container: Some(n.path.clone()),
                    cgroup_permissions: Some(n.permissions.clone().unwrap_or_else(|| "rwm".into())),
                };
                if !into.devices.contains(&mapping) {
                    into.devices.push(mapping);
                }
            }
            for e in &edits.env {
                let key = e.split('=').next().unwrap_or_default();
                into.env.retain(|x| x.split('=').next() != Some(key));
                into.env.push(e.clone());
            }
            for m in &edits.mounts {
                let mount = Mount {
                    target: Some(m.container_path.clone()),
                    source: Some(m.host_path.clone()),
                    typ: Some(MountType::BIND),
                    read_only: Some(m.options.iter().any(|o| o == "ro")),
                    ..Default::default()
                };
                if !into.mounts.contains(&mount) {
                    into.mounts.push(mount);
                }
            }
        }
        Ok(())
    }
}

impl Edits {
    fn extend(&mut self, other: Edits) {
        self.env.extend(other.env);
        self.device_nodes.extend(other.device_nodes);
        self.mounts.extend(other.mounts);
        self.hooks.extend(other.hooks);
    }
}

fn read_spec(path: &Path) -> Result<Spec, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let spec: Spec = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    if spec.kind.split_once('/').is_none() {
        return Err(format!("kind {:?} is not vendor/class", spec.kind));
    }
    let edits = std::iter::once(&spec.container_edits)
        .chain(spec.devices.iter().map(|d| &d.container_edits));
    for e in edits {
        let relative = e.device_nodes.iter().map(|n| n.path.as_str()).chain(
            e.mounts
                .iter()
                .flat_map(|m| [m.host_path.as_str(), m.container_path.as_str()]),
        );
        if let Some(p) = relative.into_iter().find(|p| !p.starts_with('/')) {
            return Err(format!("path {p:?} is not absolute"));
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specifications_are_read_and_devices_chosen_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("vendor.yaml"),
            "cdiVersion: 0.5.0\nkind: example.com/dongle\ncontainerEdits:\n  env: [DONGLE=1]\ndevices:\n  - name: a\n    containerEdits:\n      deviceNodes:\n        - path: /dev/dongle-a\n          hostPath: /dev/null\n  - name: b\n    containerEdits:\n      deviceNodes:\n        - path: /dev/zero\n          permissions: r\n      mounts:\n        - hostPath: /usr/lib/dongle\n          containerPath: /usr/lib/dongle\n          options: [ro, nosuid]\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("other.json"),
            r#"{"cdiVersion":"0.5.0","kind":"example.org/gpu","devices":[{"name":"0","containerEdits":{"hooks":[{"hookName":"createContainer","path":"/usr/bin/nvidia-ctk"}]}}]}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
        std::fs::write(
            dir.path().join("relative.yaml"),
            "kind: example.net/x\ndevices:\n  - name: a\n    containerEdits:\n      deviceNodes: [{path: dev/x}]\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "kind: x/y").unwrap();
        let cdi = CdiDevices::read(&[dir.path().to_owned(), dir.path().join("missing")]);

        let mut got = Injected::default();
        cdi.inject("example.com/dongle", 2, &mut got).unwrap();
        let nodes: Vec<_> = got
            .devices
            .iter()
            .map(|d| {
                (
                    d.path_on_host.as_deref().unwrap(),
                    d.path_in_container.as_deref().unwrap(),
                    d.cgroup_permissions.as_deref().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            nodes,
            [
                ("/dev/null", "/dev/dongle-a", "rwm"),
                ("/dev/zero", "/dev/zero", "r")
            ]
        );
        assert_eq!(got.env, ["DONGLE=1"], "the spec's own edits once");
        assert_eq!(got.mounts.len(), 1);
        assert_eq!(got.mounts[0].read_only, Some(true));

        let hooks = cdi
            .inject("example.org/gpu", 1, &mut Injected::default())
            .unwrap_err();
        assert!(
            hooks.contains("runs hooks") && hooks.contains("the container engine cannot apply"),
            "{hooks}"
        );
        // An engine that applies requests by name gets the device by its name, whole.
        let mut requested = Injected::default();
        cdi.clone()
            .on_engine(EngineCdi::Applies)
            .inject("example.org/gpu", 1, &mut requested)
            .unwrap();
        assert_eq!(
            requested,
            Injected {
                requests: vec!["example.org/gpu=0".into()],
                ..Injected::default()
            },
            "nothing applied by the agent beside the request"
        );
        let too_many = cdi
            .inject("example.com/dongle", 3, &mut Injected::default())
            .unwrap_err();
        assert!(
            too_many.contains("has 2 example.com/dongle device(s) (a, b)"),
            "{too_many}"
        );
        let none = cdi
            .inject("nvidia.com/gpu", 1, &mut Injected::default())
            .unwrap_err();
        assert!(
            none.contains("no nvidia.com/gpu devices")
                && none.contains(&dir.path().display().to_string()),
            "{none}"
        );
        let relative = cdi
            .inject("example.net/x", 1, &mut Injected::default())
            .unwrap_err();
        assert!(relative.contains("no example.net/x devices"), "{relative}");
    }

    #[test]
    fn the_engines_version_says_whether_it_applies_requests_by_name() {
        assert_eq!(EngineCdi::of(true, "5.4.0", &[]), EngineCdi::Applies);
        assert_eq!(EngineCdi::of(true, "v6.0.1", &[]), EngineCdi::Applies);
        assert_eq!(
            EngineCdi::of(true, "5.3.2", &[]),
            EngineCdi::Ignores("Podman 5.3.2".into())
        );
        assert_eq!(
            EngineCdi::of(true, "4.3.1", &["/etc/cdi".into()]),
            EngineCdi::Ignores("Podman 4.3.1".into()),
            "Podman's version decides"
        );
        assert_eq!(
            EngineCdi::of(true, "", &[]),
            EngineCdi::Ignores("Podman (version unknown)".into())
        );
        assert_eq!(
            EngineCdi::of(false, "28.2.1", &["/etc/cdi".into(), "/var/run/cdi".into()]),
            EngineCdi::Applies
        );
        assert_eq!(
            EngineCdi::of(false, "27.5.1", &[]),
            EngineCdi::Ignores("Docker 27.5.1 without CDI enabled".into())
        );
    }
}
