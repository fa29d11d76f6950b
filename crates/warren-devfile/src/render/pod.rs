//! One container of the workspace's pod: its environment, mounts, ports, resources and the
//! locked-down security context every workspace container gets.

use super::names::{k8s_protocol, name_of, port_name};
use super::resources::Res;
use super::{
    RenderRequest, DATA_VOLUME, FILES_MOUNT_PATH, FILES_VOLUME, GIT_MOUNT_PATH, GIT_VOLUME,
    SCRIPTS_MOUNT_PATH, SCRIPTS_VOLUME,
};
use crate::model::{Container, Healthcheck, Protocol};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use warren_types::config::AgentConfig;
use warren_types::isolation::SecurityOption;

/// Commands devfiles use only to keep a container alive (the registry's `tail -f
/// /dev/null`): they serve nothing, so there is nothing to wait for.
const KEEP_ALIVE: &[&[&str]] = &[&["tail", "-f", "/dev/null"], &["sleep", "infinity"]];

/// Whether the container runs a command of the devfile's (or its image's) that could exit
/// or serve, rather than only something keeping it alive. `wrapped`: it runs Warren's start
/// script, which runs `command` + `args`, or keeps the container alive without them.
pub(super) fn runs_a_command(c: &Container, wrapped: bool) -> bool {
    let runs: Vec<&str> = c
        .command
        .iter()
        .chain(&c.args)
        .map(String::as_str)
        .collect();
    if runs.is_empty() {
        // Warren's keep-alive, or else the image's own entrypoint, which may be anything.
        return !wrapped;
    }
    !KEEP_ALIVE.contains(&runs.as_slice())
}

/// When the container runs a command and declares a TCP endpoint: a readiness probe on the
/// first such port, so `Running` waits for the server to listen (Kubernetes probes it; the
/// engine runtime dials it the same way).
pub(super) fn readiness_probe(c: &Container, wrapped: bool) -> Option<core::Probe> {
    if !runs_a_command(c, wrapped) {
        return None;
    }
    let port = c
        .endpoints
        .iter()
        .find(|e| e.protocol != Protocol::Udp)?
        .target_port;
    Some(core::Probe {
        tcp_socket: Some(core::TCPSocketAction {
            port: IntOrString::Int(i32::from(port)),
            host: None,
        }),
        period_seconds: Some(1),
        failure_threshold: Some(1),
        ..Default::default()
    })
}

/// The locked-down security context of every workspace container.
pub(super) fn security_context(cfg: &AgentConfig) -> core::SecurityContext {
    core::SecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(cfg.security.run_as_user),
        run_as_group: Some(cfg.security.run_as_group),
        allow_privilege_escalation: Some(cfg.security.allow_privilege_escalation),
        privileged: Some(false),
        capabilities: Some(core::Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        ..Default::default()
    }
}

/// Refuses a container that asks for a capability or a security option its agent's admin
/// has not allowed, naming the first.
pub(super) fn check_isolation(
    devfile: &crate::model::Devfile,
    cfg: &AgentConfig,
) -> Result<(), super::RenderError> {
    for c in &devfile.containers {
        // The parser kept only options that parse.
        let options = c.isolation.security_opt.iter();
        first_not_allowed(
            cfg,
            &c.name,
            c.isolation.cap_add.iter().map(String::as_str),
            options.filter_map(|o| SecurityOption::parse(o).ok()),
        )?;
    }
    Ok(())
}

/// Refuses stored objects whose containers have a capability or an unconfined profile the
/// agent's admin no longer allows (one allowed when they were rendered): a workspace does not
/// start again with an exception taken back.
pub fn check_rendered_isolation(
    objects: &[serde_json::Value],
    cfg: &AgentConfig,
) -> Result<(), super::RenderError> {
    let pods = objects
        .iter()
        .filter(|o| o["kind"] == "Deployment")
        .map(|o| &o["spec"]["template"]["spec"]);
    for pod in pods {
        let containers = ["initContainers", "containers"]
            .iter()
            .filter_map(|k| pod[*k].as_array())
            .flatten();
        for c in containers {
            let sc = &c["securityContext"];
            let caps = sc["capabilities"]["add"].as_array().into_iter().flatten();
            let unconfined = [
                ("seccompProfile", SecurityOption::SeccompUnconfined),
                ("appArmorProfile", SecurityOption::ApparmorUnconfined),
            ]
            .into_iter()
            .filter(|(field, _)| sc[*field]["type"] == "Unconfined")
            .map(|(_, option)| option);
            first_not_allowed(
                cfg,
                c["name"].as_str().unwrap_or_default(),
                caps.map(|c| c.as_str().unwrap_or_default()),
                unconfined,
            )?;
        }
    }
    Ok(())
}

/// The first of a container's capabilities and security options its agent's admin does not
/// allow, as the renderer's refusal.
fn first_not_allowed<'a>(
    cfg: &AgentConfig,
    container: &str,
    mut caps: impl Iterator<Item = &'a str>,
    mut options: impl Iterator<Item = SecurityOption>,
) -> Result<(), super::RenderError> {
    let refuse = |what: String, setting| super::RenderError::NotAllowed {
        container: container.to_owned(),
        what,
        setting,
    };
    if let Some(cap) = caps.find(|c| !cfg.security.allows_capability(c)) {
        return Err(refuse(
            format!("the capability {cap}"),
            "security.allowed_capabilities",
        ));
    }
    if let Some(o) = options.find(|o| !cfg.security.allows_security_option(*o)) {
        return Err(refuse(
            format!("the security option {o}"),
            "security.allowed_security_options",
        ));
    }
    Ok(())
}

/// The locked-down context with what the container asks beyond it ([`check_isolation`]
/// allowed each): capabilities added after every other is dropped, and the unconfined
/// profiles as Kubernetes names them (the engine runtime reads them back as its options).
fn with_exceptions(
    mut sec: core::SecurityContext,
    x: &crate::model::IsolationExceptions,
) -> core::SecurityContext {
    if !x.cap_add.is_empty() {
        if let Some(caps) = sec.capabilities.as_mut() {
            caps.add = Some(x.cap_add.clone());
        }
    }
    for o in &x.security_opt {
        match SecurityOption::parse(o) {
            Ok(SecurityOption::SeccompUnconfined) => {
                sec.seccomp_profile = Some(core::SeccompProfile {
                    type_: "Unconfined".into(),
                    localhost_profile: None,
                });
            }
            Ok(SecurityOption::ApparmorUnconfined) => {
                sec.app_armor_profile = Some(core::AppArmorProfile {
                    type_: "Unconfined".into(),
                    localhost_profile: None,
                });
            }
            // Parsing kept only the options above.
            Err(_) => {}
        }
    }
    sec
}

/// The Kubernetes container for devfile container `c`, named `name`; `with_scripts` mounts
/// the startup scripts (wrapped containers).
/// An environment variable with a value.
fn env_var(name: impl Into<String>, value: impl Into<String>) -> core::EnvVar {
    core::EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// A volume mounted at `path`.
fn volume_mount(
    name: impl Into<String>,
    path: impl Into<String>,
    read_only: bool,
) -> core::VolumeMount {
    core::VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

pub(super) fn container(
    c: &Container,
    name: String,
    with_scripts: bool,
    req: &RenderRequest<'_>,
    project_dir: Option<&str>,
    env_secret: &str,
    res: Option<&Res>,
) -> core::Container {
    let cfg = req.agent_config;
    let project_source = |c: &Container| match project_dir {
        Some(p) => format!("{}/{}", c.source_mapping.trim_end_matches('/'), p),
        None => c.source_mapping.clone(),
    };
    let sec = with_exceptions(security_context(cfg), &c.isolation);
    let mut env = vec![];
    // A home on the volume for the containers the wrapper prepares it in (see `HOME_DIR`).
    if with_scripts && c.mount_sources {
        let home = format!(
            "{}/{}",
            c.source_mapping.trim_end_matches('/'),
            super::HOME_DIR
        );
        env.push(env_var("HOME", home));
        if let Some(url) = req.dotfiles_url.filter(|_| c.main) {
            env.push(env_var("WARREN_DOTFILES_URL", url.to_owned()));
        }
    }
    env.extend([
        env_var("PROJECTS_ROOT", c.source_mapping.clone()),
        env_var("PROJECT_SOURCE", project_source(c)),
        env_var("WARREN_WORKSPACE_NAME", name_of(req)),
    ]);
    if c.main {
        // Said outright, so an image's own `ENV` cannot move the editor (which has no password
        // of its own) off the loopback; the engine runtime replaces it (see the constant).
        env.push(env_var(
            warren_types::config::EDITOR_ADDRESS_ENV,
            "127.0.0.1",
        ));
    }
    env.extend(
        c.env
            .iter()
            .map(|e| env_var(e.name.clone(), e.value.clone())),
    );
    let mut mounts = Vec::new();
    if c.mount_sources {
        mounts.push(volume_mount(DATA_VOLUME, c.source_mapping.clone(), false));
    }
    for m in &c.volume_mounts {
        mounts.push(volume_mount(m.name.clone(), m.path.clone(), false));
    }
    if with_scripts {
        mounts.push(volume_mount(SCRIPTS_VOLUME, SCRIPTS_MOUNT_PATH, true));
    }
    mounts.push(volume_mount(FILES_VOLUME, FILES_MOUNT_PATH, true));
    // The project's credential where the sources are: clone, fetch and push from there.
    if let Some(p) = req
        .project
        .filter(|p| p.credential.is_some() && c.mount_sources)
    {
        mounts.push(volume_mount(GIT_VOLUME, GIT_MOUNT_PATH, true));
        let credential = super::git_credential_env(&p).into_iter();
        env.extend(credential.map(|(name, value)| env_var(name, value)));
    }
    // Endpoints may share a port (two paths of one server): one container port each.
    let mut seen = std::collections::BTreeSet::new();
    let ports: Vec<core::ContainerPort> = c
        .endpoints
        .iter()
        .filter(|e| seen.insert((e.target_port, k8s_protocol(e.protocol))))
        .map(|e| core::ContainerPort {
            container_port: i32::from(e.target_port),
            name: Some(port_name(&e.name, e.target_port)),
            protocol: Some(k8s_protocol(e.protocol).into()),
            ..Default::default()
        })
        .collect();
    core::Container {
        name,
        image: Some(cfg.mirrored_image(&c.image)),
        image_pull_policy: Some("IfNotPresent".into()),
        command: (!c.command.is_empty()).then(|| c.command.clone()),
        args: (!c.args.is_empty()).then(|| c.args.clone()),
        env: Some(env),
        env_from: Some(vec![core::EnvFromSource {
            secret_ref: Some(core::SecretEnvSource {
                name: env_secret.to_owned(),
                optional: None,
            }),
            ..Default::default()
        }]),
        ports: (!ports.is_empty()).then_some(ports),
        resources: res.and_then(Res::to_k8s),
        security_context: Some(sec),
        volume_mounts: Some(mounts),
        ..Default::default()
    }
}

/// Waits for a container's healthcheck to pass: the `postStart` hook of a container with a
/// [`Healthcheck`]. Kubernetes (and the engine runtime, as the kubelet does) starts the pod's
/// next container only once this hook has returned, and kills the container when it fails.
/// The check is tried every second (Compose would wait `interval` before its first try) and
/// given up on past `start_period + interval × retries`, the time after which Compose calls
/// the service unhealthy; each try is bounded by `timeout`. Needs `/bin/sh`, as Compose's
/// `CMD-SHELL` does.
const HEALTHCHECK_SCRIPT: &str = r#"name=$1 timeout=$2 bound=$3; shift 3
log=$(mktemp 2>/dev/null) || log=/dev/null
start=$(date +%s)
while :; do
  "$@" >"$log" 2>&1 </dev/null & pid=$!
  ( sleep "$timeout"; kill -9 "$pid" ) >/dev/null 2>&1 & watcher=$!
  if wait "$pid"; then
    kill "$watcher" 2>/dev/null
    [ "$log" = /dev/null ] || rm -f "$log"
    exit 0
  fi
  kill "$watcher" 2>/dev/null
  if [ $(( $(date +%s) - start )) -ge "$bound" ]; then
    echo "the healthcheck of $name did not pass within ${bound}s; its last output: $(head -c 400 "$log" 2>/dev/null)" >&2
    [ "$log" = /dev/null ] || rm -f "$log"
    exit 1
  fi
  sleep 1
done"#;

/// The `postStart` hook that holds the pod's later containers until `h` passes.
pub(super) fn healthcheck_hook(name: &str, h: &Healthcheck) -> core::Lifecycle {
    let bound =
        u64::from(h.start_period_seconds) + u64::from(h.interval_seconds) * u64::from(h.retries);
    let mut command = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        HEALTHCHECK_SCRIPT.to_owned(),
        "warren-healthcheck".to_owned(),
        name.to_owned(),
        h.timeout_seconds.to_string(),
        bound.to_string(),
    ];
    command.extend(h.test.iter().cloned());
    core::Lifecycle {
        post_start: Some(core::LifecycleHandler {
            exec: Some(core::ExecAction {
                command: Some(command),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Gives container `k` its machine class's devices, as extended resources in its limits
/// (Kubernetes takes the request to be the limit for them).
pub(super) fn add_devices(
    k: &mut core::Container,
    devices: &std::collections::BTreeMap<String, u32>,
) {
    if devices.is_empty() {
        return;
    }
    let resources = k.resources.get_or_insert_with(Default::default);
    let limits = resources.limits.get_or_insert_with(Default::default);
    for (name, count) in devices {
        limits.insert(
            name.clone(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(count.to_string()),
        );
    }
}

/// A machine class's toleration as the pod spec takes it.
pub(super) fn toleration(t: &warren_types::machine::Toleration) -> core::Toleration {
    core::Toleration {
        key: (!t.key.is_empty()).then(|| t.key.clone()),
        operator: t.operator.clone(),
        value: t.value.clone(),
        effect: t.effect.clone().filter(|e| !e.is_empty()),
        toleration_seconds: t.toleration_seconds,
    }
}
