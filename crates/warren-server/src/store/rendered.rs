//! A workspace's rendered objects as the store keeps them (`workspaces`, `pools`).

use std::collections::BTreeMap;

/// A workspace's rendered objects as stored: the objects (sealed), its URLs, and the YAML
/// the agent applies for replicas 1 and 0 (sealed), rendered once so reconciles only decrypt.
#[derive(Debug, Clone)]
pub struct RenderedObjects {
    pub namespace: String,
    pub objects: Vec<serde_json::Value>,
    pub endpoints: BTreeMap<String, String>,
    pub url: Option<String>,
    pub config_running: String,
    pub config_stopped: String,
    /// Which rendering the configurations are (their Deployments' annotation), in clear.
    pub config_generation: String,
}
