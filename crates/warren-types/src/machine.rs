//! Machine classes (issue 41, item 3): the sizes an agent's admin offers, picked by name at
//! create and resize instead of raw numbers, with their storage, devices and placement.
//!
//! A device such as a GPU is named as Kubernetes names an extended resource
//! (`nvidia.com/gpu`, `example.com/dongle`): on Kubernetes the main container requests that
//! many of it and the scheduler places the pod on a node that advertises it; on Podman and
//! Docker the same name is a Container Device Interface kind, whose devices the host's CDI
//! specification lists.

use crate::quantity::{parse_cpu_millis, parse_memory_bytes};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Most classes one agent offers.
pub const MAX_CLASSES: usize = 64;
/// Longest description of a class.
pub const MAX_DESCRIPTION: usize = 200;
/// Most devices of one kind a class asks for.
pub const MAX_DEVICES: u32 = 64;

/// One size an agent offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields)]
pub struct MachineClass {
    /// What users pick it by (a DNS label: `small`, `gpu-large`).
    pub name: String,
    /// One line users read when choosing (`4 CPUs, 16 GiB, one A10 GPU`).
    pub description: String,
    /// The main container's CPU limit (`4`, `500m`).
    pub cpu: Option<String>,
    /// The main container's memory limit (`16Gi`).
    pub memory: Option<String>,
    /// The size of the workspace's volume; the agent's `data_volume_size` when absent.
    pub storage: Option<String>,
    /// Devices by extended-resource (and CDI) name and how many: `{"nvidia.com/gpu": 1}`.
    pub devices: BTreeMap<String, u32>,
    /// Kubernetes only: the labels the pod's node must have.
    pub node_selector: BTreeMap<String, String>,
    /// Kubernetes only: the taints the pod tolerates (a GPU node pool's, typically).
    pub tolerations: Vec<Toleration>,
    /// Kubernetes only: the pod's RuntimeClass (`nvidia`), instead of the agent's
    /// `security.runtime_class_name`.
    pub runtime_class: Option<String>,
    /// What one running workspace of this class counts for against the agent's
    /// `weight_per_user_quota` (default 1).
    pub weight: Option<u32>,
}

impl MachineClass {
    /// What a workspace of this class counts for against a weight quota.
    pub fn weight(&self) -> u32 {
        self.weight.unwrap_or(1)
    }

    /// The problems of this class, each naming its field under `at` (`machine_classes[2]`).
    pub fn problems(&self, at: &str) -> Vec<(String, String)> {
        let mut out = vec![];
        let mut bad = |field: &str, why: String| out.push((format!("{at}.{field}"), why));
        if let Err(e) = crate::check_name(&self.name) {
            bad("name", e);
        }
        if self.description.len() > MAX_DESCRIPTION
            || self.description.chars().any(char::is_control)
        {
            bad(
                "description",
                format!("must be one line of at most {MAX_DESCRIPTION} bytes"),
            );
        }
        if let Some(cpu) = &self.cpu {
            match parse_cpu_millis(cpu) {
                Ok(0) => bad("cpu", "must be more than 0".into()),
                Ok(_) => {}
                Err(e) => bad("cpu", e.to_string()),
            }
        }
        for (field, value) in [("memory", &self.memory), ("storage", &self.storage)] {
            if let Some(v) = value {
                match parse_memory_bytes(v) {
                    Ok(0) => bad(field, "must be more than 0".into()),
                    Ok(_) => {}
                    Err(e) => bad(field, e.to_string()),
                }
            }
        }
        for (name, count) in &self.devices {
            if let Err(e) = check_device_name(name) {
                bad("devices", e);
            } else if *count == 0 || *count > MAX_DEVICES {
                bad(
                    "devices",
                    format!("{name}: ask for 1 to {MAX_DEVICES}, not {count}"),
                );
            }
        }
        for (key, value) in &self.node_selector {
            if let Err(e) = check_label_key(key) {
                bad("node_selector", e);
            } else if !is_label_value(value) {
                bad(
                    "node_selector",
                    format!("the value of {key:?} is not a label value"),
                );
            }
        }
        for (i, t) in self.tolerations.iter().enumerate() {
            if let Err(e) = t.check() {
                bad(&format!("tolerations[{i}]"), e);
            }
        }
        if let Some(rc) = &self.runtime_class {
            if !is_dns_subdomain(rc) {
                bad(
                    "runtime_class",
                    format!("{rc:?} is not a RuntimeClass name"),
                );
            }
        }
        if self.weight == Some(0) {
            bad("weight", "must be at least 1".into());
        }
        out
    }
}

/// A taint a class's pods tolerate, as Kubernetes spells it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Toleration {
    /// The taint's key; empty with `Exists` tolerates every taint.
    pub key: String,
    /// `Equal` (default) or `Exists`.
    pub operator: Option<String>,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`; empty matches all three.
    pub effect: Option<String>,
    /// `NoExecute` only: how long the pod stays after the taint appears.
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    fn check(&self) -> Result<(), String> {
        if !self.key.is_empty() {
            check_label_key(&self.key)?;
        }
        match self.operator.as_deref() {
            None | Some("Equal") => {
                if self.key.is_empty() {
                    return Err("an empty key needs operator Exists".into());
                }
                if !self.value.as_deref().is_none_or(is_label_value) {
                    return Err("the value is not a label value".into());
                }
            }
            Some("Exists") => {
                if self.value.as_deref().is_some_and(|v| !v.is_empty()) {
                    return Err("operator Exists takes no value".into());
                }
            }
            Some(other) => return Err(format!("operator {other:?} is not Equal or Exists")),
        }
        match self.effect.as_deref() {
            None | Some("" | "NoSchedule" | "PreferNoSchedule" | "NoExecute") => {}
            Some(other) => {
                return Err(format!(
                    "effect {other:?} is not NoSchedule, PreferNoSchedule or NoExecute"
                ))
            }
        }
        if self.toleration_seconds.is_some() && self.effect.as_deref() != Some("NoExecute") {
            return Err("tolerationSeconds is for effect NoExecute only".into());
        }
        Ok(())
    }
}

/// The rule for a device's name: a Kubernetes extended resource (`vendor.example/name`,
/// outside `kubernetes.io`), which is also the form of a CDI kind.
pub fn check_device_name(name: &str) -> Result<(), String> {
    let Some((domain, short)) = name.split_once('/') else {
        return Err(format!(
            "{name:?} must be a vendor's domain and a name, as nvidia.com/gpu"
        ));
    };
    if !is_dns_subdomain(domain) || !domain.contains('.') {
        return Err(format!("{name:?}: {domain:?} is not a domain name"));
    }
    if domain == "kubernetes.io" || domain.ends_with(".kubernetes.io") {
        return Err(format!(
            "{name:?}: names under kubernetes.io are Kubernetes' own, not devices"
        ));
    }
    let ok = !short.is_empty()
        && short.len() <= 63
        && short
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && short.as_bytes()[0].is_ascii_alphanumeric()
        && short.as_bytes()[short.len() - 1].is_ascii_alphanumeric();
    if !ok {
        return Err(format!(
            "{name:?}: {short:?} must be 1-63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

/// A Kubernetes label key: an optional DNS-subdomain prefix and `/`, then a name.
fn check_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) || !is_label_value(name) || name.is_empty() {
        return Err(format!("{key:?} is not a label key"));
    }
    Ok(())
}

/// A Kubernetes label value: at most 63 of letters, digits, '-', '_', '.', starting and
/// ending with a letter or digit (or empty).
fn is_label_value(v: &str) -> bool {
    v.is_empty()
        || (v.len() <= 63
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            && v.as_bytes()[0].is_ascii_alphanumeric()
            && v.as_bytes()[v.len() - 1].is_ascii_alphanumeric())
}

/// A DNS subdomain (RFC 1123): dot-separated labels, at most 253 characters.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(|l| crate::is_dns_label(l, 63))
}

/// The problems of an agent's list of classes and its default: each class's, duplicate
/// names, too many, and a default that names none of them.
pub fn check_classes(classes: &[MachineClass], default: Option<&str>) -> Vec<(String, String)> {
    let mut out = vec![];
    if classes.len() > MAX_CLASSES {
        out.push((
            "machine_classes".into(),
            format!("at most {MAX_CLASSES} classes, not {}", classes.len()),
        ));
    }
    for (i, c) in classes.iter().enumerate() {
        out.extend(c.problems(&format!("machine_classes[{i}]")));
        if classes[..i].iter().any(|o| o.name == c.name) {
            out.push((
                format!("machine_classes[{i}].name"),
                format!("{:?} is named twice", c.name),
            ));
        }
    }
    if let Some(d) = default {
        if !classes.iter().any(|c| c.name == d) {
            out.push((
                "default_machine_class".into(),
                format!("{d:?} is not one of machine_classes"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str) -> MachineClass {
        MachineClass {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_good_class_has_no_problems() {
        let c = MachineClass {
            name: "gpu-large".into(),
            description: "8 CPUs, 32 GiB, one GPU".into(),
            cpu: Some("8".into()),
            memory: Some("32Gi".into()),
            storage: Some("100Gi".into()),
            devices: [("nvidia.com/gpu".to_owned(), 1)].into(),
            node_selector: [("nvidia.com/gpu.present".to_owned(), "true".to_owned())].into(),
            tolerations: vec![Toleration {
                key: "nvidia.com/gpu".into(),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            runtime_class: Some("nvidia".into()),
            weight: Some(4),
        };
        assert_eq!(c.problems("c"), vec![]);
        assert_eq!(c.weight(), 4);
        assert_eq!(class("small").weight(), 1);
    }

    #[test]
    fn each_bad_field_is_named() {
        let c = MachineClass {
            name: "Big One".into(),
            description: "two\nlines".into(),
            cpu: Some("lots".into()),
            memory: Some("0".into()),
            storage: Some("-1Gi".into()),
            devices: [
                ("gpu".to_owned(), 1),
                ("example.com/dongle".to_owned(), 0),
                ("kubernetes.io/x".to_owned(), 1),
            ]
            .into(),
            node_selector: [("a b".to_owned(), "x".to_owned())].into(),
            tolerations: vec![Toleration {
                operator: Some("Sometimes".into()),
                ..Default::default()
            }],
            runtime_class: Some("Not_A_Name".into()),
            weight: Some(0),
        };
        let fields: Vec<String> = c
            .problems("machine_classes[0]")
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        for f in [
            "name",
            "description",
            "cpu",
            "memory",
            "storage",
            "devices",
            "node_selector",
            "tolerations[0]",
            "runtime_class",
            "weight",
        ] {
            assert!(
                fields.contains(&format!("machine_classes[0].{f}")),
                "{f} not named in {fields:?}"
            );
        }
        assert_eq!(
            fields.iter().filter(|f| f.ends_with(".devices")).count(),
            3,
            "{fields:?}"
        );
    }

    #[test]
    fn duplicates_and_a_missing_default_are_named() {
        let problems = check_classes(&[class("a"), class("b"), class("a")], Some("c"));
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            ["machine_classes[2].name", "default_machine_class"],
            "{problems:?}"
        );
        assert!(check_classes(&[class("a")], Some("a")).is_empty());
    }

    #[test]
    fn tolerations_follow_kubernetes_rules() {
        let t = |key: &str, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
            Toleration {
                key: key.into(),
                operator: op.map(Into::into),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                toleration_seconds: None,
            }
            .check()
        };
        assert!(t("", Some("Exists"), None, None).is_ok(), "tolerates all");
        assert!(t("", None, None, None).is_err(), "Equal needs a key");
        assert!(t("k", Some("Exists"), Some("v"), None).is_err());
        assert!(t("k", None, Some("v"), Some("NoExecute")).is_ok());
        assert!(t("k", None, Some("v"), Some("Never")).is_err());
        let seconds = Toleration {
            key: "k".into(),
            effect: Some("NoSchedule".into()),
            toleration_seconds: Some(30),
            ..Default::default()
        };
        assert!(seconds.check().is_err());
    }
}
