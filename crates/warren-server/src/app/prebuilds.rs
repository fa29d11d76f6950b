//! Prebuilds (issue 43): a project's clone and create-time steps (`warren.dev/prebuild`, a dev
//! container's `onCreateCommand` and `updateContentCommand`) run ahead of time on the agent
//! its maintainers chose, in a workspace of their own that no user lists or opens. When its
//! startup is done the workspace is stopped and its volumes kept; new workspaces of the
//! project's default ref (or another ref its maintainers asked for) on that agent start as
//! copies of them (`workspaces::create`), fetch the commits since and run only what runs at
//! every start.
//!
//! The driver ([`prebuild_task`]) is a reconciler told nothing about what changed: at every
//! tick it polls the projects' refs (every `poll` interval) and starts a prebuild of a commit
//! none was made for (or of the same commit, when the project has a schedule and the ref's
//! newest prebuild is older than it allows), advances running prebuilds from their workspace's startup status, and
//! collects: the newest [`KEEP_READY`] ready prebuilds of a ref are kept, older ones and
//! failed ones lose their workspace. A prebuild runs with the project's credential only, no
//! one's secrets, variables or dotfiles; its workspace is owned by, and counts against every
//! quota of, the maintainer who turned prebuilds on (any user can make a project: prebuilds
//! must not be a way past one's quota).

use super::prebuild_progress::{progress, Progress, TIMEOUT_MS};
use super::render::{self, RenderInput};
use super::sources::{self, Source};
use super::workspaces::checks::{
    check_quotas, choose_agent, size_at_creation, size_for_requirements,
};
use super::{AppError, AppState, Principal};
use crate::app::audit;
use crate::store::prebuilds::{Finish, PrebuildRow, PrebuildSettings};
use crate::store::projects::ProjectRow;
use crate::store::workspaces::{ChangedBy, NewWorkspace, WorkspaceRow};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_types::api::Project;
use warren_types::prebuild::{
    Prebuild, PrebuildState, PrebuildTrigger, SetPrebuildsRequest, MAX_PREBUILD_EVERY_HOURS,
    MAX_PREBUILD_POOL, MAX_PREBUILD_REFS,
};
use warren_types::{ActualState, AgentId, DesiredState, UserId, WorkspaceId};

/// Ready prebuilds kept per project, agent and ref: the newest serves new workspaces, the one
/// before it those created while the newest was being chosen.
pub const KEEP_READY: usize = 2;

/// How often running prebuilds are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// A ready prebuild chosen for a workspace this recently is not collected: the agent may not
/// have copied it yet.
const IN_USE_MS: i64 = 10 * 60 * 1000;

/// How long a prebuild may be without its workspace while `start` makes it.
const MAKING_MS: i64 = 2 * 60 * 1000;

/// How many of a project's prebuilds its list shows.
const LIST_LIMIT: i64 = 50;

pub(super) fn view(r: &PrebuildRow) -> Prebuild {
    Prebuild {
        id: r.id,
        project: r.project_name.clone(),
        agent: r.agent_name.clone(),
        git_ref: r.git_ref.clone(),
        commit: r.commit_sha.clone(),
        state: r.state(),
        trigger: r.trigger(),
        reason: r.reason.clone(),
        log: r.log.clone(),
        used: r.used,
        // Only a ready prebuild is kept; a removed or failed one's space went with it.
        stored_bytes: r
            .stored_bytes
            .filter(|_| r.state() == PrebuildState::Ready)
            .and_then(|b| u64::try_from(b).ok()),
        pool_ready: u32::try_from(r.pool_ready).ok().filter(|n| *n > 0),
        created_at: crate::db::from_millis(r.created_at),
        finished_at: r.finished_at.map(crate::db::from_millis),
    }
}

/// A project's prebuilds, the newest first, for anyone who may use the project.
pub async fn list(state: &AppState, who: &Principal, key: &str) -> Result<Vec<Prebuild>, AppError> {
    let p = super::projects::usable(state, who, key).await?;
    let rows = state.store.project_prebuilds(p.id, LIST_LIMIT).await?;
    Ok(rows.iter().map(view).collect())
}

/// A prebuild of the newest commit of `git_ref` (the default ref when `None`), now (its
/// maintainers); the one running already when there is one.
pub async fn trigger(
    state: &AppState,
    who: &Principal,
    key: &str,
    git_ref: Option<&str>,
) -> Result<Prebuild, AppError> {
    let r: Result<Prebuild, AppError> = async {
        let p = super::projects::maintained(state, who, key).await?;
        let (Some(agent), Some(by)) = (p.prebuild_agent_id, p.prebuild_by) else {
            return Err(AppError::conflict(
                "prebuilds_off",
                format!(
                    "project {:?} has no prebuilds: turn them on with `warren project prebuild on {}`",
                    p.name, p.name
                ),
            ));
        };
        let git_ref = git_ref.unwrap_or(&p.default_ref);
        if !p.prebuilt_refs().contains(&git_ref) {
            return Err(AppError::invalid_field(
                "ref",
                format!(
                    "project {:?} prebuilds {}, not {git_ref:?}: add it with `warren project prebuild on {} --ref {git_ref}`",
                    p.name,
                    p.prebuilt_refs().join(", "),
                    p.name
                ),
            ));
        }
        let row = start(state, &p, git_ref, agent, by, PrebuildTrigger::Manual, None).await?;
        tracing::info!(project = %p.name, by = %who.user.username, prebuild = row.id, "prebuild asked for");
        Ok(view(&row))
    }
    .await;
    audit::audited(
        state,
        who,
        "prebuild.run",
        audit::Target::named("project", key),
        r,
    )
    .await
}

/// Turns the project's prebuilds on, or changes them (its maintainers): on the agent asked
/// for (the only agent when none is), of the refs and on the schedule asked for, run as the
/// caller. The next poll starts the first.
pub async fn turn_on(
    state: &AppState,
    who: &Principal,
    key: &str,
    req: &SetPrebuildsRequest,
) -> Result<Project, AppError> {
    let r: Result<Project, AppError> = async {
        let p = super::projects::maintained(state, who, key).await?;
        let refs = prebuild_refs(&p, &req.refs)?;
        if let Some(n) = req.pool.filter(|n| *n > MAX_PREBUILD_POOL) {
            return Err(AppError::invalid_field(
                "pool",
                format!("a warm pool holds at most {MAX_PREBUILD_POOL} workspaces, not {n}"),
            ));
        }
        if let Some(h) = req.every_hours {
            if !(1..=MAX_PREBUILD_EVERY_HOURS).contains(&h) {
                return Err(AppError::invalid_field(
                    "every_hours",
                    format!("must be 1 to {MAX_PREBUILD_EVERY_HOURS} hours, not {h}"),
                ));
            }
        }
        let agent = choose_agent(state, req.agent.as_deref())
            .await
            .map_err(|mut e| {
                if e.field.is_some() {
                    e.message = e.message.replacen("agent", "prebuilds' agent", 1);
                }
                e
            })?;
        let settings = PrebuildSettings {
            agent: agent.id,
            by: who.user.id,
            refs,
            every_hours: req.every_hours,
            pool: req.pool,
        };
        state
            .store
            .set_project_prebuilds(p.id, Some(&settings))
            .await?;
        tracing::info!(project = %p.name, agent = %agent.name, refs = ?settings.refs, every_hours = ?settings.every_hours, pool = ?settings.pool, by = %who.user.username, "project prebuilds turned on");
        collect(state).await?;
        super::projects::get(state, who, key).await
    }
    .await;
    audit::audited(
        state,
        who,
        "prebuild.turn_on",
        audit::Target::named("project", key),
        r,
    )
    .await
}

/// The refs asked to be prebuilt besides the default ref: valid ref names, within
/// [`MAX_PREBUILD_REFS`], without the default ref or one twice.
fn prebuild_refs(p: &ProjectRow, asked: &[String]) -> Result<Vec<String>, AppError> {
    let mut refs: Vec<String> = Vec::new();
    for r in asked {
        warren_types::git::validate_ref(r).map_err(|e| AppError::invalid_field("refs", e))?;
        if *r != p.default_ref && !refs.contains(r) {
            refs.push(r.clone());
        }
    }
    if refs.len() > MAX_PREBUILD_REFS {
        return Err(AppError::invalid_field(
            "refs",
            format!(
                "at most {MAX_PREBUILD_REFS} refs besides the default ref are prebuilt, not {}",
                refs.len()
            ),
        ));
    }
    Ok(refs)
}

/// Turns the project's prebuilds off (its maintainers): its prebuilds are removed and their
/// workspaces terminated.
pub async fn turn_off(state: &AppState, who: &Principal, key: &str) -> Result<Project, AppError> {
    let r: Result<Project, AppError> = async {
        let p = super::projects::maintained(state, who, key).await?;
        state.store.set_project_prebuilds(p.id, None).await?;
        tracing::info!(project = %p.name, by = %who.user.username, "project prebuilds turned off");
        collect(state).await?;
        super::projects::get(state, who, key).await
    }
    .await;
    audit::audited(
        state,
        who,
        "prebuild.turn_off",
        audit::Target::named("project", key),
        r,
    )
    .await
}

/// Records a prebuild of `commit` (the ref's newest when `None`) and makes its workspace; a
/// prebuild of the ref already running is answered instead.
async fn start(
    state: &AppState,
    p: &ProjectRow,
    git_ref: &str,
    agent: AgentId,
    by: UserId,
    cause: PrebuildTrigger,
    commit: Option<String>,
) -> Result<PrebuildRow, AppError> {
    let store = &state.store;
    let running = store
        .newest_prebuild(p.id, agent, git_ref, Some(PrebuildState::Running))
        .await?;
    if let Some(r) = running {
        return Ok(r);
    }
    // The project's own credential only: a prebuild's checkout is copied to every user.
    let source = Source::of_project(state, p)?;
    let commit = match commit {
        Some(c) => c,
        None => {
            (state.git.resolve(source.remote(), git_ref).await).map_err(|e| source.git_error(&e))?
        }
    };
    let now = state.clock.now_ms();
    let inserted = (store.insert_prebuild(p.id, agent, git_ref, &commit, cause, now)).await;
    let id = match inserted {
        Ok(id) => id,
        // Another server or maintainer started one meanwhile (one runs per ref and agent).
        Err(crate::store::StoreError::Conflict(_)) => {
            let running = store
                .newest_prebuild(p.id, agent, git_ref, Some(PrebuildState::Running))
                .await?;
            return running.ok_or_else(|| {
                AppError::conflict(
                    "prebuild_changed",
                    "a prebuild of the ref started and ended meanwhile; ask again",
                )
            });
        }
        Err(e) => return Err(e.into()),
    };
    match make_workspace(state, p, &source, git_ref, agent, by, id, &commit).await {
        Ok(w) => store.set_prebuild_workspace(id, w).await?,
        Err(e) => {
            let reason = format!("its workspace could not be made: {}", e.message);
            tracing::warn!(project = %p.name, prebuild = id, reason = %reason, "prebuild failed");
            let f = Finish {
                state: PrebuildState::Failed,
                reason: Some(&reason),
                log: None,
            };
            store
                .finish_prebuild(id, PrebuildState::Running, &f, now)
                .await?;
        }
    }
    let rows = store.project_prebuilds(p.id, LIST_LIMIT).await?;
    rows.into_iter()
        .find(|r| r.id == id)
        .ok_or_else(|| AppError::not_found(format!("prebuild {id}")))
}

/// The prebuild's own workspace: the project's definition at `commit` of `git_ref`, rendered
/// as a prebuild, owned by the maintainer who turned prebuilds on and shown to no one.
#[allow(clippy::too_many_arguments)] // One call site; a struct would only rename them.
async fn make_workspace(
    state: &AppState,
    p: &ProjectRow,
    source: &Source,
    git_ref: &str,
    agent: AgentId,
    by: UserId,
    prebuild: i64,
    commit: &str,
) -> Result<WorkspaceId, AppError> {
    let store = &state.store;
    let agent = choose_agent(state, Some(&agent.to_string())).await?;
    let owner = (store.user_by_id(by).await?)
        .filter(|u| u.is_active())
        .ok_or_else(|| {
            AppError::conflict(
                "prebuilds_owner_gone",
                "the maintainer who turned prebuilds on is disabled or gone: turn them on again",
            )
        })?;
    let now = state.clock.now_ms();
    let space = store.personal_space(owner.id, &owner.username, now).await?;
    let (text, field) = match &p.devfile {
        Some(d) => (d.clone(), "project devfile"),
        None => {
            let read = sources::definition(state, source, commit, &[], None).await?;
            (read.devfile, "repository devfile")
        }
    };
    let text = render::resolve_parent(&state.parents, &text, field).await?;
    let devfile = render::parse(&text, field)?;
    let asked = Default::default();
    let resources = size_at_creation(Default::default(), &agent)?;
    let needs = devfile.host_requirements.as_ref();
    let (resources, _) = size_for_requirements(&asked, resources, needs, &agent)?;
    let name = format!("prebuild-{}", super::names::generate());
    let new = NewWorkspace {
        name: name.clone(),
        owner_id: owner.id,
        agent_id: agent.id,
        project_id: Some(p.id),
        git_ref: Some(git_ref.to_owned()),
        repository: None,
        definition_path: None,
        devfile: text,
        resources: resources.clone(),
        variables: vec![],
        starter: None,
        space_id: space.id,
        prebuild_id: Some(prebuild),
        seed: None,
        pool_of: None,
    };
    let w = store
        .insert_workspace(
            &new,
            now,
            |counts| {
                // The maintainer's quotas: prebuilds are workspaces of theirs that no one sees.
                check_quotas(&agent, counts, &resources).map_err(|mut e| {
                    e.message = format!(
                        "it counts against {}'s quotas: {}",
                        owner.username, e.message
                    );
                    e
                })
            },
            |id| {
                render::render_workspace(
                    &devfile,
                    RenderInput {
                        name: &name,
                        id,
                        agent: &agent,
                        project: Some(source.project_input(Some(git_ref))),
                        resources: &resources,
                        variables: &[],
                        desired: DesiredState::Running,
                        dotfiles_url: None,
                        starter: None,
                        prebuild: true,
                        seed: None,
                    },
                )
            },
        )
        .await?;
    state.signals.notify(agent.id);
    state.changed();
    tracing::info!(project = %p.name, prebuild, workspace = %w.name, git_ref, commit, "prebuild started");
    Ok(w.id)
}

/// The driver: polls the refs every `poll`, advances running prebuilds and collects, on the
/// replica that holds the housekeeping lease.
pub async fn prebuild_task(state: AppState, poll: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut next_poll = tokio::time::Instant::now();
    loop {
        tokio::select! {
            // Cancel-safe: cancellation only flips a flag.
            _ = shutdown.cancelled() => return,
            // Cancel-safe: a lost tick is simply taken on the next iteration.
            _ = tick.tick() => {}
        }
        let polls = tokio::time::Instant::now() >= next_poll;
        // The lease is renewed when the refs are polled (the lifecycle timers renew it too);
        // between polls the last renewal says whether this server drives prebuilds.
        let held = if polls {
            next_poll = tokio::time::Instant::now() + poll;
            state.housekeeping.hold(&state).await
        } else {
            state.housekeeping.is_held()
        };
        if !held {
            continue;
        }
        if let Err(e) = run_once(&state, polls).await {
            tracing::warn!(error = %warren_types::error_chain(&e), "prebuilds failed; retrying on the next tick");
        }
    }
}

/// One pass of the driver (tests call it directly).
pub async fn run_once(state: &AppState, poll_refs: bool) -> Result<(), AppError> {
    if poll_refs {
        poll(state).await?;
    }
    advance(state).await?;
    collect(state).await?;
    super::prebuild_pools::refill(state).await
}

/// Starts a prebuild of each project whose ref's newest commit has none yet (not while one
/// of the ref runs: the next poll after it ends starts the newer one).
async fn poll(state: &AppState) -> Result<(), AppError> {
    // What no list shows any more is forgotten (a list shows a project's newest).
    state.store.prune_prebuilds(LIST_LIMIT).await?;
    for (project, _, _) in state.store.projects_with_prebuilds().await? {
        let Some(p) = state.store.project_by_key(&project.to_string()).await? else {
            continue;
        };
        if let Err(e) = poll_project(state, &p).await {
            tracing::warn!(project = %p.name, error = %e.message, "prebuilds: could not start one");
        }
    }
    Ok(())
}

/// Starts a prebuild of each of the project's refs whose newest commit has none, or whose
/// newest prebuild is older than the project's schedule allows (not while one of the ref
/// runs); those started. Many servers may ask at once: the database keeps one running per ref
/// and agent. A ref that cannot be read does not keep the others from their prebuilds.
pub(super) async fn poll_project(
    state: &AppState,
    p: &ProjectRow,
) -> Result<Vec<PrebuildRow>, AppError> {
    let (Some(agent), Some(by)) = (p.prebuild_agent_id, p.prebuild_by) else {
        return Ok(vec![]);
    };
    let source = Source::of_project(state, p).map_err(|e| {
        AppError::conflict(
            "prebuild_source",
            format!("the project's source is unusable: {}", e.message),
        )
    })?;
    let mut started = Vec::new();
    let mut failed = Vec::new();
    for git_ref in p.prebuilt_refs() {
        let head = match state.git.resolve(source.remote(), git_ref).await {
            Ok(c) => c,
            Err(e) => {
                let e = source.git_error(&e);
                failed.push(format!("ref {git_ref:?} could not be read: {}", e.message));
                continue;
            }
        };
        let newest = (state.store)
            .newest_prebuild(p.id, agent, git_ref, None)
            .await?;
        let cause = match &newest {
            Some(n) if n.state() == PrebuildState::Running => continue,
            Some(n) if n.commit_sha == head => {
                let every = p.prebuild_every_hours.map(|h| h * 3_600_000);
                match every {
                    Some(ms) if state.clock.now_ms() - n.created_at >= ms => {
                        PrebuildTrigger::Schedule
                    }
                    _ => continue,
                }
            }
            _ => PrebuildTrigger::Push,
        };
        match start(state, p, git_ref, agent, by, cause, Some(head)).await {
            Ok(r) => started.push(r),
            Err(e) => failed.push(format!("ref {git_ref:?}: {}", e.message)),
        }
    }
    if started.is_empty() && !failed.is_empty() {
        return Err(AppError::conflict("prebuild_source", failed.join("; ")));
    }
    for why in &failed {
        tracing::warn!(project = %p.name, "prebuilds: {why}");
    }
    Ok(started)
}

/// A done prebuild's workspace on its way to `Stopped`.
fn stopping(r: &PrebuildRow, w: &WorkspaceRow, now: i64) -> Progress {
    if w.desired_state == DesiredState::Terminated {
        Progress::Failed("its workspace was removed".into(), None)
    } else if w.actual_state == ActualState::Stopped && w.desired_state == DesiredState::Stopped {
        Progress::Stopped
    } else if matches!(w.actual_state, ActualState::Failed | ActualState::Error) {
        let why = w
            .failure_reason
            .clone()
            .unwrap_or_else(|| "no reason given".into());
        Progress::Failed(format!("its workspace failed while stopping: {why}"), None)
    } else if now - r.created_at > TIMEOUT_MS {
        Progress::Failed("its workspace did not stop".into(), None)
    } else {
        Progress::Waiting
    }
}

/// Moves each running prebuild on: a done one is stopped and kept, a failed one loses its
/// workspace (the collector terminates it) and keeps its reason and output.
async fn advance(state: &AppState) -> Result<(), AppError> {
    let now = state.clock.now_ms();
    for r in state.store.prebuilds_in(PrebuildState::Running).await? {
        let w = match r.workspace() {
            Some(id) => state.store.workspace_by_id(id).await?,
            None => None,
        };
        let progress = match &w {
            // Its steps are done (their output kept): ready once its workspace stopped.
            Some(w) if r.log.is_some() => stopping(&r, w, now),
            Some(w) => progress(state, r.created_at, w).await?,
            // Being made (its definition read from git) by `start`, maybe on another server.
            None if r.workspace_id.is_none() && now - r.created_at < MAKING_MS => continue,
            None => Progress::Failed("its workspace is gone".into(), None),
        };
        let f = match &progress {
            Progress::Waiting => continue,
            Progress::Done(log) => {
                // Kept now (the output is read while it runs), then stopped: no workspace
                // copies a volume still written to.
                state.store.set_prebuild_log(r.id, log).await?;
                if let Some(w) = &w {
                    stop_workspace(state, w.id).await?;
                }
                continue;
            }
            Progress::Stopped => Finish {
                state: PrebuildState::Ready,
                reason: None,
                log: None,
            },
            Progress::Failed(reason, log) => Finish {
                state: PrebuildState::Failed,
                reason: Some(reason),
                log: log.as_deref(),
            },
        };
        if !state
            .store
            .finish_prebuild(r.id, PrebuildState::Running, &f, now)
            .await?
        {
            continue;
        }
        match &progress {
            Progress::Failed(reason, _) => {
                tracing::warn!(project = %r.project_name, prebuild = r.id, commit = %r.commit_sha, reason = %reason, "prebuild failed; new workspaces start without it")
            }
            _ => {
                tracing::info!(project = %r.project_name, prebuild = r.id, commit = %r.commit_sha, "prebuild ready")
            }
        }
    }
    Ok(())
}

/// Removes a prebuild (the collector then terminates its workspace), saying why.
async fn remove(state: &AppState, r: &PrebuildRow, reason: &str, now: i64) -> Result<(), AppError> {
    let f = Finish {
        state: PrebuildState::Removed,
        reason: Some(reason),
        log: None,
    };
    state
        .store
        .finish_prebuild(r.id, r.state(), &f, now)
        .await?;
    Ok(())
}

/// Asks a prebuild's workspace to stop (nothing when it is stopped or going already).
async fn stop_workspace(state: &AppState, id: WorkspaceId) -> Result<(), AppError> {
    let load = || async {
        (state.store.workspace_by_id(id).await?)
            .ok_or_else(|| AppError::not_found(format!("workspace {id}")))
    };
    let w = load().await?;
    if matches!(
        w.desired_state,
        DesiredState::Stopped | DesiredState::Terminated
    ) {
        return Ok(());
    }
    super::workspaces::change_desired_state(state, load, DesiredState::Stopped, false).await?;
    Ok(())
}

/// Why the project no longer wants prebuild `r`, if it does not.
fn unwanted(r: &PrebuildRow) -> Option<&'static str> {
    if r.project_agent != Some(r.agent_id) {
        Some("the project's prebuilds were turned off or moved to another agent")
    } else if !r.still_wanted() {
        Some("its ref is no longer prebuilt (the project's default ref or prebuild refs changed)")
    } else {
        None
    }
}

/// Keeps the newest [`KEEP_READY`] ready prebuilds of each ref (and any chosen for a workspace
/// within [`IN_USE_MS`]), removes the others and those whose workspace went (a lifecycle
/// timer, an admin), and terminates every prebuild workspace no prebuild keeps.
async fn collect(state: &AppState) -> Result<(), AppError> {
    let now = state.clock.now_ms();
    let ready = state.store.prebuilds_in(PrebuildState::Ready).await?;
    let mut kept: std::collections::HashMap<(i64, i64, &str), usize> = Default::default();
    // Newest first.
    for r in ready.iter().rev() {
        let w = match r.workspace() {
            Some(id) => state.store.workspace_by_id(id).await?,
            None => None,
        };
        let gone = w
            .as_ref()
            .is_none_or(|w| w.desired_state == DesiredState::Terminated);
        let n = kept
            .entry((r.project_id, r.agent_id, r.git_ref.as_str()))
            .or_default();
        let reason = if gone {
            "its workspace was removed"
        } else if let Some(why) = unwanted(r) {
            why
        } else if *n < KEEP_READY || r.last_used_at.is_some_and(|t| now - t < IN_USE_MS) {
            *n += 1;
            // A stop that failed after the prebuild ended, or a start someone slipped in.
            if let Some(w) = w.filter(|w| w.desired_state != DesiredState::Stopped) {
                stop_workspace(state, w.id).await?;
            }
            continue;
        } else {
            "newer prebuilds of its ref replaced it"
        };
        remove(state, r, reason, now).await?;
    }
    // A prebuild running when its project's prebuilds were turned off or moved ends now.
    for r in state.store.prebuilds_in(PrebuildState::Running).await? {
        if let Some(why) = unwanted(&r) {
            remove(state, &r, why, now).await?;
        }
    }
    for (id, version, agent) in state.store.loose_prebuild_workspaces().await? {
        let set = state
            .store
            .set_desired_state(
                WorkspaceId(id),
                version,
                DesiredState::Terminated,
                now,
                ChangedBy::Other,
            )
            .await?;
        if set.is_some() {
            state.signals.notify(AgentId(agent));
            state.changed();
        }
    }
    Ok(())
}
