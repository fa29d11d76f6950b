//! The mixed API workload: an open loop at a fixed rate (a slow server does not slow the
//! offered load down, so its latency shows instead of hiding), each call made as one of the
//! run's users on its own workspaces: list, show, logs, stop, start, create, delete, tree.

use super::stats::Recorder;
use super::{short, RunUser, ScaletestConfig, MAX_IN_FLIGHT};
use rand::Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_util::sync::CancellationToken;
use warren_client::WorkspaceQuery;
use warren_types::DesiredState;

/// The operations and their weights (of 100).
const MIX: &[(Op, u32)] = &[
    (Op::List, 25),
    (Op::Show, 30),
    (Op::Logs, 10),
    (Op::Stop, 8),
    (Op::Start, 8),
    (Op::Create, 6),
    (Op::Delete, 6),
    (Op::Tree, 7),
];

/// How long in-flight calls may finish once the workload's time is up.
const DRAIN: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    List,
    Show,
    Logs,
    Stop,
    Start,
    Create,
    Delete,
    Tree,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::List => "ws.list",
            Op::Show => "ws.show",
            Op::Logs => "ws.logs",
            Op::Stop => "ws.stop",
            Op::Start => "ws.start",
            Op::Create => "ws.create",
            Op::Delete => "ws.delete",
            Op::Tree => "tree",
        }
    }
}

/// Who acts on what: the run's users and workspaces, and which of them run.
#[derive(Debug)]
pub(crate) struct Plan {
    users: Vec<RunUser>,
    agents: Vec<String>,
    run_id: String,
    /// The workspaces made at set-up, by owner (index into `users`) and name.
    workspaces: Vec<(usize, String)>,
    /// Indexes into `workspaces` of those running and of those stopped by the workload.
    running: Mutex<Vec<usize>>,
    stopped: Mutex<Vec<usize>>,
    /// Workspaces the workload created (owner, name), which it deletes again.
    churn: Mutex<Vec<(usize, String)>>,
    created: std::sync::atomic::AtomicUsize,
}

impl Plan {
    /// The first `reserved` workspaces hold terminal sessions: the workload never stops
    /// them.
    pub(crate) fn new(
        users: Vec<RunUser>,
        workspaces: Vec<(usize, String)>,
        reserved: usize,
        agents: Vec<String>,
        run_id: &str,
    ) -> Plan {
        Plan {
            running: Mutex::new((reserved.min(workspaces.len())..workspaces.len()).collect()),
            stopped: Mutex::default(),
            churn: Mutex::default(),
            created: Default::default(),
            users,
            agents,
            run_id: run_id.to_owned(),
            workspaces,
        }
    }

    fn pick(&self) -> Op {
        let mut roll = rand::thread_rng().gen_range(0..MIX.iter().map(|(_, w)| w).sum::<u32>());
        for (op, w) in MIX {
            if roll < *w {
                return *op;
            }
            roll -= w;
        }
        Op::Show
    }
}

fn take_random<T>(v: &Mutex<Vec<T>>) -> Option<T> {
    let mut v = v.lock().unwrap_or_else(|p| p.into_inner());
    if v.is_empty() {
        return None;
    }
    let i = rand::thread_rng().gen_range(0..v.len());
    Some(v.swap_remove(i))
}

fn put<T>(v: &Mutex<Vec<T>>, item: T) {
    v.lock().unwrap_or_else(|p| p.into_inner()).push(item);
}

/// Runs one call of `op` and records it; an operation with nothing to act on (no stopped
/// workspace to start) shows a workspace instead.
async fn call(plan: Arc<Plan>, op: Op, rec: Arc<Recorder>) {
    let rng_user = rand::thread_rng().gen_range(0..plan.users.len());
    let random_ws = || {
        let i = rand::thread_rng().gen_range(0..plan.workspaces.len().max(1));
        plan.workspaces.get(i).cloned()
    };
    let t = Instant::now();
    let (op, result) = match op {
        Op::List => {
            let r = plan.users[rng_user]
                .client
                .list_workspaces(&WorkspaceQuery::default())
                .await;
            (op, r.map(drop))
        }
        Op::Tree => (op, plan.users[rng_user].client.tree(None).await.map(drop)),
        Op::Logs => match take_random(&plan.running) {
            Some(i) => {
                let (owner, name) = &plan.workspaces[i];
                let r = plan.users[*owner]
                    .client
                    .workspace_logs(name, Some(100), None)
                    .await;
                put(&plan.running, i);
                (op, r.map(drop))
            }
            None => show(&plan, random_ws()).await,
        },
        Op::Stop | Op::Start => {
            let (from, to, state) = if op == Op::Stop {
                (&plan.running, &plan.stopped, DesiredState::Stopped)
            } else {
                (&plan.stopped, &plan.running, DesiredState::Running)
            };
            match take_random(from) {
                Some(i) => {
                    let (owner, name) = &plan.workspaces[i];
                    let r = plan.users[*owner]
                        .client
                        .set_desired_state(name, state)
                        .await;
                    put(if r.is_ok() { to } else { from }, i);
                    (op, r.map(drop))
                }
                None => show(&plan, random_ws()).await,
            }
        }
        Op::Create => {
            let n = plan
                .created
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let name = format!("{}-c{n}", plan.run_id);
            let req =
                super::workspace_request(&name, plan.agents.get(n % plan.agents.len().max(1)));
            let r = plan.users[rng_user].client.create_workspace(&req).await;
            if r.is_ok() {
                put(&plan.churn, (rng_user, name));
            }
            (op, r.map(drop))
        }
        Op::Delete => match take_random(&plan.churn) {
            Some((owner, name)) => {
                let r = plan.users[owner].client.delete_workspace(&name).await;
                if r.is_err() {
                    put(&plan.churn, (owner, name));
                }
                (op, r.map(drop))
            }
            None => show(&plan, random_ws()).await,
        },
        Op::Show => show(&plan, random_ws()).await,
    };
    rec.record(op.name(), t.elapsed(), result.err().map(|e| short(&e)));
}

async fn show(plan: &Plan, ws: Option<(usize, String)>) -> (Op, Result<(), warren_client::Error>) {
    match ws {
        Some((owner, name)) => (
            Op::Show,
            plan.users[owner]
                .client
                .get_workspace(&name)
                .await
                .map(drop),
        ),
        // No workspaces at all: the list is what there is to read.
        None => (
            Op::List,
            plan.users[0]
                .client
                .list_workspaces(&WorkspaceQuery::default())
                .await
                .map(drop),
        ),
    }
}

/// Offers `config.api_rate` calls a second for `config.duration` (or until `shutdown`),
/// reporting the figures so far every `config.progress_every`.
pub(crate) async fn drive(
    config: &ScaletestConfig,
    plan: Arc<Plan>,
    rec: Arc<Recorder>,
    progress: &super::Progress,
    shutdown: &CancellationToken,
) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / config.api_rate));
    // Calls missed while this task was held up are made at once: the offered rate holds.
    tick.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let started = Instant::now();
    let end = started + config.duration;
    let mut next_report = started + config.progress_every;
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            // Interval::tick is cancel-safe: a lost tick is simply taken by the next call.
            _ = tick.tick() => {}
            // Only ends the loop.
            () = shutdown.cancelled() => break,
        }
        let now = Instant::now();
        if now >= end {
            break;
        }
        while tasks.try_join_next().is_some() {}
        if tasks.len() >= MAX_IN_FLIGHT {
            rec.record(
                "overload",
                Duration::ZERO,
                Some("the scale test's own limit of calls in flight".into()),
            );
        } else {
            let op = plan.pick();
            tasks.spawn(call(plan.clone(), op, rec.clone()));
        }
        if now >= next_report {
            next_report += config.progress_every;
            progress(progress_line(&rec, started.elapsed()));
        }
    }
    // What is in flight finishes (its figures count), within bounds; the rest is aborted
    // when the set drops.
    let drain = async { while tasks.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(DRAIN, drain).await;
}

fn progress_line(rec: &Recorder, elapsed: Duration) -> String {
    let stats = rec.stats(elapsed);
    let calls: u64 = stats.iter().map(|s| s.count).sum();
    let p95: Vec<String> = stats
        .iter()
        .map(|s| format!("{} {:.0}", s.op, s.p95_ms))
        .collect();
    format!(
        "{:>5.0} s: {calls} calls ({:.1}/s), {} errors; p95 ms: {}",
        elapsed.as_secs_f64(),
        calls as f64 / elapsed.as_secs_f64().max(0.001),
        rec.errors(),
        p95.join(", ")
    )
}
