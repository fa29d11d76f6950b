//! A Compose dev container's own service into the configuration's fields (its image or
//! build, environment under `containerEnv`, ports, volumes and command), and what only a
//! Compose dev container allows (`overrideCommand: false`, `forwardPorts` of another
//! service's port) decided.

use super::{Compose, Mount};
use crate::properties::{Config, Port, ServicePort, VolumeMount};
use crate::{problem, unsupported, Notice, Problem};
use serde_json::Value;

/// What the rest of the configuration said that depends on the Compose files.
pub(crate) struct Pending {
    pub service_ports: Vec<ServicePort>,
    pub override_command: Option<bool>,
}

fn add_port(ports: &mut Vec<Port>, port: u16) {
    if !ports.iter().any(|p| p.port == port) {
        ports.push(Port {
            port,
            label: None,
            https: false,
        });
    }
}

/// Applies `compose` (`None`: not a Compose dev container, or one with problems already
/// said) to `config`.
pub(crate) fn apply(
    compose: Option<Compose>,
    top: &serde_json::Map<String, Value>,
    pending: Pending,
    config: &mut Config,
    problems: &mut Vec<Problem>,
    notices: &mut Vec<Notice>,
) {
    let is_compose = top.contains_key("dockerComposeFile");
    let Some(mut compose) = compose else {
        if !is_compose {
            for key in ["service", "runServices"] {
                if top.contains_key(key) {
                    problems.push(problem(key, "is read only with a `dockerComposeFile`"));
                }
            }
            if pending.override_command == Some(false) {
                problems.push(unsupported(
                    "overrideCommand",
                    "`overrideCommand: false` (running the image's own command)",
                    "Warren keeps an image's dev container running itself and cannot know the image's command before it runs; start the service from `postStartCommand`, or describe it as a Compose service",
                ));
            }
        }
        for sp in pending.service_ports {
            problems.push(unsupported(
                &sp.path,
                &format!("forwarding {}:{} (a port of another host or service)", sp.service, sp.port),
                &format!("Warren forwards the dev container's own ports, and those of its Compose services; {:?} is neither", sp.service),
            ));
        }
        return;
    };
    for key in ["image", "build", "dockerFile"] {
        if top.contains_key(key) {
            problems.push(problem(
                key,
                "a Compose dev container runs its service's image: give the image (or its `build`) in the Compose file, not here",
            ));
        }
    }
    for sp in pending.service_ports {
        match compose.services.iter_mut().find(|s| s.name == sp.service) {
            Some(s) if !s.ports.contains(&sp.port) => s.ports.push(sp.port),
            Some(_) => {}
            None => problems.push(problem(
                &sp.path,
                format!(
                    "{:?} is not a service that runs in this dev container",
                    sp.service
                ),
            )),
        }
    }
    let main = compose.services[compose.main].clone();
    match (&main.image, &main.build) {
        (_, Some(b)) => {
            config.build = Some(b.clone());
            config.image = crate::build::IMAGE.to_owned();
        }
        (Some(i), None) => config.image = i.clone(),
        (None, None) => {}
    }
    // The service's environment under the configuration's own `containerEnv`.
    let mut env = main.env.clone();
    env.append(&mut config.env);
    config.env = env;
    for p in &main.ports {
        add_port(&mut config.ports, *p);
    }
    for m in &main.volumes {
        config.mounts.push(match m {
            Mount::Named { name, target } => VolumeMount {
                source: name.clone(),
                target: target.clone(),
                ephemeral: false,
            },
            Mount::Ephemeral { target } => VolumeMount {
                source: String::new(),
                target: target.clone(),
                ephemeral: true,
            },
        });
    }
    let path = format!("services.{}", main.name);
    match pending.override_command {
        Some(true) => {}
        _ if main.entrypoint.is_none() && main.command.is_none() => notices.push(Notice {
            path: format!("{path}.command"),
            message: "the dev container's service gives no `command`: it runs Warren's keep-alive, not its image's own command".into(),
        }),
        _ => {
            config.command = main.entrypoint.clone().unwrap_or_default();
            config.args = main.command.clone().unwrap_or_default();
            if main.entrypoint.is_none() {
                notices.push(Notice {
                    path: format!("{path}.command"),
                    message: "run as the dev container's command by Warren's start script, without the image's entrypoint".into(),
                });
            }
        }
    }
    if main.healthcheck.is_some() && !main.hold {
        notices.push(Notice {
            path: format!("{path}.healthcheck"),
            message:
                "nothing waits for the dev container's service to be healthy, so it is not checked"
                    .into(),
        });
    }
    config.compose = Some(compose);
}
