//! Projects: a git repository, its default ref, the devfile's path, optionally its text.

use super::error::unique;
use super::{get_i64, get_opt_str, get_str, Store, StoreError};
use crate::db::from_millis;
use sqlx::any::AnyRow;
use warren_types::api::Project;
use warren_types::{ProjectId, UserId};

#[derive(Debug, Clone)]
pub struct ProjectRow {
    pub id: ProjectId,
    pub name: String,
    pub git_url: String,
    pub default_ref: String,
    pub devfile_path: String,
    pub devfile: Option<String>,
    pub created_at: i64,
}

impl ProjectRow {
    pub fn to_api(&self) -> Project {
        Project {
            id: self.id,
            name: self.name.clone(),
            git_url: self.git_url.clone(),
            default_ref: self.default_ref.clone(),
            devfile_path: self.devfile_path.clone(),
            has_devfile: self.devfile.is_some(),
            created_at: from_millis(self.created_at),
        }
    }
}

const COLS: &str = "id, name, git_url, default_ref, devfile_path, devfile, created_at";

fn row(r: &AnyRow) -> Result<ProjectRow, sqlx::Error> {
    Ok(ProjectRow {
        id: ProjectId(get_i64(r, "id")?),
        name: get_str(r, "name")?,
        git_url: get_str(r, "git_url")?,
        default_ref: get_str(r, "default_ref")?,
        devfile_path: get_str(r, "devfile_path")?,
        devfile: get_opt_str(r, "devfile")?,
        created_at: get_i64(r, "created_at")?,
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
}

impl Store {
    pub async fn insert_project(&self, p: &NewProject, now: i64) -> Result<ProjectRow, StoreError> {
        let r = sqlx::query(&format!(
            "INSERT INTO projects (name, git_url, default_ref, devfile_path, devfile, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLS}"
        ))
        .bind(&p.name)
        .bind(&p.git_url)
        .bind(&p.default_ref)
        .bind(&p.devfile_path)
        .bind(p.devfile.clone())
        .bind(p.created_by.get())
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(unique("projects.name"))?;
        Ok(row(&r)?)
    }

    pub async fn list_projects(&self) -> Result<Vec<ProjectRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM projects ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        Ok(rows.iter().map(row).collect::<Result<_, _>>()?)
    }

    /// A project by name, or by id when `key` is all digits.
    pub async fn project_by_key(&self, key: &str) -> Result<Option<ProjectRow>, StoreError> {
        if let Ok(id) = key.parse::<i64>() {
            let r = sqlx::query(&format!("SELECT {COLS} FROM projects WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.db.pool)
                .await?;
            if let Some(r) = r {
                return Ok(Some(row(&r)?));
            }
        }
        let r = sqlx::query(&format!("SELECT {COLS} FROM projects WHERE name = $1"))
            .bind(key)
            .fetch_optional(&self.db.pool)
            .await?;
        Ok(r.as_ref().map(row).transpose()?)
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
