//! What a definition says it needs of the machine it runs on (a dev container's
//! `hostRequirements`, the devfile attribute `warren.dev/host-requirements`), and the machine
//! class that meets it: the default class when it does, else the smallest that does.
//!
//! A class has a GPU when one of its devices is named like one (`nvidia.com/gpu`,
//! `amd.com/gpu`, `gpu.intel.com/i915`): the name contains `gpu`.

use crate::machine::MachineClass;
use crate::quantity::{parse_cpu_millis, parse_memory_bytes};
use serde::{Deserialize, Serialize};

/// Whether the definition needs a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuRequirement {
    #[default]
    No,
    /// A class with a GPU when the agent has one, else any.
    Optional,
    Required,
}

impl GpuRequirement {
    fn is_no(&self) -> bool {
        *self == GpuRequirement::No
    }
}

/// The least a workspace's machine must have.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HostRequirements {
    /// Whole CPUs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus: Option<u64>,
    /// Memory, as a Kubernetes quantity (`4Gi`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The volume's size, as a Kubernetes quantity (`32Gi`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    #[serde(skip_serializing_if = "GpuRequirement::is_no")]
    pub gpu: GpuRequirement,
}

impl HostRequirements {
    /// Whether it asks anything.
    pub fn is_empty(&self) -> bool {
        self == &HostRequirements::default()
    }

    /// The problems of each field, by name (`memory`), for a devfile's error list.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![];
        if self.cpus == Some(0) {
            out.push(("cpus", "must be at least 1".to_owned()));
        }
        for (field, v) in [("memory", &self.memory), ("storage", &self.storage)] {
            if let Some(v) = v {
                match parse_memory_bytes(v) {
                    Ok(0) => out.push((field, "must be more than 0".to_owned())),
                    Ok(_) => {}
                    Err(e) => out.push((field, e.to_string())),
                }
            }
        }
        out
    }

    /// What `class` lacks of these requirements, in words (`2 CPUs, it has 1`); empty when
    /// it meets them. `default_storage` is the volume size of a class that names none (the
    /// agent's `data_volume_size`). A class that sets no CPU or memory leaves the
    /// definition's own size (which these requirements set), so it lacks neither.
    pub fn lacks(&self, class: &MachineClass, default_storage: &str) -> Vec<String> {
        let mut out = vec![];
        if let (Some(cpus), Some(has)) = (self.cpus, class.cpu.as_deref()) {
            if parse_cpu_millis(has).unwrap_or(0) < cpus.saturating_mul(1000) {
                out.push(format!("{cpus} CPUs (it has {has})"));
            }
        }
        if let (Some(memory), Some(has)) = (&self.memory, class.memory.as_deref()) {
            if bytes(has) < bytes(memory) {
                out.push(format!("{memory} of memory (it has {has})"));
            }
        }
        if let Some(storage) = &self.storage {
            let has = class.storage.as_deref().unwrap_or(default_storage);
            if bytes(has) < bytes(storage) {
                out.push(format!("{storage} of storage (it has {has})"));
            }
        }
        if self.gpu == GpuRequirement::Required && !has_gpu(class) {
            out.push("a GPU (it has none)".to_owned());
        }
        out
    }

    /// The class a workspace with these requirements gets when its creator named none: the
    /// default class when it meets them (and has a GPU, when one is optional and some class
    /// has one), else the smallest that does; an error naming what each class lacks when
    /// none does. `None` when the agent offers no classes.
    pub fn choose<'a>(
        &self,
        classes: &'a [MachineClass],
        default: Option<&'a MachineClass>,
        default_storage: &str,
    ) -> Result<Option<&'a MachineClass>, String> {
        if classes.is_empty() {
            return Ok(None);
        }
        let meeting: Vec<&MachineClass> = classes
            .iter()
            .filter(|c| self.lacks(c, default_storage).is_empty())
            .collect();
        let with_gpu: Vec<&MachineClass> = meeting.iter().copied().filter(|c| has_gpu(c)).collect();
        let pool = if self.gpu == GpuRequirement::Optional && !with_gpu.is_empty() {
            with_gpu
        } else {
            meeting
        };
        if let Some(d) = default.filter(|d| pool.iter().any(|c| c.name == d.name)) {
            return Ok(Some(d));
        }
        let smallest = pool.into_iter().min_by_key(|c| {
            (
                c.weight(),
                c.cpu
                    .as_deref()
                    .map_or(0, |v| parse_cpu_millis(v).unwrap_or(0)),
                c.memory.as_deref().map_or(0, bytes),
                bytes(c.storage.as_deref().unwrap_or(default_storage)),
                c.name.clone(),
            )
        });
        match smallest {
            Some(c) => Ok(Some(c)),
            None => Err(format!(
                "no machine class meets them: {}",
                classes
                    .iter()
                    .map(|c| format!(
                        "{} lacks {}",
                        c.name,
                        self.lacks(c, default_storage).join(", ")
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
        }
    }
}

impl std::fmt::Display for HostRequirements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = vec![];
        if let Some(c) = self.cpus {
            parts.push(format!("{c} CPUs"));
        }
        if let Some(m) = &self.memory {
            parts.push(format!("{m} of memory"));
        }
        if let Some(s) = &self.storage {
            parts.push(format!("{s} of storage"));
        }
        match self.gpu {
            GpuRequirement::Required => parts.push("a GPU".into()),
            GpuRequirement::Optional => parts.push("a GPU if there is one".into()),
            GpuRequirement::No => {}
        }
        if parts.is_empty() {
            f.write_str("nothing")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// Whether one of the class's devices is a GPU (its name says so).
pub fn has_gpu(class: &MachineClass) -> bool {
    class
        .devices
        .keys()
        .any(|d| d.to_ascii_lowercase().contains("gpu"))
}

fn bytes(v: &str) -> u64 {
    parse_memory_bytes(v).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, cpu: &str, memory: &str, gpu: bool, weight: u32) -> MachineClass {
        MachineClass {
            name: name.into(),
            cpu: Some(cpu.into()),
            memory: Some(memory.into()),
            devices: if gpu {
                [("nvidia.com/gpu".to_owned(), 1)].into()
            } else {
                Default::default()
            },
            weight: Some(weight),
            ..Default::default()
        }
    }

    fn classes() -> Vec<MachineClass> {
        vec![
            class("small", "2", "4Gi", false, 1),
            class("large", "8", "32Gi", false, 4),
            class("medium", "4", "16Gi", false, 2),
            class("gpu", "8", "32Gi", true, 10),
        ]
    }

    fn reqs(cpus: Option<u64>, memory: Option<&str>, gpu: GpuRequirement) -> HostRequirements {
        HostRequirements {
            cpus,
            memory: memory.map(str::to_owned),
            storage: None,
            gpu,
        }
    }

    fn chosen(r: &HostRequirements, default: Option<&str>) -> Result<Option<String>, String> {
        let cs = classes();
        let d = default.and_then(|n| cs.iter().find(|c| c.name == n));
        r.choose(&cs, d, "20Gi").map(|c| c.map(|c| c.name.clone()))
    }

    #[test]
    fn the_default_when_it_meets_them_else_the_smallest_that_does() {
        let none = GpuRequirement::No;
        assert_eq!(
            chosen(&reqs(Some(2), None, none), Some("small")),
            Ok(Some("small".into()))
        );
        assert_eq!(
            chosen(&reqs(Some(3), None, none), Some("small")),
            Ok(Some("medium".into()))
        );
        assert_eq!(
            chosen(&reqs(None, Some("20Gi"), none), None),
            Ok(Some("large".into()))
        );
        assert_eq!(
            chosen(&reqs(None, None, GpuRequirement::Required), Some("small")),
            Ok(Some("gpu".into()))
        );
        assert_eq!(
            chosen(
                &reqs(Some(2), None, GpuRequirement::Optional),
                Some("small")
            ),
            Ok(Some("gpu".into())),
            "a GPU when there is one"
        );
        assert_eq!(
            HostRequirements::default().choose(&[], None, "20Gi"),
            Ok(None)
        );
    }

    #[test]
    fn none_meeting_them_says_what_each_lacks() {
        let e = chosen(&reqs(Some(16), None, GpuRequirement::Required), None).unwrap_err();
        assert!(
            e.contains("small lacks 16 CPUs (it has 2), a GPU (it has none)"),
            "{e}"
        );
        assert!(e.contains("gpu lacks 16 CPUs (it has 8)"), "{e}");
        let storage = HostRequirements {
            storage: Some("64Gi".into()),
            ..Default::default()
        };
        assert_eq!(
            storage.lacks(&classes()[0], "20Gi"),
            vec!["64Gi of storage (it has 20Gi)".to_owned()]
        );
        assert!(storage
            .lacks(
                &MachineClass {
                    storage: Some("100Gi".into()),
                    ..Default::default()
                },
                "20Gi"
            )
            .is_empty());
    }

    #[test]
    fn bad_amounts_are_named_by_field() {
        let r = HostRequirements {
            cpus: Some(0),
            memory: Some("lots".into()),
            storage: Some("0".into()),
            gpu: GpuRequirement::No,
        };
        let fields: Vec<&str> = r.problems().iter().map(|(f, _)| *f).collect();
        assert_eq!(fields, ["cpus", "memory", "storage"]);
        assert_eq!(
            reqs(Some(2), Some("4Gi"), GpuRequirement::Optional).to_string(),
            "2 CPUs, 4Gi of memory, a GPU if there is one"
        );
    }
}
