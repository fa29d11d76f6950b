//! A devfile rendered by `warren-devfile`, applied by the engine runtime to a real Podman:
//! the renderer's objects and the engine's mapping agree end to end.

use crate::common;

use anyhow::{Context, Result};
use common::*;
use warren_agent::runtime::WorkspaceRuntime;
use warren_devfile::{parse_devfile, render, RenderRequest, ResolvedVariable};
use warren_types::api::VariableKind;
use warren_types::config::AgentConfig;
use warren_types::state::ActualState;
use warren_types::{DesiredState, WorkspaceId};

const DEVFILE: &str = r#"
schemaVersion: 2.2.0
metadata: {name: engine-e2e}
components:
  - name: dev
    attributes: {warren.dev/main: true}
    container:
      image: localhost/warren-test:latest
      memoryLimit: 128Mi
      cpuLimit: 250m
      command: [sh, -c, "mkdir -p /tmp/www && echo \"hello $GREETING\" > /tmp/www/index.html && exec httpd -f -p 8080 -h /tmp/www"]
      endpoints:
        - {name: web, targetPort: 8080}
      volumeMounts: [{name: cache, path: /home/user/.cache}]
  - name: cache
    volume: {size: 1Gi}
commands:
  - id: prepare
    exec: {component: dev, commandLine: "echo prepared > /projects/.prepared"}
events:
  preStart: [prepare]
"#;

fn rendered(ws: &Workspace, desired: DesiredState) -> Result<Vec<serde_json::Value>> {
    let config = AgentConfig {
        workspace_domain: "ws.example.test".into(),
        ..Default::default()
    };
    rendered_with(DEVFILE, &config, ws, desired)
}

fn rendered_with(
    text: &str,
    config: &AgentConfig,
    ws: &Workspace,
    desired: DesiredState,
) -> Result<Vec<serde_json::Value>> {
    let devfile = parse_devfile(text).map_err(|e| anyhow::anyhow!("{e}"))?;
    let variables = [
        ResolvedVariable {
            key: "GREETING".into(),
            value: "from a variable".into(),
            kind: VariableKind::Env,
        },
        ResolvedVariable {
            key: "token.txt".into(),
            value: "t0ken".into(),
            kind: VariableKind::File,
        },
    ];
    let req = RenderRequest {
        workspace_name: ws.name(),
        workspace_id: WorkspaceId(4242),
        agent_id: ws.agent_id,
        agent_config: config,
        project: None,
        resources: None,
        machine: None,
        variables: &variables,
        desired_state: desired,
        dotfiles_url: None,
        starter: None,
        prebuild: false,
        seed: None,
    };
    Ok(render(&devfile, &req)?.objects)
}

#[tokio::test]
async fn a_rendered_devfile_runs_stops_and_starts() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let mut ws = Workspace::new("devfile", h.agent_id);
    let objects = rendered(&ws, DesiredState::Running)?;
    let namespace = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d["metadata"]["namespace"].as_str())
        .context("namespace")?
        .to_owned();
    ws.key.namespace = namespace;
    h.runtime.apply(&ws.key, &objects).await?;
    let running = wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert!(running.pod_failure.is_none());

    let dev = h
        .runtime
        .docker()
        .inspect_container(&format!("warren-{}.c.dev", ws.name()), None)
        .await?;
    let hc = dev.host_config.context("host config")?;
    assert_eq!(hc.memory, Some(128 << 20));
    assert_eq!(hc.nano_cpus, Some(250_000_000));
    assert_eq!(dev.config.and_then(|c| c.user).as_deref(), Some("5001:0"));
    assert_eq!(
        exec(&ws, "dev", "cat /projects/.prepared")?.trim(),
        "prepared",
        "preStart ran"
    );
    let token = exec(
        &ws,
        "dev",
        &format!("cat {}/token.txt", warren_devfile::FILES_MOUNT_PATH),
    )?;
    assert_eq!(token, "t0ken", "file variable mounted");

    let body = http_get_via_dial(&h.runtime, &ws, 8080).await?;
    assert!(body.contains("hello from a variable"), "{body}");

    h.runtime
        .apply(&ws.key, &rendered(&ws, DesiredState::Stopped)?)
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    h.runtime
        .apply(&ws.key, &rendered(&ws, DesiredState::Running)?)
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(
        exec(&ws, "dev", "cat /projects/.prepared")?.trim(),
        "prepared"
    );
    Ok(())
}

/// What the agent's admin allows a workspace (a debugger's `SYS_PTRACE`, no seccomp filter)
/// is what the container's processes have, the terminal's among them; the container that
/// asked for nothing has nothing.
#[tokio::test]
async fn the_exceptions_an_admin_allows_are_what_the_processes_get() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    const DEBUG: &str = r#"
schemaVersion: 2.2.0
metadata: {name: debug}
components:
  - name: dev
    attributes:
      warren.dev/main: true
      warren.dev/isolation: {capAdd: [SYS_PTRACE], securityOpt: [seccomp=unconfined]}
    container: {image: localhost/warren-test:latest, command: [sleep, infinity]}
  - name: tools
    container: {image: localhost/warren-test:latest, command: [sleep, infinity], mountSources: false}
"#;
    let h = Harness::new().await?;
    let mut ws = Workspace::new("exceptions", h.agent_id);
    let mut config = AgentConfig::default();
    config.security.allowed_capabilities = vec!["SYS_PTRACE".into()];
    config.security.allowed_security_options = vec!["seccomp=unconfined".into()];
    let objects = rendered_with(DEBUG, &config, &ws, DesiredState::Running)?;
    ws.key.namespace = objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d["metadata"]["namespace"].as_str())
        .context("namespace")?
        .to_owned();
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    // CAP_SYS_PTRACE is bit 19.
    let status = |c: &str, pid: &str| {
        exec(
            &ws,
            c,
            &format!("grep -E '^(CapEff|Seccomp):' /proc/{pid}/status"),
        )
    };
    for pid in ["1", "self"] {
        let dev = status("dev", pid)?;
        assert!(dev.contains("CapEff:\t0000000000080000"), "{pid}: {dev}");
        assert!(dev.contains("Seccomp:\t0"), "{pid}: {dev}");
        let tools = status("tools", pid)?;
        assert!(
            tools.contains("CapEff:\t0000000000000000"),
            "{pid}: {tools}"
        );
        assert!(tools.contains("Seccomp:\t2"), "{pid}: {tools}");
    }
    Ok(())
}
