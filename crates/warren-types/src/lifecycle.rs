//! Deriving a workspace's actual state from an agent's report (lifecycle.md), a pure function.

use crate::reconcile::{TerminationProgress, WorkspaceAgentInfo};
use crate::state::ActualState;
use serde_json::Value;

/// The reasons of a Deployment's `Progressing` condition that mean a rollout is under way.
const ROLLING_REASONS: [&str; 3] = [
    "NewReplicaSetCreated",
    "FoundNewReplicaSet",
    "ReplicaSetUpdated",
];

/// Derives the actual state from one workspace report; the first matching rule wins.
///
/// Rules 1–9 are lifecycle.md's. Warren adds one between rules 3 and 4: a reported
/// `pod_failure` on a Deployment that wants a replica is `Failed`, so a crash loop or a
/// missing image does not look like `Starting` forever.
pub fn derive_actual_state(info: &WorkspaceAgentInfo) -> ActualState {
    // Rule 1: termination finished wins over everything, errors included.
    if info.termination_progress == Some(TerminationProgress::Terminated) {
        return ActualState::Terminated;
    }
    // Rule 2.
    if info.error_details.is_some() {
        return ActualState::Error;
    }
    // Rule 3.
    if info.termination_progress == Some(TerminationProgress::Terminating) {
        return ActualState::Terminating;
    }
    let Some(deployment) = info.latest_k8s_deployment_info.as_ref() else {
        return ActualState::Unknown;
    };
    let replicas = deployment.pointer("/spec/replicas").and_then(Value::as_i64);
    // Warren's pod-failure rule.
    if info.pod_failure.is_some() && replicas != Some(0) {
        return ActualState::Failed;
    }
    derive_from_deployment(deployment)
}

/// Rules 4–9: the state a Deployment object alone shows.
pub fn derive_from_deployment(deployment: &Value) -> ActualState {
    // Rule 4.
    let Some(replicas) = deployment.pointer("/spec/replicas").and_then(Value::as_i64) else {
        return ActualState::Unknown;
    };
    let Some(conditions) = deployment
        .pointer("/status/conditions")
        .and_then(Value::as_array)
    else {
        return ActualState::Unknown;
    };
    let reason_of = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
            .and_then(|c| c.get("reason").and_then(Value::as_str))
            .filter(|r| !r.is_empty())
    };
    let Some(progressing) = reason_of("Progressing") else {
        return ActualState::Unknown;
    };
    // Rule 5.
    if progressing == "ProgressDeadlineExceeded" {
        return ActualState::Failed;
    }
    // Rule 6.
    if ROLLING_REASONS.contains(&progressing) {
        return match replicas {
            0 => ActualState::Stopping,
            1 => ActualState::Starting,
            _ => ActualState::Unknown,
        };
    }
    // Rule 7.
    let count = |field: &str| {
        deployment
            .pointer(&format!("/status/{field}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let available = count("availableReplicas");
    let unavailable = count("unavailableReplicas");
    let Some(available_reason) = reason_of("Available") else {
        return ActualState::Unknown;
    };
    // Rule 8.
    if progressing == "NewReplicaSetAvailable" {
        let minimum_available = available_reason == "MinimumReplicasAvailable";
        let minimum_unavailable = available_reason == "MinimumReplicasUnavailable";
        if minimum_available && replicas == 0 && available == 0 {
            return ActualState::Stopped;
        }
        if minimum_available && replicas == available && unavailable == 0 {
            return ActualState::Running;
        }
        if minimum_available && replicas == 0 && available == 1 {
            return ActualState::Stopping;
        }
        if (minimum_available || minimum_unavailable) && replicas == 1 && available == 0 {
            return ActualState::Starting;
        }
    }
    // Rule 9.
    ActualState::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::{ErrorDetails, ErrorType, PodFailure};
    use serde_json::json;

    fn deployment(
        replicas: Option<i64>,
        progressing: Option<&str>,
        available: Option<&str>,
        counts: (Option<i64>, Option<i64>),
    ) -> Value {
        let mut conditions = vec![];
        if let Some(r) = progressing {
            conditions.push(json!({"type": "Progressing", "status": "True", "reason": r}));
        }
        if let Some(r) = available {
            conditions.push(json!({"type": "Available", "status": "True", "reason": r}));
        }
        let mut status = json!({ "conditions": conditions });
        if let Some(a) = counts.0 {
            status["availableReplicas"] = json!(a);
        }
        if let Some(u) = counts.1 {
            status["unavailableReplicas"] = json!(u);
        }
        let mut spec = json!({});
        if let Some(r) = replicas {
            spec["replicas"] = json!(r);
        }
        json!({"metadata": {"name": "w", "resourceVersion": "1"}, "spec": spec, "status": status})
    }

    fn info(dep: Option<Value>) -> WorkspaceAgentInfo {
        WorkspaceAgentInfo {
            name: "w".into(),
            namespace: "n".into(),
            latest_k8s_deployment_info: dep,
            termination_progress: None,
            error_details: None,
            pod_failure: None,
            pod_waiting: None,
        }
    }

    #[test]
    fn every_rule() {
        use ActualState::*;
        const MRA: &str = "MinimumReplicasAvailable";
        const MRU: &str = "MinimumReplicasUnavailable";
        const NRA: &str = "NewReplicaSetAvailable";
        let cases: Vec<(&str, Option<Value>, ActualState)> = vec![
            ("no deployment", None, Unknown),
            (
                "no replicas",
                Some(deployment(None, Some(NRA), Some(MRA), (None, None))),
                Unknown,
            ),
            (
                "no conditions",
                Some(json!({"spec": {"replicas": 1}, "status": {}})),
                Unknown,
            ),
            (
                "no progressing",
                Some(deployment(Some(1), None, Some(MRA), (None, None))),
                Unknown,
            ),
            (
                "deadline",
                Some(deployment(
                    Some(1),
                    Some("ProgressDeadlineExceeded"),
                    None,
                    (None, None),
                )),
                Failed,
            ),
            (
                "rollout to zero",
                Some(deployment(
                    Some(0),
                    Some("ReplicaSetUpdated"),
                    None,
                    (None, None),
                )),
                Stopping,
            ),
            (
                "rollout to one",
                Some(deployment(
                    Some(1),
                    Some("NewReplicaSetCreated"),
                    None,
                    (None, None),
                )),
                Starting,
            ),
            (
                "found rs",
                Some(deployment(
                    Some(1),
                    Some("FoundNewReplicaSet"),
                    None,
                    (None, None),
                )),
                Starting,
            ),
            (
                "no available condition",
                Some(deployment(Some(1), Some(NRA), None, (Some(1), None))),
                Unknown,
            ),
            (
                "stopped",
                Some(deployment(Some(0), Some(NRA), Some(MRA), (None, None))),
                Stopped,
            ),
            (
                "running",
                Some(deployment(Some(1), Some(NRA), Some(MRA), (Some(1), None))),
                Running,
            ),
            (
                "running but one unavailable",
                Some(deployment(
                    Some(1),
                    Some(NRA),
                    Some(MRA),
                    (Some(1), Some(1)),
                )),
                Unknown,
            ),
            (
                "stopping",
                Some(deployment(Some(0), Some(NRA), Some(MRA), (Some(1), None))),
                Stopping,
            ),
            (
                "starting available",
                Some(deployment(
                    Some(1),
                    Some(NRA),
                    Some(MRA),
                    (Some(0), Some(1)),
                )),
                Starting,
            ),
            (
                "starting unavailable",
                Some(deployment(Some(1), Some(NRA), Some(MRU), (None, Some(1)))),
                Starting,
            ),
            (
                "unavailable with zero replicas",
                Some(deployment(Some(0), Some(NRA), Some(MRU), (None, None))),
                Unknown,
            ),
            (
                "other progressing reason",
                Some(deployment(
                    Some(1),
                    Some("Whatever"),
                    Some(MRA),
                    (Some(1), None),
                )),
                Unknown,
            ),
        ];
        for (label, dep, want) in cases {
            assert_eq!(derive_actual_state(&info(dep)), want, "{label}");
        }
    }

    #[test]
    fn termination_and_errors_come_first() {
        let running = deployment(
            Some(1),
            Some("NewReplicaSetAvailable"),
            Some("MinimumReplicasAvailable"),
            (Some(1), None),
        );
        let error = ErrorDetails {
            error_type: ErrorType::Applier,
            error_message: "x".into(),
        };

        let mut i = info(Some(running.clone()));
        i.termination_progress = Some(TerminationProgress::Terminated);
        i.error_details = Some(error.clone());
        assert_eq!(
            derive_actual_state(&i),
            ActualState::Terminated,
            "rule 1 beats errors"
        );

        let mut i = info(Some(running.clone()));
        i.termination_progress = Some(TerminationProgress::Terminating);
        i.error_details = Some(error);
        assert_eq!(
            derive_actual_state(&i),
            ActualState::Error,
            "rule 2 beats terminating"
        );

        let mut i = info(None);
        i.termination_progress = Some(TerminationProgress::Terminating);
        assert_eq!(derive_actual_state(&i), ActualState::Terminating);

        let mut i = info(Some(running));
        i.pod_failure = Some(PodFailure {
            reason: "CrashLoopBackOff".into(),
            message: "".into(),
        });
        assert_eq!(
            derive_actual_state(&i),
            ActualState::Failed,
            "pod failure shows"
        );

        let stopped = deployment(
            Some(0),
            Some("NewReplicaSetAvailable"),
            Some("MinimumReplicasAvailable"),
            (None, None),
        );
        let mut i = info(Some(stopped));
        i.pod_failure = Some(PodFailure {
            reason: "Exited".into(),
            message: "".into(),
        });
        assert_eq!(
            derive_actual_state(&i),
            ActualState::Stopped,
            "a stopped pod has no failure"
        );
    }
}
