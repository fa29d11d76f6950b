//! Reconcile handler cost (reconcile.md scale goals): a full reconcile of 1,000 workspaces
//! and a no-op partial reconcile, on SQLite and (when `WARREN_TEST_DATABASE_URL` is set)
//! PostgreSQL, next to a baseline measured in the same run (`SELECT 1` on the same pool).
//!
//! Run: `cargo bench -p warren-server --bench reconcile`.

// A benchmark measures wall time with the standard clock; clippy.toml's tokio-clock rule
// is for product code.
#![allow(clippy::disallowed_methods)]

mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use warren_server::app::render::{self, RenderInput};
use warren_server::app::AppError;
use warren_server::store::workspaces::NewWorkspace;
use warren_server::{Server, ServerConfig};
use warren_types::api::WorkspaceResources;
use warren_types::reconcile::{ReconcileRequest, UpdateType, WorkspaceAgentInfo};
use warren_types::DesiredState;

const WORKSPACES: usize = 1000;

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
    let admin = state.store.user_by_name("admin").await.unwrap().unwrap();
    let devfile = render::parse(render::builtin_default_devfile(), "default devfile").unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let space = state
        .store
        .personal_space(admin.id, &admin.username, now)
        .await
        .expect("the admin's personal space");
    let setup = Instant::now();
    for i in 0..WORKSPACES {
        let name = format!("ws-{i:04}");
        let new = NewWorkspace {
            name: name.clone(),
            owner_id: admin.id,
            agent_id: agent.id,
            project_id: None,
            git_ref: None,
            repository: None,
            definition_path: None,
            devfile: render::builtin_default_devfile().to_owned(),
            resources: WorkspaceResources::default(),
            variables: vec![],
            starter: None,
            space_id: space.id,
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
    }
    eprintln!(
        "[{label}] set-up: {WORKSPACES} workspaces in {:.1} s",
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
    let infos: Vec<_> = (0..WORKSPACES)
        .map(|i| running(&format!("ws-{i:04}"), 7))
        .collect();
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
    assert_eq!(resp.workspace_rails_infos.len(), WORKSPACES);
    assert!(resp
        .workspace_rails_infos
        .iter()
        .all(|w| w.config_to_apply.is_some()));
    let rounds = 10;
    let (t, c) = (Instant::now(), cpu_time());
    for _ in 0..rounds {
        warren_server::app::reconcile::reconcile(&state, &fresh(&state, &agent).await, &full)
            .await
            .unwrap();
    }
    let full_wall = t.elapsed() / rounds;
    let full_cpu = cpu_time().zip(c).map(|(a, b)| (a - b) / rounds);

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

    let cpu = |d: Option<Duration>| d.map_or("n/a".to_owned(), |d| format!("{:.3} ms", ms(d)));
    println!("== reconcile benchmark, {label}, {WORKSPACES} workspaces on one agent ==");
    println!(
        "  baseline SELECT 1 round trip         {:>9.3} ms/call",
        ms(baseline)
    );
    println!(
        "  full reconcile storing 1,000 changes  {:>9.3} ms/call",
        ms(first)
    );
    println!(
        "  full reconcile                        {:>9.3} ms/call wall, {} CPU (process)   target: well under 1000 ms",
        ms(full_wall),
        cpu(full_cpu)
    );
    println!(
        "  no-op partial reconcile               {:>9.3} ms/call wall, {} CPU (process)   target: well under 1 ms CPU",
        ms(partial_wall),
        cpu(partial_cpu)
    );
    if label == "sqlite" {
        println!("  (SQLite runs inside this process, so its CPU time counts as server CPU here)");
    }
}

fn main() {
    support::on_each_database(|label, url, home| async move { bench(label, url, &home).await });
}
