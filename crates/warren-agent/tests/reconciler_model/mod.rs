//! A small model of the server's reconcile handler (reconcile.md "Server side"), the wire peer
//! the agent's tests talk to. Shared with the relay's tests by `#[path]`.
#![allow(dead_code)]

use std::collections::BTreeMap;
use warren_types::lifecycle::derive_actual_state;
use warren_types::reconcile::{
    ReconcileRequest, ReconcileResponse, ReconcileSettings, UpdateType, WorkspaceAgentInfo,
    WorkspaceRailsInfo,
};
use warren_types::{ActualState, DesiredState};

pub const NAMESPACE: &str = "warren-ws";

#[derive(Debug, Clone)]
pub struct ModelWorkspace {
    pub desired: DesiredState,
    pub actual: ActualState,
    pub resource_version: Option<String>,
    /// Desired state changed since the last response.
    pub dirty: bool,
    pub last_report: Option<WorkspaceAgentInfo>,
    /// Every error_details the agent sent for it.
    pub errors_seen: Vec<String>,
}

#[derive(Debug, Default)]
pub struct ServerModel {
    pub workspaces: BTreeMap<String, ModelWorkspace>,
    pub requests: Vec<ReconcileRequest>,
    pub settings: ReconcileSettings,
}

/// The objects the server would render for a one-container workspace.
pub fn config_yaml(name: &str, desired: DesiredState) -> String {
    let replicas = desired.replicas().unwrap_or(0);
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}-inventory\n  namespace: {NAMESPACE}\n---\n\
         apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\n\
         spec:\n  replicas: {replicas}\n  template:\n    spec:\n      containers:\n      - name: dev\n        image: busybox\n"
    )
}

impl ServerModel {
    pub fn new(settings: ReconcileSettings) -> Self {
        ServerModel {
            settings,
            ..Default::default()
        }
    }

    pub fn create(&mut self, name: &str) {
        self.workspaces.insert(
            name.into(),
            ModelWorkspace {
                desired: DesiredState::Running,
                actual: ActualState::CreationRequested,
                resource_version: None,
                dirty: true,
                last_report: None,
                errors_seen: vec![],
            },
        );
    }

    pub fn set_desired(&mut self, name: &str, desired: DesiredState) {
        if let Some(w) = self.workspaces.get_mut(name) {
            w.desired = desired;
            w.dirty = true;
        }
    }

    pub fn actual(&self, name: &str) -> Option<ActualState> {
        self.workspaces.get(name).map(|w| w.actual)
    }

    pub fn count(&self, kind: UpdateType) -> usize {
        self.requests
            .iter()
            .filter(|r| r.update_type == kind)
            .count()
    }

    pub fn handle(&mut self, request: ReconcileRequest) -> ReconcileResponse {
        if request.runtime_fault.is_some() {
            // As the server: the fault is recorded, nothing is sent or marked.
            return ReconcileResponse::nothing(self.settings);
        }
        let full = request.update_type == UpdateType::Full;
        let mut named = vec![];
        for info in &request.workspace_agent_infos {
            named.push(info.name.clone());
            let Some(w) = self.workspaces.get_mut(&info.name) else {
                continue;
            };
            if let Some(v) = info
                .latest_k8s_deployment_info
                .as_ref()
                .and_then(|d| d.pointer("/metadata/resourceVersion"))
                .and_then(|v| v.as_str())
            {
                w.resource_version = Some(v.to_owned());
            }
            if let Some(e) = &info.error_details {
                w.errors_seen.push(e.error_message.clone());
            }
            w.actual = derive_actual_state(info);
            if w.desired == DesiredState::RestartRequested && w.actual == ActualState::Stopped {
                w.desired = DesiredState::Running;
                w.dirty = true;
            }
            w.last_report = Some(info.clone());
        }
        let mut infos = vec![];
        for (name, w) in &mut self.workspaces {
            let both_terminated =
                w.desired == DesiredState::Terminated && w.actual == ActualState::Terminated;
            let include = if full {
                !both_terminated
            } else {
                w.dirty || named.contains(name)
            };
            if !include {
                continue;
            }
            let config = ((full || w.dirty) && w.desired != DesiredState::Terminated)
                .then(|| config_yaml(name, w.desired));
            w.dirty = false;
            infos.push(WorkspaceRailsInfo {
                name: name.clone(),
                namespace: NAMESPACE.into(),
                desired_state: w.desired,
                actual_state: w.actual,
                deployment_resource_version: w.resource_version.clone(),
                config_to_apply: config,
                image_pull_secrets: vec![],
            });
        }
        self.requests.push(request);
        ReconcileResponse {
            workspace_rails_infos: infos,
            ..ReconcileResponse::nothing(self.settings)
        }
    }
}
