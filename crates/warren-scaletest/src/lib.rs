//! `warren scaletest`: loads a running installation the way a company would — N users, M
//! workspaces on simulated (or real) agents, a mixed API workload at a given rate — prints
//! throughput, errors and latency percentiles per operation as it goes and at the end, and
//! removes everything it made, also after Ctrl-C.
//!
//! Everything it makes is named `st<run>-…` (agents `-a<n>`, users `-u<n>`, workspaces
//! `-w<n>` and `-c<n>`), so leftovers of an interrupted clean-up are easy to find. It talks
//! to the server only through the public API, with an admin's token; simulated agents are
//! started by the caller ([`AgentLauncher`]) and dial the relay as real ones do.

mod sessions;
pub mod stats;
mod workload;

use futures::StreamExt;
use serde::Serialize;
use stats::{OpStats, Recorder};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use warren_client::{Client, WorkspaceQuery};
use warren_types::api::{
    CreateAgentRequest, CreateUserRequest, CreateWorkspaceRequest, PasswordLoginRequest,
};
use warren_types::config::AgentConfig;

/// What one scale test does.
#[derive(Debug, Clone)]
pub struct ScaletestConfig {
    /// Users to create (each signs in with a password of its own).
    pub users: usize,
    /// Workspaces to create, spread over the users and agents in turn.
    pub workspaces: usize,
    /// Simulated agents to start; with none, workspaces go to `agent`.
    pub agents: usize,
    /// An existing agent for the workspaces when no simulated ones are started.
    pub agent: Option<String>,
    /// Requests per second of the mixed workload.
    pub api_rate: f64,
    /// How long the mixed workload runs.
    pub duration: Duration,
    /// Calls in flight at once while setting up and cleaning up.
    pub concurrency: usize,
    /// How long the workspaces may take to be running, and the clean-up to finish.
    pub ready_timeout: Duration,
    /// How often progress is reported while the workload runs.
    pub progress_every: Duration,
    /// Web terminals held open through the proxy while the workload runs.
    pub terminals: usize,
    /// SSH sessions held open through the proxy while the workload runs.
    pub ssh_sessions: usize,
    /// Bytes a second each terminal and SSH session writes (and gets back).
    pub session_rate: u64,
}

impl Default for ScaletestConfig {
    fn default() -> Self {
        ScaletestConfig {
            users: 10,
            workspaces: 20,
            agents: 1,
            agent: None,
            api_rate: 20.0,
            duration: Duration::from_secs(30),
            concurrency: 16,
            ready_timeout: Duration::from_secs(300),
            progress_every: Duration::from_secs(10),
            terminals: 0,
            ssh_sessions: 0,
            session_rate: 4096,
        }
    }
}

/// Most users, workspaces and agents one run makes (the names' numbers have room for them).
const MAX_OBJECTS: usize = 1_000_000;
/// Most in-flight calls of the workload: past it, a tick is counted as a client-side error
/// rather than piling up tasks without bound.
const MAX_IN_FLIGHT: usize = 4096;

impl ScaletestConfig {
    /// Checks the settings before anything is made.
    pub fn validate(&self) -> Result<(), ScaletestError> {
        let bad = |m: &str| Err(ScaletestError::Invalid(m.to_owned()));
        if self.users == 0 && self.workspaces > 0 {
            return bad("workspaces need users: --users must be at least 1");
        }
        if self.users > MAX_OBJECTS || self.workspaces > MAX_OBJECTS || self.agents > 10_000 {
            return bad("at most 1,000,000 users and workspaces and 10,000 agents per run");
        }
        if self.agents == 0 && self.agent.is_none() && self.workspaces > 0 {
            return bad("with --agents 0, name the agent for the workspaces with --agent");
        }
        if !(self.api_rate.is_finite() && self.api_rate >= 0.0 && self.api_rate <= 100_000.0) {
            return bad("--api-rate must be between 0 and 100000 requests per second");
        }
        if self.api_rate > 0.0 && self.users == 0 {
            return bad("the API workload acts as the users: --users must be at least 1");
        }
        if self.concurrency == 0 || self.concurrency > 1024 {
            return bad("--concurrency must be between 1 and 1024");
        }
        if self.ready_timeout.is_zero() || self.progress_every.is_zero() {
            return bad("timeouts and the progress interval must be more than zero");
        }
        let sessions = self.terminals.saturating_add(self.ssh_sessions);
        if sessions > 100_000 {
            return bad("at most 100,000 terminal and SSH sessions per run");
        }
        if sessions > 0 && self.workspaces == 0 {
            return bad(
                "terminal and SSH sessions need workspaces: --workspaces must be at least 1",
            );
        }
        // A real workspace's shell would run what the sessions type; simulated agents only
        // write it back, which is also what the echo is timed and checked against.
        if sessions > 0 && self.agents == 0 {
            return bad("terminal and SSH sessions run against simulated agents (--agents at least 1): a real workspace's shell would run what they type");
        }
        if sessions > 0 && !(10..=10_000_000).contains(&self.session_rate) {
            return bad("--session-rate must be between 10 and 10000000 bytes per second");
        }
        Ok(())
    }
}

/// Starts a simulated agent that dials the relay with an agent token and runs until the
/// token is cancelled; the handle ends when it has stopped.
pub type AgentLauncher = Arc<dyn Fn(String, CancellationToken) -> JoinHandle<()> + Send + Sync>;

/// Where progress lines go (the binary writes them to standard error).
pub type Progress = Arc<dyn Fn(String) + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ScaletestError {
    #[error("invalid scale test settings: {0}")]
    Invalid(String),
    #[error("the token is not an admin's: a scale test creates users and agents")]
    NotAdmin,
    #[error("simulated agents need a launcher (the `warren scaletest` command starts them)")]
    NoLauncher,
    #[error("{what}")]
    Api {
        what: String,
        #[source]
        source: warren_client::Error,
    },
    #[error("{left} of {total} workspaces were not running after {after:?}")]
    NotReady {
        left: usize,
        total: usize,
        after: Duration,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(warren_client::Error) -> ScaletestError {
    let what = what.into();
    move |source| ScaletestError::Api { what, source }
}

/// What a run measured and left behind.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The run's name prefix.
    pub run: String,
    /// Ctrl-C (or the caller) stopped it before the end.
    pub interrupted: bool,
    /// An error that ended the run early, if one did.
    pub error: Option<String>,
    /// Creating agents, users and workspaces, and signing in.
    pub setup: Vec<OpStats>,
    /// From the first workspace's creation until all of them were running.
    pub ready_seconds: Option<f64>,
    /// The mixed workload, per operation.
    pub load: Vec<OpStats>,
    pub load_seconds: f64,
    /// Bytes the terminal and SSH sessions wrote and got back intact, over all of them.
    pub session_bytes: u64,
    pub cleanup: Cleanup,
}

/// What the clean-up removed, and what it could not.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cleanup {
    pub users_deleted: usize,
    pub agents_deleted: usize,
    pub seconds: f64,
    /// What is left (by name), with why; empty when everything went.
    pub leftovers: Vec<String>,
}

/// What the run has made so far: the clean-up's list. Names are added before the call that
/// makes them, so an interrupted call's object is cleaned up too (a 404 then is fine).
#[derive(Debug, Default)]
struct Made {
    agents: Vec<String>,
    users: Vec<String>,
}

/// A user of the run, signed in.
#[derive(Debug, Clone)]
pub(crate) struct RunUser {
    pub(crate) client: Client,
    /// The client's token (it has the `workspace` scope): the SSH sessions' password.
    pub(crate) token: String,
}

/// Runs one scale test with `admin` (an admin's client) and removes what it made. `shutdown`
/// ends the set-up or the workload early; the clean-up still runs.
pub async fn run(
    config: ScaletestConfig,
    admin: Client,
    launcher: Option<AgentLauncher>,
    progress: Progress,
    shutdown: CancellationToken,
) -> Result<Report, ScaletestError> {
    config.validate()?;
    if config.agents > 0 && launcher.is_none() {
        return Err(ScaletestError::NoLauncher);
    }
    let me = admin
        .me()
        .await
        .map_err(api("reading whose the token is"))?;
    if !me.is_admin {
        return Err(ScaletestError::NotAdmin);
    }
    let run_id = format!("st{:06x}", rand::random::<u32>() & 0x00ff_ffff);
    progress(format!(
        "scale test {run_id}: everything it makes is named {run_id}-…"
    ));
    let made = Arc::new(Mutex::new(Made::default()));
    // The agents outlive `shutdown`: they carry out the clean-up's terminations.
    let agents_stop = CancellationToken::new();
    let mut agent_tasks = vec![];
    let mut report = Report {
        run: run_id.clone(),
        interrupted: false,
        error: None,
        setup: vec![],
        ready_seconds: None,
        load: vec![],
        load_seconds: 0.0,
        session_bytes: 0,
        cleanup: Cleanup::default(),
    };
    let phases = phases(
        &config,
        &admin,
        launcher.as_ref(),
        &progress,
        &run_id,
        &made,
        &agents_stop,
        &mut agent_tasks,
        &mut report,
        &shutdown,
    );
    let outcome = tokio::select! {
        // Dropping the phases' future drops its in-flight calls and workload tasks (a
        // JoinSet); what they made is already in `made`.
        r = phases => Some(r),
        () = shutdown.cancelled() => None,
    };
    match outcome {
        Some(Err(e)) => report.error = Some(warren_types::error_chain(&e)),
        None => report.interrupted = true,
        Some(Ok(())) => {}
    }
    if shutdown.is_cancelled() {
        report.interrupted = true;
        progress("interrupted: cleaning up (Ctrl-C again to leave it unfinished)".to_owned());
    }
    let made = std::mem::take(&mut *made.lock().unwrap_or_else(|p| p.into_inner()));
    report.cleanup = cleanup(&config, &admin, &made, &progress).await;
    agents_stop.cancel();
    for task in agent_tasks {
        let _ = task.await;
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)] // One caller; its locals, borrowed for the select.
async fn phases(
    config: &ScaletestConfig,
    admin: &Client,
    launcher: Option<&AgentLauncher>,
    progress: &Progress,
    run_id: &str,
    made: &Arc<Mutex<Made>>,
    agents_stop: &CancellationToken,
    agent_tasks: &mut Vec<JoinHandle<()>>,
    report: &mut Report,
    shutdown: &CancellationToken,
) -> Result<(), ScaletestError> {
    let setup = Recorder::default();
    let started = Instant::now();
    let mut agents = vec![];
    let agent_config = agent_config(config, admin).await?;
    for i in 0..config.agents {
        let name = format!("{run_id}-a{i}");
        lock(made).agents.push(name.clone());
        let t = Instant::now();
        let created = admin
            .create_agent(&CreateAgentRequest {
                name: name.clone(),
                config: agent_config.clone(),
            })
            .await;
        setup.record(
            "agent.create",
            t.elapsed(),
            created.as_ref().err().map(short),
        );
        let created = created.map_err(api(format!("creating agent {name}")))?;
        if let Some(launch) = launcher {
            agent_tasks.push(launch(created.token, agents_stop.child_token()));
        }
        agents.push(name);
    }
    if agents.is_empty() {
        agents.extend(config.agent.clone());
    }
    let users = create_users(config, admin, run_id, made, &setup).await?;
    progress(format!(
        "{} agent(s) and {} user(s) ready after {:.1} s",
        agents.len(),
        users.len(),
        started.elapsed().as_secs_f64()
    ));
    let ready_from = Instant::now();
    let names = create_workspaces(config, &users, &agents, run_id, &setup).await?;
    report.setup = setup.stats(started.elapsed());
    progress(format!(
        "{} workspace(s) created after {:.1} s; waiting for them to run",
        names.len(),
        started.elapsed().as_secs_f64()
    ));
    wait_running(config, admin, &agents, run_id, names.len()).await?;
    report.ready_seconds = Some(ready_from.elapsed().as_secs_f64());
    progress(format!(
        "all {} workspace(s) running after {:.1} s",
        names.len(),
        ready_from.elapsed().as_secs_f64()
    ));
    let load = Arc::new(Recorder::default());
    let sessions = config.terminals + config.ssh_sessions;
    // The sessions' workspaces are kept out of the workload's stops and deletes (half of the
    // workspaces at most, so the workload still has some to churn).
    let hosts = sessions.min(names.len().div_ceil(2));
    let targets = session_targets(config, &users, &names[..hosts]).await?;
    let ssh = if config.ssh_sessions > 0 {
        let access = admin
            .access()
            .await
            .map_err(api("reading the SSH endpoint"))?;
        Some(access.ssh.ok_or_else(|| {
            ScaletestError::Invalid("this installation offers no SSH: drop --ssh".to_owned())
        })?)
    } else {
        None
    };
    let t = Instant::now();
    let until = t + config.duration;
    let terminals = sessions::drive(
        targets,
        ssh,
        config.session_rate,
        until,
        load.clone(),
        shutdown.clone(),
    );
    let api_load = async {
        if config.api_rate > 0.0 && !config.duration.is_zero() {
            let plan = Arc::new(workload::Plan::new(users, names, hosts, agents, run_id));
            workload::drive(config, plan, load.clone(), progress, shutdown).await;
        }
    };
    let (carried, ()) = tokio::join!(terminals, api_load);
    report.session_bytes = carried.echoed_bytes;
    report.load_seconds = t.elapsed().as_secs_f64();
    report.load = load.stats(t.elapsed());
    Ok(())
}

/// The sessions to open, spread over `hosts` (as their owners), with their terminal URLs.
async fn session_targets(
    config: &ScaletestConfig,
    users: &[RunUser],
    hosts: &[(usize, String)],
) -> Result<Vec<sessions::Target>, ScaletestError> {
    let mut urls = Vec::with_capacity(hosts.len());
    for (owner, name) in hosts {
        let ws = users[*owner]
            .client
            .get_workspace(name)
            .await
            .map_err(api(format!("reading workspace {name}")))?;
        urls.push(ws.terminal_url.unwrap_or_default());
    }
    let kinds = std::iter::repeat_n(sessions::Kind::Web, config.terminals).chain(
        std::iter::repeat_n(sessions::Kind::Ssh, config.ssh_sessions),
    );
    Ok(kinds
        .enumerate()
        .map(|(i, kind)| {
            let (owner, name) = &hosts[i % hosts.len()];
            sessions::Target {
                kind,
                owner: users[*owner].clone(),
                workspace: name.clone(),
                terminal_url: urls[i % hosts.len()].clone(),
            }
        })
        .collect())
}

/// The simulated agents' configuration: the server's defaults, but with sessions to hold,
/// their workspaces' hosts on the front door the server last heard from (a central proxy), as
/// the installation's real agents have theirs.
async fn agent_config(
    config: &ScaletestConfig,
    admin: &Client,
) -> Result<Option<AgentConfig>, ScaletestError> {
    if config.terminals + config.ssh_sessions == 0 {
        return Ok(None);
    }
    let proxies = admin.proxies().await.map_err(api(
        "listing the proxies (terminal and SSH sessions go through one)",
    ))?;
    let front = proxies
        .iter()
        .filter(|p| p.region.is_none() && p.serving)
        .max_by_key(|p| p.last_seen_at)
        .ok_or_else(|| {
            ScaletestError::Invalid(
                "no central proxy is serving: terminal and SSH sessions go through one".to_owned(),
            )
        })?;
    Ok(Some(AgentConfig {
        workspace_domain: front.workspace_domain.clone(),
        workspace_scheme: front.public_scheme.clone(),
        ..AgentConfig::default()
    }))
}

fn lock(made: &Mutex<Made>) -> std::sync::MutexGuard<'_, Made> {
    made.lock().unwrap_or_else(|p| p.into_inner())
}

/// An error as a short kind for the report: the HTTP status and code, or the transport's.
pub(crate) fn short(e: &warren_client::Error) -> String {
    match e {
        warren_client::Error::Api { status, code, .. } => format!("HTTP {status} {code}"),
        other => warren_types::error_chain(other),
    }
}

async fn create_users(
    config: &ScaletestConfig,
    admin: &Client,
    run_id: &str,
    made: &Arc<Mutex<Made>>,
    setup: &Recorder,
) -> Result<Vec<RunUser>, ScaletestError> {
    let base = admin.base_url().to_owned();
    let results: Vec<Result<RunUser, ScaletestError>> = futures::stream::iter(0..config.users)
        .map(|i| {
            let name = format!("{run_id}-u{i}");
            lock(made).users.push(name.clone());
            let base = base.clone();
            async move {
                let password = format!("{:032x}", rand::random::<u128>());
                let t = Instant::now();
                let r = admin
                    .create_user(&CreateUserRequest {
                        username: name.clone(),
                        password: password.clone(),
                        is_admin: false,
                    })
                    .await;
                setup.record("user.create", t.elapsed(), r.as_ref().err().map(short));
                r.map_err(api(format!("creating user {name}")))?;
                let anonymous = Client::anonymous(&base).map_err(api("the server URL"))?;
                let t = Instant::now();
                let r = anonymous
                    .login(&PasswordLoginRequest {
                        username: name.clone(),
                        password,
                        token_name: Some("scaletest".into()),
                    })
                    .await;
                setup.record("user.login", t.elapsed(), r.as_ref().err().map(short));
                let token = r.map_err(api(format!("signing in as {name}")))?;
                let client =
                    Client::new(&base, token.secret.clone()).map_err(api("the server URL"))?;
                Ok(RunUser {
                    client,
                    token: token.secret,
                })
            }
        })
        .buffered(config.concurrency)
        .collect()
        .await;
    results.into_iter().collect()
}

async fn create_workspaces(
    config: &ScaletestConfig,
    users: &[RunUser],
    agents: &[String],
    run_id: &str,
    setup: &Recorder,
) -> Result<Vec<(usize, String)>, ScaletestError> {
    let results: Vec<Result<(usize, String), ScaletestError>> =
        futures::stream::iter(0..config.workspaces)
            .map(|i| {
                let owner = i % users.len();
                let name = format!("{run_id}-w{i}");
                let req = workspace_request(&name, agents.get(i % agents.len().max(1)));
                async move {
                    let t = Instant::now();
                    let r = users[owner].client.create_workspace(&req).await;
                    setup.record("ws.create", t.elapsed(), r.as_ref().err().map(short));
                    r.map_err(api(format!("creating workspace {name}")))?;
                    Ok((owner, name))
                }
            })
            .buffered(config.concurrency)
            .collect()
            .await;
    results.into_iter().collect()
}

/// A workspace of the default definition named `name`, on `agent`.
pub(crate) fn workspace_request(name: &str, agent: Option<&String>) -> CreateWorkspaceRequest {
    CreateWorkspaceRequest {
        project: None,
        devfile: None,
        agent: agent.cloned(),
        name: Some(name.to_owned()),
        resources: None,
        variables: vec![],
        git_ref: None,
        repository: None,
        definition: None,
        starter: None,
        space: None,
    }
}

/// Waits until the run's `total` workspaces are running on `agents`.
async fn wait_running(
    config: &ScaletestConfig,
    admin: &Client,
    agents: &[String],
    run_id: &str,
    total: usize,
) -> Result<(), ScaletestError> {
    let deadline = Instant::now() + config.ready_timeout;
    let prefix = format!("{run_id}-w");
    loop {
        let mut running = 0;
        for agent in agents {
            let listed = admin
                .list_all_workspaces(&WorkspaceQuery {
                    state: Some("Running".into()),
                    agent: Some(agent.clone()),
                    ..WorkspaceQuery::default()
                })
                .await
                .map_err(api("listing the running workspaces"))?;
            running += listed
                .iter()
                .filter(|w| w.name.starts_with(&prefix))
                .count();
        }
        if running >= total {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ScaletestError::NotReady {
                left: total - running,
                total,
                after: config.ready_timeout,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Deletes the run's users (terminating their workspaces), waits for them to go, then
/// deletes its agents. What cannot be removed in time is listed, not hidden.
async fn cleanup(
    config: &ScaletestConfig,
    admin: &Client,
    made: &Made,
    progress: &Progress,
) -> Cleanup {
    let started = Instant::now();
    let mut out = Cleanup::default();
    if made.users.is_empty() && made.agents.is_empty() {
        return out;
    }
    progress(format!(
        "cleaning up: {} user(s) with their workspaces, then {} agent(s)",
        made.users.len(),
        made.agents.len()
    ));
    let refused: Vec<String> = futures::stream::iter(made.users.iter())
        .map(|name| async move {
            match admin.delete_user(name, true).await {
                Ok(_) => None,
                Err(e) if e.is_not_found() => None,
                Err(e) => Some(format!("user {name}: {}", warren_types::error_chain(&e))),
            }
        })
        .buffer_unordered(config.concurrency)
        .filter_map(|r| async move { r })
        .collect()
        .await;
    out.leftovers.extend(refused);
    // Accounts go once their agents have removed their workspaces.
    let deadline = Instant::now() + config.ready_timeout;
    let mut left = made.users.clone();
    while !left.is_empty() {
        match admin.list_users().await {
            Ok(users) => left.retain(|n| users.iter().any(|u| &u.username == n)),
            Err(e) => {
                tracing::warn!(error = %warren_types::error_chain(&e), "listing users while cleaning up")
            }
        }
        if left.is_empty() || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    out.users_deleted = made.users.len() - left.len();
    out.leftovers.extend(left.iter().map(|n| {
        format!("user {n}: its workspaces were not removed in time (deletion is requested; it completes when they are)")
    }));
    for name in &made.agents {
        match admin.delete_agent(name).await {
            Ok(()) => out.agents_deleted += 1,
            Err(e) if e.is_not_found() => out.agents_deleted += 1,
            Err(e) => out
                .leftovers
                .push(format!("agent {name}: {}", warren_types::error_chain(&e))),
        }
    }
    out.seconds = started.elapsed().as_secs_f64();
    out
}
