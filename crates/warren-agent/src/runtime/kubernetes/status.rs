//! What the watched Pods and Deployments say about a workspace: pod failures, termination.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use std::collections::BTreeMap;
use warren_types::reconcile::{PodFailure, PodWaiting};

/// Waiting reasons that mean the pod will not become ready without a change by the user.
pub const FAILURE_REASONS: [&str; 5] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "CreateContainerConfigError",
    "InvalidImageName",
];

/// The first failure a pod shows: init containers first (they run first), then containers.
pub fn pod_failure(pod: &Pod) -> Option<PodFailure> {
    let status = pod.status.as_ref()?;
    let init = status
        .init_container_statuses
        .as_deref()
        .unwrap_or_default();
    for container in init {
        if let Some(failure) = waiting_failure(container) {
            return Some(failure);
        }
        let terminated = container
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .filter(|t| t.exit_code != 0);
        if let Some(t) = terminated {
            let detail = t
                .message
                .as_deref()
                .or(t.reason.as_deref())
                .unwrap_or_default();
            return Some(PodFailure {
                reason: "InitContainerFailed".into(),
                message: format!(
                    "init container {} exited with code {}{}{}",
                    container.name,
                    t.exit_code,
                    if detail.is_empty() { "" } else { ": " },
                    detail
                ),
            });
        }
    }
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    containers.iter().find_map(waiting_failure)
}

/// Why a pending pod has not been placed on a node, when the scheduler gave up on it for now
/// (`PodScheduled` false, reason `Unschedulable`): no node has the devices, capacity, labels
/// or taints' tolerations it asks for. Not a failure: a node may be added or freed, and the
/// scheduler tries again by itself.
pub fn pod_waiting(pod: &Pod) -> Option<PodWaiting> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref().is_some_and(|p| p != "Pending") {
        return None;
    }
    let scheduled = status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    if scheduled.status != "False" || scheduled.reason.as_deref() != Some("Unschedulable") {
        return None;
    }
    Some(PodWaiting {
        reason: "Unschedulable".into(),
        message: scheduler_words(scheduled.message.as_deref().unwrap_or_default()),
    })
}

/// The scheduler's message as a workspace's users may read it: what no node has, without
/// the taints' keys and values (`{dedicated: finance}`, which name other teams' node pools)
/// and without the preemption sentence that follows (`preemption: 0/3 nodes …`).
fn scheduler_words(message: &str) -> String {
    let head = message
        .split_once(" preemption:")
        .map_or(message, |(head, _)| head);
    let mut out = String::with_capacity(head.len());
    let mut depth = 0usize;
    for c in head.chars() {
        match c {
            '{' => {
                if depth == 0 {
                    out.push_str("{…}");
                }
                depth += 1;
            }
            '}' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out.trim().to_owned()
}

fn waiting_failure(container: &ContainerStatus) -> Option<PodFailure> {
    let waiting = container.state.as_ref()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref()?;
    if !FAILURE_REASONS.contains(&reason) {
        return None;
    }
    let message = waiting.message.as_deref().unwrap_or_default();
    // A crash loop's waiting message only says the kubelet backs off; how the container
    // ended is in its last state (what the engine runtime reports too).
    let ended = container
        .last_state
        .as_ref()
        .and_then(|s| s.terminated.as_ref())
        .filter(|_| reason == "CrashLoopBackOff")
        .map(|t| {
            let detail = t
                .reason
                .as_deref()
                .filter(|r| *r != "Error" && *r != "Completed")
                .map(|r| format!(" ({r})"))
                .unwrap_or_default();
            format!(" exited with code {}{detail}", t.exit_code)
        })
        .unwrap_or_default();
    Some(PodFailure {
        reason: reason.to_owned(),
        message: if message.is_empty() {
            format!("container {}{ended}", container.name)
        } else {
            format!("container {}{ended}: {message}", container.name)
        },
    })
}

/// Whether `pod` belongs to `deployment`: same namespace, and the Deployment's selector
/// (matchLabels; Warren renders no matchExpressions) matches the pod's labels.
pub fn selects(deployment: &Deployment, pod: &Pod) -> bool {
    if deployment.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let Some(spec) = deployment.spec.as_ref() else {
        return false;
    };
    let Some(wanted) = spec.selector.match_labels.as_ref() else {
        return false;
    };
    if wanted.is_empty() || spec.selector.match_expressions.is_some() {
        // An empty selector would claim every pod; Warren never renders one.
        return false;
    }
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    wanted.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The Deployment as reported to the server: the real object, without `managedFields`
/// (large, and nothing in Warren reads them).
pub fn deployment_json(deployment: &Deployment) -> Option<serde_json::Value> {
    let mut value = serde_json::to_value(deployment).ok()?;
    if let Some(metadata) = value.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        metadata.remove("managedFields");
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    }

    #[test]
    fn reports_waiting_reasons_and_failed_init_containers() {
        let crash = pod(json!({"containerStatuses": [
            {"name": "ok", "ready": true, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"running": {}}},
            {"name": "main", "ready": false, "restartCount": 3, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}}]}));
        let f = pod_failure(&crash).unwrap();
        assert_eq!(f.reason, "CrashLoopBackOff");
        assert_eq!(f.message, "container main: back-off 40s");
        // As a real kubelet reports it: how the container ended is in its last state.
        let crash = pod(json!({"containerStatuses": [
            {"name": "main", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 20s restarting failed container=main pod=p"}},
             "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}));
        assert_eq!(
            pod_failure(&crash).unwrap().message,
            "container main exited with code 3: back-off 20s restarting failed container=main pod=p"
        );
        let killed = pod(json!({"containerStatuses": [
            {"name": "main", "ready": false, "restartCount": 2, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}));
        assert_eq!(
            pod_failure(&killed).unwrap().message,
            "container main exited with code 137 (OOMKilled)"
        );

        let creating = pod(json!({"containerStatuses": [
            {"name": "main", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"waiting": {"reason": "ContainerCreating"}}}]}));
        assert_eq!(pod_failure(&creating), None);

        let init = pod(json!({"initContainerStatuses": [
            {"name": "prestart", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"terminated": {"exitCode": 2, "reason": "Error"}}}]}));
        let f = pod_failure(&init).unwrap();
        assert_eq!(f.reason, "InitContainerFailed");
        assert!(
            f.message.contains("prestart exited with code 2: Error"),
            "{}",
            f.message
        );

        let init_ok = pod(json!({"initContainerStatuses": [
            {"name": "prestart", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}));
        assert_eq!(pod_failure(&init_ok), None);
        assert_eq!(pod_failure(&pod(json!({}))), None);
    }

    #[test]
    fn an_unschedulable_pod_waits_with_the_schedulers_words() {
        let message = "0/1 nodes are available: 1 Insufficient example.com/gpu.";
        let unschedulable = pod(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]}));
        assert_eq!(
            pod_waiting(&unschedulable),
            Some(PodWaiting {
                reason: "Unschedulable".into(),
                message: message.into()
            })
        );
        assert_eq!(pod_failure(&unschedulable), None, "not a failure");
        let scheduled = pod(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "True"}
        ]}));
        assert_eq!(pod_waiting(&scheduled), None);
        // Scheduling gates and the like are not the scheduler giving up.
        let gated = pod(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}
        ]}));
        assert_eq!(pod_waiting(&gated), None);
        assert_eq!(pod_waiting(&pod(json!({}))), None);
        // Other teams' taints stay in the cluster; the preemption sentence is left out.
        let tainted = pod(json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: finance}, 2 Insufficient example.com/gpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."}
        ]}));
        assert_eq!(
            pod_waiting(&tainted).unwrap().message,
            "0/3 nodes are available: 1 node(s) had untolerated taint {…}, 2 Insufficient example.com/gpu."
        );
    }
}
