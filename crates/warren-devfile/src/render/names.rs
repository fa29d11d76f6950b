//! Names and metadata: object names within Kubernetes' limits, port names, the checks of
//! variable keys, of the agent's labels and annotations and of the request's names, and the
//! shared object metadata.

use super::{RenderError, RenderRequest};
use crate::model::Protocol;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// DNS-1123 label of at most 63 characters; longer names are cut and get a hash suffix so
/// two long names stay distinct.
pub(crate) fn object_name(base: &str) -> String {
    if base.len() <= 63 {
        return base.to_owned();
    }
    let hash = hex::encode(&Sha256::digest(base.as_bytes())[..4]);
    let mut cut = base[..54].trim_end_matches('-').to_owned();
    cut.push('-');
    cut.push_str(&hash);
    cut
}

/// What every object of one workspace shares: its name, namespace, labels and selector.
pub(super) struct Ctx<'a> {
    pub(super) name: &'a str,
    pub(super) namespace: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) annotations: BTreeMap<String, String>,
    pub(super) selector: BTreeMap<String, String>,
}

impl Ctx<'_> {
    pub(super) fn meta(&self, name: String) -> ObjectMeta {
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels.clone()),
            annotations: Some(self.annotations.clone()),
            ..Default::default()
        }
    }
}

pub(super) fn is_env_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

pub(super) fn is_secret_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

pub(super) fn check_metadata_map(
    map: &BTreeMap<String, String>,
    labels: bool,
) -> Result<(), RenderError> {
    let bad = |key: &str, reason: String| RenderError::Metadata {
        key: key.to_owned(),
        reason,
    };
    for (k, v) in map {
        if let Some(p) = crate::k8s::qualified_name_problem(k) {
            return Err(bad(k, p));
        }
        if labels {
            if let Some(p) = crate::k8s::label_value_problem(v) {
                return Err(bad(k, p));
            }
        }
    }
    if !labels {
        if let Some(p) = crate::k8s::annotations_problem(map) {
            return Err(bad("", p));
        }
    }
    Ok(())
}

pub(super) fn name_of(req: &RenderRequest<'_>) -> String {
    req.workspace_name.to_owned()
}

pub(super) fn k8s_protocol(p: Protocol) -> &'static str {
    if p == Protocol::Udp {
        "UDP"
    } else {
        "TCP"
    }
}

/// A port name (IANA_SVC_NAME: ≤ 15 chars, a letter, no `--`); endpoint names that do not
/// qualify become `p<port>`.
pub(super) fn port_name(name: &str, port: u16) -> String {
    let ok = name.len() <= 15
        && name.bytes().any(|b| b.is_ascii_lowercase())
        && !name.contains("--")
        && crate::parse::is_dns_label(name, 15);
    if ok {
        name.to_owned()
    } else {
        format!("p{port}")
    }
}

/// What the agent's configuration and the request must be for a rendering: the workspace's
/// namespace when they are.
pub(super) fn check_request(req: &RenderRequest<'_>) -> Result<String, RenderError> {
    let cfg = req.agent_config;
    let name = req.workspace_name;
    if let Some(problem) = crate::k8s::dns1035_label_problem(name, 40) {
        return Err(RenderError::WorkspaceName(problem));
    }
    let namespace = match &cfg.shared_namespace {
        Some(ns) => {
            // `warren-ws-<name>` is a workspace's own namespace to the agent, which deletes it
            // with the workspace.
            if !crate::parse::is_dns_label(ns, 63) || ns.starts_with("warren-ws-") {
                return Err(RenderError::Namespace(ns.clone()));
            }
            ns.clone()
        }
        None => format!("warren-ws-{name}"),
    };
    let agent_namespace = &cfg.network_policy.agent_namespace;
    if !crate::parse::is_dns_label(agent_namespace, 63) {
        return Err(RenderError::Namespace(agent_namespace.clone()));
    }
    if let Some(p) = req.project.as_ref().filter(|p| {
        p.name.is_empty()
            || p.name == "."
            || p.name == ".."
            || p.name.contains('/')
            || p.name.contains('\0')
            || p.name.len() > 255
    }) {
        return Err(RenderError::ProjectName(p.name.to_owned()));
    }
    check_metadata_map(&cfg.labels, true)?;
    check_metadata_map(&cfg.annotations, false)?;
    Ok(namespace)
}
