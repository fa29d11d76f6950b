//! When a started pod is usable, so `Running` is never reported for one that is not.
//!
//! All app containers running is not enough when a container runs a server or a command that
//! may exit a moment later. The rendered Deployment says what to wait for, as it does on
//! Kubernetes (`warren-devfile` decides: a command of the devfile's with a TCP endpoint gets a
//! readiness probe on it, a command without one `minReadySeconds: 1`), and the engine runtime
//! follows it:
//!
//! - nothing to wait for (Warren's keep-alive, `tail -f /dev/null`): usable once running;
//! - `minReadySeconds`: usable once the pod has run that long;
//! - readiness probes: usable when each probed port accepts a connection on the pod's address,
//!   or — unlike Kubernetes, which would stay unready — past [`PORT_BOUND`], usable with the
//!   silent ports named in the log.
//!
//! A pod found usable stays so until its pod hash changes or it stops running. While one is
//! not, a watch task wakes the reconciler (`changes`) the moment that can change, so the
//! report goes out on the event, not on the next timer.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use serde_json::Value;

use super::{label, EngineRuntime, Record, POD_HASH_LABEL};
use bollard::models::ContainerSummary;

/// How long declared ports are waited for before the pod counts as usable without them.
pub(super) const PORT_BOUND: Duration = Duration::from_secs(30);
/// Between two probes of the ports.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// One connection attempt.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(300);

/// After finding the first container stopped where the listing said running: when to look
/// again should no engine event have woken the reconciler before.
const RECHECK_STOPPED: Duration = Duration::from_secs(1);

/// What an inspection of the pod's first container tells.
struct Inspected {
    started: chrono::DateTime<chrono::Utc>,
    running: bool,
    addresses: Vec<IpAddr>,
}

/// Whether the pod is usable, and if not, what it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Usable {
    Yes,
    /// Usable, though these declared ports did not accept connections within the bound.
    WithoutPorts(String),
    No(String),
}

/// What the applied Deployment says to wait for, as Kubernetes would: the ports of its
/// containers' TCP readiness probes, and `minReadySeconds`. `None`: nothing — usable once
/// running.
pub(super) fn wait_for(deployment: &Value) -> Option<(BTreeSet<u16>, Duration)> {
    let containers = deployment
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ports: BTreeSet<u16> = containers
        .iter()
        .filter_map(|c| c.pointer("/readinessProbe/tcpSocket/port"))
        .filter_map(Value::as_u64)
        .filter_map(|p| u16::try_from(p).ok())
        .collect();
    let min = deployment
        .pointer("/spec/minReadySeconds")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    (!ports.is_empty() || min > 0).then(|| (ports, Duration::from_secs(min)))
}

/// Whether every port accepts a connection on one of `addresses`.
async fn all_accept(addresses: &[IpAddr], ports: &BTreeSet<u16>) -> Result<(), Vec<u16>> {
    let mut closed = vec![];
    for port in ports {
        let mut open = false;
        for addr in addresses {
            let attempt = tokio::net::TcpStream::connect((*addr, *port));
            if matches!(
                tokio::time::timeout(CONNECT_TIMEOUT, attempt).await,
                Ok(Ok(_))
            ) {
                open = true;
                break;
            }
        }
        if !open {
            closed.push(*port);
        }
    }
    if closed.is_empty() {
        Ok(())
    } else {
        Err(closed)
    }
}

fn words(ports: &[u16]) -> String {
    ports
        .iter()
        .map(u16::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl EngineRuntime {
    /// Whether the pod of `record`, whose app containers all run, is usable (see the module
    /// docs); starts the probe that reports the change when it is not yet.
    pub(super) async fn usable(&self, record: &Record, containers: &[ContainerSummary]) -> Usable {
        let name = &record.name;
        if super::lock(&self.inner.usable).get(name) == Some(&record.pod_hash) {
            return Usable::Yes;
        }
        let Some((ports, min_running)) = wait_for(&record.deployment) else {
            self.mark_usable(record);
            return Usable::Yes;
        };
        let Some(owner) = containers.iter().find(|c| {
            super::summary_role(c) == super::plan::Role::App
                && super::summary_order(c) == 0
                && label(c, POD_HASH_LABEL) == Some(record.pod_hash.as_str())
        }) else {
            return Usable::No("the pod's first container is not there".into());
        };
        // The inspection tells the state as it was when the engine read it, some time
        // after this instant: measured from here, a slow answer cannot make a command that
        // exited early look as if it had run long enough.
        let asked = chrono::Utc::now();
        let Some(Inspected {
            started,
            running,
            addresses,
        }) = self.inspect_owner(owner).await
        else {
            return Usable::No("the pod's first container cannot be inspected".into());
        };
        // The listing that found every container running may be older than this inspection:
        // a command that exited in between must not count as having run `min_running` (the
        // next look sees the exit; the timer below makes sure there is one).
        if !running {
            self.probe(record, addresses, BTreeSet::new(), RECHECK_STOPPED);
            return Usable::No("the pod's first container is no longer running".into());
        }
        let ran = asked
            .signed_duration_since(started)
            .to_std()
            .unwrap_or_default();
        let verdict = if ran < min_running {
            Usable::No(format!(
                "its command has run for less than {} s",
                min_running.as_secs()
            ))
        } else if ports.is_empty() {
            Usable::Yes
        } else {
            match all_accept(&addresses, &ports).await {
                Ok(()) => Usable::Yes,
                Err(closed) if ran >= PORT_BOUND => Usable::WithoutPorts(format!(
                    "port(s) {} did not accept connections within {} s of the start",
                    words(&closed),
                    PORT_BOUND.as_secs()
                )),
                Err(closed) => Usable::No(format!(
                    "waiting for port(s) {} to accept connections",
                    words(&closed)
                )),
            }
        };
        match &verdict {
            Usable::Yes | Usable::WithoutPorts(_) => self.mark_usable(record),
            // Only time can change the first verdict; the ports, or the bound, the second.
            Usable::No(_) if ran < min_running => {
                self.probe(record, addresses, BTreeSet::new(), min_running - ran)
            }
            Usable::No(_) => self.probe(record, addresses, ports, PORT_BOUND.saturating_sub(ran)),
        }
        verdict
    }

    fn mark_usable(&self, record: &Record) {
        super::lock(&self.inner.usable).insert(record.name.clone(), record.pod_hash.clone());
    }

    /// Forgets a pod's verdict (it stopped, or another pod replaced it).
    pub(super) fn forget_usable(&self, name: &str) {
        super::lock(&self.inner.usable).remove(name);
    }

    /// When the owner container started, whether it still runs, and its addresses on the
    /// pod's networks.
    async fn inspect_owner(&self, owner: &ContainerSummary) -> Option<Inspected> {
        let inspect = self.inspect(owner.id.as_deref()?).await.ok()?;
        let state = inspect.state.as_ref()?;
        let started = state
            .started_at
            .as_deref()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())?
            .with_timezone(&chrono::Utc);
        let running = state.running == Some(true);
        Some(Inspected {
            started,
            running,
            addresses: super::exec::pod_addresses(inspect),
        })
    }

    /// Watches a pod that is not usable yet, at most `bound`: until its `ports` accept, or
    /// (without ports) until `bound` has passed; then wakes the reconciler, which looks
    /// again. One watch per workspace at a time.
    fn probe(
        &self,
        record: &Record,
        addresses: Vec<IpAddr>,
        ports: BTreeSet<u16>,
        bound: Duration,
    ) {
        if !super::lock(&self.inner.probing).insert(record.name.clone()) {
            return;
        }
        let runtime = self.clone();
        let name = record.name.clone();
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + bound;
            while !ports.is_empty() && tokio::time::Instant::now() < deadline {
                if all_accept(&addresses, &ports).await.is_ok() {
                    break;
                }
                let next = (tokio::time::Instant::now() + PROBE_EVERY).min(deadline);
                tokio::select! {
                    // Cancel-safe: cancellation is level-triggered.
                    _ = shutdown.cancelled() => break,
                    // Cancel-safe: a sleep holds nothing.
                    _ = tokio::time::sleep_until(next) => {}
                }
            }
            if ports.is_empty() {
                tokio::select! {
                    // Cancel-safe: cancellation is level-triggered.
                    _ = shutdown.cancelled() => {}
                    // Cancel-safe: a sleep holds nothing.
                    _ = tokio::time::sleep_until(deadline) => {}
                }
            }
            super::lock(&runtime.inner.probing).remove(&name);
            runtime.changed(&name);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_deployment_says_what_to_wait_for() {
        let d = |containers: Value, min: Option<u64>| {
            let mut d = json!({"spec": {"template": {"spec": {"containers": containers}}}});
            if let Some(m) = min {
                d["spec"]["minReadySeconds"] = json!(m);
            }
            d
        };
        let plain = json!({"image": "x"});
        let probed = json!({"image": "x", "readinessProbe": {"tcpSocket": {"port": 8080}}});
        assert_eq!(wait_for(&d(json!([plain.clone()]), None)), None);
        assert_eq!(
            wait_for(&d(json!([plain.clone(), probed]), None)),
            Some(([8080].into(), Duration::ZERO))
        );
        assert_eq!(
            wait_for(&d(json!([plain]), Some(1))),
            Some((BTreeSet::new(), Duration::from_secs(1)))
        );
        assert_eq!(wait_for(&json!({})), None);
    }
}
