//! Workspaces: desired and actual state, rendered objects (sealed), variables (sealed),
//! and a `version` that every write bumps, for optimistic concurrency.

use super::error::unique;
use super::{
    bind_all, corrupt, get_i64, get_opt_i64, get_opt_str, get_str, Bind, Store, StoreError,
};
use crate::db::{from_millis, DbKind};
use serde::{Deserialize, Serialize};
use sqlx::any::AnyRow;
use sqlx::FromRow;
use std::collections::BTreeMap;
use warren_types::api::{Variable, VariableKind, Workspace, WorkspaceResources};
use warren_types::{ActualState, AgentId, DesiredState, ProjectId, SpaceId, UserId, WorkspaceId};

/// A workspace not gone: not both desired and actual `Terminated` (a terminated workspace
/// stays listed until its agent has removed it). Only the workspaces table has these columns,
/// so the predicate needs no table alias in a join.
pub(crate) const NOT_GONE: &str =
    "NOT (desired_state = 'Terminated' AND actual_state = 'Terminated')";

/// A variable as stored (inside the sealed `variables` column).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredVariable {
    pub key: String,
    pub kind: VariableKind,
    pub secret: bool,
    pub value: String,
}

#[derive(Debug, Clone)]
pub struct WorkspaceRow {
    pub id: WorkspaceId,
    pub name: String,
    pub namespace: String,
    pub owner_id: UserId,
    pub owner_username: String,
    pub agent_id: AgentId,
    pub agent_name: String,
    pub project_id: Option<ProjectId>,
    pub project_name: Option<String>,
    pub git_ref: Option<String>,
    /// The repository it was opened from without a project (`ws create --repo`).
    pub repository: Option<String>,
    /// The file of its repository chosen as its definition at creation (`--definition`).
    pub definition_path: Option<String>,
    /// The starter project asked for at creation (the devfile's first when `None`).
    pub starter: Option<String>,
    /// The space it lives in, and that space's path.
    pub space_id: Option<SpaceId>,
    pub space_path: String,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub desired_state_updated_at: i64,
    pub actual_state_updated_at: i64,
    pub responded_to_agent_at: Option<i64>,
    pub deployment_resource_version: Option<String>,
    pub force_include_all_resources: bool,
    pub devfile: String,
    /// Sealed JSON array of Kubernetes objects.
    pub rendered_objects: String,
    pub resources: WorkspaceResources,
    /// Sealed JSON array of [`StoredVariable`].
    pub variables: String,
    pub endpoints: BTreeMap<String, String>,
    pub url: Option<String>,
    pub failure_reason: Option<String>,
    /// Why it waits while starting (no node can run it yet).
    pub waiting_reason: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    pub version: i64,
    /// Last use through the proxy (HTTP, terminal, SSH), as reported for the idle policy.
    pub last_activity_at: Option<i64>,
    /// The agent's runtime fault, since when (from the agents row).
    pub agent_runtime_fault: Option<(String, i64)>,
    pub agent_isolation_warning: Option<String>,
    /// The idle timeout stopped it (and nothing changed its desired state since).
    pub idle_stopped: bool,
    /// `scheme://terminal-{name}.{domain}/`, from the agent's configuration.
    pub terminal_url: Option<String>,
    /// Where its agent's workspaces are reached (`None`: the agent's configuration is
    /// unreadable).
    pub agent_front: Option<AgentFront>,
    /// The agent's lifecycle policy (its timers), from its configuration.
    pub agent_lifecycle: warren_types::config::LifecyclePolicy,
    /// Its owner's working hours.
    pub owner_working_hours: Option<warren_types::schedule::WorkingHours>,
    /// The prebuild it is the run of: hidden from every user, rendered as a prebuild.
    pub prebuild_id: Option<i64>,
    /// The prebuild its volumes started from.
    pub seed: Option<StoredSeed>,
    /// The prebuild it was made from while it waits, hidden, in its project's warm pool.
    pub pool_of: Option<i64>,
    pub owner_is_admin: bool, // budgets may exempt admins' workspaces
}

impl WorkspaceRow {
    /// Whether no user sees it: a prebuild's own, or one waiting in a warm pool.
    pub fn is_hidden(&self) -> bool {
        self.prebuild_id.is_some() || self.pool_of.is_some()
    }
}

/// The SQL condition (on `workspaces w`) of a workspace users see: not hidden.
pub const SHOWN: &str = "w.prebuild_id IS NULL AND w.pool_of IS NULL";

/// The part of a workspace's agent configuration that places its URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFront {
    pub region: Option<String>,
    pub workspace_scheme: String,
    /// `host[:port]` of the central proxy's workspace hosts.
    pub workspace_domain: String,
}

/// The fields of an agent's configuration a workspace's addresses and timers need.
#[derive(serde::Deserialize)]
struct AgentDomain {
    workspace_domain: String,
    workspace_scheme: String,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    lifecycle: warren_types::config::LifecyclePolicy,
}

impl WorkspaceRow {
    pub fn to_api(&self, store: &Store) -> Result<Workspace, StoreError> {
        let vars: Vec<StoredVariable> = open_json(store, &self.variables, "variables")?;
        Ok(Workspace {
            id: self.id,
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            owner: self.owner_id,
            owner_username: self.owner_username.clone(),
            space: self.space_path.clone(),
            agent: self.agent_id,
            agent_name: self.agent_name.clone(),
            project: self.project_id,
            project_name: self.project_name.clone(),
            repository: self.repository.clone(),
            git_ref: self.git_ref.clone(),
            desired_state: self.desired_state,
            actual_state: self.actual_state,
            desired_state_updated_at: from_millis(self.desired_state_updated_at),
            actual_state_updated_at: Some(from_millis(self.actual_state_updated_at)),
            created_at: from_millis(self.created_at),
            updated_at: from_millis(self.updated_at),
            last_activity_at: self.last_activity_at.map(from_millis),
            url: self.url.clone(),
            terminal_url: self.terminal_url.clone(),
            region: None,
            editor_url: self
                .endpoints
                .get(warren_types::config::EDITOR_ENDPOINT)
                .cloned(),
            endpoints: self.endpoints.clone(),
            failure_reason: self.failure_reason.clone(),
            waiting_reason: self.waiting_reason.clone(),
            planned: None,
            // The reason itself (paths, hosts of the agent's machine) is for admins, on the
            // agent.
            agent_fault: self.agent_runtime_fault.as_ref().map(|(_, since)| {
                format!(
                    "agent {} cannot see its runtime since {}; the state shown is the last one it reported (an admin sees why with `warren agent show {}`)",
                    self.agent_name,
                    from_millis(*since).to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    self.agent_name
                )
            }),
            isolation_warning: self.agent_isolation_warning.clone(),
            your_right: None,
            resources: self.resources.clone(),
            variables: vars
                .into_iter()
                .map(|v| Variable {
                    value: (!v.secret).then_some(v.value),
                    key: v.key,
                    kind: v.kind,
                    secret: v.secret,
                })
                .collect(),
            version: self.version,
            notices: vec![],
            commands: vec![],
        })
    }

    pub fn objects(&self, store: &Store) -> Result<Vec<serde_json::Value>, StoreError> {
        open_json(store, &self.rendered_objects, "rendered objects")
    }

    pub fn stored_variables(&self, store: &Store) -> Result<Vec<StoredVariable>, StoreError> {
        open_json(store, &self.variables, "variables")
    }
}

pub(crate) fn open_json<T: serde::de::DeserializeOwned>(
    store: &Store,
    sealed: &str,
    what: &'static str,
) -> Result<T, StoreError> {
    let plain = store.sbox.open(sealed)?;
    serde_json::from_slice(&plain).map_err(|e| StoreError::Corrupt {
        what,
        source: Box::new(e),
    })
}

pub(crate) fn seal_json<T: Serialize>(store: &Store, v: &T) -> String {
    // Serialising plain data (Values, strings) to JSON cannot fail.
    store.sbox.seal(&serde_json::to_vec(v).unwrap_or_default())
}

pub const COLS: &str = "w.id, w.name, w.namespace, w.owner_id, u.username AS owner_username, w.agent_id, \
    a.name AS agent_name, w.project_id, p.name AS project_name, w.git_ref, w.desired_state, w.actual_state, \
    w.desired_state_updated_at, w.actual_state_updated_at, w.responded_to_agent_at, \
    w.deployment_resource_version, w.force_include_all_resources, w.devfile, w.rendered_objects, w.resources, \
    w.variables, w.endpoints, w.url, w.failure_reason, w.waiting_reason, w.created_at, w.updated_at, w.version, \
    x.last_activity_at, a.runtime_fault AS agent_runtime_fault, \
    a.runtime_fault_since AS agent_runtime_fault_since, a.isolation_warning AS agent_isolation_warning, \
    w.idle_stopped, a.config AS agent_config, w.starter, w.space_id, sp.path AS space_path, w.repository, w.definition_path, \
    u.working_hours AS owner_working_hours, w.prebuild_id, w.seed, w.pool_of, u.is_admin AS owner_is_admin";

pub const FROM: &str =
    "workspaces w JOIN users u ON u.id = w.owner_id JOIN agents a ON a.id = w.agent_id \
    LEFT JOIN projects p ON p.id = w.project_id \
    LEFT JOIN workspace_activity x ON x.workspace_id = w.id \
    LEFT JOIN spaces sp ON sp.id = w.space_id";

/// The `WHERE` clause of `f` (without order or limit) and its bound values, numbered from 1.
fn filter_sql(f: &WorkspaceFilter) -> (String, Vec<Bind>) {
    let mut sql = String::from(" WHERE 1 = 1");
    let mut binds = vec![];
    // Before `push` borrows `binds`: these bind a value used twice, or two.
    if let Some(space) = &f.space {
        binds.push(Bind::S(space.clone()));
        let n = binds.len();
        if f.recursive {
            // Not LIKE: `_` in a path would be a wildcard.
            binds.push(Bind::S(format!("{space}/")));
            let m = binds.len();
            sql.push_str(&format!(
                " AND (sp.path = ${n} OR substr(sp.path, 1, length(${m})) = ${m})"
            ));
        } else {
            sql.push_str(&format!(" AND sp.path = ${n}"));
        }
    }
    if let (Some(u), Some(ids)) = (f.visible_to, &f.role_spaces) {
        binds.push(Bind::I(u.get()));
        // Only the tree filters this way, and it reads most rows: the unary `+` keeps SQLite
        // from looking rows up through the owner and space indexes (every row's overflow
        // pages) and has it scan the `workspaces_tree` covering index instead.
        let mut cond = format!(" AND (+w.owner_id = ${}", binds.len());
        if !ids.is_empty() {
            let mut list = vec![];
            for id in ids {
                binds.push(Bind::I(id.get()));
                list.push(format!("${}", binds.len()));
            }
            cond.push_str(&format!(" OR +w.space_id IN ({})", list.join(", ")));
        }
        cond.push(')');
        sql.push_str(&cond);
    } else if let Some(u) = f.visible_to {
        binds.extend([Bind::I(u.get()), Bind::I(f.now)]);
        sql.push_str(&super::groups::visible_sql(binds.len() - 1));
    }
    let mut push = |cond: &str, b: Bind, sql: &mut String| {
        binds.push(b);
        sql.push_str(&format!(" AND {cond} ${}", binds.len()));
    };
    if let Some(o) = f.owner {
        push("w.owner_id =", Bind::I(o.get()), &mut sql);
    }
    if let Some(a) = f.agent {
        push("w.agent_id =", Bind::I(a.get()), &mut sql);
    }
    if let Some(p) = f.project {
        push("w.project_id =", Bind::I(p.get()), &mut sql);
    }
    if let Some(s) = f.state {
        push("w.actual_state =", Bind::S(s.as_str().to_owned()), &mut sql);
    } else if !f.include_terminated {
        sql.push_str(" AND ");
        sql.push_str(NOT_GONE);
    }
    if let Some(after) = f.after {
        push("w.id >", Bind::I(after), &mut sql);
    }
    if !f.include_prebuilds {
        sql.push_str(&format!(" AND {SHOWN}"));
    }
    (sql, binds)
}

/// One workspace as the tree draws it ([`Store::tree_entries`]).
#[derive(Debug, Clone)]
pub struct TreeRow {
    pub name: String,
    pub owner_username: String,
    pub space_path: String,
    pub desired_state: DesiredState,
    pub actual_state: ActualState,
    pub url: Option<String>,
    pub failure_reason: Option<String>,
    pub agent_runtime_fault: Option<String>,
}

fn desired_of(r: &AnyRow) -> Result<DesiredState, sqlx::Error> {
    get_str(r, "desired_state")?
        .parse()
        .map_err(|e| corrupt("desired state", e))
}

fn actual_of(r: &AnyRow) -> Result<ActualState, sqlx::Error> {
    get_str(r, "actual_state")?
        .parse()
        .map_err(|e| corrupt("actual state", e))
}

impl sqlx::FromRow<'_, AnyRow> for WorkspaceRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        let agent = serde_json::from_str::<AgentDomain>(&get_str(r, "agent_config")?).ok();
        Ok(WorkspaceRow {
            id: WorkspaceId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            namespace: get_str(r, "namespace")?,
            owner_id: UserId(get_i64(r, "owner_id")?),
            owner_username: get_str(r, "owner_username")?,
            agent_id: AgentId(get_i64(r, "agent_id")?),
            agent_name: get_str(r, "agent_name")?,
            project_id: get_opt_i64(r, "project_id")?.map(ProjectId),
            project_name: get_opt_str(r, "project_name")?,
            git_ref: get_opt_str(r, "git_ref")?,
            repository: get_opt_str(r, "repository")?,
            definition_path: get_opt_str(r, "definition_path")?,
            starter: get_opt_str(r, "starter")?,
            space_id: get_opt_i64(r, "space_id")?.map(SpaceId),
            space_path: get_opt_str(r, "space_path")?.unwrap_or_default(),
            desired_state: desired_of(r)?,
            actual_state: actual_of(r)?,
            desired_state_updated_at: get_i64(r, "desired_state_updated_at")?,
            actual_state_updated_at: get_i64(r, "actual_state_updated_at")?,
            responded_to_agent_at: get_opt_i64(r, "responded_to_agent_at")?,
            deployment_resource_version: get_opt_str(r, "deployment_resource_version")?,
            force_include_all_resources: get_i64(r, "force_include_all_resources")? != 0,
            devfile: get_str(r, "devfile")?,
            rendered_objects: get_str(r, "rendered_objects")?,
            resources: serde_json::from_str(&get_str(r, "resources")?)
                .map_err(|e| corrupt("resources", e))?,
            variables: get_str(r, "variables")?,
            endpoints: serde_json::from_str(&get_str(r, "endpoints")?)
                .map_err(|e| corrupt("endpoints", e))?,
            url: get_opt_str(r, "url")?,
            failure_reason: get_opt_str(r, "failure_reason")?,
            waiting_reason: get_opt_str(r, "waiting_reason")?,
            created_at: get_i64(r, "created_at")?,
            updated_at: get_i64(r, "updated_at")?,
            version: get_i64(r, "version")?,
            last_activity_at: get_opt_i64(r, "last_activity_at")?,
            agent_runtime_fault: match (
                get_opt_str(r, "agent_runtime_fault")?,
                get_opt_i64(r, "agent_runtime_fault_since")?,
            ) {
                (Some(f), Some(t)) => Some((f, t)),
                _ => None,
            },
            agent_isolation_warning: get_opt_str(r, "agent_isolation_warning")?,
            idle_stopped: get_i64(r, "idle_stopped")? != 0,
            terminal_url: agent.as_ref().map(|a| {
                format!(
                    "{}://terminal-{}.{}/",
                    a.workspace_scheme,
                    get_str(r, "name").unwrap_or_default(),
                    a.workspace_domain
                )
            }),
            agent_front: agent.as_ref().map(|a| AgentFront {
                region: a.region.clone(),
                workspace_scheme: a.workspace_scheme.clone(),
                workspace_domain: a.workspace_domain.clone(),
            }),
            agent_lifecycle: agent.map(|a| a.lifecycle).unwrap_or_default(),
            owner_working_hours: get_opt_str(r, "owner_working_hours")?
                .and_then(|j| serde_json::from_str(&j).ok()),
            prebuild_id: get_opt_i64(r, "prebuild_id")?,
            seed: get_opt_str(r, "seed")?
                .map(|j| serde_json::from_str(&j).map_err(|e| corrupt("seed", e)))
                .transpose()?,
            pool_of: get_opt_i64(r, "pool_of")?,
            owner_is_admin: get_i64(r, "owner_is_admin")? != 0,
        })
    }
}

/// Everything needed to insert a workspace; objects and variables in plain text (sealed here).
#[derive(Debug, Clone)]
pub struct NewWorkspace {
    pub name: String,
    pub owner_id: UserId,
    pub agent_id: AgentId,
    pub project_id: Option<ProjectId>,
    pub git_ref: Option<String>,
    /// The repository opened without a project.
    pub repository: Option<String>,
    /// The repository's file chosen as the definition.
    pub definition_path: Option<String>,
    pub devfile: String,
    pub resources: WorkspaceResources,
    pub variables: Vec<StoredVariable>,
    /// The starter project asked for at creation.
    pub starter: Option<String>,
    /// The space it lives in.
    pub space_id: SpaceId,
    /// The prebuild it is the run of (no user lists or opens it).
    pub prebuild_id: Option<i64>,
    /// The prebuild its volumes start from.
    pub seed: Option<StoredSeed>,
    /// The prebuild it is made from for its project's warm pool.
    pub pool_of: Option<i64>,
}

/// Filters of the workspace list.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceFilter {
    pub owner: Option<UserId>,
    /// Only those this user owns or holds a role on (a membership of their space or of one
    /// above it, theirs or a group's they belong to at `now`).
    pub visible_to: Option<UserId>,
    /// The time at which group memberships are judged (those of `oidc` groups expire).
    pub now: i64,
    /// With `visible_to`: the spaces the user holds a role on, when the caller has them at
    /// hand (the tree): matched by id instead of asking the memberships row by row.
    pub role_spaces: Option<Vec<SpaceId>>,
    /// In this space (by path), or (with `recursive`) in it or below it.
    pub space: Option<String>,
    pub recursive: bool,
    pub agent: Option<AgentId>,
    pub project: Option<ProjectId>,
    /// Matches the actual state.
    pub state: Option<ActualState>,
    /// Include workspaces both desired and actual `Terminated`.
    pub include_terminated: bool,
    /// Include prebuilds' own workspaces (no user's list shows them).
    pub include_prebuilds: bool,
    /// Only ids greater than this (cursor).
    pub after: Option<i64>,
    pub limit: i64,
}

pub use super::prebuilds::StoredSeed;
pub use super::quota::QuotaCounts;
pub use super::rendered::RenderedObjects;
pub use super::timers::TimerRow;

/// The assignment of a new desired state at `$d` and time `$now`, the one way every writer
/// sets it. `desired_state_updated_at` never goes below the last response to the agent, so
/// a server whose clock lags cannot hide a change from partial reconciliation, and the row
/// is flagged for the next response.
/// `idle` marks the assignment as the idle timeout's stop (any other assignment clears the
/// mark), which lets a request wake the workspace.
pub(crate) fn set_desired_sql(d: usize, now: usize, by: ChangedBy) -> String {
    format!(
        "desired_state = ${d}, desired_state_updated_at = CASE WHEN responded_to_agent_at IS NOT NULL \
         AND responded_to_agent_at > ${now} THEN responded_to_agent_at ELSE ${now} END, needs_response = 1, \
         idle_stopped = {}, schedule_stopped = {}",
        i64::from(by == ChangedBy::IdleTimeout),
        i64::from(by == ChangedBy::WorkingHours)
    )
}

/// What moved a workspace's desired state, as the flags that remember it say: a request may
/// undo the idle timeout's stop (a wake), and the working hours' start undoes their stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangedBy {
    /// A user, another timer, a reconcile.
    Other,
    IdleTimeout,
    WorkingHours,
    Budget,
}

impl Store {
    /// Inserts a workspace, atomically with the caller's quota check (the agent row is
    /// locked on PostgreSQL; SQLite's write transaction is exclusive): `check` gets the
    /// agent's counts, `render` the new id (the objects carry it), both inside the
    /// transaction, and either refusing rolls it back.
    pub async fn insert_workspace<E, C, R>(
        &self,
        w: &NewWorkspace,
        now: i64,
        check: C,
        render: R,
    ) -> Result<WorkspaceRow, E>
    where
        E: From<StoreError>,
        C: FnOnce(QuotaCounts) -> Result<(), E>,
        R: FnOnce(WorkspaceId) -> Result<RenderedObjects, E>,
    {
        let mut tx = self.db.begin().await.map_err(StoreError::from)?;
        if self.db.kind == DbKind::Postgres {
            sqlx::query("SELECT id FROM agents WHERE id = $1 FOR UPDATE")
                .bind(w.agent_id.get())
                .fetch_optional(&mut *tx)
                .await
                .map_err(StoreError::from)?;
        }
        let counts = super::quota::quota_counts(&mut tx, w.agent_id, w.owner_id).await?;
        check(counts)?;
        // A name is a host name: a mount may hold it too.
        let mount = sqlx::query("SELECT 1 FROM mounts WHERE name = $1")
            .bind(&w.name)
            .fetch_optional(&mut *tx)
            .await
            .map_err(StoreError::from)?;
        if mount.is_some() {
            return Err(StoreError::Conflict("workspaces.name").into());
        }
        let id = sqlx::query(
            "INSERT INTO workspaces (name, namespace, owner_id, agent_id, project_id, git_ref, desired_state, \
             actual_state, desired_state_updated_at, actual_state_updated_at, force_include_all_resources, devfile, \
             rendered_objects, resources, variables, endpoints, url, created_at, updated_at, version, starter, space_id, repository, definition_path, prebuild_id, seed, pool_of) \
             VALUES ($1, '', $2, $3, $4, $5, 'Running', 'CreationRequested', $6, $6, 1, $7, '', $8, $9, '{}', NULL, $6, $6, 1, $10, $11, $12, $13, $14, $15, $16) \
             RETURNING id",
        )
        .bind(&w.name)
        .bind(w.owner_id.get())
        .bind(w.agent_id.get())
        .bind(w.project_id.map(|p| p.get()))
        .bind(w.git_ref.clone())
        .bind(now)
        .bind(&w.devfile)
        .bind(serde_json::to_string(&w.resources).unwrap_or_default())
        .bind(seal_json(self, &w.variables))
        .bind(w.starter.clone())
        .bind(w.space_id.get())
        .bind(w.repository.clone())
        .bind(w.definition_path.clone())
        .bind(w.prebuild_id)
        .bind(w.seed.as_ref().map(|s| serde_json::to_string(s).unwrap_or_default()))
        .bind(w.pool_of)
        .fetch_one(&mut *tx)
        .await
        .map_err(unique("workspaces.name"))?;
        let id = WorkspaceId(get_i64(&id, "id").map_err(StoreError::from)?);
        let r = render(id)?;
        sqlx::query(
            "UPDATE workspaces SET namespace = $1, rendered_objects = $2, endpoints = $3, url = $4, \
             config_running = $6, config_stopped = $7, config_generation = $8 WHERE id = $5",
        )
        .bind(&r.namespace)
        .bind(seal_json(self, &r.objects))
        .bind(serde_json::to_string(&r.endpoints).unwrap_or_default())
        .bind(r.url)
        .bind(id.get())
        .bind(self.sbox.seal(r.config_running.as_bytes()))
        .bind(self.sbox.seal(r.config_stopped.as_bytes()))
        .bind(&r.config_generation)
        .execute(&mut *tx)
        .await
        .map_err(StoreError::from)?;
        tx.commit().await.map_err(StoreError::from)?;
        Ok(self
            .workspace_by_id(id)
            .await?
            .ok_or(StoreError::NotFound("the new workspace"))?)
    }

    pub async fn workspace_by_id(
        &self,
        id: WorkspaceId,
    ) -> Result<Option<WorkspaceRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM {FROM} WHERE w.id = $1")).bind(id.get()),
        )
        .await
    }

    /// A workspace by the name users know it by: never a hidden one (no one opens, changes or
    /// mounts a prebuild's own or one waiting in a warm pool).
    pub async fn workspace_by_name(&self, name: &str) -> Result<Option<WorkspaceRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!(
                "SELECT {COLS} FROM {FROM} WHERE w.name = $1 AND {SHOWN}"
            ))
            .bind(name),
        )
        .await
    }

    /// A workspace by name, a prebuild's own too: only for what an agent asks of its own.
    pub async fn agent_workspace_by_name(
        &self,
        name: &str,
    ) -> Result<Option<WorkspaceRow>, StoreError> {
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM {FROM} WHERE w.name = $1")).bind(name),
        )
        .await
    }

    /// A workspace by name, or by id when `key` is all digits; never a hidden one.
    pub async fn workspace_by_key(&self, key: &str) -> Result<Option<WorkspaceRow>, StoreError> {
        if let Ok(id) = key.parse::<i64>() {
            let found = self.workspace_by_id(WorkspaceId(id)).await?;
            if let Some(w) = found.filter(|w| !w.is_hidden()) {
                return Ok(Some(w));
            }
        }
        self.workspace_by_name(key).await
    }

    pub async fn list_workspaces(
        &self,
        f: &WorkspaceFilter,
    ) -> Result<Vec<WorkspaceRow>, StoreError> {
        let (filter, mut binds) = filter_sql(f);
        binds.push(Bind::I(f.limit));
        let sql = format!(
            "SELECT {COLS} FROM {FROM}{filter} ORDER BY w.id LIMIT ${}",
            binds.len()
        );
        let rows = bind_all(sqlx::query(&sql), &binds)
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows
            .iter()
            .map(WorkspaceRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// The workspaces `f` selects as the tree shows them: only the columns it draws, so a tree
    /// of many thousands stays cheap (in no order: the tree sorts what it draws).
    pub async fn tree_entries(&self, f: &WorkspaceFilter) -> Result<Vec<TreeRow>, StoreError> {
        let (filter, mut binds) = filter_sql(f);
        binds.push(Bind::I(f.limit));
        let inner = format!(
            "SELECT w.name, u.username AS owner_username, sp.path AS space_path, \
             w.desired_state, w.actual_state, w.url, w.failure_reason, \
             a.runtime_fault AS agent_runtime_fault \
             FROM workspaces w JOIN users u ON u.id = w.owner_id \
             JOIN agents a ON a.id = w.agent_id LEFT JOIN spaces sp ON sp.id = w.space_id\
             {filter} LIMIT ${}",
            binds.len()
        );
        // One row holding every entry as JSON: thousands of rows through the `Any` driver
        // cost more than the query itself.
        let cols = "t.name, t.owner_username, t.space_path, t.desired_state, t.actual_state, \
                    t.url, t.failure_reason, t.agent_runtime_fault";
        let sql = match self.db.kind {
            DbKind::Sqlite => {
                format!("SELECT json_group_array(json_array({cols})) AS j FROM ({inner}) t")
            }
            DbKind::Postgres => format!(
                "SELECT COALESCE(json_agg(json_build_array({cols})), '[]')::text AS j \
                 FROM ({inner}) t"
            ),
        };
        let row = bind_all(sqlx::query(&sql), &binds)
            .fetch_one(&self.db.pool)
            .await?;
        type Raw = (
            String,
            String,
            Option<String>,
            String,
            String,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let raw: Vec<Raw> =
            serde_json::from_str(&get_str(&row, "j")?).map_err(|e| corrupt("tree listing", e))?;
        raw.into_iter()
            .map(
                |(name, owner, space, desired, actual, url, failure, fault)| {
                    Ok(TreeRow {
                        name,
                        owner_username: owner,
                        space_path: space.unwrap_or_default(),
                        desired_state: desired.parse().map_err(|e| corrupt("desired state", e))?,
                        actual_state: actual.parse().map_err(|e| corrupt("actual state", e))?,
                        url,
                        failure_reason: failure,
                        agent_runtime_fault: fault,
                    })
                },
            )
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Writes a new desired state if the row still has `version`; `Ok(None)` on a lost race.
    /// `idle`: the idle timeout's stop (see [`set_desired_sql`]).
    pub async fn set_desired_state(
        &self,
        id: WorkspaceId,
        version: i64,
        desired: DesiredState,
        now: i64,
        by: ChangedBy,
    ) -> Result<Option<()>, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE workspaces SET {}, updated_at = $2, version = version + 1 WHERE id = $3 AND version = $4",
            set_desired_sql(1, 2, by)
        ))
        .bind(desired.as_str())
        .bind(now)
        .bind(id.get())
        .bind(version)
        .execute(&self.db.pool)
        .await?;
        Ok((r.rows_affected() == 1).then_some(()))
    }

    /// Stores what a workspace renders to now — objects, endpoints, URL, size and desired
    /// state — forcing a full send; with `devfile`, its new definition too (a rebuild). Only
    /// when the row is still at `version` (`None`: it changed meanwhile).
    #[allow(clippy::too_many_arguments)]
    pub async fn set_rendered(
        &self,
        id: WorkspaceId,
        version: i64,
        rendered: &RenderedObjects,
        resources: &WorkspaceResources,
        desired: DesiredState,
        now: i64,
        devfile: Option<&str>,
    ) -> Result<Option<()>, StoreError> {
        let r = sqlx::query(&format!(
            "UPDATE workspaces SET rendered_objects = $1, resources = $2, {}, \
             force_include_all_resources = 1, config_running = $7, config_stopped = $8, \
             endpoints = $9, url = $10, devfile = COALESCE($11, devfile), config_generation = $12, \
             updated_at = $4, version = version + 1 WHERE id = $5 AND version = $6",
            set_desired_sql(3, 4, ChangedBy::Other)
        ))
        .bind(seal_json(self, &rendered.objects))
        .bind(serde_json::to_string(resources).unwrap_or_default())
        .bind(desired.as_str())
        .bind(now)
        .bind(id.get())
        .bind(version)
        .bind(self.sbox.seal(rendered.config_running.as_bytes()))
        .bind(self.sbox.seal(rendered.config_stopped.as_bytes()))
        .bind(serde_json::to_string(&rendered.endpoints).unwrap_or_default())
        .bind(rendered.url.clone())
        .bind(devfile)
        .bind(&rendered.config_generation)
        .execute(&self.db.pool)
        .await?;
        Ok((r.rows_affected() == 1).then_some(()))
    }

    /// Records why a workspace cannot follow a change (shown to its owner).
    pub async fn set_failure_reason(
        &self,
        id: WorkspaceId,
        reason: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE workspaces SET failure_reason = $1, version = version + 1 WHERE id = $2",
        )
        .bind(reason)
        .bind(id.get())
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Workspaces per (desired, actual) state, for metrics.
    pub async fn count_by_state(&self) -> Result<Vec<(String, String, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT desired_state, actual_state, COUNT(*) AS n FROM workspaces GROUP BY desired_state, actual_state",
        )
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|r| {
                Ok((
                    get_str(r, "desired_state")?,
                    get_str(r, "actual_state")?,
                    get_i64(r, "n")?,
                ))
            })
            .collect::<Result<_, sqlx::Error>>()?)
    }
}
