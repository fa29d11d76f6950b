//! Usage (issue 44, item 3): once a minute the housekeeping replica adds the interval since
//! the last sample to the current hour of every running workspace — running time, that time
//! weighted by its machine class, and the CPU, memory and storage it asked for (its size, or
//! its class's, and the agent's volume size) times that time — under the names it runs with
//! now. Reports sum the hours by workspace, user, space or class; admins read everything,
//! others what their own workspaces ran and what ran in the spaces they own.
//!
//! Beside what each asked for, what it used: its agent measures CPU time and working-set
//! memory and reports them with its reconciles ([`record_used`]), added to the same hours.
//!
//! Counting is the server's view of what ran: an interval the server was down for longer than
//! [`MAX_GAP_MS`] is not counted (agents keep their workspaces running meanwhile).

use super::{rights, AppError, AppState, Principal};
use crate::store::agents::AgentRow;
use crate::store::usage::{Accrual, Running, UsageFilter};
use std::collections::HashMap;
use warren_types::api::{SpaceRole, UsageQuery, UsageReport, WorkspaceResources};
use warren_types::quantity::{parse_cpu_millis, parse_memory_bytes};
use warren_types::reconcile::WorkspaceUsed;

/// How often running workspaces are sampled.
pub const SAMPLE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);
/// The longest interval one sample counts: after a longer silence (no server held
/// housekeeping) only this much is counted, as nothing says what ran meanwhile.
pub const MAX_GAP_MS: i64 = 5 * 60_000;
const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 86_400_000;
/// A report's range when its caller gives none.
const DEFAULT_RANGE_MS: i64 = 30 * DAY_MS;
/// The longest range one report sums.
const MAX_RANGE_MS: i64 = 800 * DAY_MS;
const MIB: i128 = 1024 * 1024;

/// What one running workspace asks for, as the sample counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Size {
    class: String,
    weight: i64,
    cpu_millis: i64,
    memory_bytes: i64,
    storage_bytes: i64,
}

/// The size of `resources` on `agent`: the numbers given, else the class's; storage is the
/// class's, else the agent's volume size. What does not parse counts as nothing.
fn size_of(resources: &str, agent: Option<&AgentRow>) -> Size {
    let r: WorkspaceResources = serde_json::from_str(resources).unwrap_or_default();
    let class = match (&r.class, agent) {
        (Some(name), Some(a)) => a.config.machine_class(name),
        _ => None,
    };
    let cpu = r.cpu.as_deref().or(class.and_then(|c| c.cpu.as_deref()));
    let memory = r
        .memory
        .as_deref()
        .or(class.and_then(|c| c.memory.as_deref()));
    let storage = class
        .and_then(|c| c.storage.as_deref())
        .or(agent.map(|a| a.config.data_volume_size.as_str()));
    let num = |v: Option<u64>| v.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
    Size {
        class: r.class.clone().unwrap_or_else(|| "-".to_owned()),
        weight: class.map_or(1, |c| i64::from(c.weight())),
        cpu_millis: num(cpu.and_then(|c| parse_cpu_millis(c).ok())),
        memory_bytes: num(memory.and_then(|m| parse_memory_bytes(m).ok())),
        storage_bytes: num(storage.and_then(|s| parse_memory_bytes(s).ok())),
    }
}

/// `[from, to)` cut at hour boundaries: (hour start, milliseconds in it).
fn by_hour(from: i64, to: i64) -> Vec<(i64, i64)> {
    let mut out = vec![];
    let mut t = from;
    while t < to {
        let hour = t.div_euclid(HOUR_MS) * HOUR_MS;
        let end = (hour + HOUR_MS).min(to);
        out.push((hour, end - t));
        t = end;
    }
    out
}

/// `amount` per second for `ms` milliseconds, divided by `unit`.
fn per_second(amount: i64, ms: i64, unit: i128) -> i64 {
    let v = i128::from(amount) * i128::from(ms) / 1000 / unit;
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn accruals(w: &Running, size: &Size, agent: &str, from: i64, to: i64) -> Vec<Accrual> {
    by_hour(from, to)
        .into_iter()
        .map(|(hour, ms)| Accrual {
            running_ms: ms,
            weighted_ms: ms.saturating_mul(size.weight),
            cpu_mcore_s: per_second(size.cpu_millis, ms, 1),
            memory_mib_s: per_second(size.memory_bytes, ms, MIB),
            storage_mib_s: per_second(size.storage_bytes, ms, MIB),
            ..nothing(w, size, agent, hour)
        })
        .collect()
}

/// `w`'s row of usage for `hour`, with nothing counted yet.
fn nothing(w: &Running, size: &Size, agent: &str, hour: i64) -> Accrual {
    Accrual {
        workspace_id: w.id,
        hour,
        workspace: w.name.clone(),
        owner_id: w.owner_id,
        owner: w.owner.clone(),
        space: w.space.clone(),
        agent: agent.to_owned(),
        class: size.class.clone(),
        running_ms: 0,
        weighted_ms: 0,
        cpu_mcore_s: 0,
        memory_mib_s: 0,
        storage_mib_s: 0,
        cpu_used_mcore_s: 0,
        memory_used_mib_s: 0,
    }
}

/// The most one report may say a workspace used: 1,024 cores and 64 TiB for ten minutes.
/// An agent claiming more is believed up to that (its own workspaces' hours are all it can
/// inflate).
const MAX_USED_CPU_MS: u64 = 1024 * 600_000;
const MAX_USED_MEMORY_MIB_S: u64 = 64 * 1024 * 1024 * 600;

/// Adds what `agent` measured its workspaces using to the current hour of each (their names
/// now); workspaces it does not run are ignored. Best effort: the agent does not wait for it.
pub async fn record_used(state: &AppState, agent: &AgentRow, used: &[WorkspaceUsed]) {
    let names: Vec<String> = used.iter().map(|u| u.name.clone()).collect();
    let subjects = match state.store.agent_usage_subjects(agent.id, &names).await {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(agent = %agent.name, error = %warren_types::error_chain(&e), "reading the workspaces an agent measured failed");
            return;
        }
    };
    let by_name: HashMap<&str, &Running> = subjects.iter().map(|w| (w.name.as_str(), w)).collect();
    let hour = state.clock.now_ms().div_euclid(HOUR_MS) * HOUR_MS;
    let mut all = vec![];
    for u in used {
        let Some(w) = by_name.get(u.name.as_str()) else {
            tracing::debug!(agent = %agent.name, workspace = %u.name, "usage of a workspace the agent does not run ignored");
            continue;
        };
        if u.cpu_ms > MAX_USED_CPU_MS || u.memory_mib_s > MAX_USED_MEMORY_MIB_S {
            tracing::warn!(agent = %agent.name, workspace = %u.name, cpu_ms = u.cpu_ms, memory_mib_s = u.memory_mib_s, "an agent reported more usage than one report can hold; counted up to the most");
        }
        let size = size_of(&w.resources, Some(agent));
        let num = |v: u64, max: u64| i64::try_from(v.min(max)).unwrap_or(i64::MAX);
        all.push(Accrual {
            cpu_used_mcore_s: num(u.cpu_ms, MAX_USED_CPU_MS),
            memory_used_mib_s: num(u.memory_mib_s, MAX_USED_MEMORY_MIB_S),
            ..nothing(w, &size, &agent.name, hour)
        });
    }
    if let Err(e) = state.store.add_used(&all).await {
        tracing::warn!(agent = %agent.name, error = %warren_types::error_chain(&e), "adding what an agent measured to usage failed");
        return;
    }
    // In milliseconds and MiB-seconds, as measured: a minute's CPU time is often under a second.
    for a in &all {
        let labels = [("space", a.space.clone()), ("class", a.class.clone())];
        metrics::counter!("warren_usage_cpu_used_milliseconds_total", &labels)
            .increment(u64::try_from(a.cpu_used_mcore_s).unwrap_or(0));
        metrics::counter!("warren_usage_memory_used_mib_seconds_total", &labels)
            .increment(u64::try_from(a.memory_used_mib_s).unwrap_or(0));
    }
}

/// One sample: counts the time since the last one for every running workspace. The first
/// sample ever only starts the count. Returns how many workspaces it counted.
pub async fn sample(state: &AppState) -> Result<usize, AppError> {
    let now = state.clock.now_ms();
    let last = state.store.usage_cursor().await?;
    let from = match last {
        None => {
            state.store.add_usage(None, now, &[]).await?;
            return Ok(0);
        }
        // A clock that went back counts nothing until it passes the cursor again.
        Some(l) if l >= now => return Ok(0),
        Some(l) => l.max(now - MAX_GAP_MS),
    };
    let agents: HashMap<_, _> = state
        .store
        .list_agents()
        .await?
        .into_iter()
        .map(|a| (a.id, a))
        .collect();
    let running = state.store.running_for_usage().await?;
    let mut all = vec![];
    for w in &running {
        let agent = agents.get(&w.agent_id);
        let size = size_of(&w.resources, agent);
        let name = agent.map_or("", |a| a.name.as_str());
        all.extend(accruals(w, &size, name, from, now));
    }
    if !state.store.add_usage(last, now, &all).await? {
        // Another replica counted this interval (it held housekeeping a moment ago).
        return Ok(0);
    }
    for a in &all {
        let labels = [("space", a.space.clone()), ("class", a.class.clone())];
        metrics::counter!("warren_usage_running_seconds_total", &labels)
            .increment(u64::try_from(a.running_ms / 1000).unwrap_or(0));
        metrics::counter!("warren_usage_weighted_seconds_total", &labels)
            .increment(u64::try_from(a.weighted_ms / 1000).unwrap_or(0));
    }
    Ok(running.len())
}

/// The sampler and retention, on the housekeeping replica.
pub async fn usage_task(
    state: AppState,
    retention_days: u32,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use std::sync::atomic::{AtomicI64, Ordering};
    let pruned_at = AtomicI64::new(i64::MIN);
    super::leases::housekeeping_rounds(&state, SAMPLE_INTERVAL, &shutdown, || {
        let state = &state;
        let pruned = &pruned_at;
        async move {
            if let Err(e) = sample(state).await {
                tracing::warn!(error = %warren_types::error_chain(&e), "sampling usage failed; trying again in a minute");
            }
            if let Err(e) = super::budgets::mark_spent(state).await {
                tracing::warn!(error = %warren_types::error_chain(&e), "checking budgets failed; trying again in a minute");
            }
            let now = state.clock.now_ms();
            if retention_days > 0 && now.saturating_sub(pruned.load(Ordering::Relaxed)) >= HOUR_MS {
                pruned.store(now, Ordering::Relaxed);
                let before = now - i64::from(retention_days) * DAY_MS;
                match state.store.prune_usage(before).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(hours = n, retention_days, "removed old usage"),
                    Err(e) => tracing::warn!(error = %warren_types::error_chain(&e), "removing old usage failed"),
                }
            }
        }
    })
    .await;
}

/// The report `q` asks for: hours from `since` (rounded down to its hour) to `until`
/// (rounded up), 30 days to now by default.
pub async fn report(
    state: &AppState,
    who: &Principal,
    q: &UsageQuery,
) -> Result<UsageReport, AppError> {
    let now = state.clock.now_ms();
    let until = q.until.map_or(now, |t| t.timestamp_millis());
    let since = q
        .since
        .map_or(until - DEFAULT_RANGE_MS, |t| t.timestamp_millis());
    if since >= until {
        return Err(AppError::invalid_field("since", "must be before until"));
    }
    if until - since > MAX_RANGE_MS {
        return Err(AppError::invalid_field(
            "since",
            "a report covers at most 800 days",
        ));
    }
    let visible_to = if who.user.is_admin {
        None
    } else {
        let owned = rights::memberships(state, who.user.id)
            .await?
            .into_iter()
            .filter(|(_, r)| *r == SpaceRole::Owner)
            .map(|(p, _)| p)
            .collect();
        Some((who.user.id, owned))
    };
    let by = q.by.unwrap_or_default();
    let f = UsageFilter {
        by,
        since: since.div_euclid(HOUR_MS) * HOUR_MS,
        until: (until + HOUR_MS - 1).div_euclid(HOUR_MS) * HOUR_MS,
        space: q.space.clone(),
        visible_to,
    };
    let rows = state.store.usage_report(&f).await?;
    Ok(UsageReport {
        by,
        since: crate::db::from_millis(f.since),
        until: crate::db::from_millis(f.until),
        rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_is_cut_at_hour_boundaries() {
        let h = HOUR_MS;
        assert_eq!(by_hour(h + 10, h + 70), vec![(h, 60)]);
        assert_eq!(
            by_hour(2 * h - 30_000, 2 * h + 30_000),
            vec![(h, 30_000), (2 * h, 30_000)]
        );
        assert_eq!(by_hour(5, 5), vec![]);
    }

    #[test]
    fn sizes_come_from_the_numbers_else_the_class_else_nothing() {
        assert_eq!(
            size_of(r#"{"cpu":"1500m","memory":"2Gi"}"#, None),
            Size {
                class: "-".into(),
                weight: 1,
                cpu_millis: 1500,
                memory_bytes: 2 << 30,
                storage_bytes: 0
            }
        );
        assert_eq!(size_of("not json", None).cpu_millis, 0);
        // Half an hour of 1.5 CPUs and 2 GiB.
        assert_eq!(per_second(1500, 1_800_000, 1), 2_700_000);
        assert_eq!(per_second(2 << 30, 1_800_000, MIB), 2048 * 1800);
        assert_eq!(per_second(i64::MAX, i64::MAX, 1), i64::MAX);
    }
}
