//! Names and metadata: object names within Kubernetes' limits, port names, the checks of
//! variable keys and of the agent's labels and annotations, and the shared object metadata.

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
