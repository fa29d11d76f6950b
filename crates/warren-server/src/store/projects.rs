//! Projects: a git repository, its default ref, the devfile's path, optionally its text.

use super::agents::validate_name;
use super::{get_i64, get_opt_str, get_str, is_unique_violation, Store};
use crate::db::from_millis;
use crate::error::HttpError;
use sqlx::any::AnyRow;
use warren_types::api::{CreateProjectRequest, Project};
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

/// Git URLs Warren can clone: http(s), ssh:// and scp-like `user@host:path`, or `file://`.
pub fn validate_git_url(u: &str) -> Result<(), String> {
    if u.len() > 2000 || u.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{u:?} is not a git URL"));
    }
    if let Ok(p) = url::Url::parse(u) {
        if ["http", "https", "ssh", "git", "file"].contains(&p.scheme()) {
            return Ok(());
        }
        return Err(format!(
            "scheme {:?} is not supported (http, https, ssh, git, file)",
            p.scheme()
        ));
    }
    let scp_like = u
        .split_once(':')
        .is_some_and(|(h, p)| h.contains('@') && !p.is_empty());
    if scp_like {
        Ok(())
    } else {
        Err(format!("{u:?} is not a git URL"))
    }
}

fn validate_ref(r: &str) -> Result<(), String> {
    let ok = !r.is_empty()
        && r.len() <= 255
        && !r.starts_with('-')
        && !r.contains("..")
        && r.chars()
            .all(|c| c.is_ascii_graphic() && !"~^:?*[\\".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{r:?} is not a valid git ref"))
    }
}

impl Store {
    /// Validates and stores a project; a stored devfile must parse (checked by the caller).
    pub async fn create_project(
        &self,
        req: &CreateProjectRequest,
        user: UserId,
        now: i64,
    ) -> Result<ProjectRow, HttpError> {
        validate_name(&req.name).map_err(|e| HttpError::invalid_field("name", e))?;
        validate_git_url(&req.git_url).map_err(|e| HttpError::invalid_field("git_url", e))?;
        let default_ref = req.default_ref.clone().unwrap_or_else(|| "main".into());
        validate_ref(&default_ref).map_err(|e| HttpError::invalid_field("default_ref", e))?;
        let devfile_path = req
            .devfile_path
            .clone()
            .unwrap_or_else(|| ".devfile.yaml".into());
        if devfile_path.is_empty()
            || devfile_path.starts_with('/')
            || devfile_path.split('/').any(|c| c == "..")
        {
            return Err(HttpError::invalid_field(
                "devfile_path",
                "must be a relative path inside the repository",
            ));
        }
        let r = sqlx::query(&format!(
            "INSERT INTO projects (name, git_url, default_ref, devfile_path, devfile, created_by, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {COLS}"
        ))
        .bind(&req.name)
        .bind(&req.git_url)
        .bind(default_ref)
        .bind(devfile_path)
        .bind(req.devfile.clone())
        .bind(user.get())
        .bind(now)
        .fetch_one(&self.db.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                HttpError::conflict("already_exists", format!("a project named {:?} already exists", req.name))
            } else {
                e.into()
            }
        })?;
        Ok(row(&r)?)
    }

    pub async fn list_projects(&self) -> Result<Vec<ProjectRow>, sqlx::Error> {
        let rows = sqlx::query(&format!("SELECT {COLS} FROM projects ORDER BY id"))
            .fetch_all(&self.db.pool)
            .await?;
        rows.iter().map(row).collect()
    }

    /// A project by name, or by id when `key` is all digits.
    pub async fn project_by_key(&self, key: &str) -> Result<Option<ProjectRow>, sqlx::Error> {
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
        r.as_ref().map(row).transpose()
    }

    pub async fn delete_project(&self, id: ProjectId) -> Result<bool, sqlx::Error> {
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
