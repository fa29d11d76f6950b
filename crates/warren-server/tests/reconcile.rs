//! The reconcile handler (reconcile.md) through HTTP, on SQLite and (when configured) PostgreSQL:
//! every derivation rule of lifecycle.md, every selection rule, resource versions, the
//! RestartRequested flip, timers, idempotence, and the relay JWT.

use crate::common;

use common::generation::generation_of;
use common::*;
use reqwest::Method;
use serde_json::{json, Value};
use warren_types::reconcile::{AGENT_ID_HEADER, CONFIG_GENERATION_ANNOTATION};

async fn ws_state(s: &TestServer, name: &str) -> Value {
    let (st, b) = s
        .admin(Method::GET, &format!("/api/v1/workspaces/{name}"), None)
        .await;
    assert_eq!(st, 200, "{b}");
    b
}

#[tokio::test]
async fn every_derivation_rule_through_the_handler() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let d = |rv, r, p, a, c| deployment("x", rv, r, p, a, c);
        // (label, report fields besides name/namespace, expected actual state, failure reason contains)
        let cases: Vec<(&str, Value, &str, Option<&str>)> = vec![
            (
                "1: terminated wins over errors",
                json!({"termination_progress": "Terminated",
                "error_details": {"error_type": "applier", "error_message": "boom"}}),
                "Terminated",
                None,
            ),
            (
                "2: error details",
                json!({"error_details": {"error_type": "applier", "error_message": "quota exceeded"},
                "latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRA), (Some(1), None))}),
                "Error",
                Some("quota exceeded"),
            ),
            (
                "3: terminating",
                json!({"termination_progress": "Terminating"}),
                "Terminating",
                None,
            ),
            ("4: no deployment", json!({}), "Unknown", None),
            (
                "4: no replicas",
                json!({"latest_k8s_deployment_info": d(Some("1"), None, Some(NRA), Some(MRA), (None, None))}),
                "Unknown",
                None,
            ),
            (
                "4: no conditions",
                json!({"latest_k8s_deployment_info": {"spec": {"replicas": 1}, "status": {}}}),
                "Unknown",
                None,
            ),
            (
                "4: no progressing",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), None, Some(MRA), (None, None))}),
                "Unknown",
                None,
            ),
            (
                "5: deadline",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some("ProgressDeadlineExceeded"), None, (None, None))}),
                "Failed",
                Some("ProgressDeadlineExceeded"),
            ),
            (
                "6: rollout to 0",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(0), Some("ReplicaSetUpdated"), None, (None, None))}),
                "Stopping",
                None,
            ),
            (
                "6: rollout to 1",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some("NewReplicaSetCreated"), None, (None, None))}),
                "Starting",
                None,
            ),
            (
                "6: found rs",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some("FoundNewReplicaSet"), None, (None, None))}),
                "Starting",
                None,
            ),
            (
                "7: no available condition",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), None, (Some(1), None))}),
                "Unknown",
                None,
            ),
            (
                "8: stopped",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(0), Some(NRA), Some(MRA), (None, None))}),
                "Stopped",
                None,
            ),
            (
                "8: running",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRA), (Some(1), None))}),
                "Running",
                None,
            ),
            (
                "8: stopping",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(0), Some(NRA), Some(MRA), (Some(1), None))}),
                "Stopping",
                None,
            ),
            (
                "8: starting (available)",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRA), (Some(0), Some(1)))}),
                "Starting",
                None,
            ),
            (
                "8: starting (unavailable)",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRU), (None, Some(1)))}),
                "Starting",
                None,
            ),
            (
                "9: running with one unavailable",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRA), (Some(1), Some(1)))}),
                "Unknown",
                None,
            ),
            (
                "9: other reason",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some("Other"), Some(MRA), (Some(1), None))}),
                "Unknown",
                None,
            ),
            (
                "pod failure",
                json!({"latest_k8s_deployment_info": d(Some("1"), Some(1), Some(NRA), Some(MRU), (None, Some(1))),
                "pod_failure": {"reason": "CrashLoopBackOff", "message": "back-off restarting"}}),
                "Failed",
                Some("CrashLoopBackOff: back-off restarting"),
            ),
        ];
        for (i, (label, extra, want, reason)) in cases.into_iter().enumerate() {
            let name = format!("case-{i}");
            s.workspace(&s.admin_token, json!({"name": name})).await;
            let mut report = json!({"name": name, "namespace": format!("warren-ws-{name}")});
            for (k, v) in extra.as_object().unwrap() {
                report[k] = v.clone();
            }
            let infos = s.reconcile_ok(agent, "partial", json!([report])).await;
            assert_eq!(
                infos[&name]["actual_state"], want,
                "[{}] {label}: response",
                s.label
            );
            let w = ws_state(&s, &name).await;
            assert_eq!(w["actual_state"], want, "[{}] {label}: stored", s.label);
            match reason {
                Some(r) => assert!(
                    w["failure_reason"].as_str().is_some_and(|f| f.contains(r)),
                    "[{}] {label}: failure reason {}",
                    s.label,
                    w["failure_reason"]
                ),
                None => assert!(
                    w["failure_reason"].is_null(),
                    "[{}] {label}: {}",
                    s.label,
                    w["failure_reason"]
                ),
            }
        }
        // A failure reason clears once the workspace is healthy again.
        s.reconcile_ok(agent, "partial", json!([running("case-1", "9")]))
            .await;
        assert!(ws_state(&s, "case-1").await["failure_reason"].is_null());
        s.stop().await;
    }
}

/// A pod no node can take (a machine class's devices or node selector the cluster lacks) is
/// not a failure: the workspace stays `Starting` and says why in the scheduler's words; when
/// the Deployment's deadline passes it fails with that reason; once it runs, neither remains.
#[tokio::test]
async fn a_pod_no_node_can_run_waits_and_says_why() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let l = s.label;
        let ann = s.user("ann", &["api", "workspace"]).await;
        s.workspace(&ann, json!({"name": "gpu"})).await;
        let why = "0/1 nodes are available: 1 Insufficient example.com/gpu.";
        let starting = |rv: &str| {
            json!({"name": "gpu", "namespace": "warren-ws-gpu",
                   "latest_k8s_deployment_info": deployment("gpu", Some(rv), Some(1), Some("ReplicaSetUpdated"), Some(MRU), (None, Some(1)))})
        };
        let mut report = starting("1");
        report["pod_waiting"] = json!({"reason": "Unschedulable", "message": why});
        s.reconcile_ok(agent, "partial", json!([report])).await;
        let w = ws_state(&s, "gpu").await;
        assert_eq!(w["actual_state"], "Starting", "[{l}] {w}");
        assert!(w["failure_reason"].is_null(), "[{l}] not a failure: {w}");
        let waiting = w["waiting_reason"].as_str().unwrap_or_default();
        assert!(
            waiting.starts_with("no node can run it yet: ") && waiting.ends_with(why),
            "[{l}] {waiting:?}"
        );
        // The web UI says it on the workspace's page and in the list.
        let mut browser = crate::ui::signed_in(&s, "ann", "password-123").await;
        for page in ["/workspaces/gpu", "/"] {
            let body = browser.get(page).await.body;
            assert!(
                body.contains("Waiting: no node can run it yet: 0/1 nodes are available"),
                "[{l}] {page}: {body}"
            );
        }
        // The same report again changes nothing; one without the reason clears it.
        let version = w["version"].clone();
        s.reconcile_ok(agent, "partial", json!([report])).await;
        assert_eq!(ws_state(&s, "gpu").await["version"], version, "[{l}]");
        s.reconcile_ok(agent, "partial", json!([starting("2")]))
            .await;
        let w = ws_state(&s, "gpu").await;
        assert!(w["waiting_reason"].is_null(), "[{l}] cleared: {w}");
        // Past the Deployment's deadline: Failed, and the reason says what held it.
        let mut late = json!({"name": "gpu", "namespace": "warren-ws-gpu",
            "latest_k8s_deployment_info": deployment("gpu", Some("3"), Some(1), Some("ProgressDeadlineExceeded"), Some(MRU), (None, Some(1))),
            "pod_waiting": {"reason": "Unschedulable", "message": why}});
        s.reconcile_ok(agent, "partial", json!([late.take()])).await;
        let w = ws_state(&s, "gpu").await;
        assert_eq!(w["actual_state"], "Failed", "[{l}] {w}");
        let failure = w["failure_reason"].as_str().unwrap_or_default();
        assert!(
            failure.starts_with("ProgressDeadlineExceeded") && failure.contains(why),
            "[{l}] {failure:?}"
        );
        assert!(w["waiting_reason"].is_null(), "[{l}] {w}");
        // Running: neither.
        s.reconcile_ok(agent, "partial", json!([running("gpu", "4")]))
            .await;
        let w = ws_state(&s, "gpu").await;
        assert!(
            w["failure_reason"].is_null() && w["waiting_reason"].is_null(),
            "[{l}] {w}"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn selection_and_config_to_apply_rules() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let other = s.agent("a2", json!({})).await;
        s.workspace(&s.admin_token, json!({"name": "w1", "agent": "a1"}))
            .await;
        s.workspace(&s.admin_token, json!({"name": "w2", "agent": "a1"}))
            .await;
        s.workspace(&s.admin_token, json!({"name": "w3", "agent": "a2"}))
            .await;
        let l = s.label;

        // Partial: never responded to → included with objects.
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(infos.len(), 2, "[{l}] {infos:?}");
        for w in ["w1", "w2"] {
            let yaml = infos[w]["config_to_apply"]
                .as_str()
                .unwrap_or_else(|| panic!("[{l}] {w} needs config"));
            assert!(
                yaml.contains("kind: Deployment") && yaml.contains("replicas: 1"),
                "[{l}] {yaml}"
            );
            assert_eq!(infos[w]["desired_state"], "Running");
            assert_eq!(infos[w]["actual_state"], "CreationRequested");
        }
        // Nothing changed since → nothing returned.
        assert!(
            s.reconcile_ok(agent, "partial", json!([])).await.is_empty(),
            "[{l}] no-op partial"
        );
        // Named in the request → returned, but without objects (desired did not change).
        let infos = s
            .reconcile_ok(agent, "partial", json!([running("w1", "5")]))
            .await;
        assert_eq!(infos.keys().collect::<Vec<_>>(), ["w1"], "[{l}]");
        assert!(
            infos["w1"]["config_to_apply"].is_null(),
            "[{l}] {:?}",
            infos["w1"]
        );
        assert_eq!(infos["w1"]["actual_state"], "Running");
        // A desired-state change → returned with objects at replicas 0.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w2/desired_state",
                Some(json!({"desired_state": "Stopped"})),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(infos.keys().collect::<Vec<_>>(), ["w2"], "[{l}]");
        assert!(infos["w2"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("replicas: 0"));
        // Forced (resize) → returned with all objects.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w2/resources",
                Some(json!({"resources": {"cpu": "1"}})),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert!(infos["w2"]["config_to_apply"].is_string(), "[{l}] forced");
        assert!(
            s.reconcile_ok(agent, "partial", json!([])).await.is_empty(),
            "[{l}] force flag cleared"
        );
        // Full: every workspace of the agent, all with objects; not the other agent's.
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        assert_eq!(infos.keys().collect::<Vec<_>>(), ["w1", "w2"], "[{l}]");
        assert!(infos.values().all(|i| i["config_to_apply"].is_string()));
        assert_eq!(
            s.reconcile_ok(other, "full", json!([]))
                .await
                .keys()
                .collect::<Vec<_>>(),
            ["w3"]
        );
        // Terminated: no objects; once both are Terminated, full leaves it out.
        let (st, _) = s.admin(Method::DELETE, "/api/v1/workspaces/w1", None).await;
        assert_eq!(st, 200);
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(infos["w1"]["desired_state"], "Terminated");
        assert!(
            infos["w1"]["config_to_apply"].is_null(),
            "[{l}] terminated carries no objects"
        );
        let infos = s
            .reconcile_ok(agent, "partial", json!([{"name": "w1", "namespace": "warren-ws-w1", "termination_progress": "Terminated"}]))
            .await;
        assert_eq!(
            infos["w1"]["actual_state"], "Terminated",
            "[{l}] echoed so the agent forgets it"
        );
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        assert_eq!(
            infos.keys().collect::<Vec<_>>(),
            ["w2"],
            "[{l}] both-terminated left out of full"
        );
        // Nothing moves a terminated workspace, and its later reports cannot revive it.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/desired_state",
                Some(json!({"desired_state": "Running"})),
            )
            .await;
        assert_eq!(st, 409, "{b}");
        assert!(
            b["error"]["message"]
                .as_str()
                .unwrap()
                .contains("Terminated"),
            "{b}"
        );
        s.reconcile_ok(agent, "partial", json!([running("w1", "77")]))
            .await;
        assert_eq!(ws_state(&s, "w1").await["actual_state"], "Terminated");
        // Gone behind Warren's back: Terminated is final for desired state too, so a full
        // reconcile does not re-create it.
        let infos = s
            .reconcile_ok(agent, "partial", json!([{"name": "w2", "namespace": "warren-ws-w2", "termination_progress": "Terminated"}]))
            .await;
        assert_eq!(
            (
                infos["w2"]["desired_state"].as_str(),
                infos["w2"]["actual_state"].as_str()
            ),
            (Some("Terminated"), Some("Terminated"))
        );
        assert!(infos["w2"]["config_to_apply"].is_null());
        assert!(
            s.reconcile_ok(agent, "full", json!([])).await.is_empty(),
            "[{l}]"
        );
        s.stop().await;
    }
}

/// `report` with its Deployment annotated as having applied `generation`.
fn applied(mut report: Value, generation: &str) -> Value {
    report["latest_k8s_deployment_info"]["metadata"]["annotations"] =
        json!({ CONFIG_GENERATION_ANNOTATION: generation });
    report
}

#[tokio::test]
async fn a_full_reconcile_leaves_out_only_the_objects_an_agent_has_applied_and_settled() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let l = s.label;
        let agent = s.agent("a1", json!({})).await;
        for w in ["w1", "w2", "w3"] {
            s.workspace(&s.admin_token, json!({"name": w, "agent": "a1"}))
                .await;
        }
        // Nothing reported: every workspace's objects go out, each rendering with its own
        // generation.
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let generation: std::collections::BTreeMap<&str, String> = ["w1", "w2", "w3"]
            .into_iter()
            .map(|w| {
                (
                    w,
                    generation_of(infos[w]["config_to_apply"].as_str().unwrap()),
                )
            })
            .collect();
        assert_ne!(generation["w1"], generation["w2"], "[{l}]");

        // w1 applied and running; w2 running an older rendering; w3 applied but not up yet.
        let mut starting = applied(running("w3", "3"), &generation["w3"]);
        starting["latest_k8s_deployment_info"]["status"] = json!({});
        let reports = json!([
            applied(running("w1", "1"), &generation["w1"]),
            applied(running("w2", "2"), "an-older-rendering"),
            starting,
        ]);
        let infos = s.reconcile_ok(agent, "full", reports.clone()).await;
        assert_eq!(infos.len(), 3, "[{l}] every workspace still goes back");
        assert!(
            infos["w1"]["config_to_apply"].is_null(),
            "[{l}] {:?}",
            infos["w1"]
        );
        assert_eq!(infos["w1"]["actual_state"], "Running");
        assert!(
            infos["w2"]["config_to_apply"].is_string(),
            "[{l}] older rendering"
        );
        assert!(
            infos["w3"]["config_to_apply"].is_string(),
            "[{l}] not settled"
        );
        // The same again: nothing of it was marked, so the answer is the same.
        let again = s.reconcile_ok(agent, "full", reports).await;
        assert_eq!(again, infos, "[{l}]");

        // Scaled down behind Warren's back: the generation is current, but the workspace is
        // not in its desired state, so its objects go out again.
        let infos = s
            .reconcile_ok(
                agent,
                "full",
                json!([applied(stopped("w1", "4"), &generation["w1"])]),
            )
            .await;
        assert!(infos["w1"]["config_to_apply"].is_string(), "[{l}] drifted");

        // Stopped on purpose: the change goes out at once; once stopped, a full answer
        // leaves the objects out again.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/desired_state",
                Some(json!({"desired_state": "Stopped"})),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let infos = s
            .reconcile_ok(
                agent,
                "full",
                json!([applied(running("w1", "5"), &generation["w1"])]),
            )
            .await;
        assert!(
            infos["w1"]["config_to_apply"]
                .as_str()
                .unwrap()
                .contains("replicas: 0"),
            "[{l}] a changed desired state always carries objects"
        );
        let infos = s
            .reconcile_ok(
                agent,
                "full",
                json!([applied(stopped("w1", "6"), &generation["w1"])]),
            )
            .await;
        assert!(
            infos["w1"]["config_to_apply"].is_null(),
            "[{l}] stopped and settled"
        );

        // A resize renders anew: forced, with a new generation, whatever the agent reports.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/resources",
                Some(json!({"resources": {"cpu": "1"}})),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let infos = s
            .reconcile_ok(
                agent,
                "full",
                json!([applied(stopped("w1", "6"), &generation["w1"])]),
            )
            .await;
        let config = infos["w1"]["config_to_apply"].as_str().expect("forced");
        assert_ne!(
            generation_of(config),
            generation["w1"],
            "[{l}] a new rendering"
        );
        let infos = s
            .reconcile_ok(
                agent,
                "full",
                json!([applied(stopped("w1", "7"), &generation["w1"])]),
            )
            .await;
        assert!(
            infos["w1"]["config_to_apply"].is_string(),
            "[{l}] the old rendering is no longer current"
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn resource_versions_are_stored_kept_and_echoed() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        assert!(infos["w1"]["deployment_resource_version"].is_null());
        let infos = s
            .reconcile_ok(agent, "partial", json!([running("w1", "42")]))
            .await;
        assert_eq!(infos["w1"]["deployment_resource_version"], "42");
        // A report without a resourceVersion keeps the old one.
        let infos = s
            .reconcile_ok(agent, "partial", json!([{"name": "w1", "namespace": "warren-ws-w1", "termination_progress": "Terminating"}]))
            .await;
        assert_eq!(
            infos["w1"]["deployment_resource_version"], "42",
            "[{}]",
            s.label
        );
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        assert_eq!(infos["w1"]["deployment_resource_version"], "42");
        s.stop().await;
    }
}

#[tokio::test]
async fn restart_requested_flips_to_running_when_stopped_arrives() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        s.reconcile_ok(agent, "full", json!([running("w1", "1")]))
            .await;
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/workspaces/w1/desired_state",
                Some(json!({"desired_state": "RestartRequested"})),
            )
            .await;
        assert_eq!(
            (st, b["desired_state"].clone()),
            (200, json!("RestartRequested"))
        );
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(infos["w1"]["desired_state"], "RestartRequested");
        assert!(
            infos["w1"]["config_to_apply"]
                .as_str()
                .unwrap()
                .contains("replicas: 0"),
            "[{}]",
            s.label
        );
        // Still running: stays RestartRequested.
        let infos = s
            .reconcile_ok(agent, "partial", json!([running("w1", "2")]))
            .await;
        assert_eq!(infos["w1"]["desired_state"], "RestartRequested");
        // Stopped arrives: the server switches desired to Running and sends replicas 1.
        let infos = s
            .reconcile_ok(agent, "partial", json!([stopped("w1", "3")]))
            .await;
        assert_eq!(infos["w1"]["desired_state"], "Running", "[{}]", s.label);
        assert_eq!(infos["w1"]["actual_state"], "Stopped");
        assert!(infos["w1"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("replicas: 1"));
        assert_eq!(ws_state(&s, "w1").await["desired_state"], "Running");
        s.stop().await;
    }
}

#[tokio::test]
async fn lifecycle_timers_in_reconcile_and_in_the_background() {
    const HOUR: i64 = 3_600_000;
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent(
            "a1",
            json!({"lifecycle": {"max_active_hours_before_stop": 2, "max_stopped_hours_before_termination": 3}}),
        )
        .await;
        s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        s.workspace(&s.admin_token, json!({"name": "w2"})).await;
        s.reconcile_ok(
            agent,
            "full",
            json!([running("w1", "1"), running("w2", "1")]),
        )
        .await;
        s.clock.advance_ms(HOUR);
        s.reconcile_ok(agent, "partial", json!([running("w1", "1")]))
            .await;
        assert_eq!(
            ws_state(&s, "w1").await["desired_state"],
            "Running",
            "[{}] not yet",
            s.label
        );
        s.clock.advance_ms(HOUR + 1);
        // In the request: w1 is stopped by the reconcile itself, and sent with replicas 0.
        let infos = s
            .reconcile_ok(agent, "partial", json!([running("w1", "1")]))
            .await;
        assert_eq!(infos["w1"]["desired_state"], "Stopped", "[{}]", s.label);
        assert!(infos["w1"]["config_to_apply"]
            .as_str()
            .unwrap()
            .contains("replicas: 0"));
        // Not in any request: the background task stops w2.
        assert_eq!(ws_state(&s, "w2").await["desired_state"], "Running");
        let mut signals = s.state.signals.subscribe();
        warren_server::app::lifecycle::run_timers_once(&s.state)
            .await
            .unwrap();
        assert_eq!(
            ws_state(&s, "w2").await["desired_state"],
            "Stopped",
            "[{}]",
            s.label
        );
        assert_eq!(
            signals.try_recv().ok().map(|a| a.get()),
            Some(agent),
            "the agent is signalled"
        );
        // Stopped for 3 hours → terminated.
        s.clock.advance_ms(3 * HOUR);
        warren_server::app::lifecycle::run_timers_once(&s.state)
            .await
            .unwrap();
        assert_eq!(ws_state(&s, "w1").await["desired_state"], "Terminated");
        assert_eq!(ws_state(&s, "w2").await["desired_state"], "Terminated");
        // The 8760-hour ceiling holds whatever the policy.
        s.workspace(&s.admin_token, json!({"name": "w3"})).await;
        s.reconcile_ok(agent, "full", json!([running("w3", "1")]))
            .await;
        for _ in 0..8760 {
            // Keep it "recently asked for Running" so only the ceiling can apply.
            s.clock.advance_ms(HOUR);
        }
        let infos = s
            .reconcile_ok(agent, "partial", json!([running("w3", "1")]))
            .await;
        assert_eq!(
            infos["w3"]["desired_state"], "Terminated",
            "[{}] ceiling",
            s.label
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn reports_for_unknown_or_foreign_workspaces_are_ignored() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let a1 = s.agent("a1", json!({})).await;
        s.agent("a2", json!({})).await;
        s.workspace(&s.admin_token, json!({"name": "theirs", "agent": "a2"}))
            .await;
        let infos = s
            .reconcile_ok(
                a1,
                "partial",
                json!([running("nobody", "1"), running("theirs", "1")]),
            )
            .await;
        assert!(infos.is_empty(), "[{}] {infos:?}", s.label);
        let w = ws_state(&s, "theirs").await;
        assert_eq!(
            w["actual_state"], "CreationRequested",
            "[{}] never applied",
            s.label
        );
        s.stop().await;
    }
}

#[tokio::test]
async fn the_same_request_twice_gives_the_same_state_and_answer() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        s.workspace(&s.admin_token, json!({"name": "w1"})).await;
        s.workspace(&s.admin_token, json!({"name": "w2"})).await;
        let req = json!([running("w1", "3"), stopped("w2", "4")]);
        let first = s.reconcile_ok(agent, "full", req.clone()).await;
        let before = (ws_state(&s, "w1").await, ws_state(&s, "w2").await);
        let second = s.reconcile_ok(agent, "full", req).await;
        let after = (ws_state(&s, "w1").await, ws_state(&s, "w2").await);
        assert_eq!(first, second, "[{}] equivalent answer", s.label);
        assert_eq!(before, after, "[{}] same state", s.label);
        s.stop().await;
    }
}

#[tokio::test]
async fn relay_authentication_and_body_validation() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let path = warren_types::reconcile::RECONCILE_PATH;
        let body = json!({"update_type": "full", "workspace_agent_infos": []});
        let (st, b) = s.call(Method::POST, path, None, Some(body.clone())).await;
        assert_eq!(st, 401, "{b}");
        assert_eq!(b["error"]["code"], "unauthorized");
        // An agent or user token is not a relay JWT.
        let (st, _) = s.post(&s.admin_token.clone(), path, body.clone()).await;
        assert_eq!(st, 401);
        let now = chrono::Utc::now().timestamp();
        let wrong_secret = warren_server::relay::jwt::mint(
            b"another-secret-another-secret-xxxx",
            "warren-relay",
            "warren-server",
            Some(agent.to_string()),
            now,
            30,
        );
        let wrong_iss = warren_server::relay::jwt::mint(
            RELAY_SECRET.as_bytes(),
            "warren-server",
            "warren-server",
            Some(agent.to_string()),
            now,
            30,
        );
        let no_sub = warren_server::relay::jwt::mint(
            RELAY_SECRET.as_bytes(),
            "warren-relay",
            "warren-server",
            None,
            now,
            30,
        );
        let unknown_agent = warren_server::relay::jwt::mint(
            RELAY_SECRET.as_bytes(),
            "warren-relay",
            "warren-server",
            Some("999".into()),
            now,
            30,
        );
        for (label, jwt) in [
            ("secret", wrong_secret),
            ("issuer", wrong_iss),
            ("sub", no_sub),
            ("agent", unknown_agent),
        ] {
            let (st, b) = s.post(&jwt, path, body.clone()).await;
            assert_eq!(st, 401, "[{}] {label}: {b}", s.label);
            assert!(b["error"]["message"].is_string());
        }
        // The agent header must match the JWT's subject.
        let resp = s
            .http
            .post(format!("{}{path}", s.base))
            .bearer_auth(s.relay_jwt(agent))
            .header(AGENT_ID_HEADER, "12345")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401);
        // Unknown fields → 400 naming them.
        let (st, b) = s
            .reconcile(
                agent,
                json!({"update_type": "full", "workspace_agent_infos": [], "extra": 1}),
            )
            .await;
        assert_eq!(st, 400, "{b}");
        assert!(
            b["error"]["message"].as_str().unwrap().contains("extra"),
            "{b}"
        );
        let (st, b) = s
            .reconcile(agent, json!({"update_type": "full", "workspace_agent_infos": [{"name": "w", "namespace": "n", "bogus": 1}]}))
            .await;
        assert_eq!(st, 400, "{b}");
        assert!(
            b["error"]["message"].as_str().unwrap().contains("bogus"),
            "{b}"
        );
        let (st, b) = s
            .reconcile(
                agent,
                json!({"update_type": "sometimes", "workspace_agent_infos": []}),
            )
            .await;
        assert_eq!(st, 400, "{b}");
        // The settings come back with the answer.
        let (st, b) = s.reconcile(agent, body).await;
        assert_eq!(st, 201);
        assert_eq!(b["settings"]["partial_reconciliation_interval_seconds"], 10);
        assert_eq!(b["settings"]["full_reconciliation_interval_seconds"], 3600);
        s.stop().await;
    }
}

#[tokio::test]
async fn the_relay_checks_agent_tokens() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let (st, b) = s
            .admin(Method::POST, "/api/v1/agents", Some(json!({"name": "a1"})))
            .await;
        assert_eq!(st, 201);
        let token = b["token"].as_str().unwrap().to_owned();
        let id = b["agent"]["id"].as_i64().unwrap();
        assert!(token.starts_with("wrn_agent_"));
        let path = warren_types::internal::AUTHENTICATE_AGENT_PATH;
        let jwt = warren_server::relay::jwt::mint(
            RELAY_SECRET.as_bytes(),
            "warren-relay",
            "warren-server",
            None,
            chrono::Utc::now().timestamp(),
            30,
        );
        let (st, b) = s.post(&jwt, path, json!({"token": token})).await;
        assert_eq!(st, 200, "{b}");
        assert_eq!(
            (b["agent_id"].as_i64(), b["agent_name"].as_str()),
            (Some(id), Some("a1"))
        );
        let (st, _) = s.post(&jwt, path, json!({"token": "wrn_agent_nope"})).await;
        assert_eq!(st, 401);
        let (st, _) = s
            .call(Method::POST, path, None, Some(json!({"token": token})))
            .await;
        assert_eq!(st, 401, "needs the relay JWT");
        s.stop().await;
    }
}

/// The "done when": a scripted agent walks a workspace through its whole life.
#[tokio::test]
async fn scripted_agent_walks_a_workspace_through_its_life() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let w = s.workspace(&s.admin_token, json!({})).await;
        let name = w["name"].as_str().unwrap().to_owned();
        let ns = w["namespace"].as_str().unwrap().to_owned();
        let l = s.label;
        let dep = |rv: &str, r, p, a, c| {
            json!({"name": name, "namespace": ns,
            "latest_k8s_deployment_info": deployment(&name, Some(rv), Some(r), Some(p), a, c)})
        };
        // (report, expected desired, expected actual, config_to_apply present)
        let step = |infos: serde_json::Map<String, Value>,
                    desired: &str,
                    actual: &str,
                    config: bool,
                    label: &str| {
            let i = &infos[&name];
            assert_eq!(i["desired_state"], desired, "[{l}] {label}");
            assert_eq!(i["actual_state"], actual, "[{l}] {label}");
            assert_eq!(
                i["config_to_apply"].is_string(),
                config,
                "[{l}] {label}: {:?}",
                i["config_to_apply"]
            );
        };
        step(
            s.reconcile_ok(agent, "full", json!([])).await,
            "Running",
            "CreationRequested",
            true,
            "created",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("1", 1, "NewReplicaSetCreated", None, (None, None))]),
            )
            .await,
            "Running",
            "Starting",
            false,
            "starting",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("2", 1, NRA, Some(MRA), (Some(1), None))]),
            )
            .await,
            "Running",
            "Running",
            false,
            "running",
        );
        s.admin(
            Method::PUT,
            &format!("/api/v1/workspaces/{name}/desired_state"),
            Some(json!({"desired_state": "Stopped"})),
        )
        .await;
        step(
            s.reconcile_ok(agent, "partial", json!([])).await,
            "Stopped",
            "Running",
            true,
            "stop requested",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("3", 0, "ReplicaSetUpdated", None, (Some(1), None))]),
            )
            .await,
            "Stopped",
            "Stopping",
            false,
            "stopping",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("4", 0, NRA, Some(MRA), (None, None))]),
            )
            .await,
            "Stopped",
            "Stopped",
            false,
            "stopped",
        );
        s.admin(
            Method::PUT,
            &format!("/api/v1/workspaces/{name}/desired_state"),
            Some(json!({"desired_state": "Running"})),
        )
        .await;
        step(
            s.reconcile_ok(agent, "partial", json!([])).await,
            "Running",
            "Stopped",
            true,
            "start requested",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("5", 1, "ReplicaSetUpdated", None, (None, None))]),
            )
            .await,
            "Running",
            "Starting",
            false,
            "starting again",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([dep("6", 1, NRA, Some(MRA), (Some(1), None))]),
            )
            .await,
            "Running",
            "Running",
            false,
            "running again",
        );
        s.admin(Method::DELETE, &format!("/api/v1/workspaces/{name}"), None)
            .await;
        step(
            s.reconcile_ok(agent, "partial", json!([])).await,
            "Terminated",
            "Running",
            false,
            "terminate requested",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([{"name": name, "namespace": ns, "termination_progress": "Terminating"}]),
            )
            .await,
            "Terminated",
            "Terminating",
            false,
            "terminating",
        );
        step(
            s.reconcile_ok(
                agent,
                "partial",
                json!([{"name": name, "namespace": ns, "termination_progress": "Terminated"}]),
            )
            .await,
            "Terminated",
            "Terminated",
            false,
            "terminated",
        );
        assert!(
            s.reconcile_ok(agent, "full", json!([])).await.is_empty(),
            "[{l}] gone from full"
        );
        s.stop().await;
    }
}
