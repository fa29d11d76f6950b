//! Host ports for a pod's published ports, chosen by the agent below the kernel's ephemeral
//! port range.
//!
//! An engine asked for "any" host port takes one the kernel hands out (bind to port 0, then
//! release it) when the container is created, and binds it only when the container starts.
//! Between the two, and for as long as a workspace is stopped, any socket bound to port 0 and
//! any outgoing connection may be given that very port; the workspace then cannot start
//! ("address already in use"). Ports below the ephemeral range are never handed out so: only a
//! program naming one binds it. The agent picks them at random from `LOWEST..=HIGHEST` (kept
//! under Kubernetes' NodePort range), skips those its containers hold, running or not, and
//! those bound now, and labels the container with what it chose ([`HOST_PORTS_LABEL`]).
//! Where the kernel's ephemeral range leaves too few ports below it, the engine picks.
//!
//! What its containers hold is learnt from the labels in the runtime's full listings (at
//! start and before each full reconcile) and kept as it creates and removes containers: a
//! choice makes no engine call of its own (Podman answers any listing by loading every
//! container it holds, which one more workspace must not cost).

use super::*;
use bollard::models::ContainerCreateBody;
use rand::Rng;
use std::ops::RangeInclusive;

/// Label: the host ports a container's published ports are bound to, comma-separated.
pub(super) const HOST_PORTS_LABEL: &str = "warren.dev/host-ports";

/// The lowest host port the agent picks.
const LOWEST: u16 = 20_000;
/// The highest host port the agent picks: Kubernetes' NodePorts start above it.
const HIGHEST: u16 = 29_999;
/// Fewer ports than this below the ephemeral range: the engine picks instead.
const MIN_SPAN: u16 = 1_000;
/// Candidates looked at per port before the engine is left to pick.
const TRIES: usize = 256;

/// The range to pick from, and the ports given out, by container name (shared with the
/// GitOps sibling: both publish on this machine).
#[derive(Debug)]
pub(super) struct HostPorts {
    range: Option<RangeInclusive<u16>>,
    given: Mutex<BTreeMap<u16, String>>,
}

impl HostPorts {
    /// The allocator for this machine's kernel.
    pub(super) fn for_this_host() -> Arc<HostPorts> {
        let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|text| ephemeral_low(&text));
        let range = ephemeral.and_then(range_below);
        if range.is_none() {
            tracing::info!(
                ?ephemeral,
                "the kernel's ephemeral ports leave too few below them: the engine picks host ports"
            );
        }
        Arc::new(HostPorts {
            range,
            given: Mutex::default(),
        })
    }
}

/// The low end of the kernel's ephemeral range from `ip_local_port_range` ("32768\t60999").
fn ephemeral_low(text: &str) -> Option<u16> {
    text.split_whitespace().next()?.parse().ok()
}

/// The range the agent picks from, below an ephemeral range starting at `low`.
fn range_below(low: u16) -> Option<RangeInclusive<u16>> {
    let highest = HIGHEST.min(low.checked_sub(1)?);
    (highest >= LOWEST && highest - LOWEST + 1 >= MIN_SPAN).then_some(LOWEST..=highest)
}

/// A random port of `range` that `taken` does not rule out, looking at no more than
/// [`TRIES`] candidates.
fn choose(
    range: &RangeInclusive<u16>,
    rng: &mut impl Rng,
    mut taken: impl FnMut(u16) -> bool,
) -> Option<u16> {
    (0..TRIES)
        .map(|_| rng.gen_range(range.clone()))
        .find(|&port| !taken(port))
}

/// Whether nothing is bound to `port` on the loopback address now.
fn free_now(port: u16) -> bool {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// The ports a [`HOST_PORTS_LABEL`] value names.
fn labelled(value: &str) -> impl Iterator<Item = u16> + '_ {
    value.split(',').filter_map(|p| p.trim().parse().ok())
}

impl EngineRuntime {
    /// Gives each of `body`'s published ports that asks for any host port one of the agent's
    /// choosing, and labels the container with them. Nothing changes where the engine picks.
    pub(super) fn assign_host_ports(&self, container: &str, body: &mut ContainerCreateBody) {
        let allocator = &self.inner.host_ports;
        let Some(range) = &allocator.range else {
            return;
        };
        let Some(bindings) = body
            .host_config
            .as_mut()
            .and_then(|h| h.port_bindings.as_mut())
        else {
            return;
        };
        // Held across the choice: two creates never pick one port.
        let mut given = lock(&allocator.given);
        // Made again under its name: what the container held before is its to give again.
        given.retain(|_, name| name != container);
        let mut chosen = Vec::new();
        let mut rng = rand::thread_rng();
        for binding in bindings.values_mut().flatten().flatten() {
            let any = binding
                .host_port
                .as_deref()
                .is_none_or(|p| p.is_empty() || p == "0");
            if !any {
                continue;
            }
            let Some(port) = choose(range, &mut rng, |p| given.contains_key(&p) || !free_now(p))
            else {
                tracing::warn!(
                    container,
                    "no free host port found below the ephemeral range: the engine picks one"
                );
                continue;
            };
            given.insert(port, container.to_owned());
            binding.host_port = Some(port.to_string());
            chosen.push(port.to_string());
        }
        if !chosen.is_empty() {
            body.labels
                .get_or_insert_with(HashMap::new)
                .insert(HOST_PORTS_LABEL.to_owned(), chosen.join(","));
        }
    }

    /// Learns the host ports the containers of a full listing hold (their labels).
    pub(super) fn note_host_ports(&self, listed: &[ContainerSummary]) {
        let mut given = lock(&self.inner.host_ports.given);
        for c in listed {
            let Some(name) = index::summary_name(c) else {
                continue;
            };
            for port in label(c, HOST_PORTS_LABEL)
                .map(labelled)
                .into_iter()
                .flatten()
            {
                given.insert(port, name.to_owned());
            }
        }
    }

    /// Gives back the host ports of container `name`, removed (or never made).
    pub(super) fn release_host_ports(&self, name: &str) {
        lock(&self.inner.host_ports.given).retain(|_, holder| holder != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_stays_below_the_kernels_ephemeral_ports_and_under_node_ports() {
        assert_eq!(ephemeral_low("32768\t60999\n"), Some(32768));
        assert_eq!(range_below(32768), Some(LOWEST..=HIGHEST));
        assert_eq!(range_below(25_000), Some(LOWEST..=24_999));
        // Too few ports left below, or none at all: the engine picks.
        assert_eq!(range_below(20_500), None);
        assert_eq!(range_below(1024), None);
        assert_eq!(range_below(0), None);
        assert_eq!(ephemeral_low("garbage"), None);
    }

    #[test]
    fn a_port_given_or_bound_is_never_chosen() {
        let range = 20_000..=20_009;
        let mut rng = rand::thread_rng();
        for _ in 0..200 {
            assert_eq!(choose(&range, &mut rng, |p| p != 20_007), Some(20_007));
        }
        assert_eq!(choose(&range, &mut rng, |_| true), None, "all ruled out");
    }

    #[test]
    fn the_label_names_its_ports() {
        assert_eq!(
            labelled("20001,29999").collect::<Vec<_>>(),
            [20_001, 29_999]
        );
        assert_eq!(labelled("x, 20002").collect::<Vec<_>>(), [20_002]);
    }
}
