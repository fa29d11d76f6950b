//! The container-engine runtime against a real Podman (or Docker): lifecycle, limits and
//! security settings, pod failures, agent restart, deletion and dialling.
//!
//! Skips with a notice when no engine exists; fails instead under `WARREN_REQUIRE_ENGINE=1`.

use crate::common;

use anyhow::{Context, Result};
use common::*;
use futures::StreamExt;
use std::collections::BTreeSet;
use std::time::Duration;
use warren_agent::runtime::{RuntimeError, WorkspaceRuntime};
use warren_types::reconcile::TerminationProgress;
use warren_types::state::ActualState;

/// Container ids of the workspace, by engine name.
async fn container_ids(h: &Harness, ws: &Workspace) -> Result<Vec<(String, String)>> {
    let lines = cli_lines(&[
        "ps",
        "-a",
        "--filter",
        &format!("label=warren.dev/workspace-name={}", ws.name()),
        "--format",
        "{{.Names}} {{.ID}}",
    ]);
    let mut out: Vec<(String, String)> = lines
        .iter()
        .filter_map(|l| l.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())))
        .collect();
    out.sort();
    let _ = h;
    Ok(out)
}

#[tokio::test]
async fn running_workspace_has_limits_user_security_and_files() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("limits", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    let observed = wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert!(observed.pod_failure.is_none());
    let d = observed.deployment.as_ref().context("deployment")?;
    assert_eq!(d["metadata"]["name"], ws.name());
    assert_eq!(d["metadata"]["labels"]["warren.dev/workspace-id"], "4242");
    assert_eq!(d["status"]["availableReplicas"], 1);

    let docker = h.runtime.docker();
    let dev = docker
        .inspect_container(&format!("warren-{}.c.dev", ws.name()), None)
        .await?;
    let hc = dev.host_config.context("host config")?;
    assert_eq!(
        hc.memory,
        Some(256 << 20),
        "memory limit from resources.limits.memory"
    );
    assert_eq!(
        hc.nano_cpus,
        Some(500_000_000),
        "cpu limit from resources.limits.cpu"
    );
    assert_eq!(hc.privileged, Some(false));
    assert_eq!(
        hc.init,
        Some(true),
        "an init process, so SIGTERM stops the container"
    );
    // Docker reports `ALL`; Podman expands it to the default capabilities it dropped.
    let cap_drop: Vec<String> = hc
        .cap_drop
        .unwrap_or_default()
        .iter()
        .map(|c| c.to_uppercase())
        .collect();
    let expanded = [
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "KILL",
        "NET_RAW",
        "SETGID",
        "SETUID",
    ]
    .iter()
    .all(|cap| {
        cap_drop
            .iter()
            .any(|c| c.trim_start_matches("CAP_") == *cap)
    });
    assert!(cap_drop == ["ALL"] || expanded, "cap_drop {cap_drop:?}");
    let sec = hc.security_opt.unwrap_or_default();
    assert!(
        sec.iter().any(|s| s.contains("no-new-privileges")),
        "security_opt {sec:?}"
    );
    assert_eq!(
        dev.config.as_ref().and_then(|c| c.user.clone()).as_deref(),
        Some("5001:0")
    );
    let tools = docker
        .inspect_container(&format!("warren-{}.c.tools", ws.name()), None)
        .await?;
    assert_eq!(tools.host_config.and_then(|h| h.memory), Some(32 << 20));

    // Inside: the user, dropped capabilities, no_new_privs, the env and files.
    let id = exec(
        &ws,
        "dev",
        "id -u; id -g; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status",
    )?;
    let lines: Vec<&str> = id.lines().collect();
    assert_eq!(lines[0], "5001");
    assert_eq!(lines[1], "0");
    assert!(id.contains("CapEff:\t0000000000000000"), "{id}");
    assert!(id.contains("NoNewPrivs:\t1"), "{id}");
    assert_eq!(
        exec(&ws, "dev", "echo $GREETING")?.trim(),
        "hello from the secret"
    );
    assert_eq!(exec(&ws, "dev", "echo $POD_NAME")?.trim(), ws.name());
    assert_eq!(
        exec(&ws, "dev", "cat /.warren/files/token")?,
        "s3cret-token"
    );
    let perms = exec(&ws, "dev", "stat -c '%a %u' /.warren/files/token")?;
    assert_eq!(perms.trim(), "600 5001");
    let ro = exec(&ws, "dev", "touch /.warren/files/x 2>&1 || echo refused")?;
    assert!(ro.contains("refused"), "secret files are read-only: {ro}");
    assert_eq!(
        exec(&ws, "dev", "cat /projects/.prestart")?.trim(),
        "prestart ran",
        "init container ran"
    );
    // One network namespace, as in a pod: the sidecar reaches the main container on localhost.
    let via_localhost = exec(&ws, "tools", "wget -q -O - http://127.0.0.1:8080/")?;
    assert_eq!(via_localhost.trim(), format!("hello from {}", ws.name()));

    // Ports: published on 127.0.0.1 only, at a random host port.
    let owner = docker
        .inspect_container(&format!("warren-{}.c.dev", ws.name()), None)
        .await?;
    let ports = owner
        .network_settings
        .and_then(|n| n.ports)
        .context("ports")?;
    let bindings = ports
        .get("8080/tcp")
        .cloned()
        .flatten()
        .context("8080 published")?;
    assert!(!bindings.is_empty());
    for b in &bindings {
        assert_eq!(b.host_ip.as_deref(), Some("127.0.0.1"), "{bindings:?}");
        assert_ne!(b.host_port.as_deref(), Some("8080"));
    }
    // Chosen by the agent below the kernel's ephemeral ports, which a socket bound to port 0
    // or an outgoing connection could otherwise take before the pod (re)starts; labelled so
    // no other workspace is given it while this one is stopped.
    let ephemeral_low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")?
        .split_whitespace()
        .next()
        .context("ip_local_port_range")?
        .parse()?;
    if ephemeral_low > 21_000 {
        let host_port: u16 = bindings[0]
            .host_port
            .as_deref()
            .context("host port")?
            .parse()?;
        assert!(
            (20_000..ephemeral_low.min(30_000)).contains(&host_port),
            "{host_port} is below the ephemeral ports ({ephemeral_low}) and the NodePorts"
        );
        let labels = owner.config.and_then(|c| c.labels).unwrap_or_default();
        assert_eq!(
            labels.get("warren.dev/host-ports"),
            Some(&host_port.to_string())
        );
    }

    // Applying the same objects again changes nothing.
    let before = container_ids(&h, &ws).await?;
    let started: Vec<String> =
        cli_lines(&["inspect", "--format", "{{.State.StartedAt}}", &before[0].0]);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    let again = wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(container_ids(&h, &ws).await?, before, "same containers");
    assert_eq!(
        cli_lines(&["inspect", "--format", "{{.State.StartedAt}}", &before[0].0]),
        started,
        "not restarted"
    );
    assert_eq!(
        again
            .deployment
            .as_ref()
            .map(|d| d["metadata"]["resourceVersion"].clone()),
        observed
            .deployment
            .as_ref()
            .map(|d| d["metadata"]["resourceVersion"].clone()),
        "nothing changed, so neither did the resource version"
    );
    Ok(())
}

#[tokio::test]
async fn stop_keeps_the_volume_and_its_data_then_start_again() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("stop", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    let running = wait_state(&h.runtime, &ws, ActualState::Running).await?;
    exec(&ws, "dev", "echo kept > /projects/keep.txt")?;
    let ids = container_ids(&h, &ws).await?;
    // A running workspace's containers report what they use (for /metrics).
    let usage = h.runtime.usage().await?;
    let mine = usage
        .iter()
        .find(|u| u.workspace == ws.key && u.container == "dev")
        .with_context(|| format!("usage of the running container in {usage:?}"))?;
    assert!(mine.memory_bytes > 0, "{mine:?}");
    assert!(mine.cpu_seconds > 0.0, "it ran a shell: {mine:?}");
    let text = warren_agent::runtime::usage_metrics(&usage);
    assert!(
        text.contains(&format!(
            "warren_workspace_memory_bytes{{namespace=\"{}\",workspace=\"{}\",container=\"dev\"}} {}",
            ws.key.namespace, ws.key.name, mine.memory_bytes
        )),
        "{text}"
    );

    // A partial reconcile may omit the Secrets: the stored ones keep the pod spec the same.
    let partial: Vec<_> = with_replicas(ws.objects(), 0)
        .into_iter()
        .filter(|o| o["kind"] != "Secret")
        .collect();
    h.runtime.apply(&ws.key, &partial).await?;
    let stopped = wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    assert_eq!(
        stopped
            .deployment
            .as_ref()
            .map(|d| d["spec"]["replicas"].clone()),
        Some(0.into())
    );
    assert_ne!(
        stopped
            .deployment
            .as_ref()
            .map(|d| d["metadata"]["resourceVersion"].clone()),
        running
            .deployment
            .as_ref()
            .map(|d| d["metadata"]["resourceVersion"].clone())
    );
    assert!(
        stopped.pod_failure.is_none(),
        "a stopped pod has no failure: {:?}",
        stopped.pod_failure
    );
    assert!(
        !h.runtime
            .usage()
            .await?
            .iter()
            .any(|u| u.workspace == ws.key),
        "a stopped workspace uses nothing"
    );
    assert_eq!(
        container_ids(&h, &ws).await?,
        ids,
        "containers are kept on stop"
    );
    let running_now = cli_lines(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=warren.dev/workspace-name={}", ws.name()),
    ]);
    assert!(running_now.is_empty(), "nothing runs: {running_now:?}");
    let volumes = cli_lines(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=warren.dev/workspace-name={}", ws.name()),
    ]);
    assert_eq!(volumes, vec![format!("warren-{}-warren-data", ws.name())]);

    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(exec(&ws, "dev", "cat /projects/keep.txt")?.trim(), "kept");
    assert_eq!(
        container_ids(&h, &ws).await?,
        ids,
        "the same containers started again"
    );

    // A changed file Secret is rewritten in place: no recreation, removed keys disappear.
    let mut objects = ws.objects();
    for o in &mut objects {
        if o["kind"] == "Secret" && o["metadata"]["name"] == format!("{}-files", ws.name()) {
            o["data"] = serde_json::json!({"other": "bmV3"});
        }
    }
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(exec(&ws, "dev", "cat /.warren/files/other")?, "new");
    let gone = exec(
        &ws,
        "dev",
        "test -e /.warren/files/token && echo present || echo gone",
    )?;
    assert_eq!(gone.trim(), "gone");
    assert_eq!(container_ids(&h, &ws).await?, ids, "not recreated");
    Ok(())
}

#[tokio::test]
async fn changed_pod_spec_recreates_containers_and_keeps_the_volume() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("resize", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    exec(&ws, "dev", "echo kept > /projects/keep.txt")?;
    let ids = container_ids(&h, &ws).await?;

    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["resources"]["limits"]["memory"] = "300Mi".into();
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let new_ids = container_ids(&h, &ws).await?;
    let old: BTreeSet<&String> = ids.iter().map(|(_, id)| id).collect();
    assert!(
        new_ids.iter().all(|(_, id)| !old.contains(id)),
        "recreated: {ids:?} → {new_ids:?}"
    );
    assert_eq!(new_ids.len(), ids.len());
    let dev = h
        .runtime
        .docker()
        .inspect_container(&format!("warren-{}.c.dev", ws.name()), None)
        .await?;
    assert_eq!(dev.host_config.and_then(|h| h.memory), Some(300 << 20));
    assert_eq!(
        exec(&ws, "dev", "cat /projects/keep.txt")?.trim(),
        "kept",
        "the volume is kept"
    );
    Ok(())
}

#[tokio::test]
async fn delete_removes_containers_network_volumes_and_files() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("delete", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert!(!ws.leftovers().is_empty());

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match h.runtime.delete(&ws.key).await? {
            TerminationProgress::Terminated => break,
            TerminationProgress::Terminating => {
                assert!(tokio::time::Instant::now() < deadline, "never Terminated");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(ws.leftovers(), Vec::<String>::new());
    assert!(
        observe(&h.runtime, &ws).await?.is_none(),
        "list() no longer has it"
    );
    assert!(
        !h.state_dir
            .path()
            .join("workspaces")
            .join(ws.name())
            .exists(),
        "secret files are gone"
    );
    assert_eq!(
        h.runtime.delete(&ws.key).await?,
        TerminationProgress::Terminated,
        "idempotent"
    );
    Ok(())
}

#[tokio::test]
async fn a_container_that_exits_at_once_is_a_pod_failure() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("crash", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["command"] =
        serde_json::json!(["sh", "-c", "echo cannot find /projects/app >&2; exit 3"]);
    h.runtime.apply(&ws.key, &objects).await?;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    let failure = failed.pod_failure.context("pod failure")?;
    assert_eq!(failure.reason, "Error");
    assert!(
        failure.message.contains("container dev exited with code 3"),
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("cannot find /projects/app"),
        "log tail: {}",
        failure.message
    );
    Ok(())
}

#[tokio::test]
async fn a_failing_init_container_is_a_pod_failure_and_blocks_the_others() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("initfail", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["initContainers"][0]["args"] =
        serde_json::json!(["echo clone failed >&2; exit 7"]);
    h.runtime.apply(&ws.key, &objects).await?;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    let failure = failed.pod_failure.context("pod failure")?;
    assert_eq!(failure.reason, "InitContainerFailed");
    assert!(
        failure
            .message
            .contains("warren-prestart exited with code 7"),
        "{}",
        failure.message
    );
    assert!(
        failure.message.contains("clone failed"),
        "{}",
        failure.message
    );
    let dev = h
        .runtime
        .docker()
        .inspect_container(&format!("warren-{}.c.dev", ws.name()), None)
        .await?;
    assert_eq!(
        dev.state.and_then(|s| s.running),
        Some(false),
        "app containers never started"
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_image_is_a_pod_failure_naming_it() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("noimage", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][1]["image"] = "localhost/warren-no-such-image:1".into();
    h.runtime.apply(&ws.key, &objects).await?;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    let failure = failed.pod_failure.context("pod failure")?;
    assert_eq!(failure.reason, "ErrImagePull");
    assert!(
        failure.message.contains("localhost/warren-no-such-image:1"),
        "{}",
        failure.message
    );
    Ok(())
}

#[tokio::test]
async fn invalid_objects_are_an_apply_error() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("invalid", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["resources"]["limits"]["memory"] = "lots".into();
    let err = h
        .runtime
        .apply(&ws.key, &objects)
        .await
        .expect_err("invalid memory limit");
    assert!(matches!(err, RuntimeError::Apply { .. }), "{err:?}");
    assert!(err.to_string().contains("resources.limits.memory"), "{err}");
    let objects: Vec<_> = ws
        .objects()
        .into_iter()
        .filter(|o| o["kind"] != "Deployment")
        .collect();
    let err = h
        .runtime
        .apply(&ws.key, &objects)
        .await
        .expect_err("no deployment");
    assert!(err.to_string().contains("no Deployment"), "{err}");
    assert!(
        ws.leftovers().is_empty(),
        "nothing created: {:?}",
        ws.leftovers()
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_restart_rebuilds_the_same_view() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let mut h = Harness::new().await?;
    let running = Workspace::new("restart-a", h.agent_id);
    let stopped = Workspace::new("restart-b", h.agent_id);
    h.runtime.apply(&running.key, &running.objects()).await?;
    h.runtime
        .apply(&stopped.key, &with_replicas(stopped.objects(), 0))
        .await?;
    wait_state(&h.runtime, &running, ActualState::Running).await?;
    wait_state(&h.runtime, &stopped, ActualState::Stopped).await?;
    let before = h.runtime.list().await?;
    assert_eq!(before.len(), 2);

    h.restart().await?;
    let after = h.runtime.list().await?;
    assert_eq!(
        after, before,
        "the same workspaces, deployments and resource versions"
    );
    // And the new runtime converges them: re-applying changes nothing.
    let ids = container_ids(&h, &running).await?;
    h.runtime.apply(&running.key, &running.objects()).await?;
    assert_eq!(container_ids(&h, &running).await?, ids);
    Ok(())
}

#[tokio::test]
async fn dial_reaches_a_served_port_and_fails_on_a_closed_undeclared_one() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("dial", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let body = http_get_via_dial(&h.runtime, &ws, 8080).await?;
    assert!(
        body.contains(&format!("hello from {}", ws.name())),
        "{body}"
    );
    // Undeclared ports are dialled at the pod's address (SSH port forwarding, see
    // engine_exec.rs); nothing listens on this one.
    match h.runtime.dial(&ws.key, 9999).await {
        Err(RuntimeError::Runtime { context, .. }) => {
            assert!(context.contains("9999"), "{context}")
        }
        Err(e) => panic!("expected a refused connection, got {e}"),
        Ok(_) => panic!("nothing listens on port 9999"),
    }
    Ok(())
}

#[tokio::test]
async fn engine_events_signal_changes() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("events", h.agent_id);
    let mut changes = h.runtime.changes();
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    changes.borrow_and_update();
    // Something outside the agent stops a container: the engine's event wakes the reconciler.
    cli_run(&["stop", "-t", "0", &format!("warren-{}.c.tools", ws.name())])?;
    tokio::time::timeout(Duration::from_secs(20), changes.changed())
        .await
        .context("no change signalled within 20 s")??;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    assert!(failed.pod_failure.is_some());
    Ok(())
}

#[tokio::test]
async fn starts_its_own_podman_service_and_stops_it_on_shutdown() -> Result<()> {
    if !podman_here() {
        return Ok(());
    }
    let state = tempfile::tempdir()?;
    let rt = own_service(state.path()).await?;
    let socket = state.path().join("podman.sock");
    assert_eq!(rt.host(), format!("unix://{}", socket.display()));
    assert!(rt.is_podman(), "detected as Podman");
    assert!(rt.list().await?.is_empty());
    rt.shutdown().await;
    let answers = tokio::net::UnixStream::connect(&socket).await.is_ok();
    assert!(!answers, "the service is gone after shutdown");
    Ok(())
}

#[tokio::test]
async fn reapplying_restarts_a_pod_whose_namespace_owner_died() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("heal", h.agent_id);
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    // The container owning the pod's network namespace dies; the sidecar keeps running in a
    // namespace nobody serves any more.
    cli_run(&["kill", &format!("warren-{}.c.dev", ws.name())])?;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    let failure = failed.pod_failure.context("pod failure")?;
    assert!(
        failure.message.contains("container dev exited"),
        "{}",
        failure.message
    );

    // The next apply (a full reconcile) starts the pod afresh, sidecar included.
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let answer = exec(
            &ws,
            "tools",
            "wget -q -O - http://127.0.0.1:8080/ 2>&1 || true",
        )?;
        if answer.contains("hello from") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sidecar never shared the new namespace: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

#[tokio::test]
async fn a_missing_image_that_must_not_be_pulled_is_a_pod_failure() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("neverpull", h.agent_id);
    let mut objects = ws.objects();
    let dev = &mut pod_spec(&mut objects)["containers"][0];
    dev["image"] = "localhost/warren-never-pulled:2".into();
    dev["imagePullPolicy"] = "Never".into();
    h.runtime.apply(&ws.key, &objects).await?;
    let failed = wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    let failure = failed.pod_failure.context("pod failure")?;
    assert_eq!(failure.reason, "ErrImageNeverPull");
    assert!(
        failure.message.contains("localhost/warren-never-pulled:2"),
        "{}",
        failure.message
    );
    Ok(())
}

#[tokio::test]
async fn a_stop_during_a_slow_start_wins() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("slow", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["initContainers"][0]["args"] = serde_json::json!(["sleep 300"]);
    h.runtime.apply(&ws.key, &objects).await?;
    let starting = wait_state(&h.runtime, &ws, ActualState::Starting).await?;
    assert!(starting.pod_failure.is_none());
    // The init container is still running when the user stops the workspace.
    wait_for(&h.runtime, &ws, "init container running", |_| {
        cli_lines(&[
            "ps",
            "-q",
            "--filter",
            &format!("name=warren-{}.c.warren-prestart", ws.name()),
        ])
        .len()
            == 1
    })
    .await?;
    // Stopped long before the init container's 300 s are up (wait_state's deadline is 60 s).
    h.runtime.apply(&ws.key, &with_replicas(objects, 0)).await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    let running = cli_lines(&[
        "ps",
        "-q",
        "--filter",
        &format!("label=warren.dev/workspace-name={}", ws.name()),
    ]);
    assert!(running.is_empty(), "nothing runs: {running:?}");
    Ok(())
}

/// Agent ids are database keys, so two Warren installations on one engine (two `warren up`
/// homes, or a developer's Warren and a test run) can both run agent 1. Each must see, report
/// and delete only its own workspaces.
#[tokio::test]
async fn two_installations_with_the_same_agent_id_never_see_each_other() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let mine = Harness::new().await?;
    let other_dir = tempfile::tempdir()?;
    let other = common::connect(mine.agent_id, other_dir.path().to_path_buf()).await?;
    let ws = Workspace::new("owner", mine.agent_id);
    mine.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&mine.runtime, &ws, ActualState::Running).await?;

    assert!(
        other.list().await?.iter().all(|o| o.key != ws.key),
        "another installation with the same agent id must not list the workspace"
    );
    // Deleting through the other installation finds nothing of it and removes nothing.
    other.delete(&ws.key).await?;
    wait_state(&mine.runtime, &ws, ActualState::Running).await?;
    assert!(
        !ws.leftovers().is_empty(),
        "the workspace's containers, volume and network are still there"
    );
    other.shutdown().await;
    Ok(())
}

/// A container's output: the tail asked for, stdout and stderr, another container by name,
/// still there once the workspace is stopped (when a failed start is looked into), and that of
/// its new run alone once it started again.
#[tokio::test]
async fn logs_show_a_containers_output_running_or_stopped() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("logs", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["command"] = serde_json::json!([
        "/bin/sh",
        "-c",
        "for i in 1 2 3 4 5; do echo line $i; done; echo trouble >&2; exec sleep 2147483647"
    ]);
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let all = output_once(&h, &ws, |t| t.contains("trouble") && t.contains("line 5")).await?;
    assert!(all.contains("line 1\n"), "{all}");
    let tail = String::from_utf8(h.runtime.logs(&ws.key, None, 2).await?)?;
    assert_eq!(tail.lines().count(), 2, "{tail}");
    assert!(!tail.contains("line 1"), "{tail}");
    let tools = h.runtime.logs(&ws.key, Some("tools"), 10).await?;
    assert!(tools.is_empty(), "{:?}", String::from_utf8_lossy(&tools));
    let err = h.runtime.logs(&ws.key, Some("db"), 10).await.unwrap_err();
    assert!(err.to_string().contains("container db"), "{err}");

    // An engine that stamps lines in whole seconds (Podman 4) tells a run's lines from the
    // next run's only when they are of an earlier second than the run's end: until the clock
    // turns, the stop waits.
    let second = |t: std::time::SystemTime| {
        t.duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default()
    };
    let written = second(std::time::SystemTime::now());
    while second(std::time::SystemTime::now()) == written {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.runtime
        .apply(&ws.key, &with_replicas(objects.clone(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    let stopped = String::from_utf8(h.runtime.logs(&ws.key, None, 100).await?)?;
    assert!(stopped.contains("line 5"), "{stopped}");

    // Started again, it shows its new run's output only, as Kubernetes shows a container's.
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let again = output_once(&h, &ws, |t| t.contains("trouble")).await?;
    assert_eq!(again.matches("line 1\n").count(), 1, "{again}");
    assert_eq!(again.matches("trouble").count(), 1, "{again}");
    Ok(())
}

/// The main container's last 100 lines of output once `done` holds of them (30 s at most).
async fn output_once(h: &Harness, ws: &Workspace, done: impl Fn(&str) -> bool) -> Result<String> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = String::from_utf8(h.runtime.logs(&ws.key, None, 100).await?)?;
        if done(&text) {
            return Ok(text);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the output never showed: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Following a container: the tail, then lines as it writes them; the stream ends when the
/// container stops.
#[tokio::test]
async fn followed_logs_bring_new_lines_and_end_when_the_container_stops() -> Result<()> {
    use futures::StreamExt;
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("follow", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["command"] = serde_json::json!([
        "/bin/sh",
        "-c",
        "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"
    ]);
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let mut stream = h.runtime.follow_logs(&ws.key, None, 1).await?;
    let mut seen = String::new();
    // Ticks keep coming while the stream is open: at least three distinct ones.
    while seen.matches("tick").count() < 3 {
        let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .context("no output while following")?
            .context("the stream ended while the container runs")??;
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    h.runtime.apply(&ws.key, &with_replicas(objects, 0)).await?;
    // After the stop the stream ends (whatever was still buffered comes first).
    tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(chunk) = stream.next().await {
            chunk?;
        }
        Ok::<_, anyhow::Error>(())
    })
    .await
    .context("following did not end when the container stopped")??;
    Ok(())
}

/// Whether the engine is Podman (the tests of the runtime's own `podman system service`
/// need its binary); prints the notice otherwise.
fn podman_here() -> bool {
    if !engine_available() {
        return false;
    }
    if cli() != Some("podman") {
        eprintln!("skipping: podman is not installed");
        return false;
    }
    true
}

/// A runtime of a fresh agent id that starts its own `podman system service` in `state`.
async fn own_service(
    state: &std::path::Path,
) -> Result<warren_agent::runtime::engine::EngineRuntime> {
    let mut config = warren_agent::runtime::engine::EngineConfig::new(
        warren_types::AgentId(rand::random::<u32>() as i64 + 1_000_000),
        state,
    );
    config.own_podman_service = true;
    Ok(warren_agent::runtime::engine::EngineRuntime::connect(config).await?)
}

/// Deletes `ws` until it is Terminated (60 s deadline); a blocked deletion fails the test
/// with the engine's reason.
async fn delete_until_terminated(h: &Harness, ws: &Workspace) -> Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        match h.runtime.delete(&ws.key).await {
            Ok(TerminationProgress::Terminated) => return Ok(()),
            Ok(TerminationProgress::Terminating) => {}
            Err(e) => anyhow::bail!("deleting {} did not progress: {e}", ws.name()),
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{} never Terminated",
            ws.name()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Podman 4.3 ORs several `label=` filters on volumes, so "the volumes of workspace w0"
/// came back as every volume of the agent, and deleting w0 tried to remove them all: stuck
/// on the running ones, and a stopped one's data gone. Five workspaces of one agent, one of
/// them stopped; removing w0 leaves every other container, volume and file alone.
#[tokio::test]
async fn removing_one_workspace_leaves_every_other_untouched() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let all: Vec<Workspace> = (0..5)
        .map(|i| Workspace::new(&format!("many{i}"), h.agent_id))
        .collect();
    for ws in &all {
        h.runtime.apply(&ws.key, &ws.objects()).await?;
    }
    for ws in &all {
        wait_state(&h.runtime, ws, ActualState::Running).await?;
        exec(
            ws,
            "dev",
            &format!("echo {} > /projects/keep.txt", ws.name()),
        )?;
    }
    let stopped = &all[4];
    h.runtime
        .apply(&stopped.key, &with_replicas(stopped.objects(), 0))
        .await?;
    wait_state(&h.runtime, stopped, ActualState::Stopped).await?;
    let mut before = Vec::new();
    for ws in &all[1..] {
        before.push((container_ids(&h, ws).await?, ws.leftovers()));
    }

    let (gone, others) = all.split_first().expect("five");
    delete_until_terminated(&h, gone).await?;
    assert_eq!(gone.leftovers(), Vec::<String>::new());

    for (ws, (ids, objects)) in others.iter().zip(&before) {
        assert_eq!(
            &container_ids(&h, ws).await?,
            ids,
            "{}: containers",
            ws.name()
        );
        assert_eq!(&ws.leftovers(), objects, "{}: objects", ws.name());
    }
    for ws in &others[..3] {
        assert_eq!(
            derive(&observe(&h.runtime, ws).await?.context("listed")?),
            ActualState::Running
        );
        assert_eq!(exec(ws, "dev", "cat /projects/keep.txt")?.trim(), ws.name());
    }
    h.runtime.apply(&stopped.key, &stopped.objects()).await?;
    wait_state(&h.runtime, stopped, ActualState::Running).await?;
    assert_eq!(
        exec(stopped, "dev", "cat /projects/keep.txt")?.trim(),
        stopped.name(),
        "the stopped workspace's data survived"
    );

    // And the next removals each finish too, down to none.
    for ws in others {
        delete_until_terminated(&h, ws).await?;
    }
    for ws in &all {
        assert_eq!(ws.leftovers(), Vec::<String>::new(), "{}", ws.name());
    }
    Ok(())
}

/// A `podman system service` an earlier run left on the runtime's socket (it was killed
/// before it could stop its service, on a machine without `setpriv`) is stopped, not joined
/// by a second one.
#[tokio::test]
async fn a_leftover_podman_service_is_stopped_before_starting_ours() -> Result<()> {
    if !podman_here() {
        return Ok(());
    }
    use warren_agent::runtime::engine::services_on;
    let state = tempfile::tempdir()?;
    let socket = state.path().join("podman.sock");
    let host = format!("unix://{}", socket.display());
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut leftover = Reap(
        std::process::Command::new("podman")
            .args(["system", "service", "--time=0", &host])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?,
    );
    let leftover_pid = leftover.0.id();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::UnixStream::connect(&socket).await.is_err() {
        if let Some(status) = leftover.0.try_wait()? {
            anyhow::bail!("the leftover service exited: {status}");
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "leftover never listened"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(services_on(&host), vec![leftover_pid]);

    let rt = own_service(state.path()).await?;
    let exited = leftover.0.try_wait()?;
    assert!(exited.is_some(), "the leftover was stopped");
    let ours = services_on(&host);
    assert_eq!(ours.len(), 1, "exactly one service: {ours:?}");
    assert_ne!(ours, vec![leftover_pid]);
    assert!(rt.list().await?.is_empty());
    rt.shutdown().await;
    assert!(services_on(&host).is_empty(), "ours is stopped on shutdown");
    Ok(())
}

/// An image rebuilt under the same tag is what a restart runs: the stopped containers made
/// from the old image are recreated (the volume and its files stay); a restart with the
/// image unchanged keeps the same containers.
#[tokio::test]
async fn a_restart_runs_the_image_its_tag_names_now() -> Result<()> {
    if !podman_here() {
        return Ok(());
    }
    let h = Harness::new().await?;
    // Before the workspace, so it goes after it: an image a pod runs cannot be removed.
    let mut images = Images::default();
    let ws = Workspace::new("reimage", h.agent_id);
    // A tag of this test's own, so other tests' image stays as it is.
    let tag = format!("localhost/warren-reimage-{}:latest", ws.name());
    cli_run(&["tag", IMAGE, &tag])?;
    images.names.push(tag.clone());
    let objects = || -> Vec<serde_json::Value> {
        let mut o = ws.objects();
        for c in pod_spec(&mut o)["containers"]
            .as_array_mut()
            .expect("containers")
        {
            c["image"] = tag.clone().into();
        }
        o
    };
    let image_id = |engine_name: &str| -> Result<String> {
        Ok(
            cli_run(&["inspect", "--format", "{{.Image}}", engine_name])?
                .trim()
                .to_owned(),
        )
    };
    let dev = format!("warren-{}.c.dev", ws.name());
    h.runtime.apply(&ws.key, &objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    exec(&ws, "dev", "echo kept > /projects/keep.txt")?;
    let first = image_id(&dev)?;

    // Unchanged image: stop and start keep the containers.
    let ids = container_ids(&h, &ws).await?;
    h.runtime
        .apply(&ws.key, &with_replicas(objects(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    h.runtime.apply(&ws.key, &objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    assert_eq!(container_ids(&h, &ws).await?, ids, "same containers");

    // "Fix" the image under the same tag (a new image id), then restart.
    h.runtime
        .apply(&ws.key, &with_replicas(objects(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    let scratch = format!("warren-reimage-src-{}", ws.name());
    cli_run(&["create", "--name", &scratch, IMAGE, "true"])?;
    let committed = cli_run(&[
        "commit",
        "-q",
        "--change",
        "LABEL fixed=yes",
        &scratch,
        &tag,
    ]);
    let _ = cli_run(&["rm", "-f", &scratch]);
    let second = committed?.trim().to_owned();
    images.made.push(second.clone());
    assert!(!second.is_empty() && !first.contains(&second) && !second.contains(&first));
    h.runtime.apply(&ws.key, &objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let now = image_id(&dev)?;
    assert!(
        now.contains(&second) || second.contains(&now),
        "runs the rebuilt image {second}, not {now}"
    );
    assert_eq!(exec(&ws, "dev", "cat /projects/keep.txt")?.trim(), "kept");
    Ok(())
}

/// The `podman system service` the runtime started dies (SIGKILL), and later loses its
/// socket file: each time the runtime starts it again on the same socket and works on, where
/// it used to fail every call until restarted by hand.
#[tokio::test]
async fn a_dead_or_unreachable_podman_service_is_started_again() -> Result<()> {
    if !podman_here() {
        return Ok(());
    }
    use warren_agent::runtime::engine::services_on;
    let state = tempfile::tempdir()?;
    let rt = own_service(state.path()).await?;
    let socket = state.path().join("podman.sock");
    let host = format!("unix://{}", socket.display());
    struct Stop(warren_agent::runtime::engine::EngineRuntime);
    impl Drop for Stop {
        fn drop(&mut self) {
            for pid in warren_agent::runtime::engine::services_on(self.0.host()) {
                let _ = std::process::Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
    }
    let rt = Stop(rt);
    let first = services_on(&host);
    assert_eq!(first.len(), 1, "{first:?}");

    // Back when list() works again and exactly one new service serves the socket.
    let recovered = |before: Vec<u32>| {
        let rt = &rt.0;
        let host = host.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let now = services_on(&host);
                if now.len() == 1 && now != before && rt.list().await.is_ok() {
                    return Ok::<_, anyhow::Error>(now);
                }
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "not recovered: services {now:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    std::process::Command::new("kill")
        .args(["-KILL", &first[0].to_string()])
        .status()?;
    let second = recovered(first).await?;

    std::fs::remove_file(&socket)?;
    assert!(rt.0.list().await.is_err(), "unreachable without its socket");
    recovered(second).await?;

    rt.0.shutdown().await;
    assert!(services_on(&host).is_empty());
    Ok(())
}

/// `Running` means usable: a command that exits half a second after it started is `Failed`
/// with its reason, and is never reported `Running` first (`minReadySeconds` had not passed).
#[tokio::test]
async fn a_container_that_exits_soon_after_starting_is_failed_never_running() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("soon", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["command"] =
        serde_json::json!(["sh", "-c", "sleep 0.5; echo gave up >&2; exit 4"]);
    // As rendered for a command without a port to probe (1 s there); longer here, so a
    // loaded machine that starts the shell late cannot outlast it (seen in CI with 1 s).
    for o in objects.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["minReadySeconds"] = serde_json::json!(5);
    }
    h.runtime.apply(&ws.key, &objects).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(o) = observe(&h.runtime, &ws).await? {
            let state = derive(&o);
            assert_ne!(state, ActualState::Running, "reported running: {o:?}");
            if state == ActualState::Failed {
                let failure = o.pod_failure.context("pod failure")?;
                assert!(
                    failure.message.contains("exited with code 4"),
                    "{failure:?}"
                );
                break;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "never failed");
        // As often as a reconciler could look: a moment of `Running` would be seen.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A pod started again after a stop is reported as soon as it runs; the watch for Podman's
/// early stop of a restarted container (`start::watch_restart`) runs beside it. A command
/// that really exits with code 0 right after that start is started once more by the watch,
/// never again by it, and ends `Failed` with its code, not stuck and never `Running`.
#[tokio::test]
async fn a_pod_started_again_that_exits_with_code_0_is_failed_after_one_more_try() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let (ws, _, started_at, failure) = failed_again(&h, "again", 0).await?;
    assert!(
        failure.message.contains("exited with code 0"),
        "{failure:?}"
    );
    // The watch has ended (the failure is reported only then): count the starts since the
    // apply. One, or two when the exit came within the watch.
    let (count, starts) = starts_since(&ws, started_at)?;
    eprintln!("starts since the apply:\n{starts}");
    assert!(
        (1..=2).contains(&count),
        "{count} starts since {started_at}:\n{starts}"
    );
    Ok(())
}

/// The watch for Podman's early stop starts a pod once more only after an exit with code 0:
/// a command started again after a stop that exits with any other code is `Failed` with
/// that code and never run again behind its user's back (CI once saw such a container
/// running again after `ws create --wait` had reported it failed). The stop that follows
/// takes the workspace's lock, so a start the watch made would have come before it.
#[tokio::test]
async fn a_pod_started_again_that_exits_with_code_3_is_failed_and_never_run_again() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let (ws, objects, started_at, failure) = failed_again(&h, "again3", 3).await?;
    assert!(
        failure.message.contains("exited with code 3"),
        "{failure:?}"
    );
    h.runtime
        .apply(&ws.key, &with_replicas(objects.clone(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    let (count, starts) = starts_since(&ws, started_at)?;
    assert_eq!(count, 1, "starts since {started_at}:\n{starts}");
    Ok(())
}

/// A workspace whose command ends with `code` 0.3 s after it starts: run until `Failed`,
/// stopped, then started again; its objects, when that start was asked for, and the failure
/// it ended with (never reported `Running` meanwhile).
async fn failed_again(
    h: &Harness,
    name: &str,
    code: i32,
) -> Result<(
    Workspace,
    Vec<serde_json::Value>,
    chrono::DateTime<chrono::Utc>,
    warren_types::reconcile::PodFailure,
)> {
    let ws = Workspace::new(name, h.agent_id);
    let mut objects = one_container(&ws);
    pod_spec(&mut objects)["containers"][0]["command"] = serde_json::json!([
        "sh",
        "-c",
        format!("sleep 0.3; echo ending >&2; exit {code}")
    ]);
    // Long enough that `Running` is never due before the command ends.
    for o in objects.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["spec"]["minReadySeconds"] = serde_json::json!(5);
    }
    h.runtime.apply(&ws.key, &objects).await?;
    wait_state(&h.runtime, &ws, ActualState::Failed).await?;
    h.runtime
        .apply(&ws.key, &with_replicas(objects.clone(), 0))
        .await?;
    wait_state(&h.runtime, &ws, ActualState::Stopped).await?;
    let started_at = chrono::Utc::now();
    h.runtime.apply(&ws.key, &objects).await?;
    let failure = loop_until_failed(h, &ws).await?;
    Ok((ws, objects, started_at, failure))
}

/// How many times the engine started a container of `ws` since `since`, and its events.
fn starts_since(ws: &Workspace, since: chrono::DateTime<chrono::Utc>) -> Result<(usize, String)> {
    let starts = cli_run(&[
        "events",
        "--stream=false",
        "--since",
        &since.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "--filter",
        "event=start",
        "--filter",
        &format!("label=warren.dev/workspace-name={}", ws.name()),
        "--format",
        "{{.Time}} {{.Name}}",
    ])?;
    Ok((starts.lines().filter(|l| !l.is_empty()).count(), starts))
}

/// Polls the workspace as often as a reconciler could until it is `Failed`, asserting it is
/// never reported `Running` meanwhile; its pod failure.
async fn loop_until_failed(
    h: &Harness,
    ws: &Workspace,
) -> Result<warren_types::reconcile::PodFailure> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(o) = observe(&h.runtime, ws).await? {
            let state = derive(&o);
            assert_ne!(state, ActualState::Running, "reported running: {o:?}");
            if state == ActualState::Failed {
                return o.pod_failure.context("pod failure");
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "never failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A server that starts listening late keeps its workspace `Starting`, saying what it
/// waits for, until its port accepts connections; then `Running`, and the port serves.
#[tokio::test]
async fn a_port_that_listens_late_keeps_the_workspace_starting_until_it_does() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let ws = Workspace::new("late", h.agent_id);
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["command"] = serde_json::json!([
        "sh",
        "-c",
        "sleep 2; mkdir -p /tmp/www; echo late > /tmp/www/index.html; exec httpd -f -p 8080 -h /tmp/www"
    ]);
    // As rendered for a command with a TCP endpoint.
    pod_spec(&mut objects)["containers"][0]["readinessProbe"] =
        serde_json::json!({"tcpSocket": {"port": 8080}, "periodSeconds": 1});
    h.runtime.apply(&ws.key, &objects).await?;
    let waiting = wait_for(&h.runtime, &ws, "waiting for its port", |o| {
        o.deployment
            .as_ref()
            .and_then(|d| d.pointer("/status/conditions"))
            .is_some_and(|c| c.to_string().contains("waiting for port(s) 8080"))
    })
    .await?;
    assert_eq!(derive(&waiting), ActualState::Starting);
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    // Running only once it serves.
    let body = http_get_via_dial(&h.runtime, &ws, 8080).await?;
    assert!(body.contains("late"), "{body}");
    Ok(())
}

/// An installation that left a firewall table behind and no network (its agent removed, or
/// a test that died half-way) loses the table when another agent starts: its rules name
/// subnets a new network may get.
#[tokio::test]
async fn a_stale_firewall_table_is_removed_when_an_agent_starts() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let stale = "warren_00000000deadbeef_7";
    let made = std::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                // nft 1.0 wants a newline (or `;`) after a block, even on one line.
                .write_all(format!("table inet {stale} {{\n  chain c {{\n  }}\n}}\n").as_bytes())?;
            c.wait()
        });
    let h = Harness::new().await?;
    if !made.is_ok_and(|s| s.success()) || h.runtime.isolation_warning().is_some() {
        // Where the agent can set firewall rules (CI: root with nft), so can this test.
        assert!(
            h.runtime.isolation_warning().is_some(),
            "the agent sets firewall rules here, but the test could not make its table"
        );
        eprintln!("skipping: nftables is not usable here (not root?)");
        return Ok(());
    }
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()?;
    let tables = String::from_utf8_lossy(&tables.stdout);
    assert!(!tables.contains(stale), "{tables}");
    Ok(())
}

/// Removes volume `.0` when dropped.
struct Volume(String);

impl Drop for Volume {
    fn drop(&mut self) {
        let _ = cli_run(&["volume", "rm", "-f", &self.0]);
    }
}

/// The full id of image `name`.
fn image_id(name: &str) -> Result<String> {
    Ok(cli_run(&["image", "inspect", "--format", "{{.Id}}", name])?
        .trim()
        .trim_start_matches("sha256:")
        .to_owned())
}

/// The image id a container of `ws` was created from.
fn container_image(ws: &Workspace, container: &str) -> Result<String> {
    let name = format!("warren-{}.c.{container}", ws.name());
    Ok(cli_run(&["inspect", "--format", "{{.Image}}", &name])?
        .trim()
        .trim_start_matches("sha256:")
        .to_owned())
}

/// Builds `image` for `ws` from `dockerfile`, as a devfile `image` component does; the
/// build's output.
async fn build(h: &Harness, ws: &Workspace, image: &str, dockerfile: &str) -> Result<String> {
    use futures::StreamExt;
    let task = warren_types::relay::BuildImageTask {
        image: image.to_owned(),
        dockerfile: "Dockerfile".into(),
        args: vec![],
        target: None,
        features: None,
    };
    let context = tar_context(&[("Dockerfile", dockerfile)])?;
    let mut progress = h.runtime.build_image(&ws.key, &task, context).await?;
    let mut out = String::new();
    while let Some(line) = progress.next().await {
        out.push_str(&line.with_context(|| format!("building {image}; its output:\n{out}"))?);
    }
    Ok(out)
}

/// The objects of `ws` with its main container running `image`.
fn main_image(ws: &Workspace, image: &str) -> Vec<serde_json::Value> {
    let mut objects = ws.objects();
    pod_spec(&mut objects)["containers"][0]["image"] = image.into();
    objects
}

/// Issue 37: a workspace's build asked for the name of an image another workspace runs.
/// The name keeps its image, and the build exists only under the builder's own name for it;
/// the builder's containers naming the image run its build, a colleague's naming it run
/// what it always named, and no other workspace gets the build by any name.
#[tokio::test]
async fn a_build_never_replaces_an_image_another_workspace_runs() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let mut images = Images::default();
    let builder = Workspace::new("builder", h.agent_id);
    let colleague = Workspace::new("colleague", h.agent_id);
    let loose = Workspace::new("loose", h.agent_id);
    let thief = Workspace::new("thief", h.agent_id);
    let suffix = &builder.name()["builder-".len()..];
    let victim = format!("localhost/warren-victim-{suffix}:1");
    let short = format!("warren-short-{suffix}:dev");
    images.names.push(victim.clone());
    images.built_for.push(builder.name().to_owned());
    cli_run(&["tag", IMAGE, &victim])?;
    let victim_id = image_id(&victim)?;

    h.runtime.apply(&builder.key, &builder.objects()).await?;
    wait_state(&h.runtime, &builder, ActualState::Running).await?;
    let dockerfile = format!(
        "FROM {IMAGE}\nRUN echo built by {} > /built-by\n",
        builder.name()
    );
    let output = build(&h, &builder, &victim, &dockerfile).await?;
    build(&h, &builder, &short, &dockerfile).await?;

    assert_eq!(
        image_id(&victim)?,
        victim_id,
        "the build replaced {victim}; its output:\n{output}"
    );
    let built = cli_lines(&[
        "images",
        "--filter",
        &format!("label=warren.dev/built-for={}", builder.name()),
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ]);
    // Named `localhost/warren-ws/<requested>/<builder>.<id>.<key>:<tag>`.
    let own = |requested: &str, tag: &str| {
        let (start, end) = (
            format!("localhost/warren-ws/{requested}/{}.4242.", builder.name()),
            format!(":{tag}"),
        );
        built
            .iter()
            .find(|n| n.starts_with(&start) && n.ends_with(&end))
            .cloned()
            .with_context(|| format!("{start}…{end} among the builds {built:?}"))
    };
    let scoped = own(&format!("localhost/warren-victim-{suffix}"), "1")?;
    own(&format!("docker.io/library/warren-short-{suffix}"), "dev")?;
    assert_eq!(built.len(), 2, "built under no other name: {built:?}");
    let built_id = image_id(&scoped)?;

    // The builder names the image it built: its container runs the build.
    h.runtime
        .apply(&builder.key, &main_image(&builder, &victim))
        .await?;
    wait_state(&h.runtime, &builder, ActualState::Running).await?;
    assert_eq!(
        exec(&builder, "dev", "cat /built-by")?.trim(),
        format!("built by {}", builder.name())
    );
    assert_eq!(container_image(&builder, "dev")?, built_id);

    // A colleague naming it runs what the name always named.
    h.runtime
        .apply(&colleague.key, &main_image(&colleague, &victim))
        .await?;
    wait_state(&h.runtime, &colleague, ActualState::Running).await?;
    assert_eq!(container_image(&colleague, "dev")?, victim_id);
    assert_eq!(
        exec(
            &colleague,
            "dev",
            "cat /built-by 2>/dev/null || echo absent"
        )?
        .trim(),
        "absent"
    );

    // Nor does one naming it by a short name (which Podman resolves to any local
    // `…/<name>:<tag>`), nor one that learned the build's own name: the name is pulled
    // instead, which fails here, and is reported.
    for (ws, image) in [(&loose, short.as_str()), (&thief, scoped.as_str())] {
        h.runtime.apply(&ws.key, &main_image(ws, image)).await?;
        let failed = wait_state(&h.runtime, ws, ActualState::Failed).await?;
        let failure = failed.pod_failure.context("pod failure")?;
        assert_eq!(failure.reason, "ErrImagePull", "{}", failure.message);
        assert!(failure.message.contains(image), "{}", failure.message);
        let filter = format!("label=warren.dev/workspace-name={}", ws.name());
        for id in cli_lines(&["ps", "-a", "-q", "--filter", &filter]) {
            let image = cli_run(&["inspect", "--format", "{{.Image}}", &id])?;
            assert_ne!(
                image.trim().trim_start_matches("sha256:"),
                built_id,
                "container {id} of {} runs the builder's image",
                ws.name()
            );
        }
    }

    // Deleting the builder removes its builds; the name it asked for stays as it was.
    delete_until_terminated(&h, &builder).await?;
    let left = cli_lines(&[
        "images",
        "--filter",
        &format!("label=warren.dev/built-for={}", builder.name()),
        "--format",
        "{{.Repository}}:{{.Tag}}",
    ]);
    assert!(
        left.iter().all(|n| n == "<none>:<none>"),
        "named builds left after the deletion: {left:?}"
    );
    assert_eq!(image_id(&victim)?, victim_id);
    Ok(())
}

/// An agent whose engine must run only pulled images refuses every build, naming the
/// setting.
#[tokio::test]
async fn an_agent_with_image_builds_off_refuses_every_build() -> Result<()> {
    use warren_agent::runtime::engine::{EngineConfig, EngineRuntime};
    if !engine_available() {
        return Ok(());
    }
    let state_dir = tempfile::tempdir()?;
    let agent_id = warren_types::AgentId(rand::random::<u32>() as i64 + 1_000_000);
    let mut config = EngineConfig::new(agent_id, state_dir.path());
    config.stop_timeout_secs = 2;
    config.image_builds = false;
    let runtime = EngineRuntime::connect(config).await?;
    let mut images = Images::default();
    let ws = Workspace::new("nobuild", agent_id);
    let task = warren_types::relay::BuildImageTask {
        image: format!("localhost/warren-nobuild-{}:1", ws.name()),
        dockerfile: "Dockerfile".into(),
        args: vec![],
        target: None,
        features: None,
    };
    // Should a build happen after all.
    images.names.push(task.image.clone());
    images.built_for.push(ws.name().to_owned());
    let context = tar_context(&[("Dockerfile", &format!("FROM {IMAGE}\n"))])?;
    let refused = runtime.build_image(&ws.key, &task, context).await;
    runtime.shutdown().await;
    match refused {
        Err(e @ RuntimeError::NotAvailable(_)) => {
            assert!(e.to_string().contains("image_builds"), "{e}")
        }
        Err(e) => anyhow::bail!("refused, but not as turned off: {e}"),
        Ok(_) => anyhow::bail!("a build started on an agent with image builds off"),
    }
    Ok(())
}

/// Issue 37: a build's `RUN` steps dial the host's loopback, where every workspace's
/// published ports and Warren's own internal listeners are. Podman's compatible API runs
/// them in the host's network namespace unless told otherwise; the agent gives them one of
/// their own, so the host's 127.0.0.1 is not theirs.
#[tokio::test]
async fn a_builds_run_steps_cannot_reach_the_hosts_loopback() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            drop(s);
        }
    });
    let h = Harness::new().await?;
    let mut images = Images::default();
    let ws = Workspace::new("netbuild", h.agent_id);
    images.built_for.push(ws.name().to_owned());
    h.runtime.apply(&ws.key, &ws.objects()).await?;
    wait_state(&h.runtime, &ws, ActualState::Running).await?;
    let dockerfile = format!(
        "FROM {IMAGE}\nRUN if nc -w 3 127.0.0.1 {port} </dev/null; then echo REACHED-HOST; \
         else echo ISOLATED; fi\n"
    );
    let output = build(
        &h,
        &ws,
        &format!("localhost/warren-netbuild-{}:1", ws.name()),
        &dockerfile,
    )
    .await?;
    h.runtime.delete(&ws.key).await?;
    assert!(
        // Whole lines: the step's own text (echoed first) names both words.
        output.lines().any(|l| l.trim() == "ISOLATED")
            && !output.lines().any(|l| l.trim() == "REACHED-HOST"),
        "the build reached the host's 127.0.0.1:{port}:\n{output}"
    );
    Ok(())
}

/// The objects of `ws` with an editor-like tools volume filled from image `tools` (an init
/// container copies its `/tools-id`) and mounted read-only in the main container.
fn with_tools(ws: &Workspace, tools: &str) -> Vec<serde_json::Value> {
    let mut objects = ws.objects();
    let spec = pod_spec(&mut objects);
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .push(serde_json::json!({"name": "warren-tools", "emptyDir": {}}));
    spec["initContainers"]
        .as_array_mut()
        .expect("init containers")
        .push(serde_json::json!({
            "name": "warren-tools",
            "image": tools,
            "command": ["/bin/sh", "-c", "cp /tools-id /warren/tools/tools-id"],
            "volumeMounts": [{"name": "warren-tools", "mountPath": "/warren/tools"}],
        }));
    spec["containers"][0]["volumeMounts"]
        .as_array_mut()
        .expect("mounts")
        .push(serde_json::json!({
            "name": "warren-tools",
            "mountPath": "/warren/tools",
            "readOnly": true,
        }));
    objects
}

/// The shared tools volume is filled from the tools image by its id, and never from an
/// image a workspace's build put under the tools image's name (as builds could before
/// they were confined to their workspace's namespace): a later workspace start keeps the
/// editor's files as they were, instead of running the build's `install` into every
/// workspace's editor.
#[tokio::test]
async fn the_tools_volume_is_never_filled_from_a_workspaces_build() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let suffix = format!("{:06x}", rand::random::<u32>() & 0xffffff);
    let tools = format!("localhost/warren-tools-test-{suffix}:1");
    let scratch = format!("warren-tools-scratch-{suffix}");
    let mut images = Images::default();
    let _volume = Volume(warren_agent::runtime::engine::plan::tools_volume_name(
        &tools,
    ));
    let first = Workspace::new("tools", h.agent_id);
    let later = Workspace::new("tools", h.agent_id);
    // An image holding `/tools-id` with `text`, under the tools image's name.
    let mut make_tools = |text: &str, change: &[&str]| -> Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("tools-id");
        std::fs::write(&file, text)?;
        cli_run(&["create", "--name", &scratch, IMAGE, "true"])?;
        let mut commit = vec!["commit", "-q"];
        for c in change {
            commit.extend(["--change", c]);
        }
        commit.extend([scratch.as_str(), tools.as_str()]);
        let copy = format!("{scratch}:/tools-id");
        let made = cli_run(&["cp", &file.to_string_lossy(), &copy]).and_then(|_| cli_run(&commit));
        let _ = cli_run(&["rm", "-f", &scratch]);
        images.made.push(made?.trim().to_owned());
        Ok(())
    };

    make_tools("good", &[])?;
    h.runtime
        .apply(&first.key, &with_tools(&first, &tools))
        .await?;
    wait_state(&h.runtime, &first, ActualState::Running).await?;
    assert_eq!(exec(&first, "dev", "cat /warren/tools/tools-id")?, "good");

    // A build (labelled as the engine runtime labels builds) takes the tools image's name.
    make_tools("evil", &["LABEL warren.dev/built-for=mallory-1234"])?;
    h.runtime
        .apply(&later.key, &with_tools(&later, &tools))
        .await?;
    wait_state(&h.runtime, &later, ActualState::Running).await?;
    assert_eq!(
        exec(&later, "dev", "cat /warren/tools/tools-id")?,
        "good",
        "the shared tools volume was filled from a workspace's build"
    );
    Ok(())
}

/// A workspace that starts before the tools image exists (`warren up --no-editor-build`, a
/// registry down) mounts the still empty tools volume as its user; once the image arrives,
/// the next start fills the volume all the same. (Podman gave the volume to the first
/// container's user, uid 5001, and root without capabilities could never fill it after.)
#[tokio::test]
async fn a_tools_image_that_arrives_late_still_fills_the_volume() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    let h = Harness::new().await?;
    let suffix = format!("{:06x}", rand::random::<u32>() & 0xffffff);
    let tools = format!("localhost/warren-tools-late-{suffix}:1");
    let scratch = format!("warren-tools-late-scratch-{suffix}");
    let mut images = Images::default();
    let _volume = Volume(warren_agent::runtime::engine::plan::tools_volume_name(
        &tools,
    ));
    let early = Workspace::new("early", h.agent_id);
    h.runtime
        .apply(&early.key, &with_tools(&early, &tools))
        .await?;
    wait_state(&h.runtime, &early, ActualState::Running).await?;
    assert_eq!(
        exec(
            &early,
            "dev",
            "cat /warren/tools/tools-id 2>/dev/null || echo empty"
        )?
        .trim(),
        "empty"
    );

    // The image arrives (as `warren tools build` makes it).
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("tools-id");
    std::fs::write(&file, "late")?;
    cli_run(&["create", "--name", &scratch, IMAGE, "true"])?;
    let made = cli_run(&[
        "cp",
        &file.to_string_lossy(),
        &format!("{scratch}:/tools-id"),
    ])
    .and_then(|_| cli_run(&["commit", "-q", &scratch, &tools]));
    let _ = cli_run(&["rm", "-f", &scratch]);
    images.made.push(made?.trim().to_owned());
    h.runtime.retry_tools_now().await;

    let later = Workspace::new("late", h.agent_id);
    h.runtime
        .apply(&later.key, &with_tools(&later, &tools))
        .await?;
    wait_state(&h.runtime, &later, ActualState::Running).await?;
    assert_eq!(
        exec(&later, "dev", "cat /warren/tools/tools-id")?,
        "late",
        "the tools volume was not filled once its image existed"
    );
    Ok(())
}

/// Removes everything of one agent id, whatever its workspaces are called.
struct AgentObjects(warren_types::AgentId);

impl Drop for AgentObjects {
    fn drop(&mut self) {
        remove_labelled(&format!("label=warren.dev/agent-id={}", self.0));
    }
}

/// A one-container workspace: the fixture without its init and tools containers.
fn one_container(ws: &Workspace) -> Vec<serde_json::Value> {
    let mut objects = ws.objects();
    let spec = pod_spec(&mut objects);
    spec.as_object_mut()
        .expect("pod spec")
        .remove("initContainers");
    spec["containers"]
        .as_array_mut()
        .expect("containers")
        .retain(|c| c["name"] == "dev");
    objects
}

/// What one more workspace cost.
struct Cost {
    /// The engine calls made, in order.
    calls: Vec<String>,
    /// How many times `list` was asked.
    looks: usize,
    /// The container's exit code before its deletion: its stop's (143, SIGTERM through the
    /// pod's init), or 0 when Podman ended it by itself first. Podman 4.3 now and then ends a
    /// container it has just started, with code 0 and no stop asked (the runtime handles it
    /// for restarts: `engine/start.rs`, `watch_restart`); a container that ended so needs no
    /// stop, and the runtime rightly asks none.
    exit_code: i64,
}

/// What one more workspace costs: create until `Running`, stop until `Stopped`, delete until
/// gone, with `list` asked after each runtime change as the reconciler does.
async fn one_more(
    rt: &warren_agent::runtime::engine::EngineRuntime,
    proxy: &counting::CountingProxy,
    ws: &Workspace,
) -> Result<Cost> {
    let looks = std::sync::atomic::AtomicUsize::new(0);
    let until = |want: ActualState| {
        let looks = &looks;
        async move {
            // Subscribed before the look: a change after it wakes the wait.
            let mut changes = rt.changes();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                changes.borrow_and_update();
                looks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let seen = rt.list().await?.into_iter().find(|o| o.key == ws.key);
                if want == ActualState::Terminated && seen.is_none() {
                    return anyhow::Ok(());
                }
                if seen.as_ref().is_some_and(|o| derive(o) == want) {
                    return Ok(());
                }
                tokio::time::timeout_at(deadline, changes.changed())
                    .await
                    .with_context(|| format!("{} never {want:?}: {seen:?}", ws.name()))??;
            }
        }
    };
    proxy.reset();
    let objects = one_container(ws);
    rt.apply(&ws.key, &objects).await?;
    until(ActualState::Running).await?;
    rt.apply(&ws.key, &with_replicas(objects, 0)).await?;
    until(ActualState::Stopped).await?;
    let container = format!("warren-{}.c.dev", ws.name());
    let exit_code = cli_run(&["inspect", "--format", "{{.State.ExitCode}}", &container])?
        .trim()
        .parse()
        .context("the container's exit code")?;
    let mut changes = rt.changes();
    while rt.delete(&ws.key).await? != TerminationProgress::Terminated {
        changes.changed().await?;
    }
    until(ActualState::Terminated).await?;
    Ok(Cost {
        calls: proxy.calls(),
        looks: looks.into_inner(),
        exit_code,
    })
}

/// Each engine call with the names and ids of `ws` replaced, so two workspaces' calls compare.
fn call_kinds(calls: &[String], ws: &Workspace) -> Vec<String> {
    let mut out: Vec<String> = calls
        .iter()
        .map(|c| {
            // Ids and digests (runs of 12 or more hex digits) differ between workspaces.
            let c = c.replace(ws.name(), "<ws>");
            let mut out = String::new();
            let mut run = String::new();
            for ch in c.chars().chain(std::iter::once(' ')) {
                if ch.is_ascii_hexdigit() {
                    run.push(ch);
                    continue;
                }
                if run.len() >= 12 {
                    out.push_str("<id>");
                } else {
                    out.push_str(&run);
                }
                run.clear();
                out.push(ch);
            }
            out.pop();
            out
        })
        .collect();
    out.sort();
    out
}

/// Issue 38 (density): one more workspace on an agent that holds fifty costs the engine
/// calls about that workspace, as many as on an empty agent — no listing, inspection or
/// record of the others. Calls are counted through a proxy on the engine's socket, not
/// timed.
#[tokio::test]
async fn one_more_workspace_among_fifty_costs_no_more_engine_calls_than_alone() -> Result<()> {
    if !podman_here() {
        return Ok(());
    }
    // The proxy forwards to a `podman system service` of a runtime of its own.
    let service_state = tempfile::tempdir()?;
    let service = own_service(service_state.path()).await?;
    let upstream = service
        .host()
        .strip_prefix("unix://")
        .context("the service listens on a socket")?
        .to_owned();
    let proxy_dir = tempfile::tempdir()?;
    let proxy =
        counting::CountingProxy::start(std::path::Path::new(&upstream), proxy_dir.path()).await?;
    let agent_id = warren_types::AgentId(rand::random::<u32>() as i64 + 1_000_000);
    let _objects = AgentObjects(agent_id);
    let state = tempfile::tempdir()?;
    let mut config =
        warren_agent::runtime::engine::EngineConfig::new(agent_id, state.path().to_path_buf());
    config.host = Some(proxy.host());
    config.stop_timeout_secs = 2;
    let rt = warren_agent::runtime::engine::EngineRuntime::connect(config).await?;
    rt.list().await?;

    let alone = Workspace::new("alone", agent_id);
    let cost_alone = one_more(&rt, &proxy, &alone).await?;
    let (calls_alone, looks_alone) = (&cost_alone.calls, cost_alone.looks);

    // Fifty more, every other one stopped.
    let present: Vec<Workspace> = (0..50).map(|_| Workspace::new("dense", agent_id)).collect();
    for (i, ws) in present.iter().enumerate() {
        let objects = one_container(ws);
        let replicas = if i % 2 == 0 { 1 } else { 0 };
        rt.apply(&ws.key, &with_replicas(objects, replicas)).await?;
    }
    for ws in &present {
        wait_for(&rt, ws, "settled", |o| {
            matches!(derive(o), ActualState::Running | ActualState::Stopped)
        })
        .await?;
    }

    let among = Workspace::new("among", agent_id);
    let cost_among = one_more(&rt, &proxy, &among).await?;
    let (calls_among, looks_among) = (&cost_among.calls, cost_among.looks);

    // Nothing about another workspace, and no listing of them all: every call names the
    // new workspace, its objects, or its image.
    let others: Vec<&str> = present.iter().map(|w| w.name()).collect();
    for call in calls_among {
        assert!(
            !others.iter().any(|o| call.contains(o)),
            "a call about another workspace: {call}"
        );
        if call.starts_with("GET /containers/json")
            || call.starts_with("GET /volumes?")
            || call.contains("/networks/json")
        {
            assert!(
                call.contains(&format!("workspace-name={}", among.name())),
                "a listing of every workspace: {call}"
            );
        }
    }
    // No listing of containers at all: the runtime knows which containers each workspace
    // has (`index`) and inspects those by name; Podman answers a listing by loading every
    // container it holds, whatever the filters.
    for call in calls_alone.iter().chain(calls_among) {
        assert!(
            !call.starts_with("GET /containers/json"),
            "a container listing: {call}"
        );
    }
    // The same calls as alone. Only how often the runtime looks at the workspace's
    // containers (an inspection of each, or, with nothing changed, a ping of the engine)
    // depends on when engine events arrive between the looks `list` is asked for: at most
    // one such call per look, besides the inspections the applies and the deletion make
    // themselves — so those are compared against that bound, not against each other.
    let look = |c: &&String| {
        c.starts_with("GET /_ping") || (c.starts_with("GET /containers/") && c.ends_with("/json"))
    };
    let (kinds_alone, kinds_among) = (
        call_kinds(calls_alone, &alone),
        call_kinds(calls_among, &among),
    );
    // A running container is stopped; one Podman ended by itself first needs no stop.
    let stop = |c: &String| c.starts_with("POST /containers/") && c.contains("/stop");
    for (kinds, cost, which) in [
        (&kinds_alone, &cost_alone, "alone"),
        (&kinds_among, &cost_among, "among fifty"),
    ] {
        assert!(
            kinds.iter().any(stop) || cost.exit_code == 0,
            "{which}: the running container was never stopped (exit code {}):\n{kinds:#?}",
            cost.exit_code
        );
    }
    let rest = |kinds: &[String]| -> Vec<String> {
        kinds
            .iter()
            .filter(|c| !look(c) && !stop(c))
            .cloned()
            .collect()
    };
    eprintln!(
        "engine calls for one more workspace: {} alone ({looks_alone} looks), {} among fifty \
         ({looks_among} looks)\n{kinds_among:#?}",
        kinds_alone.len(),
        kinds_among.len()
    );
    assert_eq!(
        rest(&kinds_among),
        rest(&kinds_alone),
        "the calls besides the looks differ"
    );
    let (looked_alone, looked_among) = (
        kinds_alone.iter().filter(look).count(),
        kinds_among.iter().filter(look).count(),
    );
    assert!(
        looked_among <= looked_alone + looks_among && looked_alone <= looked_among + looks_alone,
        "inspections and pings: {looked_alone} alone ({looks_alone} looks), {looked_among} \
         among fifty ({looks_among} looks):\n{kinds_among:#?}"
    );
    rt.shutdown().await;
    service.shutdown().await;
    Ok(())
}

/// `podman inspect`'s start and end of a container, as the engine recorded them.
fn lifetime(
    container: &str,
) -> Result<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)> {
    let text = cli_run(&[
        "inspect",
        "--format",
        "{{.State.StartedAt}}|{{.State.FinishedAt}}",
        container,
    ])?;
    let (started, finished) = text.trim().split_once('|').context("inspect format")?;
    // Go's time format: `2026-11-28 21:00:00.123456789 +0000 UTC`.
    let parse = |t: &str| -> Result<chrono::DateTime<chrono::Utc>> {
        let t = t.trim();
        let t = t.rsplit_once(' ').map_or(t, |(head, _)| head);
        Ok(
            chrono::DateTime::parse_from_str(t, "%Y-%m-%d %H:%M:%S%.f %z")
                .with_context(|| format!("parsing {t:?}"))?
                .with_timezone(&chrono::Utc),
        )
    };
    Ok((parse(started)?, parse(finished)?))
}

/// Issue 38 (honest states): two hundred workspaces whose command ends — at once, after
/// 0.2 s, after 2 s, with any code, or by a signal — each ends `Failed` with its real exit
/// code; none is reported `Running` unless the engine's own record says its command ran for
/// `minReadySeconds` (as rendered for a command: 1 s) before it exited, and none is
/// reported `Running` again once it was `Failed`. `list` is asked every 50 ms, more often
/// than a reconciler asks.
#[tokio::test]
async fn states_are_true_for_two_hundred_commands_that_end() {
    // Failed once in CI (stop 60) with nothing of what failed in the excerpt: an error is
    // made a panic so that the hook writes it out at once (`common::say_panics_at_once`).
    if let Err(e) = commands_that_end().await {
        panic!("{e:#}");
    }
}

async fn commands_that_end() -> Result<()> {
    if !engine_available() {
        return Ok(());
    }
    const BATCHES: usize = 8;
    const PER_BATCH: usize = 25;
    // Command, and the exit code the engine records for it.
    let endings: [(&str, i64); 7] = [
        ("exit 3", 3),
        ("sleep 0.2; exit 5", 5),
        ("sleep 2; exit 7", 7),
        ("exit 0", 0),
        ("kill -KILL $$", 137),
        ("kill -TERM $$", 143),
        ("sleep 0.2; kill -KILL $$", 137),
    ];
    let h = Harness::new().await?;
    let _objects = AgentObjects(h.agent_id);
    for batch in 0..BATCHES {
        let mut workspaces = vec![];
        for i in 0..PER_BATCH {
            let ws = Workspace::new("ends", h.agent_id);
            let (command, code) = endings[(batch * PER_BATCH + i) % endings.len()];
            let mut objects = one_container(&ws);
            pod_spec(&mut objects)["containers"][0]["command"] =
                serde_json::json!(["sh", "-c", command]);
            for o in objects.iter_mut().filter(|o| o["kind"] == "Deployment") {
                o["spec"]["minReadySeconds"] = serde_json::json!(1);
            }
            workspaces.push((ws, command, code, objects));
        }
        // Applied a few at a time, as the reconciler does.
        futures::stream::iter(&workspaces)
            .map(|(ws, _, _, objects)| h.runtime.apply(&ws.key, objects))
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>, _>>()?;
        let workspaces: Vec<_> = workspaces
            .into_iter()
            .map(|(ws, command, code, _)| (ws, command, code))
            .collect();
        // Per workspace: when it was seen Running (the start of the look), and whether it
        // has been seen Failed.
        let mut running_seen: Vec<Option<chrono::DateTime<chrono::Utc>>> =
            vec![None; workspaces.len()];
        let mut failed: Vec<Option<String>> = vec![None; workspaces.len()];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while failed.iter().any(Option::is_none) {
            let asked = chrono::Utc::now();
            let seen = h.runtime.list().await?;
            for (i, (ws, command, _)) in workspaces.iter().enumerate() {
                let Some(o) = seen.iter().find(|o| o.key == ws.key) else {
                    continue;
                };
                match derive(o) {
                    ActualState::Running => {
                        assert!(
                            failed[i].is_none(),
                            "{} (`{command}`) reported Running after Failed: {o:?}",
                            ws.name()
                        );
                        running_seen[i].get_or_insert(asked);
                    }
                    ActualState::Failed => {
                        let failure = o.pod_failure.clone().context("a pod failure")?;
                        failed[i] = Some(failure.message);
                    }
                    _ => {}
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "not all failed: {:?}",
                workspaces
                    .iter()
                    .zip(&failed)
                    .filter(|(_, f)| f.is_none())
                    .map(|((ws, c, _), _)| format!("{} `{c}`", ws.name()))
                    .collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (i, (ws, command, code)) in workspaces.iter().enumerate() {
            let message = failed[i].as_deref().unwrap_or_default();
            assert!(
                message.contains(&format!("exited with code {code} ")),
                "{} (`{command}`): {message}",
                ws.name()
            );
            if let Some(seen) = running_seen[i] {
                let container = format!("warren-{}.c.dev", ws.name());
                let (started, finished) = lifetime(&container)?;
                assert!(
                    finished - started >= chrono::Duration::seconds(1),
                    "{} (`{command}`) was reported Running at {seen}, but its command ran from \
                     {started} to {finished}",
                    ws.name()
                );
            }
        }
        futures::stream::iter(&workspaces)
            .map(|(ws, _, _)| async {
                while h.runtime.delete(&ws.key).await? != TerminationProgress::Terminated {}
                anyhow::Ok(())
            })
            .buffer_unordered(8)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<()>>>()?;
    }
    Ok(())
}
