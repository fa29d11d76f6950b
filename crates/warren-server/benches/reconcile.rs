//! Reconcile handler cost (reconcile.md scale goals, issue 45's 10,000 workspaces on one
//! agent): a full reconcile (the agent has applied everything; and every configuration
//! out), a partial one carrying one change (from the server's side and
//! from the agent's) and a no-op partial one, on SQLite and (when `WARREN_TEST_DATABASE_URL`
//! is set) PostgreSQL, next to a baseline measured in the same run (`SELECT 1` on the same
//! pool).
//!
//! Run: `cargo bench -p warren-server --bench reconcile`; `WARREN_BENCH_WORKSPACES=1000`
//! measures another count (default 10,000).

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

#[path = "../tests/common/generation.rs"]
mod generation;
mod support;

use generation::generation_of;
use serde_json::json;
use std::time::{Duration, Instant};
use warren_server::app::render::{self, RenderInput};
use warren_server::app::AppError;
use warren_server::store::workspaces::{ChangedBy, NewWorkspace};
use warren_server::{Server, ServerConfig};
use warren_types::api::WorkspaceResources;
use warren_types::reconcile::{
    ReconcileRequest, UpdateType, WorkspaceAgentInfo, CONFIG_GENERATION_ANNOTATION,
};
use warren_types::DesiredState;

/// How many workspaces the agent has: `WARREN_BENCH_WORKSPACES`, or 10,000.
fn workspaces() -> usize {
    std::env::var("WARREN_BENCH_WORKSPACES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

/// Users owning the workspaces, in turn.
const OWNERS: usize = 200;

fn name(i: usize) -> String {
    format!("ws-{i:05}")
}

/// CPU time (user + system) this process has used, from /proc (Linux).
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // The kernel's USER_HZ is 100 on every mainstream Linux.
    Some(Duration::from_millis((utime + stime) * 10))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn running(name: &str, rv: u64) -> WorkspaceAgentInfo {
    WorkspaceAgentInfo {
        name: name.to_owned(),
        namespace: format!("warren-ws-{name}"),
        latest_k8s_deployment_info: Some(json!({
            "metadata": {"name": name, "resourceVersion": rv.to_string()},
            "spec": {"replicas": 1},
            "status": {"availableReplicas": 1, "conditions": [
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"}]}
        })),
        termination_progress: None,
        error_details: None,
        pod_failure: None,
        pod_waiting: None,
    }
}

/// The agent row as the handler loads it on every call (part of the handler's cost).
async fn fresh(
    state: &warren_server::app::AppState,
    agent: &warren_server::store::agents::AgentRow,
) -> warren_server::store::agents::AgentRow {
    state.store.agent_by_id(agent.id).await.unwrap().unwrap()
}

async fn bench(label: &str, url: String, home: &std::path::Path) {
    let count = workspaces();
    let mut config = ServerConfig::new(home);
    config.database_url = Some(url);
    config.relay_secret = Some("bench-relay-secret-0123456789abcdef".into());
    let server = Server::prepare(config).await.expect("prepare");
    let state = server.state().clone();
    let created = server
        .create_agent("bench", &Default::default())
        .await
        .expect("agent");
    let agent = state
        .store
        .agent_by_id(created.agent.id)
        .await
        .unwrap()
        .unwrap();
    let devfile = render::parse(render::builtin_default_devfile(), "default devfile").unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    // Owners as a company has them: 200 users (50 workspaces each at 10,000), each in their
    // personal space (one owner of all would make each create read all of them for its
    // quota, which is not what this measures).
    let mut owners = vec![];
    for u in 0..OWNERS {
        let name = format!("user{u:03}");
        let user = state
            .store
            .insert_user(&name, "not-a-hash", false, now)
            .await
            .expect("user");
        let space = state
            .store
            .personal_space(user.id, &user.username, now)
            .await
            .expect("a personal space");
        owners.push((user.id, space.id));
    }
    let setup = Instant::now();
    for i in 0..count {
        let name = name(i);
        let new = NewWorkspace {
            name: name.clone(),
            owner_id: owners[i % OWNERS].0,
            agent_id: agent.id,
            project_id: None,
            git_ref: None,
            repository: None,
            definition_path: None,
            devfile: render::builtin_default_devfile().to_owned(),
            resources: WorkspaceResources::default(),
            variables: vec![],
            starter: None,
            space_id: owners[i % OWNERS].1,
            prebuild_id: None,
            pool_of: None,
            seed: None,
        };
        state
            .store
            .insert_workspace(
                &new,
                now,
                |_| Ok::<(), AppError>(()),
                |id| {
                    render::render_workspace(
                        &devfile,
                        RenderInput {
                            name: &name,
                            id,
                            agent: &agent,
                            project: None,
                            resources: &WorkspaceResources::default(),
                            variables: &[],
                            desired: DesiredState::Running,
                            dotfiles_url: None,
                            starter: None,
                            prebuild: false,
                            seed: None,
                        },
                    )
                },
            )
            .await
            .expect("insert");
        if (i + 1) % 1000 == 0 {
            eprintln!(
                "[{label}] {} workspaces after {:.1} s",
                i + 1,
                setup.elapsed().as_secs_f64()
            );
        }
    }
    eprintln!(
        "[{label}] set-up: {count} workspaces in {:.1} s",
        setup.elapsed().as_secs_f64()
    );

    // Baseline: one round trip on the same pool.
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        state.store.db.ping().await.unwrap();
    }
    let baseline = t.elapsed() / n;

    // Full reconcile reporting every workspace, all with objects in the answer.
    let infos: Vec<_> = (0..count).map(|i| running(&name(i), 7)).collect();
    let full = ReconcileRequest {
        update_type: UpdateType::Full,
        workspace_agent_infos: infos,
        capacity: None,
        runtime_fault: None,
        isolation_warning: None,
        connector: None,
        mounts: vec![],
        used: vec![],
    };
    let first = Instant::now();
    let resp =
        warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &full)
            .await
            .unwrap();
    let first = first.elapsed();
    assert_eq!(resp.workspace_rails_infos.len(), count);
    assert!(resp
        .workspace_rails_infos
        .iter()
        .all(|w| w.config_to_apply.is_some()));
    // The agent applies every configuration and reports each Deployment with the rendering's
    // generation: the steady state a full reconcile meets (hourly, or after a restart).
    let settled: Vec<_> = resp
        .workspace_rails_infos
        .iter()
        .map(|w| {
            let mut info = running(&w.name, 7);
            let generation = generation_of(w.config_to_apply.as_deref().unwrap_or(""));
            if let Some(d) = info.latest_k8s_deployment_info.as_mut() {
                d["metadata"]["annotations"] = json!({ CONFIG_GENERATION_ANNOTATION: generation });
            }
            info
        })
        .collect();
    let steady = ReconcileRequest {
        workspace_agent_infos: settled,
        ..full.clone()
    };
    let rounds = 10;
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        let resp =
            warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &steady)
                .await
                .unwrap();
        assert_eq!(resp.workspace_rails_infos.len(), count);
        assert!(
            resp.workspace_rails_infos
                .iter()
                .all(|w| w.config_to_apply.is_none()),
            "what the agent applied and settled goes back without objects"
        );
    }
    let full_wall = t.elapsed() / rounds;
    let full_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / rounds);

    // Every configuration out: an agent that reports none of them applied (a new agent, or
    // one whose runtime lost everything).
    let rounds = 3;
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &full)
            .await
            .unwrap();
    }
    let all_wall = t.elapsed() / rounds;
    let all_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / rounds);

    // No-op partial: nothing reported, nothing changed.
    let partial = ReconcileRequest {
        update_type: UpdateType::Partial,
        workspace_agent_infos: vec![],
        capacity: None,
        runtime_fault: None,
        isolation_warning: None,
        connector: None,
        mounts: vec![],
        used: vec![],
    };
    let resp =
        warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &partial)
            .await
            .unwrap();
    assert!(
        resp.workspace_rails_infos.is_empty(),
        "no-op partial returns nothing"
    );
    let n = 3000;
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..n {
        warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &partial)
            .await
            .unwrap();
    }
    let partial_wall = t.elapsed() / n;
    let partial_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / n);

    // One change made on the server's side: a user stops (then starts) one workspace, and
    // the next partial reconcile carries it.
    let mut stopped = false;
    let n = 200;
    let (mut wall, c) = (Duration::ZERO, cpu_time());
    let mut setting = Duration::ZERO;
    for i in 0..n {
        let ws = state
            .store
            .workspace_by_name(&name(i * 37 % count))
            .await
            .unwrap()
            .unwrap();
        let to = if stopped {
            DesiredState::Running
        } else {
            DesiredState::Stopped
        };
        stopped = !stopped;
        let s = Instant::now();
        state
            .store
            .set_desired_state(
                ws.id,
                ws.version,
                to,
                chrono::Utc::now().timestamp_millis(),
                ChangedBy::Other,
            )
            .await
            .unwrap()
            .unwrap();
        setting += s.elapsed();
        let t = Instant::now();
        let resp = warren_server::app::reconcile::reconcile(
            &state,
            &fresh(&state, &agent).await,
            &partial,
        )
        .await
        .unwrap();
        wall += t.elapsed();
        assert_eq!(resp.workspace_rails_infos.len(), 1, "one change goes back");
        assert!(resp.workspace_rails_infos[0].config_to_apply.is_some());
    }
    let changed_wall = wall / n as u32;
    // The CPU of the desired-state writes is in there too (small next to the reconcile).
    let changed_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / n as u32);

    // One change seen by the agent: a partial reconcile reporting one workspace's new
    // resourceVersion.
    let n = 200;
    let (t, c) = (Instant::now(), cpu_time());
    for i in 0..n {
        let report = ReconcileRequest {
            workspace_agent_infos: vec![running(&name(i * 53 % count), 100 + i as u64)],
            ..partial.clone()
        };
        let resp =
            warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &report)
                .await
                .unwrap();
        assert_eq!(
            resp.workspace_rails_infos.len(),
            1,
            "the reported one goes back"
        );
    }
    let reported_wall = t.elapsed() / n as u32;
    let reported_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / n as u32);

    let cpu = |d: Option<Duration>| d.map_or("n/a".to_owned(), |d| format!("{:.3} ms", ms(d)));
    let x = |d: Duration| ms(d) / ms(baseline);
    println!("== reconcile benchmark, {label}, {count} workspaces on one agent ==");
    println!(
        "  baseline SELECT 1 round trip               {:>9.3} ms/call",
        ms(baseline)
    );
    println!(
        "  full reconcile storing {count} changes     {:>9.3} ms/call  ({:.0}x baseline)",
        ms(first),
        x(first)
    );
    println!(
        "  full reconcile, all applied and settled    {:>9.3} ms/call wall ({:.0}x baseline), {} CPU (process)   goal: < 200 ms",
        ms(full_wall),
        x(full_wall),
        cpu(full_cpu)
    );
    println!(
        "  full reconcile, every configuration out    {:>9.3} ms/call wall ({:.0}x baseline), {} CPU (process)",
        ms(all_wall),
        x(all_wall),
        cpu(all_cpu)
    );
    println!(
        "  partial, one desired state changed         {:>9.3} ms/call wall ({:.1}x baseline), {} CPU (process)   goal: < 10 ms",
        ms(changed_wall),
        x(changed_wall),
        cpu(changed_cpu)
    );
    println!(
        "    (the change itself, not counted above)   {:>9.3} ms/write",
        ms(setting / n as u32)
    );
    println!(
        "  partial, one workspace reported            {:>9.3} ms/call wall ({:.1}x baseline), {} CPU (process)   goal: < 10 ms",
        ms(reported_wall),
        x(reported_wall),
        cpu(reported_cpu)
    );
    println!(
        "  no-op partial reconcile                    {:>9.3} ms/call wall ({:.1}x baseline), {} CPU (process)   goal: well under 1 ms CPU",
        ms(partial_wall),
        x(partial_wall),
        cpu(partial_cpu)
    );
    if label == "sqlite" {
        println!("  (SQLite runs inside this process, so its CPU time counts as server CPU here)");
    }
}

fn main() {
    support::on_each_database(|label, url, home| async move { bench(label, url, &home).await });
}
