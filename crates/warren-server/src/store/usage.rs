//! Usage by the hour (issue 44, item 3): the running workspaces a sample looks at, the hourly
//! rows it adds to (with the cursor that keeps an interval from being counted twice, in the
//! same transaction), the sums a report asks for, and retention. What counts and how is
//! `app::usage`'s.

use super::{bind_all, get_i64, get_opt_i64, get_str, Bind, Store, StoreError};
use warren_types::api::{UsageBy, UsageRow};
use warren_types::{AgentId, SpaceId, UserId, WorkspaceId};

/// A running workspace as a sample sees it.
#[derive(Debug, Clone)]
pub struct Running {
    pub id: WorkspaceId,
    pub name: String,
    pub owner_id: UserId,
    pub owner: String,
    pub space: String,
    pub agent_id: AgentId,
    /// The stored `WorkspaceResources` JSON.
    pub resources: String,
}

/// What one workspace adds to one hour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accrual {
    pub workspace_id: WorkspaceId,
    pub hour: i64,
    pub workspace: String,
    pub owner_id: UserId,
    pub owner: String,
    pub space: String,
    pub agent: String,
    pub class: String,
    pub running_ms: i64,
    pub weighted_ms: i64,
    pub cpu_mcore_s: i64,
    pub memory_mib_s: i64,
    pub storage_mib_s: i64,
    /// What the agent measured it using.
    pub cpu_used_mcore_s: i64,
    pub memory_used_mib_s: i64,
}

/// Which rows a report sums.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub by: UsageBy,
    /// Hours from `since` (inclusive) to `until` (exclusive), as hour starts in ms.
    pub since: i64,
    pub until: i64,
    /// In this space or below.
    pub space: Option<String>,
    /// Only rows of workspaces this user owned, or that ran in one of `spaces` or below.
    pub visible_to: Option<(UserId, Vec<String>)>,
}

/// A budget as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    pub space: String,
    pub weighted_hours: i64,
    pub admins_exempt: bool,
    /// When the sampler found it spent (possibly in an earlier month: see `app::budgets`).
    pub spent_at: Option<i64>,
}

const CURSOR_ID: i64 = 1;

impl Store {
    /// The end of the last interval counted, if any was.
    pub async fn usage_cursor(&self) -> Result<Option<i64>, StoreError> {
        let r = sqlx::query("SELECT last_ms FROM usage_cursor WHERE id = $1")
            .bind(CURSOR_ID)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(r.map(|r| get_i64(&r, "last_ms")).transpose()?)
    }

    /// Every workspace running now.
    pub async fn running_for_usage(&self) -> Result<Vec<Running>, StoreError> {
        self.usage_subjects("w.actual_state = 'Running'", &[]).await
    }

    /// The workspaces of `agent` named in `names`, in any state (what a workspace used
    /// before it stopped is reported after).
    pub async fn agent_usage_subjects(
        &self,
        agent: AgentId,
        names: &[String],
    ) -> Result<Vec<Running>, StoreError> {
        if names.is_empty() {
            return Ok(vec![]);
        }
        let mut binds = vec![Bind::I(agent.get())];
        binds.extend(names.iter().map(|n| Bind::S(n.clone())));
        let list: Vec<String> = (2..=binds.len()).map(|i| format!("${i}")).collect();
        let cond = format!("w.agent_id = $1 AND w.name IN ({})", list.join(", "));
        self.usage_subjects(&cond, &binds).await
    }

    async fn usage_subjects(&self, cond: &str, binds: &[Bind]) -> Result<Vec<Running>, StoreError> {
        let sql = format!(
            "SELECT w.id, w.name, w.owner_id, u.username, sp.path, w.agent_id, w.resources \
             FROM workspaces w JOIN users u ON u.id = w.owner_id \
             JOIN spaces sp ON sp.id = w.space_id WHERE {cond}"
        );
        let rows = bind_all(sqlx::query(&sql), binds)
            .fetch_all(&self.db.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Running {
                    id: WorkspaceId(get_i64(r, "id")?),
                    name: get_str(r, "name")?,
                    owner_id: UserId(get_i64(r, "owner_id")?),
                    owner: get_str(r, "username")?,
                    space: get_str(r, "path")?,
                    agent_id: AgentId(get_i64(r, "agent_id")?),
                    resources: get_str(r, "resources")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Adds `accruals` to their hours and moves the cursor from `from` to `to`, in one
    /// transaction; false (nothing added) when the cursor is no longer at `from` — another
    /// replica counted the interval meanwhile.
    pub async fn add_usage(
        &self,
        from: Option<i64>,
        to: i64,
        accruals: &[Accrual],
    ) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        let moved = match from {
            Some(from) => {
                sqlx::query("UPDATE usage_cursor SET last_ms = $1 WHERE id = $2 AND last_ms = $3")
                    .bind(to)
                    .bind(CURSOR_ID)
                    .bind(from)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected()
            }
            None => sqlx::query(
                "INSERT INTO usage_cursor (id, last_ms) VALUES ($1, $2) \
                     ON CONFLICT (id) DO NOTHING",
            )
            .bind(CURSOR_ID)
            .bind(to)
            .execute(&mut *tx)
            .await?
            .rows_affected(),
        };
        if moved != 1 {
            return Ok(false);
        }
        for a in accruals {
            add_accrual(&mut tx, a).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Adds what agents measured (`accruals` of used amounts only) to their hours.
    pub async fn add_used(&self, accruals: &[Accrual]) -> Result<(), StoreError> {
        let mut tx = self.db.begin().await?;
        for a in accruals {
            add_accrual(&mut tx, a).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// The sums `f` asks for, largest running time first.
    pub async fn usage_report(&self, f: &UsageFilter) -> Result<Vec<UsageRow>, StoreError> {
        let key = match f.by {
            UsageBy::Workspace => "workspace",
            UsageBy::User => "owner",
            UsageBy::Space => "space",
            UsageBy::Class => "class",
        };
        let mut binds = vec![Bind::I(f.since), Bind::I(f.until)];
        let mut sql = format!(
            "SELECT {key} AS k, COUNT(DISTINCT workspace_id) AS n, CAST(SUM(running_ms) AS BIGINT) AS running, \
             CAST(SUM(weighted_ms) AS BIGINT) AS weighted, CAST(SUM(cpu_mcore_s) AS BIGINT) AS cpu, CAST(SUM(memory_mib_s) AS BIGINT) AS mem, \
             CAST(SUM(storage_mib_s) AS BIGINT) AS storage, CAST(SUM(cpu_used_mcore_s) AS BIGINT) AS cpu_used, \
             CAST(SUM(memory_used_mib_s) AS BIGINT) AS mem_used FROM usage_hours WHERE hour >= $1 AND hour < $2"
        );
        let under = |path: &str, binds: &mut Vec<Bind>| {
            binds.push(Bind::S(path.to_owned()));
            let n = binds.len();
            binds.push(Bind::S(format!("{path}/")));
            format!(
                "(space = ${n} OR substr(space, 1, length(${m})) = ${m})",
                m = n + 1
            )
        };
        if let Some(p) = &f.space {
            let cond = under(p, &mut binds);
            sql.push_str(&format!(" AND {cond}"));
        }
        if let Some((user, spaces)) = &f.visible_to {
            binds.push(Bind::I(user.get()));
            let mut conds = vec![format!("owner_id = ${}", binds.len())];
            for s in spaces {
                conds.push(under(s, &mut binds));
            }
            sql.push_str(&format!(" AND ({})", conds.join(" OR ")));
        }
        sql.push_str(" GROUP BY k ORDER BY running DESC, k");
        let rows = bind_all(sqlx::query(&sql), &binds)
            .fetch_all(&self.db.pool)
            .await?;
        let hours = |ms: i64| ms as f64 / 3_600_000.0;
        let per_hour = |s: i64, unit: f64| s as f64 / 3600.0 / unit;
        rows.iter()
            .map(|r| {
                Ok(UsageRow {
                    key: get_str(r, "k")?,
                    workspaces: get_i64(r, "n")?,
                    running_hours: hours(get_i64(r, "running")?),
                    weighted_hours: hours(get_i64(r, "weighted")?),
                    cpu_core_hours: per_hour(get_i64(r, "cpu")?, 1000.0),
                    memory_gib_hours: per_hour(get_i64(r, "mem")?, 1024.0),
                    storage_gib_hours: per_hour(get_i64(r, "storage")?, 1024.0),
                    cpu_used_core_hours: per_hour(get_i64(r, "cpu_used")?, 1000.0),
                    memory_used_gib_hours: per_hour(get_i64(r, "mem_used")?, 1024.0),
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Weighted milliseconds run in `space` or below from `since`.
    pub async fn weighted_ms_under(&self, space: &str, since: i64) -> Result<i64, StoreError> {
        let r = sqlx::query(
            "SELECT CAST(COALESCE(SUM(weighted_ms), 0) AS BIGINT) AS w FROM usage_hours \
             WHERE hour >= $1 AND (space = $2 OR substr(space, 1, length($3)) = $3)",
        )
        .bind(since)
        .bind(space)
        .bind(format!("{space}/"))
        .fetch_one(&self.db.pool)
        .await?;
        Ok(get_i64(&r, "w")?)
    }

    /// The budgets set on any of `paths`: (path, weighted hours, admins exempt).
    pub async fn budgets_on(&self, paths: &[String]) -> Result<Vec<Budget>, StoreError> {
        if paths.is_empty() {
            return Ok(vec![]);
        }
        let list: Vec<String> = (1..=paths.len()).map(|i| format!("${i}")).collect();
        let binds: Vec<Bind> = paths.iter().map(|p| Bind::S(p.clone())).collect();
        self.budgets_where(&format!("s.path IN ({})", list.join(", ")), &binds)
            .await
    }

    /// Every budget.
    pub async fn all_budgets(&self) -> Result<Vec<Budget>, StoreError> {
        self.budgets_where("1 = 1", &[]).await
    }

    /// The budgets found spent from `since` on.
    pub async fn spent_budgets(&self, since: i64) -> Result<Vec<Budget>, StoreError> {
        self.budgets_where("b.spent_at >= $1", &[Bind::I(since)])
            .await
    }

    async fn budgets_where(&self, cond: &str, binds: &[Bind]) -> Result<Vec<Budget>, StoreError> {
        let sql = format!(
            "SELECT s.path, b.weighted_hours, b.admins_exempt, b.spent_at FROM space_budgets b \
             JOIN spaces s ON s.id = b.space_id WHERE {cond} ORDER BY s.path"
        );
        let rows = bind_all(sqlx::query(&sql), binds)
            .fetch_all(&self.db.pool)
            .await?;
        rows.iter()
            .map(|r| {
                Ok(Budget {
                    space: get_str(r, "path")?,
                    weighted_hours: get_i64(r, "weighted_hours")?,
                    admins_exempt: get_i64(r, "admins_exempt")? != 0,
                    spent_at: get_opt_i64(r, "spent_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// Marks the budget of the space at `path` spent at `at` unless it was marked from
    /// `since` on; whether this call marked it (two replicas never both do).
    pub async fn mark_budget_spent(
        &self,
        path: &str,
        at: i64,
        since: i64,
    ) -> Result<bool, StoreError> {
        let r = sqlx::query(
            "UPDATE space_budgets SET spent_at = $1 \
             WHERE space_id = (SELECT id FROM spaces WHERE path = $2) \
             AND (spent_at IS NULL OR spent_at < $3)",
        )
        .bind(at)
        .bind(path)
        .bind(since)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Lifts the mark of the budget of the space at `path`.
    pub async fn clear_budget_spent(&self, path: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE space_budgets SET spent_at = NULL \
             WHERE space_id = (SELECT id FROM spaces WHERE path = $1)",
        )
        .bind(path)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Sets the budget of a space.
    pub async fn set_budget(
        &self,
        space: SpaceId,
        weighted_hours: i64,
        admins_exempt: bool,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO space_budgets (space_id, weighted_hours, admins_exempt, updated_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (space_id) DO UPDATE SET \
             weighted_hours = excluded.weighted_hours, admins_exempt = excluded.admins_exempt, \
             updated_at = excluded.updated_at, spent_at = NULL",
        )
        .bind(space.get())
        .bind(weighted_hours)
        .bind(i64::from(admins_exempt))
        .bind(now)
        .execute(&self.db.pool)
        .await?;
        Ok(())
    }

    /// Removes the budget of a space; false when it had none.
    pub async fn remove_budget(&self, space: SpaceId) -> Result<bool, StoreError> {
        let r = sqlx::query("DELETE FROM space_budgets WHERE space_id = $1")
            .bind(space.get())
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Removes the hours before `before`; how many rows went.
    pub async fn prune_usage(&self, before: i64) -> Result<u64, StoreError> {
        let r = sqlx::query("DELETE FROM usage_hours WHERE hour < $1")
            .bind(before)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected())
    }
}

/// Adds one accrual to its hour's row (made with the names it carries when missing).
async fn add_accrual(tx: &mut crate::db::Tx, a: &Accrual) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO usage_hours (workspace_id, hour, workspace, owner_id, owner, space, \
         agent, class, running_ms, weighted_ms, cpu_mcore_s, memory_mib_s, storage_mib_s, \
         cpu_used_mcore_s, memory_used_mib_s) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
         ON CONFLICT (workspace_id, hour) DO UPDATE SET \
         workspace = excluded.workspace, owner = excluded.owner, \
         space = excluded.space, agent = excluded.agent, class = excluded.class, \
         running_ms = usage_hours.running_ms + excluded.running_ms, \
         weighted_ms = usage_hours.weighted_ms + excluded.weighted_ms, \
         cpu_mcore_s = usage_hours.cpu_mcore_s + excluded.cpu_mcore_s, \
         memory_mib_s = usage_hours.memory_mib_s + excluded.memory_mib_s, \
         storage_mib_s = usage_hours.storage_mib_s + excluded.storage_mib_s, \
         cpu_used_mcore_s = usage_hours.cpu_used_mcore_s + excluded.cpu_used_mcore_s, \
         memory_used_mib_s = usage_hours.memory_used_mib_s + excluded.memory_used_mib_s",
    )
    .bind(a.workspace_id.get())
    .bind(a.hour)
    .bind(&a.workspace)
    .bind(a.owner_id.get())
    .bind(&a.owner)
    .bind(&a.space)
    .bind(&a.agent)
    .bind(&a.class)
    .bind(a.running_ms)
    .bind(a.weighted_ms)
    .bind(a.cpu_mcore_s)
    .bind(a.memory_mib_s)
    .bind(a.storage_mib_s)
    .bind(a.cpu_used_mcore_s)
    .bind(a.memory_used_mib_s)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
