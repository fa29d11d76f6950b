//! A workspace's exceptions to its confinement (a capability, an unconfined seccomp profile):
//! the agent's admin allows each value; asked without it, creating the workspace is refused by
//! name; taken back, the workspaces that have it stop and do not start with it again.

use crate::common;

use common::*;
use reqwest::Method;
use serde_json::{json, Value};

const DEBUG_DEVFILE: &str = "schemaVersion: 2.2.0
metadata:
  name: debug
components:
  - name: dev
    attributes:
      warren.dev/isolation: {capAdd: [SYS_PTRACE], securityOpt: [seccomp=unconfined]}
    container:
      image: alpine:3
";

#[tokio::test]
async fn exceptions_to_the_confinement_are_the_agents_admin_to_allow_and_to_take_back() {
    for db in databases() {
        let s = TestServer::start(&db).await;
        let agent = s.agent("a1", json!({})).await;
        let user = s.user("dev", &["api", "workspace"]).await;
        let create = json!({"name": "dbg", "devfile": DEBUG_DEVFILE});

        // Not allowed: refused by name, nothing made.
        let (st, b) = s.post(&user, "/api/v1/workspaces", create.clone()).await;
        assert_eq!(st, 422, "[{}] {b}", s.label);
        assert_eq!(b["error"]["code"], "not_allowed_by_agent", "{b}");
        assert!(
            msg(&b).contains("the capability SYS_PTRACE, which this agent does not allow"),
            "{b}"
        );
        let (_, list) = s.get(&user, "/api/v1/workspaces").await;
        assert!(!list.to_string().contains("\"dbg\""), "{list}");
        // A user cannot allow it: the agent's configuration is the admin's.
        let (st, _) = s
            .put(
                &user,
                "/api/v1/agents/a1",
                json!({"config": {"security": {"allowed_capabilities": ["SYS_PTRACE"]}}}),
            )
            .await;
        assert_eq!(st, 403, "[{}]", s.label);

        // Allowed, value by value.
        let allow = |caps: Value, opts: Value| json!({"config": {"security": {"allowed_capabilities": caps, "allowed_security_options": opts}}});
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(allow(json!(["SYS_PTRACE"]), json!([]))),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let (st, b) = s.post(&user, "/api/v1/workspaces", create.clone()).await;
        assert_eq!(st, 422, "[{}] {b}", s.label);
        assert!(
            msg(&b).contains("the security option seccomp=unconfined"),
            "{b}"
        );
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(allow(json!(["SYS_PTRACE"]), json!(["seccomp=unconfined"]))),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        s.workspace(&user, create.clone()).await;
        let infos = s.reconcile_ok(agent, "full", json!([])).await;
        let config = infos["dbg"]["config_to_apply"].as_str().unwrap();
        assert!(
            config.contains("SYS_PTRACE") && config.contains("Unconfined"),
            "{config}"
        );
        s.reconcile_ok(agent, "full", json!([running("dbg", "1")]))
            .await;

        // Taken back: the workspace stops, says why, and does not start with it again.
        let (st, b) = s
            .admin(
                Method::PUT,
                "/api/v1/agents/a1",
                Some(allow(json!([]), json!(["seccomp=unconfined"]))),
            )
            .await;
        assert_eq!(st, 200, "{b}");
        let (_, w) = s.get(&user, "/api/v1/workspaces/dbg").await;
        assert_eq!(w["desired_state"], "Stopped", "[{}] {w}", s.label);
        assert!(
            w["failure_reason"]
                .as_str()
                .is_some_and(|r| r.contains("SYS_PTRACE")),
            "{w}"
        );
        let infos = s.reconcile_ok(agent, "partial", json!([])).await;
        assert_eq!(infos["dbg"]["desired_state"], "Stopped", "{infos:?}");
        let (st, b) = s
            .put(
                &user,
                "/api/v1/workspaces/dbg/desired_state",
                json!({"desired_state": "Running"}),
            )
            .await;
        assert_eq!(st, 422, "[{}] {b}", s.label);
        assert!(msg(&b).contains("SYS_PTRACE"), "{b}");
        let (_, w) = s.get(&user, "/api/v1/workspaces/dbg").await;
        assert_eq!(w["desired_state"], "Stopped", "{w}");
        s.stop().await;
    }
}
