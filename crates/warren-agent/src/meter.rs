//! What workspaces use, measured for the server's usage (issue 44, item 3): about once a
//! minute the runtime's counters are read, and each workspace's CPU time since the last
//! reading (the growth of its containers' counters; a restarted container's counter starts
//! again from zero) and its working-set memory times the interval are added up, to go with
//! the next reconcile. What a failed call carried goes with the next one (so a call whose
//! answer was lost after the server stored it counts its minute twice: rare, and bounded).

use crate::runtime::{WorkspaceKey, WorkspaceRuntime, WorkspaceUsage};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;
use warren_types::reconcile::WorkspaceUsed;

/// How often the counters are read.
pub const EVERY: Duration = Duration::from_secs(60);
/// Longest a reading may take: a slow engine must not hold the reconcile up.
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const MIB: f64 = 1024.0 * 1024.0;

/// What is measured and not yet reported: CPU milliseconds and MiB-seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Pending {
    cpu_ms: f64,
    memory_mib_s: f64,
}

/// The meter of one agent's workspaces.
#[derive(Debug, Default)]
pub struct Meter {
    last_read: Option<Instant>,
    /// Each container's CPU seconds at the last reading.
    counters: HashMap<(WorkspaceKey, String), f64>,
    pending: BTreeMap<WorkspaceKey, Pending>,
}

impl Meter {
    /// Reads the runtime when a reading is due, and returns everything not yet reported.
    pub async fn take(&mut self, runtime: &dyn WorkspaceRuntime) -> Vec<WorkspaceUsed> {
        let now = Instant::now();
        if self
            .last_read
            .is_none_or(|t| now.duration_since(t) >= EVERY)
        {
            match tokio::time::timeout(READ_TIMEOUT, runtime.usage()).await {
                Ok(Ok(usage)) => self.add(&usage, now),
                Ok(Err(e)) => {
                    tracing::debug!(error = %warren_types::error_chain(&e), "reading the workspaces' usage failed")
                }
                Err(_) => tracing::debug!("reading the workspaces' usage timed out"),
            }
        }
        self.pending
            .iter()
            .map(|(k, p)| WorkspaceUsed {
                name: k.name.clone(),
                namespace: k.namespace.clone(),
                cpu_ms: p.cpu_ms as u64,
                memory_mib_s: p.memory_mib_s as u64,
            })
            .filter(|u| u.cpu_ms > 0 || u.memory_mib_s > 0)
            .collect()
    }

    /// The server has what [`Meter::take`] returned.
    pub fn reported(&mut self) {
        self.pending.clear();
    }

    /// Adds a reading taken at `now`. The first one only sets the counters: nothing says
    /// since when they grew.
    fn add(&mut self, usage: &[WorkspaceUsage], now: Instant) {
        let interval = self.last_read.map(|t| now.duration_since(t).as_secs_f64());
        self.last_read = Some(now);
        let mut counters = HashMap::with_capacity(usage.len());
        for u in usage {
            let key = (u.workspace.clone(), u.container.clone());
            let before = self.counters.get(&key).copied();
            counters.insert(key, u.cpu_seconds);
            let Some(interval) = interval else { continue };
            // A container not seen before started since the last reading; one whose counter
            // went back was restarted: either way all of its counter is new.
            let cpu = match before {
                Some(b) if u.cpu_seconds >= b => u.cpu_seconds - b,
                _ => u.cpu_seconds,
            };
            let p = self.pending.entry(u.workspace.clone()).or_default();
            p.cpu_ms += cpu.max(0.0) * 1000.0;
            p.memory_mib_s += u.memory_bytes as f64 / MIB * interval;
        }
        self.counters = counters;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> WorkspaceKey {
        WorkspaceKey {
            name: name.into(),
            namespace: format!("ns-{name}"),
        }
    }

    fn usage(name: &str, container: &str, cpu: f64, mib: u64) -> WorkspaceUsage {
        WorkspaceUsage {
            workspace: key(name),
            container: container.into(),
            cpu_seconds: cpu,
            memory_bytes: mib * 1024 * 1024,
        }
    }

    fn pending(m: &Meter, name: &str) -> (u64, u64) {
        let p = m.pending.get(&key(name)).copied().unwrap_or_default();
        (p.cpu_ms as u64, p.memory_mib_s as u64)
    }

    #[test]
    fn counters_grow_into_cpu_time_and_memory_into_mib_seconds() {
        let mut m = Meter::default();
        let t0 = Instant::now();
        m.add(&[usage("a", "tools", 100.0, 512)], t0);
        assert_eq!(
            pending(&m, "a"),
            (0, 0),
            "the first reading only sets the counters"
        );
        // A minute: 1.5 s of CPU over two containers, 512 + 256 MiB held.
        m.add(
            &[usage("a", "tools", 101.0, 512), usage("a", "db", 0.5, 256)],
            t0 + Duration::from_secs(60),
        );
        assert_eq!(pending(&m, "a"), (1500, 768 * 60));
        // Restarted (the counter went back), and a workspace that is gone stops counting.
        m.add(
            &[usage("a", "tools", 2.0, 100), usage("b", "tools", 3.0, 10)],
            t0 + Duration::from_secs(120),
        );
        assert_eq!(pending(&m, "a"), (3500, 768 * 60 + 100 * 60));
        assert_eq!(pending(&m, "b"), (3000, 600));
        m.reported();
        assert_eq!(pending(&m, "a"), (0, 0));
        m.add(&[], t0 + Duration::from_secs(180));
        assert!(m.counters.is_empty());
    }
}
