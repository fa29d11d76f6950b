//! Projects: a git repository, its default ref, the devfile's path, optionally its text;
//! its sealed credential, its visibility and its members.

use super::error::unique;
use super::members::PROJECT_MEMBERS;
use super::{get_i64, get_opt_i64, get_opt_str, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use sqlx::FromRow;
use warren_types::api::{Project, ProjectMember, ProjectRole, ProjectVisibility};
use warren_types::git::GitCredential;
use warren_types::{AgentId, ProjectId, UserId};

#[derive(Debug, Clone)]
pub struct ProjectRow {
    pub id: ProjectId,
    pub name: String,
    pub git_url: String,
    pub default_ref: String,
    pub devfile_path: String,
    pub devfile: Option<String>,
    pub visibility: ProjectVisibility,
    /// The sealed credential, opened only where it is used ([`Store::project_credential`]).
    pub credential_sealed: Option<String>,
    pub created_at: i64,
    /// Where its prebuilds run, while it has them, and the maintainer they run as.
    pub prebuild_agent_id: Option<AgentId>,
    pub prebuild_by: Option<UserId>,
    /// The refs prebuilt besides the default ref, and how often a ref gets a prebuild of an
    /// unchanged commit (hours; `None`: on pushes only).
    pub prebuild_refs: Vec<String>,
    pub prebuild_every_hours: Option<i64>,
    /// The size of its warm pool (`None`: no pool).
    pub prebuild_pool: Option<i64>,
}

impl ProjectRow {
    /// The refs its prebuilds are of: the default ref first, then the others asked for.
    pub fn prebuilt_refs(&self) -> Vec<&str> {
        let mut refs = vec![self.default_ref.as_str()];
        for r in &self.prebuild_refs {
            if !refs.contains(&r.as_str()) {
                refs.push(r);
            }
        }
        refs
    }

    /// The API's view; `credential_kind` is the stored credential's kind, if any.
    pub fn to_api(&self, credential_kind: Option<&str>) -> Project {
        Project {
            id: self.id,
            name: self.name.clone(),
            git_url: self.git_url.clone(),
            default_ref: self.default_ref.clone(),
            devfile_path: self.devfile_path.clone(),
            has_devfile: self.devfile.is_some(),
            visibility: self.visibility,
            credential: credential_kind.map(str::to_owned),
            created_at: from_millis(self.created_at),
            prebuild_agent: None,
            prebuild_refs: vec![],
            prebuild_every_hours: None,
            prebuild_pool: None,
        }
    }
}

const COLS: &str =
    "id, name, git_url, default_ref, devfile_path, devfile, visibility, credential, created_at, \
    prebuild_agent_id, prebuild_by, prebuild_refs, prebuild_every_hours, prebuild_pool";

fn visibility(s: &str) -> ProjectVisibility {
    match s {
        "internal" => ProjectVisibility::Internal,
        // Anything unknown is the safer of the two.
        _ => ProjectVisibility::Private,
    }
}

fn role(s: &str) -> ProjectRole {
    match s {
        "maintainer" => ProjectRole::Maintainer,
        _ => ProjectRole::Developer,
    }
}

impl sqlx::FromRow<'_, AnyRow> for ProjectRow {
    fn from_row(r: &AnyRow) -> Result<Self, sqlx::Error> {
        Ok(ProjectRow {
            id: ProjectId(get_i64(r, "id")?),
            name: get_str(r, "name")?,
            git_url: get_str(r, "git_url")?,
            default_ref: get_str(r, "default_ref")?,
            devfile_path: get_str(r, "devfile_path")?,
            devfile: get_opt_str(r, "devfile")?,
            visibility: visibility(&get_str(r, "visibility")?),
            credential_sealed: get_opt_str(r, "credential")?,
            created_at: get_i64(r, "created_at")?,
            prebuild_agent_id: get_opt_i64(r, "prebuild_agent_id")?.map(AgentId),
            prebuild_by: get_opt_i64(r, "prebuild_by")?.map(UserId),
            prebuild_refs: refs_column(get_opt_str(r, "prebuild_refs")?.as_deref())?,
            prebuild_every_hours: get_opt_i64(r, "prebuild_every_hours")?,
            prebuild_pool: get_opt_i64(r, "prebuild_pool")?,
        })
    }
}

/// A JSON array of refs as `projects.prebuild_refs` keeps it (NULL: none).
pub(crate) fn refs_column(text: Option<&str>) -> Result<Vec<String>, sqlx::Error> {
    text.map_or(Ok(vec![]), |t| {
        serde_json::from_str(t).map_err(|e| sqlx::Error::Decode(Box::new(e)))
    })
}

/// A project to insert, validated by the caller.
#[derive(Debug, Clone)]
pub struct NewProject {
    pub name: String,
    pub git_url: String,
    pub default_ref: String,
    pub devfile_path: String,
    pub devfile: Option<String>,
    pub created_by: UserId,
    pub visibility: ProjectVisibility,
    pub credential: Option<GitCredential>,
}

impl Store {
    /// Inserts a project with its creator as its first maintainer.
    pub async fn insert_project(&self, p: &NewProject, now: i64) -> Result<ProjectRow, StoreError> {
        let sealed = p.credential.as_ref().map(|c| self.seal_credential(c));
        let mut tx = self.db.begin().await?;
        let r = sqlx::query(&format!(
            "INSERT INTO projects (name, git_url, default_ref, devfile_path, devfile, created_by, \
             created_at, visibility, credential) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {COLS}"
        ))
        .bind(&p.name)
        .bind(&p.git_url)
        .bind(&p.default_ref)
        .bind(&p.devfile_path)
        .bind(p.devfile.clone())
        .bind(p.created_by.get())
        .bind(now)
        .bind(p.visibility.as_str())
        .bind(sealed)
        .fetch_one(&mut *tx)
        .await
        .map_err(unique("projects.name"))?;
        let project = ProjectRow::from_row(&r)?;
        sqlx::query(
            "INSERT INTO project_members (project_id, user_id, role, created_at) VALUES ($1, $2, $3, $4)",
        )
        .bind(project.id.get())
        .bind(p.created_by.get())
        .bind(ProjectRole::Maintainer.as_str())
        .bind(now)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(project)
    }

    fn seal_credential(&self, c: &GitCredential) -> String {
        super::workspaces::seal_json(self, c)
    }

    /// The project's credential, opened.
    pub fn project_credential(&self, p: &ProjectRow) -> Result<Option<GitCredential>, StoreError> {
        p.credential_sealed
            .as_deref()
            .map(|s| super::workspaces::open_json(self, s, "project credential"))
            .transpose()
    }

    /// Replaces (or with `None` removes) the project's credential.
    pub async fn set_project_credential(
        &self,
        id: ProjectId,
        credential: Option<&GitCredential>,
    ) -> Result<bool, StoreError> {
        let sealed = credential.map(|c| self.seal_credential(c));
        let r = sqlx::query("UPDATE projects SET credential = $2 WHERE id = $1")
            .bind(id.get())
            .bind(sealed)
            .execute(&self.db.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Writes the fields a maintainer may change.
    pub async fn update_project(
        &self,
        id: ProjectId,
        visibility: ProjectVisibility,
        default_ref: &str,
        devfile_path: &str,
        git_url: &str,
    ) -> Result<Option<ProjectRow>, StoreError> {
        self.optional(sqlx::query_as(&format!(
            "UPDATE projects SET visibility = $2, default_ref = $3, devfile_path = $4, git_url = $5 \
             WHERE id = $1 RETURNING {COLS}"
        )).bind(id.get()).bind(visibility.as_str()).bind(default_ref).bind(devfile_path).bind(git_url)).await
    }

    /// The user's role on the project, if a member.
    pub async fn project_role(
        &self,
        project: ProjectId,
        user: UserId,
    ) -> Result<Option<ProjectRole>, StoreError> {
        let r =
            sqlx::query("SELECT role FROM project_members WHERE project_id = $1 AND user_id = $2")
                .bind(project.get())
                .bind(user.get())
                .fetch_optional(&self.db.pool)
                .await?;
        Ok(r.as_ref()
            .map(|r| get_str(r, "role"))
            .transpose()?
            .map(|s| role(&s)))
    }

    pub async fn project_members(
        &self,
        project: ProjectId,
    ) -> Result<Vec<ProjectMember>, StoreError> {
        let members = self.members(PROJECT_MEMBERS, project.get()).await?;
        Ok(members
            .into_iter()
            .map(|m| ProjectMember {
                user_id: m.user_id,
                username: m.username,
                role: role(&m.role),
                created_at: m.created_at,
            })
            .collect())
    }

    /// Adds a member or changes their role.
    pub async fn set_project_member(
        &self,
        project: ProjectId,
        user: UserId,
        role: ProjectRole,
        now: i64,
    ) -> Result<(), StoreError> {
        self.set_member(PROJECT_MEMBERS, project.get(), user, role.as_str(), now)
            .await
    }

    /// Removes a member unless they are its last maintainer; `Ok(None)` when they were not
    /// a member, `Ok(Some(false))` when refused.
    pub async fn remove_project_member(
        &self,
        project: ProjectId,
        user: UserId,
    ) -> Result<Option<bool>, StoreError> {
        if self.project_role(project, user).await?.is_none() {
            return Ok(None);
        }
        let r = sqlx::query(
            "DELETE FROM project_members WHERE project_id = $1 AND user_id = $2 AND (role <> 'maintainer' \
             OR EXISTS (SELECT 1 FROM project_members o WHERE o.project_id = $1 AND o.user_id <> $2 \
             AND o.role = 'maintainer'))",
        )
        .bind(project.get())
        .bind(user.get())
        .execute(&self.db.pool)
        .await?;
        Ok(Some(r.rows_affected() == 1))
    }

    /// Projects whose `git_url` may carry credentials (user information), for the move into
    /// sealed storage at start.
    pub async fn projects_with_userinfo(&self) -> Result<Vec<ProjectRow>, StoreError> {
        self.all(sqlx::query_as(&format!(
            "SELECT {COLS} FROM projects WHERE git_url LIKE '%://%@%' ORDER BY id"
        )))
        .await
    }

    /// Moves credentials out of a URL: the clean URL, the sealed credential, and private
    /// visibility, unless the row changed meanwhile.
    pub async fn move_url_credential(
        &self,
        id: ProjectId,
        old_url: &str,
        new_url: &str,
        credential: &GitCredential,
    ) -> Result<bool, StoreError> {
        let sealed = self.seal_credential(credential);
        let r = sqlx::query(
            "UPDATE projects SET git_url = $3, credential = $4, visibility = 'private' \
             WHERE id = $1 AND git_url = $2",
        )
        .bind(id.get())
        .bind(old_url)
        .bind(new_url)
        .bind(sealed)
        .execute(&self.db.pool)
        .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Every project, or (with `visible_to`) those internal or with that user as a member.
    pub async fn list_projects(
        &self,
        visible_to: Option<UserId>,
    ) -> Result<Vec<ProjectRow>, StoreError> {
        let rows = match visible_to {
            None => {
                sqlx::query(&format!("SELECT {COLS} FROM projects ORDER BY id"))
                    .fetch_all(&self.db.pool)
                    .await?
            }
            Some(u) => {
                sqlx::query(&format!(
                    "SELECT {COLS} FROM projects WHERE visibility = 'internal' OR EXISTS \
                     (SELECT 1 FROM project_members m WHERE m.project_id = projects.id AND m.user_id = $1) \
                     ORDER BY id"
                ))
                .bind(u.get())
                .fetch_all(&self.db.pool)
                .await?
            }
        };
        Ok(rows
            .iter()
            .map(ProjectRow::from_row)
            .collect::<Result<_, _>>()?)
    }

    /// A project by name, or by id when `key` is all digits.
    pub async fn project_by_key(&self, key: &str) -> Result<Option<ProjectRow>, StoreError> {
        if let Ok(id) = key.parse::<i64>() {
            let r = sqlx::query(&format!("SELECT {COLS} FROM projects WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.db.pool)
                .await?;
            if let Some(r) = r {
                return Ok(Some(ProjectRow::from_row(&r)?));
            }
        }
        self.optional(
            sqlx::query_as(&format!("SELECT {COLS} FROM projects WHERE name = $1")).bind(key),
        )
        .await
    }

    pub async fn delete_project(&self, id: ProjectId) -> Result<bool, StoreError> {
        let mut tx = self.db.begin().await?;
        // Workspaces keep running without their project; they only lose the link.
        sqlx::query("UPDATE workspaces SET project_id = NULL WHERE project_id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        let r = sqlx::query("DELETE FROM projects WHERE id = $1")
            .bind(id.get())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(r.rows_affected() > 0)
    }
}
