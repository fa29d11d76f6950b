//! The runtime's background work: following the engine's events (so `changes()` fires) and
//! keeping the `podman system service` it started alive.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::EventMessageTypeEnum;
use bollard::query_parameters::EventsOptions;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::index::ContainerIndex;
use super::plan::WORKSPACE_NAME_LABEL;
use super::{connect, lock, EngineRuntime, Inner, OWNER_LABEL};
use crate::runtime::AGENT_ID_LABEL;

/// Bumps the change counter on every engine event of this agent's objects; reconnects when
/// the stream ends (the engine restarted, the connection dropped).
pub(super) async fn watch_events(inner: std::sync::Weak<Inner>, shutdown: CancellationToken) {
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let docker = strong.docker.clone();
        let agent = strong.config.agent_id.to_string();
        let owner = strong.owner.clone();
        let options = EventsOptions {
            filters: Some(HashMap::from([(
                "label".to_owned(),
                vec![
                    format!("{AGENT_ID_LABEL}={agent}"),
                    format!("{OWNER_LABEL}={owner}"),
                ],
            )])),
            ..Default::default()
        };
        let mut stream = docker.events(Some(options));
        // Events may have been missed while disconnected: every workspace is looked at again,
        // and the containers of each are listed until the next full look (`index`).
        lock(&strong.index).invalidate();
        EngineRuntime { inner: strong }.changed_all();
        loop {
            tokio::select! {
                // Cancel-safe: nothing is half-done between events.
                _ = shutdown.cancelled() => return,
                event = stream.next() => match event {
                    Some(Ok(event)) => {
                        // Engines that ignore the label filter still name the labels in the
                        // actor's attributes; any event of our objects counts, whatever its
                        // action is called (Podman's differ from Docker's).
                        let attrs = event.actor.and_then(|a| a.attributes);
                        let container = event.typ == Some(EventMessageTypeEnum::CONTAINER);
                        let action = event.action.unwrap_or_default();
                        let ours = attrs.as_ref().is_none_or(|attrs| {
                            attrs.get(AGENT_ID_LABEL).is_none_or(|id| *id == agent)
                                && attrs.get(OWNER_LABEL).is_none_or(|o| *o == owner)
                        });
                        if !ours {
                            continue;
                        }
                        let Some(inner) = inner.upgrade() else {
                            return;
                        };
                        if container {
                            index_event(&inner.index, &action, attrs.as_ref());
                        }
                        let runtime = EngineRuntime { inner };
                        // Containers carry their workspace's name; an event naming none (a
                        // volume or network the runtime made itself) changes no state the
                        // runtime has not marked already.
                        match attrs.as_ref().and_then(|a| a.get(WORKSPACE_NAME_LABEL)) {
                            Some(name) => runtime.changed(name),
                            None => runtime.bump(),
                        }
                    }
                    Some(Err(e)) => {
                        tracing::debug!(error = %e, "engine event stream failed; reconnecting");
                        break;
                    }
                    None => break,
                },
            }
        }
        tokio::select! {
            // Cancel-safe: a sleep.
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Keeps the index of each workspace's containers (`index`) as a container event says: made
/// (`create`) or gone (Podman's `remove`, Docker's `destroy`).
fn index_event(
    index: &std::sync::Mutex<ContainerIndex>,
    action: &str,
    attrs: Option<&HashMap<String, String>>,
) {
    let Some(name) = attrs.and_then(|a| a.get("name")) else {
        return;
    };
    match action {
        "create" => {
            if let Some(workspace) = attrs.and_then(|a| a.get(WORKSPACE_NAME_LABEL)) {
                lock(index).add(workspace, name);
            }
        }
        "remove" | "destroy" => lock(index).remove(name),
        _ => {}
    }
}

/// How often the `podman system service` this runtime started is checked.
const SUPERVISE_INTERVAL: Duration = Duration::from_secs(2);
/// Pings in a row the service may miss before it is restarted.
const SUPERVISE_MISSED_PINGS: u32 = 3;

/// Keeps the `podman system service` this runtime started serving: when it exits, loses its
/// socket or stops answering, it is stopped and started again on the same socket (the API
/// client reconnects by path; containers keep running, conmon holds them). Without this an
/// agent whose service died would fail every call until restarted by hand.
pub(super) async fn supervise_service(inner: std::sync::Weak<Inner>, shutdown: CancellationToken) {
    let mut missed = 0u32;
    loop {
        tokio::select! {
            // Cancel-safe: cancellation is level-triggered.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: a sleep holds no state.
            _ = tokio::time::sleep(SUPERVISE_INTERVAL) => {}
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        // The lock is held only for quick looks and for a restart, never for a ping, so
        // `shutdown` is not kept waiting.
        let seen = match inner.service.lock().await.as_mut() {
            // A restart that failed last time: try again.
            None => Some("is not running".to_owned()),
            Some(s) => s.fault(),
        };
        let fault = match seen {
            Some(f) => Some(f),
            None => {
                let ping = tokio::time::timeout(Duration::from_secs(3), inner.docker.ping());
                if matches!(ping.await, Ok(Ok(_))) {
                    missed = 0;
                    None
                } else {
                    missed += 1;
                    (missed >= SUPERVISE_MISSED_PINGS)
                        .then(|| format!("did not answer {missed} pings in a row"))
                }
            }
        };
        let Some(fault) = fault else { continue };
        let mut service = inner.service.lock().await;
        if shutdown.is_cancelled() {
            return;
        }
        missed = 0;
        tracing::warn!(
            fault,
            "the podman system service of this agent failed; starting it again"
        );
        if let Some(old) = service.take() {
            old.stop().await;
        }
        let restarted = match connect::find_podman() {
            Some(podman) => connect::spawn_podman(&podman, &inner.config.state_dir)
                .await
                .map_err(|e| warren_types::error_chain(&e)),
            None => Err("no `podman` binary on PATH any more".to_owned()),
        };
        match restarted {
            Ok(connection) => {
                *service = connection.service;
                tracing::info!("podman system service started again");
                // Whatever happened meanwhile was not announced: look again.
                EngineRuntime {
                    inner: inner.clone(),
                }
                .changed_all();
            }
            Err(e) => {
                tracing::warn!(error = %e, "starting the podman system service again failed; retrying");
            }
        }
    }
}
