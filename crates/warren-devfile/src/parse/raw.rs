//! The raw model: what the official devfile schema allows, Warren's refusals included.

use super::*;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// Raw model (what the schema allows)
// ---------------------------------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawComponent {
    pub(super) name: String,
    pub(super) attributes: Option<Map<String, Value>>,
    pub(super) container: Option<RawContainer>,
    pub(super) kubernetes: Option<RawKubernetes>,
    pub(super) openshift: Option<RawKubernetes>,
    pub(super) volume: Option<RawVolume>,
    pub(super) image: Option<RawImage>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawContainer {
    pub(super) image: String,
    pub(super) annotation: Option<RawAnnotation>,
    pub(super) args: Option<Vec<String>>,
    pub(super) command: Option<Vec<String>>,
    pub(super) cpu_limit: Option<String>,
    pub(super) cpu_request: Option<String>,
    pub(super) dedicated_pod: Option<bool>,
    pub(super) endpoints: Option<Vec<RawEndpoint>>,
    pub(super) env: Option<Vec<RawEnv>>,
    pub(super) memory_limit: Option<String>,
    pub(super) memory_request: Option<String>,
    pub(super) mount_sources: Option<bool>,
    pub(super) source_mapping: Option<String>,
    pub(super) volume_mounts: Option<Vec<RawVolumeMount>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAnnotation {
    pub(super) deployment: Option<BTreeMap<String, String>>,
    pub(super) service: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEndpoint {
    pub(super) name: String,
    // i128: the schema says "integer", any size; the port range is checked later.
    pub(super) target_port: i128,
    pub(super) annotation: Option<BTreeMap<String, String>>,
    pub(super) attributes: Option<Map<String, Value>>,
    pub(super) exposure: Option<Exposure>,
    pub(super) path: Option<String>,
    pub(super) protocol: Option<Protocol>,
    pub(super) secure: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEnv {
    pub(super) name: String,
    pub(super) value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVolumeMount {
    pub(super) name: String,
    pub(super) path: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawKubernetes {
    pub(super) uri: Option<String>,
    pub(super) inlined: Option<String>,
    pub(super) deploy_by_default: Option<bool>,
    pub(super) endpoints: Option<Vec<RawEndpoint>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVolume {
    pub(super) ephemeral: Option<bool>,
    pub(super) size: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawImage {
    pub(super) image_name: String,
    pub(super) auto_build: Option<bool>,
    pub(super) dockerfile: Option<RawDockerfile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawDockerfile {
    pub(super) args: Option<Vec<String>>,
    pub(super) build_context: Option<String>,
    pub(super) devfile_registry: Option<RawDevfileRegistry>,
    pub(super) git: Option<RawDockerfileGit>,
    pub(super) root_required: Option<bool>,
    pub(super) uri: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawDevfileRegistry {
    pub(super) id: String,
    pub(super) registry_url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawDockerfileGit {
    pub(super) checkout_from: Option<RawCheckoutFrom>,
    pub(super) file_location: Option<String>,
    pub(super) remotes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(super) struct RawCheckoutFrom {
    pub(super) remote: Option<String>,
    pub(super) revision: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawCommand {
    pub(super) id: String,
    #[allow(dead_code)]
    pub(super) attributes: Option<Map<String, Value>>,
    pub(super) exec: Option<RawExec>,
    pub(super) apply: Option<RawApply>,
    pub(super) composite: Option<RawComposite>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawExec {
    pub(super) command_line: String,
    pub(super) component: String,
    pub(super) env: Option<Vec<RawEnv>>,
    pub(super) group: Option<RawGroup>,
    pub(super) hot_reload_capable: Option<bool>,
    pub(super) label: Option<String>,
    pub(super) working_dir: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawApply {
    pub(super) component: String,
    pub(super) group: Option<RawGroup>,
    pub(super) label: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawComposite {
    pub(super) commands: Option<Vec<String>>,
    pub(super) group: Option<RawGroup>,
    pub(super) label: Option<String>,
    pub(super) parallel: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawGroup {
    pub(super) kind: GroupKind,
    #[allow(dead_code)]
    pub(super) is_default: Option<bool>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum GroupKind {
    Build,
    Run,
    Test,
    Debug,
    Deploy,
}

impl GroupKind {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            GroupKind::Build => "build",
            GroupKind::Run => "run",
            GroupKind::Test => "test",
            GroupKind::Debug => "debug",
            GroupKind::Deploy => "deploy",
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawEvents {
    pub(super) post_start: Option<Vec<String>>,
    pub(super) post_stop: Option<Vec<String>>,
    pub(super) pre_start: Option<Vec<String>>,
    pub(super) pre_stop: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawMetadata {
    pub(super) architectures: Option<Vec<Architecture>>,
    pub(super) attributes: Option<Map<String, Value>>,
    pub(super) description: Option<String>,
    pub(super) display_name: Option<String>,
    pub(super) global_memory_limit: Option<String>,
    pub(super) icon: Option<String>,
    pub(super) language: Option<String>,
    pub(super) name: Option<String>,
    pub(super) project_type: Option<String>,
    pub(super) provider: Option<String>,
    pub(super) support_url: Option<String>,
    pub(super) tags: Option<Vec<String>>,
    pub(super) version: Option<String>,
    pub(super) website: Option<String>,
    /// The schema allows any other key in metadata.
    #[serde(flatten)]
    pub(super) other: Map<String, Value>,
}

#[derive(Deserialize, PartialEq, Eq, PartialOrd, Ord, Clone, Copy)]
#[serde(rename_all = "lowercase")]
pub(super) enum Architecture {
    Amd64,
    Arm64,
    Ppc64le,
    S390x,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawProject {
    pub(super) name: String,
    pub(super) attributes: Option<Map<String, Value>>,
    pub(super) clone_path: Option<String>,
    pub(super) description: Option<String>,
    pub(super) sub_dir: Option<String>,
    pub(super) git: Option<RawProjectGit>,
    pub(super) zip: Option<RawZip>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[allow(dead_code)]
pub(super) struct RawProjectGit {
    pub(super) checkout_from: Option<RawCheckoutFrom>,
    pub(super) remotes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub(super) struct RawZip {
    pub(super) location: Option<String>,
}

/// The structurally valid document, part by part.
#[derive(Default)]
pub(super) struct RawDevfile {
    pub(super) schema_version: String,
    pub(super) metadata: Option<RawMetadata>,
    pub(super) variables: BTreeMap<String, String>,
    pub(super) attributes: Map<String, Value>,
    pub(super) components: Vec<RawComponent>,
    pub(super) commands: Vec<RawCommand>,
    pub(super) events: Option<RawEvents>,
    /// Present top-level keys Warren refuses (`parent`).
    pub(super) refused_keys: Vec<&'static str>,
    /// `projects` and `dependentProjects` (with their paths), then `starterProjects`.
    pub(super) projects: Vec<(String, RawProject)>,
    pub(super) starter_projects: Vec<(String, RawProject)>,
}
